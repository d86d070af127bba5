//===- CpuDispatches.cpp - Entries to host dispatch programs + kernels ----===//
//
// The CPU half of entry lowering (EntryLowering.h builds the host function):
// which kernels each attention op dispatches and how the host program
// chooses among them. Attention ops are read through AttentionOpInterface
// only; the workgroup bodies come from
// SoftmaxAttentionKernels (softmax normalizer) and LinearRecurrenceKernels
// (recurrent-state normalizer).
//
//===----------------------------------------------------------------------===//

#include "passes/EntryLowering.h"
#include "passes/Passes.h"
#include "passes/kernels/cpu/CpuKernels.h"

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNCPUDISPATCHES
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

/// The split-KV workgroups per (row, key range): one per group of kv heads
/// a workgroup serves (splitKvHeadsPerWorkgroup).
int64_t splitKvSlots(const SoftmaxAttentionShape &shape) {
  return shape.numKvHeads / splitKvHeadsPerWorkgroup(shape);
}

/// The CPU side of an entry: flash / split-KV kernels for softmax attention,
/// chunked / column-tiled / step kernels for linear recurrences.
class CpuEntryLowering : public EntryLowering {
public:
  CpuEntryLowering(func::FuncOp entry, const CpuTiling &tiling)
      : EntryLowering(entry, "CPU"), tiling(tiling) {}

private:
  LogicalResult lowerSoftmax(ImplicitLocOpBuilder &b,
                             AttentionOpInterface op) override;
  LogicalResult lowerRecurrence(ImplicitLocOpBuilder &b,
                                AttentionOpInterface op) override;
  void dispatchOp(ImplicitLocOpBuilder &b, Operation *op,
                  ValueRange bindings) override;
  /// Sparse and tree attention: a workgroup per query row.
  void lowerGatheredSoftmax(ImplicitLocOpBuilder &b, AttentionOpInterface op,
                            const SoftmaxAttentionShape &shape);
  /// A ragged batch: the plan kernel, then the flash, split-KV and merge
  /// kernels over its entries.
  void lowerRaggedSoftmax(ImplicitLocOpBuilder &b, AttentionOpInterface op,
                          const SoftmaxAttentionShape &shape,
                          SoftmaxBuffers &s);
  DictionaryAttr scalarTiling(MLIRContext *context) const override {
    return tiling.toAttr(context);
  }
  const CpuTiling &tiling;
};

void CpuEntryLowering::lowerGatheredSoftmax(
    ImplicitLocOpBuilder &b, AttentionOpInterface op,
    const SoftmaxAttentionShape &shape) {
  SoftmaxBuffers s =
      bindSoftmax(b, op, shape.epilogue == Epilogue::SigmoidGate);
  HostIndexMath m{b};
  // A workgroup per query row: of [B, H, Lq], or of the T packed rows.
  Value rows = shape.ragged
                   ? m.mul(s.lq, m.index(shape.numHeads))
                   : m.mul(m.mul(s.batch, m.index(shape.numHeads)), s.lq);
  if (shape.selection == KeySelectionKind::Tree) {
    // Every node sees the prefix (from its window's start), so it is dense
    // attention: the flash kernel tiles it (a tile of nodes reads K and V
    // once) into split 0, or for a few nodes split-KV spreads it over
    // splits [0, S - 1); the gathered kernel takes each node's tree keys
    // into split S - 1, and the split-KV merge combines them and gates.
    Value zero = m.index(0);
    Value fewNodes = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, s.lq,
                                           m.index(tiling.decodeMaxQueries));
    // The most prefix keys a sequence may have (0 for an empty batch over
    // a cache or packed keys smaller than one tree).
    Value prefix = m.maxS(m.sub(s.lk, s.lq), zero);
    Value prefixSplits = m.ceilDiv(prefix, m.index(tiling.splitKeys));
    Value splits =
        m.select(fewNodes, arith::AddIOp::create(b, prefixSplits, m.index(1)),
                 m.index(2));
    allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, s.batch, s.lq,
                          splits);
    // With a window or variant regions, a node's first prefix key or its
    // position depends on its depth: the prefix kernels also read the
    // parents.
    SmallVector<Value> prefixBindings = s.splitBindings();
    if (shape.treePrefixNeedsDepths())
      prefixBindings.insert(prefixBindings.begin() + s.keyBindings().size(),
                            s.selection);
    std::string prefixName = kernelName("tree_prefix");
    Value queryTiles = m.ceilDiv(s.lq, m.index(tiling.queryTile));
    dispatchKernel(
        b,
        m.select(fewNodes, zero,
                 m.mul(m.mul(s.batch, m.index(shape.numHeads)), queryTiles)),
        prefixBindings, [&](OpBuilder &builder, TypeRange types) {
          return buildFlashAttentionKernel(builder, op.getLoc(), prefixName,
                                           shape, tiling, types,
                                           KeyPart::TreePrefix);
        });
    std::string splitName = kernelName("tree_prefix_split");
    dispatchKernel(
        b,
        m.select(fewNodes,
                 m.mul(m.mul(m.mul(s.batch, m.index(splitKvSlots(shape))),
                             prefixSplits),
                       s.lq),
                 zero),
        prefixBindings, [&](OpBuilder &builder, TypeRange types) {
          return buildSplitKvAttentionKernel(builder, op.getLoc(), splitName,
                                             shape, tiling, types,
                                             KeyPart::TreePrefix);
        });
    SmallVector<Value> nodeBindings = s.keyBindings();
    nodeBindings.append({s.selection, s.partialOut, s.partialLse});
    nodeBindings = s.withVariantTensors(std::move(nodeBindings));
    std::string nodesName = kernelName("tree_nodes");
    dispatchKernel(b, rows, nodeBindings,
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildGatheredAttentionKernel(
                         builder, op.getLoc(), nodesName, shape, tiling, types);
                   });
    std::string mergeName = kernelName("merge");
    dispatchKernel(b, rows, s.mergeBindings(),
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildSplitKvMergeKernel(
                         builder, op.getLoc(), mergeName, shape, tiling, types);
                   });
    return;
  }
  SmallVector<Value> bindings = s.keyBindings();
  bindings.push_back(s.selection);
  llvm::append_range(bindings, s.rowOutputs());
  bindings = s.withVariantTensors(std::move(bindings));
  std::string name = kernelName("sparse");
  dispatchKernel(b, rows, bindings, [&](OpBuilder &builder, TypeRange types) {
    return buildGatheredAttentionKernel(builder, op.getLoc(), name, shape,
                                        tiling, types);
  });
}

void CpuEntryLowering::dispatchOp(ImplicitLocOpBuilder &b, Operation *op,
                                  ValueRange bindings) {
  HostIndexMath m{b};
  Location loc = op->getLoc();
  std::string name = kernelName(op->getName().stripDialect());
  auto emit = [&](Value groups,
                  function_ref<func::FuncOp(OpBuilder &, TypeRange)> kernel) {
    dispatchKernel(b, groups, bindings, kernel);
  };

  if (auto meta = dyn_cast<BlockMetaOp>(op); meta && meta.getPageTable()) {
    // Bindings k_cache, used slots, kmeta_pages: a workgroup per (page, kv
    // head).
    Value cache = bindings[0];
    dispatchKernel(b, m.mul(m.dim(cache, 0), m.index(m.staticDim(cache, 2))),
                   bindings, [&](OpBuilder &builder, TypeRange types) {
                     return buildBlockMetaKernel(builder, loc, name,
                                                 MetaLayout::of(meta), tiling,
                                                 types);
                   });
    return;
  }
  if (auto update = dyn_cast<PageMetaUpdateOp>(op)) {
    // Bindings k_cache, slots, fill, leader, kmeta_pages: one workgroup
    // finds the written pages' fill and leader, then a workgroup per (new
    // token, kv head), idle unless the token leads its page.
    Value cache = bindings[0];
    std::string pagesName = kernelName("appended_pages");
    dispatchKernel(b, m.index(1), bindings.take_front(4),
                   [&](OpBuilder &builder, TypeRange types) {
                     return AppendedPages::buildScalarKernel(
                         builder, loc, pagesName, tiling.toAttr(b.getContext()),
                         types);
                   });
    emit(m.mul(m.dim(bindings[1], 0), m.index(m.staticDim(cache, 2))),
         [&](OpBuilder &builder, TypeRange types) {
           return buildBlockMetaKernel(builder, loc, name,
                                       MetaLayout::of(update), tiling, types);
         });
    return;
  }
  if (auto meta = dyn_cast<BlockMetaOp>(op)) {
    // A workgroup per (batch, kv head, block).
    Value out = bindings[1];
    emit(m.mul(m.mul(m.dim(out, 0), m.index(m.staticDim(out, 1))),
               m.dim(out, 2)),
         [&](OpBuilder &builder, TypeRange types) {
           return buildBlockMetaKernel(builder, loc, name, MetaLayout::of(meta),
                                       tiling, types);
         });
    return;
  }
  if (auto gate = dyn_cast<GateOp>(op)) {
    // A workgroup per run of tokens: of one head (b, h) of [B, H, L, Dv],
    // of every head packed.
    OutputGateShape shape = OutputGateShape::get(gate);
    Value output = bindings[0];
    Value run = m.index(gateTokensPerWorkgroup(shape));
    Value workgroups;
    if (shape.packed) {
      workgroups = m.ceilDiv(m.dim(output, 0), run);
    } else {
      Value heads = m.mul(m.dim(output, 0), m.index(shape.heads));
      workgroups = m.mul(heads, m.ceilDiv(m.dim(output, 2), run));
    }
    return emit(workgroups, [&](OpBuilder &builder, TypeRange types) {
      return buildOutputGateKernel(builder, loc, name, shape, tiling, types);
    });
  }
  if (auto gate = dyn_cast<RmsNormGateOp>(op)) {
    // A workgroup per run of tokens of a row (RmsNormGateShape): B * rows
    // * ceil(L / run), or packed ceil(T / run) * rows.
    RmsNormGateShape shape = RmsNormGateShape::get(gate);
    Value output = bindings[0];
    Value run = m.index(rmsNormGateTokensPerWorkgroup(shape));
    Value rows = m.index(shape.rowsPerToken());
    Value workgroups;
    if (shape.packed) {
      workgroups = m.mul(m.ceilDiv(m.dim(output, 0), run), rows);
    } else {
      Value batchRows = m.mul(m.dim(output, 0), rows);
      workgroups = m.mul(batchRows, m.ceilDiv(m.dim(output, 2), run));
    }
    return emit(workgroups, [&](OpBuilder &builder, TypeRange types) {
      return buildRmsNormGateKernel(builder, loc, name, shape, tiling, types);
    });
  }
  // The selections: a workgroup per (batch, head, query row); top-k's per
  // (batch, kv heads it serves, query row), for the heads of those kv
  // groups together. In a ragged batch the rows are the packed queries'
  // tokens.
  Value q = bindings[0];
  Value queryRows = cast<MemRefType>(q.getType()).getRank() == 3
                        ? m.dim(q, 0)
                        : m.mul(m.dim(q, 0), m.dim(q, 2));
  Value rows = m.mul(queryRows, m.index(m.staticDim(q, 1)));
  if (auto select = dyn_cast<SelectTopKOp>(op)) {
    // The metadata's kv heads: [B, Hkv, NB, 2, D] or per page [NP, 2, Hkv,
    // D].
    const bool paged = static_cast<bool>(select.getPageTable());
    const int64_t numKvHeads = m.staticDim(bindings[1], paged ? 2 : 1);
    const int64_t kvHeadsServed = kvHeadsPerCpuWorkgroup(paged, numKvHeads);
    const int64_t headsServed = m.staticDim(q, 1) / numKvHeads * kvHeadsServed;
    // A selection workgroup per (row, kv heads served). Fewer of them than
    // threads (a decode call of a sequence or two) bound their candidates
    // first, a workgroup per chunk, into `bounds`, then keep their budgets
    // from it (TopKPhase); otherwise each does both.
    Value selections = m.mul(queryRows, m.index(numKvHeads / kvHeadsServed));
    Value chunked =
        arith::CmpIOp::create(b, arith::CmpIPredicate::ult, selections,
                              WorkerCountOp::create(b, b.getIndexType()));
    // The most candidates a row has: the metadata's blocks, or the page
    // table's.
    Value maxBlocks = paged ? m.dim(bindings[2], 1) : m.dim(bindings[1], 2);
    Value zero = m.index(0);
    int64_t dynamic = ShapedType::kDynamic;
    Value bounds = memref::AllocOp::create(
        b, MemRefType::get({dynamic, headsServed, dynamic}, b.getF32Type()),
        ValueRange{m.select(chunked, selections, zero), maxBlocks});
    SmallVector<Value> topKBindings(bindings);
    topKBindings.push_back(bounds);
    auto dispatchPhase = [&](const std::string &kernel, Value groups,
                             TopKPhase phase) {
      dispatchKernel(b, groups, topKBindings,
                     [&](OpBuilder &builder, TypeRange types) {
                       return buildSelectTopKKernel(
                           builder, loc, kernel, select, tiling, types, phase);
                     });
    };
    dispatchPhase(name, m.select(chunked, zero, selections), TopKPhase::Whole);
    Value chunks = m.ceilDiv(maxBlocks, m.index(kTopKBoundsChunk));
    dispatchPhase(kernelName("block_bounds"),
                  m.select(chunked, m.mul(selections, chunks), zero),
                  TopKPhase::Bounds);
    dispatchPhase(kernelName("select_topk"),
                  m.select(chunked, selections, zero), TopKPhase::Select);
    return;
  }
  if (auto select = dyn_cast<SelectTopPOp>(op))
    return emit(rows, [&](OpBuilder &builder, TypeRange types) {
      return buildSelectTopPKernel(builder, loc, name, select, tiling, types);
    });
  if (isa<PathStepsOp>(op))
    // A workgroup per (batch, head, step).
    return emit(m.mul(m.mul(m.dim(bindings[0], 0),
                            m.index(m.staticDim(bindings[0], 1))),
                      m.dim(bindings[1], 1)),
                [&](OpBuilder &builder, TypeRange types) {
                  return buildPathStepsKernel(
                      builder, loc, name, tiling.toAttr(b.getContext()), types);
                });
  if (isa<KvAppendOp>(op))
    // A workgroup per new token.
    return emit(m.dim(bindings[0], 0),
                [&](OpBuilder &builder, TypeRange types) {
                  return buildKvAppendKernel(builder, loc, name, tiling, types);
                });
  if (isa<TreeAcceptOp>(op))
    // A workgroup per batch row.
    return emit(m.dim(bindings[0], 0),
                [&](OpBuilder &builder, TypeRange types) {
                  return buildTreeAcceptKernel(
                      builder, loc, name, tiling.toAttr(b.getContext()), types);
                });
  // KV compaction: a workgroup per (batch, kv head, tile of rows); packed
  // keys [Tk, Hkv, F] are one batch of Tk rows.
  Value k = bindings[0];
  const bool packed = cast<ShapedType>(k.getType()).getRank() == 3;
  Value batch = packed ? m.index(1) : m.dim(k, 0);
  Value keyRows = m.dim(k, packed ? 0 : 2);
  emit(m.mul(m.mul(batch, m.index(m.staticDim(k, 1))),
             m.ceilDiv(keyRows, m.index(kCompactRowTile))),
       [&](OpBuilder &builder, TypeRange types) {
         return buildKvCompactKernel(builder, loc, name, tiling, types);
       });
}

void CpuEntryLowering::lowerRaggedSoftmax(ImplicitLocOpBuilder &b,
                                          AttentionOpInterface op,
                                          const SoftmaxAttentionShape &shape,
                                          SoftmaxBuffers &s) {
  HostIndexMath m{b};
  RaggedPlan plan;
  plan.queryTile = tiling.queryTile;
  plan.decodeMaxQueries = tiling.decodeMaxQueries;
  plan.splitKeys = tiling.splitKeys;
  RaggedWork work = planRaggedBatch(b, op, shape, plan, s);
  std::string flashName = kernelName("flash");
  dispatchKernel(
      b, m.mul(work.flashEntries, m.index(shape.numHeads)),
      s.rowBindings(work.flashPlan), [&](OpBuilder &builder, TypeRange types) {
        return buildFlashAttentionKernel(builder, op.getLoc(), flashName, shape,
                                         tiling, types, KeyPart::All);
      });
  std::string splitName = kernelName("split_kv");
  dispatchKernel(b, m.mul(work.splitEntries, m.index(splitKvSlots(shape))),
                 s.splitBindings(work.splitPlan),
                 [&](OpBuilder &builder, TypeRange types) {
                   return buildSplitKvAttentionKernel(builder, op.getLoc(),
                                                      splitName, shape, tiling,
                                                      types, KeyPart::All);
                 });
  std::string mergeName = kernelName("merge");
  dispatchKernel(b, m.mul(work.mergeEntries, m.index(shape.numHeads)),
                 s.mergeBindings(work.mergePlan),
                 [&](OpBuilder &builder, TypeRange types) {
                   return buildSplitKvMergeKernel(
                       builder, op.getLoc(), mergeName, shape, tiling, types);
                 });
}

LogicalResult CpuEntryLowering::lowerSoftmax(ImplicitLocOpBuilder &b,
                                             AttentionOpInterface op) {
  FailureOr<SoftmaxAttentionShape> maybeShape =
      SoftmaxAttentionShape::get(op, target);
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

  // Decode calls (few query rows) take split-KV + merge, others the flash
  // kernel; the other path gets zero workgroups and empty temporaries.
  Value zero = m.index(0);
  Value decode = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, s.lq,
                                       m.index(tiling.decodeMaxQueries));
  Value queryTiles = m.ceilDiv(s.lq, m.index(tiling.queryTile));
  Value flashGroups = m.select(
      decode, zero, m.mul(m.mul(s.batch, m.index(shape.numHeads)), queryTiles));
  Value splits = m.ceilDiv(s.lk, m.index(tiling.splitKeys));
  Value decodeBatch = m.select(decode, s.batch, zero);
  Value decodeSplits = m.select(decode, splits, zero);
  Value decodeRows = m.select(decode, s.lq, zero);
  allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, decodeBatch,
                        decodeRows, decodeSplits);
  Value splitGroups = m.mul(
      m.mul(m.mul(decodeBatch, m.index(splitKvSlots(shape))), decodeSplits),
      decodeRows);
  Value mergeGroups =
      m.mul(m.mul(decodeBatch, m.index(shape.numHeads)), decodeRows);
  SmallVector<Value> flashBindings = s.rowBindings();
  SmallVector<Value> splitBindings = s.splitBindings();
  SmallVector<Value> mergeBindings = s.mergeBindings();

  OpBuilder kernelBuilder(host);
  auto dispatch = [&](func::FuncOp kernel, Value groups, ValueRange bindings) {
    DispatchOp::create(b, kernel.getSymName(), groups, bindings);
  };
  auto types = [](ValueRange values) {
    return SmallVector<Type>(values.getTypes());
  };
  // With a mask_mod, prefill classifies its tiles first (the block mask):
  // per batch row and head only if the mask_mod reads them.
  if (flashUsesBlockMask(shape, KeyPart::All)) {
    Value one = m.index(1);
    Value maskBatch = shape.variants.maskModReadsBatch()
                          ? m.select(decode, zero, s.batch)
                          : m.select(decode, zero, one);
    Value maskHeads =
        shape.variants.maskModReadsHead() ? m.index(shape.numHeads) : one;
    Value keyTiles = m.ceilDiv(s.lk, m.index(tiling.keyTile));
    int64_t dynamic = ShapedType::kDynamic;
    Value classes = memref::AllocOp::create(
        b, MemRefType::get({dynamic, dynamic, dynamic, dynamic}, b.getI8Type()),
        ValueRange{maskBatch, maskHeads, queryTiles, keyTiles});
    SmallVector<Value> classBindings =
        s.withVariantTensors({s.q, s.k, classes});
    dispatch(buildTileClassKernel(kernelBuilder, op.getLoc(),
                                  kernelName("tile_classes"), shape, tiling,
                                  types(classBindings)),
             m.mul(m.mul(maskBatch, maskHeads), queryTiles), classBindings);
    flashBindings.insert(flashBindings.end() - s.variantTensors.size(),
                         classes);
  }
  dispatch(buildFlashAttentionKernel(kernelBuilder, op.getLoc(),
                                     kernelName("flash"), shape, tiling,
                                     types(flashBindings)),
           flashGroups, flashBindings);
  dispatch(buildSplitKvAttentionKernel(kernelBuilder, op.getLoc(),
                                       kernelName("split_kv"), shape, tiling,
                                       types(splitBindings)),
           splitGroups, splitBindings);
  dispatch(buildSplitKvMergeKernel(kernelBuilder, op.getLoc(),
                                   kernelName("merge"), shape, tiling,
                                   types(mergeBindings)),
           mergeGroups, mergeBindings);
  return success();
}

LogicalResult CpuEntryLowering::lowerRecurrence(ImplicitLocOpBuilder &b,
                                                AttentionOpInterface op) {
  FailureOr<LinearRecurrenceShape> maybeShape = LinearRecurrenceShape::get(op);
  if (failed(maybeShape))
    return failure();
  const LinearRecurrenceShape &shape = *maybeShape;
  HostIndexMath m{b};

  RecurrenceBuffers buffersOfOp = bindRecurrence(b, op);
  SmallVector<Value> &bindings = buffersOfOp.bindings;
  Value batch = buffersOfOp.batch, length = buffersOfOp.length;

  if (shape.tree) {
    // The whole tree is one chunk of the chunked kernel: a workgroup per
    // (batch, value head), whole rows of the state.
    assertAtRunTime(b,
                    arith::CmpIOp::create(b, arith::CmpIPredicate::ule, length,
                                          m.index(shape.chunkSize)),
                    op->getName().getStringRef() +
                        ": a tree of more than max_nodes = " +
                        Twine(shape.chunkSize) + " nodes");
    dispatchKernel(
        b, arith::MulIOp::create(b, batch, m.index(shape.numValueHeads)),
        bindings, [&](OpBuilder &builder, TypeRange types) {
          return buildChunkedRecurrenceKernel(
              builder, op.getLoc(), kernelName("tree"), shape, tiling,
              shape.paddedValueDim(tiling.vectorWidth), types);
        });
    return success();
  }

  if (shape.ragged) {
    // A ragged batch mixes lengths (decode and prefill in one call): both
    // kernels get a workgroup per (sequence, value head), and each takes
    // the sequences of its kind by their real length, the step kernel
    // those of 1 .. recurrent-max-steps steps, the chunked kernel the
    // longer ones, on whole state rows.
    Value groups =
        arith::MulIOp::create(b, batch, m.index(shape.numValueHeads));
    for (bool stepwise : {false, true})
      dispatchKernel(
          b, groups, bindings, [&](OpBuilder &builder, TypeRange types) {
            return stepwise
                       ? buildRecurrentStepKernel(builder, op.getLoc(),
                                                  kernelName("recurrent"),
                                                  shape, tiling, types)
                       : buildChunkedRecurrenceKernel(
                             builder, op.getLoc(), kernelName("chunked"), shape,
                             tiling, shape.paddedValueDim(tiling.vectorWidth),
                             types);
          });
    return success();
  }

  // Calls of 1 .. recurrent-max-steps steps run the recurrence step by step,
  // others (prefill, and L = 0, which only copies the state) the chunked
  // form; the other kernel gets zero workgroups.
  // L - 1 <= max - 1 unsigned: L = 0 wraps around and is not stepwise.
  Value stepwise =
      arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                            arith::SubIOp::create(b, length, m.index(1)),
                            m.index(tiling.recurrentMaxSteps - 1));
  Value groups = arith::MulIOp::create(b, batch, m.index(shape.numValueHeads));
  Value zero = m.index(0);
  Value chunkedGroups = m.select(stepwise, zero, groups);
  Value stepGroups = m.select(stepwise, groups, zero);

  OpBuilder kernelBuilder(host);
  SmallVector<Type> types(ValueRange(bindings).getTypes());
  const int64_t rowColumns = shape.paddedValueDim(tiling.vectorWidth);
  func::FuncOp chunked = buildChunkedRecurrenceKernel(
      kernelBuilder, op.getLoc(), kernelName("chunked"), shape, tiling,
      rowColumns, types);

  // With fewer (batch, value head) pairs than workers, column tiles of the
  // state keep more workers busy, each repeating the column-independent
  // work of a chunk. One kernel per tile width; the host runs the one (or
  // whole rows) whose critical path, in multiply-adds per chunk, is the
  // shortest for the call's batch and the runtime's workers.
  SmallVector<int64_t> tileWidths = shape.stateColumnTiles(tiling);
  SmallVector<Value> tileGroups;
  Value gateGroups;
  if (!tileWidths.empty()) {
    Value workers = WorkerCountOp::create(b, b.getIndexType());
    auto critical = [&](Value workgroups, int64_t work) -> Value {
      return arith::MulIOp::create(b, m.ceilDiv(workgroups, workers),
                                   m.index(work));
    };
    Value bestPath = critical(groups, shape.chunkWork(rowColumns));
    Value bestColumns = m.index(rowColumns);
    for (int64_t columns : tileWidths) {
      Value path = critical(
          arith::MulIOp::create(b, groups, m.index(rowColumns / columns)),
          shape.chunkWork(columns));
      Value shorter =
          arith::CmpIOp::create(b, arith::CmpIPredicate::ult, path, bestPath);
      bestPath = m.select(shorter, path, bestPath);
      bestColumns = m.select(shorter, m.index(columns), bestColumns);
    }
    // (chunkedGroups is already 0 for stepwise calls.)
    auto ifChosen = [&](int64_t columns, Value count) -> Value {
      Value chosen = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                           bestColumns, m.index(columns));
      return m.select(chosen, count, zero);
    };
    chunkedGroups = ifChosen(rowColumns, chunkedGroups);
    Value chunkedCall = m.select(stepwise, zero, groups);
    for (int64_t columns : tileWidths)
      tileGroups.push_back(ifChosen(
          columns, arith::MulIOp::create(b, chunkedCall,
                                         m.index(rowColumns / columns))));
    if (shape.rmsNormGate) {
      // Column tiles store o ungated: attn.rmsnorm_gate's kernel follows,
      // in place, a workgroup per run of tokens of one head.
      Value rows = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                         bestColumns, m.index(rowColumns));
      Value run =
          m.index(rmsNormGateTokensPerWorkgroup(RmsNormGateShape::get(shape)));
      gateGroups = arith::SelectOp::create(
          b, rows, zero,
          arith::MulIOp::create(b, chunkedCall, m.ceilDiv(length, run)));
    }
  }

  func::FuncOp recurrent =
      buildRecurrentStepKernel(kernelBuilder, op.getLoc(),
                               kernelName("recurrent"), shape, tiling, types);
  DispatchOp::create(b, chunked.getSymName(), chunkedGroups, bindings);
  for (auto [columns, count] : llvm::zip(tileWidths, tileGroups)) {
    func::FuncOp columnTiled = buildChunkedRecurrenceKernel(
        kernelBuilder, op.getLoc(),
        kernelName(("chunked_columns" + Twine(columns) + "_").str()), shape,
        tiling, columns, types);
    DispatchOp::create(b, columnTiled.getSymName(), count, bindings);
  }
  if (gateGroups) {
    RecurrenceBindings bound(ValueRange(bindings), shape);
    SmallVector<Value> gateBindings{bound.out, bound.z, bound.w, bound.out};
    func::FuncOp gate =
        buildRmsNormGateKernel(kernelBuilder, op.getLoc(), kernelName("gate"),
                               RmsNormGateShape::get(shape), tiling,
                               ValueRange(gateBindings).getTypes());
    DispatchOp::create(b, gate.getSymName(), gateGroups, gateBindings);
  }
  DispatchOp::create(b, recurrent.getSymName(), stepGroups, bindings);
  return success();
}

struct AttnCpuDispatches final
    : mlir::attn::impl::AttnCpuDispatchesBase<AttnCpuDispatches> {
  using Base::Base;

  void runOnOperation() override {
    CpuTiling tiling;
    tiling.vectorWidth = vectorWidth;
    tiling.queryTile = queryTile;
    tiling.keyTile = keyTile;
    tiling.splitKeys = splitKeys;
    tiling.decodeMaxQueries = decodeMaxQueries;
    tiling.recurrentMaxSteps = recurrentMaxSteps;
    tiling.stateColumns = stateColumns;
    tiling.bf16Dot = bf16Dot;
    tiling.amxTiles = amxTiles;
    tiling.prefetchIntoL1 = prefetchIntoL1;
    if (tiling.vectorWidth <= 0 || tiling.queryTile <= 0 ||
        tiling.queryTile % tiling.vectorWidth != 0 || tiling.keyTile <= 0 ||
        tiling.keyTile % 4 != 0 || tiling.splitKeys <= 0 ||
        tiling.stateColumns < tiling.vectorWidth ||
        (tiling.bf16Dot && tiling.vectorWidth != 16) ||
        (tiling.amxTiles &&
         (!tiling.bf16Dot || tiling.queryTile % 32 || tiling.keyTile % 32))) {
      getOperation().emitError()
          << "bad CPU tiling: query-tile (" << tiling.queryTile
          << ") must be a positive multiple of vector-width ("
          << tiling.vectorWidth << "), key-tile (" << tiling.keyTile
          << ") a positive multiple of 4, split-keys (" << tiling.splitKeys
          << ") positive, state-columns (" << tiling.stateColumns
          << ") at least vector-width, bf16-dot needs vector-width 16, and "
             "amx-tiles needs bf16-dot, a query-tile multiple of 32 and a "
             "key-tile multiple of 32";
      return signalPassFailure();
    }
    for (func::FuncOp entry : EntryLowering::entriesOf(getOperation()))
      if (failed(CpuEntryLowering(entry, tiling).run()))
        return signalPassFailure();
  }
};

} // namespace
