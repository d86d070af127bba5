//===- SimtSelectionKernels.cpp - CUDA kernels of sparsity and trees ------===//
//
// SPEC §1.3-1.4 as CUDA thread kernels (SimtKernels.h): scalar scf +
// memref + math, so that the same bodies also run on the CPU
// (cuda_kernels_on_cpu) and are checked against the float64 reference there.
// What needs a buffer per row lives in a temporary the host program
// allocates, never in a device-side heap:
//
//  * block metadata: a thread per (batch, kv head, block, channel), so a
//    warp reads 32 consecutive channels of each key;
//  * top-k: in prefill, a thread per (batch, head, row) scores its
//    candidate blocks and keeps its budget in a heap whose block indices
//    live in the row's own output slots and whose scores live in a [B, H,
//    Lq, fill] temporary. Decode's few rows would leave the GPU idle: a
//    block per (batch, kv head, tile of blocks) stages the tile's metadata
//    in shared memory and writes the bounds of the kv group's rows first;
//    then a block per row sorts its candidates by bound in shared memory
//    (a bitonic network over the block's threads) and writes the best
//    (rows of more blocks than shared memory holds, rankedTopKCapacity,
//    take a thread per row and its heap over the bounds);
//  * top-p: a block per row lists its candidates in a [B, H, Lq, n]
//    temporary (n: the most candidates a row can have), a thread per
//    candidate scores it, and a block per row selects among them with the
//    CPU's score buckets (flagTopPKept's passes, each spread over the
//    block's threads: SimtTopPBlockSelection), whose counts, weights, sort
//    space and flags are temporaries too;
//  * sparse attention: split-KV, a thread per (batch, head, row, split)
//    running the online softmax over its share of the row's selection
//    entries, then the merge kernel of dense decode combines the splits
//    through their log-sum-exp and applies the gate. No list of a row's
//    keys is materialized: selected blocks are read straight from the
//    selection, repeats skipped by checking earlier entries only when an
//    entry is not above all of them (never, for the sorted selections
//    select_topk and select_topp write);
//  * tree attention: a flash kernel (SimtKernels.cpp) takes the prefix
//    into the first splits, a thread per node walks its own and its
//    ancestors' keys into the last, and the merge kernel combines them;
//  * KV compaction: a thread per (batch, kv head, row, feature of k then v).
//
// Tie rules, f64 top-p sums and the order of selections are those of the
// CPU kernels (SelectionKernels.cpp), so both targets select the same keys.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/KeySelection.h"
#include "passes/kernels/cuda/SimtKernels.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

int64_t staticDim(Type memrefType, int64_t d) {
  return cast<MemRefType>(memrefType).getDimSize(d);
}

func::FuncOp createThreadKernel(OpBuilder &builder, Location loc,
                                StringRef name, TypeRange bindingTypes,
                                const GpuTiling &tiling, StringRef kind) {
  return createKernel(builder, loc, name, bindingTypes,
                      tiling.toAttr(builder.getContext()), kind);
}

/// prefix... followed by `last`, as memref indices.
SmallVector<Value> indicesOf(ValueRange prefix, Value last) {
  SmallVector<Value> indices(prefix);
  indices.push_back(last);
  return indices;
}

/// The last dim of a per-row tensor ([B, H, Lq, n], or a ragged batch's
/// packed [T, H, n]).
Value lastDim(SimtEmitter &e, Value rowTensor) {
  return e.dim(rowTensor, cast<MemRefType>(rowTensor.getType()).getRank() - 1);
}

/// The query row at `prefix` in q, times `scale`, in thread-local scratch.
Value scaledQuery(SimtEmitter &e, Value q, ArrayRef<Value> prefix,
                  int64_t headDim, double scale) {
  Value query = e.scratch(headDim);
  e.loop(e.index(0), e.index(headDim), e.index(1), [&](Value d) {
    e.store(e.fmul(e.load(q, withIndex(prefix, d)), e.scalar(scale)), query, d);
  });
  return query;
}

/// Quest's bound of `block` (SPEC §1.3) for a query whose scaled channel d
/// is queryAt(d): sum_d max(q_d kmin_d, q_d kmax_d), summed in channel
/// order.
Value questBound(SimtEmitter &e, function_ref<Value(Value d)> queryAt,
                 function_ref<Value(int64_t which, Value d)> boundAt,
                 int64_t headDim) {
  return e.sumOver(e.index(0), e.index(headDim), [&](Value d) {
    Value qd = queryAt(d);
    return e.fmax(e.fmul(qd, boundAt(0, d)), e.fmul(qd, boundAt(1, d)));
  });
}

/// Quest's bound of block `block` from the metadata (its min and max
/// rows, where `keys` says they are).
Value questBound(SimtEmitter &e, function_ref<Value(Value d)> queryAt,
                 Value meta, const SelectionKeys &keys, Value batch,
                 Value kvHead, Value block, int64_t headDim) {
  SmallVector<Value> rows[] = {
      keys.bound(e, batch, kvHead, block, e.index(0)),
      keys.bound(e, batch, kvHead, block, e.index(1))};
  return questBound(
      e, queryAt,
      [&](int64_t which, Value d) {
        return e.load(meta, withIndex(rows[which], d));
      },
      headDim);
}

} // namespace

SmallVector<Value> mlir::attn::forEachListedBlock(
    SimtEmitter &e, Value selection, ValueRange prefix, Value numBlocks,
    Value from, Value to, ValueRange inits,
    function_ref<SmallVector<Value>(Value block, ValueRange iters)> body) {
  Value c0 = e.index(0), c1 = e.index(1);
  auto entryAt = [&](Value n) {
    return e.loadInt(selection, indicesOf(prefix, n));
  };
  // An entry above every earlier one is no repeat; the largest entry
  // before `from` seeds that bound.
  Value seed = e.loop(c0, from, c1, {e.i32(-1)},
                      [&](Value n, ValueRange it) -> SmallVector<Value> {
                        return {e.maxS(it[0], entryAt(n))};
                      })[0];
  SmallVector<Value> loopInits{seed};
  llvm::append_range(loopInits, inits);
  SmallVector<Value> results = e.loop(
      from, to, c1, loopInits,
      [&](Value n, ValueRange it) -> SmallVector<Value> {
        Value block = entryAt(n);
        Value bound = it[0];
        ValueRange iters = it.drop_front();
        Value inside = e.andI(
            e.icmp(arith::CmpIPredicate::sge, block, e.i32(0)),
            e.icmp(arith::CmpIPredicate::slt, block, e.toI32(numBlocks)));
        Value mayRepeat =
            e.andI(inside, e.icmp(arith::CmpIPredicate::sle, block, bound));
        Value noBit = arith::ConstantIntOp::create(e.b, e.b.getI1Type(), 0);
        Value repeat = e.ifElse(
            mayRepeat,
            [&]() -> SmallVector<Value> {
              return e.loop(
                  c0, n, c1, {noBit},
                  [&](Value m, ValueRange seen) -> SmallVector<Value> {
                    return {e.orI(seen[0], e.icmp(arith::CmpIPredicate::eq,
                                                  entryAt(m), block))};
                  });
            },
            [&]() -> SmallVector<Value> { return {noBit}; })[0];
        Value fresh =
            e.andI(inside, e.icmp(arith::CmpIPredicate::eq, repeat, noBit));
        SmallVector<Value> next = e.ifElse(
            fresh,
            [&]() -> SmallVector<Value> {
              return body(e.toIndex(block), iters);
            },
            [&]() -> SmallVector<Value> { return SmallVector<Value>(iters); });
        next.insert(next.begin(), e.maxS(bound, block));
        return next;
      });
  return SmallVector<Value>(ValueRange(results).drop_front());
}

//===----------------------------------------------------------------------===//
// Block metadata
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildSimtBlockMetaKernel(OpBuilder &builder,
                                                  Location loc, StringRef name,
                                                  const MetaLayout &layout,
                                                  const GpuTiling &tiling,
                                                  TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createThreadKernel(builder, loc, name, bindingTypes,
                                         tiling, "block_meta");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  Value thread = args.back();
  const int64_t D = staticDim(bindingTypes[0], 3);

  // Thread order (MetaBlock's index, channel), the channel fastest.
  Value channel = e.rem(thread, e.index(D));
  MetaBlock block(e, e.div(thread, e.index(D)), layout, args.drop_back());
  auto bound = [&] {
    SmallVector<Value> extremes = e.loop(
        block.first, block.end, e.index(1),
        {e.scalar(std::numeric_limits<float>::infinity()), e.scalar(kNegInf)},
        [&](Value j, ValueRange it) -> SmallVector<Value> {
          Value key = e.load(block.keys, withIndex(block.key(j), channel));
          return {arith::MinimumFOp::create(b, it[0], key), e.fmax(it[1], key)};
        });
    for (int64_t which = 0; which < 2; ++which)
      e.store(extremes[which], block.meta,
              withIndex(block.bound(which), channel));
  };
  if (block.live)
    e.ifThen(block.live, bound);
  else
    bound();
  func::ReturnOp::create(b);
  return func;
}

//===----------------------------------------------------------------------===//
// Top-k block selection
//===----------------------------------------------------------------------===//

int64_t mlir::attn::boundsTileBlocks(int64_t headDim, const GpuTiling &tiling) {
  // The tile's two bounds [2, TB, D + 1] f32 in at most half the shared
  // memory, so two blocks fit on a multiprocessor.
  int64_t blocks = 32;
  while (blocks > 1 && 2 * blocks * (headDim + 1) * 4 > tiling.maxSharedBytes / 2)
    blocks /= 2;
  return blocks;
}

func::FuncOp mlir::attn::buildSimtBlockBoundsKernel(
    OpBuilder &builder, Location loc, StringRef name, SelectTopKOp op,
    const GpuTiling &tiling, TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createThreadKernel(builder, loc, name, bindingTypes,
                                         tiling, "block_bounds");
  func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b, tiling.blockThreads);
  auto args = func.getArguments();
  const bool paged = static_cast<bool>(op.getPageTable());
  unsigned next = 0;
  Value q = args[next++], meta = args[next++];
  SelectionKeys keys(args, next, paged);
  Value bounds = args[next++], workgroup = args.back();
  const int64_t H = staticDim(bindingTypes[0], 1);
  const int64_t D = staticDim(bindingTypes[0], 3);
  const int64_t Hkv =
      staticDim(bindingTypes[1], SelectionKeys::metaHeadDim(paged));
  const int64_t group = H / Hkv;
  const int64_t TB = boundsTileBlocks(D, tiling);
  const double scale = selectionScale(op.getScale(), D);
  Value c0 = e.index(0);

  // Block order (batch, kv head, tile of TB blocks), the tile fastest: the
  // block stages the tile's bounds once for every row of the kv group.
  Value numBlocks = e.dim(bounds, 3), lq = e.dim(bounds, 2);
  Value tiles = e.ceilDiv(numBlocks, e.index(TB));
  Value firstBlock = e.mul(e.rem(workgroup, tiles), e.index(TB));
  Value rest = e.div(workgroup, tiles);
  Value kvHead = e.rem(rest, e.index(Hkv));
  Value batch = e.div(rest, e.index(Hkv));
  // Blocks past the sequence's (over a paged cache, the table's other
  // entries) are never read: only the candidates' bounds are.
  Value tileBlocks = e.maxS(
      e.minS(e.index(TB),
             e.sub(e.ceilDiv(keys.length(e, batch), e.index(op.getBlockSize())),
                   firstBlock)),
      c0);

  // The tile's min and max rows, a thread per channel so that a warp reads
  // 32 consecutive channels; rows padded to D + 1 floats, so that threads
  // reading one channel of consecutive blocks hit distinct banks.
  Value staged = e.shared({2, TB, D + 1});
  e.forAll(e.mul(e.index(2 * D), tileBlocks), [&](Value i) {
    Value d = e.rem(i, e.index(D));
    Value j = e.rem(e.div(i, e.index(D)), tileBlocks);
    Value which = e.div(i, e.mul(e.index(D), tileBlocks));
    SmallVector<Value> at =
        keys.bound(e, batch, kvHead, e.add(firstBlock, j), which);
    e.store(e.load(meta, withIndex(at, d)), staged, {which, j, d});
  });
  // A thread per (row of the group, block of the tile), the block fastest,
  // reading the staged rows.
  e.forAll(e.mul(e.mul(e.index(group), lq), tileBlocks), [&](Value i) {
    Value j = e.rem(i, tileBlocks);
    Value r = e.div(i, tileBlocks);
    Value head = e.add(e.mul(kvHead, e.index(group)), e.div(r, lq));
    Value row = e.rem(r, lq);
    Value bound = questBound(
        e,
        [&](Value d) {
          return e.fmul(e.load(q, {batch, head, row, d}), e.scalar(scale));
        },
        [&](int64_t which, Value d) {
          return e.load(staged, {e.index(which), j, d});
        },
        D);
    e.store(bound, bounds, {batch, head, row, e.add(firstBlock, j)});
  });
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtSelectTopKKernel(
    OpBuilder &builder, Location loc, StringRef name, SelectTopKOp op,
    const GpuTiling &tiling, TypeRange bindingTypes, bool boundsGiven) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createThreadKernel(builder, loc, name, bindingTypes,
                                         tiling, "select_topk");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  const bool paged = static_cast<bool>(op.getPageTable());
  // A ragged batch's rows are packed [T, H] (its query offsets bound after
  // the keys).
  const bool ragged = static_cast<bool>(op.getCuSeqlensQ());
  unsigned next = 0;
  Value q = args[next++], meta = args[next++];
  SelectionKeys keys(args, next, paged);
  Value queryOffsets = ragged ? args[next++] : Value();
  Value blocks = args[next++], heapScores = args[next++];
  Value bounds = boundsGiven ? args[next++] : Value();
  Value thread = args.back();
  const int64_t H = staticDim(bindingTypes[0], 1);
  const int64_t D = staticDim(bindingTypes[0], ragged ? 2 : 3);
  const int64_t group =
      H / staticDim(bindingTypes[1], SelectionKeys::metaHeadDim(paged));
  const int64_t topK = op.getTopK();
  const int64_t sink = op.getSinkBlocks(), local = op.getLocalBlocks();
  const int64_t fill = topK - sink - local;

  Value c0 = e.index(0), c1 = e.index(1);
  QueryRowOfWorkgroup at(e, thread, H, q, queryOffsets);
  Value lq = at.rows;
  Value kvHead = e.div(at.head, e.index(group));
  Value lk = keys.length(e, at.batch);
  auto [firstBlock, count] =
      topKCandidates(e, op, e.add(e.sub(lk, lq), at.row), lk);
  SmallVector<Value> prefix = at.at(at.head);
  auto store = [&](Value block, Value slot) {
    memref::StoreOp::create(b, e.toI32(block), blocks, indicesOf(prefix, slot));
  };

  Value fits = e.icmp(arith::CmpIPredicate::ule, count, e.index(topK));
  e.ifElse(
      fits,
      [&]() -> SmallVector<Value> {
        e.loop(c0, count, c1, [&](Value n) { store(e.add(firstBlock, n), n); });
        padWithMinusOne(e, blocks, prefix, count, lastDim(e, blocks));
        return {};
      },
      [&]() -> SmallVector<Value> {
        // The first `sink` and the last `local` candidates, and between
        // them the `fill` best by Quest's bound.
        e.loop(c0, e.index(sink), c1,
               [&](Value n) { store(e.add(firstBlock, n), n); });
        Value middleFirst = e.add(firstBlock, e.index(sink));
        Value middle = e.sub(count, e.index(sink + local));
        if (fill > 0) {
          Value query = bounds ? Value()
                               : scaledQuery(e, q, prefix, D,
                                             selectionScale(op.getScale(), D));
          auto boundOf = [&](Value block) {
            if (bounds)
              return e.load(bounds, indicesOf(prefix, block));
            return questBound(
                e, [&](Value d) { return e.load(query, d); }, meta, keys,
                at.batch, kvHead, block, D);
          };
          // Heap slot i: block in blocks[.., sink + i], score in
          // heapScores[.., i].
          Value heapBase = e.index(sink);
          auto load = [&](Value slot) -> SmallVector<Value> {
            return {
                e.load(heapScores, indicesOf(prefix, slot)),
                e.loadInt(blocks, indicesOf(prefix, e.add(heapBase, slot)))};
          };
          auto storeItem = [&](Value slot, ValueRange item) {
            e.store(item[0], heapScores, indicesOf(prefix, slot));
            memref::StoreOp::create(b, item[1], blocks,
                                    indicesOf(prefix, e.add(heapBase, slot)));
          };
          // SPEC §1.3's order: a lower score, or an equal one of a later
          // block, is worse.
          auto worse = [&](ValueRange x, ValueRange y) {
            return worseScored(e, x[0], x[1], y[0], y[1]);
          };
          HeapStorage heap{load, storeItem, worse};
          Value heapSize = e.index(fill);
          e.loop(c0, heapSize, c1, [&](Value n) {
            Value block = e.add(middleFirst, n);
            storeItem(n, {boundOf(block), e.toI32(block)});
          });
          heapify(e, heap, heapSize);
          e.loop(heapSize, middle, c1, [&](Value n) {
            Value block = e.add(middleFirst, n);
            SmallVector<Value> candidate{boundOf(block), e.toI32(block)};
            e.ifThen(worse(load(c0), candidate), [&] {
              storeItem(c0, candidate);
              siftDown(e, heap, heapSize, c0);
            });
          });
          // The kept blocks in ascending order (a later block is worse).
          auto blockAt = [&](Value slot) -> SmallVector<Value> {
            return {load(slot)[1]};
          };
          auto storeBlock = [&](Value slot, ValueRange item) {
            memref::StoreOp::create(b, item[0], blocks,
                                    indicesOf(prefix, e.add(heapBase, slot)));
          };
          auto later = [&](ValueRange x, ValueRange y) {
            return e.icmp(arith::CmpIPredicate::sgt, x[0], y[0]);
          };
          sortBestFirst(e, HeapStorage{blockAt, storeBlock, later}, heapSize);
        }
        Value localFirst = e.sub(e.add(firstBlock, count), e.index(local));
        e.loop(c0, e.index(local), c1, [&](Value n) {
          store(e.add(localFirst, n), e.add(e.index(sink + fill), n));
        });
        return {};
      });
  func::ReturnOp::create(b);
  return func;
}

namespace {

/// The decode row of a ranked top-k block (workgroup `row`): its
/// candidates and the middle ones between the sinks and the locals, which
/// compete for the `fill` slots by their bounds.
struct RankedTopKRow {
  RankedTopKRow(SimtEmitter &e, SelectTopKOp op, Value q,
                const SelectionKeys &keys, Value bounds, Value row)
      : e(e), bounds(bounds),
        at(e, row, staticDim(q.getType(), 1), e.dim(q, 2)) {
    Value lq = e.dim(q, 2), lk = keys.length(e, at.batch);
    std::tie(firstBlock, count) =
        topKCandidates(e, op, e.add(e.sub(lk, lq), at.row), lk);
    middleFirst = e.add(firstBlock, e.index(op.getSinkBlocks()));
    middle = e.sub(count, e.index(op.getSinkBlocks() + op.getLocalBlocks()));
    prefix = {at.batch, at.head, at.row};
  }
  /// Middle candidate j's bound, NaN read as -inf so that the order is
  /// total (NaN bounds come from NaN inputs, whose outputs are NaN anyway).
  Value boundOf(Value j) {
    Value bound = e.load(bounds, indicesOf(prefix, e.add(middleFirst, j)));
    return e.select(e.fcmp(arith::CmpFPredicate::UNO, bound, bound),
                    e.scalar(kNegInf), bound);
  }

  SimtEmitter &e;
  Value bounds;
  RowOfWorkgroup at;
  Value firstBlock, count, middleFirst, middle;
  SmallVector<Value> prefix;
};

} // namespace

int64_t mlir::attn::rankedTopKCapacity(const GpuTiling &tiling) {
  // A candidate's bound and index in shared memory, in at most half of it.
  int64_t capacity = 8192;
  while (capacity > 256 && 8 * capacity > tiling.maxSharedBytes / 2)
    capacity /= 2;
  return capacity;
}

namespace {

/// Sorts `count` (a power of 2, at most the buffers' size) entries of the
/// shared (score, index) buffers in place with a bitonic network over the
/// block's threads, the first `before` (its arguments' scores and indices)
/// first. The stages are runtime loops (logCount stages of stages), each a
/// forAll whose pairs are independent.
void bitonicSort(SimtEmitter &e, Value scores, Value indices, Value logCount,
                 function_ref<Value(Value, Value, Value, Value)> before) {
  Value c0 = e.index(0), c1 = e.index(1);
  auto shl = [&](Value x, Value bits) {
    return arith::ShLIOp::create(e.b, x, bits).getResult();
  };
  Value count = shl(c1, logCount);
  e.loop(c1, e.add(logCount, c1), c1, [&](Value logSpan) {
    Value span = shl(c1, logSpan);
    e.loop(c0, logSpan, c1, [&](Value step) {
      Value stride = shl(c1, e.sub(e.sub(logSpan, c1), step));
      e.forAll(count, [&](Value i) {
        Value l = arith::XOrIOp::create(e.b, i, stride);
        e.ifThen(e.icmp(arith::CmpIPredicate::ugt, l, i), [&] {
          Value si = e.load(scores, {i}), sl = e.load(scores, {l});
          Value ii = e.loadInt(indices, {i}), il = e.loadInt(indices, {l});
          // Spans whose bit of i is clear sort first-first, the others
          // last-first, so that each next span merges two sorted runs.
          Value firstFirst =
              e.icmp(arith::CmpIPredicate::eq, e.andI(i, span), c0);
          Value swap = e.select(firstFirst, before(sl, il, si, ii),
                                before(si, ii, sl, il));
          e.ifThen(swap, [&] {
            e.store(sl, scores, {i});
            e.store(si, scores, {l});
            memref::StoreOp::create(e.b, il, indices, ValueRange{i});
            memref::StoreOp::create(e.b, ii, indices, ValueRange{l});
          });
        });
      });
    });
  });
}

} // namespace

func::FuncOp mlir::attn::buildSimtTopKRankKernel(OpBuilder &builder,
                                                 Location loc, StringRef name,
                                                 SelectTopKOp op,
                                                 const GpuTiling &tiling,
                                                 TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  // A block of the most threads per decode row: the sort's stages are
  // barriers apart, each a compare-exchange or two per thread.
  GpuTiling blockTiling = tiling;
  blockTiling.blockThreads = kRankedTopKThreads;
  func::FuncOp func = createThreadKernel(builder, loc, name, bindingTypes,
                                         blockTiling, "topk_rank");
  func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b, blockTiling.blockThreads);
  auto args = func.getArguments();
  unsigned next = 0;
  Value q = args[next++];
  SelectionKeys keys(args, next, static_cast<bool>(op.getPageTable()));
  Value bounds = args[next++], blocks = args[next++], workgroup = args.back();
  const int64_t topK = op.getTopK();
  const int64_t sink = op.getSinkBlocks(), local = op.getLocalBlocks();
  const int64_t fill = topK - sink - local;
  const int64_t capacity = rankedTopKCapacity(tiling);
  Value c1 = e.index(1);
  RankedTopKRow row(e, op, q, keys, bounds, workgroup);
  Value slots = e.dim(blocks, 3);
  auto store = [&](Value block, Value slot) {
    memref::StoreOp::create(b, e.toI32(block), blocks,
                            indicesOf(row.prefix, slot));
  };
  Value scores = e.shared({capacity});
  Value order = e.shared({capacity}, b.getI32Type());

  Value fits = e.icmp(arith::CmpIPredicate::ule, row.count, e.index(topK));
  e.ifElse(
      fits,
      [&]() -> SmallVector<Value> {
        // Every candidate, then -1 padding.
        e.forAll(slots, [&](Value n) {
          Value candidate = e.icmp(arith::CmpIPredicate::ult, n, row.count);
          memref::StoreOp::create(
              b,
              e.select(candidate, e.toI32(e.add(row.firstBlock, n)), e.i32(-1)),
              blocks, indicesOf(row.prefix, n));
        });
        return {};
      },
      [&]() -> SmallVector<Value> {
        // The sinks, the locals (the last `local` candidates in the last
        // `local` slots), and between them the `fill` best middle
        // candidates, ascending.
        e.forAll(e.index(sink),
                 [&](Value n) { store(e.add(row.firstBlock, n), n); });
        e.forAll(e.index(local), [&](Value n) {
          store(
              e.add(e.sub(e.add(row.firstBlock, row.count), e.index(local)), n),
              e.add(e.index(sink + fill), n));
        });
        if (fill == 0)
          return {};
        // The middle candidates best first (SPEC §1.3's order: a higher
        // bound, or an equal one of an earlier block), padded to a power
        // of 2 with entries after every candidate.
        Value logCount = c1;
        for (int64_t bits = 1; (int64_t{1} << bits) < capacity; ++bits)
          logCount = e.select(e.icmp(arith::CmpIPredicate::ult,
                                     e.index(int64_t{1} << bits), row.middle),
                              e.index(bits + 1), logCount);
        Value count = arith::ShLIOp::create(b, c1, logCount);
        const int32_t pastAll = std::numeric_limits<int32_t>::max();
        e.forAll(count, [&](Value n) {
          Value candidate = e.icmp(arith::CmpIPredicate::ult, n, row.middle);
          Value bound = e.ifElse(
              candidate,
              [&]() -> SmallVector<Value> { return {row.boundOf(n)}; },
              [&]() -> SmallVector<Value> { return {e.scalar(kNegInf)}; })[0];
          e.store(bound, scores, {n});
          memref::StoreOp::create(
              b, e.select(candidate, e.toI32(n), e.i32(pastAll)), order,
              ValueRange{n});
        });
        bitonicSort(e, scores, order, logCount,
                    [&](Value scoreA, Value a, Value scoreB, Value b) {
                      return worseScored(e, scoreB, b, scoreA, a);
                    });
        // The `fill` best by block, ascending: the entries past them
        // sort last.
        int64_t logFill = 0;
        while ((int64_t{1} << logFill) < fill)
          ++logFill;
        e.forAll(e.index((int64_t{1} << logFill) - fill), [&](Value n) {
          memref::StoreOp::create(b, e.i32(pastAll), order,
                                  ValueRange{e.add(e.index(fill), n)});
        });
        if (logFill > 0)
          bitonicSort(e, scores, order, e.index(logFill),
                      [&](Value, Value a, Value, Value b) {
                        return e.icmp(arith::CmpIPredicate::slt, a, b);
                      });
        e.forAll(e.index(fill), [&](Value n) {
          store(e.add(row.middleFirst, e.toIndex(e.loadInt(order, {n}))),
                e.add(e.index(sink), n));
        });
        return {};
      });
  func::ReturnOp::create(b);
  return func;
}

//===----------------------------------------------------------------------===//
// Top-p token selection
//===----------------------------------------------------------------------===//

namespace {

/// What every top-p kernel of a row reads first: its bindings q, k and,
/// over a paged cache, the page table and key lengths, then a ragged
/// batch's query offsets (from `next`, advanced), and the row's place.
struct TopPRowStart {
  TopPRowStart(SimtEmitter &e, SelectTopPOp op, ValueRange args, unsigned &next,
               function_ref<Value()> thread)
      : q(args[next]), k(args[next + 1]),
        keys(e, args[next + 1], op.getPageTable() ? args[next + 2] : Value(),
             op.getPageTable() ? args[next + 3] : Value()),
        at(e, thread(), staticDim(q.getType(), 1), q,
           op.getCuSeqlensQ() ? args[next + (op.getPageTable() ? 4 : 2)]
                              : Value()) {
    next += (op.getPageTable() ? 4 : 2) + (op.getCuSeqlensQ() ? 1 : 0);
    const int64_t H = staticDim(q.getType(), 1);
    const unsigned kvHeadDim = op.getPageTable() ? 2 : 1;
    kvHead = e.div(at.head, e.index(H / staticDim(k.getType(), kvHeadDim)));
    Value lq = at.rows;
    lk = keys.length(at.batch);
    MaskAttr mask = op.getMask();
    std::tie(begin, end) = visibleRange(e, mask.getKind(), mask.getWindow(),
                                        e.add(e.sub(lk, lq), at.row), lk);
    prefix = at.at(at.head);
  }
  Value q, k;
  /// The keys of the row's sequence, contiguous or in a paged cache.
  KeyRows keys;
  QueryRowOfWorkgroup at;
  Value kvHead, lk, begin, end;
  SmallVector<Value> prefix;
};

} // namespace

func::FuncOp mlir::attn::buildSimtTopPCandidatesKernel(
    OpBuilder &builder, Location loc, StringRef name, SelectTopPOp op,
    const GpuTiling &tiling, TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createThreadKernel(builder, loc, name, bindingTypes,
                                         tiling, "topp_candidates");
  func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b, tiling.blockThreads);
  auto args = func.getArguments();
  unsigned next = 0;
  // A block per (batch, head, row), or per packed row.
  TopPRowStart row(e, op, args, next, [&] { return args.back(); });
  Value blocks = op.getBlocks() ? args[next++] : Value();
  Value keys = args[next++], counts = args[next++];
  Value c0 = e.index(0), c1 = e.index(1);
  SmallVector<Value> countAt = indicesOf(row.prefix, c0);

  // Every visible key is a candidate: the scores kernel writes their keys.
  if (!blocks) {
    e.eachThread([&](Value t) {
      e.ifThen(e.icmp(arith::CmpIPredicate::eq, t, c0), [&] {
        memref::StoreOp::create(b, e.toI32(e.sub(row.end, row.begin)), counts,
                                countAt);
      });
    });
    func::ReturnOp::create(b);
    return func;
  }
  // The keys of the listed blocks (each counted once), in ascending order
  // of the listing: thread t takes a contiguous share of the entries,
  // counts its keys, then writes them after the shares before it.
  Value bs = e.index(*op.getBlockSize());
  Value numBlocks = e.ceilDiv(row.lk, bs);
  Value entries = lastDim(e, blocks), threads = e.index(e.blockThreads);
  // The visible keys of block `block`: [from, to).
  auto keysOf = [&](Value block) {
    Value first = e.mul(block, bs);
    Value from = e.maxS(row.begin, first);
    return std::pair{from, e.maxS(e.minS(row.end, e.add(first, bs)), from)};
  };
  Value shareCounts = e.shared({e.blockThreads}, b.getI64Type());
  e.eachThread([&](Value t) {
    auto [from, to] = e.shareOf(t, entries);
    Value count = forEachListedBlock(
        e, blocks, row.prefix, numBlocks, from, to, {c0},
        [&](Value block, ValueRange it) -> SmallVector<Value> {
          auto [first, end] = keysOf(block);
          return {e.add(it[0], e.sub(end, first))};
        })[0];
    memref::StoreOp::create(
        b, arith::IndexCastOp::create(b, b.getI64Type(), count), shareCounts,
        ValueRange{t});
  });
  e.eachThread([&](Value t) {
    auto [from, to] = e.shareOf(t, entries);
    forEachListedBlock(
        e, blocks, row.prefix, numBlocks, from, to,
        {e.sumOfShares(shareCounts, t)},
        [&](Value block, ValueRange it) -> SmallVector<Value> {
          auto [first, end] = keysOf(block);
          return e.loop(first, end, c1, {it[0]},
                        [&](Value j, ValueRange n) -> SmallVector<Value> {
                          memref::StoreOp::create(b, e.toI32(j), keys,
                                                  indicesOf(row.prefix, n[0]));
                          return {e.add(n[0], c1)};
                        });
        });
    e.ifThen(e.icmp(arith::CmpIPredicate::eq, t, c0), [&] {
      memref::StoreOp::create(b, e.toI32(e.sumOfShares(shareCounts, threads)),
                              counts, countAt);
    });
  });
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtTopPScoresKernel(OpBuilder &builder,
                                                   Location loc, StringRef name,
                                                   SelectTopPOp op,
                                                   const GpuTiling &tiling,
                                                   TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createThreadKernel(builder, loc, name, bindingTypes,
                                         tiling, "topp_scores");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  unsigned next = 0;
  // Thread order (batch, head, row, slot), the slot fastest.
  Value keys = args[args.size() - 4], thread = args.back();
  Value slots, slot;
  TopPRowStart row(e, op, args, next, [&] {
    slots = lastDim(e, keys);
    slot = e.rem(thread, slots);
    return e.div(thread, slots);
  });
  Value counts = args[next + 1], scores = args[next + 2];
  Value q = row.q;
  const int64_t D = staticDim(bindingTypes[0], op.getCuSeqlensQ() ? 2 : 3);
  const double scale = selectionScale(op.getScale(), D);
  const double softcap = op.getSoftcap().convertToDouble();
  Value c0 = e.index(0), c1 = e.index(1);

  Value count = e.toIndex(e.loadInt(counts, indicesOf(row.prefix, c0)));
  e.ifThen(e.icmp(arith::CmpIPredicate::ult, slot, count), [&] {
    SmallVector<Value> at = indicesOf(row.prefix, slot);
    Value key;
    if (op.getBlocks()) {
      key = e.toIndex(e.loadInt(keys, at));
    } else {
      key = e.add(row.begin, slot);
      memref::StoreOp::create(b, e.toI32(key), keys, at);
    }
    // The score, exact or from the key rounded to its int4 levels.
    SmallVector<Value> keyRow = row.keys.at(row.at.batch, row.kvHead, key);
    auto channel = [&](Value d) { return e.load(row.k, withIndex(keyRow, d)); };
    std::optional<Int4Levels> levels;
    if (op.getEstimator() == SelectionEstimator::Int4) {
      const float inf = std::numeric_limits<float>::infinity();
      SmallVector<Value> range = e.loop(
          c0, e.index(D), c1, {e.scalar(inf), e.scalar(-inf)},
          [&](Value d, ValueRange it) -> SmallVector<Value> {
            Value x = channel(d);
            return {arith::MinimumFOp::create(b, it[0], x), e.fmax(it[1], x)};
          });
      levels = Int4Levels::of(e, range[0], range[1]);
    }
    Value s = e.sumOver(c0, e.index(D), [&](Value d) {
      Value qd = e.fmul(e.load(q, withIndex(row.prefix, d)), e.scalar(scale));
      Value x = channel(d);
      return e.fmul(qd, levels ? levels->round(e, x) : x);
    });
    e.store(e.softcap(s, softcap), scores, at);
  });
  func::ReturnOp::create(b);
  return func;
}

namespace {

/// Top-p's selection of one row by a block (see flagTopPKept for the
/// algorithm, which the CPU kernel runs on one thread). The block cuts the
/// row's candidates, and its buckets, into one contiguous share per thread
/// and runs flagTopPKept's passes over the shares in parallel: the score
/// range, the buckets' counts and weights (atomic adds), the bucket where
/// the weight crosses top_p and the one where the count reaches `keep`
/// (each thread walks its share of buckets from the sum of the shares
/// before it), the kept flags and the kept keys written ascending (each
/// thread writes its share's after those of the shares before it). Only
/// the sorts of the one or two buckets that are cut run on one thread.
///
/// Sums of f64 weights are taken share by share in bucket order, so the
/// walk of one share ends exactly where the next share's starts, and a
/// bucket's weight is summed by atomics in any order: as on the CPU, a sum
/// that reaches top_p only within f64 rounding may keep one token more or
/// less than a walk over the sorted candidates.
class SimtTopPBlockSelection {
public:
  /// The row at `prefix` of the temporaries and of `tokens`.
  SimtTopPBlockSelection(SimtEmitter &e, SelectTopPOp op,
                         ArrayRef<Value> prefix, ValueRange temporaries,
                         Value tokens);
  void build();

private:
  /// The score range, and the cleared flags and buckets.
  void findRangeAndClear();
  /// Each bucket's count and weight, and each bucket share's sums.
  void fillBuckets();
  /// The bucket where the best-first weight crosses top_p, its bucket
  /// sorted, and how many candidates that keeps (picks).
  void findWeightCut();
  /// The bucket where the best-first count reaches `keep`, and how many of
  /// its best are kept; then the flags.
  void flagKept();
  /// The kept keys, ascending, then -1 to the capacity.
  void writeKept();
  /// Collects the candidates of `bucket` in `order` and sorts them best
  /// first on thread 0, which then runs `then(size)`.
  void sortBucket(Value bucket, function_ref<void(Value size)> then);
  /// i64 shared values as indices, and back.
  Value fromI64(Value x) {
    return arith::IndexCastOp::create(e.b, e.b.getIndexType(), x);
  }
  Value toI64(Value x) {
    return arith::IndexCastOp::create(e.b, e.b.getI64Type(), x);
  }
  Value loadPick(int64_t field) {
    return fromI64(
        memref::LoadOp::create(e.b, picks, ValueRange{e.index(field)}));
  }
  void storePick(Value value, int64_t field) {
    memref::StoreOp::create(e.b, toI64(value), picks,
                            ValueRange{e.index(field)});
  }
  void onThread0(Value t, function_ref<void()> body) {
    e.ifThen(e.icmp(arith::CmpIPredicate::eq, t, c0), body);
  }

  // picks: the crossing bucket (-1: none), the candidates and the weight
  // (weightBeforeCut) of the buckets before it, the sorted bucket, keep,
  // the bucket where the count reaches keep, and how many of it are kept.
  enum Pick : int64_t { Cut, CountBeforeCut, Sorted, Keep, Last, Rest, Picks };

  SimtEmitter &e;
  SelectTopPOp op;
  Value tokens;
  SmallVector<Value> prefix;
  RowBuffer scores, keys, sizes, weights, order, kept;
  Value count, capacity, bucketCount, threads, c0, c1;
  const bool byWeight;
  Value shareHigh, shareLow, shareCounts, shareWeights, picks, weightBeforeCut,
      counter;
  std::optional<ScoreBuckets> buckets;
};

SimtTopPBlockSelection::SimtTopPBlockSelection(SimtEmitter &e, SelectTopPOp op,
                                               ArrayRef<Value> prefix,
                                               ValueRange temporaries,
                                               Value tokens)
    : e(e), op(op), tokens(tokens), prefix(prefix),
      scores(temporaries[0], prefix), keys(temporaries[1], prefix),
      sizes(temporaries[3], prefix), weights(temporaries[4], prefix),
      order(temporaries[5], prefix), kept(temporaries[6], prefix),
      byWeight(op.getTopP().convertToDouble() < 1.0) {
  ImplicitLocOpBuilder &b = e.b;
  c0 = e.index(0), c1 = e.index(1);
  threads = e.index(e.blockThreads);
  SmallVector<Value> at(prefix);
  at.push_back(c0);
  count = e.toIndex(e.loadInt(temporaries[2], at));
  capacity = e.dim(tokens, cast<MemRefType>(tokens.getType()).getRank() - 1);
  bucketCount = topPBucketCount(e, count);
  Type i64 = b.getI64Type(), f64 = b.getF64Type();
  shareHigh = e.shared({e.blockThreads});
  shareLow = e.shared({e.blockThreads});
  shareCounts = e.shared({e.blockThreads}, i64);
  shareWeights = e.shared({e.blockThreads}, f64);
  picks = e.shared({Picks}, i64);
  weightBeforeCut = e.shared({1}, f64);
  counter = e.shared({1}, b.getI32Type());
}

void SimtTopPBlockSelection::build() {
  findRangeAndClear();
  fillBuckets();
  if (byWeight)
    findWeightCut();
  flagKept();
  writeKept();
}

void SimtTopPBlockSelection::findRangeAndClear() {
  Value zeroFlag = arith::ConstantIntOp::create(e.b, e.b.getI8Type(), 0);
  Value zero64 = arith::ConstantOp::create(e.b, e.b.getF64FloatAttr(0.0));
  e.eachThread([&](Value t) {
    auto [first, end] = e.shareOf(t, count);
    auto [high, low] = ScoreBuckets::range(e, scores, first, end);
    e.store(high, shareHigh, {t});
    e.store(low, shareLow, {t});
    e.loop(first, end, c1, [&](Value n) { kept.store(e, zeroFlag, n); });
    auto [firstBucket, endBucket] = e.shareOf(t, bucketCount);
    e.loop(firstBucket, endBucket, c1, [&](Value bucket) {
      sizes.store(e, e.i32(0), bucket);
      if (byWeight)
        weights.store(e, zero64, bucket);
    });
    // No cut until one is found; keep = count when top_p = 1.
    onThread0(t, [&] {
      storePick(e.index(-1), Cut);
      storePick(e.index(-1), Sorted);
      storePick(count, Keep);
      storePick(c0, Last);
      storePick(c0, Rest);
    });
  });
  // max and min are exact, so the shares' ranges combine to the row's.
  SmallVector<Value> range = e.loop(
      c0, threads, c1,
      {e.scalar(kNegInf), e.scalar(std::numeric_limits<float>::infinity())},
      [&](Value u, ValueRange it) -> SmallVector<Value> {
        return {e.fmax(it[0], e.load(shareHigh, {u})),
                arith::MinimumFOp::create(e.b, it[1], e.load(shareLow, {u}))};
      });
  buckets.emplace(e, range[0], range[1], count);
}

void SimtTopPBlockSelection::fillBuckets() {
  e.eachThread([&](Value t) {
    auto [first, end] = e.shareOf(t, count);
    e.loop(first, end, c1, [&](Value n) {
      Value s = scores.load(e, n);
      Value bucket = buckets->of(s);
      memref::AtomicRMWOp::create(e.b, arith::AtomicRMWKind::addi, e.i32(1),
                                  sizes.memref, sizes.at(bucket));
      if (byWeight)
        memref::AtomicRMWOp::create(e.b, arith::AtomicRMWKind::addf,
                                    topPWeight(e, s, buckets->highest),
                                    weights.memref, weights.at(bucket));
    });
  });
  e.eachThread([&](Value t) {
    auto [first, end] = e.shareOf(t, bucketCount);
    Value zero64 = arith::ConstantOp::create(e.b, e.b.getF64FloatAttr(0.0));
    SmallVector<Value> sums = e.loop(
        first, end, c1, {c0, zero64},
        [&](Value bucket, ValueRange it) -> SmallVector<Value> {
          Value weight = byWeight ? weights.loadStored(e, bucket) : zero64;
          return {e.add(it[0], e.toIndex(sizes.loadStored(e, bucket))),
                  e.fadd(it[1], weight)};
        });
    memref::StoreOp::create(e.b, toI64(sums[0]), shareCounts,
                            ValueRange{t});
    memref::StoreOp::create(e.b, sums[1], shareWeights, ValueRange{t});
  });
}

void SimtTopPBlockSelection::findWeightCut() {
  Value total = e.sumOfShares(shareWeights, threads);
  Value target = e.fmul(
      total, arith::ConstantOp::create(
                 e.b, e.b.getF64FloatAttr(op.getTopP().convertToDouble())));
  // The first bucket c whose weight, added to all before it, reaches the
  // target: in thread t's share when the shares before it stay short.
  e.eachThread([&](Value t) {
    Value before = e.sumOfShares(shareWeights, t);
    Value countBefore = e.sumOfShares(shareCounts, t);
    e.ifThen(e.fcmp(arith::CmpFPredicate::OLT, before, target), [&] {
      auto [first, end] = e.shareOf(t, bucketCount);
      Value zero64 = arith::ConstantOp::create(e.b, e.b.getF64FloatAttr(0.0));
      SmallVector<Value> walk = e.whileLoop(
          {first, zero64, c0},
          [&](ValueRange it) {
            // Read clamped to the last bucket, used only in the share.
            Value inShare = e.icmp(arith::CmpIPredicate::ult, it[0], end);
            Value weight = e.select(
                inShare,
                weights.loadStored(e, e.minS(it[0], e.sub(bucketCount, c1))),
                zero64);
            return e.andI(inShare,
                          e.fcmp(arith::CmpFPredicate::OLT,
                                 e.fadd(before, e.fadd(it[1], weight)),
                                 target));
          },
          [&](ValueRange it) -> SmallVector<Value> {
            return {e.add(it[0], c1),
                    e.fadd(it[1], weights.loadStored(e, it[0])),
                    e.add(it[2], e.toIndex(sizes.loadStored(e, it[0])))};
          });
      e.ifThen(e.icmp(arith::CmpIPredicate::ult, walk[0], end), [&] {
        storePick(walk[0], Cut);
        storePick(e.add(countBefore, walk[2]), CountBeforeCut);
        memref::StoreOp::create(e.b, e.fadd(before, walk[1]), weightBeforeCut,
                                ValueRange{c0});
      });
    });
  });
  // The cut bucket in order, and how many of its best reach the target.
  Value cut = loadPick(Cut);
  e.ifThen(e.icmp(arith::CmpIPredicate::sge, cut, c0), [&] {
    sortBucket(cut, [&](Value size) {
      Value start = memref::LoadOp::create(e.b, weightBeforeCut,
                                           ValueRange{c0});
      Value taken = e.whileLoop(
          {c0, start},
          [&](ValueRange it) {
            return e.andI(
                e.icmp(arith::CmpIPredicate::ult, it[0], size),
                e.fcmp(arith::CmpFPredicate::OLT, it[1], target));
          },
          [&](ValueRange it) -> SmallVector<Value> {
            Value n = e.toIndex(order.loadStored(e, it[0]));
            return {e.add(it[0], c1),
                    e.fadd(it[1], topPWeight(e, scores.load(e, n),
                                             buckets->highest))};
          })[0];
      storePick(e.add(loadPick(CountBeforeCut), taken), Keep);
      storePick(cut, Sorted);
    });
  });
}

void SimtTopPBlockSelection::sortBucket(Value bucket,
                                        function_ref<void(Value)> then) {
  e.eachThread([&](Value t) {
    onThread0(t, [&] {
      memref::StoreOp::create(e.b, e.i32(0), counter, ValueRange{c0});
    });
  });
  e.eachThread([&](Value t) {
    auto [first, end] = e.shareOf(t, count);
    e.loop(first, end, c1, [&](Value n) {
      e.ifThen(e.icmp(arith::CmpIPredicate::eq,
                      buckets->of(scores.load(e, n)), bucket),
               [&] {
                 Value slot = memref::AtomicRMWOp::create(
                     e.b, arith::AtomicRMWKind::addi, e.i32(1), counter,
                     ValueRange{c0});
                 order.store(e, e.toI32(n), e.toIndex(slot));
               });
    });
  });
  // The heap's order (SPEC §1.3's, a total order on distinct keys) does
  // not depend on the order the atomics collected them in.
  e.eachThread([&](Value t) {
    onThread0(t, [&] {
      Value size = e.toIndex(
          memref::LoadOp::create(e.b, counter, ValueRange{c0}));
      auto worse = [&](Value x, Value y) {
        Value nx = e.toIndex(x), ny = e.toIndex(y);
        return worseScored(e, scores.load(e, nx), keys.loadStored(e, nx),
                           scores.load(e, ny), keys.loadStored(e, ny));
      };
      withIntHeap(e, order, worse, [&](const HeapStorage &heap) {
        sortBestFirst(e, heap, size);
      });
      then(size);
    });
  });
}

void SimtTopPBlockSelection::flagKept() {
  Value keep = e.maxS(loadPick(Keep), e.index(op.getMinTokens()));
  keep = e.minS(e.minS(keep, capacity), count);
  // The first bucket whose count, added to all before it, reaches keep.
  e.eachThread([&](Value t) {
    Value before = e.sumOfShares(shareCounts, t);
    e.ifThen(e.icmp(arith::CmpIPredicate::slt, before, keep), [&] {
      auto [first, end] = e.shareOf(t, bucketCount);
      SmallVector<Value> walk = e.whileLoop(
          {first, before},
          [&](ValueRange it) {
            Value inShare = e.icmp(arith::CmpIPredicate::ult, it[0], end);
            Value size = e.select(
                inShare,
                e.toIndex(sizes.loadStored(
                    e, e.minS(it[0], e.sub(bucketCount, c1)))),
                c0);
            return e.andI(inShare, e.icmp(arith::CmpIPredicate::slt,
                                          e.add(it[1], size), keep));
          },
          [&](ValueRange it) -> SmallVector<Value> {
            return {e.add(it[0], c1),
                    e.add(it[1], e.toIndex(sizes.loadStored(e, it[0])))};
          });
      e.ifThen(e.icmp(arith::CmpIPredicate::ult, walk[0], end), [&] {
        storePick(walk[0], Last);
        storePick(e.sub(keep, walk[1]), Rest);
      });
    });
  });
  // The best `rest` of bucket `last`, then every bucket before it.
  Value last = loadPick(Last), rest = loadPick(Rest);
  e.ifThen(e.icmp(arith::CmpIPredicate::sgt, rest, c0), [&] {
    e.ifThen(e.icmp(arith::CmpIPredicate::ne, last, loadPick(Sorted)),
             [&] { sortBucket(last, [](Value) {}); });
    e.forAll(rest, [&](Value i) {
      setFlag(e, kept, e.toIndex(order.loadStored(e, i)));
    });
  });
  e.eachThread([&](Value t) {
    auto [first, end] = e.shareOf(t, count);
    e.loop(first, end, c1, [&](Value n) {
      e.ifThen(e.icmp(arith::CmpIPredicate::ult,
                      buckets->of(scores.load(e, n)), last),
               [&] { setFlag(e, kept, n); });
    });
  });
}

void SimtTopPBlockSelection::writeKept() {
  RowBuffer out(tokens, prefix);
  auto flaggedIn = [&](Value first, Value end) {
    return e.loop(first, end, c1, {c0}, [&](Value n, ValueRange it) {
      return SmallVector<Value>{
          e.add(it[0], e.select(isFlagged(e, kept, n), c1, c0))};
    })[0];
  };
  e.eachThread([&](Value t) {
    auto [first, end] = e.shareOf(t, count);
    memref::StoreOp::create(e.b, toI64(flaggedIn(first, end)), shareCounts,
                            ValueRange{t});
  });
  e.eachThread([&](Value t) {
    auto [first, end] = e.shareOf(t, count);
    writeFlagged(e, kept, first, end, tokens, prefix,
                 e.sumOfShares(shareCounts, t),
                 [&](Value n) { return keys.loadStored(e, n); });
    onThread0(t, [&] {
      memref::StoreOp::create(e.b, e.i32(0), counter, ValueRange{c0});
    });
  });
  Value keep = e.sumOfShares(shareCounts, threads);
  if (op.getBlocks()) {
    // Slot order is token order unless the selection lists its blocks out
    // of order (select_topk writes them ascending): sort only then.
    e.forAll(e.maxS(e.sub(keep, c1), c0), [&](Value n) {
      Value earlier = out.loadStored(e, n);
      e.ifThen(e.icmp(arith::CmpIPredicate::sgt, earlier,
                      out.loadStored(e, e.add(n, c1))),
               [&] {
                 memref::StoreOp::create(e.b, e.i32(1), counter,
                                         ValueRange{c0});
               });
    });
    Value unsorted = e.icmp(
        arith::CmpIPredicate::ne,
        memref::LoadOp::create(e.b, counter, ValueRange{c0}), e.i32(0));
    e.ifThen(unsorted, [&] {
      e.eachThread([&](Value t) {
        onThread0(t, [&] {
          auto tokenAt = [&](Value slot) -> SmallVector<Value> {
            return {out.loadStored(e, slot)};
          };
          auto storeToken = [&](Value slot, ValueRange item) {
            out.store(e, item[0], slot);
          };
          auto later = [&](ValueRange x, ValueRange y) {
            return e.icmp(arith::CmpIPredicate::sgt, x[0], y[0]);
          };
          sortBestFirst(e, HeapStorage{tokenAt, storeToken, later}, keep);
        });
      });
    });
  }
  e.forAll(e.maxS(e.sub(capacity, keep), c0), [&](Value i) {
    out.store(e, e.i32(-1), e.add(keep, i));
  });
}

} // namespace

func::FuncOp mlir::attn::buildSimtSelectTopPKernel(OpBuilder &builder,
                                                   Location loc, StringRef name,
                                                   SelectTopPOp op,
                                                   const GpuTiling &tiling,
                                                   TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createThreadKernel(builder, loc, name, bindingTypes,
                                         tiling, "select_topp");
  func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b, tiling.blockThreads);
  auto args = func.getArguments();
  unsigned next = 0;
  // A block per (batch, head, row), or per packed row.
  TopPRowStart row(e, op, args, next, [&] { return args.back(); });
  Value tokens = args[next++];
  // scores, keys, count, bucket sizes, bucket weights, order, flags.
  ValueRange temporaries = args.slice(next, 7);
  SimtTopPBlockSelection(e, op, row.prefix, temporaries, tokens).build();
  func::ReturnOp::create(b);
  return func;
}

//===----------------------------------------------------------------------===//
// Sparse and tree attention, split over threads
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildSimtGatheredSplitKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const GpuTiling &tiling,
    TypeRange bindingTypes, KeyPart part) {
  const bool tree = shape.selection == KeySelectionKind::Tree;
  assert(tree == (part == KeyPart::TreeNodes) &&
         "a flash kernel tiles a tree's prefix");
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createThreadKernel(builder, loc, name, bindingTypes, tiling,
                         tree ? "tree_nodes" : "sparse_split");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  unsigned next = 0;
  SoftmaxBindings inputs(func, shape, next);
  Value q = inputs.q;
  Value selection = args[next++];
  Value partialOut = args[next++], partialLse = args[next++];
  Value thread = args.back();
  ValueRange variantBuffers = shape.variants.buffersOf(func);
  Value c1 = e.index(1);

  // Sparse: thread order (batch, head, row, split), or in a ragged batch
  // (token, head, split), the split fastest. Tree nodes: a thread per
  // (batch, head, row), for the last split.
  Value splits = e.dim(partialLse, shape.ragged ? 2 : 3);
  Value split = tree ? e.sub(splits, c1) : e.rem(thread, splits);
  QueryRowOfWorkgroup at(e, tree ? thread : e.div(thread, splits),
                         shape.numHeads, q, inputs.queryOffsets);
  Value lq = at.rows;
  // The keys of the row's sequence, contiguous or in a paged cache.
  KeyRows keys(e, shape, inputs);
  Value lk = keys.length(at.batch);

  if (tree) {
    // The node's own and its ancestors' keys in its window, at their
    // positions P + depth.
    Value prefixLength = e.sub(lk, lq);
    TreeNodeKeys node(e, selection, at.batch, at.row, prefixLength, shape.mask,
                      shape.window);
    SimtRowSoftmax row(e, shape, inputs, keys, at, node.position,
                       variantBuffers);
    SmallVector<Value> state = node.eachTreeKey(
        row.initial(), [&](Value u, Value position, ValueRange it) {
          return row.addKey(it, e.add(prefixLength, u), position);
        });
    row.storePartial(state, partialOut, partialLse, split);
  } else {
    // The split's share of the selection entries; the visible keys of each
    // block listed there for the first time.
    Value pos = e.add(e.sub(lk, lq), at.row);
    SimtRowSoftmax row(e, shape, inputs, keys, at, pos, variantBuffers);
    auto [begin, end] = visibleRange(e, shape.mask, shape.window, pos, lk);
    Value bs = e.index(shape.selectionBlockSize);
    Value entries = e.dim(selection, shape.ragged ? 2 : 3);
    Value perSplit = e.ceilDiv(entries, splits);
    Value from = e.minS(entries, e.mul(split, perSplit));
    Value to = e.minS(entries, e.add(from, perSplit));
    SmallVector<Value> state = forEachListedBlock(
        e, selection, at.at(at.head), e.ceilDiv(lk, bs), from, to,
        row.initial(), [&](Value block, ValueRange it) {
          Value first = e.mul(block, bs);
          Value from = e.maxS(begin, first);
          Value to = e.maxS(e.minS(end, e.add(first, bs)), from);
          return e.loop(from, to, c1, it, [&](Value key, ValueRange state) {
            return row.addKey(state, key);
          });
        });
    row.storePartial(state, partialOut, partialLse, split);
  }
  func::ReturnOp::create(b);
  return func;
}

//===----------------------------------------------------------------------===//
// KV compaction
//===----------------------------------------------------------------------===//

namespace {
/// Copies feature `feature` of a row of `kv`'s copies (the features of the
/// first copy, then of the second): from `from(d)` to `to(d)`, `d` the
/// feature within its copy.
void copyFeature(SimtEmitter &e, const KvCopyBindings &kv, Value feature,
                 function_ref<SmallVector<Value>(Value)> from,
                 function_ref<SmallVector<Value>(Value)> to) {
  ImplicitLocOpBuilder &b = e.b;
  auto copy = [&](std::pair<Value, Value> rows, Value d) {
    memref::StoreOp::create(b, memref::LoadOp::create(b, rows.first, from(d)),
                            rows.second, to(d));
  };
  if (kv.copies.size() == 1)
    return copy(kv.copies[0], feature);
  auto keyType = cast<MemRefType>(kv.copies[0].first.getType());
  const int64_t keyFeatures = keyType.getDimSize(keyType.getRank() - 1);
  e.ifElse(
      e.icmp(arith::CmpIPredicate::ult, feature, e.index(keyFeatures)),
      [&]() -> SmallVector<Value> {
        copy(kv.copies[0], feature);
        return {};
      },
      [&]() -> SmallVector<Value> {
        copy(kv.copies[1], e.sub(feature, e.index(keyFeatures)));
        return {};
      });
}
} // namespace

func::FuncOp mlir::attn::buildSimtKvCompactKernel(OpBuilder &builder,
                                                  Location loc, StringRef name,
                                                  const GpuTiling &tiling,
                                                  TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createThreadKernel(builder, loc, name, bindingTypes,
                                         tiling, "kv_compact");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  KvCopyBindings kv = KvCopyBindings::forCompact(args.drop_back());
  Value k = kv.copies[0].first, path = kv.indices[0], length = kv.indices[1];
  Value thread = args.back();
  const int64_t numKvHeads = staticDim(bindingTypes[0], 1);
  const int64_t features = kv.features();

  // Packed keys [Tk, Hkv, F] with their offsets (one "batch" of Tk rows,
  // each row's sequence found by the offsets), or [B, Hkv, P + T, F].
  Value keyOffsets = kv.indices.size() > 2 ? kv.indices[2] : Value();
  // Thread order (batch, kv head, row, feature), the features of k then
  // those of v fastest.
  Value feature = e.rem(thread, e.index(features));
  Value lk = e.dim(k, keyOffsets ? 0 : 2), nodes = e.dim(path, 1);
  RowOfWorkgroup at(e, e.div(thread, e.index(features)), numKvHeads, lk);
  Value r = at.row;
  Value batch = at.batch, prefixEnd = e.sub(lk, nodes);
  if (keyOffsets) {
    batch = sequenceOfToken(e, keyOffsets, r);
    prefixEnd = e.sub(
        e.toIndex(e.loadInt(keyOffsets, {e.add(batch, e.index(1))})), nodes);
  }
  Value source = compactSourceRow(e, path, length, batch, prefixEnd, r);
  auto rowAt = [&](Value row, Value d) -> SmallVector<Value> {
    if (keyOffsets)
      return {row, at.head, d};
    return {at.batch, at.head, row, d};
  };
  copyFeature(
      e, kv, feature, [&](Value d) { return rowAt(source, d); },
      [&](Value d) { return rowAt(r, d); });
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtAppendedPagesKernel(
    OpBuilder &builder, Location loc, StringRef name, bool combine,
    const GpuTiling &tiling, TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createThreadKernel(builder, loc, name, bindingTypes, tiling,
                         combine ? "appended_pages" : "appended_pages_reset");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  ValueRange bindings = func.getArguments().drop_back();
  Value token = func.getArguments().back();
  if (!combine)
    AppendedPages::reset(e, bindings, token);
  else
    AppendedPages::combine(
        e, bindings, token,
        [&](arith::AtomicRMWKind kind, Value value, Value into, Value page) {
          memref::AtomicRMWOp::create(b, kind, value, into, ValueRange{page});
        });
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtKvAppendKernel(OpBuilder &builder,
                                                 Location loc, StringRef name,
                                                 const GpuTiling &tiling,
                                                 TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createThreadKernel(builder, loc, name, bindingTypes, tiling, "kv_append");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  KvCopyBindings kv = KvCopyBindings::forAppend(args.drop_back());
  Value slots = kv.indices[0], thread = args.back();
  auto cacheType = cast<MemRefType>(kv.copies[0].second.getType());
  const int64_t pageSize = cacheType.getDimSize(1);
  const int64_t numKvHeads = cacheType.getDimSize(2);
  const int64_t features = kv.features();

  // Thread order (token, kv head, feature), the features of k then those
  // of v fastest; the token's rows go to flat slot slots[t] of the caches
  // (the runtime checked it is -1 or a slot of the cache).
  Value feature = e.rem(thread, e.index(features));
  Value rest = e.div(thread, e.index(features));
  Value head = e.rem(rest, e.index(numKvHeads));
  Value token = e.div(rest, e.index(numKvHeads));
  Value slot = e.loadInt(slots, {token});
  e.ifThen(e.icmp(arith::CmpIPredicate::sge, slot, e.i32(0)), [&] {
    Value flat = e.toIndex(slot);
    Value page = e.div(flat, e.index(pageSize));
    Value offset = e.rem(flat, e.index(pageSize));
    copyFeature(
        e, kv, feature,
        [&](Value d) {
          return SmallVector<Value>{token, head, d};
        },
        [&](Value d) {
          return SmallVector<Value>{page, offset, head, d};
        });
  });
  func::ReturnOp::create(b);
  return func;
}
