//===- Pipelines.cpp - attn compilation pipelines -------------------------===//

#include "compiler/Pipelines.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void mlir::attn::buildAttnOptimizationPipeline(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createAttnFuseEpilogues());
  pm.addPass(createCanonicalizerPass());
}

void mlir::attn::registerAttnPipelines() {
  PassPipelineRegistration<>(
      "attn-optimize",
      "Attention-level optimization: canonicalize and fuse epilogues",
      [](OpPassManager &pm) { buildAttnOptimizationPipeline(pm); });
}
