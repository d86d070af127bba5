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

#include "passes/kernels/cuda/SimtKernels.h"

#include "passes/kernels/KernelEmitter.h"
#include "passes/kernels/KeySelection.h"

#include "Attn/AttnOps.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <set>

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

void SimtEmitter::eachThreadIn(ThreadRange range,
                               function_ref<void(Value thread)> body,
                               Sync sync) {
  assert(blockThreads > 0 && "thread loops are for block kernels");
  const int64_t count = range.count > 0 ? range.count : blockThreads;
  assert(range.first >= 0 && range.first + count <= blockThreads &&
         "a range of the block's threads");
  auto loop = scf::ParallelOp::create(
      b, ValueRange{index(range.first)}, ValueRange{index(range.first + count)},
      ValueRange{index(1)}, [&](OpBuilder &nested, Location, ValueRange ivs) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        body(ivs[0]);
      });
  loop->setAttr(kThreadLoopAttr, b.getUnitAttr());
  if (sync == Sync::Warp)
    loop->setAttr(kWarpSyncAttr, b.getUnitAttr());
  else if (sync == Sync::Mbarriers)
    loop->setAttr(kMbarrierSyncAttr, b.getUnitAttr());
}

void SimtEmitter::byRoles(function_ref<void()> body) {
  // no_inline: the canonicalizer would dissolve the region into its parent.
  auto region =
      scf::ExecuteRegionOp::create(b, TypeRange{}, /*no_inline=*/true);
  region->setAttr(kByRolesAttr, b.getUnitAttr());
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&region.getRegion().emplaceBlock());
  body();
  scf::YieldOp::create(b);
}

void SimtEmitter::forAll(Value count, function_ref<void(Value i)> body) {
  eachThread([&](Value thread) {
    loop(thread, count, index(blockThreads), [&](Value i) { body(i); });
  });
}

/// The byte at which a lane reads or writes element [row, col] of the
/// shared `buffer` (rows of its last dimension).
static int64_t sharedByteOf(Value buffer, int64_t row, int64_t col) {
  auto type = cast<MemRefType>(buffer.getType());
  const int64_t bytes = type.getElementTypeBitWidth() / 8;
  return (row * type.getShape().back() + col) * bytes;
}

void SimtEmitter::forAllTransposing(int64_t rows, int64_t cols, Value from,
                                    Value to,
                                    function_ref<void(Value r, Value c)> body) {
  constexpr int64_t lanes = 32;
  // The wavefronts of a warp whose lane l takes element at(l).
  auto cost = [&](function_ref<std::pair<int64_t, int64_t>(int64_t)> at) {
    SmallVector<std::optional<int64_t>> reads, writes;
    for (int64_t lane = 0; lane < std::min(lanes, rows * cols); ++lane) {
      auto [r, c] = at(lane);
      reads.push_back(sharedByteOf(from, r, c));
      writes.push_back(sharedByteOf(to, c, r));
    }
    auto bytesOf = [](Value buffer) {
      return int64_t(
          cast<MemRefType>(buffer.getType()).getElementTypeBitWidth() / 8);
    };
    return sharedWavefronts(reads, bytesOf(from)).first +
           sharedWavefronts(writes, bytesOf(to)).first;
  };
  // Lanes in row order, as forAll takes them; then the tiles that divide
  // the block.
  int64_t best = cost([&](int64_t l) { return std::pair{l / cols, l % cols}; });
  int64_t laneRows = 0;
  for (int64_t candidate = 1; candidate <= lanes; candidate *= 2) {
    const int64_t laneCols = lanes / candidate;
    if (rows % candidate || cols % laneCols)
      continue;
    const int64_t wavefronts = cost([&](int64_t l) {
      return std::pair{l / laneCols, l % laneCols};
    });
    if (wavefronts < best)
      best = wavefronts, laneRows = candidate;
  }
  if (!laneRows)
    return forAll(index(rows * cols), [&](Value x) {
      body(div(x, index(cols)), rem(x, index(cols)));
    });
  const int64_t laneCols = lanes / laneRows, tilesAcross = cols / laneCols;
  forAll(index(rows * cols), [&](Value x) {
    Value tile = div(x, index(lanes)), lane = rem(x, index(lanes));
    Value r = add(mul(div(tile, index(tilesAcross)), index(laneRows)),
                  div(lane, index(laneCols)));
    Value c = add(mul(rem(tile, index(tilesAcross)), index(laneCols)),
                  rem(lane, index(laneCols)));
    body(r, c);
  });
}

void SimtEmitter::forAllBatched(
    Value count, int64_t batch,
    function_ref<SmallVector<Value>(Value i, Value inRange)> load,
    function_ref<void(Value i, ValueRange loaded)> store) {
  eachThread([&](Value thread) {
    loop(thread, count, index(blockThreads * batch), [&](Value first) {
      SmallVector<Value> indices, inRange;
      SmallVector<SmallVector<Value>> loaded;
      for (int64_t step = 0; step < batch; ++step) {
        indices.push_back(add(first, index(step * blockThreads)));
        inRange.push_back(
            icmp(arith::CmpIPredicate::ult, indices.back(), count));
        loaded.push_back(load(indices.back(), inRange.back()));
      }
      for (int64_t step = 0; step < batch; ++step)
        ifThen(inRange[step], [&] { store(indices[step], loaded[step]); });
    });
  });
}

void SimtEmitter::stageRows(
    Value thread, int64_t count, ArrayRef<std::pair<Value, Value>> fromTo,
    int64_t dim, int64_t padded,
    function_ref<std::pair<SmallVector<Value>, Value>(Value)> rowAt,
    Value firstColumn, ThreadRange sharing) {
  if (sharing.count > 0)
    thread = sub(thread, index(sharing.first));
  Type element =
      cast<MemRefType>(fromTo.front().second.getType()).getElementType();
  assert(llvm::all_of(fromTo,
                      [&](auto pair) {
                        return cast<MemRefType>(pair.second.getType())
                                   .getElementType() == element;
                      }) &&
         "the pairs share their element type");
  const int64_t elementBytes = element.getIntOrFloatBitWidth() / 8;
  // The widest copy (16, 8 or 4 bytes) that whole rows are made of, in
  // global memory and in the padded shared rows.
  int64_t lanes = 16 / elementBytes;
  while (lanes > 1 && (dim % lanes != 0 || padded % lanes != 0))
    lanes /= 2;
  const bool pieces = lanes * elementBytes >= 4;
  const int64_t step = pieces ? lanes : 1;
  const int64_t perRow = padded / step;
  const int64_t threads = sharing.count > 0 ? sharing.count : blockThreads;
  const int64_t copies = count * perRow;
  auto copy = [&](Value j, Value d) {
    auto [at, isRow] = rowAt(j);
    Value column = firstColumn ? add(firstColumn, d) : d;
    at.push_back(column);
    Value valid = padded <= dim && !firstColumn
                      ? isRow
                      : andI(isRow, icmp(arith::CmpIPredicate::ult, column,
                                         index(dim)));
    for (auto [from, to] : fromTo) {
      SmallVector<Value, 4> target = tileElement(*this, to, j, d);
      if (pieces)
        AsyncCopyOp::create(b, from, at, to, target, valid, lanes);
      else
        store(loadOrZero(valid, from, at), to, target);
    }
  };
  // Which copy a thread makes: consecutive threads take consecutive
  // pieces of a row, or, in a core-matrix tiled tile, the 8 rows of a core
  // matrix first. There one row's 16-byte pieces lie 128 bytes apart, in
  // the same 4 of shared memory's 32 banks, so a warp writing 2 rows' 16
  // pieces (D = 128) would take 4 times the wavefronts it needs; 8 threads
  // down a core matrix write its 128 contiguous bytes instead (a warp: 4
  // whole core matrices), and still read 64 contiguous bytes of each row.
  const bool coreMatrixOrder =
      pieces &&
      cast<MemRefType>(fromTo.front().second.getType()).getRank() == 4 &&
      step == WarpMmaOp::kCoreMatrixSide && count % step == 0 &&
      threads % step == 0;
  const int64_t unit = coreMatrixOrder ? WarpMmaOp::kCoreMatrixSide : 1;
  // Copy i is piece (i / unit) % perRow of row (i / unit / perRow) unit +
  // i % unit.
  const int64_t unitThreads = threads / unit;
  // The usual case (whole pieces, a pass of the threads over whole units of
  // rows or a row's pieces a whole number of passes): each thread's row and
  // column are its own base plus a constant of the pass, and the passes are
  // unrolled, so each copy costs its row's address and predicate alone (a
  // loop spent as much again on the index arithmetic and induction
  // variables).
  const int64_t maxUnrolledPasses = 32;
  if (pieces && threads % unit == 0 &&
      (unitThreads % perRow == 0 || perRow % unitThreads == 0) &&
      copies % threads == 0 && copies / threads <= maxUnrolledPasses) {
    Value group = div(thread, index(unit)), inUnit = rem(thread, index(unit));
    const bool wholeRows = unitThreads % perRow == 0;
    Value firstRow =
        wholeRows ? add(mul(div(group, index(perRow)), index(unit)), inUnit)
                  : inUnit;
    Value firstPiece =
        mul(wholeRows ? rem(group, index(perRow)) : group, index(step));
    for (int64_t pass = 0; pass < copies / threads; ++pass) {
      const int64_t passGroup = pass * unitThreads;
      copy(add(firstRow, index(passGroup / perRow * unit)),
           add(firstPiece, index(passGroup % perRow * step)));
    }
    return;
  }
  loop(thread, index(copies), index(threads), [&](Value i) {
    Value group = div(i, index(unit));
    copy(add(mul(div(group, index(perRow)), index(unit)), rem(i, index(unit))),
         mul(rem(group, index(perRow)), index(step)));
  });
}

void SimtEmitter::storeRows(
    Value thread, int64_t count, Value from, Value to, int64_t dim,
    function_ref<std::pair<SmallVector<Value>, Value>(Value)> rowAt) {
  Type element = cast<MemRefType>(from.getType()).getElementType();
  const int64_t elementBytes = element.getIntOrFloatBitWidth() / 8;
  const int64_t lanes = dim * elementBytes % 16 == 0 ? 16 / elementBytes : 1;
  const int64_t perRow = dim / lanes;
  auto vectorType = VectorType::get({lanes}, element);
  loop(thread, index(count * perRow), index(blockThreads), [&](Value i) {
    Value j = div(i, index(perRow)), d = mul(rem(i, index(perRow)), index(lanes));
    auto [at, isRow] = rowAt(j);
    at.push_back(d);
    ifThen(isRow, [&] {
      if (lanes == 1)
        return store(load(from, {j, d}), to, at);
      llvm::MaybeAlign align(16);
      Value piece = vector::LoadOp::create(b, vectorType, from, ValueRange{j, d},
                                           /*nontemporal=*/false, align);
      vector::StoreOp::create(b, piece, to, at, /*nontemporal=*/false, align);
    });
  });
}

void SimtEmitter::inTwoStages(
    Value count,
    function_ref<void(Value index, Value next, int64_t stage)> body) {
  Value c0 = index(0), c1 = index(1), c2 = index(2);
  loop(c0, ceilDiv(count, c2), c1, [&](Value pair) {
    for (int64_t stage = 0; stage < 2; ++stage) {
      Value at = add(mul(pair, c2), index(stage));
      ifThen(icmp(arith::CmpIPredicate::ult, at, count),
             [&] { body(at, add(at, c1), stage); });
    }
  });
}

std::pair<Value, Value> SimtEmitter::shareOf(Value t, Value total) {
  Value perShare = ceilDiv(total, index(blockThreads));
  Value first = minS(mul(t, perShare), total);
  return {first, minS(add(first, perShare), total)};
}

Value SimtEmitter::sumOfShares(Value buffer, Value t) {
  Type element = cast<MemRefType>(buffer.getType()).getElementType();
  Value zero =
      element.isF64()
          ? arith::ConstantOp::create(b, b.getF64FloatAttr(0.0)).getResult()
          : index(0);
  return loop(index(0), t, index(1), {zero}, [&](Value u, ValueRange sum) {
    Value x = memref::LoadOp::create(b, buffer, ValueRange{u});
    return SmallVector<Value>{
        element.isF64()
            ? fadd(sum[0], x)
            : add(sum[0], arith::IndexCastOp::create(b, b.getIndexType(), x))};
  })[0];
}

std::pair<Value, Value>
mlir::attn::visibleKeys(SimtEmitter &e, const SoftmaxAttentionShape &shape,
                        Value row, Value lq, Value lk, Value from, Value to) {
  Value pos = e.add(e.sub(lk, lq), row);
  Value begin = from, end = to;
  if (shape.mask != MaskKind::None)
    end = e.minS(end, e.add(pos, e.index(1)));
  if (masksEarlyKeys(shape.mask))
    begin = e.maxS(begin, firstVisibleKey(e, shape.mask, shape.window, pos));
  return {begin, e.maxS(end, begin)};
}

SimtRowSoftmax::SimtRowSoftmax(SimtEmitter &e,
                               const SoftmaxAttentionShape &shape,
                               const SoftmaxBindings &inputs,
                               const KeyRows &keys,
                               const QueryRowOfWorkgroup &at, Value queryPos,
                               ValueRange variantBuffers)
    : e(e), shape(shape), keys(keys), k(inputs.k), v(inputs.v), batch(at.batch),
      head(at.head), queryPos(queryPos), rowAt(at.at(at.head)),
      variants(e, shape.variants, variantBuffers) {
  Value q = inputs.q;
  Value c0 = e.index(0), c1 = e.index(1);
  kvHead = e.div(head, e.index(shape.numHeads / shape.numKvHeads));
  // The scaled query row, read once.
  query = e.scratch(shape.headDim);
  e.loop(c0, e.index(shape.headDim), c1, [&](Value d) {
    e.store(e.fmul(e.load(q, withIndex(rowAt, d)), e.scalar(shape.scale)),
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
  SmallVector<Value> keyRow = keys.at(batch, kvHead, key);
  Value score =
      e.loop(c0, e.index(shape.headDim), c1, {e.scalar(0.0)},
             [&](Value d, ValueRange dot) {
               return SmallVector<Value>{e.fma(
                   e.load(query, d), e.load(k, withIndex(keyRow, d)), dot[0])};
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
    e.store(e.fma(p, e.load(v, withIndex(keyRow, d)),
                  e.fmul(e.load(acc, d), rescale)),
            acc, d);
  });
  return {max, e.fma(state[1], rescale, p)};
}

void SimtRowSoftmax::storePartial(ValueRange state, Value partialOut,
                                  Value partialLse, Value split) {
  // The normalized partial and its log-sum-exp (0 and -inf when empty).
  Value inv = e.reciprocalOrZero(state[1]);
  SmallVector<Value> at = withIndex(rowAt, split);
  e.loop(e.index(0), e.index(shape.valueDim), e.index(1), [&](Value d) {
    e.store(e.fmul(e.load(acc, d), inv), partialOut, withIndex(at, d));
  });
  e.store(e.logSumExp(state[0], state[1]), partialLse, at);
}

int64_t SimtFlashTiling::sharedBytes() const {
  const int64_t rows = queryTile(), keys = keyTile;
  auto buffer = [](int64_t elements, int64_t bytes) {
    return roundUp(elements * bytes, 16);
  };
  // The buffers the flash kernel allocates, padded rows included.
  return buffer(rows * headStride(), elementBytes) +           // q tile
         stages * buffer(keys * headStride(), elementBytes) +  // k tiles
         stages * buffer(keys * valueStride(), elementBytes) + // v tiles
         buffer(valueParts * rows * kLanesPerRow, 4) +         // quad exchange
         (producerWarpgroup ? buffer(8, 8) : 0); // the slots' mbarriers
}

namespace {
/// The most warps of a block whose values are split (registers for 255
/// each).
constexpr int64_t kMaxValuePartWarps = 8;

/// Values wider than 256 columns (DeepSeek's latent values: 512) are split
/// into parts of at most 128 over warps of the same rows, when the parts
/// divide the values exactly (no part holds padding alone): one warp's
/// whole fragment would take 4 registers per 8 columns.
int64_t valuePartsFor(const SoftmaxAttentionShape &shape) {
  const int64_t fragmentColumns = WarpMmaOp::kFragmentColumns;
  const int64_t paddedValueDim = roundUp(shape.valueDim, fragmentColumns);
  int64_t valueParts = 1;
  if (paddedValueDim > 256)
    while (paddedValueDim / valueParts > 128 &&
           shape.valueDim % (2 * valueParts * fragmentColumns) == 0)
      valueParts *= 2;
  return valueParts;
}
} // namespace

SimtFlashTiling SimtFlashTiling::choose(const SoftmaxAttentionShape &shape,
                                        Type storage, const GpuTiling &tiling,
                                        int64_t maxWarps, int64_t maxRowTiles) {
  // Largest first. FlashAttention-2 tiles head dims up to 128 on
  // sm_80/sm_90 with 4 warps of 32 rows (128) over 64 keys; here 32 rows
  // per warp take 32-key tiles, since the score fragments of 64 keys would
  // take the registers past 255 (ptxas spilled 64 bytes at D = 128).
  // `warps` of rows, each as many warps as the values have parts.
  const int64_t valueParts = valuePartsFor(shape);
  if (valueParts > 1)
    maxWarps = std::max<int64_t>(
        1, std::min(maxWarps, kMaxValuePartWarps / valueParts));
  auto make = [&](int64_t rowTiles, int64_t warps, int64_t keyTile) {
    SimtFlashTiling flash;
    flash.rowTiles = rowTiles;
    flash.warps = warps * valueParts;
    flash.valueParts = valueParts;
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
  // wgmma: warpgroups of 4 warps of 16 rows (as many as the tiling asks,
  // if they fit, else fewer); value dims of at most 256 (the widest
  // product).
  const bool warpgroups =
      tiling.flashWarpgroups > 0 && tensorCores &&
      maxWarps >= WarpMmaOp::kWarpgroupWarps &&
      roundUp(shape.valueDim, 8) <= WarpMmaOp::kMaxWarpgroupColumns;
  if (warpgroups) {
    maxRowTiles = 1;
    maxWarps = WarpMmaOp::kWarpgroupWarps * tiling.flashWarpgroups;
  }
  auto fits = [&](SimtFlashTiling flash, int64_t budget) {
    flash.warpgroupMma =
        warpgroups && flash.warps % WarpMmaOp::kWarpgroupWarps == 0;
    flash.overlapsProducts = flash.warpgroupMma && flash.paddedValueDim <= 128;
    flash.stages = flash.overlapsProducts ? 2 : 1;
    flash.producerWarpgroup = flash.overlapsProducts && tiling.flashProducer;
    return flash.sharedBytes() <= budget ? std::optional(flash) : std::nullopt;
  };
  for (int64_t budget : {tiling.maxSharedBytes / 2, tiling.maxSharedBytes})
    for (int64_t rowTiles = maxRowTiles; rowTiles >= 1; rowTiles /= 2)
      for (int64_t warps = maxWarps; warps >= 1; warps /= 2)
        for (int64_t keyTile : keyTiles(rowTiles))
          if (auto flash = fits(make(rowTiles, warps, keyTile), budget))
            return *flash;
  return make(1, 1, 16);
}

SimtFlashTiling
SimtFlashTiling::chooseForDecode(const SoftmaxAttentionShape &shape,
                                 Type storage, const GpuTiling &tiling) {
  const int64_t rows = shape.numHeads / shape.numKvHeads *
                       std::max<int64_t>(tiling.decodeMaxQueries, 1);
  // Warps of rows (each as many warps as choose splits the values into).
  const int64_t valueParts = valuePartsFor(shape);
  int64_t warps = 1;
  while (warps < 4 && warps * WarpMmaOp::kRows < rows &&
         2 * warps * valueParts <= kMaxValuePartWarps)
    warps *= 2;
  // Decode waits on memory: mma.sync's warps of 16 rows, not wgmma.
  GpuTiling decodeTiling = tiling;
  decodeTiling.flashWarpgroups = 0;
  SimtFlashTiling flash = choose(shape, storage, decodeTiling, warps);
  // Above 128 value channels the output fragment alone takes 128 registers
  // or more: 32-key tiles (16 score registers, not 32) keep decode with
  // D = 256 from spilling, at no cost to a kernel that waits on memory.
  if (flash.valueColumnsPerWarp() > 128 && flash.keyTile > 32)
    flash.keyTile = 32;
  // Two stages of k and v, each half as many keys: the next tile's copies
  // in flight while one is used, in the shared memory of one stage, so
  // that as many blocks fit on an SM as the host's split count assumes.
  if (flash.keyTile >= 2 * WarpMmaOp::kReductionStep) {
    flash.keyTile /= 2;
    flash.stages = 2;
  }
  return flash;
}

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

void mlir::attn::emitSplitKvMerge(SimtEmitter &e,
                                  const SoftmaxAttentionShape &shape,
                                  const SplitKvMerge &merge, Value d) {
  Value c0 = e.index(0), c1 = e.index(1);
  // lse = log sum_s exp(lse_s); o = sum_s exp(lse_s - lse) o_s. Partials
  // of empty ranges have lse_s = -inf and weigh 0. The splits go a batch
  // at a time, the batch's loads issued before any of its arithmetic:
  // they do not depend on the sums, but the GPU issues in order, and a
  // split a step waits a memory latency per split (with few rows, as in
  // decode, nothing else hides it). The sums are kept against the
  // largest lse so far and rescaled when a batch raises it (one pass over
  // the splits; a first pass for the largest lse waited a latency per
  // split). They keep the order of s.
  const int64_t batchSplits = 32;
  Value lastSplit = e.sub(merge.splits, c1);
  Value batches = e.ceilDiv(merge.splits, e.index(batchSplits));
  SmallVector<Value> sums = e.loop(
      c0, batches, c1, {e.scalar(kNegInf), e.scalar(0.0), e.scalar(0.0)},
      [&](Value batch, ValueRange it) -> SmallVector<Value> {
        SmallVector<Value> lses, outs;
        for (int64_t i = 0; i < batchSplits; ++i) {
          Value s = e.add(e.mul(batch, e.index(batchSplits)), e.index(i));
          SmallVector<Value> at = merge.partialAt(e.minS(s, lastSplit));
          lses.push_back(
              e.select(e.icmp(arith::CmpIPredicate::slt, s, merge.splits),
                       e.load(merge.partialLse, at), e.scalar(kNegInf)));
          at.push_back(d);
          outs.push_back(e.load(merge.partialOut, at));
        }
        Value max = it[0];
        for (Value lse : lses)
          max = e.fmax(max, lse);
        // exp(-inf - safe) = 0 rescales the empty sums of a row whose
        // splits so far were all empty.
        Value safe = e.safeMax(max);
        Value rescale = e.exp(e.fsub(it[0], safe));
        Value acc = e.fmul(it[1], rescale), total = e.fmul(it[2], rescale);
        for (auto [lse, out] : llvm::zip(lses, outs)) {
          Value weight = e.exp(e.fsub(lse, safe));
          acc = e.fma(weight, out, acc);
          total = e.fadd(total, weight);
        }
        return {max, acc, total};
      });
  Value safe = e.safeMax(sums[0]);
  Value acc = sums[1], total = sums[2];
  SmallVector<Value> at = merge.rowAt();
  RowGate rowGate(e, shape, merge.gate, at);
  SmallVector<Value> outAt(at);
  outAt.push_back(d);
  KernelEmitter::RowEnd end = e.endSoftmaxRow(safe, total, merge.sink());
  e.store(rowGate.apply(e.fmul(acc, end.scale), d), merge.out, outAt);
  if (merge.lse)
    e.ifThen(e.icmp(arith::CmpIPredicate::eq, d, c0),
             [&] { e.store(end.lse, merge.lse, at); });
}

func::FuncOp mlir::attn::buildSimtZeroKernel(OpBuilder &builder, Location loc,
                                             StringRef name,
                                             const GpuTiling &tiling,
                                             TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createSimtKernel(builder, loc, name, bindingTypes, tiling, "zero");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  memref::StoreOp::create(b, e.i32(0), func.getArgument(0),
                          ValueRange{func.getArguments().back()});
  func::ReturnOp::create(b);
  return func;
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
  // A ragged batch's entries past the plan have no row.
  if (merge.hasRow)
    e.ifThen(merge.hasRow, [&] { emitSplitKvMerge(e, shape, merge, d); });
  else
    emitSplitKvMerge(e, shape, merge, d);
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtRaggedPlanKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const RaggedPlan &plan,
    DictionaryAttr tiling, int64_t blockThreads, TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "ragged_plan");
  func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b, blockThreads);
  RaggedPlanner planner(e, shape, plan, func.getArguments());
  Type i64 = b.getI64Type();
  Value decodeKeysOfShare = e.shared({blockThreads}, i64);
  Value entriesOfShare = e.shared({blockThreads, 3}, i64);
  Value c0 = e.index(0), c1 = e.index(1), threads = e.index(blockThreads);
  Value batch = planner.batch();
  // Thread t plans its share of the sequences.
  auto shareOf = [&](Value t) { return e.shareOf(t, batch); };
  auto sumOf = [&](Value buffer, Value shares,
                   std::optional<int64_t> column) -> Value {
    return e.loop(c0, shares, c1, {c0}, [&](Value u, ValueRange sum) {
      Value x = column ? e.loadInt(buffer, {u, e.index(*column)})
                       : e.loadInt(buffer, {u});
      return SmallVector<Value>{
          e.add(sum[0], arith::IndexCastOp::create(b, b.getIndexType(), x))};
    })[0];
  };
  auto store = [&](Value x, Value buffer, ValueRange at) {
    memref::StoreOp::create(b, arith::IndexCastOp::create(b, i64, x), buffer,
                            at);
  };
  auto splitSize = [&] {
    return planner.chunkFor(sumOf(decodeKeysOfShare, threads, std::nullopt));
  };

  // The decode keys of each share.
  e.eachThread([&](Value t) {
    auto [first, end] = shareOf(t);
    Value keys = e.loop(first, end, c1, {c0}, [&](Value seq, ValueRange sum) {
      return SmallVector<Value>{e.add(sum[0], planner.decodeKeys(seq))};
    })[0];
    store(keys, decodeKeysOfShare, t);
  });
  // The entries of each share, under the split size of all decode keys.
  e.eachThread([&](Value t) {
    Value chunk = splitSize();
    auto [first, end] = shareOf(t);
    SmallVector<Value> counts =
        e.loop(first, end, c1, {c0, c0, c0}, [&](Value seq, ValueRange sum) {
          std::array<Value, 3> more = planner.entries(seq, chunk);
          SmallVector<Value> next;
          for (auto [count, add] : llvm::zip(sum, more))
            next.push_back(e.add(count, add));
          return next;
        });
    for (int64_t table = 0; table < 3; ++table)
      store(counts[table], entriesOfShare, {t, e.index(table)});
  });
  // Each share writes its entries after those of the shares before it;
  // the entries past all of them have no work.
  e.eachThread([&](Value t) {
    Value chunk = splitSize();
    auto [first, end] = shareOf(t);
    SmallVector<Value> at, total;
    for (int64_t table = 0; table < 3; ++table) {
      at.push_back(sumOf(entriesOfShare, t, table));
      total.push_back(sumOf(entriesOfShare, threads, table));
    }
    e.loop(first, end, c1, at, [&](Value seq, ValueRange next) {
      std::array<Value, 3> written =
          planner.write(seq, chunk, SmallVector<Value>(next));
      SmallVector<Value> after;
      for (auto [count, add] : llvm::zip(next, written))
        after.push_back(e.add(count, add));
      return after;
    });
    for (int table = 0; table < 3; ++table)
      planner.markUnused(table, e.add(total[table], t), threads);
  });
  func::ReturnOp::create(b);
  return func;
}

std::pair<int64_t, int64_t>
mlir::attn::sharedWavefronts(ArrayRef<std::optional<int64_t>> laneBytes,
                             int64_t bytes) {
  constexpr int64_t banks = 32, bankBytes = 4, wavefrontBytes = 128;
  const int64_t phaseLanes =
      std::clamp<int64_t>(wavefrontBytes / bytes, 1, int64_t(laneBytes.size()));
  int64_t taken = 0, fewest = 0;
  for (size_t first = 0; first < laneBytes.size(); first += phaseLanes) {
    std::set<int64_t> words;
    for (std::optional<int64_t> byte : laneBytes.slice(
             first, std::min<size_t>(phaseLanes, laneBytes.size() - first))) {
      if (!byte)
        continue;
      for (int64_t word = *byte / bankBytes; word * bankBytes < *byte + bytes;
           ++word)
        words.insert(word);
    }
    SmallVector<int64_t> perBank(banks, 0);
    for (int64_t word : words)
      ++perBank[word % banks];
    taken += *llvm::max_element(perBank);
    fewest += llvm::divideCeil(words.size(), banks);
  }
  return {taken, fewest};
}
