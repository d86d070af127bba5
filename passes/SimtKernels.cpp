//===- SimtKernels.cpp - Softmax attention kernels for CUDA ---------------===//
//
// Prefill is the flash block kernel (FlashAttention-2's tiling): a block of
// W warps owns 16 R W query rows of one head (R row tiles of 16 per warp)
// and walks the key tiles its rows see (the mask's range). Tiles are staged
// in shared memory by asynchronous copies that overlap the products before
// them; each warp computes its rows' scores S = q k^T with
// attn_kernel.warp_mma (tensor cores for f16/bf16) into its lanes' fragments;
// each lane masks its elements and, once a row's 4 lanes have exchanged
// their parts of its max, does the online-softmax update of its elements
// (its rows' m, its part of l and its output fragment, all in registers);
// and each warp adds P v to its lanes' output fragments with
// attn_kernel.warp_mma, P taken from the lanes' score fragments (lhs_fragment:
// it never leaves the registers on the GPU). P is rounded to the storage
// dtype for the tensor cores, and l sums the rounded values, so o stays a
// weighted mean of v. Key tiles inside every row's visible keys skip the
// mask.
//
// Decode (at most decodeMaxQueries rows) is FlashDecoding: the same kernel
// with a block per (batch, kv head, key split of splitKeys keys), whose
// rows are the kv group's (head, query row) pairs, so the group's heads
// share each staged k and v tile and their products run on the tensor
// cores; it writes split partials, which a thread per row merges through
// their log-sum-exp, as on the CPU. Sparse decode and small draft trees'
// prefixes take the same kernel (one row per tile for sparse rows, whose
// selections are their own).
//
// Empty rows (no visible key) give o = 0 and lse = -inf: exponentials are
// taken against a max that is 0 while the max is -inf.
//
//===----------------------------------------------------------------------===//

#include "passes/SimtKernels.h"

#include "passes/KernelEmitter.h"
#include "passes/SelectionKernels.h"

#include "Attn/AttnOps.h"

using namespace mlir;
using namespace mlir::attn;

DictionaryAttr GpuTiling::toAttr(MLIRContext *context) const {
  Builder b(context);
  return b.getDictionaryAttr({
      b.getNamedAttr("block_threads", b.getI64IntegerAttr(blockThreads)),
      b.getNamedAttr("split_keys", b.getI64IntegerAttr(splitKeys)),
      b.getNamedAttr("decode_max_queries",
                     b.getI64IntegerAttr(decodeMaxQueries)),
  });
}

FailureOr<SimtLaunch> SimtLaunch::get(func::FuncOp kernel) {
  auto tiling = kernel->getAttrOfType<DictionaryAttr>("attn.tiling");
  auto blockThreads =
      tiling ? tiling.getAs<IntegerAttr>("block_threads") : IntegerAttr();
  if (!blockThreads || !kernel.getBody().hasOneBlock())
    return kernel.emitError("not a kernel of -attn-gpu-dispatches "
                            "(attn.tiling has no block_threads, or the body "
                            "has several blocks)");
  SimtLaunch launch;
  launch.blockThreads = blockThreads.getInt();
  launch.perBlock = kernel->hasAttr(kBlockKernelAttr);
  for (auto alloca : kernel.getOps<memref::AllocaOp>()) {
    if (!alloca->hasAttr(kSharedBufferAttr))
      continue;
    MemRefType type = alloca.getType();
    if (!type.hasStaticShape())
      return alloca.emitError("a shared buffer needs a static shape");
    if (!type.getElementType().isIntOrFloat())
      return alloca.emitError("a shared buffer holds integers or floats (its "
                              "size in bytes must be known), not ")
             << type.getElementType();
    launch.sharedBytes +=
        roundUp(type.getNumElements() * type.getElementTypeBitWidth() / 8, 16);
  }
  return launch;
}

Value SimtEmitter::shared(ArrayRef<int64_t> shape, Type element) {
  OpBuilder::InsertionGuard guard(b);
  Operation *parent = b.getInsertionBlock()->getParentOp();
  auto func = dyn_cast<func::FuncOp>(parent);
  if (!func)
    func = parent->getParentOfType<func::FuncOp>();
  Block *entry = &func.getBody().front();
  // After the allocations already there, so they keep their order.
  auto it = entry->begin();
  while (it != entry->end() && isa<memref::AllocaOp>(*it))
    ++it;
  b.setInsertionPoint(entry, it);
  auto alloca = memref::AllocaOp::create(
      b, MemRefType::get(shape, element ? element : f32),
      b.getI64IntegerAttr(16));
  alloca->setAttr(kSharedBufferAttr, b.getUnitAttr());
  return alloca;
}

Value SimtEmitter::registers(ArrayRef<int64_t> shape) {
  assert(blockThreads > 0 && "registers are for block kernels");
  SmallVector<int64_t> perThread{blockThreads};
  llvm::append_range(perThread, shape);
  Value buffer = shared(perThread);
  Operation *alloca = buffer.getDefiningOp();
  alloca->removeAttr(kSharedBufferAttr);
  alloca->setAttr(kRegisterBufferAttr, b.getUnitAttr());
  return buffer;
}

/// The registers of `count` threads of `buffer` from thread `first`: a
/// [count, shape...] view, or with `dropThreads` (count 1) [shape...].
static Value threadsRegisters(ImplicitLocOpBuilder &b, Value buffer,
                              Value first, int64_t count, bool dropThreads) {
  auto type = cast<MemRefType>(buffer.getType());
  const int64_t rank = type.getRank();
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
  offsets[0] = first;
  SmallVector<OpFoldResult> sizes{b.getIndexAttr(count)},
      strides(rank, b.getIndexAttr(1));
  for (int64_t size : type.getShape().drop_front())
    sizes.push_back(b.getIndexAttr(size));
  if (!dropThreads)
    return memref::SubViewOp::create(b, buffer, offsets, sizes, strides);
  auto viewType = memref::SubViewOp::inferRankReducedResultType(
      type.getShape().drop_front(), type, offsets, sizes, strides);
  return memref::SubViewOp::create(b, viewType, buffer, offsets, sizes,
                                   strides);
}

Value SimtEmitter::registersOfWarp(Value buffer, Value thread) {
  Value lanes = index(WarpMmaOp::kWarpLanes);
  return threadsRegisters(b, buffer, mul(div(thread, lanes), lanes),
                          WarpMmaOp::kWarpLanes, /*dropThreads=*/false);
}

Value SimtEmitter::registersOf(Value buffer, Value thread) {
  return threadsRegisters(b, buffer, thread, 1, /*dropThreads=*/true);
}

Value SimtEmitter::loadOrZero(Value condition, Value memref,
                              ValueRange indices) {
  auto op = scf::IfOp::create(
      b, condition,
      [&](OpBuilder &nested, Location loc) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        scf::YieldOp::create(b, load(memref, indices));
      },
      [&](OpBuilder &nested, Location loc) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        scf::YieldOp::create(b, scalar(0.0));
      });
  return op.getResult(0);
}

void SimtEmitter::eachThread(function_ref<void(Value thread)> body, Sync sync) {
  assert(blockThreads > 0 && "thread loops are for block kernels");
  auto loop = scf::ParallelOp::create(
      b, ValueRange{index(0)}, ValueRange{index(blockThreads)},
      ValueRange{index(1)}, [&](OpBuilder &nested, Location, ValueRange ivs) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        body(ivs[0]);
      });
  loop->setAttr(kThreadLoopAttr, b.getUnitAttr());
  if (sync == Sync::Warp)
    loop->setAttr(kWarpSyncAttr, b.getUnitAttr());
}

void SimtEmitter::forAll(Value count, function_ref<void(Value i)> body) {
  eachThread([&](Value thread) {
    loop(thread, count, index(blockThreads), [&](Value i) { body(i); });
  });
}

namespace {

func::FuncOp createSimtKernel(OpBuilder &builder, Location loc, StringRef name,
                              TypeRange bindingTypes, const GpuTiling &tiling,
                              StringRef kind) {
  return createKernel(builder, loc, name, bindingTypes,
                      tiling.toAttr(builder.getContext()), kind);
}

/// The visible keys [begin, end) of query row `row` (its position is
/// Lk - Lq + row), intersected with [from, to).
std::pair<Value, Value> visibleKeys(SimtEmitter &e,
                                    const SoftmaxAttentionShape &shape,
                                    Value row, Value lq, Value lk, Value from,
                                    Value to) {
  Value pos = e.add(e.sub(lk, lq), row);
  Value begin = from, end = to;
  if (shape.mask != MaskKind::None)
    end = e.minS(end, e.add(pos, e.index(1)));
  if (shape.mask == MaskKind::SlidingWindow)
    begin = e.maxS(begin, e.add(e.sub(pos, e.index(shape.window)), e.index(1)));
  return {begin, e.maxS(end, begin)};
}

/// The output gate of one row, [B, H, Lq, Dv or 1] read at (batch, head,
/// row) = rowAt[0..3): a headwise gate is read once, an elementwise one per
/// feature.
class RowGate {
public:
  RowGate(SimtEmitter &e, const SoftmaxAttentionShape &shape, Value gate,
          ValueRange rowAt)
      : e(e), gate(gate), rowAt(rowAt.take_front(3)) {
    if (gate && shape.headwiseGate)
      headGate = e.load(gate, at(e.index(0)));
  }
  /// o of feature d, gated (o itself without a gate).
  Value apply(Value o, Value d) {
    if (!gate)
      return o;
    return e.sigmoidGate(o, headGate ? headGate : e.load(gate, at(d)));
  }

private:
  SmallVector<Value> at(Value d) {
    SmallVector<Value> indices(rowAt);
    indices.push_back(d);
    return indices;
  }
  SimtEmitter &e;
  Value gate, headGate;
  SmallVector<Value> rowAt;
};

} // namespace

SimtRowSoftmax::SimtRowSoftmax(SimtEmitter &e,
                               const SoftmaxAttentionShape &shape, Value q,
                               Value k, Value v, Value batch, Value head,
                               Value row, Value queryPos,
                               ValueRange variantBuffers)
    : e(e), shape(shape), k(k), v(v), batch(batch), head(head), row(row),
      queryPos(queryPos), variants(e, shape.variants, variantBuffers) {
  Value c0 = e.index(0), c1 = e.index(1);
  kvHead = e.div(head, e.index(shape.numHeads / shape.numKvHeads));
  // The scaled query row, read once.
  query = e.scratch(shape.headDim);
  e.loop(c0, e.index(shape.headDim), c1, [&](Value d) {
    e.store(e.fmul(e.load(q, {batch, head, row, d}), e.scalar(shape.scale)),
            query, d);
  });
  acc = e.scratch(shape.valueDim);
  e.loop(c0, e.index(shape.valueDim), c1,
         [&](Value d) { e.store(e.scalar(0.0), acc, d); });
}

SmallVector<Value> SimtRowSoftmax::initial() {
  return {e.scalar(kNegInf), e.scalar(0.0)};
}

SmallVector<Value> SimtRowSoftmax::addKey(ValueRange state, Value key,
                                          Value keyPos) {
  Value c0 = e.index(0), c1 = e.index(1);
  Value score = e.loop(c0, e.index(shape.headDim), c1, {e.scalar(0.0)},
                       [&](Value d, ValueRange dot) {
                         return SmallVector<Value>{
                             e.fma(e.load(query, d),
                                   e.load(k, {batch, kvHead, key, d}), dot[0])};
                       })[0];
  if (!keyPos)
    keyPos = key;
  score = variants.score(e.softcap(score, shape.softcap), batch, head, queryPos,
                         keyPos);
  if (variants.hasMaskMod())
    score = e.select(variants.visible(batch, head, queryPos, keyPos), score,
                     e.scalar(kNegInf));
  // Against a max made safe (0 while it is -inf), so that a key mask_mod
  // hides before any visible one weighs 0 and leaves the state as it was.
  Value max = e.fmax(state[0], score);
  Value safe = e.safeMax(max);
  Value rescale = e.exp(e.fsub(state[0], safe));
  Value p = e.exp(e.fsub(score, safe));
  e.loop(c0, e.index(shape.valueDim), c1, [&](Value d) {
    e.store(e.fma(p, e.load(v, {batch, kvHead, key, d}),
                  e.fmul(e.load(acc, d), rescale)),
            acc, d);
  });
  return {max, e.fma(state[1], rescale, p)};
}

void SimtRowSoftmax::storePartial(ValueRange state, Value partialOut,
                                  Value partialLse, Value split) {
  // The normalized partial and its log-sum-exp (0 and -inf when empty).
  Value inv = e.reciprocalOrZero(state[1]);
  e.loop(e.index(0), e.index(shape.valueDim), e.index(1), [&](Value d) {
    e.store(e.fmul(e.load(acc, d), inv), partialOut,
            {batch, head, row, split, d});
  });
  e.store(e.logSumExp(state[0], state[1]), partialLse,
          {batch, head, row, split});
}

int64_t SimtFlashTiling::sharedBytes() const {
  const int64_t rows = queryTile(), keys = keyTile;
  auto buffer = [](int64_t elements, int64_t bytes) {
    return roundUp(elements * bytes, 16);
  };
  // The buffers the flash kernel allocates, padded rows included.
  return buffer(rows * headStride(), elementBytes) +  // q tile
         buffer(keys * headStride(), elementBytes) +  // k tile
         buffer(keys * valueStride(), elementBytes) + // v tile
         buffer(rows * kLanesPerRow, 4);              // quad exchange
}

SimtFlashTiling SimtFlashTiling::choose(const SoftmaxAttentionShape &shape,
                                        Type storage, const GpuTiling &tiling,
                                        int64_t maxWarps, int64_t maxRowTiles) {
  // Largest first. FlashAttention-2 tiles head dims up to 128 on
  // sm_80/sm_90 with 4 warps of 32 rows (128) over 64 keys; here 32 rows
  // per warp take 32-key tiles, since the score fragments of 64 keys would
  // take the registers past 255 (ptxas spilled 64 bytes at D = 128).
  auto make = [&](int64_t rowTiles, int64_t warps, int64_t keyTile) {
    SimtFlashTiling flash;
    flash.rowTiles = rowTiles;
    flash.warps = warps;
    flash.keyTile = keyTile;
    flash.paddedHeadDim = roundUp(shape.headDim, WarpMmaOp::kReductionStep);
    flash.paddedValueDim = roundUp(shape.valueDim, WarpMmaOp::kFragmentColumns);
    flash.elementBytes = storage.getIntOrFloatBitWidth() / 8;
    return flash;
  };
  auto keyTiles = [](int64_t rowTiles) {
    return rowTiles > 1 ? SmallVector<int64_t>{32, 16}
                        : SmallVector<int64_t>{64, 32, 16};
  };
  // Two row tiles pay off only on the tensor cores (B fragments shared),
  // and double the output fragment: 2 x Dv / 8 x 4 registers per lane, 128
  // at Dv = 128.
  const bool tensorCores = storage.isF16() || storage.isBF16();
  if (!tensorCores || roundUp(shape.valueDim, 8) > 128)
    maxRowTiles = 1;
  for (int64_t budget : {tiling.maxSharedBytes / 2, tiling.maxSharedBytes})
    for (int64_t rowTiles = maxRowTiles; rowTiles >= 1; rowTiles /= 2)
      for (int64_t warps = maxWarps; warps >= 1; warps /= 2)
        for (int64_t keyTile : keyTiles(rowTiles))
          if (make(rowTiles, warps, keyTile).sharedBytes() <= budget)
            return make(rowTiles, warps, keyTile);
  return make(1, 1, 16);
}

SimtFlashTiling
SimtFlashTiling::chooseForDecode(const SoftmaxAttentionShape &shape,
                                 Type storage, const GpuTiling &tiling) {
  const int64_t rows = shape.numHeads / shape.numKvHeads *
                       std::max<int64_t>(tiling.decodeMaxQueries, 1);
  int64_t warps = 1;
  while (warps < 4 && warps * WarpMmaOp::kRows < rows)
    warps *= 2;
  SimtFlashTiling flash = choose(shape, storage, tiling, warps);
  // Above 128 value channels the output fragment alone takes 128 registers
  // or more: 32-key tiles (16 score registers, not 32) keep decode with
  // D = 256 from spilling, at no cost to a kernel that waits on memory.
  if (flash.paddedValueDim > 128 && flash.keyTile > 32)
    flash.keyTile = 32;
  return flash;
}

namespace {

/// What a flash block kernel's block works on: `keys` says which keys
/// (KeyPart::All: those the mask leaves visible, o gated and [lse] written;
/// KeyPart::TreePrefix: the tree's prefix, partials written). Query tiles
/// are 16 R W query rows of one head over their keys (R row tiles per
/// warp); decode splits (`decodeSplit`) are 16 W rows (R = 1) of one kv
/// group's (head, row) pairs over one split of the keys, partials written.
func::FuncOp buildFlash(OpBuilder &builder, Location loc, StringRef name,
                        const SoftmaxAttentionShape &shape,
                        const SimtFlashTiling &flash, const GpuTiling &tiling,
                        TypeRange bindingTypes, KeyPart part,
                        bool decodeSplit) {
  OpBuilder::InsertionGuard guard(builder);
  GpuTiling kernelTiling = tiling;
  kernelTiling.blockThreads = flash.threads();
  assert(part != KeyPart::TreeNodes && "the flash kernel tiles whole ranges");
  const bool treePrefix = part == KeyPart::TreePrefix;
  const bool partials = treePrefix || decodeSplit;
  std::string kind = std::string(decodeSplit ? "flash_decode" : "flash") +
                     (treePrefix ? "_tree_prefix" : "");
  func::FuncOp func =
      createSimtKernel(builder, loc, name, bindingTypes, kernelTiling, kind);
  // The tile sizes join the launch shape in attn.tiling.
  NamedAttrList tilingAttrs(kernelTiling.toAttr(builder.getContext()));
  tilingAttrs.set("query_tile", builder.getI64IntegerAttr(flash.queryTile()));
  tilingAttrs.set("key_tile", builder.getI64IntegerAttr(flash.keyTile));
  func->setAttr("attn.tiling", tilingAttrs.getDictionary(builder.getContext()));
  func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b, flash.threads());
  auto args = func.getArguments();
  unsigned next = 0;
  Value q = args[next++], k = args[next++], v = args[next++];
  // The tree's prefix: the keys before the T = Lq tree keys, all visible,
  // or with a window those from each node's window start (its depth's);
  // variant regions see each node at its position P + depth.
  const bool treeWindow = treePrefix && shape.mask == MaskKind::SlidingWindow;
  const bool treeDepths = treePrefix && shape.treePrefixNeedsDepths();
  Value parents = treeDepths ? args[next++] : Value();
  // Sparse decode: the keys of the blocks a row's selection lists.
  const bool gathered = shape.selection == KeySelectionKind::Blocks;
  assert((!gathered || decodeSplit) && "sparse attention tiles decode rows");
  Value selection = gathered ? args[next++] : Value();
  Value gate = !partials && shape.epilogue == Epilogue::SigmoidGate
                   ? args[next++]
                   : Value();
  Value out = args[next++];
  Value lse = partials || shape.withLogSumExp ? args[next++] : Value();
  // Prefill with a mask_mod walks the key tiles its block mask lists.
  const bool blockMask = flashUsesBlockMask(shape, part) && !decodeSplit;
  Value tileClasses, tileList, tileCounts;
  if (blockMask) {
    tileClasses = args[next++];
    tileList = args[next++];
    tileCounts = args[next++];
  }
  Value workgroup = args.back();
  SoftmaxAttentionShape keys = shape;
  if (treePrefix)
    keys.mask = MaskKind::None;
  VariantEmitter variants(e, shape.variants, shape.variants.buffersOf(func));

  const int64_t TQ = flash.queryTile(), TK = flash.keyTile;
  const int64_t D = shape.headDim, Dv = shape.valueDim;
  const int64_t Dp = flash.paddedHeadDim, Dvp = flash.paddedValueDim;
  const int64_t group = shape.numHeads / shape.numKvHeads;
  Type storage = KernelEmitter::storageType(q);
  Value c0 = e.index(0), c1 = e.index(1), c32 = e.index(32);
  auto lt = [&](Value x, Value y) {
    return e.icmp(arith::CmpIPredicate::ult, x, y);
  };
  auto both = [&](Value x, Value y) {
    return arith::AndIOp::create(b, x, y).getResult();
  };
  // A thread loop in which each warp works on its 16 x rowTiles rows:
  // body(first row of the warp, lane, thread). The quad exchange and P are
  // rows of the warp's own, so loops that only write those (and registers)
  // may end with SimtEmitter::Sync::Warp.
  auto eachWarp =
      [&](function_ref<void(Value warpRow, Value lane, Value thread)> body,
          SimtEmitter::Sync sync = SimtEmitter::Sync::Block) {
        e.eachThread(
            [&](Value thread) {
              Value warpRow = e.mul(e.div(thread, c32),
                                    e.index(WarpMmaOp::kRows * flash.rowTiles));
              body(warpRow, e.rem(thread, c32), thread);
            },
            sync);
      };

  Value lq = e.dim(q, 2), lk = e.dim(k, 2);
  // Query row i sits at Lk - Lq + i (the variant regions' position).
  Value firstPosition = e.sub(lk, lq);
  if (treePrefix)
    lk = e.sub(lk, lq);
  // Tile row r (< rows) is query row rowOf(r) of head headOf(r), and sees
  // keys in [from, to) only.
  Value batch, kvHead, split, first, rows, from = c0, to = lk;
  std::function<Value(Value)> headOf, rowOf;
  // With a block mask: where the query tile's row of it is.
  SmallVector<Value> maskRow;
  // Sparse decode: split s takes selection entries [entryFrom, entryTo).
  const int64_t bs = shape.selectionBlockSize;
  const int64_t entriesPerSplit =
      gathered ? std::max<int64_t>(1, tiling.splitKeys / bs) : 0;
  Value entryFrom, entryTo;
  if (gathered) {
    // Workgroup order (batch, head, query row, split), the split fastest:
    // each row selects its own blocks, so a tile is one row (the warp's
    // other 15 rows are padding).
    Value splits = e.dim(lse, 3);
    split = e.rem(workgroup, splits);
    RowOfWorkgroup at(e, e.div(workgroup, splits), shape.numHeads, lq);
    batch = at.batch;
    kvHead = e.div(at.head, e.index(group));
    first = at.row;
    rows = c1;
    Value head = at.head, row = at.row;
    headOf = [head](Value) { return head; };
    rowOf = [row](Value) { return row; };
    Value entries = e.dim(selection, 3);
    entryFrom = e.minS(entries, e.mul(split, e.index(entriesPerSplit)));
    entryTo = e.minS(entries, e.add(entryFrom, e.index(entriesPerSplit)));
  } else if (decodeSplit) {
    // Workgroup order (batch, kv head, row tile, split), the split
    // fastest. The group's (head, query row) pairs, head-major, make the
    // rows, so its heads share each staged k and v tile. A tree's last
    // split is its nodes' own keys', not the prefix's.
    Value splits = e.dim(lse, 3);
    if (treePrefix)
      splits = e.sub(splits, c1);
    Value packed = e.mul(e.index(group), lq);
    Value tiles = e.ceilDiv(packed, e.index(TQ));
    split = e.rem(workgroup, splits);
    Value rest = e.div(workgroup, splits);
    Value tile = e.rem(rest, tiles);
    rest = e.div(rest, tiles);
    kvHead = e.rem(rest, e.index(shape.numKvHeads));
    batch = e.div(rest, e.index(shape.numKvHeads));
    first = e.mul(tile, e.index(TQ));
    rows = e.minS(e.index(TQ), e.sub(packed, first));
    // The splits share the keys in whole key tiles (the host program picks
    // how many: at least one per split_keys keys, more while the GPU would
    // idle); trailing splits may hold none.
    Value splitLength =
        e.mul(e.ceilDiv(e.ceilDiv(lk, splits), e.index(TK)), e.index(TK));
    from = e.minS(lk, e.mul(split, splitLength));
    to = e.minS(lk, e.add(from, splitLength));
    headOf = [&, kvHead, first](Value r) {
      return e.add(e.mul(kvHead, e.index(group)), e.div(e.add(first, r), lq));
    };
    rowOf = [&, first](Value r) { return e.rem(e.add(first, r), lq); };
  } else {
    // Workgroup order (batch, head, query tile), the tile fastest (a
    // head's blocks run together and share its k and v in L2), the last
    // tile first: under a causal mask the later tiles see the most keys,
    // and blocks launched heaviest first leave a lighter last wave (as
    // FlashAttention-3 schedules them).
    Value tiles = e.ceilDiv(lq, e.index(TQ));
    Value tile = e.sub(e.sub(tiles, c1), e.rem(workgroup, tiles));
    Value bh = e.div(workgroup, tiles);
    Value head = e.rem(bh, e.index(shape.numHeads));
    batch = e.div(bh, e.index(shape.numHeads));
    kvHead = e.div(head, e.index(group));
    first = e.mul(tile, e.index(TQ));
    rows = e.minS(e.index(TQ), e.sub(lq, first));
    headOf = [head](Value) { return head; };
    rowOf = [&, first](Value r) { return e.add(first, r); };
    if (treePrefix)
      split = c0;
    if (blockMask)
      maskRow = {shape.variants.maskModReadsBatch() ? batch : c0,
                 shape.variants.maskModReadsHead() ? head : c0, tile};
  }
  // A windowed tree node's first prefix key, and a tree node's position
  // for the variant regions, found once per row by walking its ancestors
  // (rows past the end repeat the last node).
  Value rowStarts, rowPositions;
  // Where the variant regions see tile row r.
  auto queryPositionOf = [&](Value r) -> Value {
    if (rowPositions)
      return e.toIndex(e.loadInt(rowPositions, {r}));
    return e.add(firstPosition, rowOf(r));
  };
  // Sparse decode: the split's blocks, each counted once in the row,
  // gathered into `listed`; tiles walk their keys as one range of
  // `listedKeys` virtual keys, v standing for key listed[v / bs] * bs +
  // v % bs.
  Value listed, listedKeys;
  auto rowKeys = [&](Value r) -> std::pair<Value, Value> {
    auto [rowBegin, rowEnd] = visibleKeys(e, keys, rowOf(r), lq, lk, from, to);
    if (rowStarts) {
      rowBegin = e.maxS(rowBegin, e.toIndex(e.loadInt(rowStarts, {r})));
      rowEnd = e.maxS(rowEnd, rowBegin);
    }
    return {rowBegin, rowEnd};
  };

  // Zero padding (rows past the tile's, keys past the range, features past
  // D and Dv) keeps the products exact; padded keys are masked, padded rows
  // and features never stored.
  Value qs = e.shared({TQ, flash.headStride()}, storage);
  Value ks = e.shared({TK, flash.headStride()}, storage);
  Value vs = e.shared({TK, flash.valueStride()}, storage);
  // The 4 lanes that hold a row (those of one lane / 4) exchange their parts
  // of its max and sum here: quad[row, lane % 4].
  Value quad = e.shared({TQ, SimtFlashTiling::kLanesPerRow});
  // Each lane keeps in registers its share of its warp's scores and output
  // (mma accumulator fragments: rows g and g + 8 of each of the warp's row
  // tiles of 16, two columns of every 8) and, for each of its rows, the
  // running max (the same in a row's 4 lanes) and its part of the running
  // sum.
  const int64_t RT = flash.rowTiles;
  const int64_t keyBlocks = TK / WarpMmaOp::kFragmentColumns;
  const int64_t valueBlocks = Dvp / WarpMmaOp::kFragmentColumns;
  Value scoreRegs = e.registers({RT * keyBlocks, 4});
  Value outRegs = e.registers({RT * valueBlocks, 4});
  Value maxRegs = e.registers({2 * RT});
  Value sumRegs = e.registers({2 * RT});
  // A lane's rows: row g + 8 half of the warp's row tile `tile` (from row
  // warpRow + 16 tile), whose running max and sum are at `slot`.
  struct LaneRow {
    int64_t tile, half, slot;
    Value row;
  };
  auto laneRowsOf = [&](Value warpRow, Value lane) {
    SmallVector<LaneRow> laneRows;
    for (int64_t tile = 0; tile < RT; ++tile) {
      MmaFragmentLayout layout(
          e, e.add(warpRow, e.index(tile * WarpMmaOp::kRows)), lane);
      for (int64_t half = 0; half < 2; ++half)
        laneRows.push_back(
            {tile, half, 2 * tile + half, layout.accRow(e, half)});
    }
    return laneRows;
  };
  // The lane's place among the 4 that hold its rows, and the combination
  // of a row's 4 parts.
  auto quadLaneOf = [&](Value lane) {
    return e.rem(lane, e.index(SimtFlashTiling::kLanesPerRow));
  };
  auto combineQuad = [&](Value r,
                         function_ref<Value(Value, Value)> combine) -> Value {
    Value all = e.load(quad, {r, c0});
    for (int64_t i = 1; i < SimtFlashTiling::kLanesPerRow; ++i)
      all = combine(all, e.load(quad, {r, e.index(i)}));
    return all;
  };
  // Fragment element `el` of lane row `at` in column block `block` (of
  // `blocks` per row tile).
  auto fragmentAt = [&](const LaneRow &at, int64_t blocks, int64_t block,
                        int64_t el) {
    return SmallVector<Value>{e.index(at.tile * blocks + block),
                              e.index(2 * at.half + el)};
  };
  auto setRegisters = [&](Value registers, int64_t blocks, double value) {
    for (int64_t block = 0; block < blocks; ++block)
      for (int64_t i = 0; i < 4; ++i)
        e.store(e.scalar(value), registers, {e.index(block), e.index(i)});
  };

  // The softmax in base 2, as FlashAttention-2 takes it: a lane's scores t
  // are its products s as they are (the scores themselves with a softcap or
  // a score_mod: softcap(scale s), then score_mod), the running max m is in
  // t's units, and p = 2^(c t - c m) is one fma and one ex2 with
  // c = scale log2(e) (log2(e) for scores themselves); so
  // lse = (c ln 2) m + log l.
  const bool scoresScaled = shape.softcap > 0.0 || variants.hasScoreMod();
  const double log2e = 1.4426950408889634;
  const double exponentScaleValue = scoresScaled ? log2e : shape.scale * log2e;
  Value exponentScale = e.scalar(exponentScaleValue);
  Value negExponentScale = e.scalar(-exponentScaleValue);
  Value maxToNatural = e.scalar(scoresScaled ? 1.0 : shape.scale);
  // The score t of the product of tile row r and `key`.
  auto scoreOf = [&](Value product, Value r, Value key) {
    if (!scoresScaled)
      return product;
    Value s = e.softcap(e.fmul(product, e.scalar(shape.scale)), shape.softcap);
    return variants.score(s, batch, headOf(r), queryPositionOf(r), key);
  };

  // Copies `count` rows of `dim` elements into the shared tile `to`, whose
  // rows are `padded` long: row j from source[rowAt(j).first..., 0 .. dim)
  // where rowAt(j).second holds, zeros elsewhere. 16 bytes a copy where a
  // row is whole 16-byte pieces (every row then starts 16-byte aligned, in
  // global memory as in the padded shared rows), all of a thread's copies
  // in flight at once (attn_kernel.async_copy: cp.async on the GPU; they are
  // complete after the thread's next attn_kernel.async_wait); else an element a
  // load.
  auto stageRows =
      [&](Value thread, int64_t count, Value from, Value to, int64_t dim,
          int64_t padded,
          function_ref<std::pair<SmallVector<Value>, Value>(Value)> rowAt) {
        const int64_t lanes = 16 / flash.elementBytes;
        const bool pieces = dim % lanes == 0 && padded % lanes == 0;
        const int64_t step = pieces ? lanes : 1;
        const int64_t perRow = padded / step, threads = flash.threads();
        const int64_t copies = count * perRow;
        auto copy = [&](Value j, Value d) {
          auto [at, isRow] = rowAt(j);
          at.push_back(d);
          Value valid =
              padded <= dim ? isRow : both(isRow, lt(d, e.index(dim)));
          if (pieces)
            AsyncCopyOp::create(b, loc, from, at, to, ValueRange{j, d}, valid,
                                lanes);
          else
            e.store(e.loadOrZero(valid, from, at), to, {j, d});
        };
        // The usual case (whole pieces, the threads a multiple of a row's
        // and the copies of the threads): a thread's column is the same in
        // every pass, and the passes are unrolled, so each copy costs its
        // row's address and predicate alone (a loop spent as much again on
        // the index arithmetic and induction variables).
        const int64_t maxUnrolledPasses = 32;
        if (pieces && threads % perRow == 0 && copies % threads == 0 &&
            copies / threads <= maxUnrolledPasses) {
          Value firstRow = e.div(thread, e.index(perRow));
          Value d = e.mul(e.rem(thread, e.index(perRow)), e.index(step));
          for (int64_t pass = 0; pass < copies / threads; ++pass)
            copy(e.add(firstRow, e.index(pass * (threads / perRow))), d);
          return;
        }
        e.loop(thread, e.index(copies), e.index(threads), [&](Value i) {
          copy(e.div(i, e.index(perRow)),
               e.mul(e.rem(i, e.index(perRow)), e.index(step)));
        });
      };

  // Stage the q tile (waited for with the first key tile's k), clear the
  // registers.
  e.eachThread([&](Value thread) {
    stageRows(thread, TQ, q, qs, D, Dp,
              [&](Value r) -> std::pair<SmallVector<Value>, Value> {
                return {{batch, headOf(r), rowOf(r)}, lt(r, rows)};
              });
    setRegisters(e.registersOf(outRegs, thread), RT * valueBlocks, 0.0);
    Value m = e.registersOf(maxRegs, thread),
          l = e.registersOf(sumRegs, thread);
    for (int64_t slot = 0; slot < 2 * RT; ++slot) {
      e.store(e.scalar(kNegInf), m, e.index(slot));
      e.store(e.scalar(0.0), l, e.index(slot));
    }
  });
  if (treeDepths) {
    if (treeWindow)
      rowStarts = e.shared({TQ}, b.getI32Type());
    if (!shape.variants.empty())
      rowPositions = e.shared({TQ}, b.getI32Type());
    e.forAll(e.index(TQ), [&](Value r) {
      Value node = e.minS(rowOf(r), e.sub(lq, c1));
      TreeNodeKeys tree(e, parents, batch, node, lk, shape.mask, shape.window);
      if (rowStarts)
        memref::StoreOp::create(b, e.toI32(tree.prefixBegin), rowStarts, r);
      if (rowPositions)
        memref::StoreOp::create(b, e.toI32(tree.position), rowPositions, r);
    });
  }

  // The keys some row of the tile sees. Query tiles of the op's mask: from
  // the first row's first to the last row's last (both grow with the row).
  // Else the union of the rows' ranges: decode rows cycle through the
  // query rows once per head, windowed tree nodes start where their depth
  // says.
  Value begin, end;
  // The keys every row of the tile sees, [allBegin, allEnd): key tiles
  // inside it need no mask (with sparse rows' gathered keys, none is taken
  // to be).
  Value allBegin, allEnd;
  if (gathered) {
    listed = e.shared({entriesPerSplit}, b.getI32Type());
    Value listedCount = e.shared({1}, b.getI32Type());
    e.eachThread([&](Value thread) {
      e.ifThen(e.icmp(arith::CmpIPredicate::eq, thread, c0), [&] {
        Value count = forEachListedBlock(
            e, selection, {batch, headOf(c0), rowOf(c0)},
            e.ceilDiv(lk, e.index(bs)), entryFrom, entryTo, {c0},
            [&](Value block, ValueRange it) -> SmallVector<Value> {
              memref::StoreOp::create(b, e.toI32(block), listed, it[0]);
              return {e.add(it[0], c1)};
            })[0];
        memref::StoreOp::create(b, e.toI32(count), listedCount, c0);
      });
    });
    listedKeys = e.mul(e.toIndex(e.loadInt(listedCount, {c0})), e.index(bs));
    begin = c0;
    end = listedKeys;
    allBegin = allEnd = c0;
  } else if (decodeSplit || rowStarts) {
    SmallVector<Value> range =
        e.loop(c0, rows, c1, {to, from, from, to},
               [&](Value r, ValueRange it) -> SmallVector<Value> {
                 auto [rowBegin, rowEnd] = rowKeys(r);
                 return {e.minS(it[0], rowBegin), e.maxS(it[1], rowEnd),
                         e.maxS(it[2], rowBegin), e.minS(it[3], rowEnd)};
               });
    begin = range[0];
    end = e.maxS(range[1], range[0]);
    allBegin = range[2];
    allEnd = range[3];
  } else {
    auto [firstRowBegin, firstRowEnd] = rowKeys(c0);
    auto [lastRowBegin, lastRowEnd] = rowKeys(e.sub(rows, c1));
    begin = firstRowBegin;
    // The block mask's key tiles start at multiples of TK.
    if (blockMask)
      begin = e.mul(e.div(begin, e.index(TK)), e.index(TK));
    end = lastRowEnd;
    allBegin = lastRowBegin;
    allEnd = firstRowEnd;
  }
  Value keyTiles = e.ceilDiv(e.maxS(e.sub(end, begin), c0), e.index(TK));
  // The first key of the tile-th key tile the block walks: the next TK
  // keys of the range, or with a block mask the next listed tile (whose
  // class then says whether any mask_mod work remains).
  auto tileFirstKey = [&](Value tile) -> Value {
    if (!blockMask)
      return e.add(begin, e.mul(tile, e.index(TK)));
    Value last = e.sub(e.dim(tileList, 3), c1);
    SmallVector<Value> at(maskRow);
    at.push_back(e.minS(tile, last));
    return e.mul(e.toIndex(e.loadInt(tileList, at)), e.index(TK));
  };
  if (blockMask)
    keyTiles = e.toIndex(e.loadInt(tileCounts, maskRow));
  // The key at position v of the tile range [begin, end), and whether it is
  // one (inside the range and the keys).
  auto keyAt = [&](Value v) -> std::pair<Value, Value> {
    if (!gathered)
      return {v, lt(v, end)};
    Value entry = e.minS(e.div(v, e.index(bs)), e.index(entriesPerSplit - 1));
    Value key = e.add(e.mul(e.toIndex(e.loadInt(listed, {entry})), e.index(bs)),
                      e.rem(v, e.index(bs)));
    return {key, both(lt(v, end), lt(key, lk))};
  };

  // The k and v rows of key tile `tile`.
  auto keyRowsOf = [&](Value tile) {
    Value firstKey = tileFirstKey(tile);
    return [&, firstKey](Value j) -> std::pair<SmallVector<Value>, Value> {
      auto [key, isKey] = keyAt(e.add(firstKey, j));
      return {{batch, kvHead, key}, isKey};
    };
  };
  // The copies of a tile's k and v overlap the products of the one before
  // them, as in FlashAttention-2: k of the first tile is staged here; v of
  // each tile is copied while its probabilities are computed, and k of the
  // next while P v is. Each phase's copies are waited for at its end,
  // before the barrier after which the next phase reads them. (Copying v
  // during the scores too would overlap more, but its address arithmetic
  // beside the mma operands made decode with D = 256 and a small tree's
  // prefix spill 16 bytes.)
  e.eachThread([&](Value thread) {
    stageRows(thread, TK, k, ks, D, Dp, keyRowsOf(c0));
    AsyncWaitOp::create(b, loc);
  });

  e.loop(c0, keyTiles, c1, [&](Value keyTileIndex) {
    Value firstKey = tileFirstKey(keyTileIndex);
    Value nextTile = e.add(keyTileIndex, c1);

    // S = q k^T into the lanes' registers; each lane turns its elements
    // into scores t (softcapped, masked) and offers its part of its rows'
    // max (read by its warp alone: the warps need not wait for each other
    // here). Tiles whose keys every row sees skip the mask, as
    // FlashAttention-2 masks only the tiles on the mask's edge.
    Value interiorTile =
        both(e.icmp(arith::CmpIPredicate::sge, firstKey, allBegin),
             e.icmp(arith::CmpIPredicate::sle, e.add(firstKey, e.index(TK)),
                    allEnd));
    if (blockMask) {
      SmallVector<Value> at(maskRow);
      at.push_back(e.div(firstKey, e.index(TK)));
      Value tileClass = memref::LoadOp::create(b, tileClasses, at);
      interiorTile = both(
          interiorTile,
          e.icmp(arith::CmpIPredicate::eq, tileClass,
                 arith::ConstantIntOp::create(b, b.getI8Type(), kFullTile)));
    }
    eachWarp(
        [&](Value warpRow, Value lane, Value thread) {
          Value s = e.registersOf(scoreRegs, thread);
          auto scoresOp = WarpMmaOp::create(b, qs, ks, s, warpRow, lane,
                                            /*n=*/TK, /*k=*/Dp);
          scoresOp.setRhsTransposed(true);
          scoresOp.setAccFragment(true);
          scoresOp.setRowTiles(RT);
          MmaFragmentLayout layout(e, warpRow, lane);
          SmallVector<LaneRow> laneRows = laneRowsOf(warpRow, lane);
          // The scores of the lane's elements and its parts of its rows'
          // maxes.
          auto scoreTile = [&](bool masked) {
            // The keys of the lane's columns (the same in all its rows).
            SmallVector<std::pair<Value, Value>> columnKeys;
            if (masked || scoresScaled)
              for (int64_t block = 0; block < keyBlocks; ++block)
                for (int64_t el = 0; el < 2; ++el)
                  columnKeys.push_back(keyAt(e.add(
                      firstKey, layout.accColumn(e, e.index(block), el))));
            SmallVector<Value> partMaxes;
            for (const LaneRow &laneRow : laneRows) {
              std::pair<Value, Value> visibleRange;
              if (masked)
                visibleRange = rowKeys(laneRow.row);
              Value partMax = e.scalar(kNegInf);
              for (int64_t block = 0; block < keyBlocks; ++block)
                for (int64_t el = 0; el < 2; ++el) {
                  SmallVector<Value> at =
                      fragmentAt(laneRow, keyBlocks, block, el);
                  Value key = columnKeys.empty()
                                  ? Value()
                                  : columnKeys[2 * block + el].first;
                  Value score = scoreOf(e.load(s, at), laneRow.row, key);
                  if (masked) {
                    Value isKey = columnKeys[2 * block + el].second;
                    Value visible =
                        both(isKey, both(e.icmp(arith::CmpIPredicate::sge, key,
                                                visibleRange.first),
                                         lt(key, visibleRange.second)));
                    if (variants.hasMaskMod())
                      visible = both(
                          visible,
                          variants.visible(batch, headOf(laneRow.row),
                                           queryPositionOf(laneRow.row), key));
                    score = e.select(visible, score, e.scalar(kNegInf));
                  }
                  if (masked || scoresScaled)
                    e.store(score, s, at);
                  partMax = e.fmax(partMax, score);
                }
              partMaxes.push_back(partMax);
            }
            return partMaxes;
          };
          // A mask_mod may hide keys of any tile but those the block mask
          // found full.
          SmallVector<Value> partMaxes =
              gathered || (variants.hasMaskMod() && !blockMask)
                  ? scoreTile(/*masked=*/true)
                  : e.ifElse(
                        interiorTile, [&] { return scoreTile(false); },
                        [&] { return scoreTile(true); });
          Value quadLane = quadLaneOf(lane);
          for (auto [laneRow, partMax] : llvm::zip(laneRows, partMaxes))
            e.store(partMax, quad, {laneRow.row, quadLane});
        },
        SimtEmitter::Sync::Warp);

    // The online-softmax update of each lane's rows: the row's new max from
    // its 4 lanes' parts; P (rounded to the storage dtype for the tensor
    // cores) to shared memory; the lane's sum and output rescaled. The sum
    // adds the probabilities as stored, so o is a weighted mean of v with
    // exactly P's weights.
    eachWarp([&](Value warpRow, Value lane, Value thread) {
      stageRows(thread, TK, v, vs, Dv, Dvp, keyRowsOf(keyTileIndex));
      Value s = e.registersOf(scoreRegs, thread);
      Value o = e.registersOf(outRegs, thread);
      Value m = e.registersOf(maxRegs, thread);
      Value l = e.registersOf(sumRegs, thread);
      SmallVector<LaneRow> laneRows = laneRowsOf(warpRow, lane);
      // Each row's rescaling alpha, 1 where its max stayed; the output
      // fragment is rescaled only when some row of the lane's changed,
      // which after the first tiles is rare (a branch, not 16 Dv / 8
      // multiplies per row on every tile).
      SmallVector<Value> rescales;
      Value anyChanged;
      for (const LaneRow &laneRow : laneRows) {
        Value r = laneRow.row, h = e.index(laneRow.slot);
        Value tileMax =
            combineQuad(r, [&](Value x, Value y) { return e.fmax(x, y); });
        Value oldMax = e.load(m, h);
        Value newMax = e.fmax(oldMax, tileMax);
        Value safe = e.safeMax(newMax);
        Value changed = e.fcmp(arith::CmpFPredicate::UNE, oldMax, newMax);
        Value rescale = e.select(
            changed, e.exp2(e.fmul(e.fsub(oldMax, safe), exponentScale)),
            e.scalar(1.0));
        Value shift = e.fmul(safe, negExponentScale);
        Value partSum = e.scalar(0.0);
        for (int64_t block = 0; block < keyBlocks; ++block)
          for (int64_t el = 0; el < 2; ++el) {
            SmallVector<Value> at = fragmentAt(laneRow, keyBlocks, block, el);
            Value p = e.exp2(e.fma(e.load(s, at), exponentScale, shift));
            Value rounded = e.widen(e.narrow(p, storage));
            e.store(rounded, s, at);
            partSum = e.fadd(partSum, rounded);
          }
        e.store(e.fma(e.load(l, h), rescale, partSum), l, h);
        e.store(newMax, m, h);
        rescales.push_back(rescale);
        anyChanged =
            anyChanged ? arith::OrIOp::create(b, anyChanged, changed) : changed;
      }
      e.ifThen(anyChanged, [&] {
        for (auto [laneRow, rescale] : llvm::zip(laneRows, rescales))
          for (int64_t block = 0; block < valueBlocks; ++block)
            for (int64_t el = 0; el < 2; ++el) {
              SmallVector<Value> at =
                  fragmentAt(laneRow, valueBlocks, block, el);
              e.store(e.fmul(e.load(o, at), rescale), o, at);
            }
      });
      AsyncWaitOp::create(b, loc); // this tile's v
    });

    // o += P v into the lanes' registers, the next tile's k on its way.
    eachWarp([&](Value warpRow, Value lane, Value thread) {
      e.ifThen(lt(nextTile, keyTiles), [&] {
        stageRows(thread, TK, k, ks, D, Dp, keyRowsOf(nextTile));
      });
      auto outputOp = WarpMmaOp::create(b, e.registersOfWarp(scoreRegs, thread),
                                        vs, e.registersOf(outRegs, thread),
                                        warpRow, lane, /*n=*/Dvp, /*k=*/TK);
      outputOp.setAccumulate(true);
      outputOp.setAccFragment(true);
      outputOp.setLhsFragment(true);
      outputOp.setRowTiles(RT);
      AsyncWaitOp::create(b, loc); // the next tile's k
    });
  });

  // Each row's sum from its 4 lanes' parts, then o = acc / l, gated, and
  // lse = m + log l (by the row's first lane). The tree's prefix and
  // decode splits: their partials, ungated (an empty range gives o = 0 and
  // lse = -inf, which the merge weighs 0).
  eachWarp(
      [&](Value warpRow, Value lane, Value thread) {
        Value l = e.registersOf(sumRegs, thread);
        Value quadLane = quadLaneOf(lane);
        for (const LaneRow &laneRow : laneRowsOf(warpRow, lane))
          e.store(e.load(l, e.index(laneRow.slot)), quad,
                  {laneRow.row, quadLane});
      },
      SimtEmitter::Sync::Warp);
  eachWarp([&](Value warpRow, Value lane, Value thread) {
    Value o = e.registersOf(outRegs, thread);
    Value m = e.registersOf(maxRegs, thread);
    MmaFragmentLayout layout(e, warpRow, lane);
    Value quadLane = quadLaneOf(lane);
    for (const LaneRow &laneRow : laneRowsOf(warpRow, lane)) {
      Value r = laneRow.row;
      e.ifThen(lt(r, rows), [&] {
        Value sum =
            combineQuad(r, [&](Value x, Value y) { return e.fadd(x, y); });
        Value inv = e.reciprocalOrZero(sum);
        SmallVector<Value> at{batch, headOf(r), rowOf(r)};
        if (split)
          at.push_back(split);
        RowGate rowGate(e, shape, gate, at);
        for (int64_t block = 0; block < valueBlocks; ++block)
          for (int64_t el = 0; el < 2; ++el) {
            Value d = layout.accColumn(e, e.index(block), el);
            auto storeElement = [&] {
              Value value = rowGate.apply(
                  e.fmul(e.load(o, fragmentAt(laneRow, valueBlocks, block, el)),
                         inv),
                  d);
              SmallVector<Value> outAt(at);
              outAt.push_back(d);
              e.store(value, out, outAt);
            };
            // Blocks past Dv hold padding only; the last may hold both.
            if ((block + 1) * WarpMmaOp::kFragmentColumns <= Dv)
              storeElement();
            else if (block * WarpMmaOp::kFragmentColumns < Dv)
              e.ifThen(lt(d, e.index(Dv)), storeElement);
          }
        if (lse)
          e.ifThen(e.icmp(arith::CmpIPredicate::eq, quadLane, c0), [&] {
            Value max = e.load(m, e.index(laneRow.slot));
            e.store(e.logSumExp(e.fmul(max, maxToNatural), sum), lse, at);
          });
      });
    }
  });
  func::ReturnOp::create(b);
  return func;
}

} // namespace

//===----------------------------------------------------------------------===//
// Block masks
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildSimtTileClassKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const SimtFlashTiling &flash,
    const GpuTiling &tiling, TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createSimtKernel(builder, loc, name, bindingTypes, tiling,
                                       "tile_classes");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  Value q = args[0], k = args[1], classes = args[2], thread = args.back();
  VariantEmitter variants(e, shape.variants, shape.variants.buffersOf(func));
  const int64_t TQ = flash.queryTile(), TK = flash.keyTile;
  Value c1 = e.index(1);

  // Thread order (bm, hm, query tile, key tile), the key tile fastest.
  Value keyTile = e.rem(thread, e.dim(classes, 3));
  Value rest = e.div(thread, e.dim(classes, 3));
  Value queryTile = e.rem(rest, e.dim(classes, 2));
  rest = e.div(rest, e.dim(classes, 2));
  Value head = e.rem(rest, e.dim(classes, 1));
  Value batch = e.div(rest, e.dim(classes, 1));
  Value lq = e.dim(q, 2), lk = e.dim(k, 2);
  Value firstRow = e.mul(queryTile, e.index(TQ));
  Value rowEnd = e.minS(lq, e.add(firstRow, e.index(TQ)));
  Value firstKey = e.mul(keyTile, e.index(TK));
  Value keyEnd = e.minS(lk, e.add(firstKey, e.index(TK)));
  Value firstPosition = e.sub(lk, lq);
  auto flag = [&](bool value) {
    return arith::ConstantIntOp::create(b, b.getI1Type(), value).getResult();
  };
  SmallVector<Value> found = e.loop(
      firstRow, rowEnd, c1, {flag(false), flag(true)},
      [&](Value row, ValueRange rowIt) {
        Value queryPos = e.add(firstPosition, row);
        return e.loop(firstKey, keyEnd, c1, rowIt,
                      [&](Value key, ValueRange it) -> SmallVector<Value> {
                        Value visible =
                            variants.visible(batch, head, queryPos, key);
                        return {e.orI(it[0], visible), e.andI(it[1], visible)};
                      });
      });
  auto i8 = [&](int64_t value) -> Value {
    return arith::ConstantIntOp::create(b, b.getI8Type(), value);
  };
  Value tileClass =
      e.select(found[0], e.select(found[1], i8(kFullTile), i8(kPartialTile)),
               i8(kEmptyTile));
  memref::StoreOp::create(b, tileClass, classes,
                          ValueRange{batch, head, queryTile, keyTile});
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtTileListKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const SimtFlashTiling &flash,
    const GpuTiling &tiling, TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createSimtKernel(builder, loc, name, bindingTypes, tiling, "tile_list");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  Value q = args[0], k = args[1], classes = args[2], list = args[3],
        counts = args[4], thread = args.back();
  const int64_t TQ = flash.queryTile(), TK = flash.keyTile;
  Value c0 = e.index(0), c1 = e.index(1);

  // Thread order (bm, hm, query tile), the tile fastest.
  Value queryTile = e.rem(thread, e.dim(classes, 2));
  Value rest = e.div(thread, e.dim(classes, 2));
  Value head = e.rem(rest, e.dim(classes, 1));
  Value batch = e.div(rest, e.dim(classes, 1));
  Value lq = e.dim(q, 2), lk = e.dim(k, 2);
  // The key tiles the flash kernel's query tile visits: from its first
  // row's first visible key to its last row's last (under the op's mask).
  Value firstRow = e.mul(queryTile, e.index(TQ));
  Value lastRow = e.sub(e.minS(lq, e.add(firstRow, e.index(TQ))), c1);
  Value begin = visibleKeys(e, shape, firstRow, lq, lk, c0, lk).first;
  Value end = visibleKeys(e, shape, lastRow, lq, lk, c0, lk).second;
  Value count = e.loop(
      e.div(begin, e.index(TK)), e.ceilDiv(e.maxS(end, begin), e.index(TK)), c1,
      {c0}, [&](Value tile, ValueRange it) -> SmallVector<Value> {
        Value tileClass = memref::LoadOp::create(
            b, classes, ValueRange{batch, head, queryTile, tile});
        Value listed =
            e.icmp(arith::CmpIPredicate::ne, tileClass,
                   arith::ConstantIntOp::create(b, b.getI8Type(), kEmptyTile));
        e.ifThen(listed, [&] {
          memref::StoreOp::create(b, e.toI32(tile), list,
                                  ValueRange{batch, head, queryTile, it[0]});
        });
        return {e.select(listed, e.add(it[0], c1), it[0])};
      })[0];
  memref::StoreOp::create(b, e.toI32(count), counts,
                          ValueRange{batch, head, queryTile});
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtFlashKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const SimtFlashTiling &flash,
    const GpuTiling &tiling, TypeRange bindingTypes, KeyPart part) {
  return buildFlash(builder, loc, name, shape, flash, tiling, bindingTypes,
                    part, /*decodeSplit=*/false);
}

func::FuncOp mlir::attn::buildSimtFlashDecodeKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const SimtFlashTiling &flash,
    const GpuTiling &tiling, TypeRange bindingTypes, KeyPart part) {
  return buildFlash(builder, loc, name, shape, flash, tiling, bindingTypes,
                    part, /*decodeSplit=*/true);
}

func::FuncOp mlir::attn::buildSimtMergeKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const GpuTiling &tiling,
    TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createSimtKernel(builder, loc, name, bindingTypes, tiling, "merge");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  // A thread per (row, feature d), d fastest: a decode call has few rows,
  // and a thread per row looping over its features and every split left
  // the GPU idle (it took longer than the split kernel it merged).
  Value thread = func.getArguments().back();
  Value dv = e.index(shape.valueDim);
  Value d = e.rem(thread, dv);
  SplitKvMerge merge(e, func, shape, e.div(thread, dv));
  Value batch = merge.batch, head = merge.head, row = merge.row,
        safe = merge.maxLse;
  Value c0 = e.index(0), c1 = e.index(1);

  // lse = log sum_s exp(lse_s); o = sum_s exp(lse_s - lse) o_s. Partials
  // of empty ranges have lse_s = -inf and weigh 0.
  SmallVector<Value> sums =
      e.loop(c0, merge.splits, c1, {e.scalar(0.0), e.scalar(0.0)},
             [&](Value s, ValueRange it) -> SmallVector<Value> {
               Value weight = e.exp(e.fsub(
                   e.load(merge.partialLse, {batch, head, row, s}), safe));
               return {e.fma(weight,
                             e.load(merge.partialOut, {batch, head, row, s, d}),
                             it[0]),
                       e.fadd(it[1], weight)};
             });
  Value acc = sums[0], total = sums[1];
  SmallVector<Value> at{batch, head, row};
  RowGate rowGate(e, shape, merge.gate, at);
  SmallVector<Value> outAt(at);
  outAt.push_back(d);
  e.store(rowGate.apply(e.fmul(acc, e.reciprocalOrZero(total)), d), merge.out,
          outAt);
  if (merge.lse)
    e.ifThen(e.icmp(arith::CmpIPredicate::eq, d, c0),
             [&] { e.store(e.logSumExp(safe, total), merge.lse, at); });
  func::ReturnOp::create(b);
  return func;
}
