//===- Pipelines.h - attn compilation pipelines -----------------*- C++ -*-===//
//
// The pipelines attnc runs, as libraries so attn-opt and lit can run the
// same thing by name (`attn-opt --pass-pipeline='builtin.module(attn-...)'`
// or `attn-opt -attn-...`).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_PIPELINES_H
#define ATTN_COMPILER_PIPELINES_H

#include "mlir/Pass/PassManager.h"

namespace mlir::attn {

/// Attention-level optimization on attn IR: canonicalize, fold output gates
/// into the attention epilogues, canonicalize again.
void buildAttnOptimizationPipeline(OpPassManager &pm);

/// Registers the pipelines above: `attn-optimize`.
void registerAttnPipelines();

} // namespace mlir::attn

#endif // ATTN_COMPILER_PIPELINES_H
