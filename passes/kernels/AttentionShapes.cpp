//===- AttentionShapes.cpp - What both targets' kernels are built from ----===//
//===----------------------------------------------------------------------===//

#include "passes/kernels/AttentionShapes.h"

#include "Attn/Limits.h"

using namespace mlir;
using namespace mlir::attn;

/// Head counts are bounded as the frontend bounds num_heads
/// (docs/limits.md): some kernels unroll over the heads of a kv group (a
/// group of 2048 heads took 30 s to compile).
static LogicalResult checkHeadCount(AttentionOpInterface op, int64_t heads) {
  if (heads <= limits::kMaxHeads)
    return success();
  return op->emitError() << heads << " heads are past attn's limit of "
                         << limits::kMaxHeads;
}

FailureOr<SoftmaxAttentionShape>
SoftmaxAttentionShape::get(AttentionOpInterface op, StringRef target) {
  auto fail = [&](const Twine &why) {
    op->emitError() << "no " << target << " lowering: " << why;
    return failure();
  };
  if (op.getNormalizer() != Normalizer::Softmax)
    return fail("not a softmax attention");
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto k = cast<RankedTensorType>(op.getKey().getType());
  auto v = cast<RankedTensorType>(op.getValue().getType());
  // Queries [B, H, Lq, D], or packed [T, H, D] in a ragged batch; keys
  // [B, Hkv, Lk, D], packed [Tk, Hkv, D], or a paged cache [NP, P, Hkv, D].
  const bool paged = static_cast<bool>(op.getKeyPageTable());
  const bool ragged = static_cast<bool>(op.getSequenceOffsets());
  const unsigned kvHeadDim = paged ? 2 : 1;
  const unsigned queryFeature = q.getRank() - 1, keyFeature = k.getRank() - 1;
  if (q.isDynamicDim(1) || k.isDynamicDim(kvHeadDim) ||
      q.isDynamicDim(queryFeature) || v.isDynamicDim(keyFeature) ||
      (paged && k.isDynamicDim(1)))
    return fail("head counts, feature sizes and page sizes must be static");

  SoftmaxAttentionShape shape;
  shape.numHeads = q.getDimSize(1);
  shape.numKvHeads = k.getDimSize(kvHeadDim);
  shape.pageSize = paged ? k.getDimSize(1) : 0;
  shape.ragged = ragged;
  shape.keysPacked = static_cast<bool>(op.getKeyOffsets());
  shape.headDim = q.getDimSize(queryFeature);
  shape.valueDim = v.getDimSize(keyFeature);
  shape.scale = op.getScoreScale();
  shape.softcap = op.getScoreSoftcap();
  MaskAttr mask = op.getPositionMask();
  shape.mask = mask.getKind();
  shape.window = mask.getWindow();
  shape.epilogue = op.getEpilogue();
  if (shape.epilogue == Epilogue::RmsNormSiluGate)
    return fail("the rmsnorm-silu gate is not lowered for softmax attention");
  if (shape.epilogue == Epilogue::SigmoidGate) {
    auto gate = cast<RankedTensorType>(op.getEpilogueOperands()[0].getType());
    shape.headwiseGate =
        gate.getDimSize(gate.getRank() - 1) == 1 && shape.valueDim != 1;
  }
  shape.withLogSumExp = static_cast<bool>(op.getLogSumExp());
  shape.withSinks = static_cast<bool>(op.getAttentionSinks());
  shape.selection = op.getKeySelectionKind();
  if (shape.selection == KeySelectionKind::Blocks)
    shape.selectionBlockSize = op.getSelectionBlockSize();
  shape.variants = VariantRegions::of(op);
  if (failed(checkHeadCount(op, shape.numHeads)) ||
      failed(checkHeadCount(op, shape.numKvHeads)))
    return failure();
  if (ragged && shape.selection == KeySelectionKind::Tree)
    return fail("tree attention over a ragged batch is not lowered yet");
  if (ragged && shape.selection == KeySelectionKind::Blocks && !paged)
    return fail("sparse attention over a ragged batch reads a paged cache");
  return shape;
}

SoftmaxBindings::SoftmaxBindings(func::FuncOp kernel,
                                 const SoftmaxAttentionShape &shape,
                                 unsigned &next) {
  auto args = kernel.getArguments();
  q = args[next++], k = args[next++], v = args[next++];
  if (shape.paged()) {
    pageTable = args[next++];
    keyLengths = args[next++];
  }
  if (shape.ragged)
    queryOffsets = args[next++];
  if (shape.packedKeys())
    keyOffsets = args[next++];
  // Sparse attention and trees take a workgroup per row, with no plan.
  if (shape.ragged && shape.selection == KeySelectionKind::Dense)
    plan = args[next++];
}

KeyRows::KeyRows(KernelEmitter &e, const SoftmaxAttentionShape &shape,
                 const SoftmaxBindings &args)
    : e(e), k(args.k), pageTable(args.pageTable), keyLengths(args.keyLengths),
      keyOffsets(args.keyOffsets), pageSize(shape.pageSize) {}

KeyRows::KeyRows(KernelEmitter &e, Value k, Value pageTable, Value keyLengths)
    : e(e), k(k), pageTable(pageTable), keyLengths(keyLengths),
      pageSize(pageTable ? cast<MemRefType>(k.getType()).getDimSize(1) : 0) {}

Value KeyRows::length(Value batch) const {
  if (pageTable)
    return e.toIndex(e.loadInt(keyLengths, {batch}));
  if (keyOffsets)
    return e.sub(e.toIndex(e.loadInt(keyOffsets, {e.add(batch, e.index(1))})),
                 e.toIndex(e.loadInt(keyOffsets, {batch})));
  return e.dim(k, 2);
}

Value KeyRows::page(Value batch, Value i) const {
  return e.toIndex(e.loadInt(pageTable, {batch, i}));
}

SmallVector<Value> KeyRows::atPage(Value page, Value kvHead, Value j) const {
  return {page, e.rem(j, e.index(pageSize)), kvHead};
}

SmallVector<Value> KeyRows::at(Value batch, Value kvHead, Value j) const {
  if (pageTable)
    return atPage(page(batch, e.div(j, e.index(pageSize))), kvHead, j);
  if (keyOffsets) {
    Value first = batch == boundBatch
                      ? boundFirst
                      : e.toIndex(e.loadInt(keyOffsets, {batch}));
    return {e.add(first, j), kvHead};
  }
  return {batch, kvHead, j};
}

void KeyRows::bind(Value batch) {
  if (!keyOffsets)
    return;
  boundBatch = batch;
  boundFirst = e.toIndex(e.loadInt(keyOffsets, {batch}));
}

QueryRows::QueryRows(KernelEmitter &e, const SoftmaxBindings &args)
    : e(e), q(args.q), offsets(args.queryOffsets) {}

Value QueryRows::length(Value batch) const {
  if (!offsets)
    return e.dim(q, 2);
  return e.sub(e.toIndex(e.loadInt(offsets, {e.add(batch, e.index(1))})),
               e.toIndex(e.loadInt(offsets, {batch})));
}

SmallVector<Value> QueryRows::at(Value batch, Value head, Value row) const {
  if (!offsets)
    return {batch, head, row};
  Value first =
      batch == boundBatch ? boundFirst : e.toIndex(e.loadInt(offsets, {batch}));
  return {e.add(first, row), head};
}

void QueryRows::bind(Value batch) {
  if (!offsets)
    return;
  boundBatch = batch;
  boundFirst = e.toIndex(e.loadInt(offsets, {batch}));
}

SplitKvMerge::SplitKvMerge(KernelEmitter &e, func::FuncOp kernel,
                           const SoftmaxAttentionShape &shape, Value rowIndex)
    : SplitKvMerge(e, ValueRange(kernel.getArguments()), shape,
                   rowIndex ? rowIndex : kernel.getArguments().back()) {}

SplitKvMerge::SplitKvMerge(KernelEmitter &e, ValueRange args,
                           const SoftmaxAttentionShape &shape, Value rowIndex)
    : e(e), ragged(shape.ragged),
      planned(shape.ragged && shape.selection == KeySelectionKind::Dense) {
  unsigned next = 0;
  if (planned) {
    queryOffsets = args[next++];
    plan = args[next++];
  }
  partialOut = args[next++];
  partialLse = args[next++];
  if (shape.epilogue == Epilogue::SigmoidGate)
    gate = args[next++];
  if (shape.withSinks)
    sinks = args[next++];
  out = args[next++];
  if (shape.withLogSumExp)
    lse = args[next++];

  Value numHeads = e.index(shape.numHeads);
  if (ragged && !planned) {
    // Packed rows [T, H], the head fastest; `batch` is the token.
    head = e.rem(rowIndex, numHeads);
    batch = e.div(rowIndex, numHeads);
    firstSplit = e.index(0);
    splits = e.dim(partialLse, 2);
    return;
  }
  if (planned) {
    // Entry (sequence, row, first split, splits) of the merge plan.
    Value entry = e.div(rowIndex, numHeads);
    head = e.rem(rowIndex, numHeads);
    auto column = [&](int64_t c) {
      return e.toIndex(e.loadInt(plan, {entry, e.index(c)}));
    };
    Value sequence = e.loadInt(plan, {entry, e.index(0)});
    hasRow = e.icmp(arith::CmpIPredicate::sge, sequence, e.i32(0));
    batch = e.toIndex(sequence);
    row = column(1);
    firstSplit = column(2);
    splits = column(3);
    return;
  }
  Value lq = e.dim(partialLse, 2);
  firstSplit = e.index(0);
  splits = e.dim(partialLse, 3);
  row = e.rem(rowIndex, lq);
  Value bh = e.div(rowIndex, lq);
  head = e.rem(bh, numHeads);
  batch = e.div(bh, numHeads);
}

SmallVector<Value> SplitKvMerge::partialAt(Value s) const {
  if (planned)
    return {e.add(firstSplit, s), head};
  if (ragged)
    return {batch, head, s};
  return {batch, head, row, s};
}

SmallVector<Value> SplitKvMerge::rowAt() const {
  if (planned)
    return {e.add(e.toIndex(e.loadInt(queryOffsets, {batch})), row), head};
  if (ragged)
    return {batch, head};
  return {batch, head, row};
}

Value SplitKvMerge::maxLse() const {
  Value max = e.loop(e.index(0), splits, e.index(1), {e.scalar(kNegInf)},
                     [&](Value s, ValueRange it) {
                       return SmallVector<Value>{
                           e.fmax(it[0], e.load(partialLse, partialAt(s)))};
                     })[0];
  return e.safeMax(max);
}

Value SplitKvMerge::sink() const {
  return sinks ? e.load(sinks, {head}) : Value();
}

FailureOr<LinearRecurrenceShape>
LinearRecurrenceShape::get(AttentionOpInterface op, StringRef target) {
  auto fail = [&](const Twine &why) {
    op->emitError() << "no " << target << " lowering: " << why;
    return failure();
  };
  if (op.getNormalizer() != Normalizer::RecurrentState)
    return fail("not a recurrence");
  auto q = cast<RankedTensorType>(op.getQuery().getType());
  auto v = cast<RankedTensorType>(op.getValue().getType());
  // [B, H, L, F], or packed token-major [T, H, F] in a ragged batch.
  const bool ragged = static_cast<bool>(op.getSequenceOffsets());
  const unsigned feature = ragged ? 2 : 3;
  if (q.isDynamicDim(1) || q.isDynamicDim(feature) || v.isDynamicDim(1) ||
      v.isDynamicDim(feature))
    return fail("head counts and feature sizes must be static");

  LinearRecurrenceShape shape;
  shape.rule = op.getRecurrenceRule();
  shape.ragged = ragged;
  shape.pooled = static_cast<bool>(op.getStateSlots());
  shape.numKeyHeads = q.getDimSize(1);
  shape.numValueHeads = v.getDimSize(1);
  shape.keyDim = q.getDimSize(feature);
  shape.valueDim = v.getDimSize(feature);
  shape.chunkSize = op.getStepChunkSize();
  shape.scale = op.getScoreScale();
  shape.normalizeQueryKey = op.getNormalizesQueryKey();
  shape.tree = op.getKeySelectionKind() == KeySelectionKind::Tree;
  if (failed(checkHeadCount(op, shape.numKeyHeads)) ||
      failed(checkHeadCount(op, shape.numValueHeads)))
    return failure();
  switch (op.getEpilogue()) {
  case Epilogue::None:
    break;
  case Epilogue::RmsNormSiluGate:
    shape.rmsNormGate = true;
    shape.gateEpsilon = op.getEpilogueEpsilon();
    shape.gateActivation = op.getEpilogueActivation();
    break;
  default:
    return fail("only the rmsnorm-silu gate is lowered for recurrences");
  }
  return shape;
}

RmsNormGateShape RmsNormGateShape::get(RmsNormGateOp op) {
  RmsNormGateShape shape;
  shape.heads = op.getOutput().getType().getDimSize(1);
  shape.headFeatures = op.getHeadFeatures();
  shape.groupFeatures = op.getGroupFeatures();
  shape.packed = op.getOutput().getType().getRank() == 3;
  shape.normBeforeGate = op.getNormBeforeGate();
  shape.weightPerToken =
      op.getWeight().getType().getDimSize(0) != shape.headFeatures;
  shape.skip = static_cast<bool>(op.getSkipInput());
  shape.activation = op.getActivation();
  shape.epsilon = op.getEps().convertToDouble();
  return shape;
}

OutputGateShape OutputGateShape::get(GateOp op) {
  RankedTensorType output = op.getOutput().getType();
  OutputGateShape shape;
  shape.packed = output.getRank() == 3;
  shape.heads = output.getDimSize(1);
  shape.headFeatures = output.getDimSize(output.getRank() - 1);
  RankedTensorType gate = op.getGate().getType();
  shape.headwise = gate.getDimSize(gate.getRank() - 1) == 1;
  shape.skip = static_cast<bool>(op.getSkipInput());
  shape.activation = op.getActivation();
  return shape;
}

RmsNormGateShape RmsNormGateShape::get(const LinearRecurrenceShape &shape) {
  RmsNormGateShape gate;
  gate.heads = shape.numValueHeads;
  gate.headFeatures = gate.groupFeatures = shape.valueDim;
  gate.packed = shape.ragged;
  gate.activation = shape.gateActivation;
  gate.epsilon = shape.gateEpsilon;
  return gate;
}

SmallVector<int64_t>
LinearRecurrenceShape::stateColumnTiles(const CpuTiling &tiling) const {
  const int64_t W = tiling.vectorWidth, padded = paddedValueDim(W);
  SmallVector<int64_t> widths;
  for (int64_t tiles = 2; padded / tiles >= tiling.stateColumns; ++tiles)
    if (padded % tiles == 0 && (padded / tiles) % W == 0)
      widths.push_back(padded / tiles);
  return widths;
}

int64_t LinearRecurrenceShape::chunkWork(int64_t columns) const {
  const int64_t C = chunkSize, Dk = keyDim;
  // Scores Q K^T (half: causal); delta rules add the Gram matrix K K^T,
  // the triangular solve and W = T K.
  int64_t shared = C * C * Dk / 2;
  if (isDelta())
    shared += C * C * Dk + C * C * C / 6;
  // Per column: O = Q S + P V and S += K^T V; delta rules add U = T V and
  // V' = U - W S.
  int64_t perColumn = 2 * C * Dk + C * C / 2;
  if (isDelta())
    perColumn += C * Dk + C * C / 2;
  return shared + perColumn * columns;
}

RecurrenceSequence::RecurrenceSequence(KernelEmitter &e,
                                       const LinearRecurrenceShape &shape,
                                       const RecurrenceBindings &args,
                                       Value batch)
    : e(e), batch(batch) {
  if (shape.pooled)
    slot = e.toIndex(e.loadInt(args.slots, {batch}));
  if (!shape.ragged) {
    length = e.dim(args.q, 2);
    return;
  }
  first = e.toIndex(e.loadInt(args.offsets, {batch}));
  length = e.sub(e.toIndex(e.loadInt(args.offsets, {e.add(batch, e.index(1))})),
                 first);
}

SmallVector<Value> RecurrenceSequence::step(Value head, Value t) const {
  if (!first)
    return {batch, head, t};
  return {e.add(first, t), head};
}

SmallVector<Value> RecurrenceSequence::state(Value head) const {
  if (!slot)
    return {batch, head};
  return {slot, head};
}

//===----------------------------------------------------------------------===//
// Ragged plan kernel
//===----------------------------------------------------------------------===//

RaggedPlanner::RaggedPlanner(KernelEmitter &e,
                             const SoftmaxAttentionShape &shape,
                             const RaggedPlan &plan, ValueRange args)
    : e(e), shape(shape), plan(plan), queryOffsets(args[0]),
      keyCounts(args[1]), tables{args[2], args[3], args[4]} {
  batchSize = e.sub(e.dim(queryOffsets, 0), e.index(1));
}

Value RaggedPlanner::queriesOf(Value seq) {
  return e.sub(e.toIndex(e.loadInt(queryOffsets, {e.add(seq, e.index(1))})),
               e.toIndex(e.loadInt(queryOffsets, {seq})));
}

Value RaggedPlanner::keysOf(Value seq) {
  if (shape.paged())
    return e.toIndex(e.loadInt(keyCounts, {seq}));
  return e.sub(e.toIndex(e.loadInt(keyCounts, {e.add(seq, e.index(1))})),
               e.toIndex(e.loadInt(keyCounts, {seq})));
}

// Sequences of 1 .. decodeMaxQueries rows decode (split-KV), longer ones
// take the flash kernel; empty ones have no work.
Value RaggedPlanner::decodes(Value rows) {
  return e.andI(
      e.icmp(arith::CmpIPredicate::sgt, rows, e.index(0)),
      e.icmp(arith::CmpIPredicate::sle, rows, e.index(plan.decodeMaxQueries)));
}

Value RaggedPlanner::decodeKeys(Value seq) {
  return e.select(decodes(queriesOf(seq)), keysOf(seq), e.index(0));
}

Value RaggedPlanner::chunkFor(Value decodeKeys) {
  Value granule = e.index(plan.keyGranule);
  return e.mul(
      e.ceilDiv(e.maxS(e.index(plan.splitKeys),
                       e.ceilDiv(decodeKeys, e.index(RaggedPlan::kMaxSplits))),
                granule),
      granule);
}

RaggedPlanner::Work RaggedPlanner::work(Value seq, Value chunk) {
  Value c0 = e.index(0), c1 = e.index(1);
  Work w;
  w.rows = queriesOf(seq);
  w.keys = keysOf(seq);
  w.tiles = e.select(
      e.icmp(arith::CmpIPredicate::sgt, w.rows, e.index(plan.decodeMaxQueries)),
      e.ceilDiv(w.rows, e.index(plan.queryTile)), c0);
  w.decodeRows = e.select(decodes(w.rows), w.rows, c0);
  w.splits = e.maxS(c1, e.ceilDiv(w.keys, chunk));
  return w;
}

std::array<Value, 3> RaggedPlanner::entries(Value seq, Value chunk) {
  Work w = work(seq, chunk);
  return {w.tiles, e.mul(w.decodeRows, w.splits), w.decodeRows};
}

std::array<Value, 3> RaggedPlanner::write(Value seq, Value chunk,
                                          ArrayRef<Value> at) {
  Value c0 = e.index(0), c1 = e.index(1);
  auto store = [&](Value table, Value entry, ArrayRef<Value> columns) {
    for (auto [c, value] : llvm::enumerate(columns))
      memref::StoreOp::create(e.b, e.toI32(value), table,
                              ValueRange{entry, e.index(c)});
  };
  Work w = work(seq, chunk);
  // Flash tiles, the last (most keys under a causal mask) first so that
  // the longest work starts first.
  Value queryTile = e.index(plan.queryTile);
  e.loop(c0, w.tiles, c1, [&](Value t) {
    Value first = e.mul(e.sub(e.sub(w.tiles, c1), t), queryTile);
    store(tables[0], e.add(at[0], t), {seq, first, c0, c0});
  });
  // Each decode row's key ranges, then its merge entry.
  e.loop(c0, w.decodeRows, c1, [&](Value r) {
    Value firstSplit = e.add(at[1], e.mul(r, w.splits));
    e.loop(c0, w.splits, c1, [&](Value sIndex) {
      Value begin = e.mul(sIndex, chunk);
      Value end = e.minS(w.keys, e.add(begin, chunk));
      store(tables[1], e.add(firstSplit, sIndex), {seq, r, begin, end});
    });
    store(tables[2], e.add(at[2], r), {seq, r, firstSplit, w.splits});
  });
  return {w.tiles, e.mul(w.decodeRows, w.splits), w.decodeRows};
}

void RaggedPlanner::markUnused(int table, Value from, Value step) {
  Value none = e.i32(-1);
  Value t = tables[table];
  e.loop(from, e.dim(t, 0), step, [&](Value at) {
    memref::StoreOp::create(e.b, none, t, ValueRange{at, e.index(0)});
  });
}

func::FuncOp mlir::attn::buildRaggedPlanKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const RaggedPlan &plan,
    DictionaryAttr tiling, TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "ragged_plan");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, /*vectorWidth=*/1);
  RaggedPlanner planner(e, shape, plan, func.getArguments());
  Value c0 = e.index(0), c1 = e.index(1);
  Value decodeKeys =
      e.loop(c0, planner.batch(), c1, {c0}, [&](Value seq, ValueRange it) {
        return SmallVector<Value>{e.add(it[0], planner.decodeKeys(seq))};
      })[0];
  Value chunk = planner.chunkFor(decodeKeys);
  SmallVector<Value> counts = e.loop(
      c0, planner.batch(), c1, {c0, c0, c0}, [&](Value seq, ValueRange at) {
        std::array<Value, 3> written =
            planner.write(seq, chunk, SmallVector<Value>(at));
        SmallVector<Value> next;
        for (auto [count, more] : llvm::zip(at, written))
          next.push_back(e.add(count, more));
        return next;
      });
  // Entries past the plan have no work.
  for (int table = 0; table < 3; ++table)
    planner.markUnused(table, counts[table], c1);
  func::ReturnOp::create(b);
  return func;
}
