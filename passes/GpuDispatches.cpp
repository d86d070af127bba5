//===- GpuDispatches.cpp - Entries to host programs + CUDA kernels --------===//
//
// The CUDA half of entry lowering (EntryLowering.h builds the host
// function), with the kernels of SimtKernels.h. Softmax attention runs
// the flash block kernel, a block per (batch, head, query tile); decode
// calls (few query rows) split the keys over threads and merge the
// partials, a thread kernel's workgroup count being its thread count.
// Linear recurrences run the chunked block kernel, one block
// per (batch, value head, column tile), then (with the rmsnorm-silu gate)
// one thread per output row.
//
//===----------------------------------------------------------------------===//

#include "passes/EntryLowering.h"
#include "passes/Passes.h"
#include "passes/SelectionKernels.h"
#include "passes/SimtKernels.h"

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

  const GpuTiling &tiling;
};

void GpuEntryLowering::lowerGatheredSoftmax(
    ImplicitLocOpBuilder &b, AttentionOpInterface op,
    const SoftmaxAttentionShape &shape) {
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto mul = [&](Value x, Value y) { return arith::MulIOp::create(b, x, y); };
  auto ceilDiv = [&](Value x, Value y) {
    return arith::CeilDivUIOp::create(b, x, y);
  };
  auto maxS = [&](Value x, Value y) { return arith::MaxSIOp::create(b, x, y); };
  SoftmaxBuffers s =
      bindSoftmax(b, op, shape.epilogue == Epilogue::SigmoidGate);
  auto select = [&](Value c, Value x, Value y) {
    return arith::SelectOp::create(b, c, x, y);
  };
  bool tree = shape.selection == KeySelectionKind::Tree;
  Value rows = mul(mul(s.batch, index(shape.numHeads)), s.lq);
  Value zero = index(0);
  Type storage = cast<MemRefType>(s.q.getType()).getElementType();
  // The gathered kernels' bindings, once the partials are allocated.
  auto gatheredBindings = [&]() -> SmallVector<Value> {
    return {s.q, s.k, s.v, s.selection, s.partialOut, s.partialLse};
  };
  if (tree) {
    // The prefix, which every node sees (from its window's start), is dense
    // attention for a flash kernel, into the first S - 1 splits; a thread
    // per node walks its tree keys into split S - 1. Trees of more than
    // decode_max_queries nodes: query tiles of nodes, one prefix split.
    // Smaller ones: decode's kernel, the kv group's heads times the nodes
    // as rows, the prefix in splits of split_keys keys (at least one).
    Value prefix = arith::SubIOp::create(b, s.lk, s.lq);
    Value many = arith::CmpIOp::create(b, arith::CmpIPredicate::ugt, s.lq,
                                       index(tiling.decodeMaxQueries));
    Value prefixSplits =
        select(many, index(1),
               maxS(index(1), ceilDiv(prefix, index(tiling.splitKeys))));
    Value splits = arith::AddIOp::create(b, prefixSplits, index(1));
    allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, s.batch, s.lq,
                          splits);
    // With a window, a node's first prefix key depends on its depth: the
    // flash kernels also read the parents.
    SmallVector<Value> prefixBindings = s.splitBindings();
    if (shape.mask == MaskKind::SlidingWindow)
      prefixBindings.insert(prefixBindings.begin() + 3, s.selection);

    SimtFlashTiling flash = SimtFlashTiling::choose(shape, storage, tiling);
    Value queryTiles = ceilDiv(s.lq, index(flash.queryTile()));
    std::string prefixName = kernelName("tree_prefix");
    dispatchKernel(
        b,
        select(many, mul(mul(s.batch, index(shape.numHeads)), queryTiles),
               zero),
        prefixBindings, [&](OpBuilder &builder, TypeRange types) {
          return buildSimtFlashKernel(builder, op.getLoc(), prefixName, shape,
                                      flash, tiling, types,
                                      KeyPart::TreePrefix);
        });

    SimtFlashTiling decodeFlash =
        SimtFlashTiling::chooseForDecode(shape, storage, tiling);
    const int64_t group = shape.numHeads / shape.numKvHeads;
    Value rowTiles =
        ceilDiv(mul(index(group), s.lq), index(decodeFlash.queryTile()));
    Value decodeBlocks =
        mul(mul(mul(s.batch, index(shape.numKvHeads)), rowTiles), prefixSplits);
    std::string smallPrefixName = kernelName("small_tree_prefix");
    dispatchKernel(b, select(many, zero, decodeBlocks), prefixBindings,
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
  } else {
    // Decode calls split the selection entries, split_keys keys' worth
    // each, and run a split per block of decode's flash kernel: it gathers
    // the split's blocks and stages their keys in shared memory by
    // coalesced loads. Longer calls have enough rows to fill the GPU with a
    // thread per row. The other path gets zero workgroups.
    Value entries = memref::DimOp::create(b, s.selection, 3);
    int64_t perSplit =
        std::max<int64_t>(1, tiling.splitKeys / shape.selectionBlockSize);
    Value decode = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, s.lq,
                                         index(tiling.decodeMaxQueries));
    Value splits = select(
        decode, maxS(index(1), ceilDiv(entries, index(perSplit))), index(1));
    allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, s.batch, s.lq,
                          splits);
    Value work = mul(rows, splits);
    SimtFlashTiling flash =
        SimtFlashTiling::choose(shape, storage, tiling, /*maxWarps=*/1);
    std::string flashName = kernelName("sparse_decode");
    dispatchKernel(b, select(decode, work, zero), gatheredBindings(),
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtFlashDecodeKernel(builder, op.getLoc(),
                                                       flashName, shape, flash,
                                                       tiling, types);
                   });
    std::string splitName = kernelName("sparse_split");
    dispatchKernel(b, select(decode, zero, work), gatheredBindings(),
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtGatheredSplitKernel(
                         builder, op.getLoc(), splitName, shape, tiling, types);
                   });
  }
  std::string mergeName = kernelName("merge");
  dispatchKernel(b, rows, s.mergeBindings(),
                 [&](OpBuilder &builder, TypeRange types) {
                   return buildSimtMergeKernel(builder, op.getLoc(), mergeName,
                                               shape, tiling, types);
                 });
}

void GpuEntryLowering::dispatchOp(ImplicitLocOpBuilder &b, Operation *op,
                                  ValueRange bindings) {
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto mul = [&](Value x, Value y) { return arith::MulIOp::create(b, x, y); };
  auto dim = [&](Value buffer, int64_t d) -> Value {
    return memref::DimOp::create(b, buffer, d);
  };
  auto staticDim = [](Value buffer, int64_t d) {
    return cast<MemRefType>(buffer.getType()).getDimSize(d);
  };
  Location loc = op->getLoc();
  // The op's first kernel is named after it (top-p's after its first
  // step).
  std::string name =
      kernelName(isa<SelectTopPOp>(op) ? StringRef("topp_candidates")
                                       : op->getName().stripDialect());
  SmallVector<Value> all(bindings);
  // A [B, H, Lq, n] temporary per row of q (bindings[0]).
  auto rowTemporary = [&](Type element, int64_t staticLast, Value last) {
    Value q = bindings[0];
    auto type = MemRefType::get({ShapedType::kDynamic, staticDim(q, 1),
                                 ShapedType::kDynamic, staticLast},
                                element);
    SmallVector<Value> sizes{dim(q, 0), dim(q, 2)};
    if (last)
      sizes.push_back(last);
    all.push_back(memref::AllocOp::create(b, type, sizes));
  };

  if (auto meta = dyn_cast<BlockMetaOp>(op)) {
    Value out = bindings[1];
    Value threads =
        mul(mul(mul(dim(out, 0), index(staticDim(out, 1))), dim(out, 2)),
            index(staticDim(out, 4)));
    return dispatchKernel(b, threads, all,
                          [&](OpBuilder &builder, TypeRange types) {
                            return buildSimtBlockMetaKernel(
                                builder, loc, name, meta, tiling, types);
                          });
  }
  if (isa<SelectTopKOp, SelectTopPOp>(op)) {
    Value q = bindings[0];
    Value rows = mul(mul(dim(q, 0), index(staticDim(q, 1))), dim(q, 2));
    if (auto select = dyn_cast<SelectTopKOp>(op)) {
      int64_t fill =
          select.getTopK() - select.getSinkBlocks() - select.getLocalBlocks();
      rowTemporary(b.getF32Type(), std::max<int64_t>(fill, 1), Value());
      // Prefill: a thread per row scores its blocks and selects. Decode has
      // too few rows for that to fill a GPU (a thread per head, each
      // reading all the metadata): a thread per (row, block) computes the
      // bounds into a [B, H, Lq, NB] temporary first, and the selecting
      // threads read them. The other path gets zero threads.
      Value decode =
          arith::CmpIOp::create(b, arith::CmpIPredicate::ule, dim(q, 2),
                                index(tiling.decodeMaxQueries));
      auto select0 = [&](Value c, Value x, Value y) -> Value {
        return arith::SelectOp::create(b, c, x, y);
      };
      Value zero = index(0);
      Value meta = bindings[1];
      Value numBlocks = dim(meta, 2);
      Value boundsRows = select0(decode, dim(q, 2), zero);
      Value bounds = memref::AllocOp::create(
          b,
          MemRefType::get({ShapedType::kDynamic, staticDim(q, 1),
                           ShapedType::kDynamic, ShapedType::kDynamic},
                          b.getF32Type()),
          ValueRange{dim(q, 0), boundsRows, numBlocks});
      dispatchKernel(b, select0(decode, zero, rows), all,
                     [&](OpBuilder &builder, TypeRange types) {
                       return buildSimtSelectTopKKernel(builder, loc, name,
                                                        select, tiling, types);
                     });
      std::string boundsName = kernelName("block_bounds");
      dispatchKernel(
          b,
          mul(mul(mul(dim(q, 0), index(staticDim(q, 1))), boundsRows),
              numBlocks),
          {q, meta, bounds}, [&](OpBuilder &builder, TypeRange types) {
            return buildSimtBlockBoundsKernel(builder, loc, boundsName, select,
                                              tiling, types);
          });
      SmallVector<Value> withBounds(all);
      withBounds.push_back(bounds);
      std::string fromBoundsName = kernelName("select_topk");
      return dispatchKernel(b, select0(decode, rows, zero), withBounds,
                            [&](OpBuilder &builder, TypeRange types) {
                              return buildSimtSelectTopKKernel(
                                  builder, loc, fromBoundsName, select, tiling,
                                  types, /*boundsGiven=*/true);
                            });
    }
    auto select = cast<SelectTopPOp>(op);
    // A row's candidates: its visible keys, and within a block selection of
    // N entries (each counted once) at most N * block_size of them. The cap
    // keeps prefill rows after top-k from needing Lq x Lk temporaries.
    Value keys = dim(bindings[1], 2);
    if (select.getBlocks())
      keys = arith::MinSIOp::create(
          b, keys, mul(dim(bindings[2], 3), index(*select.getBlockSize())));
    keys = arith::MaxSIOp::create(b, keys, index(1));
    // Scores and key indices; bucket counts and f64 weights (none when
    // top_p = 1 leaves the weights unused); a bucket's sort space; flags.
    Value buckets = arith::MinSIOp::create(b, keys, index(kMaxTopPBuckets));
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
                 byWeight ? buckets : index(0));
    rowTemporary(b.getI32Type(), ShapedType::kDynamic, keys);
    rowTemporary(b.getI8Type(), ShapedType::kDynamic, keys);
    ValueRange selectTemps = ValueRange(all).drop_front(first + 3);

    SmallVector<Value> candidateBindings{q, bindings[1]};
    if (select.getBlocks())
      candidateBindings.push_back(bindings[2]);
    candidateBindings.append({keyList, count});
    dispatchKernel(b, rows, candidateBindings,
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtTopPCandidatesKernel(
                         builder, loc, name, select, tiling, types);
                   });
    std::string scoresName = kernelName("topp_scores");
    dispatchKernel(b, mul(rows, keys), {q, bindings[1], keyList, count, scores},
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSimtTopPScoresKernel(builder, loc, scoresName,
                                                      select, tiling, types);
                   });
    SmallVector<Value> selectBindings{q,      bindings[1], bindings.back(),
                                      scores, keyList,     count};
    llvm::append_range(selectBindings, selectTemps);
    std::string selectName = kernelName("select_topp");
    return dispatchKernel(
        b, rows, selectBindings, [&](OpBuilder &builder, TypeRange types) {
          return buildSimtSelectTopPKernel(builder, loc, selectName, select,
                                           tiling, types);
        });
  }
  if (isa<TreeAcceptOp>(op))
    // The scalar kernel of the CPU, a thread per batch row.
    return dispatchKernel(
        b, dim(bindings[0], 0), all, [&](OpBuilder &builder, TypeRange types) {
          return buildTreeAcceptKernel(builder, loc, name,
                                       tiling.toAttr(b.getContext()), types);
        });
  Value k = bindings[0];
  Value features = index(staticDim(k, 3) + staticDim(bindings[1], 3));
  Value threads =
      mul(mul(mul(dim(k, 0), index(staticDim(k, 1))), dim(k, 2)), features);
  dispatchKernel(b, threads, all, [&](OpBuilder &builder, TypeRange types) {
    return buildSimtKvCompactKernel(builder, loc, name, tiling, types);
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
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto mul = [&](Value x, Value y) { return arith::MulIOp::create(b, x, y); };
  auto select = [&](Value c, Value x, Value y) {
    return arith::SelectOp::create(b, c, x, y);
  };

  SoftmaxBuffers s =
      bindSoftmax(b, op, shape.epilogue == Epilogue::SigmoidGate);

  // Decode calls take split-KV + merge, others the flash block kernel; the
  // other path gets zero workgroups and empty temporaries.
  Value zero = index(0);
  Value decode = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, s.lq,
                                       index(tiling.decodeMaxQueries));
  SimtFlashTiling flash = SimtFlashTiling::choose(
      shape, cast<MemRefType>(s.q.getType()).getElementType(), tiling);
  Value queryTiles =
      arith::CeilDivUIOp::create(b, s.lq, index(flash.queryTile()));
  Value flashBlocks = select(
      decode, zero, mul(mul(s.batch, index(shape.numHeads)), queryTiles));
  Value decodeBatch = select(decode, s.batch, zero);
  Value decodeRows = select(decode, s.lq, zero);
  Value decodeSplits = select(
      decode, arith::CeilDivUIOp::create(b, s.lk, index(tiling.splitKeys)),
      zero);
  allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, decodeBatch,
                        decodeRows, decodeSplits);
  Value mergeThreads = mul(mul(decodeBatch, index(shape.numHeads)), decodeRows);
  // Decode blocks: (batch, kv head, tile of the group's rows, split).
  SimtFlashTiling decodeFlash = SimtFlashTiling::chooseForDecode(
      shape, cast<MemRefType>(s.q.getType()).getElementType(), tiling);
  const int64_t group = shape.numHeads / shape.numKvHeads;
  Value groupRowTiles = arith::CeilDivUIOp::create(
      b, mul(index(group), decodeRows), index(decodeFlash.queryTile()));
  Value decodeBlocks =
      mul(mul(mul(decodeBatch, index(shape.numKvHeads)), groupRowTiles),
          decodeSplits);
  SmallVector<Value> rowBindings = s.rowBindings();
  SmallVector<Value> splitBindings = s.splitBindings();
  SmallVector<Value> mergeBindings = s.mergeBindings();

  OpBuilder kernelBuilder(host);
  auto types = [](ValueRange values) {
    return SmallVector<Type>(values.getTypes());
  };
  auto dispatch = [&](func::FuncOp kernel, Value threads, ValueRange bindings) {
    DispatchOp::create(b, kernel.getSymName(), threads, bindings);
  };
  dispatch(buildSimtFlashKernel(kernelBuilder, op.getLoc(), kernelName("flash"),
                                shape, flash, tiling, types(rowBindings)),
           flashBlocks, rowBindings);
  dispatch(buildSimtFlashDecodeKernel(
               kernelBuilder, op.getLoc(), kernelName("flash_decode"), shape,
               decodeFlash, tiling, types(splitBindings)),
           decodeBlocks, splitBindings);
  dispatch(buildSimtMergeKernel(kernelBuilder, op.getLoc(), kernelName("merge"),
                                shape, tiling, types(mergeBindings)),
           mergeThreads, mergeBindings);
  return success();
}

LogicalResult GpuEntryLowering::lowerRecurrence(ImplicitLocOpBuilder &b,
                                                AttentionOpInterface op) {
  FailureOr<LinearRecurrenceShape> maybeShape =
      LinearRecurrenceShape::get(op, "CUDA");
  if (failed(maybeShape))
    return failure();
  const LinearRecurrenceShape &shape = *maybeShape;
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto mul = [&](Value x, Value y) { return arith::MulIOp::create(b, x, y); };
  RecurrenceBuffers r = bindRecurrence(b, op);
  SmallVector<Type> types(ValueRange(r.bindings).getTypes());

  // One state column per thread: blocks of whole warps, no wider than the
  // state (a narrow state leaves no idle warps).
  const int64_t threads =
      std::min(tiling.blockThreads, roundUp(shape.valueDim, 32));
  const int64_t tiles = (shape.valueDim + threads - 1) / threads;
  OpBuilder kernelBuilder(host);
  func::FuncOp chunked = buildSimtChunkedRecurrenceKernel(
      kernelBuilder, op.getLoc(), kernelName("chunked"), shape, threads, tiling,
      types);
  Value heads = mul(r.batch, index(shape.numValueHeads));
  DispatchOp::create(b, chunked.getSymName(), mul(heads, index(tiles)),
                     r.bindings);
  if (shape.rmsNormGate) {
    func::FuncOp gate = buildSimtRecurrenceGateKernel(
        kernelBuilder, op.getLoc(), kernelName("gate"), shape, tiling, types);
    DispatchOp::create(b, gate.getSymName(), mul(heads, r.length), r.bindings);
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
    if (tiling.blockThreads <= 0 || tiling.blockThreads > 1024 ||
        tiling.blockThreads % 32 != 0 || tiling.splitKeys <= 0) {
      getOperation().emitError()
          << "bad CUDA tiling: block-threads (" << tiling.blockThreads
          << ") must be a multiple of 32 in [32, 1024], split-keys ("
          << tiling.splitKeys << ") positive";
      return signalPassFailure();
    }
    for (func::FuncOp entry : EntryLowering::entriesOf(getOperation()))
      if (failed(GpuEntryLowering(entry, tiling).run()))
        return signalPassFailure();
  }
};

} // namespace
