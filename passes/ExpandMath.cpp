//===- ExpandMath.cpp - math ops no target lowering takes -----------------===//
//
// Variant regions may hold any math op, and the kernels that inline them are
// lowered by upstream conversions that each take only some: the CPU's
// math-to-LLVM has no vector fpowi, no acosh, isinf or ipowi; CUDA's
// libdevice patterns no clampf or ipowi. Upstream's expansions and the
// patterns below leave only ops both take. The clampf here is a clamp
// (upstream's LLVM 22 definition is not: see ExpandClampF).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNEXPANDMATH
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;

namespace {

/// `value` as a constant of `type`: a scalar or its splat.
Value constantOf(PatternRewriter &rewriter, Location loc, Type type,
                 TypedAttr value) {
  if (auto vector = dyn_cast<VectorType>(type))
    return arith::ConstantOp::create(rewriter, loc,
                                     DenseElementsAttr::get(vector, value));
  return arith::ConstantOp::create(rewriter, loc, value);
}

Value integerOf(PatternRewriter &rewriter, Location loc, Type type, int64_t x) {
  return constantOf(rewriter, loc, type,
                    rewriter.getIntegerAttr(getElementTypeOrSelf(type), x));
}

const llvm::fltSemantics &semanticsOf(Value x) {
  return cast<FloatType>(getElementTypeOrSelf(x)).getFloatSemantics();
}

/// clampf(x, lo, hi) = max(min(x, hi), lo), as CUDA and SPIR-V clamp and as
/// upstream defines it since llvm-project PR 175012: LLVM 22 still defines
/// it, and expands it, as max(min(x, lo), hi), which is hi for every x.
struct ExpandClampF : OpRewritePattern<math::ClampFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::ClampFOp op,
                                PatternRewriter &rewriter) const override {
    Value below = arith::MinimumFOp::create(rewriter, op.getLoc(),
                                            op.getValue(), op.getMax());
    rewriter.replaceOpWithNewOp<arith::MaximumFOp>(op, below, op.getMin());
    return success();
  }
};

/// isinf(x) = |x| == inf.
struct ExpandIsInf : OpRewritePattern<math::IsInfOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::IsInfOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value x = op.getOperand();
    Value magnitude = math::AbsFOp::create(rewriter, loc, x);
    Value inf = createScalarOrSplatConstant(rewriter, loc, x.getType(),
                                            APFloat::getInf(semanticsOf(x)));
    rewriter.replaceOpWithNewOp<arith::CmpFOp>(op, arith::CmpFPredicate::OEQ,
                                               magnitude, inf);
    return success();
  }
};

/// isnormal(x) = smallest normal <= |x| < inf (false for NaN).
struct ExpandIsNormal : OpRewritePattern<math::IsNormalOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::IsNormalOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value x = op.getOperand();
    const llvm::fltSemantics &semantics = semanticsOf(x);
    Value magnitude = math::AbsFOp::create(rewriter, loc, x);
    Value atLeastNormal = arith::CmpFOp::create(
        rewriter, loc, arith::CmpFPredicate::OGE, magnitude,
        createScalarOrSplatConstant(rewriter, loc, x.getType(),
                                    APFloat::getSmallestNormalized(semantics)));
    Value finite = arith::CmpFOp::create(
        rewriter, loc, arith::CmpFPredicate::OLT, magnitude,
        createScalarOrSplatConstant(rewriter, loc, x.getType(),
                                    APFloat::getInf(semantics)));
    rewriter.replaceOpWithNewOp<arith::AndIOp>(op, atLeastNormal, finite);
    return success();
  }
};

/// ipowi(x, n) by squaring over n's bits, unrolled (no loop, so vectors
/// take it lane by lane): x^n wraps as repeated multiplication does. A
/// negative n gives the integer 1 / x^-n: 1 for x = 1, +-1 for x = -1 (by
/// n's parity), 0 otherwise (x = 0 too: no division, no trap).
struct ExpandIPowI : OpRewritePattern<math::IPowIOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::IPowIOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value x = op.getLhs(), n = op.getRhs();
    Type type = x.getType();
    Type element = getElementTypeOrSelf(type);
    // index: the 64 bits it lowers to on both targets.
    unsigned width = element.isIndex() ? 64 : element.getIntOrFloatBitWidth();
    auto constant = [&](int64_t v) {
      return integerOf(rewriter, loc, type, v);
    };
    Value result = constant(1), square = x;
    for (unsigned bit = 0; bit + 1 < width; ++bit) {
      Value set = arith::CmpIOp::create(
          rewriter, loc, arith::CmpIPredicate::ne,
          arith::AndIOp::create(rewriter, loc, n, constant(int64_t(1) << bit)),
          constant(0));
      result = arith::SelectOp::create(
          rewriter, loc, set,
          arith::MulIOp::create(rewriter, loc, result, square), result);
      square = arith::MulIOp::create(rewriter, loc, square, square);
    }
    // n < 0: 1 / x^-n in integers.
    Value odd = arith::CmpIOp::create(
        rewriter, loc, arith::CmpIPredicate::ne,
        arith::AndIOp::create(rewriter, loc, n, constant(1)), constant(0));
    Value minusOnePower =
        arith::SelectOp::create(rewriter, loc, odd, constant(-1), constant(1));
    auto equals = [&](Value v, int64_t c) {
      return arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::eq, v,
                                   constant(c));
    };
    Value reciprocal = arith::SelectOp::create(
        rewriter, loc, equals(x, 1), constant(1),
        arith::SelectOp::create(rewriter, loc, equals(x, -1), minusOnePower,
                                constant(0)));
    Value negative = arith::CmpIOp::create(
        rewriter, loc, arith::CmpIPredicate::slt, n, constant(0));
    rewriter.replaceOpWithNewOp<arith::SelectOp>(op, negative, reciprocal,
                                                 result);
    return success();
  }
};

struct AttnExpandMath final
    : mlir::attn::impl::AttnExpandMathBase<AttnExpandMath> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    math::populateExpansionPatterns(patterns,
                                    {"acosh", "asinh", "atanh", "fpowi"});
    patterns.add<ExpandClampF, ExpandIsInf, ExpandIsNormal, ExpandIPowI>(
        &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
