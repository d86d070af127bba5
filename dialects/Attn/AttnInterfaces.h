//===- AttnInterfaces.h - Attention op interface ----------------*- C++ -*-===//
//
// AttentionOpInterface: what tiling and fusion passes know of an
// attention-like op.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_DIALECT_ATTN_ATTNINTERFACES_H
#define ATTN_DIALECT_ATTN_ATTNINTERFACES_H

#include "Attn/AttnDialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::attn {
class EpilogueOpInterface;
} // namespace mlir::attn

#include "Attn/AttnInterfaces.h.inc"

#endif // ATTN_DIALECT_ATTN_ATTNINTERFACES_H
