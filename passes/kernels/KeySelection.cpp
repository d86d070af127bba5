//===- KeySelection.cpp - Which keys a row sees, on both targets ----------===//
//===----------------------------------------------------------------------===//

#include "passes/kernels/KeySelection.h"

#include <cmath>

using namespace mlir;
using namespace mlir::attn;

//===----------------------------------------------------------------------===//
// What the CPU and CUDA kernels of selections share
//===----------------------------------------------------------------------===//

RowOfWorkgroup::RowOfWorkgroup(KernelEmitter &e, Value workgroup,
                               int64_t numHeads, Value rows) {
  row = e.rem(workgroup, rows);
  Value bh = e.div(workgroup, rows);
  head = e.rem(bh, e.index(numHeads));
  batch = e.div(bh, e.index(numHeads));
}

Value mlir::attn::sequenceOfToken(KernelEmitter &e, Value offsets,
                                  Value token) {
  // The last b in [0, B) with offsets[b] <= token, by steps of 2^30 .. 1:
  // offsets[B] = T > token stops every step past the batch.
  Value last = e.sub(e.dim(offsets, 0), e.index(1));
  constexpr int64_t kSteps = 31;
  return e.loop(e.index(0), e.index(kSteps), e.index(1), {e.index(0)},
                [&](Value i, ValueRange it) -> SmallVector<Value> {
                  Value step = arith::ShLIOp::create(
                      e.b, e.index(1), e.sub(e.index(kSteps - 1), i));
                  Value candidate = e.add(it[0], step);
                  Value first =
                      e.toIndex(e.loadInt(offsets, {e.minS(candidate, last)}));
                  Value inside =
                      e.andI(e.icmp(arith::CmpIPredicate::slt, candidate, last),
                             e.icmp(arith::CmpIPredicate::sle, first, token));
                  return {e.select(inside, candidate, it[0])};
                })[0];
}

MetaBlock::MetaBlock(KernelEmitter &e, Value index, const MetaLayout &layout,
                     ValueRange bindings)
    : keys(bindings.front()), meta(bindings.back()), e(e),
      paged(layout.kind != MetaLayout::Blocks) {
  auto type = cast<MemRefType>(keys.getType());
  if (layout.kind == MetaLayout::Blocks) {
    RowOfWorkgroup at(e, index, type.getDimSize(1), e.dim(meta, 2));
    batch = at.batch, head = at.head, block = at.row;
    first = e.mul(block, e.index(layout.blockSize));
    end = e.minS(e.dim(keys, 2), e.add(first, e.index(layout.blockSize)));
    return;
  }
  const int64_t numKvHeads = type.getDimSize(2);
  Value item = e.div(index, e.index(numKvHeads));
  head = e.rem(index, e.index(numKvHeads));
  first = e.index(0);
  if (layout.kind == MetaLayout::Pages) {
    page = item;
    Value slots = e.toIndex(e.loadInt(bindings[1], {page}));
    end = e.select(e.icmp(arith::CmpIPredicate::eq, slots, first),
                   e.index(layout.blockSize), slots);
    return;
  }
  // Token `item` bounds its page if it wrote one (no -1 slot) and is its
  // leader; fill and leader are read only then (a -1 slot has no page).
  Value slot = e.loadInt(bindings[1], {item});
  page = e.div(e.toIndex(e.maxS(slot, e.i32(0))), e.index(layout.blockSize));
  SmallVector<Value> found = e.ifElse(
      e.icmp(arith::CmpIPredicate::sge, slot, e.i32(0)),
      [&]() -> SmallVector<Value> {
        return {e.icmp(arith::CmpIPredicate::eq, e.loadInt(bindings[3], {page}),
                       e.toI32(item)),
                e.toIndex(e.loadInt(bindings[2], {page}))};
      },
      [&]() -> SmallVector<Value> {
        return {arith::ConstantIntOp::create(e.b, e.b.getI1Type(), 0),
                e.index(0)};
      });
  live = found[0];
  end = found[1];
}

SmallVector<Value> MetaBlock::key(Value j) const {
  if (paged)
    return {page, j, head};
  return {batch, head, j};
}

SmallVector<Value> MetaBlock::bound(int64_t which) const {
  if (paged)
    return {page, e.index(which), head};
  return {batch, head, block, e.index(which)};
}

SelectionKeys::SelectionKeys(ValueRange args, unsigned &next, bool paged) {
  if (paged) {
    pageTable = args[next++];
    keyLengths = args[next++];
  } else {
    keyCarrier = args[next++];
  }
}

SmallVector<Value> SelectionKeys::bindings() const {
  if (pageTable)
    return {pageTable, keyLengths};
  return {keyCarrier};
}

Value SelectionKeys::length(KernelEmitter &e, Value batch) const {
  if (pageTable)
    return e.toIndex(e.loadInt(keyLengths, {batch}));
  return e.dim(keyCarrier, 0);
}

SmallVector<Value> SelectionKeys::bound(KernelEmitter &e, Value batch,
                                        Value kvHead, Value block,
                                        Value which) const {
  if (!pageTable)
    return {batch, kvHead, block, which};
  return {e.toIndex(e.loadInt(pageTable, {batch, block})), which, kvHead};
}

QueryRowOfWorkgroup::QueryRowOfWorkgroup(KernelEmitter &e, Value workgroup,
                                         int64_t numHeads, Value q,
                                         Value queryOffsets) {
  if (!queryOffsets) {
    RowOfWorkgroup dense(e, workgroup, numHeads, e.dim(q, 2));
    batch = dense.batch;
    head = dense.head;
    row = dense.row;
    rows = e.dim(q, 2);
    return;
  }
  head = e.rem(workgroup, e.index(numHeads));
  token = e.div(workgroup, e.index(numHeads));
  batch = sequenceOfToken(e, queryOffsets, token);
  Value first = e.toIndex(e.loadInt(queryOffsets, {batch}));
  row = e.sub(token, first);
  rows = e.sub(e.toIndex(e.loadInt(queryOffsets, {e.add(batch, e.index(1))})),
               first);
}

SmallVector<Value> QueryRowOfWorkgroup::at(Value h) const {
  if (token)
    return {token, h};
  return {batch, h, row};
}

Value mlir::attn::firstVisibleKey(KernelEmitter &e, MaskKind mask, int64_t size,
                                  Value pos) {
  // `pos` is an index, an integer or a vector of them (a lane per row).
  auto constant = [&](int64_t value) -> Value {
    Type type = pos.getType();
    if (auto vector = dyn_cast<VectorType>(type))
      return arith::ConstantOp::create(
          e.b, DenseElementsAttr::get(
                   vector, APInt(vector.getElementTypeBitWidth(), value,
                                 /*isSigned=*/true)));
    return arith::ConstantOp::create(e.b, IntegerAttr::get(type, value));
  };
  switch (mask) {
  case MaskKind::None:
  case MaskKind::Causal:
    return constant(0);
  case MaskKind::SlidingWindow:
    return e.add(e.sub(pos, constant(size)), constant(1));
  case MaskKind::Chunked: {
    // A row at a negative position sees nothing anyway (its end is 0).
    Value chunk = constant(size);
    return e.mul(e.div(e.maxS(pos, constant(0)), chunk), chunk);
  }
  }
  llvm_unreachable("unknown mask kind");
}

std::pair<Value, Value> mlir::attn::visibleRange(KernelEmitter &e,
                                                 MaskKind mask, int64_t window,
                                                 Value pos, Value lk) {
  Value c0 = e.index(0);
  if (mask == MaskKind::None)
    return {c0, lk};
  Value end = e.maxS(c0, e.minS(lk, e.add(pos, e.index(1))));
  Value begin = e.minS(end, e.maxS(c0, firstVisibleKey(e, mask, window, pos)));
  return {begin, end};
}

std::pair<Value, Value> mlir::attn::topKCandidates(KernelEmitter &e,
                                                   SelectTopKOp op, Value pos,
                                                   Value lk) {
  MaskAttr mask = op.getMask();
  auto [begin, end] =
      visibleRange(e, mask.getKind(), mask.getWindow(), pos, lk);
  Value bs = e.index(op.getBlockSize());
  Value first = e.div(begin, bs);
  return {first, e.sub(e.maxS(e.ceilDiv(end, bs), first), first)};
}

void mlir::attn::padWithMinusOne(KernelEmitter &e, Value out, ValueRange prefix,
                                 Value from, Value to) {
  Value minusOne = e.i32(-1);
  e.loop(from, to, e.index(1), [&](Value slot) {
    SmallVector<Value> indices(prefix);
    indices.push_back(slot);
    memref::StoreOp::create(e.b, minusOne, out, indices);
  });
}

TreeNodeKeys::TreeNodeKeys(KernelEmitter &e, Value parents, Value batch,
                           Value node, Value prefixLength, MaskKind mask,
                           int64_t window)
    : e(e), parents(parents), batch(batch), node(node),
      prefixLength(prefixLength), mask(mask), window(window) {
  Value c0 = e.index(0), c1 = e.index(1);
  depth = e.whileLoop(
      {node, c0}, [&](ValueRange it) { return isNode(parentOf(it[0])); },
      [&](ValueRange it) -> SmallVector<Value> {
        return {parentOf(it[0]), e.add(it[1], c1)};
      })[1];
  position = e.add(prefixLength, depth);
  firstKey = firstVisibleKey(e, mask, window, position);
  prefixBegin = e.minS(prefixLength, e.maxS(c0, firstKey));
}

Value TreeNodeKeys::parentOf(Value u) {
  return e.toIndex(e.loadInt(parents, {batch, u}));
}

Value TreeNodeKeys::isNode(Value u) {
  return e.icmp(arith::CmpIPredicate::sge, u, e.index(0));
}

SmallVector<Value> TreeNodeKeys::eachTreeKey(
    ValueRange inits,
    function_ref<SmallVector<Value>(Value u, Value position, ValueRange)>
        body) {
  // Ancestors at positions P + depth(u) from the node's first key on:
  // depth(u) > firstKey - P - 1 (with a window W, depth(u) > depth(t) - W).
  Value deepEnough = e.sub(e.sub(firstKey, prefixLength), e.index(1));
  SmallVector<Value> walkInits{node, depth};
  llvm::append_range(walkInits, inits);
  SmallVector<Value> walked = e.whileLoop(
      walkInits,
      [&](ValueRange it) {
        return e.andI(isNode(it[0]),
                      e.icmp(arith::CmpIPredicate::sgt, it[1], deepEnough));
      },
      [&](ValueRange it) -> SmallVector<Value> {
        SmallVector<Value> next{parentOf(it[0]), e.sub(it[1], e.index(1))};
        llvm::append_range(
            next, body(it[0], e.add(prefixLength, it[1]), it.drop_front(2)));
        return next;
      });
  return SmallVector<Value>(ValueRange(walked).drop_front(2));
}

Value mlir::attn::worseScored(KernelEmitter &e, Value scoreA, Value indexA,
                              Value scoreB, Value indexB) {
  Value lower = e.fcmp(arith::CmpFPredicate::OLT, scoreA, scoreB);
  Value tieLater = e.andI(e.fcmp(arith::CmpFPredicate::OEQ, scoreA, scoreB),
                          e.icmp(arith::CmpIPredicate::sgt, indexA, indexB));
  return e.orI(lower, tieLater);
}

Int4Levels Int4Levels::of(KernelEmitter &e, Value lowest, Value highest) {
  constexpr double kSteps = 15.0; // 16 levels
  Value range = e.fsub(highest, lowest);
  Value perStep =
      e.select(e.fcmp(arith::CmpFPredicate::OGT, range, e.scalar(0.0)),
               e.fdiv(e.scalar(kSteps), range), e.scalar(0.0));
  return {lowest, e.fdiv(range, e.scalar(kSteps)), perStep};
}

Int4Levels Int4Levels::broadcast(KernelEmitter &e) const {
  return {e.broadcast(lowest), e.broadcast(step), e.broadcast(perStep)};
}

Value Int4Levels::round(KernelEmitter &e, Value x) const {
  Value half = isa<VectorType>(x.getType()) ? e.splat(0.5) : e.scalar(0.5);
  Value level = math::FloorOp::create(
      e.b, e.fadd(e.fmul(e.fsub(x, lowest), perStep), half));
  // Not KernelEmitter::fma, which is vector-only.
  return e.fadd(e.fmul(level, step), lowest);
}

double mlir::attn::selectionScale(std::optional<APFloat> scale,
                                  int64_t headDim) {
  return scale ? scale->convertToDouble()
               : 1.0 / std::sqrt(static_cast<double>(headDim));
}

using WorsePredicate = function_ref<Value(Value, Value)>;

/// Runs `use` on the heap (KernelEmitter.h) of the i32 items of `items`,
/// ordered by `worse`.
void mlir::attn::withIntHeap(KernelEmitter &e, const RowBuffer &items,
                             WorsePredicate worse,
                             function_ref<void(const HeapStorage &)> use) {
  auto load = [&](Value slot) -> SmallVector<Value> {
    return {items.loadStored(e, slot)};
  };
  auto store = [&](Value slot, ValueRange item) {
    items.store(e, item[0], slot);
  };
  auto worseItem = [&](ValueRange a, ValueRange b) {
    return worse(a[0], b[0]);
  };
  use(HeapStorage{load, store, worseItem});
}

Value mlir::attn::isFlagged(KernelEmitter &e, const RowBuffer &flags, Value n) {
  return e.icmp(arith::CmpIPredicate::ne, flags.loadStored(e, n),
                arith::ConstantIntOp::create(e.b, e.b.getI8Type(), 0));
}

void mlir::attn::setFlag(KernelEmitter &e, const RowBuffer &flags, Value n) {
  flags.store(e, arith::ConstantIntOp::create(e.b, e.b.getI8Type(), 1), n);
}

void mlir::attn::clearFlags(KernelEmitter &e, const RowBuffer &flags,
                            Value count) {
  Value zero = arith::ConstantIntOp::create(e.b, e.b.getI8Type(), 0);
  e.loop(e.index(0), count, e.index(1),
         [&](Value n) { flags.store(e, zero, n); });
}

Value mlir::attn::writeFlagged(KernelEmitter &e, const RowBuffer &flags,
                               Value first, Value end, Value out,
                               ValueRange prefix, Value slot,
                               function_ref<Value(Value)> valueOf) {
  RowBuffer outRow(out, prefix);
  return e.loop(first, end, e.index(1), {slot},
                [&](Value n, ValueRange it) -> SmallVector<Value> {
                  return e.ifElse(
                      isFlagged(e, flags, n),
                      [&]() -> SmallVector<Value> {
                        outRow.store(e, valueOf(n), it[0]);
                        return {e.add(it[0], e.index(1))};
                      },
                      [&]() -> SmallVector<Value> { return {it[0]}; });
                })[0];
}

//===----------------------------------------------------------------------===//
// Top-p token selection
//===----------------------------------------------------------------------===//

Value mlir::attn::topPBucketCount(KernelEmitter &e, Value count) {
  return e.maxS(e.minS(count, e.index(kMaxTopPBuckets)), e.index(1));
}

ScoreBuckets::ScoreBuckets(KernelEmitter &e, Value highest, Value lowest,
                           Value count)
    : e(e), highest(highest), size(topPBucketCount(e, count)) {
  Value spread = e.fsub(highest, lowest);
  perScore = e.select(e.fcmp(arith::CmpFPredicate::OGT, spread, e.scalar(0)),
                      e.fdiv(toF32(size), spread), e.scalar(0));
  lastBucket = toF32(e.sub(size, e.index(1)));
}

std::pair<Value, Value> ScoreBuckets::range(KernelEmitter &e,
                                            const RowBuffer &scores,
                                            Value first, Value end) {
  SmallVector<Value> range = e.loop(
      first, end, e.index(1),
      {e.scalar(kNegInf), e.scalar(std::numeric_limits<float>::infinity())},
      [&](Value n, ValueRange it) -> SmallVector<Value> {
        Value s = scores.load(e, n);
        return {e.fmax(it[0], s), arith::MinimumFOp::create(e.b, it[1], s)};
      });
  return {range[0], range[1]};
}

Value ScoreBuckets::of(Value score) {
  ImplicitLocOpBuilder &b = e.b;
  Value x = e.fmul(e.fsub(highest, score), perScore);
  x = arith::MinNumFOp::create(b, arith::MaxNumFOp::create(b, x, e.scalar(0)),
                               lastBucket);
  return arith::IndexCastOp::create(
      b, b.getIndexType(), arith::FPToSIOp::create(b, b.getI64Type(), x));
}

Value ScoreBuckets::toF32(Value index) {
  ImplicitLocOpBuilder &b = e.b;
  return arith::SIToFPOp::create(
      b, e.f32, arith::IndexCastOp::create(b, b.getI64Type(), index));
}

Value mlir::attn::topPWeight(KernelEmitter &e, Value score, Value maxScore) {
  return arith::ExtFOp::create(e.b, e.b.getF64Type(),
                               e.exp(e.fsub(score, maxScore)));
}

void mlir::attn::flagTopPKept(KernelEmitter &e, SelectTopPOp op,
                              const TopPRow &row, Value count, Value capacity) {
  ImplicitLocOpBuilder &b = e.b;
  Value c0 = e.index(0), c1 = e.index(1);
  Value zero64 = arith::ConstantOp::create(b, b.getF64FloatAttr(0.0));
  const double topP = op.getTopP().convertToDouble();
  const bool byWeight = topP < 1.0;
  auto scoreAt = [&](Value n) { return row.scores.load(e, n); };
  auto [highest, lowest] =
      ScoreBuckets::range(e, row.scores, e.index(0), count);
  ScoreBuckets buckets(e, highest, lowest, count);
  auto weightAt = [&](Value n) {
    return topPWeight(e, scoreAt(n), buckets.highest);
  };
  Value lastBucket = e.sub(buckets.size, c1);

  // How many candidates, and how much weight, each bucket holds.
  const RowBuffer &sizes = row.bucketSizes, &weights = row.bucketWeights;
  e.loop(c0, buckets.size, c1, [&](Value bucket) {
    sizes.store(e, e.i32(0), bucket);
    if (byWeight)
      weights.store(e, zero64, bucket);
  });
  Value total = e.loop(
      c0, count, c1, {zero64},
      [&](Value n, ValueRange it) -> SmallVector<Value> {
        Value bucket = buckets.of(scoreAt(n));
        sizes.store(e, e.add(sizes.loadStored(e, bucket), e.i32(1)), bucket);
        if (!byWeight)
          return {it[0]};
        Value w = weightAt(n);
        weights.store(e, e.fadd(weights.loadStored(e, bucket), w), bucket);
        return {e.fadd(it[0], w)};
      })[0];
  auto sizeOf = [&](Value bucket) {
    return e.toIndex(sizes.loadStored(e, e.minS(bucket, lastBucket)));
  };
  auto weightOf = [&](Value bucket) {
    return weights.loadStored(e, e.minS(bucket, lastBucket));
  };

  // The candidates of one bucket, best first, in order[0, size).
  auto sortBucket = [&](Value bucket) {
    Value size = e.loop(
        c0, count, c1, {c0}, [&](Value n, ValueRange it) -> SmallVector<Value> {
          return e.ifElse(
              e.icmp(arith::CmpIPredicate::eq, buckets.of(scoreAt(n)), bucket),
              [&]() -> SmallVector<Value> {
                row.order.store(e, e.toI32(n), it[0]);
                return {e.add(it[0], c1)};
              },
              [&]() -> SmallVector<Value> { return {it[0]}; });
        })[0];
    auto worse = [&](Value x, Value y) {
      Value nx = e.toIndex(x), ny = e.toIndex(y);
      return worseScored(e, scoreAt(nx), row.tokenOf(nx), scoreAt(ny),
                         row.tokenOf(ny));
    };
    withIntHeap(e, row.order, worse,
                [&](const HeapStorage &heap) { sortBestFirst(e, heap, size); });
    return size;
  };

  // The shortest best-first prefix whose weight reaches top_p: whole
  // buckets while they stay short of it, then the crossing bucket in order.
  Value keep = count, sortedBucket = e.index(-1);
  if (byWeight) {
    Value target =
        e.fmul(total, arith::ConstantOp::create(b, b.getF64FloatAttr(topP)));
    SmallVector<Value> whole = e.whileLoop(
        {c0, zero64, c0},
        [&](ValueRange it) {
          return e.andI(e.icmp(arith::CmpIPredicate::ult, it[0], buckets.size),
                        e.fcmp(arith::CmpFPredicate::OLT,
                               e.fadd(it[1], weightOf(it[0])), target));
        },
        [&](ValueRange it) -> SmallVector<Value> {
          return {e.add(it[0], c1), e.fadd(it[1], weightOf(it[0])),
                  e.add(it[2], sizeOf(it[0]))};
        });
    Value crossing = whole[0];
    SmallVector<Value> found = e.ifElse(
        e.icmp(arith::CmpIPredicate::ult, crossing, buckets.size),
        [&]() -> SmallVector<Value> {
          Value size = sortBucket(crossing);
          Value taken = e.whileLoop(
              {c0, whole[1]},
              [&](ValueRange it) {
                return e.andI(e.icmp(arith::CmpIPredicate::ult, it[0], size),
                              e.fcmp(arith::CmpFPredicate::OLT, it[1], target));
              },
              [&](ValueRange it) -> SmallVector<Value> {
                Value n = e.toIndex(row.order.loadStored(e, it[0]));
                return {e.add(it[0], c1), e.fadd(it[1], weightAt(n))};
              })[0];
          return {e.add(whole[2], taken), crossing};
        },
        [&]() -> SmallVector<Value> {
          return {count, e.index(-1)};
        });
    keep = found[0];
    sortedBucket = found[1];
  }
  keep = e.maxS(keep, e.index(op.getMinTokens()));
  keep = e.minS(e.minS(keep, capacity), count);

  // Flag the best `keep`: the buckets before the one where the count
  // reaches it, then that bucket's best.
  SmallVector<Value> before = e.whileLoop(
      {c0, c0},
      [&](ValueRange it) {
        return e.andI(e.icmp(arith::CmpIPredicate::ult, it[0], buckets.size),
                      e.icmp(arith::CmpIPredicate::ult,
                             e.add(it[1], sizeOf(it[0])), keep));
      },
      [&](ValueRange it) -> SmallVector<Value> {
        return {e.add(it[0], c1), e.add(it[1], sizeOf(it[0]))};
      });
  Value last = before[0], rest = e.sub(keep, before[1]);
  e.ifThen(e.icmp(arith::CmpIPredicate::sgt, rest, c0), [&] {
    e.ifThen(e.icmp(arith::CmpIPredicate::ne, last, sortedBucket),
             [&] { sortBucket(last); });
    e.loop(c0, rest, c1, [&](Value n) {
      setFlag(e, row.kept, e.toIndex(row.order.loadStored(e, n)));
    });
  });
  e.loop(c0, count, c1, [&](Value n) {
    e.ifThen(e.icmp(arith::CmpIPredicate::ult, buckets.of(scoreAt(n)), last),
             [&] { setFlag(e, row.kept, n); });
  });
}

//===----------------------------------------------------------------------===//
// Tree acceptance: scalar code, the same kernel on both targets
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildPageUseKernel(OpBuilder &builder, Location loc,
                                            StringRef name,
                                            DictionaryAttr tiling,
                                            TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "page_use");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, /*vectorWidth=*/1);
  auto args = func.getArguments();
  Value table = args[1], lengths = args[2], used = args[3];
  const int64_t pageSize = cast<MemRefType>(bindingTypes[0]).getDimSize(1);
  Value c0 = e.index(0), c1 = e.index(1), size = e.index(pageSize);
  e.loop(c0, e.dim(used, 0), c1, [&](Value p) {
    memref::StoreOp::create(b, e.i32(0), used, ValueRange{p});
  });
  // The runtime checked the pages of every sequence's keys.
  e.loop(c0, e.dim(lengths, 0), c1, [&](Value batch) {
    Value length = e.toIndex(e.loadInt(lengths, {batch}));
    e.loop(c0, e.ceilDiv(length, size), c1, [&](Value i) {
      Value page = e.toIndex(e.loadInt(table, {batch, i}));
      Value slots = e.toI32(e.minS(size, e.sub(length, e.mul(i, size))));
      Value before = e.loadInt(used, {page});
      memref::StoreOp::create(b, arith::MaxSIOp::create(b, before, slots), used,
                              ValueRange{page});
    });
  });
  func::ReturnOp::create(b);
  return func;
}

/// Runs body(slot, page) for token `t` if it writes a page (no -1 slot;
/// the runtime checked the others are slots of the cache).
static void ifWritten(KernelEmitter &e, ValueRange bindings, Value t,
                      function_ref<void(Value slot, Value page)> body) {
  const int64_t pageSize =
      cast<MemRefType>(bindings[0].getType()).getDimSize(1);
  Value slot = e.loadInt(bindings[1], {t});
  e.ifThen(e.icmp(arith::CmpIPredicate::sge, slot, e.i32(0)),
           [&] { body(slot, e.div(e.toIndex(slot), e.index(pageSize))); });
}

void AppendedPages::reset(KernelEmitter &e, ValueRange bindings, Value t) {
  Value tokens = e.toI32(e.dim(bindings[1], 0));
  ifWritten(e, bindings, t, [&](Value, Value page) {
    memref::StoreOp::create(e.b, e.i32(0), bindings[2], ValueRange{page});
    memref::StoreOp::create(e.b, tokens, bindings[3], ValueRange{page});
  });
}

void AppendedPages::combine(
    KernelEmitter &e, ValueRange bindings, Value t,
    function_ref<void(arith::AtomicRMWKind, Value, Value, Value)> update) {
  const int64_t pageSize =
      cast<MemRefType>(bindings[0].getType()).getDimSize(1);
  ifWritten(e, bindings, t, [&](Value slot, Value page) {
    Value offset = e.rem(e.toIndex(slot), e.index(pageSize));
    update(arith::AtomicRMWKind::maxs, e.toI32(e.add(offset, e.index(1))),
           bindings[2], page);
    update(arith::AtomicRMWKind::mins, e.toI32(t), bindings[3], page);
  });
}

func::FuncOp AppendedPages::buildScalarKernel(OpBuilder &builder, Location loc,
                                              StringRef name,
                                              DictionaryAttr tiling,
                                              TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "appended_pages");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, /*vectorWidth=*/1);
  ValueRange bindings = func.getArguments().drop_back();
  Value c0 = e.index(0), c1 = e.index(1), tokens = e.dim(bindings[1], 0);
  e.loop(c0, tokens, c1, [&](Value t) { reset(e, bindings, t); });
  e.loop(c0, tokens, c1, [&](Value t) {
    combine(
        e, bindings, t,
        [&](arith::AtomicRMWKind kind, Value value, Value into, Value page) {
          Value before = e.loadInt(into, {page});
          Value after = kind == arith::AtomicRMWKind::maxs
                            ? Value(arith::MaxSIOp::create(b, before, value))
                            : Value(arith::MinSIOp::create(b, before, value));
          memref::StoreOp::create(b, after, into, ValueRange{page});
        });
  });
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildTreeAcceptKernel(OpBuilder &builder, Location loc,
                                               StringRef name,
                                               DictionaryAttr tiling,
                                               TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "tree_accept");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, /*vectorWidth=*/1);
  auto args = func.getArguments();
  Value tokens = args[0], target = args[1], parents = args[2];
  Value path = args[3], length = args[4], bonus = args[5];
  Value batch = args[6];
  Value c0 = e.index(0), c1 = e.index(1);
  Value nodes = e.dim(tokens, 1);

  padWithMinusOne(e, path, {batch}, c0, nodes);
  memref::StoreOp::create(b, e.i32(0), path, ValueRange{batch, c0});
  // From the root, move to the lowest-index child whose draft token is
  // the target's next token after the current node; children come after
  // their parent.
  SmallVector<Value> walk = e.whileLoop(
      {c0, c1, arith::ConstantIntOp::create(b, b.getI1Type(), 1)},
      [&](ValueRange it) { return it[2]; },
      [&](ValueRange it) -> SmallVector<Value> {
        Value current = it[0];
        Value wanted = e.loadInt(target, {batch, current});
        Value none = e.index(-1);
        Value child = e.loop(
            e.add(current, c1), nodes, c1, {none},
            [&](Value c, ValueRange found) -> SmallVector<Value> {
              Value matches = e.andI(
                  e.icmp(arith::CmpIPredicate::eq,
                         e.loadInt(parents, {batch, c}), e.toI32(current)),
                  e.icmp(arith::CmpIPredicate::eq,
                         e.loadInt(tokens, {batch, c}), wanted));
              Value first = e.andI(
                  matches, e.icmp(arith::CmpIPredicate::eq, found[0], none));
              return {e.select(first, c, found[0])};
            })[0];
        Value moves = e.icmp(arith::CmpIPredicate::ne, child, none);
        e.ifThen(moves, [&] {
          memref::StoreOp::create(b, e.toI32(child), path,
                                  ValueRange{batch, it[1]});
        });
        return {e.select(moves, child, current),
                e.select(moves, e.add(it[1], c1), it[1]), moves};
      });
  memref::StoreOp::create(b, e.toI32(walk[1]), length, batch);
  memref::StoreOp::create(b, e.loadInt(target, {batch, walk[0]}), bonus, batch);
  func::ReturnOp::create(b);
  return func;
}

//===----------------------------------------------------------------------===//
// The steps of an accepted path: scalar code, the same kernel on both
// targets
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildPathStepsKernel(OpBuilder &builder, Location loc,
                                              StringRef name,
                                              DictionaryAttr tiling,
                                              TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "path_steps");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, /*vectorWidth=*/1);
  auto args = func.getArguments();
  Value input = args[0], path = args[1], length = args[2], result = args[3];
  Value workgroup = args.back();
  auto type = cast<MemRefType>(input.getType());
  Value steps = e.dim(path, 1);
  Value step = e.rem(workgroup, steps);
  Value rest = e.div(workgroup, steps);
  Value head = e.rem(rest, e.index(type.getDimSize(1)));
  Value batch = e.div(rest, e.index(type.getDimSize(1)));
  // The runtime checked the path (0 <= path[i] < T for i < length).
  Value onPath = e.icmp(arith::CmpIPredicate::slt, e.toI32(step),
                        e.loadInt(length, {batch}));
  Value node =
      e.toIndex(e.select(onPath, e.loadInt(path, {batch, step}), e.i32(0)));
  Value features = type.getRank() == 4 ? e.index(type.getDimSize(3)) : Value();
  auto copy = [&](SmallVector<Value> at, SmallVector<Value> from) {
    Value x = e.select(onPath, e.load(input, from), e.scalar(0.0));
    e.store(x, result, at);
  };
  if (!features) {
    copy({batch, head, step}, {batch, head, node});
  } else {
    e.loop(e.index(0), features, e.index(1), [&](Value f) {
      copy({batch, head, step, f}, {batch, head, node, f});
    });
  }
  func::ReturnOp::create(b);
  return func;
}

KvCopyBindings KvCopyBindings::split(ValueRange bindings, size_t indexCount) {
  // The rows (k, [v]), the index tensors, the destinations (k', [v']).
  const size_t copies = (bindings.size() - indexCount) / 2;
  KvCopyBindings kv;
  for (size_t i = 0; i < copies; ++i)
    kv.copies.push_back({bindings[i], bindings[copies + indexCount + i]});
  llvm::append_range(kv.indices, bindings.slice(copies, indexCount));
  return kv;
}

KvCopyBindings KvCopyBindings::forAppend(ValueRange bindings) {
  return split(bindings, /*indexCount=*/1);
}

KvCopyBindings KvCopyBindings::forCompact(ValueRange bindings) {
  // Packed keys [Tk, Hkv, F] come with their offsets after the length.
  const bool packed = cast<ShapedType>(bindings[0].getType()).getRank() == 3;
  return split(bindings, /*indexCount=*/packed ? 3 : 2);
}

Value mlir::attn::compactSourceRow(KernelEmitter &e, Value path, Value length,
                                   Value batch, Value prefixEnd, Value r) {
  Value n = e.sub(r, prefixEnd);
  Value accepted = e.toIndex(e.loadInt(length, {batch}));
  Value onPath = e.andI(e.icmp(arith::CmpIPredicate::sge, n, e.index(0)),
                        e.icmp(arith::CmpIPredicate::slt, n, accepted));
  return e.ifElse(
      onPath,
      [&]() -> SmallVector<Value> {
        return {e.add(prefixEnd, e.toIndex(e.loadInt(path, {batch, n})))};
      },
      [&]() -> SmallVector<Value> { return {r}; })[0];
}

int64_t KvCopyBindings::features() const {
  int64_t features = 0;
  for (auto [from, to] : copies) {
    auto type = cast<ShapedType>(from.getType());
    features += type.getDimSize(type.getRank() - 1);
  }
  return features;
}
