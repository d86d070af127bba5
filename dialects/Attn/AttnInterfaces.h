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

namespace mlir::attn {

/// The tensors that the variant regions of `op` (score_mod, mask_mod) read
/// with `tensor.extract`, each once, in the order the regions first read
/// them. Kernels take them as extra bindings.
SmallVector<Value> getVariantTensors(AttentionOpInterface op);

} // namespace mlir::attn

#endif // ATTN_DIALECT_ATTN_ATTNINTERFACES_H
