//===- CpuApproximateMath.cpp - Polynomial exp/exp2/log/tanh --------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNCPUAPPROXIMATEMATH
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;

namespace {

/// math.exp2 on f32, scalar or vector, which upstream's approximations do
/// not take (LLVM would call exp2f a lane at a time): 2^x = 2^n 2^f with
/// n = floor(x) and f = x - n in [0, 1), 2^f a degree-5 polynomial with
/// p(0) = 1 (a minimax fit of relative error 8e-8; 1.5e-7 evaluated in f32
/// with FMAs), 2^n the exponent field n + 127. x is first clamped to
/// [-127, 128]: there the field is 0, so results below 2^-126 (denormals)
/// and exp2(-inf) are exactly 0, and here 255, so 2^128 and above are inf.
/// The clamps are compare-and-select (one max or min on x86) that let NaN
/// through, and a NaN x gives NaN.
struct Exp2Approximation : OpRewritePattern<math::Exp2Op> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::Exp2Op op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32())
      return failure();
    Location loc = op.getLoc();
    auto shaped = dyn_cast<VectorType>(type);
    Type intType = rewriter.getI32Type();
    if (shaped)
      intType = VectorType::get(shaped.getShape(), intType);
    auto constant = [&](double value) {
      return createScalarOrSplatConstant(rewriter, loc, type,
                                         APFloat(static_cast<float>(value)));
    };
    auto intConstant = [&](int64_t value) {
      return createScalarOrSplatConstant(rewriter, loc, intType, value);
    };
    auto clamp = [&](Value x, arith::CmpFPredicate beyond, double bound) {
      Value limit = constant(bound);
      Value out = arith::CmpFOp::create(rewriter, loc, beyond, x, limit);
      return arith::SelectOp::create(rewriter, loc, out, limit, x);
    };
    Value x = clamp(op.getOperand(), arith::CmpFPredicate::OLT, -127.0);
    x = clamp(x, arith::CmpFPredicate::OGT, 128.0);
    Value n = math::FloorOp::create(rewriter, loc, x);
    Value f = arith::SubFOp::create(rewriter, loc, x, n);
    static constexpr double kCoefficients[] = {1.867130050e-03, 9.017030708e-03,
                                               5.579991266e-02, 2.401644439e-01,
                                               6.931512952e-01, 1.0};
    Value p = constant(kCoefficients[0]);
    for (double c : ArrayRef(kCoefficients).drop_front())
      p = math::FmaOp::create(rewriter, loc, p, f, constant(c));
    // n's integer without fptosi (poison for NaN): n + 1.5 * 2^23 holds
    // 0x4b400000 + n in its bits.
    Value shifted = arith::AddFOp::create(rewriter, loc, n, constant(0x1.8p23));
    Value field = arith::SubIOp::create(
        rewriter, loc,
        arith::BitcastOp::create(rewriter, loc, intType, shifted),
        intConstant(0x4b400000 - 127));
    Value powerOfTwo = arith::BitcastOp::create(
        rewriter, loc, type,
        arith::ShLIOp::create(rewriter, loc, field, intConstant(23)));
    rewriter.replaceOpWithNewOp<arith::MulFOp>(op, p, powerOfTwo);
    return success();
  }
};

struct AttnCpuApproximateMath final
    : mlir::attn::impl::AttnCpuApproximateMathBase<AttnCpuApproximateMath> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns);
    patterns.add<Exp2Approximation>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
