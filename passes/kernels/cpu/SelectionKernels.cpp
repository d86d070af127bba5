//===- SelectionKernels.cpp - CPU kernels of sparsity and trees -----------===//
//
// Sparse and tree attention differ from dense attention only in which keys
// a query row sees, and that set is per row (per head, too, for
// selections). So their kernels work a row at a time: the row gathers the
// indices of the keys it sees into a list, then attends to the list in
// vectors of `width` keys with the online softmax (scores of a vector of
// keys in one transpose-and-add, one rescale of the accumulator per
// vector). The selections score their candidates and keep their budget
// with a binary heap ordered by (score, lower index first) — the tie rule
// of SPEC §1.3 — so top-k costs O(NB log k) and top-p one heap sort of the
// candidates, both small next to scoring them.
//
// Per-row indices are i32 (what the selections and trees are stored in);
// sizes and positions are index values, signed where a position can fall
// before the first key (Lq > Lk without a mask).
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cpu/CpuKernels.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

/// The static facts of a [.., H, .., D] memref type.
int64_t staticDim(Type memrefType, int64_t d) {
  return cast<MemRefType>(memrefType).getDimSize(d);
}

/// A heap-allocated 1-D scratch buffer of `count` elements of `type`.
Value allocRow(KernelEmitter &e, Type type, Value count) {
  return memref::AllocOp::create(
      e.b, MemRefType::get({ShapedType::kDynamic}, type), ValueRange{count});
}

/// q[row..., :] * scale as f32 on the stack (`row`: the row's index prefix),
/// padded with zeros to whole vectors (so that masked key loads meet
/// zeros).
Value scaledQueryRow(KernelEmitter &e, Value q, ArrayRef<Value> row,
                     int64_t headDim, double scale) {
  int64_t padded = roundUp(headDim, e.width);
  Value qs = e.scratch({padded});
  for (int64_t off = 0; off < padded; off += e.width)
    e.storeVector(e.splat(0.0), qs, {e.index(off)}, e.width);
  Value s = e.scalar(scale);
  e.loop(e.index(0), e.index(headDim), e.index(1), [&](Value d) {
    e.store(e.fmul(e.load(q, withIndex(row, d)), s), qs, {d});
  });
  return qs;
}

/// The scores of `width` keys, lane l for the key whose row of k has the
/// index prefix `keyRows[l]`: dot(qs, k) (softcapped), all lanes valid
/// keys.
Value scoreKeys(KernelEmitter &e, Value qs, Value k,
                ArrayRef<SmallVector<Value>> keyRows, int64_t headDim,
                double softcap) {
  SmallVector<Value> sums(e.width, e.splat(0.0));
  for (int64_t off = 0; off < headDim; off += e.width) {
    int64_t lanes = std::min(e.width, headDim - off);
    Value qv = vector::LoadOp::create(e.b, e.vec, qs, e.index(off));
    for (int64_t l = 0; l < e.width; ++l)
      sums[l] =
          e.fma(qv, e.loadVector(k, withIndex(keyRows[l], e.index(off)), lanes),
                sums[l]);
  }
  return e.softcap(e.sumEach(sums), softcap);
}

/// scoreKeys with each key read through the `int4` estimator's levels
/// (Int4Levels): a first pass over the key's channels finds its lowest and
/// highest, a second takes the dot product with the rounded channels.
Value estimateKeysInt4(KernelEmitter &e, Value qs, Value k,
                       ArrayRef<SmallVector<Value>> keyRows, int64_t headDim,
                       double softcap) {
  const float inf = std::numeric_limits<float>::infinity();
  auto load = [&](int64_t l, int64_t off) {
    int64_t lanes = std::min(e.width, headDim - off);
    return std::make_pair(
        e.loadVector(k, withIndex(keyRows[l], e.index(off)), lanes),
        lanes == e.width ? Value() : e.prefixMask(lanes));
  };
  SmallVector<Value> sums;
  for (int64_t l = 0; l < e.width; ++l) {
    Value low = e.splat(inf), high = e.splat(-inf);
    for (int64_t off = 0; off < headDim; off += e.width) {
      auto [kv, inside] = load(l, off);
      Value lowSide = inside ? e.select(inside, kv, e.splat(inf)) : kv;
      Value highSide = inside ? e.select(inside, kv, e.splat(-inf)) : kv;
      low = arith::MinimumFOp::create(e.b, low, lowSide);
      high = e.fmax(high, highSide);
    }
    Value lowest = e.fsub(e.scalar(0.0), e.maxLanes(e.fsub(e.splat(0.0), low)));
    Int4Levels levels =
        Int4Levels::of(e, lowest, e.maxLanes(high)).broadcast(e);
    // Lanes past the key's channels meet zeros in qs.
    Value sum = e.splat(0.0);
    for (int64_t off = 0; off < headDim; off += e.width) {
      Value qv = vector::LoadOp::create(e.b, e.vec, qs, e.index(off));
      sum = e.fma(qv, levels.round(e, load(l, off).first), sum);
    }
    sums.push_back(sum);
  }
  return e.softcap(e.sumEach(sums), softcap);
}

/// The key rows of lanes [0, width) for list entries first .. first +
/// width - 1 of `keys` (i32); entries past `count` repeat the last one so
/// that every load stays inside the keys (their lanes are masked).
SmallVector<Value> keyRowsOf(KernelEmitter &e, Value keys, Value first,
                             Value count) {
  Value last = e.sub(count, e.index(1));
  SmallVector<Value> rows;
  for (int64_t l = 0; l < e.width; ++l)
    rows.push_back(
        e.toIndex(e.loadInt(keys, {e.minS(e.add(first, e.index(l)), last)})));
  return rows;
}

/// A cleared i8 flag per item of [0, count).
Value zeroFlags(KernelEmitter &e, Value count) {
  Value flags = allocRow(e, e.b.getI8Type(), count);
  clearFlags(e, flags, count);
  return flags;
}

} // namespace

namespace {

/// Flags the blocks listed in selection[prefix..., :] that lie in
/// [0, numBlocks); -1 entries, repeats and entries past the keys are
/// ignored (SPEC: a selection's -1 padding; nothing outside the keys).
Value markSelectedBlocks(KernelEmitter &e, Value selection, ValueRange prefix,
                         Value numBlocks) {
  Value marks = zeroFlags(e, numBlocks);
  Value entries =
      e.dim(selection, cast<MemRefType>(selection.getType()).getRank() - 1);
  e.loop(e.index(0), entries, e.index(1), [&](Value n) {
    SmallVector<Value> indices(prefix);
    indices.push_back(n);
    Value block = e.loadInt(selection, indices);
    Value inside =
        e.andI(e.icmp(arith::CmpIPredicate::sge, block, e.i32(0)),
               e.icmp(arith::CmpIPredicate::slt, block, e.toI32(numBlocks)));
    e.ifThen(inside, [&] {
      // Clamped so the store is in bounds even where the flag is not set.
      setFlag(e, marks, e.toIndex(e.select(inside, block, e.i32(0))));
    });
  });
  return marks;
}

/// Appends to `keys` from `count` the keys of [begin, end) that lie in a
/// block flagged in `marks`; returns the new count.
Value gatherMarkedKeys(KernelEmitter &e, Value marks, int64_t blockSize,
                       Value begin, Value end, Value keys, Value count) {
  Value bs = e.index(blockSize), one = e.index(1);
  Value firstBlock = e.div(begin, bs);
  Value endBlock = e.ceilDiv(end, bs);
  return e.loop(firstBlock, e.maxS(endBlock, firstBlock), one, {count},
                [&](Value block, ValueRange it) -> SmallVector<Value> {
                  return e.ifElse(
                      isFlagged(e, marks, block),
                      [&]() -> SmallVector<Value> {
                        Value from = e.maxS(begin, e.mul(block, bs));
                        Value to = e.minS(end, e.add(e.mul(block, bs), bs));
                        return e.loop(
                            from, e.maxS(to, from), one, {it[0]},
                            [&](Value j, ValueRange n) -> SmallVector<Value> {
                              memref::StoreOp::create(e.b, e.toI32(j), keys,
                                                      n[0]);
                              return {e.add(n[0], one)};
                            });
                      },
                      [&]() -> SmallVector<Value> { return {it[0]}; });
                })[0];
}

} // namespace

//===----------------------------------------------------------------------===//
// Block metadata
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildBlockMetaKernel(OpBuilder &builder, Location loc,
                                              StringRef name,
                                              const MetaLayout &layout,
                                              const CpuTiling &tiling,
                                              TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "block_meta");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  auto args = func.getArguments();
  const int64_t D = staticDim(bindingTypes[0], 3);
  MetaBlock block(e, args.back(), layout, args.drop_back());
  Value k = block.keys, meta = block.meta;
  // Channel-wise min and max, a vector of channels at a time.
  auto bound = [&] {
    for (int64_t off = 0; off < D; off += e.width) {
      int64_t lanes = std::min(e.width, D - off);
      SmallVector<Value> extremes = e.loop(
          block.first, block.end, e.index(1),
          {e.splat(std::numeric_limits<float>::infinity()), e.splat(kNegInf)},
          [&](Value j, ValueRange it) -> SmallVector<Value> {
            Value key =
                e.loadVector(k, withIndex(block.key(j), e.index(off)), lanes);
            return {arith::MinimumFOp::create(b, it[0], key),
                    e.fmax(it[1], key)};
          });
      for (int64_t which = 0; which < 2; ++which)
        e.storeVector(extremes[which], meta,
                      withIndex(block.bound(which), e.index(off)), lanes);
    }
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

namespace {

/// How many blocks ahead top-k requests a block's metadata. A block's
/// bounds take a few hundred cycles of products, while its metadata
/// (2 D channels) comes from DRAM, where the hardware prefetcher does not
/// keep the core's few outstanding misses busy (nor can it follow a paged
/// cache from page to page); measured on Zen 3 (bench/RESULTS.md).
constexpr int64_t kMetaAhead = 4;

/// Requests into L2 (prefetcht1) the cache lines of a block's bounds, its
/// min then its max row, spread evenly over the channel vectors of the
/// block before it, so that the requests go out while the products run
/// instead of in one burst the core cannot track.
class MetaRequests {
public:
  MetaRequests(KernelEmitter &e, Value meta, int64_t channels, Value block,
               function_ref<SmallVector<Value>(Value, Value)> boundOf)
      : e(e), meta(meta) {
    const int64_t perLine =
        512 / KernelEmitter::storageType(meta).getIntOrFloatBitWidth();
    rowLines = llvm::divideCeil(channels, perLine);
    lineChannels = perLine;
    vectors = llvm::divideCeil(channels, e.width);
    for (int64_t which = 0; which < 2; ++which)
      rows.push_back(boundOf(block, e.index(which)));
  }

  /// Issues the requests that fall to channel vector `vector`.
  void issue(int64_t vector) {
    const int64_t lines = 2 * rowLines;
    for (int64_t line = vector * lines / vectors;
         line < (vector + 1) * lines / vectors; ++line)
      memref::PrefetchOp::create(
          e.b, meta,
          withIndex(rows[line / rowLines],
                    e.index((line % rowLines) * lineChannels)),
          /*isWrite=*/false, /*localityHint=*/2, /*isDataCache=*/true);
  }

private:
  KernelEmitter &e;
  Value meta;
  int64_t rowLines, lineChannels, vectors;
  SmallVector<SmallVector<Value>> rows;
};

} // namespace

namespace {

/// Quest top-k's kernels (TopKPhase), built one phase at a time: the
/// workgroup's row and its candidate blocks, the query split for the
/// bounds, the bounds of a range of candidates, and the budget kept.
class TopKKernel {
public:
  TopKKernel(OpBuilder &builder, Location loc, StringRef name, SelectTopKOp op,
             const CpuTiling &tiling, TypeRange bindingTypes, TopKPhase phase);

  /// Emits the phase's kernel and returns it.
  func::FuncOp build();

private:
  /// The row of selection workgroup `selection` and its candidates.
  void mapRow(Value selection);
  /// Splits each served head's scaled query into its positive and
  /// negative parts (queries[g, 0] and [g, 1]).
  void splitQueries();
  /// Quest's bounds of middle candidates [from, to) for every head served,
  /// handed to store(head served, candidate, bound).
  void boundCandidates(Value from, Value to,
                       function_ref<void(Value, Value, Value)> store);
  /// Writes every candidate for each head when there are at most top_k,
  /// else runs `keepBest`.
  void keepAllOr(function_ref<void()> keepBest);
  /// Writes each head's sink, best `fill` middle and local blocks, the
  /// middle ones ranked by scoreOf(head served, candidate).
  void keepBudget(function_ref<Value(Value, Value)> scoreOf);

  /// Runs body(head served, output prefix) for each query head served.
  void eachHead(function_ref<void(Value, ValueRange)> body);
  void store(ValueRange prefix, Value value, Value slot);

  SelectTopKOp op;
  const TopKPhase phase;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  KernelEmitter e;

  bool paged, ragged;
  int64_t D, group, numKvHeads, kvHeadsServed, headsServed;
  int64_t topK, sink, local, fill;
  double scale;

  // The bindings.
  Value q, meta, queryOffsets, blocks, bounds, workgroup;
  std::optional<SelectionKeys> keys;

  // The row (mapRow).
  Value c0, c1;
  std::optional<QueryRowOfWorkgroup> at;
  Value firstKvHead, firstHead, lk, firstBlock, count, fits;
  Value middleFirst, middle, localFirst;
  /// q+ and q- of each head served (splitQueries).
  Value queries;
};

TopKKernel::TopKKernel(OpBuilder &builder, Location loc, StringRef name,
                       SelectTopKOp op, const CpuTiling &tiling,
                       TypeRange bindingTypes, TopKPhase phase)
    : op(op), phase(phase), guard(builder),
      func(createKernel(builder, loc, name, bindingTypes, tiling,
                        phase == TopKPhase::Bounds ? "block_bounds"
                                                   : "select_topk")),
      b(loc, builder), e(b, tiling.vectorWidth) {
  // Over a paged cache the metadata is per page ([NP, 2, Hkv, D]) and
  // each sequence has its own key length; a ragged batch packs the rows.
  paged = static_cast<bool>(op.getPageTable());
  ragged = static_cast<bool>(op.getCuSeqlensQ());
  auto args = func.getArguments();
  unsigned next = 0;
  q = args[next++], meta = args[next++];
  keys.emplace(args, next, paged);
  queryOffsets = ragged ? args[next++] : Value();
  blocks = args[next++], bounds = args[next++], workgroup = args.back();
  const int64_t H = staticDim(bindingTypes[0], 1);
  D = staticDim(bindingTypes[0], ragged ? 2 : 3);
  numKvHeads = staticDim(bindingTypes[1], SelectionKeys::metaHeadDim(paged));
  group = H / numKvHeads;
  kvHeadsServed = kvHeadsPerCpuWorkgroup(paged, numKvHeads);
  headsServed = group * kvHeadsServed;
  topK = op.getTopK();
  sink = op.getSinkBlocks(), local = op.getLocalBlocks();
  fill = topK - sink - local;
  scale = selectionScale(op.getScale(), D);
  c0 = e.index(0), c1 = e.index(1);
}

func::FuncOp TopKKernel::build() {
  switch (phase) {
  case TopKPhase::Whole:
    mapRow(workgroup);
    keepAllOr([&] {
      // The bounds of the row's middle candidates, head g's at
      // scores[g * middle + n].
      Value scores;
      if (fill > 0) {
        splitQueries();
        scores = allocRow(e, e.f32, e.mul(middle, e.index(headsServed)));
        boundCandidates(c0, middle, [&](Value g, Value n, Value bound) {
          e.store(bound, scores, {e.add(e.mul(g, middle), n)});
        });
      }
      keepBudget([&](Value g, Value n) {
        return e.load(scores, {e.add(e.mul(g, middle), n)});
      });
      if (scores)
        memref::DeallocOp::create(b, scores);
    });
    break;
  case TopKPhase::Bounds: {
    // Workgroup = (selection workgroup, chunk of candidates), the chunk
    // fastest.
    Value chunks = e.ceilDiv(e.dim(bounds, 2), e.index(kTopKBoundsChunk));
    Value selection = e.div(workgroup, chunks);
    mapRow(selection);
    Value from = e.mul(e.rem(workgroup, chunks), e.index(kTopKBoundsChunk));
    Value to = e.minS(e.add(from, e.index(kTopKBoundsChunk)), middle);
    // Rows whose candidates fit the budget need no bounds.
    Value needed =
        e.andI(e.icmp(arith::CmpIPredicate::ugt, count, e.index(topK)),
               e.icmp(arith::CmpIPredicate::slt, from, to));
    if (fill > 0)
      e.ifThen(needed, [&] {
        splitQueries();
        boundCandidates(from, to, [&](Value g, Value n, Value bound) {
          e.store(bound, bounds, {selection, g, n});
        });
      });
    break;
  }
  case TopKPhase::Select:
    mapRow(workgroup);
    keepAllOr([&] {
      keepBudget([&](Value g, Value n) {
        return e.load(bounds, {workgroup, g, n});
      });
    });
    break;
  }
  func::ReturnOp::create(b);
  return func;
}

void TopKKernel::mapRow(Value selection) {
  at.emplace(e, selection, numKvHeads / kvHeadsServed, q, queryOffsets);
  firstKvHead = e.mul(at->head, e.index(kvHeadsServed));
  firstHead = e.mul(firstKvHead, e.index(group));
  lk = keys->length(e, at->batch);
  std::tie(firstBlock, count) =
      topKCandidates(e, op, e.add(e.sub(lk, at->rows), at->row), lk);
  fits = e.icmp(arith::CmpIPredicate::ule, count, e.index(topK));
  // More candidates than the budget: the first `sink` and the last
  // `local` ones, then the `fill` best of those between.
  middleFirst = e.add(firstBlock, e.index(sink));
  middle = e.sub(count, e.index(sink + local));
  localFirst = e.sub(e.add(firstBlock, count), e.index(local));
}

void TopKKernel::eachHead(function_ref<void(Value, ValueRange)> body) {
  e.loop(c0, e.index(headsServed), c1,
         [&](Value g) { body(g, at->at(e.add(firstHead, g))); });
}

void TopKKernel::store(ValueRange prefix, Value value, Value slot) {
  SmallVector<Value> indices(prefix);
  indices.push_back(slot);
  memref::StoreOp::create(b, value, blocks, indices);
}

void TopKKernel::splitQueries() {
  // As min <= max, a channel's max(q lo, q hi) is q hi where q >= 0 and
  // q lo where q < 0, so a block's bound is sum(q+ hi + q- lo) with
  // q+ = max(q, 0) and q- = min(q, 0): two fused multiply-adds per channel
  // vector instead of two products, a NaN-propagating max and an add.
  const int64_t padded = roundUp(D, e.width);
  queries = memref::AllocaOp::create(
      b, MemRefType::get({headsServed, 2, padded}, e.f32),
      b.getI64IntegerAttr(64));
  e.loop(c0, e.index(headsServed), c1, [&](Value g) {
    for (int64_t part = 0; part < 2; ++part)
      for (int64_t off = 0; off < padded; off += e.width)
        vector::StoreOp::create(b, e.splat(0.0), queries,
                                ValueRange{g, e.index(part), e.index(off)});
    e.loop(c0, e.index(D), c1, [&](Value d) {
      Value scaled =
          e.fmul(e.load(q, withIndex(at->at(e.add(firstHead, g)), d)),
                 e.scalar(scale));
      Value zero = e.scalar(0.0);
      e.store(e.fmax(scaled, zero), queries, {g, c0, d});
      e.store(arith::MinimumFOp::create(b, scaled, zero), queries, {g, c1, d});
    });
  });
}

void TopKKernel::boundCandidates(
    Value from, Value to, function_ref<void(Value, Value, Value)> store) {
  Value lastCandidate = e.add(middleFirst, e.sub(to, c1));
  // Quest's bounds of block `block` for the query heads [s * group,
  // (s + 1) * group) of served kv head s; a block's served kv heads go in
  // their order in memory.
  auto boundKvHeads = [&](Value block, Value n, Value served) {
    Value kvHead = e.add(firstKvHead, served);
    auto boundOf = [&](Value block, Value which) {
      return keys->bound(e, at->batch, kvHead, block, which);
    };
    SmallVector<Value> low = boundOf(block, c0);
    SmallVector<Value> high = boundOf(block, c1);
    MetaRequests requests(
        e, meta, D, e.minS(e.add(block, e.index(kMetaAhead)), lastCandidate),
        boundOf);
    Value firstServed = e.mul(served, e.index(group));
    SmallVector<Value> sums(group, e.splat(0.0));
    for (int64_t off = 0; off < D; off += e.width) {
      requests.issue(off / e.width);
      int64_t lanes = std::min(e.width, D - off);
      Value lo = e.loadVector(meta, withIndex(low, e.index(off)), lanes);
      Value hi = e.loadVector(meta, withIndex(high, e.index(off)), lanes);
      for (int64_t g = 0; g < group; ++g) {
        auto part = [&](int64_t which) {
          return vector::LoadOp::create(
              b, e.vec, queries,
              ValueRange{e.add(firstServed, e.index(g)), e.index(which),
                         e.index(off)});
        };
        sums[g] = e.fma(part(1), lo, e.fma(part(0), hi, sums[g]));
      }
    }
    for (int64_t g = 0; g < group; ++g)
      store(e.add(firstServed, e.index(g)), n, e.sumLanes(sums[g]));
  };
  e.loop(from, to, c1, [&](Value n) {
    Value block = e.add(middleFirst, n);
    if (kvHeadsServed == 1)
      boundKvHeads(block, n, c0);
    else
      e.loop(c0, e.index(kvHeadsServed), c1,
             [&](Value served) { boundKvHeads(block, n, served); });
  });
}

void TopKKernel::keepAllOr(function_ref<void()> keepBest) {
  e.ifElse(
      fits,
      [&]() -> SmallVector<Value> {
        eachHead([&](Value, ValueRange prefix) {
          e.loop(c0, count, c1, [&](Value n) {
            store(prefix, e.toI32(e.add(firstBlock, n)), n);
          });
          padWithMinusOne(e, blocks, prefix, count, e.dim(blocks, 3));
        });
        return {};
      },
      [&]() -> SmallVector<Value> {
        keepBest();
        return {};
      });
}

void TopKKernel::keepBudget(function_ref<Value(Value, Value)> scoreOf) {
  Value heap = fill > 0 ? allocRow(e, b.getI32Type(), e.index(fill)) : Value();
  Value chosen = fill > 0 ? allocRow(e, b.getI8Type(), middle) : Value();
  eachHead([&](Value g, ValueRange prefix) {
    e.loop(c0, e.index(sink), c1,
           [&](Value n) { store(prefix, e.toI32(e.add(firstBlock, n)), n); });
    Value slot = e.index(sink);
    if (fill > 0) {
      auto worse = [&](Value x, Value y) {
        Value sx = scoreOf(g, e.toIndex(x));
        Value sy = scoreOf(g, e.toIndex(y));
        return worseScored(e, sx, x, sy, y);
      };
      e.loop(c0, e.index(fill), c1,
             [&](Value n) { memref::StoreOp::create(b, e.toI32(n), heap, n); });
      withIntHeap(e, heap, worse, [&](const HeapStorage &storage) {
        heapify(e, storage, e.index(fill));
        e.loop(e.index(fill), middle, c1, [&](Value n) {
          Value candidate = e.toI32(n);
          e.ifThen(worse(e.loadInt(heap, {c0}), candidate), [&] {
            memref::StoreOp::create(b, candidate, heap, c0);
            siftDown(e, storage, e.index(fill), c0);
          });
        });
      });
      clearFlags(e, chosen, middle);
      e.loop(c0, e.index(fill), c1, [&](Value n) {
        setFlag(e, chosen, e.toIndex(e.loadInt(heap, {n})));
      });
      slot =
          writeFlagged(e, chosen, c0, middle, blocks, prefix, slot,
                       [&](Value n) { return e.toI32(e.add(middleFirst, n)); });
    }
    e.loop(c0, e.index(local), c1, [&](Value n) {
      store(prefix, e.toI32(e.add(localFirst, n)), e.add(slot, n));
    });
  });
  if (fill > 0)
    for (Value buffer : {heap, chosen})
      memref::DeallocOp::create(b, buffer);
}

} // namespace

func::FuncOp mlir::attn::buildSelectTopKKernel(OpBuilder &builder, Location loc,
                                               StringRef name, SelectTopKOp op,
                                               const CpuTiling &tiling,
                                               TypeRange bindingTypes,
                                               TopKPhase phase) {
  return TopKKernel(builder, loc, name, op, tiling, bindingTypes, phase)
      .build();
}

//===----------------------------------------------------------------------===//
// Top-p token selection
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildSelectTopPKernel(OpBuilder &builder, Location loc,
                                               StringRef name, SelectTopPOp op,
                                               const CpuTiling &tiling,
                                               TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "select_topp");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  unsigned next = 0;
  const bool paged = static_cast<bool>(op.getPageTable());
  const bool ragged = static_cast<bool>(op.getCuSeqlensQ());
  Value q = func.getArgument(next++), k = func.getArgument(next++);
  Value pageTable = paged ? func.getArgument(next++) : Value();
  Value keyLengths = paged ? func.getArgument(next++) : Value();
  Value queryOffsets = ragged ? func.getArgument(next++) : Value();
  Value blocks = op.getBlocks() ? func.getArgument(next++) : Value();
  Value tokens = func.getArgument(next++);
  Value workgroup = func.getArgument(next);
  const int64_t H = staticDim(bindingTypes[0], 1);
  const int64_t D = staticDim(bindingTypes[0], ragged ? 2 : 3);
  const int64_t group = H / staticDim(bindingTypes[1], paged ? 2 : 1);
  MaskAttr mask = op.getMask();
  double scale = selectionScale(op.getScale(), D);
  double softcap = op.getSoftcap().convertToDouble();
  Value c0 = e.index(0), c1 = e.index(1);
  Value capacity = e.dim(tokens, ragged ? 2 : 3);
  QueryRowOfWorkgroup at(e, workgroup, H, q, queryOffsets);
  Value lq = at.rows;
  Value kvHead = e.div(at.head, e.index(group));
  // The keys of the row's sequence, contiguous or in a paged cache.
  KeyRows kv(e, k, pageTable, keyLengths);
  Value lk = kv.length(at.batch);
  Value pos = e.add(e.sub(lk, lq), at.row);
  auto [begin, end] =
      visibleRange(e, mask.getKind(), mask.getWindow(), pos, lk);
  SmallVector<Value> prefix = at.at(at.head);

  // The candidates, ascending: the visible keys (of the listed blocks).
  Value candidates = allocRow(e, b.getI32Type(), e.maxS(lk, c1));
  Value count;
  Value marks;
  if (blocks) {
    int64_t bs = *op.getBlockSize();
    marks = markSelectedBlocks(e, blocks, prefix, e.ceilDiv(lk, e.index(bs)));
    count = gatherMarkedKeys(e, marks, bs, begin, end, candidates, c0);
  } else {
    count = e.sub(end, begin);
    e.loop(begin, end, c1, [&](Value j) {
      memref::StoreOp::create(b, e.toI32(j), candidates, e.sub(j, begin));
    });
  }

  // Their scores (exact, or from int4 keys), a vector of keys at a time.
  Value qs = scaledQueryRow(e, q, prefix, D, scale);
  Value scores = allocRow(e, e.f32, e.add(count, e.index(e.width)));
  auto score = op.getEstimator() == SelectionEstimator::Int4 ? estimateKeysInt4
                                                             : scoreKeys;
  e.loop(c0, count, e.index(e.width), [&](Value first) {
    SmallVector<SmallVector<Value>> rows;
    for (Value j : keyRowsOf(e, candidates, first, count))
      rows.push_back(kv.at(at.batch, kvHead, j));
    Value s = score(e, qs, k, rows, D, softcap);
    e.storeVector(s, scores, {first}, e.sub(count, first));
  });

  // Candidate n is the n-th visible key, so n orders ties like its token.
  Value row = e.maxS(count, c1);
  Value buckets = topPBucketCount(e, count);
  Value kept = zeroFlags(e, row);
  Value bucketSizes = allocRow(e, b.getI32Type(), buckets);
  Value bucketWeights = allocRow(e, b.getF64Type(), buckets);
  Value order = allocRow(e, b.getI32Type(), row);
  flagTopPKept(e, op,
               TopPRow{scores, [&](Value n) { return e.toI32(n); }, bucketSizes,
                       bucketWeights, order, kept},
               count, capacity);
  Value slot = writeFlagged(e, kept, c0, count, tokens, prefix, c0, [&](Value n) {
    return e.loadInt(candidates, {n});
  });
  padWithMinusOne(e, tokens, prefix, slot, capacity);
  for (Value buffer :
       {candidates, scores, kept, bucketSizes, bucketWeights, order})
    memref::DeallocOp::create(b, buffer);
  if (marks)
    memref::DeallocOp::create(b, marks);
  func::ReturnOp::create(b);
  return func;
}

//===----------------------------------------------------------------------===//
// Attention over gathered keys
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildGatheredAttentionKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const CpuTiling &tiling,
    TypeRange bindingTypes) {
  // A tree's prefix is the flash or split-KV kernel's (KeyPart::TreePrefix);
  // this kernel takes its nodes' own keys (KeyPart::TreeNodes).
  bool tree = shape.selection == KeySelectionKind::Tree;
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createKernel(builder, loc, name, bindingTypes, tiling,
                                   tree ? "tree_nodes" : "sparse_attention");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  const int64_t W = e.width, D = shape.headDim, Dv = shape.valueDim;
  auto args = func.getArguments();
  unsigned next = 0;
  SoftmaxBindings inputs(func, shape, next);
  Value q = inputs.q, k = inputs.k, v = inputs.v;
  // P v on AVX512-BF16's pair products (bf16 v): the probabilities rounded
  // to bf16, as in the flash and split-KV kernels.
  const bool pairedValues =
      tiling.bf16Dot && KernelEmitter::storageType(v).isBF16();
  Value selection = args[next++];
  Value gate =
      !tree && shape.epilogue == Epilogue::SigmoidGate ? args[next++] : Value();
  Value sinks = !tree && shape.withSinks ? args[next++] : Value();
  Value out = args[next++];
  Value lse = tree || shape.withLogSumExp ? args[next++] : Value();
  Value workgroup = args.back();
  VariantEmitter variants(e, shape.variants, shape.variants.buffersOf(func));

  Value c0 = e.index(0), c1 = e.index(1);
  // The row: of [B, H, Lq], or packed [T, H] in a ragged batch.
  QueryRowOfWorkgroup at(e, workgroup, shape.numHeads, q, inputs.queryOffsets);
  Value lq = at.rows;
  Value kvHead = e.div(at.head, e.index(shape.numHeads / shape.numKvHeads));
  // The keys of the row's sequence, contiguous or in a paged cache.
  KeyRows kv(e, shape, inputs);
  Value lk = kv.length(at.batch);
  // A node has at most T = Lq tree keys.
  Value listLength = e.maxS(tree ? lq : lk, c1);
  Value keys = allocRow(e, b.getI32Type(), listLength);
  // Where the variant regions see the row and each listed key: the row's
  // position and the keys' indices, or a tree node's and its keys'
  // positions P + depth (a list of their own).
  Value queryPos, keyPositions;
  Value count;
  Value marks;
  if (!tree) {
    // The visible keys of the selected blocks, ascending.
    queryPos = e.add(e.sub(lk, lq), at.row);
    auto [begin, end] = visibleRange(e, shape.mask, shape.window, queryPos, lk);
    int64_t bs = shape.selectionBlockSize;
    marks = markSelectedBlocks(e, selection, at.at(at.head),
                               e.ceilDiv(lk, e.index(bs)));
    count = gatherMarkedKeys(e, marks, bs, begin, end, keys, c0);
    keyPositions = keys;
  } else {
    // The node's own and its ancestors' keys inside its window.
    Value prefixLength = e.sub(lk, lq);
    TreeNodeKeys node(e, selection, at.batch, at.row, prefixLength, shape.mask,
                      shape.window);
    queryPos = node.position;
    if (!shape.variants.empty())
      keyPositions = allocRow(e, b.getI32Type(), listLength);
    count = node.eachTreeKey(
        {c0}, [&](Value u, Value position, ValueRange n) -> SmallVector<Value> {
          memref::StoreOp::create(b, e.toI32(e.add(prefixLength, u)), keys,
                                  n[0]);
          if (keyPositions)
            memref::StoreOp::create(b, e.toI32(position), keyPositions, n[0]);
          return {e.add(n[0], c1)};
        })[0];
  }

  // Online softmax over the list, `W` keys at a time: one rescale of the
  // accumulator per vector of keys.
  Value qs = scaledQueryRow(e, q, at.at(at.head), D, shape.scale);
  const int64_t DvPadded = roundUp(Dv, W);
  Value acc = e.scratch({DvPadded});
  for (int64_t off = 0; off < DvPadded; off += W)
    e.storeVector(e.splat(0.0), acc, {e.index(off)}, W);
  SmallVector<Value> state = e.loop(
      c0, count, e.index(W), {e.scalar(kNegInf), e.scalar(0.0)},
      [&](Value first, ValueRange it) -> SmallVector<Value> {
        SmallVector<SmallVector<Value>> rows;
        for (Value j : keyRowsOf(e, keys, first, count))
          rows.push_back(kv.at(at.batch, kvHead, j));
        Value s = scoreKeys(e, qs, k, rows, D, shape.softcap);
        Value visible = e.dynamicMask(e.sub(count, first));
        if (!shape.variants.empty()) {
          SmallVector<Value> positions;
          for (Value position : keyRowsOf(e, keyPositions, first, count))
            positions.push_back(e.toI32(position));
          Value keyPos = vector::FromElementsOp::create(
              b, VectorType::get({W}, b.getI32Type()), positions);
          s = variants.score(s, at.batch, at.head, queryPos, keyPos);
          if (variants.hasMaskMod())
            visible = e.andI(
                visible, variants.visible(at.batch, at.head, queryPos, keyPos));
        }
        s = e.select(visible, s, e.splat(kNegInf));
        Value newMax = e.fmax(it[0], e.maxLanes(s));
        Value safe = e.safeMax(newMax);
        Value alpha = e.exp(e.fsub(it[0], safe));
        Value p = e.exp(e.fsub(s, e.broadcast(safe)));
        Value sum = e.fadd(e.fmul(it[1], alpha), e.sumLanes(p));
        // One weight per key, or per pair of keys (pairedValues).
        SmallVector<Value> weights;
        Value narrowP = pairedValues ? e.toPairOperand(p) : Value();
        for (int64_t l = 0; l < W; l += pairedValues ? 2 : 1)
          weights.push_back(
              pairedValues ? e.broadcastLanePair(narrowP, l)
                           : e.broadcast(vector::ExtractOp::create(b, p, l)));
        Value alphaVec = e.broadcast(alpha);
        for (int64_t off = 0; off < Dv; off += W) {
          int64_t lanes = std::min(W, Dv - off);
          Value a = e.fmul(vector::LoadOp::create(b, e.vec, acc, e.index(off)),
                           alphaVec);
          auto valueRow = [&](int64_t l) {
            return withIndex(rows[l], e.index(off));
          };
          for (int64_t l = 0; pairedValues && l < W; l += 2)
            a = e.dotPairs(
                a,
                e.interleavePairs(e.loadStored(v, valueRow(l), lanes),
                                  e.loadStored(v, valueRow(l + 1), lanes)),
                weights[l / 2]);
          for (int64_t l = 0; !pairedValues && l < W; ++l)
            a = e.fma(weights[l], e.loadVector(v, valueRow(l), lanes), a);
          vector::StoreOp::create(b, a, acc, e.index(off));
        }
        return {newMax, sum};
      });
  // The tree keys' part is the last split of the partials, ungated.
  SmallVector<Value> outAt = at.at(at.head);
  if (tree)
    outAt.push_back(e.sub(e.dim(lse, 3), c1));
  // The tree keys' part leaves the sink to the merge.
  KernelEmitter::RowEnd end = e.endSoftmaxRow(
      state[0], state[1], sinks ? e.load(sinks, at.head) : Value());
  storeOutputRow(e, shape, acc, {}, end.scale, gate, out, outAt);
  if (lse)
    e.store(end.lse, lse, outAt);
  memref::DeallocOp::create(b, keys);
  if (keyPositions && keyPositions != keys)
    memref::DeallocOp::create(b, keyPositions);
  if (marks)
    memref::DeallocOp::create(b, marks);
  func::ReturnOp::create(b);
  return func;
}

//===----------------------------------------------------------------------===//
// KV compaction
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildKvAppendKernel(OpBuilder &builder, Location loc,
                                             StringRef name,
                                             const CpuTiling &tiling,
                                             TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "kv_append");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  auto args = func.getArguments();
  // A workgroup per new token: its rows go to flat slot slots[t] of the
  // caches (the runtime checked it is -1 or a slot of the cache).
  KvCopyBindings kv = KvCopyBindings::forAppend(args.drop_back());
  Value slots = kv.indices[0], token = args.back();
  auto cacheType = cast<MemRefType>(kv.copies[0].second.getType());
  const int64_t pageSize = cacheType.getDimSize(1);
  const int64_t numKvHeads = cacheType.getDimSize(2);
  Value slot = e.loadInt(slots, {token});
  e.ifThen(e.icmp(arith::CmpIPredicate::sge, slot, e.i32(0)), [&] {
    Value flat = e.toIndex(slot);
    Value page = e.div(flat, e.index(pageSize));
    Value offset = e.rem(flat, e.index(pageSize));
    for (auto [from, to] : kv.copies) {
      int64_t features = staticDim(from.getType(), 2);
      for (int64_t h = 0; h < numKvHeads; ++h)
        for (int64_t off = 0; off < features; off += e.width) {
          int64_t lanes = std::min(e.width, features - off);
          Value head = e.index(h);
          Value row = e.loadVector(from, {token, head, e.index(off)}, lanes);
          e.storeVector(row, to, {page, offset, head, e.index(off)}, lanes);
        }
    }
  });
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildKvCompactKernel(OpBuilder &builder, Location loc,
                                              StringRef name,
                                              const CpuTiling &tiling,
                                              TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "kv_compact");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  auto args = func.getArguments();
  KvCopyBindings kv = KvCopyBindings::forCompact(args.drop_back());
  Value k = kv.copies[0].first, path = kv.indices[0], length = kv.indices[1];
  // Packed keys [Tk, Hkv, F] with their offsets, or [B, Hkv, P + T, F].
  Value keyOffsets = kv.indices.size() > 2 ? kv.indices[2] : Value();
  const unsigned rowDim = keyOffsets ? 0 : 2;
  Value workgroup = args.back();
  const int64_t numKvHeads = staticDim(bindingTypes[0], 1);
  Value c1 = e.index(1);
  Value lk = e.dim(k, rowDim), nodes = e.dim(path, 1);
  Value tiles = e.ceilDiv(lk, e.index(kCompactRowTile));
  // A workgroup per (batch, kv head, tile of rows); packed rows have one
  // "batch", each row's sequence found by the offsets.
  RowOfWorkgroup at(e, workgroup, numKvHeads, tiles);
  Value first = e.mul(at.row, e.index(kCompactRowTile));
  Value end = e.minS(lk, e.add(first, e.index(kCompactRowTile)));
  e.loop(first, end, c1, [&](Value r) {
    Value batch = at.batch, prefixEnd = e.sub(lk, nodes);
    if (keyOffsets) {
      batch = sequenceOfToken(e, keyOffsets, r);
      prefixEnd =
          e.sub(e.toIndex(e.loadInt(keyOffsets, {e.add(batch, c1)})), nodes);
    }
    Value source = compactSourceRow(e, path, length, batch, prefixEnd, r);
    auto rowAt = [&](Value row, Value feature) -> SmallVector<Value> {
      if (keyOffsets)
        return {row, at.head, feature};
      return {at.batch, at.head, row, feature};
    };
    for (auto [from, to] : kv.copies) {
      auto type = cast<ShapedType>(from.getType());
      int64_t features = type.getDimSize(type.getRank() - 1);
      for (int64_t off = 0; off < features; off += e.width) {
        int64_t lanes = std::min(e.width, features - off);
        Value row = e.loadVector(from, rowAt(source, e.index(off)), lanes);
        e.storeVector(row, to, rowAt(r, e.index(off)), lanes);
      }
    }
  });
  func::ReturnOp::create(b);
  return func;
}
