//===- AttnDialect.cpp - The attn dialect ---------------------------------===//

#include "Attn/AttnDialect.h"
#include "Attn/AttnOps.h"

#include "mlir/Transforms/InliningUtils.h"

using namespace mlir;
using namespace mlir::attn;

#include "Attn/AttnOpsDialect.cpp.inc"

namespace {

/// attn ops are values of their operands alone (the in-place ones update
/// only what the entry passes them), so a function of them may be inlined
/// into its callers: attn IR written by hand may put a layer in a private
/// helper that several entries call (attn-optimize inlines it).
struct AttnInlinerInterface : public DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;

  bool isLegalToInline(Operation *, Region *, bool, IRMapping &) const final {
    return true;
  }
  bool isLegalToInline(Region *, Region *, bool, IRMapping &) const final {
    return true;
  }
};

} // namespace

void AttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Attn/AttnOps.cpp.inc"
      >();
  registerAttributes();
  addInterfaces<AttnInlinerInterface>();
}
