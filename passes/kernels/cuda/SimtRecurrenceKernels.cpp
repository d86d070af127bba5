//===- SimtRecurrenceKernels.cpp - Linear recurrences for CUDA ------------===//
//
// The chunked linear recurrence as a CUDA block kernel (see SimtKernels.h
// for block kernels). One block owns a tile of columns of one state
// S [Dk, Dv] (SimtRecurrenceColumns); each column is carried in registers
// from S_init to the final state by one thread, or for short chunks by
// `parts` threads of a warp, each with every parts-th row. Per
// chunk of C steps, with G the cumulative log-decay inside the chunk (the
// algebra of LinearRecurrenceKernels.cpp and fla's chunk_gated_delta):
//
//  1. the block stages the chunk's k and q rows in shared memory
//     (normalized, q scaled), G and beta;
//  2. the block computes the chunk's matrices, one entry per thread at a
//     time: P[t, s] = (q_t . k_s) exp(G_t - G_s) for s <= t and, for the
//     delta rules, A[t, s] = beta_t (k_t . k_s) exp(G_t - G_s) for s < t
//     (with a decay per key feature, gla and kda, feature by feature);
//  3. each column's threads take it through the chunk:
//       o_t  = exp(G_t) q_t . S                      (the state so far),
//       v'_t = v_t, or for the delta rules the solution of
//              (I + A) v' = beta (v - exp(G) K S)    (forward substitution:
//              the UT transform applied to one column),
//       o_t += sum_{s <= t} P[t, s] v'_s,
//       S    = exp(G_last) S + sum_s exp(G_last - G_s) k_s v'_s.
//
// Decays only appear as exp(G_i - G_j) with i >= j or exp(G_i) with
// G_i <= 0, so nothing overflows. A one-step call is one chunk of one step:
// exactly the recurrent step. With split columns, each part sums q_t . S
// and k_t . S over its rows, the column's first part adds the partial
// sums and does the column's scalar work (v', o), and every part updates
// its rows of S. The rmsnorm-silu gate needs whole output rows,
// which span column tiles, so a kernel of its own applies it afterwards
// (a block per 16 rows, staged with coalesced loads).
//
// Shared rows of k and q are padded to Dk + 1 floats, so a thread per row
// (step 1) reads distinct banks. When the chunk's buffers do not fit in
// shared memory (a 256-node tree at Dk = 128 needs about 900 KiB), those
// that scale with the chunk are rows of global scratch bindings instead
// (recurrenceScratchShapes); the phases read them the same way.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cuda/SimtKernels.h"

#include <optional>

using namespace mlir;
using namespace mlir::attn;

namespace {

/// The chunked block kernel, built one phase at a time (the numbered steps
/// of the file comment): the block's heads and column tile, its shared
/// buffers and registers, the initial state, then per chunk the staged
/// rows (1), the chunk's matrices (2), gla's folded decays, and each
/// thread's column through the chunk (3), then the final state.
class SimtChunkedRecurrenceKernel {
public:
  SimtChunkedRecurrenceKernel(OpBuilder &builder, Location loc, StringRef name,
                              const LinearRecurrenceShape &shape,
                              const SimtRecurrenceColumns &columns,
                              const GpuTiling &tiling, TypeRange bindingTypes);

  /// Emits the phases in order and returns the kernel.
  func::FuncOp build();

private:
  // The phases, in the order build() emits them.
  void mapBlock();
  void allocateBuffers();
  void loadInitialState();
  void stageChunk(Value first, Value n);
  void scoreChunk(Value n);
  void foldFeatureDecays(Value n, Value last);
  void walkColumns(Value first, Value n, Value last);
  void storeFinalState();

  // Step 3 for state column `column`, whose v' are values[:, valueColumn]
  // and whose `part`'s rows are `stateColumn` (registers).
  void walkWholeColumns(Value first, Value n, Value last);
  void walkSplitColumns(Value first, Value n, Value last);
  /// q_t . S and (delta rules) k_t . S over the rows of `part`.
  SmallVector<Value> stateSums(Value stateColumn, Value part, Value t);
  void columnOutputs(Value valueColumn, Value column, Value first, Value n,
                     function_ref<SmallVector<Value>(Value t)> sumsAt);
  void solveDeltaValues(Value valueColumn, Value n);
  void addIntraChunkOutputs(Value valueColumn, Value column, Value first,
                            Value n);
  void decayValues(Value valueColumn, Value n, Value last);
  void carryState(Value valueColumn, Value stateColumn, Value part, Value n,
                  Value last);

  // A tree's relations, walking `parents` up from a node.
  /// The sum of term(u) over the nodes u on t's path from the root.
  Value pathSum(Value t, function_ref<Value(Value)> term);
  /// Whether node s is t or an ancestor of t.
  Value isAncestorOrSelf(Value s, Value t);

  /// Runs `body(column)` on the threads whose state column is in the
  /// state.
  void onColumn(Value thread, function_ref<void(Value)> body);
  /// The part of its column `thread` holds, and the column's index in the
  /// block (lanes [p W, p W + W) of a warp hold part p of its W columns).
  Value partOf(Value thread);
  Value blockColumnOf(Value thread);
  /// The state row of register `k` of part `part`.
  Value stateRow(Value part, int64_t k);
  const LinearRecurrenceShape &shape;
  const SimtRecurrenceColumns columns;
  const GpuTiling &tiling;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  SimtEmitter e;
  RecurrenceBindings args;
  const int64_t C, Dk, Dv, tiles, parts;
  /// State rows per thread, columns per warp, and sums over a column's
  /// rows per step (q . S, then for the delta rules k . S).
  const int64_t rows, warpColumns, sumsPerStep;
  const bool scalarDecay, featureDecay, delta;

  Value c0, c1, dk, tile, hv, batch, hk, length;
  /// Where the block's sequence is (mapBlock).
  std::optional<RecurrenceSequence> seq;
  Value keys, queries, logDecay, betas, scores, transform, values, partials,
      stateRegs;
  /// The keys the delta rules read the state with, exp(G_t) k_t: keys
  /// itself, or with a decay per key feature (kda) rows of their own,
  /// since the keys then carry exp(G_last - G_t) for the state update.
  Value readKeys;
};

SimtChunkedRecurrenceKernel::SimtChunkedRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const SimtRecurrenceColumns &columns,
    const GpuTiling &tiling, TypeRange bindingTypes)
    : shape(shape), columns(columns), tiling(tiling), guard(builder), func([&] {
        GpuTiling kernelTiling = tiling;
        kernelTiling.blockThreads = columns.threads;
        func::FuncOp func = createSimtKernel(builder, loc, name, bindingTypes,
                                             kernelTiling, "chunked");
        func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
        return func;
      }()),
      b(loc, builder), e(b, columns.threads), args(func, shape),
      C(shape.chunkSize), Dk(shape.keyDim), Dv(shape.valueDim),
      tiles(columns.tiles(shape)), parts(columns.parts), rows(Dk / parts),
      warpColumns(32 / parts), sumsPerStep(shape.isDelta() ? 2 : 1),
      scalarDecay(shape.scalarDecay()), featureDecay(shape.featureDecay()),
      delta(shape.isDelta()) {}

func::FuncOp SimtChunkedRecurrenceKernel::build() {
  mapBlock();
  allocateBuffers();
  loadInitialState();
  if (shape.tree) {
    // The whole tree is one chunk (the host checked T <= max_nodes); no
    // state leaves it.
    Value last = e.sub(length, c1);
    stageChunk(c0, length);
    scoreChunk(length);
    foldFeatureDecays(length, last);
    walkColumns(c0, length, last);
    func::ReturnOp::create(b);
    return func;
  }
  Value chunks = e.ceilDiv(length, e.index(C));
  e.loop(c0, chunks, c1, [&](Value chunk) {
    Value first = e.mul(chunk, e.index(C));
    // Chunks of one step (decode's kernel) are always whole: the loops
    // over their steps fold away.
    Value n = C == 1 ? c1 : e.minS(e.index(C), e.sub(length, first));
    Value last = e.sub(n, c1);
    stageChunk(first, n);
    scoreChunk(n);
    foldFeatureDecays(n, last);
    walkColumns(first, n, last);
  });
  storeFinalState();
  func::ReturnOp::create(b);
  return func;
}

void SimtChunkedRecurrenceKernel::mapBlock() {
  // Block order (batch, value head, column tile), the tile fastest.
  c0 = e.index(0), c1 = e.index(1), dk = e.index(Dk);
  Value rest = args.workgroup;
  tile = e.rem(rest, e.index(tiles));
  rest = e.div(rest, e.index(tiles));
  hv = e.rem(rest, e.index(shape.numValueHeads));
  batch = e.div(rest, e.index(shape.numValueHeads));
  hk = e.div(hv, e.index(shape.numValueHeads / shape.numKeyHeads));
  seq.emplace(e, shape, args, batch);
  length = seq->length;
}

void SimtChunkedRecurrenceKernel::allocateBuffers() {
  // The buffers that scale with the chunk: in shared memory, or when they
  // do not fit there, each in its row of a global scratch binding (they
  // follow the others, before the workgroup).
  auto scratchShapes = recurrenceScratchShapes(shape, columns, tiling);
  unsigned nextScratch = func.getNumArguments() - 1 - scratchShapes.size();
  auto chunkBuffer = [&](ArrayRef<int64_t> bufferShape) -> Value {
    if (scratchShapes.empty())
      return e.shared(bufferShape);
    Value scratch = func.getArgument(nextScratch++);
    auto type = cast<MemRefType>(scratch.getType());
    SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
    offsets[0] = args.workgroup;
    SmallVector<OpFoldResult> sizes{b.getIndexAttr(1)};
    for (int64_t size : bufferShape)
      sizes.push_back(b.getIndexAttr(size));
    SmallVector<OpFoldResult> strides(type.getRank(), b.getIndexAttr(1));
    auto view = memref::SubViewOp::inferRankReducedResultType(
        bufferShape, type, offsets, sizes, strides);
    return memref::SubViewOp::create(b, cast<MemRefType>(view), scratch,
                                     offsets, sizes, strides);
  };
  keys = chunkBuffer({C, Dk + 1}), queries = chunkBuffer({C, Dk + 1});
  logDecay = scalarDecay    ? e.shared({C})
             : featureDecay ? chunkBuffer({C, Dk + 1})
                            : Value();
  readKeys = featureDecay && delta ? chunkBuffer({C, Dk + 1}) : keys;
  betas = delta ? e.shared({C}) : Value();
  scores = chunkBuffer({C, C});
  transform = delta ? chunkBuffer({C, C}) : Value();
  values = chunkBuffer({C, columns.columns()});
  // Split columns: per step, each thread's partial sums,
  // [t, sum * threads + thread].
  if (int64_t width = columns.partialSumsPerStep(shape))
    partials = chunkBuffer({C, width});
  // Each thread's part of its state column, in registers from S_init to
  // the final state: indexed by constants only (the loops over its rows
  // are unrolled), as registers must be. (In global memory, its 16 K
  // accesses per chunk each fed a chain of dependent multiply-adds: the
  // kernel waited on memory.)
  stateRegs = e.registers({rows});
}

Value SimtChunkedRecurrenceKernel::partOf(Value thread) {
  if (parts == 1)
    return c0;
  return e.div(e.rem(thread, e.index(32)), e.index(warpColumns));
}

Value SimtChunkedRecurrenceKernel::blockColumnOf(Value thread) {
  if (parts == 1)
    return thread;
  return e.add(e.mul(e.div(thread, e.index(32)), e.index(warpColumns)),
               e.rem(thread, e.index(warpColumns)));
}

Value SimtChunkedRecurrenceKernel::stateRow(Value part, int64_t k) {
  if (parts == 1)
    return e.index(k);
  return e.add(e.index(k * parts), part);
}

void SimtChunkedRecurrenceKernel::onColumn(Value thread,
                                           function_ref<void(Value)> body) {
  Value column =
      e.add(e.mul(tile, e.index(columns.columns())), blockColumnOf(thread));
  e.ifThen(e.icmp(arith::CmpIPredicate::ult, column, e.index(Dv)),
           [&] { body(column); });
}

void SimtChunkedRecurrenceKernel::loadInitialState() {
  e.eachThread([&](Value thread) {
    Value stateColumn = e.registersOf(stateRegs, thread);
    Value part = partOf(thread);
    onColumn(thread, [&](Value column) {
      for (int64_t k = 0; k < rows; ++k)
        e.store(e.load(args.initialState,
                       seq->stateElement(hv, stateRow(part, k), column)),
                stateColumn, e.index(k));
    });
  });
}

void SimtChunkedRecurrenceKernel::stageChunk(Value first, Value n) {
  // 1. The chunk's k and q rows (feature fastest: coalesced reads), gla's
  //    log-decays; then per step the normalization and scale, the
  //    cumulative scalar log-decay and beta.
  e.forAll(e.mul(n, dk), [&](Value x) {
    Value t = e.div(x, dk), i = e.rem(x, dk), step = e.add(first, t);
    e.store(e.load(args.k, seq->stepFeature(hk, step, i)), keys, {t, i});
    e.store(e.load(args.q, seq->stepFeature(hk, step, i)), queries, {t, i});
    if (featureDecay)
      e.store(e.load(args.g, seq->stepFeature(hv, step, i)), logDecay, {t, i});
  });
  e.forAll(n, [&](Value t) {
    scaleSharedRow(e, keys, t, Dk, shape.normalizeQueryKey, 1.0);
    scaleSharedRow(e, queries, t, Dk, shape.normalizeQueryKey, shape.scale);
    if (scalarDecay && shape.tree)
      e.store(
          pathSum(t, [&](Value u) { return e.load(args.g, seq->step(hv, u)); }),
          logDecay, {t});
    else if (scalarDecay)
      e.store(cumulativeLogDecay(e, args.g, *seq, hv, first, e.add(t, c1)),
              logDecay, {t});
    if (delta)
      e.store(e.load(args.beta, seq->step(hv, e.add(first, t))), betas, {t});
  });
  if (featureDecay && shape.tree)
    // Along each node's path: a parent precedes its children, so in index
    // order its sum is complete when a child adds to it.
    e.forAll(dk, [&](Value i) {
      e.loop(c0, n, c1, [&](Value t) {
        Value parent = e.loadInt(args.parents, {batch, t});
        e.ifThen(e.icmp(arith::CmpIPredicate::sge, parent, e.i32(0)), [&] {
          e.store(e.fadd(e.load(logDecay, {t, i}),
                         e.load(logDecay, {e.toIndex(parent), i})),
                  logDecay, {t, i});
        });
      });
    });
  else if (featureDecay)
    e.forAll(dk, [&](Value i) {
      e.loop(c0, n, c1, {e.scalar(0.0)}, [&](Value t, ValueRange sum) {
        Value total = e.fadd(sum[0], e.load(logDecay, {t, i}));
        e.store(total, logDecay, {t, i});
        return SmallVector<Value>{total};
      });
    });
}

Value SimtChunkedRecurrenceKernel::pathSum(Value t,
                                           function_ref<Value(Value)> term) {
  // From t up to the root (the runtime checked that parents form a tree).
  Value none = e.index(-1);
  return e.whileLoop(
      {t, e.scalar(0.0)},
      [&](ValueRange it) {
        return e.icmp(arith::CmpIPredicate::ne, it[0], none);
      },
      [&](ValueRange it) -> SmallVector<Value> {
        Value parent = e.loadInt(args.parents, {batch, it[0]});
        return {e.toIndex(parent), e.fadd(it[1], term(it[0]))};
      })[1];
}

Value SimtChunkedRecurrenceKernel::isAncestorOrSelf(Value s, Value t) {
  // Up from t while above s; ancestors have smaller indices.
  Value u = e.whileLoop(
      {t},
      [&](ValueRange it) {
        return e.icmp(arith::CmpIPredicate::sgt, it[0], s);
      },
      [&](ValueRange it) -> SmallVector<Value> {
        return {e.toIndex(e.loadInt(args.parents, {batch, it[0]}))};
      })[0];
  return e.icmp(arith::CmpIPredicate::eq, u, s);
}

void SimtChunkedRecurrenceKernel::scoreChunk(Value n) {
  // 2. P and A, one entry (t, s) at a time, s fastest.
  e.forAll(e.mul(n, n), [&](Value x) {
    Value t = e.div(x, n), s = e.rem(x, n);
    Value inChunk = e.icmp(arith::CmpIPredicate::ule, s, t);
    if (shape.tree) {
      // The ancestor relation in place of s <= t: the column pass sums
      // over s <= t, so the other entries there are zeros.
      Value related = isAncestorOrSelf(s, t);
      e.ifThen(arith::AndIOp::create(
                   b, inChunk,
                   arith::XOrIOp::create(
                       b, related,
                       arith::ConstantIntOp::create(b, b.getI1Type(), 1))),
               [&] {
                 e.store(e.scalar(0.0), scores, {t, s});
                 if (delta)
                   e.store(e.scalar(0.0), transform, {t, s});
               });
      inChunk = arith::AndIOp::create(b, inChunk, related);
    }
    e.ifThen(inChunk, [&] {
      // q_t . k_s and, for kda, k_t . k_s in the same pass over the
      // features, so that each feature's decay is taken once for both.
      const bool fused = featureDecay && delta;
      auto decayedDots = [&](ArrayRef<Value> rows) {
        SmallVector<Value> zeros(rows.size(), e.scalar(0.0));
        return e.loop(c0, dk, c1, zeros, [&](Value i, ValueRange sums) {
          Value key = e.load(keys, {s, i});
          Value decay = featureDecay ? e.exp(e.fsub(e.load(logDecay, {t, i}),
                                                    e.load(logDecay, {s, i})))
                                     : Value();
          SmallVector<Value> next;
          for (auto [j, row] : llvm::enumerate(rows)) {
            Value x = e.load(row, {t, i});
            next.push_back(decay ? e.fma(e.fmul(x, key), decay, sums[j])
                                 : e.fma(x, key, sums[j]));
          }
          return next;
        });
      };
      SmallVector<Value> dots =
          fused ? decayedDots({queries, keys}) : decayedDots({queries});
      Value decay =
          scalarDecay
              ? e.exp(e.fsub(e.load(logDecay, {t}), e.load(logDecay, {s})))
              : Value();
      e.store(decay ? e.fmul(dots[0], decay) : dots[0], scores, {t, s});
      if (!delta)
        return;
      e.ifThen(e.icmp(arith::CmpIPredicate::ult, s, t), [&] {
        Value gram = fused ? dots[1] : decayedDots({keys})[0];
        Value a = e.fmul(e.load(betas, {t}), gram);
        e.store(decay ? e.fmul(a, decay) : a, transform, {t, s});
      });
    });
  });
}

void SimtChunkedRecurrenceKernel::foldFeatureDecays(Value n, Value last) {
  // gla, kda: fold the decays into q (exp(G_t)), kda's read keys
  // (exp(G_t)) and k (exp(G_last - G_s)), as the column pass reads them (a
  // tree carries no state out: no k).
  if (!featureDecay)
    return;
  e.forAll(e.mul(n, dk), [&](Value x) {
    Value t = e.div(x, dk), i = e.rem(x, dk);
    Value g = e.load(logDecay, {t, i});
    e.store(e.fmul(e.load(queries, {t, i}), e.exp(g)), queries, {t, i});
    if (readKeys != keys)
      e.store(e.fmul(e.load(keys, {t, i}), e.exp(g)), readKeys, {t, i});
    if (!shape.tree)
      e.store(e.fmul(e.load(keys, {t, i}),
                     e.exp(e.fsub(e.load(logDecay, {last, i}), g))),
              keys, {t, i});
  });
}

void SimtChunkedRecurrenceKernel::walkColumns(Value first, Value n,
                                              Value last) {
  // 3. Each column through the chunk; v' in values[:, its block column].
  if (parts == 1)
    walkWholeColumns(first, n, last);
  else
    walkSplitColumns(first, n, last);
}

void SimtChunkedRecurrenceKernel::walkWholeColumns(Value first, Value n,
                                                   Value last) {
  e.eachThread([&](Value thread) {
    Value stateColumn = e.registersOf(stateRegs, thread);
    onColumn(thread, [&](Value column) {
      columnOutputs(thread, column, first, n,
                    [&](Value t) { return stateSums(stateColumn, c0, t); });
      if (delta)
        solveDeltaValues(thread, n);
      addIntraChunkOutputs(thread, column, first, n);
      if (shape.tree)
        return;
      decayValues(thread, n, last);
      carryState(thread, stateColumn, c0, n, last);
    });
  });
}

void SimtChunkedRecurrenceKernel::walkSplitColumns(Value first, Value n,
                                                   Value last) {
  // Each part's sums, which only its warp reads.
  e.eachThread(
      [&](Value thread) {
        Value stateColumn = e.registersOf(stateRegs, thread);
        Value part = partOf(thread);
        onColumn(thread, [&](Value) {
          e.loop(c0, n, c1, [&](Value t) {
            for (auto [j, sum] :
                 llvm::enumerate(stateSums(stateColumn, part, t)))
              e.store(sum, partials,
                      {t, e.add(e.index(j * columns.threads), thread)});
          });
        });
      },
      SimtEmitter::Sync::Warp);
  // The column's scalar work on its first part (the others' sums are at
  // threads thread + p W of its warp); v' is read by the column's parts.
  e.eachThread(
      [&](Value thread) {
        onColumn(thread, [&](Value column) {
          Value valueColumn = blockColumnOf(thread);
          e.ifThen(e.icmp(arith::CmpIPredicate::eq, partOf(thread), c0), [&] {
            columnOutputs(valueColumn, column, first, n, [&](Value t) {
              SmallVector<Value> total;
              for (int64_t j = 0; j < sumsPerStep; ++j) {
                auto partial = [&](int64_t p) {
                  return e.load(
                      partials,
                      {t, e.add(e.index(j * columns.threads + p * warpColumns),
                                thread)});
                };
                Value sum = partial(0);
                for (int64_t p = 1; p < parts; ++p)
                  sum = e.fadd(sum, partial(p));
                total.push_back(sum);
              }
              return total;
            });
            if (delta)
              solveDeltaValues(valueColumn, n);
            addIntraChunkOutputs(valueColumn, column, first, n);
            if (!shape.tree)
              decayValues(valueColumn, n, last);
          });
        });
      },
      SimtEmitter::Sync::Warp);
  if (shape.tree)
    return;
  e.eachThread([&](Value thread) {
    Value stateColumn = e.registersOf(stateRegs, thread);
    Value part = partOf(thread);
    onColumn(thread, [&](Value) {
      carryState(blockColumnOf(thread), stateColumn, part, n, last);
    });
  });
}

SmallVector<Value> SimtChunkedRecurrenceKernel::stateSums(Value stateColumn,
                                                          Value part, Value t) {
  SmallVector<Value> sums(sumsPerStep, e.scalar(0.0));
  for (int64_t k = 0; k < rows; ++k) {
    Value i = stateRow(part, k);
    Value s = e.load(stateColumn, e.index(k));
    sums[0] = e.fma(e.load(queries, {t, i}), s, sums[0]);
    if (delta)
      sums[1] = e.fma(e.load(readKeys, {t, i}), s, sums[1]);
  }
  return sums;
}

void SimtChunkedRecurrenceKernel::columnOutputs(
    Value valueColumn, Value column, Value first, Value n,
    function_ref<SmallVector<Value>(Value t)> sumsAt) {
  // o_t = exp(G_t) q_t . S, and v'_t's right-hand side
  // beta (v - exp(G) K S) (v itself without the delta rules).
  e.loop(c0, n, c1, [&](Value t) {
    SmallVector<Value> sums = sumsAt(t);
    Value decay = scalarDecay ? e.exp(e.load(logDecay, {t})) : Value();
    Value out = decay ? e.fmul(sums[0], decay) : sums[0];
    SmallVector<Value> at = seq->stepFeature(hv, e.add(first, t), column);
    e.store(out, args.out, at);
    Value v = e.load(args.v, at);
    if (delta)
      v = e.fmul(e.load(betas, {t}),
                 e.fsub(v, decay ? e.fmul(sums[1], decay) : sums[1]));
    e.store(v, values, {t, valueColumn});
  });
}

void SimtChunkedRecurrenceKernel::solveDeltaValues(Value valueColumn, Value n) {
  // (I + A) v' = rhs by forward substitution: the UT transform applied to
  // one column.
  e.loop(c1, n, c1, [&](Value t) {
    Value known = e.sumOver(c0, t, [&](Value s) {
      return e.fmul(e.load(transform, {t, s}),
                    e.load(values, {s, valueColumn}));
    });
    e.store(e.fsub(e.load(values, {t, valueColumn}), known), values,
            {t, valueColumn});
  });
}

void SimtChunkedRecurrenceKernel::addIntraChunkOutputs(Value valueColumn,
                                                       Value column,
                                                       Value first, Value n) {
  // o_t += sum_{s <= t} P[t, s] v'_s.
  e.loop(c0, n, c1, [&](Value t) {
    SmallVector<Value> at = seq->stepFeature(hv, e.add(first, t), column);
    Value intra = e.sumOver(c0, e.add(t, c1), [&](Value s) {
      return e.fmul(e.load(scores, {t, s}), e.load(values, {s, valueColumn}));
    });
    e.store(e.fadd(e.load(args.out, at), intra), args.out, at);
  });
}

void SimtChunkedRecurrenceKernel::decayValues(Value valueColumn, Value n,
                                              Value last) {
  // v'_s exp(G_last - G_s), as the state update takes them.
  if (!scalarDecay)
    return;
  Value gLast = e.load(logDecay, {last});
  e.loop(c0, n, c1, [&](Value s) {
    Value tail = e.exp(e.fsub(gLast, e.load(logDecay, {s})));
    e.store(e.fmul(e.load(values, {s, valueColumn}), tail), values,
            {s, valueColumn});
  });
}

void SimtChunkedRecurrenceKernel::carryState(Value valueColumn,
                                             Value stateColumn, Value part,
                                             Value n, Value last) {
  // S = exp(G_last) S + sum_s exp(G_last - G_s) k_s v'_s (the values
  // already carry their decay, gla's keys theirs).
  Value lastDecay = scalarDecay ? e.exp(e.load(logDecay, {last})) : Value();
  for (int64_t k = 0; k < rows; ++k) {
    Value i = stateRow(part, k);
    Value s = e.load(stateColumn, e.index(k));
    if (lastDecay)
      s = e.fmul(s, lastDecay);
    if (featureDecay)
      s = e.fmul(s, e.exp(e.load(logDecay, {last, i})));
    Value update = e.sumOver(c0, n, [&](Value t) {
      return e.fmul(e.load(keys, {t, i}), e.load(values, {t, valueColumn}));
    });
    e.store(e.fadd(s, update), stateColumn, e.index(k));
  }
}

void SimtChunkedRecurrenceKernel::storeFinalState() {
  e.eachThread([&](Value thread) {
    Value stateColumn = e.registersOf(stateRegs, thread);
    Value part = partOf(thread);
    onColumn(thread, [&](Value column) {
      for (int64_t k = 0; k < rows; ++k)
        e.store(e.load(stateColumn, e.index(k)), args.finalState,
                seq->stateElement(hv, stateRow(part, k), column));
    });
  });
}

} // namespace

Value mlir::attn::storedElement(SimtEmitter &e, ArrayRef<Value> parts,
                                Value row, Value col) {
  Value x = e.load(parts[0], {row, col});
  for (Value part : parts.drop_front())
    x = e.fadd(x, e.load(part, {row, col}));
  return x;
}

/// The columns a thread summing a row of the shared `rows` [R, W] starts
/// from, per row: rows whose stride in 4-byte words is even start a word
/// further on than the row before, so that the rows of a warp's threads,
/// walked in step, meet 32 different banks (a stride of W + 1 words, odd)
/// rather than the few an even stride leaves them (4 of 32 at W = 136
/// bf16). 0 where the stride is odd already or no whole number of words.
static int64_t rowSkewColumns(Value rows) {
  auto type = cast<MemRefType>(rows.getType());
  const int64_t bytes = type.getElementTypeBitWidth() / 8;
  const int64_t strideBytes = type.getShape().back() * bytes;
  if (bytes == 0 || bytes > 4 || strideBytes % 4 || (strideBytes / 4) % 2)
    return 0;
  return 4 / bytes;
}

Value mlir::attn::sharedRowNormInverse(SimtEmitter &e, ArrayRef<Value> parts,
                                       Value row, int64_t dim) {
  // Row r is summed from column (r skew) mod dim round to the column
  // before it (the same sum in another order).
  Value first = e.index(0), width = e.index(dim);
  if (int64_t skew = rowSkewColumns(parts[0]))
    first = e.rem(e.mul(row, e.index(skew)), width);
  Value squares = e.sumOver(e.index(0), width, [&](Value i) {
    Value column = e.add(first, i);
    column = e.select(e.icmp(arith::CmpIPredicate::ult, column, width), column,
                      e.sub(column, width));
    Value x = storedElement(e, parts, row, column);
    return e.fmul(x, x);
  });
  return e.fdiv(e.scalar(1.0),
                math::SqrtOp::create(e.b, e.fadd(squares, e.scalar(1e-6))));
}

void mlir::attn::scaleSharedRow(SimtEmitter &e, Value rows, Value row,
                                int64_t dim, bool normalize, double factor) {
  if (!normalize && factor == 1.0)
    return;
  Value multiplier = e.scalar(factor);
  if (normalize)
    multiplier = e.fmul(multiplier, sharedRowNormInverse(e, {rows}, row, dim));
  e.loop(e.index(0), e.index(dim), e.index(1), [&](Value i) {
    e.store(e.fmul(e.load(rows, {row, i}), multiplier), rows, {row, i});
  });
}

Value mlir::attn::cumulativeLogDecay(SimtEmitter &e, Value g,
                                     const RecurrenceSequence &seq, Value hv,
                                     Value first, Value count) {
  return e.sumOver(e.index(0), count, [&](Value s) {
    return e.load(g, seq.step(hv, e.add(first, s)));
  });
}

SmallVector<SmallVector<int64_t>>
mlir::attn::recurrenceScratchShapes(const LinearRecurrenceShape &shape,
                                    const SimtRecurrenceColumns &columns,
                                    const GpuTiling &tiling) {
  // In allocateBuffers' order.
  const int64_t C = shape.chunkSize, Dk = shape.keyDim;
  SmallVector<SmallVector<int64_t>> chunked{{C, Dk + 1}, {C, Dk + 1}};
  if (shape.featureDecay())
    chunked.push_back({C, Dk + 1});
  if (shape.featureDecay() && shape.isDelta())
    chunked.push_back({C, Dk + 1});
  chunked.push_back({C, C});
  if (shape.isDelta())
    chunked.push_back({C, C});
  chunked.push_back({C, columns.columns()});
  if (int64_t width = columns.partialSumsPerStep(shape))
    chunked.push_back({C, width});
  // Bytes as SimtLaunch counts them: each buffer rounded to 16, the
  // scalar decays and betas and the state columns' registers beside.
  auto bytes = [](int64_t floats) { return roundUp(floats * 4, 16); };
  int64_t total = 0;
  for (ArrayRef<int64_t> buffer : chunked)
    total += bytes(buffer[0] * buffer[1]);
  if (shape.scalarDecay())
    total += bytes(C);
  if (shape.isDelta())
    total += bytes(C);
  if (total <= tiling.maxSharedBytes)
    return {};
  return chunked;
}

func::FuncOp mlir::attn::buildSimtChunkedRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const SimtRecurrenceColumns &columns,
    const GpuTiling &tiling, TypeRange bindingTypes) {
  return SimtChunkedRecurrenceKernel(builder, loc, name, shape, columns, tiling,
                                     bindingTypes)
      .build();
}

SimtRecurrenceColumns
SimtRecurrenceColumns::choose(const LinearRecurrenceShape &shape,
                              const GpuTiling &tiling) {
  assert(tiling.blockThreads % 32 == 0 && "blocks of whole warps");
  SimtRecurrenceColumns columns;
  const int64_t Dk = shape.keyDim;
  if (shape.chunkSize <= kMaxSplitChunk)
    while (columns.parts < 32 && Dk / columns.parts > kStateRowsPerThread &&
           Dk % (2 * columns.parts) == 0)
      columns.parts *= 2;
  columns.threads = std::min(tiling.blockThreads,
                             roundUp(shape.valueDim * columns.parts, 32));
  return columns;
}

func::FuncOp mlir::attn::buildSimtRmsNormGateKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const RmsNormGateShape &shape, const GpuTiling &tiling,
    TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func = createSimtKernel(builder, loc, name, bindingTypes, tiling,
                                       "rmsnorm_gate");
  func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b, tiling.blockThreads);
  auto args = func.getArguments();
  Value output = args[0], zs = args[1], weight = args[2];
  Value skipInput = shape.skip ? args[3] : Value();
  Value skipScale = shape.skip ? args[4] : Value();
  Value result = args[args.size() - 2], workgroup = args.back();
  const int64_t Dv = shape.headFeatures, G = shape.groupFeatures;
  const int64_t headsPerRow = shape.headsPerRow();
  const int64_t groupsPerRow = shape.groupsPerRow();
  const int64_t rowsPerBlock = gateRowsPerBlock(shape);
  const int64_t vectors = rowsPerBlock * headsPerRow;

  // Row order (batch, row of the token, step), the step fastest; packed
  // (row of the token, token), the token fastest. Block i takes rows
  // [i R, i R + R); a row is the head vectors from its first head on.
  Value length = e.dim(output, shape.packed ? 0 : 2);
  Value rowsPerToken = e.index(shape.rowsPerToken());
  Value sequences = shape.packed ? e.index(1) : e.dim(output, 0);
  Value firstRow = e.mul(workgroup, e.index(rowsPerBlock));
  Value rows = e.maxS(
      e.minS(e.index(rowsPerBlock),
             e.sub(e.mul(e.mul(sequences, rowsPerToken), length), firstRow)),
      e.index(0));
  // Each row's indices (its first head's vector), divided out once per row
  // into shared memory: a division by the dynamic length per element cost
  // more than the gate. Rows past the block's last repeat it (their copies
  // read nothing).
  const int64_t rowRank = shape.packed ? 2 : 3;
  // The head is index 1 of both layouts' rows.
  const int64_t headIndex = 1;
  Type i64 = b.getI64Type();
  Value rowIndices = e.shared({rowsPerBlock, rowRank}, i64);
  e.forAll(e.index(rowsPerBlock), [&](Value j) {
    Value row = e.add(firstRow, e.minS(j, e.sub(rows, e.index(1))));
    Value step = e.rem(row, length), rest = e.div(row, length);
    Value head = e.mul(e.rem(rest, rowsPerToken), e.index(headsPerRow));
    Value batch = e.div(rest, rowsPerToken);
    SmallVector<Value> indices = shape.packed
                                     ? SmallVector<Value>{step, head}
                                     : SmallVector<Value>{batch, head, step};
    for (auto [k, index] : llvm::enumerate(indices))
      memref::StoreOp::create(b, arith::IndexCastOp::create(b, i64, index),
                              rowIndices, ValueRange{j, e.index(k)});
  });
  // The indices of head vector s of row j, before the feature.
  auto vectorAt = [&](Value j, Value s) {
    SmallVector<Value> at;
    for (int64_t k = 0; k < rowRank; ++k)
      at.push_back(e.toIndex(e.loadInt(rowIndices, {j, e.index(k)})));
    at[headIndex] = e.add(at[headIndex], s);
    return at;
  };

  // The block's head vectors of o and z copied as stored (cp.async, every
  // copy of a thread in flight at once), vector v = j H' + s being head
  // vector s of row j; each group's sum of squares in kSumsPerGroup
  // interleaved partial sums over the block's threads, then combined; then
  // every element again, consecutive threads on consecutive elements.
  const int64_t kSumsPerGroup = 8;
  Type storage = KernelEmitter::storageType(output);
  const int64_t elementBytes = storage.getIntOrFloatBitWidth() / 8;
  const int64_t lanes = 16 / elementBytes;
  const int64_t padded = roundUp(Dv, lanes);
  // Vectors padded by 16 bytes or more: the padding of the fewest
  // wavefronts for the partial sums' reads (a warp's lanes take 32 /
  // kSumsPerGroup groups, each lane a feature of its group, the lanes of a
  // group consecutive features).
  auto partialSumsWavefronts = [&](int64_t width) {
    SmallVector<std::optional<int64_t>> bytes;
    for (int64_t lane = 0; lane < 32; ++lane) {
      const int64_t group = lane / kSumsPerGroup;
      const int64_t feature = group % groupsPerRow * G + lane % kSumsPerGroup;
      const int64_t vector = group / groupsPerRow * headsPerRow + feature / Dv;
      bytes.push_back((vector * width + feature % Dv) * elementBytes);
    }
    return sharedWavefronts(bytes, elementBytes).first;
  };
  int64_t width = padded + lanes;
  for (int64_t more = 2; more <= 4; ++more)
    if (partialSumsWavefronts(padded + more * lanes) <
        partialSumsWavefronts(width))
      width = padded + more * lanes;
  Value outputs = e.shared({vectors, width}, storage);
  Value gates = e.shared({vectors, width}, KernelEmitter::storageType(zs));
  Value skipInputs;
  if (skipInput)
    skipInputs =
        e.shared({vectors, width}, KernelEmitter::storageType(skipInput));
  Value weights;
  if (!shape.weightPerToken)
    weights = e.shared({1, padded}, KernelEmitter::storageType(weight));
  e.eachThread([&](Value thread) {
    Value perRow = e.index(headsPerRow);
    auto blockVector = [&](Value v) -> std::pair<SmallVector<Value>, Value> {
      Value j = e.div(v, perRow);
      return {vectorAt(j, e.rem(v, perRow)),
              e.icmp(arith::CmpIPredicate::ult, j, rows)};
    };
    e.stageRows(thread, vectors, output, outputs, Dv, Dv, blockVector);
    e.stageRows(thread, vectors, zs, gates, Dv, Dv, blockVector);
    if (skipInputs)
      e.stageRows(thread, vectors, skipInput, skipInputs, Dv, Dv, blockVector);
    if (weights)
      e.stageRows(
          thread, 1, weight, weights, Dv, Dv,
          [&](Value) -> std::pair<SmallVector<Value>, Value> {
            return {{}, arith::ConstantIntOp::create(b, b.getI1Type(), 1)};
          });
    AsyncWaitOp::create(b);
  });
  // Feature f of row j (f < H' Dv) is feature f % Dv of its vector f / Dv.
  auto staged = [&](Value buffer, Value j, Value f) {
    Value dv = e.index(Dv);
    return e.load(buffer, {e.add(e.mul(j, e.index(headsPerRow)), e.div(f, dv)),
                           e.rem(f, dv)});
  };
  // What the norm sums: o (plus the skip d[h] x), times act(z) when the
  // gate comes first.
  auto normalized = [&](Value j, Value f) {
    Value x = staged(outputs, j, f);
    if (skipInputs) {
      Value head =
          e.add(e.toIndex(e.loadInt(rowIndices, {j, e.index(headIndex)})),
                e.div(f, e.index(Dv)));
      x = e.fma(e.load(skipScale, {head}), staged(skipInputs, j, f), x);
    }
    if (shape.normBeforeGate)
      return x;
    return e.activationGate(x, shape.activation, staged(gates, j, f));
  };
  Value groups = e.index(groupsPerRow);
  // A group's sums in a row of an odd stride: a thread per group reads its
  // row, and a warp's rows fall on different banks.
  Value partialSums =
      e.shared({rowsPerBlock * groupsPerRow, kSumsPerGroup + 1});
  e.forAll(e.mul(e.mul(rows, groups), e.index(kSumsPerGroup)), [&](Value x) {
    Value group = e.div(x, e.index(kSumsPerGroup));
    Value part = e.rem(x, e.index(kSumsPerGroup));
    Value j = e.div(group, groups);
    Value first = e.mul(e.rem(group, groups), e.index(G));
    Value squares =
        e.loop(part, e.index(G), e.index(kSumsPerGroup), {e.scalar(0.0)},
               [&](Value f, ValueRange sum) -> SmallVector<Value> {
                 Value o = normalized(j, e.add(first, f));
                 return {e.fma(o, o, sum[0])};
               })[0];
    e.store(squares, partialSums, {group, part});
  });
  Value inverses = e.shared({rowsPerBlock * groupsPerRow});
  e.forAll(e.mul(rows, groups), [&](Value group) {
    Value squares = e.scalar(0.0);
    for (int64_t part = 0; part < kSumsPerGroup; ++part)
      squares = e.fadd(squares, e.load(partialSums, {group, e.index(part)}));
    Value meanSquare = e.fmul(squares, e.scalar(1.0 / static_cast<double>(G)));
    e.store(e.fdiv(e.scalar(1.0),
                   math::SqrtOp::create(
                       b, e.fadd(meanSquare, e.scalar(shape.epsilon)))),
            inverses, {group});
  });
  Value rowFeatures = e.index(shape.rowFeatures());
  e.forAll(e.mul(rows, rowFeatures), [&](Value x) {
    Value j = e.div(x, rowFeatures), f = e.rem(x, rowFeatures);
    Value s = e.div(f, e.index(Dv)), d = e.rem(f, e.index(Dv));
    SmallVector<Value> at = vectorAt(j, s);
    Value group = e.add(e.mul(j, groups), e.div(f, e.index(G)));
    Value w;
    if (weights) {
      w = e.load(weights, {e.index(0), d});
    } else {
      w = e.load(weight, {e.add(e.mul(at[headIndex], e.index(Dv)), d)});
    }
    Value o = e.fmul(e.fmul(normalized(j, f), e.load(inverses, {group})), w);
    if (shape.normBeforeGate)
      o = e.activationGate(o, shape.activation, staged(gates, j, f));
    at.push_back(d);
    e.store(o, result, at);
  });
  func::ReturnOp::create(b);
  return func;
}
