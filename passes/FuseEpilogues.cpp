//===- FuseEpilogues.cpp - Fold output gates into attention ---------------===//
//
// Works on the interfaces only: any EpilogueOpInterface op whose input comes
// from any AttentionOpInterface op that accepts it. A new gate or a new
// attention variant joins by implementing its interface.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "Attn/AttnOps.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNFUSEEPILOGUES
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

/// Whether `value` is available right before `op`.
bool isAvailableBefore(Value value, Operation *op) {
  if (auto arg = llvm::dyn_cast<BlockArgument>(value))
    return arg.getOwner()->getParentOp()->isAncestor(op);
  Operation *def = value.getDefiningOp();
  return def->getBlock() == op->getBlock() && def->isBeforeInBlock(op);
}

struct FuseEpilogueIntoAttention final
    : OpInterfaceRewritePattern<EpilogueOpInterface> {
  using OpInterfaceRewritePattern::OpInterfaceRewritePattern;

  LogicalResult matchAndRewrite(EpilogueOpInterface epilogue,
                                PatternRewriter &rewriter) const override {
    Value input = epilogue.getEpilogueInput();
    auto attention = input.getDefiningOp<AttentionOpInterface>();
    if (!attention || attention.getOutput() != input)
      return rewriter.notifyMatchFailure(epilogue,
                                         "input is not an attention output");
    if (!input.hasOneUse())
      return rewriter.notifyMatchFailure(
          epilogue, "the un-transformed output has other users");

    // Build the fused op where the epilogue's parameters exist and every
    // user of the attention's other results (lse, final state) still sees
    // it: at the attention if the parameters are already available there,
    // else at the epilogue if no other user comes before it.
    Operation *producer = attention.getOperation();
    Operation *insertionPoint = producer;
    for (Value parameter : epilogue.getEpilogueParameters())
      if (!isAvailableBefore(parameter, producer))
        insertionPoint = epilogue.getOperation();
    if (insertionPoint != producer)
      for (Value result : producer->getResults())
        for (Operation *user : result.getUsers())
          if (user != epilogue.getOperation() &&
              !(user->getBlock() == insertionPoint->getBlock() &&
                insertionPoint->isBeforeInBlock(user)))
            return rewriter.notifyMatchFailure(
                epilogue, "a result of the attention is used before the "
                          "epilogue's parameters exist");

    rewriter.setInsertionPoint(insertionPoint);
    FailureOr<Operation *> fused = attention.fuseEpilogue(rewriter, epilogue);
    if (failed(fused))
      return rewriter.notifyMatchFailure(
          epilogue, "the attention does not accept this epilogue");

    rewriter.replaceOp(epilogue, (*fused)->getResult(0));
    for (auto [old, replacement] :
         llvm::zip_equal(producer->getResults().drop_front(),
                         (*fused)->getResults().drop_front()))
      rewriter.replaceAllUsesWith(old, replacement);
    rewriter.eraseOp(producer);
    return success();
  }
};

struct AttnFuseEpiloguesPass final
    : mlir::attn::impl::AttnFuseEpiloguesBase<AttnFuseEpiloguesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseEpiloguePatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::attn::populateFuseEpiloguePatterns(RewritePatternSet &patterns) {
  patterns.add<FuseEpilogueIntoAttention>(patterns.getContext());
}
