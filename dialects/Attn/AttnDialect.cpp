//===- AttnDialect.cpp - The attn dialect ---------------------------------===//

#include "Attn/AttnDialect.h"
#include "Attn/AttnOps.h"

using namespace mlir;
using namespace mlir::attn;

#include "Attn/AttnOpsDialect.cpp.inc"

void AttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Attn/AttnOps.cpp.inc"
      >();
  registerAttributes();
}
