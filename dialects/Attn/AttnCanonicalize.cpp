//===- AttnCanonicalize.cpp - Canonicalization patterns of attn ops -------===//
//
// - an lse result nobody reads is not computed;
// - a sliding window that covers every key is a causal mask;
// - a sparse attention whose selection provably keeps every candidate
//   (top_k >= #blocks, or exact top_p = 1 without a token cap) is the dense
//   attention it restricts (SPEC §1.3's invariant).
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

/// Moves the variant regions (score_mod, mask_mod) of `from` into the empty
/// ones of `to`, a softmax-attention op replacing it.
void moveVariantRegions(RewriterBase &rewriter, Operation *from,
                        Operation *to) {
  for (auto [source, target] :
       llvm::zip_equal(from->getRegions(), to->getRegions()))
    rewriter.inlineRegionBefore(source, target, target.end());
}

/// Recreates a softmax-attention op without its unused `lse` result.
template <typename OpTy>
struct DropUnusedLogSumExp final : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;

  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    Value lse = op.getLse();
    if (!lse)
      return rewriter.notifyMatchFailure(op, "no lse result");
    if (!lse.use_empty())
      return rewriter.notifyMatchFailure(op, "lse result is used");
    StringAttr returnLse = op.getReturnLseAttrName();
    SmallVector<NamedAttribute> attrs;
    for (NamedAttribute attr : op->getAttrs())
      if (attr.getName() != returnLse)
        attrs.push_back(attr);
    OperationState state(op.getLoc(), op->getName(), op->getOperands(),
                         TypeRange{op.getOutput().getType()}, attrs);
    for (unsigned i = 0; i < op->getNumRegions(); ++i)
      state.addRegion();
    Operation *replacement = rewriter.create(state);
    moveVariantRegions(rewriter, op, replacement);
    rewriter.replaceAllUsesWith(op.getOutput(), replacement->getResult(0));
    rewriter.eraseOp(op);
    return success();
  }
};

/// Whether `op`'s queries and keys are [B, H, L, D], so that dim 2 of
/// their types is the sequence length: not over a paged cache, whose keys
/// are [NP, P, Hkv, D], nor in a ragged batch, whose packed rows are
/// [T, H, D] (dim 2 the head dim) and whose lengths are per sequence.
static bool lengthsAreDim2(Operation *op) {
  auto attention = cast<AttentionOpInterface>(op);
  return !attention.getKeyPageTable() && !attention.getSequenceOffsets() &&
         !attention.getKeyOffsets();
}

/// A sliding window of W >= Lk keys hides nothing that causal does not:
/// p - W < 0 <= j for every row position p < Lk. Only rewritten when
/// Lq <= Lk is known, since a causal mask requires it.
template <typename OpTy>
struct WindowCoveringKeysIsCausal final : OpRewritePattern<OpTy> {
  using OpRewritePattern<OpTy>::OpRewritePattern;

  LogicalResult matchAndRewrite(OpTy op,
                                PatternRewriter &rewriter) const override {
    MaskAttr mask = op.getMask();
    if (!mask.isSlidingWindow())
      return rewriter.notifyMatchFailure(op, "not a sliding window");
    if (!lengthsAreDim2(op))
      return rewriter.notifyMatchFailure(op, "paged or ragged lengths");
    auto queryType = op.getQuery().getType();
    auto keyType = op.getKey().getType();
    if (queryType.isDynamicDim(2) || keyType.isDynamicDim(2))
      return rewriter.notifyMatchFailure(op, "dynamic sequence lengths");
    int64_t queryLength = queryType.getDimSize(2);
    int64_t keyLength = keyType.getDimSize(2);
    if (mask.getWindow() < keyLength || queryLength > keyLength)
      return rewriter.notifyMatchFailure(op, "window hides keys");
    rewriter.modifyOpInPlace(op, [&] {
      op.setMaskAttr(MaskAttr::get(op.getContext(), MaskKind::Causal, 0));
    });
    return success();
  }
};

/// Whether `length` is the run-time length (dim 2) of `key`.
static bool isKeyLengthOf(Value length, Value key) {
  if (auto dim = length.getDefiningOp<tensor::DimOp>()) {
    std::optional<int64_t> index = dim.getConstantIndex();
    return dim.getSource() == key && index && *index == 2;
  }
  APInt constant;
  auto keyType = llvm::cast<RankedTensorType>(key.getType());
  return matchPattern(length, m_ConstantInt(&constant)) &&
         !keyType.isDynamicDim(2) &&
         constant.getSExtValue() == keyType.getDimSize(2);
}

/// Replaces `op` (a sparse_sdpa) by a dense sdpa over the same operands
/// (and paged cache).
static void replaceWithDense(SparseSdpaOp op, PatternRewriter &rewriter) {
  auto dense = SdpaOp::create(
      rewriter, op.getLoc(), op.getQuery(), op.getKey(), op.getValue(),
      op.getGate(), op.getSinks(), op.getPageTable(), op.getSeqLens(),
      op.getCuSeqlensQ(), Value(), op.getMask(), op.getScaleAttr(),
      op.getSoftcapAttr(), op.getReturnLseAttr());
  moveVariantRegions(rewriter, op, dense);
  rewriter.replaceOp(op, dense->getResults());
}

/// sparse_sdpa over select_topk that keeps every block is dense attention.
struct ExhaustiveTopKIsDense final : OpRewritePattern<SparseSdpaOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SparseSdpaOp op,
                                PatternRewriter &rewriter) const override {
    auto select = op.getSelection().getDefiningOp<SelectTopKOp>();
    if (!select)
      return rewriter.notifyMatchFailure(op, "selection is not top-k");
    if (select.getMask() != op.getMask() ||
        select.getBlockSize() != op.getBlockSize())
      return rewriter.notifyMatchFailure(op, "mask or block size differ");
    // Over a paged cache or in a ragged batch each sequence has its own
    // blocks, known at run time.
    if (!lengthsAreDim2(op) || !select.getKeyLength() ||
        !isKeyLengthOf(select.getKeyLength(), op.getKey()))
      return rewriter.notifyMatchFailure(op, "selection ranks another Lk");
    auto keyType = op.getKey().getType();
    auto metaType = select.getMeta().getType();
    if (keyType.isDynamicDim(2))
      return rewriter.notifyMatchFailure(op, "dynamic key length");
    int64_t numBlocks =
        llvm::divideCeil(keyType.getDimSize(2), op.getBlockSize());
    if (metaType.getDimSize(2) != numBlocks)
      return rewriter.notifyMatchFailure(op, "metadata misses key blocks");
    if (static_cast<int64_t>(select.getTopK()) < numBlocks)
      return rewriter.notifyMatchFailure(op, "top_k may drop blocks");
    replaceWithDense(op, rewriter);
    return success();
  }
};

/// sparse_sdpa over a select_topp with top_p = 1 and no token cap keeps
/// every candidate token, whatever estimates the weights: it is attention
/// over the candidates, i.e. over the top-k blocks when given, else dense
/// attention.
struct FullTopPIsCandidates final : OpRewritePattern<SparseSdpaOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SparseSdpaOp op,
                                PatternRewriter &rewriter) const override {
    auto select = op.getSelection().getDefiningOp<SelectTopPOp>();
    if (!select)
      return rewriter.notifyMatchFailure(op, "selection is not top-p");
    if (select.getTopP().convertToDouble() != 1.0)
      return rewriter.notifyMatchFailure(op, "top_p selection may drop keys");
    if (op.getBlockSize() != 1 || select.getMask() != op.getMask() ||
        select.getQuery() != op.getQuery() || select.getKey() != op.getKey() ||
        select.getScaleAttr() != op.getScaleAttr() ||
        select.getSoftcapAttr() != op.getSoftcapAttr() ||
        select.getPageTable() != op.getPageTable() ||
        select.getSeqLens() != op.getSeqLens() ||
        select.getCuSeqlensQ() != op.getCuSeqlensQ())
      return rewriter.notifyMatchFailure(op, "selection scores other keys");
    if (std::optional<uint64_t> maxTokens = select.getMaxTokens()) {
      auto keyType = op.getKey().getType();
      if (!lengthsAreDim2(op) || keyType.isDynamicDim(2) ||
          static_cast<int64_t>(*maxTokens) < keyType.getDimSize(2))
        return rewriter.notifyMatchFailure(op, "max_tokens may drop keys");
    }
    Value blocks = select.getBlocks();
    if (!blocks) {
      replaceWithDense(op, rewriter);
      return success();
    }
    auto overBlocks = SparseSdpaOp::create(
        rewriter, op.getLoc(), op.getQuery(), op.getKey(), op.getValue(),
        blocks, op.getGate(), op.getSinks(), op.getPageTable(), op.getSeqLens(),
        op.getCuSeqlensQ(), rewriter.getI64IntegerAttr(*select.getBlockSize()),
        op.getMask(), op.getScaleAttr(), op.getSoftcapAttr(),
        op.getReturnLseAttr());
    moveVariantRegions(rewriter, op, overBlocks);
    rewriter.replaceOp(op, overBlocks->getResults());
    return success();
  }
};

} // namespace

void SdpaOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                         MLIRContext *context) {
  results.add<DropUnusedLogSumExp<SdpaOp>, WindowCoveringKeysIsCausal<SdpaOp>>(
      context);
}

void SparseSdpaOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                               MLIRContext *context) {
  results.add<DropUnusedLogSumExp<SparseSdpaOp>,
              WindowCoveringKeysIsCausal<SparseSdpaOp>, ExhaustiveTopKIsDense,
              FullTopPIsCandidates>(context);
}

void TreeSdpaOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                             MLIRContext *context) {
  results.add<DropUnusedLogSumExp<TreeSdpaOp>>(context);
}
