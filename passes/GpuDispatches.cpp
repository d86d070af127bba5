//===- GpuDispatches.cpp - Entries to host programs + CUDA kernels --------===//
//
// The CUDA half of entry lowering (EntryLowering.h builds the host
// function), with the kernels of SimtKernels.h. Softmax attention runs
// the flash block kernel, a block per (batch, head, query tile); decode
// calls (few query rows) split the keys over blocks, the last block of a
// tile's splits merging their partials (sparse decode, trees and ragged
// batches: a merge thread kernel, a thread kernel's workgroup count being
// its thread count).
// Linear recurrences run a chunked block kernel, one block per (batch,
// value head, column tile): the chunk's products on warp_mma where its
// tiles fit and a call has more than a step per sequence, else a state
// column per thread; then (with the rmsnorm-silu gate) a block per 16
// output rows.
//
//===----------------------------------------------------------------------===//

#include "passes/EntryLowering.h"
#include "passes/Passes.h"
#include "passes/kernels/KeySelection.h"
#include "passes/kernels/cuda/SimtKernels.h"
#include "runtime/HostProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNGPUDISPATCHES
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

class GpuEntryLowering : public EntryLowering {
public:
  GpuEntryLowering(func::FuncOp entry, const GpuTiling &tiling)
      : EntryLowering(entry, "CUDA"), tiling(tiling) {}

private:
  LogicalResult lowerSoftmax(ImplicitLocOpBuilder &b,
                             AttentionOpInterface op) override;
  LogicalResult lowerRecurrence(ImplicitLocOpBuilder &b,
                                AttentionOpInterface op) override;
  void dispatchOp(ImplicitLocOpBuilder &b, Operation *op,
                  ValueRange bindings) override;
  /// Sparse and tree attention: split + merge like decode.
  void lowerGatheredSoftmax(ImplicitLocOpBuilder &b, AttentionOpInterface op,
                            const SoftmaxAttentionShape &shape);
  /// A ragged batch: the plan kernel, then the flash block kernel over its
  /// flash entries, decode's over its split entries, and the merge.
  void lowerRaggedSoftmax(ImplicitLocOpBuilder &b, AttentionOpInterface op,
                          const SoftmaxAttentionShape &shape,
                          SoftmaxBuffers &s);

  DictionaryAttr scalarTiling(MLIRContext *context) const override {
    return tiling.toAttr(context);
  }
  /// A block plans the batch, a share of the sequences per thread: one
  /// thread walking every sequence waits on each one's offsets in turn.
  func::FuncOp buildRaggedPlan(OpBuilder &builder, Location loc, StringRef name,
                               const SoftmaxAttentionShape &shape,
                               const RaggedPlan &plan,
                               TypeRange bindingTypes) override {
    return buildSimtRaggedPlanKernel(builder, loc, name, shape, plan,
                                     tiling.toAttr(builder.getContext()),
                                     tiling.blockThreads, bindingTypes);
  }
  const GpuTiling &tiling;
};

/// How many splits decode work over keys takes: at least `least` (a split
/// per split_keys keys' worth) and at least one, even without keys (its
/// merge writes the rows that see no key), and more, up to `most` (a key
/// tile's worth each), while `unsplitBlocks` blocks per split would leave
/// the GPU's workers (attn.worker_count: 4 blocks per multiprocessor) idle:
/// a short cache read by few rows or kv heads otherwise leaves most
/// multiprocessors idle (FlashDecoding).
static Value splitsFillingWorkers(ImplicitLocOpBuilder &b,
                                  const HostIndexMath &m, Value least,
                                  Value unsplitBlocks, Value most) {
  Value filling = m.minS(
      m.ceilDiv(WorkerCountOp::create(b, b.getIndexType()),
                m.maxS(unsplitBlocks, m.index(1))),
      most);
  return m.maxS(m.maxS(least, m.index(1)), filling);
}

void GpuEntryLowering::lowerGatheredSoftmax(
    ImplicitLocOpBuilder &b, AttentionOpInterface op,
    const SoftmaxAttentionShape &shape) {
  HostIndexMath m{b};
  SoftmaxBuffers s =
      bindSoftmax(b, op, shape.epilogue == Epilogue::SigmoidGate);
  bool tree = shape.selection == KeySelectionKind::Tree;
  // The query rows: [B, H, Lq], or a ragged batch's packed [T, H].
  Value rows = shape.ragged
                   ? m.mul(s.lq, m.index(shape.numHeads))
                   : m.mul(m.mul(s.batch, m.index(shape.numHeads)), s.lq);
  Value zero = m.index(0);
  Type storage = cast<MemRefType>(s.q.getType()).getElementType();
  // The gathered kernels' bindings, once the partials are allocated.
  auto gatheredBindings = [&]() -> SmallVector<Value> {
    SmallVector<Value> bindings = s.keyBindings();
    bindings.append({s.selection, s.partialOut, s.partialLse});
    return s.withVariantTensors(std::move(bindings));
  };
  if (tree) {
    // The prefix, which every node sees (from its window's start), is dense
    // attention for a flash kernel, into the first S - 1 splits; a thread
    // per node walks its tree keys into split S - 1. Trees of more than
    // decode_max_queries nodes: query tiles of nodes, one prefix split.
    // Smaller ones: decode's kernel, the kv group's heads times the nodes
    // as rows, the prefix in splits of split_keys keys (at least one).
    // The most prefix keys a sequence may have (0 for an empty batch over
    // a cache or packed keys smaller than one tree).
    Value prefix = m.maxS(m.sub(s.lk, s.lq), zero);
    Value many = arith::CmpIOp::create(b, arith::CmpIPredicate::ugt, s.lq,
                                       m.index(tiling.decodeMaxQueries));
    Value prefixSplits = m.select(
        many, m.index(1),
        m.maxS(m.index(1), m.ceilDiv(prefix, m.index(tiling.splitKeys))));
    Value splits = arith::AddIOp::create(b, prefixSplits, m.index(1));
    allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, s.batch, s.lq,
                          splits);
    // With a window or variant regions, a node's first prefix key or its
    // position depends on its depth: the flash kernels also read the
    // parents.
    SmallVector<Value> prefixBindings = s.splitBindings();
    if (shape.treePrefixNeedsDepths())
      prefixBindings.insert(prefixBindings.begin() + s.keyBindings().size(),
                            s.selection);

    SimtFlashTiling flash = SimtFlashTiling::choose(
        shape, storage, tiling, /*maxWarps=*/4, tiling.flashRowTiles);
    Value queryTiles = m.ceilDiv(s.lq, m.index(flash.queryTile()));
    std::string prefixName = kernelName("tree_prefix");
    dispatchKernel(
        b,
        m.select(many,
                 m.mul(m.mul(s.batch, m.index(shape.numHeads)), queryTiles),
                 zero),
        prefixBindings, [&](OpBuilder &builder, TypeRange types) {
          return buildSimtFlashKernel(builder, op.getLoc(), prefixName, shape,
                                      flash, tiling, types,
                                      KeyPart::TreePrefix);
        });

    SimtFlashTiling decodeFlash =
        SimtFlashTiling::chooseForDecode(shape, storage, tiling);
    const int64_t group = shape.numHeads / shape.numKvHeads;
    Value rowTiles = m.ceilDiv(m.mul(m.index(group), s.lq),
                               m.index(decodeFlash.queryTile()));
    Value decodeBlocks =
        m.mul(m.mul(m.mul(s.batch, m.index(shape.numKvHeads)), rowTiles),
              prefixSplits);
    std::string smallPrefixName = kernelName("small_tree_prefix");
    dispatchKernel(b, m.select(many, zero, decodeBlocks), prefixBindings,
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtFlashDecodeKernel(
                         builder, op.getLoc(), smallPrefixName, shape,
                         decodeFlash, tiling, types, KeyPart::TreePrefix);
                   });

    std::string nodesName = kernelName("tree_nodes");
    dispatchKernel(
        b, rows, gatheredBindings(), [&](OpBuilder &builder, TypeRange types) {
          return buildSimtGatheredSplitKernel(builder, op.getLoc(), nodesName,
                                              shape, tiling, types,
                                              KeyPart::TreeNodes);
        });
  } else if (shape.ragged) {
    // A ragged batch mixes decode and prefill rows: a thread per (token,
    // head, split), the splits sharing the row's selection entries,
    // split_keys keys' worth each; partials [T, H, S, (Dv)].
    int64_t perSplit =
        std::max<int64_t>(1, tiling.splitKeys / shape.selectionBlockSize);
    Value entries = memref::DimOp::create(b, s.selection, 2);
    Value splits = m.maxS(m.index(1), m.ceilDiv(entries, m.index(perSplit)));
    int64_t dynamic = ShapedType::kDynamic;
    s.partialOut = memref::AllocOp::create(
        b,
        MemRefType::get({dynamic, shape.numHeads, dynamic, shape.valueDim},
                        b.getF32Type()),
        ValueRange{s.lq, splits});
    s.partialLse = memref::AllocOp::create(
        b, MemRefType::get({dynamic, shape.numHeads, dynamic}, b.getF32Type()),
        ValueRange{s.lq, splits});
    std::string splitName = kernelName("sparse_split");
    dispatchKernel(b, m.mul(rows, splits), gatheredBindings(),
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtGatheredSplitKernel(
                         builder, op.getLoc(), splitName, shape, tiling, types);
                   });
  } else {
    // Decode calls split the selection entries, at most split_keys keys'
    // worth each and fewer (down to a key tile's worth) while the rows'
    // splits would not fill the GPU, and run a split per block of decode's
    // flash kernel: it gathers the split's blocks and stages their keys in
    // shared memory by coalesced loads. Longer calls have enough rows to
    // fill the GPU with a thread per row. The other path gets zero
    // workgroups.
    Value entries = memref::DimOp::create(b, s.selection, 3);
    int64_t perSplit =
        std::max<int64_t>(1, tiling.splitKeys / shape.selectionBlockSize);
    SimtFlashTiling flash =
        SimtFlashTiling::choose(shape, storage, tiling, /*maxWarps=*/1);
    int64_t perTile =
        std::max<int64_t>(1, flash.keyTile / shape.selectionBlockSize);
    Value decode = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, s.lq,
                                         m.index(tiling.decodeMaxQueries));
    Value splits = m.select(
        decode,
        splitsFillingWorkers(b, m, m.ceilDiv(entries, m.index(perSplit)), rows,
                             m.ceilDiv(entries, m.index(perTile))),
        m.index(1));
    allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, s.batch, s.lq,
                          splits);
    Value work = m.mul(rows, splits);
    std::string flashName = kernelName("sparse_decode");
    dispatchKernel(b, m.select(decode, work, zero), gatheredBindings(),
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtFlashDecodeKernel(builder, op.getLoc(),
                                                       flashName, shape, flash,
                                                       tiling, types);
                   });
    std::string splitName = kernelName("sparse_split");
    dispatchKernel(b, m.select(decode, zero, work), gatheredBindings(),
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtGatheredSplitKernel(
                         builder, op.getLoc(), splitName, shape, tiling, types);
                   });
  }
  std::string mergeName = kernelName("merge");
  dispatchKernel(b, m.mul(rows, m.index(shape.valueDim)), s.mergeBindings(),
                 [&](OpBuilder &builder, TypeRange types) {
                   return buildSimtMergeKernel(builder, op.getLoc(), mergeName,
                                               shape, tiling, types);
                 });
}

/// The values of `parts`, in order.
static SmallVector<Value> concat(ValueRange first, ValueRange second,
                                 ValueRange third = {}) {
  SmallVector<Value> all(first);
  llvm::append_range(all, second);
  llvm::append_range(all, third);
  return all;
}

void GpuEntryLowering::dispatchOp(ImplicitLocOpBuilder &b, Operation *op,
                                  ValueRange bindings) {
  HostIndexMath m{b};
  Location loc = op->getLoc();
  // The op's first kernel is named after it (top-p's after its first
  // step).
  std::string name =
      kernelName(isa<SelectTopPOp>(op) ? StringRef("topp_candidates")
                                       : op->getName().stripDialect());
  SmallVector<Value> all(bindings);
  // A [B, H, Lq, n] temporary per row of q (bindings[0]), or [T, H, n]
  // for a ragged batch's packed rows.
  auto rowTemporary = [&](Type element, int64_t staticLast, Value last) {
    Value q = bindings[0];
    const bool packed = cast<MemRefType>(q.getType()).getRank() == 3;
    SmallVector<int64_t> shape{ShapedType::kDynamic, m.staticDim(q, 1)};
    SmallVector<Value> sizes{m.dim(q, 0)};
    if (!packed) {
      shape.push_back(ShapedType::kDynamic);
      sizes.push_back(m.dim(q, 2));
    }
    shape.push_back(staticLast);
    if (last)
      sizes.push_back(last);
    all.push_back(
        memref::AllocOp::create(b, MemRefType::get(shape, element), sizes));
  };

  if (auto meta = dyn_cast<BlockMetaOp>(op); meta && meta.getPageTable()) {
    // Bindings k_cache, used slots, kmeta_pages: a thread per (page, kv
    // head, channel).
    Value cache = bindings[0];
    Value threads =
        m.mul(m.mul(m.dim(cache, 0), m.index(m.staticDim(cache, 2))),
              m.index(m.staticDim(cache, 3)));
    return dispatchKernel(
        b, threads, bindings, [&](OpBuilder &builder, TypeRange types) {
          return buildSimtBlockMetaKernel(builder, loc, name,
                                          MetaLayout::of(meta), tiling, types);
        });
  }
  if (auto update = dyn_cast<PageMetaUpdateOp>(op)) {
    // Bindings k_cache, slots, fill, leader, kmeta_pages: a thread per new
    // token resets its page's fill and leader, then (the next dispatch,
    // once every reset is done) combines its offset and index into them by
    // atomics, then a thread per (new token, kv head, channel), idle
    // unless the token leads its page.
    Value cache = bindings[0];
    for (bool combine : {false, true}) {
      std::string stepName =
          kernelName(combine ? "appended_pages" : "appended_pages_reset");
      dispatchKernel(b, m.dim(bindings[1], 0), bindings.take_front(4),
                     [&](OpBuilder &builder, TypeRange types) {
                       return buildSimtAppendedPagesKernel(
                           builder, loc, stepName, combine, tiling, types);
                     });
    }
    Value threads =
        m.mul(m.mul(m.dim(bindings[1], 0), m.index(m.staticDim(cache, 2))),
              m.index(m.staticDim(cache, 3)));
    return dispatchKernel(
        b, threads, bindings, [&](OpBuilder &builder, TypeRange types) {
          return buildSimtBlockMetaKernel(
              builder, loc, name, MetaLayout::of(update), tiling, types);
        });
  }
  if (auto meta = dyn_cast<BlockMetaOp>(op)) {
    Value out = bindings[1];
    Value threads =
        m.mul(m.mul(m.mul(m.dim(out, 0), m.index(m.staticDim(out, 1))),
                    m.dim(out, 2)),
              m.index(m.staticDim(out, 4)));
    return dispatchKernel(
        b, threads, all, [&](OpBuilder &builder, TypeRange types) {
          return buildSimtBlockMetaKernel(builder, loc, name,
                                          MetaLayout::of(meta), tiling, types);
        });
  }
  if (isa<SelectTopKOp, SelectTopPOp>(op)) {
    // The query rows: [B, H, Lq], or a ragged batch's packed [T, H].
    Value q = bindings[0];
    const bool ragged = cast<MemRefType>(q.getType()).getRank() == 3;
    Value rows = m.mul(m.dim(q, 0), m.index(m.staticDim(q, 1)));
    if (!ragged)
      rows = m.mul(rows, m.dim(q, 2));
    if (auto select = dyn_cast<SelectTopKOp>(op)) {
      int64_t fill =
          select.getTopK() - select.getSinkBlocks() - select.getLocalBlocks();
      // Bindings q, meta, keys (the key length's carrier, or over a paged
      // cache the page table and key lengths), [a ragged batch's query
      // offsets], blocks. A row has at most NB blocks: the metadata's, or
      // the table's MP.
      const bool paged = static_cast<bool>(select.getPageTable());
      Value meta = bindings[1];
      SmallVector<Value> keys(bindings.begin() + 2,
                              bindings.begin() + (paged ? 4 : 3));
      Value numBlocks = paged ? m.dim(keys[0], 1) : m.dim(meta, 2);
      // The heap of a row's `fill` best middle blocks, used only when the
      // row has more candidates than top_k: never more than its blocks.
      rowTemporary(
          b.getF32Type(), ShapedType::kDynamic,
          m.maxS(m.minS(m.index(std::max<int64_t>(fill, 1)), numBlocks),
                 m.index(1)));
      // A ragged batch's rows, decode and prefill mixed, each take a thread
      // that scores its blocks and selects.
      if (ragged)
        return dispatchKernel(b, rows, all,
                              [&](OpBuilder &builder, TypeRange types) {
                                return buildSimtSelectTopKKernel(
                                    builder, loc, name, select, tiling, types);
                              });
      // Prefill: a thread per row scores its blocks and selects. Decode has
      // too few rows for that to fill a GPU (a thread per head, each
      // reading all the metadata): a thread per (row, block) computes the
      // bounds into a [B, H, Lq, NB] temporary first; then, for up to
      // rankedTopKCapacity blocks, a block per row sorts them in shared
      // memory and writes the kept ones, else a thread per row selects
      // through its heap. The other paths get zero threads.
      Value decode =
          arith::CmpIOp::create(b, arith::CmpIPredicate::ule, m.dim(q, 2),
                                m.index(tiling.decodeMaxQueries));
      Value zero = m.index(0);
      Value rankable =
          arith::CmpIOp::create(b, arith::CmpIPredicate::ule, numBlocks,
                                m.index(rankedTopKCapacity(tiling)));
      // Threads of decode's ranked path, and of its heap path.
      auto ranked = [&](Value threads) {
        return m.select(decode, m.select(rankable, threads, zero), zero);
      };
      auto heapDecode = [&](Value threads) {
        return m.select(decode, m.select(rankable, zero, threads), zero);
      };
      Value boundsRows = m.select(decode, m.dim(q, 2), zero);
      Value bounds = memref::AllocOp::create(
          b,
          MemRefType::get({ShapedType::kDynamic, m.staticDim(q, 1),
                           ShapedType::kDynamic, ShapedType::kDynamic},
                          b.getF32Type()),
          ValueRange{m.dim(q, 0), boundsRows, numBlocks});
      dispatchKernel(b, m.select(decode, zero, rows), all,
                     [&](OpBuilder &builder, TypeRange types) {
                       return buildSimtSelectTopKKernel(builder, loc, name,
                                                        select, tiling, types);
                     });
      // A block per (batch, kv head, tile of blocks) over the kv group's
      // decode rows; none in prefill.
      std::string boundsName = kernelName("block_bounds");
      Value boundsTiles = m.ceilDiv(
          numBlocks,
          m.index(boundsTileBlocks(m.staticDim(q, 3), tiling)));
      Value kvHeads = m.index(
          m.staticDim(meta, SelectionKeys::metaHeadDim(paged)));
      dispatchKernel(b,
                     m.select(decode,
                              m.mul(m.mul(m.dim(q, 0), kvHeads), boundsTiles),
                              zero),
                     concat(ValueRange{q, meta}, keys, ValueRange{bounds}),
                     [&](OpBuilder &builder, TypeRange types) {
                       return buildSimtBlockBoundsKernel(
                           builder, loc, boundsName, select, tiling, types);
                     });
      SmallVector<Value> withBounds(all);
      withBounds.push_back(bounds);
      std::string fromBoundsName = kernelName("select_topk");
      dispatchKernel(b, heapDecode(rows), withBounds,
                     [&](OpBuilder &builder, TypeRange types) {
                       return buildSimtSelectTopKKernel(
                           builder, loc, fromBoundsName, select, tiling, types,
                           /*boundsGiven=*/true);
                     });
      Value blocks = bindings.back();
      std::string rankName = kernelName("topk_rank");
      // A block per row.
      return dispatchKernel(
          b, ranked(rows),
          concat(ValueRange{q}, keys, ValueRange{bounds, blocks}),
          [&](OpBuilder &builder, TypeRange types) {
            return buildSimtTopKRankKernel(builder, loc, rankName, select,
                                           tiling, types);
          });
    }
    auto select = cast<SelectTopPOp>(op);
    // Bindings q, k, [page table, key lengths], [a ragged batch's query
    // offsets], [blocks], tokens.
    const bool paged = static_cast<bool>(select.getPageTable());
    SmallVector<Value> keyInputs(bindings.begin(), bindings.begin() +
                                                       (paged ? 4 : 2) +
                                                       (ragged ? 1 : 0));
    Value selectedBlocks =
        select.getBlocks() ? bindings[keyInputs.size()] : Value();
    // A row's candidates: its visible keys (at most Lk, over a paged cache
    // MP * P), and within a block selection of N entries (each counted
    // once) at most N * block_size of them. The cap keeps prefill rows
    // after top-k from needing Lq x Lk temporaries.
    Value keys = paged ? m.mul(m.dim(bindings[2], 1),
                               m.index(m.staticDim(bindings[1], 1)))
                       : m.dim(bindings[1], 2);
    if (selectedBlocks)
      keys = arith::MinSIOp::create(b, keys,
                                    m.mul(m.dim(selectedBlocks, ragged ? 2 : 3),
                                          m.index(*select.getBlockSize())));
    keys = m.maxS(keys, m.index(1));
    // Scores and key indices; bucket counts and f64 weights (none when
    // top_p = 1 leaves the weights unused); a bucket's sort space; flags.
    Value buckets = arith::MinSIOp::create(b, keys, m.index(kMaxTopPBuckets));
    bool byWeight = select.getTopP().convertToDouble() < 1.0;
    // Candidates are listed by a thread per row, scored by a thread per
    // (row, candidate), and selected by a thread per row.
    size_t first = all.size();
    rowTemporary(b.getF32Type(), ShapedType::kDynamic, keys);
    rowTemporary(b.getI32Type(), ShapedType::kDynamic, keys);
    rowTemporary(b.getI32Type(), 1, Value());
    Value scores = all[first], keyList = all[first + 1], count = all[first + 2];
    rowTemporary(b.getI32Type(), ShapedType::kDynamic, buckets);
    rowTemporary(b.getF64Type(), ShapedType::kDynamic,
                 byWeight ? buckets : m.index(0));
    rowTemporary(b.getI32Type(), ShapedType::kDynamic, keys);
    rowTemporary(b.getI8Type(), ShapedType::kDynamic, keys);
    ValueRange selectTemps = ValueRange(all).drop_front(first + 3);

    SmallVector<Value> candidateBindings(keyInputs);
    if (selectedBlocks)
      candidateBindings.push_back(selectedBlocks);
    candidateBindings.append({keyList, count});
    dispatchKernel(b, rows, candidateBindings,
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtTopPCandidatesKernel(
                         builder, loc, name, select, tiling, types);
                   });
    std::string scoresName = kernelName("topp_scores");
    dispatchKernel(b, m.mul(rows, keys),
                   concat(keyInputs, ValueRange{keyList, count, scores}),
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtTopPScoresKernel(builder, loc, scoresName,
                                                      select, tiling, types);
                   });
    SmallVector<Value> selectBindings(keyInputs);
    selectBindings.append({bindings.back(), scores, keyList, count});
    llvm::append_range(selectBindings, selectTemps);
    std::string selectName = kernelName("select_topp");
    return dispatchKernel(
        b, rows, selectBindings, [&](OpBuilder &builder, TypeRange types) {
          return buildSimtSelectTopPKernel(builder, loc, selectName, select,
                                           tiling, types);
        });
  }
  if (auto gate = dyn_cast<GateOp>(op)) {
    // A thread per element of the output.
    OutputGateShape shape = OutputGateShape::get(gate);
    Value tokens = tokensOf(m, bindings[0], shape.packed);
    Value elements = m.mul(tokens, m.index(shape.heads * shape.headFeatures));
    return dispatchKernel(b, elements, all,
                          [&](OpBuilder &builder, TypeRange types) {
                            return buildSimtOutputGateKernel(
                                builder, loc, name, shape, tiling, types);
                          });
  }
  if (auto gate = dyn_cast<RmsNormGateOp>(op)) {
    // A block per gateRowsPerBlock rows (RmsNormGateShape) of the tokens.
    RmsNormGateShape shape = RmsNormGateShape::get(gate);
    Value rows = rmsNormGateRows(m, shape, bindings[0]);
    return dispatchKernel(b, m.ceilDiv(rows, m.index(gateRowsPerBlock(shape))),
                          all, [&](OpBuilder &builder, TypeRange types) {
                            return buildSimtRmsNormGateKernel(
                                builder, loc, name, shape, tiling, types);
                          });
  }
  if (isa<PathStepsOp>(op))
    // The scalar kernel of the CPU, a thread per (batch, head, step).
    return dispatchKernel(
        b,
        m.mul(
            m.mul(m.dim(bindings[0], 0), m.index(m.staticDim(bindings[0], 1))),
            m.dim(bindings[1], 1)),
        all, [&](OpBuilder &builder, TypeRange types) {
          return buildPathStepsKernel(builder, loc, name,
                                      tiling.toAttr(b.getContext()), types);
        });
  if (isa<TreeAcceptOp>(op))
    // The scalar kernel of the CPU, a thread per batch row.
    return dispatchKernel(b, m.dim(bindings[0], 0), all,
                          [&](OpBuilder &builder, TypeRange types) {
                            return buildTreeAcceptKernel(
                                builder, loc, name,
                                tiling.toAttr(b.getContext()), types);
                          });
  if (isa<KvAppendOp>(op)) {
    // A thread per (new token, kv head, feature of k then v).
    Value k = bindings[0];
    Value features = m.index(KvCopyBindings::forAppend(bindings).features());
    return dispatchKernel(
        b, m.mul(m.mul(m.dim(k, 0), m.index(m.staticDim(k, 1))), features), all,
        [&](OpBuilder &builder, TypeRange types) {
          return buildSimtKvAppendKernel(builder, loc, name, tiling, types);
        });
  }
  // A thread per (batch, kv head, row, feature); packed keys [Tk, Hkv, F]
  // are one batch of Tk rows.
  Value k = bindings[0];
  const bool packed = cast<ShapedType>(k.getType()).getRank() == 3;
  Value batch = packed ? m.index(1) : m.dim(k, 0);
  Value features = m.index(KvCopyBindings::forCompact(bindings).features());
  Value threads = m.mul(
      m.mul(m.mul(batch, m.index(m.staticDim(k, 1))), m.dim(k, packed ? 0 : 2)),
      features);
  dispatchKernel(b, threads, all, [&](OpBuilder &builder, TypeRange types) {
    return buildSimtKvCompactKernel(builder, loc, name, tiling, types);
  });
}

void GpuEntryLowering::lowerRaggedSoftmax(ImplicitLocOpBuilder &b,
                                          AttentionOpInterface op,
                                          const SoftmaxAttentionShape &shape,
                                          SoftmaxBuffers &s) {
  HostIndexMath m{b};
  Type storage = cast<MemRefType>(s.q.getType()).getElementType();
  SimtFlashTiling flash = SimtFlashTiling::choose(
      shape, storage, tiling, /*maxWarps=*/4, tiling.flashRowTiles);
  SimtFlashTiling decodeFlash =
      SimtFlashTiling::chooseForDecode(shape, storage, tiling);
  RaggedPlan plan;
  plan.queryTile = flash.queryTile();
  plan.decodeMaxQueries = tiling.decodeMaxQueries;
  plan.splitKeys = tiling.splitKeys;
  plan.keyGranule = decodeFlash.keyTile;
  RaggedWork work = planRaggedBatch(b, op, shape, plan, s);

  // Flash blocks (entry, head); decode blocks (entry, kv head, tile of the
  // group's heads); merge threads (entry, head, feature).
  std::string flashName = kernelName("flash");
  dispatchKernel(b, m.mul(work.flashEntries, m.index(shape.numHeads)),
                 s.rowBindings(work.flashPlan),
                 [&](OpBuilder &builder, TypeRange types) {
                   return buildSimtFlashKernel(builder, op.getLoc(), flashName,
                                               shape, flash, tiling, types);
                 });
  const int64_t group = shape.numHeads / shape.numKvHeads;
  const int64_t groupTiles = llvm::divideCeil(group, decodeFlash.queryTile());
  std::string decodeName = kernelName("flash_decode");
  dispatchKernel(
      b, m.mul(work.splitEntries, m.index(shape.numKvHeads * groupTiles)),
      s.splitBindings(work.splitPlan),
      [&](OpBuilder &builder, TypeRange types) {
        return buildSimtFlashDecodeKernel(builder, op.getLoc(), decodeName,
                                          shape, decodeFlash, tiling, types);
      });
  std::string mergeName = kernelName("merge");
  dispatchKernel(
      b, m.mul(work.mergeEntries, m.index(shape.numHeads * shape.valueDim)),
      s.mergeBindings(work.mergePlan),
      [&](OpBuilder &builder, TypeRange types) {
        return buildSimtMergeKernel(builder, op.getLoc(), mergeName, shape,
                                    tiling, types);
      });
}

LogicalResult GpuEntryLowering::lowerSoftmax(ImplicitLocOpBuilder &b,
                                             AttentionOpInterface op) {
  FailureOr<SoftmaxAttentionShape> maybeShape =
      SoftmaxAttentionShape::get(op, "CUDA");
  if (failed(maybeShape))
    return failure();
  const SoftmaxAttentionShape &shape = *maybeShape;
  if (shape.selection != KeySelectionKind::Dense) {
    lowerGatheredSoftmax(b, op, shape);
    return success();
  }
  HostIndexMath m{b};

  SoftmaxBuffers s =
      bindSoftmax(b, op, shape.epilogue == Epilogue::SigmoidGate);
  if (shape.ragged) {
    lowerRaggedSoftmax(b, op, shape, s);
    return success();
  }

  // Decode calls take split-KV + merge, others the flash block kernel; the
  // other path gets zero workgroups and empty temporaries.
  Value zero = m.index(0);
  Value decode = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, s.lq,
                                       m.index(tiling.decodeMaxQueries));
  SimtFlashTiling flash = SimtFlashTiling::choose(
      shape, cast<MemRefType>(s.q.getType()).getElementType(), tiling,
      /*maxWarps=*/4, tiling.flashRowTiles);
  Value queryTiles = m.ceilDiv(s.lq, m.index(flash.queryTile()));
  Value flashBlocks = m.select(
      decode, zero, m.mul(m.mul(s.batch, m.index(shape.numHeads)), queryTiles));
  Value decodeBatch = m.select(decode, s.batch, zero);
  Value decodeRows = m.select(decode, s.lq, zero);
  // Decode blocks: (batch, kv head, tile of the group's rows, split).
  SimtFlashTiling decodeFlash = SimtFlashTiling::chooseForDecode(
      shape, cast<MemRefType>(s.q.getType()).getElementType(), tiling);
  const int64_t group = shape.numHeads / shape.numKvHeads;
  Value groupRowTiles = arith::CeilDivUIOp::create(
      b, m.mul(m.index(group), decodeRows), m.index(decodeFlash.queryTile()));
  Value unsplitBlocks =
      m.mul(m.mul(decodeBatch, m.index(shape.numKvHeads)), groupRowTiles);
  Value decodeSplits = m.select(
      decode,
      splitsFillingWorkers(b, m, m.ceilDiv(s.lk, m.index(tiling.splitKeys)),
                           unsplitBlocks,
                           m.ceilDiv(s.lk, m.index(decodeFlash.keyTile))),
      zero);
  allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, decodeBatch,
                        decodeRows, decodeSplits);
  // The block that finishes a tile's last split merges the tile's rows
  // (no merge kernel): a counter per tile, zeroed first, counts its splits
  // done.
  Value decodeTiles =
      m.mul(m.mul(decodeBatch, m.index(shape.numKvHeads)), groupRowTiles);
  Value decodeBlocks = m.mul(decodeTiles, decodeSplits);
  Value counters = memref::AllocOp::create(
      b, MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
      ValueRange{decodeTiles});
  SmallVector<Value> rowBindings = s.rowBindings();
  SmallVector<Value> splitBindings = s.keyBindings();
  llvm::append_range(splitBindings, s.mergeBindings());
  splitBindings.push_back(counters);
  splitBindings = s.withVariantTensors(std::move(splitBindings));

  OpBuilder kernelBuilder(host);
  auto types = [](ValueRange values) {
    return SmallVector<Type>(values.getTypes());
  };
  auto dispatch = [&](func::FuncOp kernel, Value threads, ValueRange bindings) {
    DispatchOp::create(b, kernel.getSymName(), threads, bindings);
  };
  // With a mask_mod, prefill first classifies its tiles (a thread per
  // tile) and lists each query tile's key tiles that are not empty (a
  // thread per query tile): the block mask, per batch row and head only if
  // the mask_mod reads them.
  if (flashUsesBlockMask(shape, KeyPart::All)) {
    Value one = m.index(1);
    Value maskBatch = m.select(
        decode, zero, shape.variants.maskModReadsBatch() ? s.batch : one);
    Value maskHeads =
        shape.variants.maskModReadsHead() ? m.index(shape.numHeads) : one;
    Value keyTiles = m.ceilDiv(s.lk, m.index(flash.keyTile));
    int64_t dynamic = ShapedType::kDynamic;
    auto table = [&](int64_t rank, Type element, ValueRange sizes) -> Value {
      return memref::AllocOp::create(
          b, MemRefType::get(SmallVector<int64_t>(rank, dynamic), element),
          sizes);
    };
    Value classes =
        table(4, b.getI8Type(), {maskBatch, maskHeads, queryTiles, keyTiles});
    Value list =
        table(4, b.getI32Type(), {maskBatch, maskHeads, queryTiles, keyTiles});
    Value counts = table(3, b.getI32Type(), {maskBatch, maskHeads, queryTiles});
    Value maskedQueryTiles = m.mul(m.mul(maskBatch, maskHeads), queryTiles);
    SmallVector<Value> classBindings =
        s.withVariantTensors({s.q, s.k, classes});
    dispatch(buildSimtTileClassKernel(kernelBuilder, op.getLoc(),
                                      kernelName("tile_classes"), shape, flash,
                                      tiling, types(classBindings)),
             m.mul(maskedQueryTiles, keyTiles), classBindings);
    SmallVector<Value> listBindings{s.q, s.k, classes, list, counts};
    dispatch(buildSimtTileListKernel(kernelBuilder, op.getLoc(),
                                     kernelName("tile_list"), shape, flash,
                                     tiling, types(listBindings)),
             maskedQueryTiles, listBindings);
    rowBindings.insert(rowBindings.end() - s.variantTensors.size(),
                       {classes, list, counts});
  }
  dispatch(buildSimtFlashKernel(kernelBuilder, op.getLoc(), kernelName("flash"),
                                shape, flash, tiling, types(rowBindings)),
           flashBlocks, rowBindings);
  func::FuncOp decodeKernel = buildSimtFlashDecodeKernel(
      kernelBuilder, op.getLoc(), kernelName("flash_decode"), shape,
      decodeFlash, tiling, types(splitBindings), KeyPart::All,
      /*mergesSplits=*/true);
  dispatch(buildSimtZeroKernel(kernelBuilder, op.getLoc(), kernelName("zero"),
                               tiling, {counters.getType()}),
           decodeTiles, {counters});
  dispatch(decodeKernel, decodeBlocks, splitBindings);
  return success();
}

LogicalResult GpuEntryLowering::lowerRecurrence(ImplicitLocOpBuilder &b,
                                                AttentionOpInterface op) {
  FailureOr<LinearRecurrenceShape> maybeShape =
      LinearRecurrenceShape::get(op, "CUDA");
  if (failed(maybeShape))
    return failure();
  const LinearRecurrenceShape &shape = *maybeShape;
  HostIndexMath m{b};
  RecurrenceBuffers r = bindRecurrence(b, op);
  SmallVector<Type> types(ValueRange(r.bindings).getTypes());
  if (shape.tree)
    assertAtRunTime(b,
                    arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                          r.length, m.index(shape.chunkSize)),
                    op->getName().getStringRef() +
                        ": a tree of more than max_nodes = " +
                        Twine(shape.chunkSize) + " nodes");

  // Calls of more than a step per sequence take the chunk's products on
  // warp_mma where its tiles fit; steps (decode) the SIMT kernel, whose
  // columns pad nothing to 16 rows. The other kernel gets zero blocks.
  std::optional<SimtMmaRecurrenceTiling> mma = SimtMmaRecurrenceTiling::choose(
      shape, cast<MemRefType>(r.bindings.front().getType()).getElementType(),
      tiling);
  // Beside the products the SIMT kernel runs decode steps alone: built for
  // chunks of one step (it is correct for any length), its shared buffers
  // are a step's and its columns split over several threads.
  LinearRecurrenceShape simtShape = shape;
  if (mma)
    simtShape.chunkSize = 1;
  const SimtRecurrenceColumns columns =
      SimtRecurrenceColumns::choose(simtShape, tiling);
  Value heads = m.mul(r.batch, m.index(shape.numValueHeads));
  Value blocks = m.mul(heads, m.index(columns.tiles(shape)));
  // The chunk's buffers in global scratch, a row per block, when they do
  // not fit in shared memory (large trees).
  SmallVector<Value> chunkedBindings(r.bindings);
  for (ArrayRef<int64_t> bufferShape :
       recurrenceScratchShapes(simtShape, columns, tiling)) {
    SmallVector<int64_t> scratchShape{ShapedType::kDynamic};
    llvm::append_range(scratchShape, bufferShape);
    chunkedBindings.push_back(memref::AllocOp::create(
        b, MemRefType::get(scratchShape, b.getF32Type()), ValueRange{blocks}));
  }
  OpBuilder kernelBuilder(host);
  func::FuncOp chunked = buildSimtChunkedRecurrenceKernel(
      kernelBuilder, op.getLoc(), kernelName(shape.tree ? "tree" : "chunked"),
      simtShape, columns, tiling, ValueRange(chunkedBindings).getTypes());
  Value simtBlocks = blocks;
  if (mma) {
    Value steps = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, r.length,
                                        shape.ragged ? r.batch : m.index(1));
    Value zero = m.index(0);
    auto whenChunked = [&](Value workgroups) {
      return m.select(steps, zero, workgroups);
    };
    // The temporaries (ChunkTemporaries), laid out as v but for their
    // features: the delta rules' W (as the products' parts), U and V' (as
    // the parts), a decay per key feature's G and decayed keys (as the
    // parts), G and 1 / |k| per step, then each chunk's starting state (as
    // the parts).
    SmallVector<Value> mmaBindings(r.bindings);
    Value v = r.bindings[2];
    auto vType = cast<MemRefType>(v.getType());
    SmallVector<Value> vSizes;
    for (int64_t d = 0; d < vType.getRank(); ++d)
      if (vType.isDynamicDim(d))
        vSizes.push_back(m.dim(v, d));
    auto laidOutAsV = [&](ArrayRef<int64_t> leading, int64_t features,
                          Type element) -> Value {
      SmallVector<int64_t> dims(leading);
      llvm::append_range(dims, vType.getShape());
      dims.back() = features;
      return memref::AllocOp::create(b, MemRefType::get(dims, element),
                                     vSizes);
    };
    if (shape.isDelta()) {
      mmaBindings.push_back(
          laidOutAsV({mma->computedParts}, shape.keyDim, mma->product));
      mmaBindings.push_back(laidOutAsV({}, shape.valueDim, b.getF32Type()));
      mmaBindings.push_back(
          laidOutAsV({mma->computedParts}, shape.valueDim, mma->product));
    }
    if (shape.featureDecay()) {
      mmaBindings.push_back(laidOutAsV({}, shape.keyDim, b.getF32Type()));
      mmaBindings.push_back(
          laidOutAsV({mma->computedParts}, shape.keyDim, mma->product));
    }
    mmaBindings.push_back(laidOutAsV({}, 2, b.getF32Type()));
    Value chunks = m.ceilDiv(r.length, m.index(shape.chunkSize));
    Value slots =
        shape.ragged ? m.add(chunks, r.batch) : m.mul(r.batch, chunks);
    mmaBindings.push_back(memref::AllocOp::create(
        b,
        MemRefType::get({mma->computedParts, ShapedType::kDynamic,
                         shape.numValueHeads, shape.valueDim, shape.keyDim},
                        mma->product),
        ValueRange{slots}));
    // A block per (sequence, value head, chunk) for what runs on all
    // chunks at once; in a ragged batch per (chunk slot, value head).
    Value chunkBlocks = m.mul(m.index(shape.numValueHeads), slots);
    Value columnTiles =
        m.index((shape.valueDim + mma->columns - 1) / mma->columns);
    TypeRange mmaTypes = ValueRange(mmaBindings).getTypes();
    func::FuncOp local = buildSimtMmaRecurrenceKernel(
        kernelBuilder, op.getLoc(), kernelName("chunk_local"), shape, *mma,
        ChunkMmaKernel::Local, tiling, mmaTypes);
    DispatchOp::create(b, local.getSymName(), whenChunked(chunkBlocks),
                       mmaBindings);
    // The chain is sequential: with few sequences and heads its blocks
    // leave multiprocessors idle, and then blocks of half the columns
    // (twice as many, each SM half the work) carry it.
    Value chainBlocks = m.mul(heads, columnTiles);
    std::optional<SimtMmaRecurrenceTiling> narrow =
        mma->narrowChain(shape, tiling);
    Value narrowBlocks, narrowChosen;
    if (narrow) {
      narrowBlocks = m.mul(
          heads, m.index(llvm::divideCeil(shape.valueDim, narrow->columns)));
      Value multiprocessors =
          m.div(WorkerCountOp::create(b, b.getIndexType()),
                m.index(::attn::host::kCudaWorkersPerMultiprocessor));
      narrowChosen = arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                           narrowBlocks, multiprocessors);
      chainBlocks = m.select(narrowChosen, zero, chainBlocks);
    }
    func::FuncOp chain = buildSimtMmaRecurrenceKernel(
        kernelBuilder, op.getLoc(), kernelName("chunk_states"), shape, *mma,
        ChunkMmaKernel::States, tiling, mmaTypes);
    DispatchOp::create(b, chain.getSymName(), whenChunked(chainBlocks),
                       mmaBindings);
    if (narrow) {
      func::FuncOp narrowChain = buildSimtMmaRecurrenceKernel(
          kernelBuilder, op.getLoc(), kernelName("chunk_states_narrow"), shape,
          *narrow, ChunkMmaKernel::States, tiling, mmaTypes);
      DispatchOp::create(
          b, narrowChain.getSymName(),
          whenChunked(m.select(narrowChosen, narrowBlocks, zero)), mmaBindings);
    }
    func::FuncOp outputs = buildSimtMmaRecurrenceKernel(
        kernelBuilder, op.getLoc(), kernelName("chunk_outputs"), shape, *mma,
        ChunkMmaKernel::Outputs, tiling, mmaTypes);
    DispatchOp::create(b, outputs.getSymName(),
                       whenChunked(m.mul(chunkBlocks, columnTiles)),
                       mmaBindings);
    simtBlocks = m.select(steps, blocks, zero);
  }
  DispatchOp::create(b, chunked.getSymName(), simtBlocks, chunkedBindings);
  if (shape.rmsNormGate) {
    // The gate in place on o, a block per gateRowsPerBlock rows (batch,
    // value head, step), or in a ragged batch (value head, token).
    RecurrenceBindings bound(r.bindings, shape);
    SmallVector<Value> gateBindings{bound.out, bound.z, bound.w, bound.out};
    RmsNormGateShape gateShape = RmsNormGateShape::get(shape);
    func::FuncOp gate = buildSimtRmsNormGateKernel(
        kernelBuilder, op.getLoc(), kernelName("gate"), gateShape, tiling,
        ValueRange(gateBindings).getTypes());
    Value rows = shape.ragged ? m.mul(m.index(shape.numValueHeads), r.length)
                              : m.mul(heads, r.length);
    DispatchOp::create(b, gate.getSymName(),
                       m.ceilDiv(rows, m.index(gateRowsPerBlock(gateShape))),
                       gateBindings);
  }
  return success();
}

struct AttnGpuDispatches final
    : mlir::attn::impl::AttnGpuDispatchesBase<AttnGpuDispatches> {
  using Base::Base;

  void runOnOperation() override {
    GpuTiling tiling;
    tiling.blockThreads = blockThreads;
    tiling.splitKeys = splitKeys;
    tiling.decodeMaxQueries = decodeMaxQueries;
    tiling.maxSharedBytes = maxSharedBytes;
    tiling.flashRowTiles = flashRowTiles;
    tiling.flashWarpgroups = flashWarpgroups;
    tiling.flashProducer = flashProducer;
    if (tiling.blockThreads <= 0 || tiling.blockThreads > 1024 ||
        tiling.blockThreads % 32 != 0 || tiling.splitKeys <= 0 ||
        (tiling.flashRowTiles != 1 && tiling.flashRowTiles != 2) ||
        tiling.flashWarpgroups < 0 || tiling.flashWarpgroups > 2) {
      getOperation().emitError()
          << "bad CUDA tiling: block-threads (" << tiling.blockThreads
          << ") must be a multiple of 32 in [32, 1024], split-keys ("
          << tiling.splitKeys << ") positive, flash-row-tiles ("
          << tiling.flashRowTiles << ") 1 or 2, flash-warpgroups ("
          << tiling.flashWarpgroups << ") 0, 1 or 2";
      return signalPassFailure();
    }
    for (func::FuncOp entry : EntryLowering::entriesOf(getOperation()))
      if (failed(GpuEntryLowering(entry, tiling).run()))
        return signalPassFailure();
  }
};

} // namespace
