//===- CpuApproximateMath.cpp - Polynomial exp/log/tanh -------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNCPUAPPROXIMATEMATH
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;

namespace {

struct AttnCpuApproximateMath final
    : mlir::attn::impl::AttnCpuApproximateMathBase<AttnCpuApproximateMath> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
