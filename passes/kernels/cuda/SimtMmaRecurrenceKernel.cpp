//===- SimtMmaRecurrenceKernel.cpp - Linear recurrences on tensor cores ---===//
//
// The chunked linear recurrence (SPEC §2) with the chunk's matrix products
// on attn_kernel.warp_mma: tensor cores (mma.sync) for f16 / bf16 storage,
// the same products as loops for f32. The algebra is the SIMT kernel's
// (SimtRecurrenceKernels.cpp) and fla's chunk_gated_delta_rule; what
// changes is that every product over the chunk's steps or the key features
// is a warp's 16-row matrix product.
//
// One block per (sequence, value head, tile of `columns` state columns),
// W = columns / 16 warps. The block's tile of the state is kept transposed,
// S^T [columns, Dk] in f32, as mma accumulator fragments in the warps'
// registers (warp w holds state columns 16 w .. 16 w + 15) from S_init to
// the final state, and as a copy in shared memory for the products that
// read it. Per chunk of C steps, with G the cumulative log-decay inside the
// chunk, q^ = scale q / |q| and k^ = k / |k| (or scale q and k without
// qk_l2norm):
//
//   1. stage:   the chunk's q and k rows as stored (zero rows past its steps
//               and zero features past Dk), the row scales, G and beta;
//   2. project: A = beta_t k^_t . k^_s exp(G_t - G_s) for s < t    [K K^T]
//               R = beta_t (v_t - exp(G_t) k^_t S)                  [K S]
//               O = exp(G_t) q^_t S                                 [Q S]
//   3. solve:   (I + A) V' = R by forward substitution, a thread per state
//               column (the delta rules; V' = V for the others);
//   4. operands: V', and U^T = (exp(G_last - G_s) V'_s / |k_s|)^T;
//   5. score:   P = q^_t . k^_s exp(G_t - G_s) for s <= t  [Q K^T], in the
//               warps' registers;
//   6. finish:  O += P V', stored; S^T = exp(G_last) S^T + U^T K    [U^T K]
//
// The products read q and k as stored and scale their results:
// (q / |q|) . (k / |k|) = (q . k) / (|q| |k|), so that bf16 rows are exact
// tensor-core operands. Operands computed in f32 (the state, P, V', U^T)
// would lose up to 2^-9 of their value rounded to bf16: they go into the
// products as two bf16 parts, hi = bf16(x) and lo = bf16(x - hi), and a
// product of two such operands is hi hi + hi lo + lo hi (lo lo is below
// f32's rounding), which keeps about 16 bits: enough for SPEC's 1e-4 on
// the f32 state over hundreds of chunks, which one rounded product (fla's
// bf16 kernels) would not keep. f16 rows are two exact bf16 parts; f32
// storage computes in f32, one part each.
//
// Decays appear only as exp(G_t - G_s) with t >= s or exp(G_t) with
// G_t <= 0, so nothing overflows (the masked entries select 0 whatever
// their exponent). A call whose sequences are a step each (decode) takes
// the SIMT kernel, which carries a column per thread without products of
// 16 padded rows (GpuDispatches.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <optional>

using namespace mlir;
using namespace mlir::attn;

namespace {

/// An operand of the products: its parts, hi first (see the file comment).
using Parts = SmallVector<Value, 2>;

/// One of the lane's elements of an accumulator fragment: its row and
/// column in the product, its place in the lane's register buffer, and
/// whether the lane's warp stores it (null: always).
struct FragmentElement {
  Value row, column;
  SmallVector<Value, 2> at;
  Value owned;
};

class SimtMmaRecurrenceKernel {
public:
  SimtMmaRecurrenceKernel(OpBuilder &builder, Location loc, StringRef name,
                          const LinearRecurrenceShape &shape,
                          const SimtMmaRecurrenceTiling &mma,
                          const GpuTiling &tiling, TypeRange bindingTypes);

  /// Emits the phases in order and returns the kernel.
  func::FuncOp build();

private:
  // The phases, in the order build() emits them (the file comment's steps).
  void mapBlock();
  void allocateBuffers();
  void loadInitialState();
  void stageChunk(Value first, Value n);
  void projectChunk(Value first, Value n);
  void solveDeltaValues(Value n);
  void prepareValueOperands(Value first, Value n, Value last);
  void scoreChunk();
  void finishChunk(Value first, Value n, Value last);
  void storeFinalState();

  /// Runs `body(warp, lane, thread)` on every thread of the block.
  void eachWarp(function_ref<void(Value warp, Value lane, Value thread)> body,
                SimtEmitter::Sync sync = SimtEmitter::Sync::Block);
  /// The first row of warp `warp`'s row tiles in the products over the
  /// chunk's steps: tile min(w T, C / 16 - T) of T per warp, so that
  /// every warp has whole tiles of the chunk when there are fewer tiles
  /// than warps (it then repeats another warp's, which stores them).
  Value chunkRow(Value warp);
  /// Runs `body` for each of the lane's elements of an accumulator
  /// fragment of `tiles` row tiles from `firstRow` and `n` columns. With
  /// `warp`, an element is owned by the warp whose own tiles hold its row
  /// (chunkRow); without, always.
  void eachFragmentElement(Value firstRow, Value lane, int64_t tiles,
                           int64_t n, Value warp,
                           function_ref<void(const FragmentElement &)> body);
  /// acc (+)= lhs rhs over the parts, smaller terms first: lo hi, hi lo,
  /// hi hi. The accumulator is the lane's fragment; `lhsFragments`: lhs
  /// parts are the warp's fragments (register buffers).
  void multiply(ArrayRef<Value> lhs, ArrayRef<Value> rhs, Value acc, Value row,
                Value lane, int64_t n, int64_t k, bool rhsTransposed,
                bool accumulate, int64_t rowTiles, bool lhsFragments = false);
  /// Stores `x` into `parts` at `at`: hi = x rounded to the parts' type,
  /// then lo = x - hi when there are two.
  void storeParts(Value x, ArrayRef<Value> parts, ValueRange at);
  /// The buffers of `count` parts of shape `shape` in shared memory.
  Parts sharedParts(int64_t count, ArrayRef<int64_t> shape);

  /// exp(G_t - G_s) (1 without decay).
  Value decayBetween(Value t, Value s);
  /// exp(G_t) (1 without decay).
  Value decayTo(Value t);
  /// Whether state column `c` of the tile exists (is below Dv).
  Value isColumn(Value c) { return lt(columnOf(c), e.index(Dv)); }
  Value columnOf(Value c) { return e.add(col0, c); }
  Value lt(Value x, Value y) {
    return e.icmp(arith::CmpIPredicate::ult, x, y);
  }
  Value both(Value x, Value y) { return e.andI(x, y); }
  void ifOwned(Value owned, function_ref<void()> body) {
    if (owned)
      e.ifThen(owned, body);
    else
      body();
  }
  /// Step `t`'s element `f` of a per-step tensor at `head`.
  SmallVector<Value> stepAt(Value head, Value t, Value f) {
    SmallVector<Value> at = seq->step(head, t);
    at.push_back(f);
    return at;
  }
  /// The state index of key feature i of state column `column`.
  SmallVector<Value> stateAt(Value i, Value column) {
    SmallVector<Value> at = seq->state(hv);
    at.append({i, column});
    return at;
  }

  const LinearRecurrenceShape &shape;
  const SimtMmaRecurrenceTiling &mma;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  SimtEmitter e;
  RecurrenceBindings args;
  const int64_t C, Dk, Dv, Dkp, columns, tilesPerWarp;
  const bool scalarDecay, delta;

  Value c0, c1, c16, hv, hk, col0;
  std::optional<RecurrenceSequence> seq;
  // Shared: the chunk's rows and per-step scalars, A and the values (f32),
  // the products' operands.
  Parts queries, keys, stateCopy, valueOperand, updateOperand;
  Value queryScale, keyScale, logDecay, betas, transform, values;
  // Registers: the state's tile (S^T), the outputs, a product over the
  // chunk's steps (the Gram matrix, then the scores' hi part) and the
  // scores' lo part.
  Value stateRegs, outRegs, pairRegs, scoreLoRegs;
};

SimtMmaRecurrenceKernel::SimtMmaRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const SimtMmaRecurrenceTiling &mma,
    const GpuTiling &tiling, TypeRange bindingTypes)
    : shape(shape), mma(mma), guard(builder),
      func([&] {
        GpuTiling kernelTiling = tiling;
        kernelTiling.blockThreads = mma.threads();
        func::FuncOp func = createSimtKernel(builder, loc, name, bindingTypes,
                                             kernelTiling, "chunked_mma");
        func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
        return func;
      }()),
      b(loc, builder), e(b, mma.threads()), args(func, shape),
      C(shape.chunkSize), Dk(shape.keyDim), Dv(shape.valueDim),
      Dkp(mma.paddedKeyDim), columns(mma.columns), tilesPerWarp(mma.rowTiles),
      scalarDecay(shape.scalarDecay()), delta(shape.isDelta()) {}

func::FuncOp SimtMmaRecurrenceKernel::build() {
  mapBlock();
  allocateBuffers();
  loadInitialState();
  Value length = seq->length;
  Value chunks = e.ceilDiv(length, e.index(C));
  e.loop(c0, chunks, c1, [&](Value chunk) {
    Value first = e.mul(chunk, e.index(C));
    Value n = e.minS(e.index(C), e.sub(length, first));
    Value last = e.sub(n, c1);
    stageChunk(first, n);
    projectChunk(first, n);
    if (delta)
      solveDeltaValues(n);
    prepareValueOperands(first, n, last);
    scoreChunk();
    finishChunk(first, n, last);
  });
  storeFinalState();
  func::ReturnOp::create(b);
  return func;
}

void SimtMmaRecurrenceKernel::mapBlock() {
  // Block order (batch, value head, column tile), the tile fastest.
  c0 = e.index(0), c1 = e.index(1), c16 = e.index(WarpMmaOp::kRows);
  const int64_t tiles = (Dv + columns - 1) / columns;
  Value rest = args.workgroup;
  col0 = e.mul(e.rem(rest, e.index(tiles)), e.index(columns));
  rest = e.div(rest, e.index(tiles));
  hv = e.rem(rest, e.index(shape.numValueHeads));
  Value batch = e.div(rest, e.index(shape.numValueHeads));
  hk = e.div(hv, e.index(shape.numValueHeads / shape.numKeyHeads));
  seq.emplace(e, shape, args, batch);
}

Parts SimtMmaRecurrenceKernel::sharedParts(int64_t count,
                                           ArrayRef<int64_t> shape) {
  Parts parts;
  for (int64_t i = 0; i < count; ++i)
    parts.push_back(e.shared(shape, mma.product));
  return parts;
}

void SimtMmaRecurrenceKernel::allocateBuffers() {
  // In the order SimtMmaRecurrenceTiling::sharedBytes counts them.
  const int64_t pad = mma.rowPadding();
  queries = sharedParts(mma.rawParts, {C, Dkp + pad});
  keys = sharedParts(mma.rawParts, {C, Dkp + pad});
  stateCopy = sharedParts(mma.computedParts, {columns, Dkp + pad});
  valueOperand = sharedParts(delta ? mma.computedParts : mma.rawParts,
                             {C, columns + pad});
  updateOperand = sharedParts(mma.computedParts, {columns, C + pad});
  queryScale = e.shared({C});
  keyScale = e.shared({C});
  logDecay = scalarDecay ? e.shared({C}) : Value();
  if (delta) {
    betas = e.shared({C});
    // Rows padded by one float: a thread per column walks down them.
    transform = e.shared({C, C + 1});
    values = e.shared({C, columns + 1});
  }
  const int64_t chunkBlocks = tilesPerWarp * C / WarpMmaOp::kFragmentColumns;
  stateRegs = e.registers({Dkp / WarpMmaOp::kFragmentColumns, 4});
  outRegs =
      e.registers({tilesPerWarp * columns / WarpMmaOp::kFragmentColumns, 4});
  pairRegs = e.registers({chunkBlocks, 4});
  scoreLoRegs = mma.computedParts == 2 ? e.registers({chunkBlocks, 4}) : Value();
}

void SimtMmaRecurrenceKernel::eachWarp(
    function_ref<void(Value warp, Value lane, Value thread)> body,
    SimtEmitter::Sync sync) {
  Value c32 = e.index(WarpMmaOp::kWarpLanes);
  e.eachThread(
      [&](Value thread) {
        body(e.div(thread, c32), e.rem(thread, c32), thread);
      },
      sync);
}

Value SimtMmaRecurrenceKernel::chunkRow(Value warp) {
  Value tile = e.minS(e.mul(warp, e.index(tilesPerWarp)),
                      e.index(C / WarpMmaOp::kRows - tilesPerWarp));
  return e.mul(tile, c16);
}

void SimtMmaRecurrenceKernel::eachFragmentElement(
    Value firstRow, Value lane, int64_t tiles, int64_t n, Value warp,
    function_ref<void(const FragmentElement &)> body) {
  const int64_t blocks = n / WarpMmaOp::kFragmentColumns;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    Value tileRow = e.add(firstRow, e.index(tile * WarpMmaOp::kRows));
    Value owned;
    if (warp)
      owned = e.icmp(arith::CmpIPredicate::eq,
                     e.div(e.div(tileRow, c16), e.index(tilesPerWarp)), warp);
    MmaFragmentLayout layout(e, tileRow, lane);
    for (int64_t block = 0; block < blocks; ++block)
      for (int64_t half = 0; half < 2; ++half)
        for (int64_t el = 0; el < 2; ++el)
          body({layout.accRow(e, half),
                layout.accColumn(e, e.index(block), el),
                {e.index(tile * blocks + block), e.index(2 * half + el)},
                owned});
  }
}

void SimtMmaRecurrenceKernel::multiply(ArrayRef<Value> lhs,
                                       ArrayRef<Value> rhs, Value acc,
                                       Value row, Value lane, int64_t n,
                                       int64_t k, bool rhsTransposed,
                                       bool accumulate, int64_t rowTiles,
                                       bool lhsFragments) {
  for (auto [i, j] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{0, 0}}) {
    if (i >= static_cast<int>(lhs.size()) || j >= static_cast<int>(rhs.size()))
      continue;
    auto op = WarpMmaOp::create(b, lhs[i], rhs[j], acc, row, lane, n, k);
    op.setRhsTransposed(rhsTransposed);
    op.setAccFragment(true);
    op.setLhsFragment(lhsFragments);
    op.setRowTiles(rowTiles);
    op.setAccumulate(accumulate);
    accumulate = true;
  }
}

void SimtMmaRecurrenceKernel::storeParts(Value x, ArrayRef<Value> parts,
                                         ValueRange at) {
  e.store(x, parts[0], at);
  if (parts.size() == 2)
    e.store(e.fsub(x, e.widen(e.narrow(x, mma.product))), parts[1], at);
}

Value SimtMmaRecurrenceKernel::decayBetween(Value t, Value s) {
  if (!scalarDecay)
    return e.scalar(1.0);
  return e.exp(e.fsub(e.load(logDecay, {t}), e.load(logDecay, {s})));
}

Value SimtMmaRecurrenceKernel::decayTo(Value t) {
  return scalarDecay ? e.exp(e.load(logDecay, {t})) : e.scalar(1.0);
}

void SimtMmaRecurrenceKernel::loadInitialState() {
  // Lane element (row c, column i) of warp w's fragment is S_init[i, c] of
  // state column c = 16 w + ...; zeros past Dk and Dv.
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value state = e.registersOf(stateRegs, thread);
    eachFragmentElement(
        e.mul(warp, c16), lane, 1, Dkp, Value(),
        [&](const FragmentElement &x) {
          Value exists = both(isColumn(x.row), lt(x.column, e.index(Dk)));
          Value s = e.loadOrZero(exists, args.initialState,
                                 stateAt(x.column, columnOf(x.row)));
          e.store(s, state, x.at);
          storeParts(s, stateCopy, {x.row, x.column});
        });
  });
}

void SimtMmaRecurrenceKernel::stageChunk(Value first, Value n) {
  // 1. q and k rows as stored (feature fastest: coalesced reads).
  Value dkp = e.index(Dkp);
  e.forAll(e.index(C * Dkp), [&](Value x) {
    Value t = e.div(x, dkp), i = e.rem(x, dkp);
    Value exists = both(lt(t, n), lt(i, e.index(Dk)));
    SmallVector<Value> at = stepAt(hk, e.add(first, t), i);
    storeParts(e.loadOrZero(exists, args.q, at), queries, {t, i});
    storeParts(e.loadOrZero(exists, args.k, at), keys, {t, i});
  });
  // Per step: the rows' scales (0 past the chunk's steps, so those rows add
  // nothing), G (past the steps, G of the last) and beta.
  auto rowScale = [&](ArrayRef<Value> rows, Value t, double factor) {
    if (!shape.normalizeQueryKey)
      return e.scalar(factor);
    Value squares = e.sumOver(c0, e.index(Dk), [&](Value i) {
      Value x = e.load(rows[0], {t, i});
      if (rows.size() == 2)
        x = e.fadd(x, e.load(rows[1], {t, i}));
      return e.fmul(x, x);
    });
    return e.fdiv(e.scalar(factor),
                  math::SqrtOp::create(b, e.fadd(squares, e.scalar(1e-6))));
  };
  e.forAll(e.index(C), [&](Value t) {
    Value exists = lt(t, n), zero = e.scalar(0.0);
    e.store(e.select(exists, rowScale(queries, t, shape.scale), zero),
            queryScale, {t});
    e.store(e.select(exists, rowScale(keys, t, 1.0), zero), keyScale, {t});
    if (scalarDecay)
      e.store(e.sumOver(c0, e.minS(e.add(t, c1), n),
                        [&](Value s) {
                          return e.load(args.g,
                                        seq->step(hv, e.add(first, s)));
                        }),
              logDecay, {t});
    if (delta)
      e.store(e.loadOrZero(exists, args.beta, seq->step(hv, e.add(first, t))),
              betas, {t});
  });
}

void SimtMmaRecurrenceKernel::projectChunk(Value first, Value n) {
  // 2. A and R (the delta rules) and the outputs from the state so far.
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value row = chunkRow(warp);
    auto load = [&](Value buffer, Value t) { return e.load(buffer, {t}); };
    if (delta) {
      Value gram = e.registersOf(pairRegs, thread);
      multiply(keys, keys, gram, row, lane, /*n=*/C, /*k=*/Dkp,
               /*rhsTransposed=*/true, /*accumulate=*/false, tilesPerWarp);
      eachFragmentElement(
          row, lane, tilesPerWarp, C, warp, [&](const FragmentElement &x) {
            Value t = x.row, s = x.column;
            Value a = e.fmul(
                e.fmul(e.load(gram, x.at), load(betas, t)),
                e.fmul(e.fmul(load(keyScale, t), load(keyScale, s)),
                       decayBetween(t, s)));
            ifOwned(x.owned, [&] {
              e.store(e.select(lt(s, t), a, e.scalar(0.0)), transform,
                      {t, s});
            });
          });
      Value projected = e.registersOf(outRegs, thread);
      multiply(keys, stateCopy, projected, row, lane, /*n=*/columns,
               /*k=*/Dkp, /*rhsTransposed=*/true, /*accumulate=*/false,
               tilesPerWarp);
      eachFragmentElement(
          row, lane, tilesPerWarp, columns, warp,
          [&](const FragmentElement &x) {
            Value t = x.row, c = x.column;
            Value v = e.loadOrZero(both(lt(t, n), isColumn(c)), args.v,
                                   stepAt(hv, e.add(first, t), columnOf(c)));
            Value ks = e.fmul(e.fmul(e.load(projected, x.at), decayTo(t)),
                              load(keyScale, t));
            ifOwned(x.owned, [&] {
              e.store(e.fmul(load(betas, t), e.fsub(v, ks)), values, {t, c});
            });
          });
    }
    // O = exp(G_t) q^_t S into the output fragments (after R: they held
    // K S).
    Value out = e.registersOf(outRegs, thread);
    multiply(queries, stateCopy, out, row, lane, /*n=*/columns, /*k=*/Dkp,
             /*rhsTransposed=*/true, /*accumulate=*/false, tilesPerWarp);
    eachFragmentElement(row, lane, tilesPerWarp, columns, Value(),
                        [&](const FragmentElement &x) {
                          Value factor =
                              e.fmul(decayTo(x.row), load(queryScale, x.row));
                          e.store(e.fmul(e.load(out, x.at), factor), out,
                                  x.at);
                        });
  });
}

void SimtMmaRecurrenceKernel::solveDeltaValues(Value n) {
  // 3. (I + A) V' = R by forward substitution: the UT transform applied to
  //    one column per thread, in place.
  e.eachThread([&](Value thread) {
    e.ifThen(lt(thread, e.index(columns)), [&] {
      e.loop(c1, n, c1, [&](Value t) {
        Value known = e.sumOver(c0, t, [&](Value s) {
          return e.fmul(e.load(transform, {t, s}),
                        e.load(values, {s, thread}));
        });
        e.store(e.fsub(e.load(values, {t, thread}), known), values,
                {t, thread});
      });
    });
  });
}

void SimtMmaRecurrenceKernel::prepareValueOperands(Value first, Value n,
                                                   Value last) {
  // 4. V' [C, columns] and U^T [columns, C], U_s = exp(G_last - G_s) V'_s /
  //    |k_s| (the chunk's contribution to the state is U^T K, k as stored).
  Value width = e.index(columns);
  e.forAll(e.index(C * columns), [&](Value x) {
    Value t = e.div(x, width), c = e.rem(x, width);
    Value v = delta ? e.load(values, {t, c})
                    : e.loadOrZero(both(lt(t, n), isColumn(c)), args.v,
                                   stepAt(hv, e.add(first, t), columnOf(c)));
    storeParts(v, valueOperand, {t, c});
    Value u = e.fmul(v, e.fmul(decayBetween(last, t), e.load(keyScale, {t})));
    storeParts(u, updateOperand, {c, t});
  });
}

void SimtMmaRecurrenceKernel::scoreChunk() {
  // 5. P = q^_t . k^_s exp(G_t - G_s) for s <= t in the warp's registers,
  //    as parts (the hi part in place of q k^T), which only the warp reads.
  eachWarp(
      [&](Value warp, Value lane, Value thread) {
        Value row = chunkRow(warp);
        Value scores = e.registersOf(pairRegs, thread);
        Value scoresLo =
            scoreLoRegs ? e.registersOf(scoreLoRegs, thread) : Value();
        multiply(queries, keys, scores, row, lane, /*n=*/C, /*k=*/Dkp,
                 /*rhsTransposed=*/true, /*accumulate=*/false, tilesPerWarp);
        eachFragmentElement(
            row, lane, tilesPerWarp, C, Value(),
            [&](const FragmentElement &x) {
              Value t = x.row, s = x.column;
              Value p = e.fmul(
                  e.fmul(e.load(scores, x.at), e.load(queryScale, {t})),
                  e.fmul(e.load(keyScale, {s}), decayBetween(t, s)));
              p = e.select(e.icmp(arith::CmpIPredicate::ule, s, t), p,
                           e.scalar(0.0));
              if (!scoresLo) {
                e.store(p, scores, x.at);
                return;
              }
              // Both parts rounded here as the tensor cores would round
              // them, so that the CPU's loops compute what they do.
              Value hi = e.widen(e.narrow(p, mma.product));
              e.store(hi, scores, x.at);
              e.store(e.widen(e.narrow(e.fsub(p, hi), mma.product)),
                      scoresLo, x.at);
            });
      },
      SimtEmitter::Sync::Warp);
}

void SimtMmaRecurrenceKernel::finishChunk(Value first, Value n, Value last) {
  // 6. O += P V', stored; the state's tile S^T = exp(G_last) S^T + U^T K,
  //    and its shared copy for the next chunk's products.
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value row = chunkRow(warp);
    Value out = e.registersOf(outRegs, thread);
    Parts scores{e.registersOfWarp(pairRegs, thread)};
    if (scoreLoRegs)
      scores.push_back(e.registersOfWarp(scoreLoRegs, thread));
    multiply(scores, valueOperand, out, row, lane, /*n=*/columns, /*k=*/C,
             /*rhsTransposed=*/false, /*accumulate=*/true, tilesPerWarp,
             /*lhsFragments=*/true);
    eachFragmentElement(
        row, lane, tilesPerWarp, columns, warp, [&](const FragmentElement &x) {
          Value t = x.row, c = x.column;
          ifOwned(x.owned, [&] {
            e.ifThen(both(lt(t, n), isColumn(c)), [&] {
              e.store(e.load(out, x.at), args.out,
                      stepAt(hv, e.add(first, t), columnOf(c)));
            });
          });
        });

    Value state = e.registersOf(stateRegs, thread);
    Value stateRow = e.mul(warp, c16);
    if (scalarDecay) {
      Value decay = decayTo(last);
      eachFragmentElement(stateRow, lane, 1, Dkp, Value(),
                          [&](const FragmentElement &x) {
                            e.store(e.fmul(e.load(state, x.at), decay), state,
                                    x.at);
                          });
    }
    multiply(updateOperand, keys, state, stateRow, lane, /*n=*/Dkp, /*k=*/C,
             /*rhsTransposed=*/false, /*accumulate=*/true, /*rowTiles=*/1);
    eachFragmentElement(stateRow, lane, 1, Dkp, Value(),
                        [&](const FragmentElement &x) {
                          storeParts(e.load(state, x.at), stateCopy,
                                     {x.row, x.column});
                        });
  });
}

void SimtMmaRecurrenceKernel::storeFinalState() {
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value state = e.registersOf(stateRegs, thread);
    eachFragmentElement(
        e.mul(warp, c16), lane, 1, Dkp, Value(),
        [&](const FragmentElement &x) {
          e.ifThen(both(isColumn(x.row), lt(x.column, e.index(Dk))), [&] {
            e.store(e.load(state, x.at), args.finalState,
                    stateAt(x.column, columnOf(x.row)));
          });
        });
  });
}

} // namespace

int64_t SimtMmaRecurrenceTiling::rowPadding() const {
  return 16 / (product.getIntOrFloatBitWidth() / 8);
}

int64_t SimtMmaRecurrenceTiling::sharedBytes(
    const LinearRecurrenceShape &shape) const {
  // The buffers SimtMmaRecurrenceKernel::allocateBuffers allocates, in its
  // order, each rounded to 16 bytes.
  const int64_t C = shape.chunkSize, pad = rowPadding();
  const int64_t elementBytes = product.getIntOrFloatBitWidth() / 8;
  const bool delta = shape.isDelta();
  auto buffer = [](int64_t elements, int64_t bytes) {
    return roundUp(elements * bytes, 16);
  };
  int64_t total = 2 * rawParts * buffer(C * (paddedKeyDim + pad), elementBytes);
  total += computedParts * buffer(columns * (paddedKeyDim + pad), elementBytes);
  total += (delta ? computedParts : rawParts) *
           buffer(C * (columns + pad), elementBytes);
  total += computedParts * buffer(columns * (C + pad), elementBytes);
  total += 2 * buffer(C, 4);
  if (shape.scalarDecay())
    total += buffer(C, 4);
  if (delta)
    total += buffer(C, 4) + buffer(C * (C + 1), 4) +
             buffer(C * (columns + 1), 4);
  return total;
}

std::optional<SimtMmaRecurrenceTiling>
SimtMmaRecurrenceTiling::choose(const LinearRecurrenceShape &shape,
                                Type storage, const GpuTiling &tiling) {
  const int64_t rows = WarpMmaOp::kRows;
  if (shape.tree || shape.featureDecay() || shape.chunkSize % rows != 0)
    return std::nullopt;
  SimtMmaRecurrenceTiling mma;
  mma.paddedKeyDim = roundUp(shape.keyDim, WarpMmaOp::kReductionStep);
  const bool f32 = storage.isF32();
  mma.product = f32 ? storage : BFloat16Type::get(storage.getContext());
  mma.rawParts = storage.isF16() ? 2 : 1;
  mma.computedParts = f32 ? 1 : 2;
  // Widest first, from the narrowest power of 2 that holds Dv (at least a
  // warp's 16, at most 64: 4 warps). Wider tiles share the chunk's q k^T
  // and k k^T among more warps, fewer rows each, and so keep fewer
  // registers: at Dk = Dv = 128, C = 64 in bf16, 64 columns take 141 KiB
  // of shared memory (one block per SM, 4 warps) and 32 columns 98 KiB (two
  // blocks of 2 warps), whose warps hold twice the scores' rows and spill
  // (255 registers, ptxas for sm_90a).
  const int64_t widest =
      std::clamp<int64_t>(llvm::PowerOf2Ceil(shape.valueDim), rows, 64);
  for (int64_t columns = widest; columns >= rows; columns /= 2) {
    mma.columns = columns;
    mma.warps = columns / rows;
    mma.rowTiles = llvm::divideCeil(shape.chunkSize / rows, mma.warps);
    if (mma.sharedBytes(shape) <= tiling.maxSharedBytes)
      return mma;
  }
  return std::nullopt;
}

func::FuncOp mlir::attn::buildSimtMmaRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const SimtMmaRecurrenceTiling &mma,
    const GpuTiling &tiling, TypeRange bindingTypes) {
  return SimtMmaRecurrenceKernel(builder, loc, name, shape, mma, tiling,
                                 bindingTypes)
      .build();
}
