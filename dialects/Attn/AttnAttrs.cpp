//===- AttnAttrs.cpp - Attributes of the attn dialect ---------------------===//

#include "Attn/AttnDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::attn;

#include "Attn/AttnEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "Attn/AttnAttrs.cpp.inc"

void AttnDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "Attn/AttnAttrs.cpp.inc"
      >();
}

LogicalResult MaskAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               MaskKind kind, int64_t window) {
  if (kind == MaskKind::SlidingWindow && window <= 0)
    return emitError() << "sliding_window mask needs a window > 0, got "
                       << window;
  if (kind == MaskKind::Chunked && window <= 0)
    return emitError() << "chunked mask needs a chunk size > 0, got " << window;
  if (kind != MaskKind::SlidingWindow && kind != MaskKind::Chunked &&
      window != 0)
    return emitError() << "a '" << stringifyMaskKind(kind)
                       << "' mask takes no window, got window = " << window;
  return success();
}

bool MaskAttr::isVisible(int64_t queryPos, int64_t keyPos) const {
  switch (getKind()) {
  case MaskKind::None:
    return true;
  case MaskKind::Causal:
    return keyPos <= queryPos;
  case MaskKind::SlidingWindow:
    return keyPos <= queryPos && keyPos > queryPos - getWindow();
  case MaskKind::Chunked:
    return keyPos <= queryPos && keyPos / getWindow() == queryPos / getWindow();
  }
  llvm_unreachable("unknown mask kind");
}
