//===- LinearRecurrenceKernels.cpp - CPU kernels of linear recurrences ----===//
//
// Two workgroup bodies, both one workgroup per (batch, value head) with the
// state S [Dk, Dv] kept in the workgroup:
//
//  * chunked (prefill): per chunk of C steps, with G the cumulative sum of
//    the log-decays inside the chunk (SPEC §2 and fla's chunk_gated_delta;
//    for a decay per key feature, gla and kda, G is a vector per step and
//    each product below is taken feature by feature):
//      - delta rules, the UT transform: A[t, s] = beta_t (k_t . k_s)
//        exp(G_t - G_s) for s < t, T = (I + A)^-1 by forward substitution,
//        W = T diag(beta) (exp(G) * K), U = T diag(beta) V, and the new
//        values V' = U - W S (other rules: V' = V);
//      - P[t, s] = scale (q_t . k_s) exp(G_t - G_s) for s <= t;
//      - O = (scale * exp(G) * Q) S + P V';
//      - S = exp(G_last) S + (exp(G_last - G) * K)^T V'.
//    Every product is a register-blocked vector micro-kernel over scratch
//    tiles; triangular operands bound the loops, so the masked halves cost
//    nothing. Decays only ever appear as exp(G_i - G_j) with i >= j (or
//    exp(G_i) with G_i <= 0), so long chunks cannot overflow.
//  * recurrent step (decode): per step, one pass over S computes S^T k and
//    S^T q, a second updates S in place; columns of S are taken in blocks so
//    that a block stays in L1 between the two passes.
//
// Both read q/k through the optional L2 normalization and apply the
// rmsnorm-silu output gate to each output row before storing it.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cpu/CpuKernels.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

/// The (batch, value head, key head) of a workgroup, and with `tiles`
/// column tiles per head, its tile (the fastest index).
struct Heads {
  Value batch, valueHead, keyHead, tile;

  Heads(KernelEmitter &e, const LinearRecurrenceShape &shape, Value wg,
        int64_t tiles = 1) {
    if (tiles > 1) {
      tile = e.rem(wg, e.index(tiles));
      wg = e.div(wg, e.index(tiles));
    }
    Value hv = e.index(shape.numValueHeads);
    valueHead = e.rem(wg, hv);
    batch = e.div(wg, hv);
    keyHead =
        e.div(valueHead, e.index(shape.numValueHeads / shape.numKeyHeads));
  }
};

/// Copies `dim` features from `src[prefix..., :]` to `dst[dstPrefix..., :]`
/// (whole vectors, zero past `dim`), divided by their L2 norm when
/// `normalize` (x / sqrt(sum(x^2) + 1e-6), SPEC §2) and times `factor`.
void copyFeatureRow(KernelEmitter &e, Value src, ValueRange prefix, int64_t dim,
                    bool normalize, double factor, Value dst,
                    ValueRange dstPrefix) {
  SmallVector<Value> vectors;
  for (int64_t off = 0; off < dim; off += e.width) {
    SmallVector<Value> indices(prefix);
    indices.push_back(e.index(off));
    vectors.push_back(e.loadVector(src, indices, std::min(e.width, dim - off)));
  }
  Value multiplier = e.splat(factor);
  if (normalize) {
    Value squares = e.splat(0.0);
    for (Value x : vectors)
      squares = e.fma(x, x, squares);
    Value norm =
        math::SqrtOp::create(e.b, e.fadd(e.sumLanes(squares), e.scalar(1e-6)));
    multiplier = e.broadcast(e.fdiv(e.scalar(factor), norm));
  }
  for (auto [i, x] : llvm::enumerate(vectors)) {
    SmallVector<Value> indices(dstPrefix);
    indices.push_back(e.index(static_cast<int64_t>(i) * e.width));
    Value scaled = factor == 1.0 && !normalize ? x : e.fmul(x, multiplier);
    vector::StoreOp::create(e.b, scaled, dst, indices);
  }
}

/// Writes zeros to `dst[prefix..., 0 .. padded)`.
void zeroRow(KernelEmitter &e, Value dst, ValueRange prefix, int64_t padded) {
  for (int64_t off = 0; off < padded; off += e.width) {
    SmallVector<Value> indices(prefix);
    indices.push_back(e.index(off));
    vector::StoreOp::create(e.b, e.splat(0.0), dst, indices);
  }
}

/// Stores one output row (`row[rowPrefix..., :]`, Dv features zero-padded
/// to whole vectors) to `out[outPrefix..., :]`, through the rmsnorm gate
/// `(o / sqrt(mean(o^2) + eps)) * w * act(z)` (act: silu or sigmoid) when
/// the op has it.
void storeRecurrenceRow(KernelEmitter &e, const LinearRecurrenceShape &shape,
                        const RecurrenceBindings &args, Value row,
                        ValueRange rowPrefix, ValueRange outPrefix) {
  const int64_t dv = shape.valueDim;
  auto at = [&](ValueRange prefix, int64_t off) {
    SmallVector<Value> indices(prefix);
    indices.push_back(e.index(off));
    return indices;
  };
  SmallVector<Value> o;
  for (int64_t off = 0; off < dv; off += e.width)
    o.push_back(vector::LoadOp::create(e.b, e.vec, row, at(rowPrefix, off)));
  if (shape.rmsNormGate) {
    Value squares = e.splat(0.0);
    for (Value x : o)
      squares = e.fma(x, x, squares);
    Value meanSquare =
        e.fmul(e.sumLanes(squares), e.scalar(1.0 / static_cast<double>(dv)));
    Value inv =
        e.fdiv(e.scalar(1.0),
               math::SqrtOp::create(
                   e.b, e.fadd(meanSquare, e.scalar(shape.gateEpsilon))));
    Value invVec = e.broadcast(inv);
    for (auto [i, x] : llvm::enumerate(o)) {
      int64_t off = static_cast<int64_t>(i) * e.width;
      int64_t lanes = std::min(e.width, dv - off);
      Value z = e.loadVector(args.z, at(outPrefix, off), lanes);
      Value w = e.loadVector(args.w, {e.index(off)}, lanes);
      o[i] = e.activationGate(e.fmul(e.fmul(x, invVec), w),
                              shape.gateActivation, z);
    }
  }
  for (auto [i, x] : llvm::enumerate(o)) {
    int64_t off = static_cast<int64_t>(i) * e.width;
    e.storeVector(x, args.out, at(outPrefix, off), std::min(e.width, dv - off));
  }
}

//===----------------------------------------------------------------------===//
// Products of scratch tiles
//===----------------------------------------------------------------------===//

/// C = init + A B on row-major 2-D scratch buffers, A [M, K], B [K, N],
/// C [M, N], N a multiple of the vector width, M a multiple of 4.
struct Product {
  int64_t rows = 0, cols = 0, depth = 0;
  Value a, b, c;
  /// init = C (else 0), times `scale` (f32) or `rowScale[i]` when set.
  bool accumulate = false;
  Value scale, rowScale;
  /// A is lower triangular (A[i, k] = 0 for k > i): the depth loop stops
  /// at the diagonal.
  bool lowerA = false;
  /// Only C[i, j] with j <= i is needed: blocks above the diagonal are not
  /// computed (their contents are undefined).
  bool lowerC = false;
};

/// Register blocks of 4 rows x 4 vectors on AVX-512 (32 vector registers:
/// per depth step, 4 vector loads of B and 4 broadcasts of A feed 16 FMAs)
/// and of 4 rows x 2 vectors on AVX2 (16 registers) and for a lower C,
/// whose wider blocks would cross its diagonal further.
void emitProduct(KernelEmitter &e, const Product &p) {
  const int64_t W = e.width;
  const int64_t blockVectors = W >= 16 && !p.lowerC ? 4 : 2;
  const int64_t blockCols = blockVectors * W;
  assert(p.cols % W == 0 && p.rows % 4 == 0 && "unpadded product");
  Value c0 = e.index(0), c1 = e.index(1), c4 = e.index(4);
  Value depth = e.index(p.depth);

  // One register block: rows i0 .. i0+3, nv vectors from column j0.
  auto block = [&](Value i0, Value j0, int64_t nv) {
    SmallVector<Value> rows, cols;
    for (int64_t ii = 0; ii < 4; ++ii)
      rows.push_back(e.add(i0, e.index(ii)));
    for (int64_t x = 0; x < nv; ++x)
      cols.push_back(e.add(j0, e.index(x * W)));
    SmallVector<Value> init;
    for (int64_t ii = 0; ii < 4; ++ii) {
      Value factor;
      if (p.scale)
        factor = e.broadcast(p.scale);
      if (p.rowScale)
        factor = e.broadcast(e.load(p.rowScale, rows[ii]));
      for (int64_t x = 0; x < nv; ++x) {
        if (!p.accumulate) {
          init.push_back(e.splat(0.0));
          continue;
        }
        Value current = vector::LoadOp::create(e.b, e.vec, p.c,
                                               ValueRange{rows[ii], cols[x]});
        init.push_back(factor ? e.fmul(current, factor) : current);
      }
    }
    Value depthEnd = p.lowerA ? e.minS(depth, e.add(i0, c4)) : depth;
    SmallVector<Value> sums =
        e.loop(c0, depthEnd, c1, init, [&](Value k, ValueRange partial) {
          SmallVector<Value> bv;
          for (int64_t x = 0; x < nv; ++x)
            bv.push_back(vector::LoadOp::create(e.b, e.vec, p.b,
                                                ValueRange{k, cols[x]}));
          SmallVector<Value> next;
          for (int64_t ii = 0; ii < 4; ++ii) {
            Value av = e.broadcast(e.load(p.a, {rows[ii], k}));
            for (int64_t x = 0; x < nv; ++x)
              next.push_back(e.fma(av, bv[x], partial[ii * nv + x]));
          }
          return next;
        });
    for (int64_t ii = 0; ii < 4; ++ii)
      for (int64_t x = 0; x < nv; ++x)
        vector::StoreOp::create(e.b, sums[ii * nv + x], p.c,
                                ValueRange{rows[ii], cols[x]});
  };

  // Row blocks outside: the 4 x K rows of A stay in L1 while the column
  // blocks sweep B. With lowerC a row block stops at its diagonal.
  int64_t wholeCols = p.cols / blockCols * blockCols;
  int64_t restVectors = (p.cols - wholeCols) / W;
  e.loop(c0, e.index(p.rows), c4, [&](Value i0) {
    Value wholeEnd = e.index(wholeCols);
    if (p.lowerC)
      wholeEnd =
          e.minS(wholeEnd, e.mul(e.ceilDiv(e.add(i0, c4), e.index(blockCols)),
                                 e.index(blockCols)));
    if (wholeCols > 0)
      e.loop(c0, wholeEnd, e.index(blockCols),
             [&](Value j0) { block(i0, j0, blockVectors); });
    if (restVectors > 0) {
      if (!p.lowerC) {
        block(i0, e.index(wholeCols), restVectors);
        return;
      }
      // The last, narrower block only where the diagonal reaches it.
      Value reaches =
          e.icmp(arith::CmpIPredicate::sgt, e.add(i0, c4), e.index(wholeCols));
      scf::IfOp::create(e.b, reaches, [&](OpBuilder &nested, Location) {
        OpBuilder::InsertionGuard guard(e.b);
        e.b.setInsertionPointToEnd(nested.getInsertionBlock());
        block(i0, e.index(wholeCols), restVectors);
        scf::YieldOp::create(e.b);
      });
    }
  });
}

/// The i32 lane positions [offset, offset + W).
Value lanePositions(KernelEmitter &e, int64_t offset) {
  auto type = VectorType::get({e.width}, e.b.getI32Type());
  return arith::AddIOp::create(
      e.b, e.laneIds(),
      arith::ConstantOp::create(
          e.b, DenseElementsAttr::get(type, static_cast<int32_t>(offset))));
}

/// Lanes [off, off + width) of row t of a tree's `ancestors` (i32 [C, C])
/// as i1: whether each column is t or an ancestor of t.
Value isAncestorLane(KernelEmitter &e, Value ancestors, Value t, int64_t off) {
  auto i32Vec = VectorType::get({e.width}, e.b.getI32Type());
  Value row = vector::LoadOp::create(e.b, i32Vec, ancestors,
                                     ValueRange{t, e.index(off)});
  return e.icmp(
      arith::CmpIPredicate::ne, row,
      arith::ConstantOp::create(
          e.b, DenseElementsAttr::get(i32Vec, static_cast<int32_t>(0))));
}

/// Keeps, in each row t of the C x C `scores`, the columns s < t (`strict`)
/// or s <= t, multiplied by exp(G_t - G_s) (scalar decay: `cumulative` [C])
/// and by `rowFactor[t]`; everything else becomes 0. With `ancestors`
/// (a tree: i32 [C, C], nonzero where s is t or an ancestor of t) only
/// those columns are kept. The exponentials of dropped entries may
/// overflow; the select discards them.
void maskChunkScores(KernelEmitter &e, Value scores, int64_t chunk,
                     Value cumulative, Value rowFactor, bool strict,
                     Value ancestors = Value()) {
  auto i32Vec = VectorType::get({e.width}, e.b.getI32Type());
  e.loop(e.index(0), e.index(chunk), e.index(1), [&](Value t) {
    Value row = vector::BroadcastOp::create(
        e.b, i32Vec, arith::IndexCastOp::create(e.b, e.b.getI32Type(), t));
    Value rowDecay = cumulative ? e.broadcast(e.load(cumulative, t)) : Value();
    Value factor = rowFactor ? e.broadcast(e.load(rowFactor, t)) : Value();
    for (int64_t off = 0; off < chunk; off += e.width) {
      Value col = e.index(off);
      Value s = vector::LoadOp::create(e.b, e.vec, scores, ValueRange{t, col});
      if (cumulative)
        s = e.fmul(s,
                   e.exp(e.fsub(rowDecay, vector::LoadOp::create(
                                              e.b, e.vec, cumulative, col))));
      if (factor)
        s = e.fmul(s, factor);
      Value keep =
          e.icmp(strict ? arith::CmpIPredicate::slt : arith::CmpIPredicate::sle,
                 lanePositions(e, off), row);
      if (ancestors)
        keep = e.andI(keep, isAncestorLane(e, ancestors, t, off));
      vector::StoreOp::create(e.b, e.select(keep, s, e.splat(0.0)), scores,
                              ValueRange{t, col});
    }
  });
}

/// T = (I + A)^-1 in place for the strictly lower triangular C x C `a`, by
/// forward substitution: T[t, :] = e_t - sum_{s<t} A[t, s] T[s, :].
void invertUnitLower(KernelEmitter &e, Value a, int64_t chunk) {
  auto i32Vec = VectorType::get({e.width}, e.b.getI32Type());
  Value c0 = e.index(0), c1 = e.index(1);
  e.loop(c0, e.index(chunk), c1, [&](Value t) {
    Value row = vector::BroadcastOp::create(
        e.b, i32Vec, arith::IndexCastOp::create(e.b, e.b.getI32Type(), t));
    SmallVector<Value> identity;
    for (int64_t off = 0; off < chunk; off += e.width)
      identity.push_back(
          e.select(e.icmp(arith::CmpIPredicate::eq, lanePositions(e, off), row),
                   e.splat(1.0), e.splat(0.0)));
    SmallVector<Value> result =
        e.loop(c0, t, c1, identity, [&](Value s, ValueRange acc) {
          Value factor =
              e.broadcast(arith::NegFOp::create(e.b, e.load(a, {t, s})));
          SmallVector<Value> next;
          for (auto [x, partial] : llvm::enumerate(acc))
            next.push_back(e.fma(
                factor,
                vector::LoadOp::create(
                    e.b, e.vec, a,
                    ValueRange{s, e.index(static_cast<int64_t>(x) * e.width)}),
                partial));
          return next;
        });
    for (auto [x, value] : llvm::enumerate(result))
      vector::StoreOp::create(
          e.b, value, a,
          ValueRange{t, e.index(static_cast<int64_t>(x) * e.width)});
  });
}

/// rows[t, :] *= factor(t) for t in [0, count), over `padded` features.
void scaleRows(KernelEmitter &e, Value rows, int64_t count, int64_t padded,
               function_ref<Value(Value t, int64_t off)> factor) {
  e.loop(e.index(0), e.index(count), e.index(1), [&](Value t) {
    for (int64_t off = 0; off < padded; off += e.width) {
      Value col = e.index(off);
      Value x = vector::LoadOp::create(e.b, e.vec, rows, ValueRange{t, col});
      vector::StoreOp::create(e.b, e.fmul(x, factor(t, off)), rows,
                              ValueRange{t, col});
    }
  });
}

} // namespace

//===----------------------------------------------------------------------===//
// Chunked kernel
//===----------------------------------------------------------------------===//

namespace {

/// The chunked kernel, built one phase at a time (see the file comment):
/// the workgroup's heads and state columns and its scratch, the initial
/// state, then per chunk its steps, the cumulative decays, K^T, for the
/// delta rules the UT transform, the scores P, the outputs and the state
/// carried to the next chunk, then the final state.
class ChunkedRecurrenceKernel {
public:
  ChunkedRecurrenceKernel(OpBuilder &builder, Location loc, StringRef name,
                          const LinearRecurrenceShape &shape,
                          const CpuTiling &tiling, int64_t columns,
                          TypeRange bindingTypes);

  /// Emits the phases in order and returns the kernel.
  func::FuncOp build();

private:
  /// The whole recurrence of the workgroup's sequence.
  void runChunks();
  // The phases, in the order runChunks() emits them.
  void allocateScratch();
  void loadInitialState();
  void loadChunk(Value first, Value steps);
  void accumulateDecays();
  void findAncestors(Value steps);
  void accumulatePathDecays(Value steps);
  void transposeKeys();
  void transformDeltaValues();
  void scoreChunk();
  void storeChunkOutputs(Value first, Value steps);
  void carryState();
  void storeFinalState();

  /// The workgroup's columns of v, o and the state: [first, first + DvP),
  /// the vector at `off` holding the real features left of Dv.
  Value column(int64_t off);
  SmallVector<Value> at(ValueRange prefix, int64_t off);
  Value loadColumns(Value src, ValueRange prefix, int64_t off);
  void storeColumns(Value x, Value dst, ValueRange prefix, int64_t off);
  /// exp(G_last - G_s) for each step s: what the decay of the rest of the
  /// chunk leaves of step s's write.
  Value decayToEnd(Value s, int64_t off);
  /// With a decay per key feature: the chunk's products of `rows` (Q for
  /// the scores, K for kda's Gram matrix) with K, each decayed feature by
  /// feature, in blocks of rows (decayedProducts).
  struct DecayedProduct {
    Value rows, dst;
    bool strict;
  };
  void scoreDecayedChunk();
  void decayedProducts(ArrayRef<DecayedProduct> products);
  void decayedPairs(Value rows, Value dst, int64_t first, int64_t count,
                    bool strict);
  /// Calls body(i, t, col) for each row i of the block of 16 steps from
  /// `first` (t = first + i, the step) and each vector col of key features.
  void eachBlockRowVector(int64_t first,
                          function_ref<void(Value i, Value t, Value col)> body);
  /// keysToBlockT[:, s] for s < columns: the keys decayed from the block
  /// at `first`; then dst's rows of that block, columns [0, columns): its
  /// rows decayed to its first step times them.
  void decayKeysToBlock(int64_t first, int64_t columns);
  void blockProduct(Value rows, Value dst, int64_t first, int64_t columns);
  void maskAboveDiagonal(Value dst, int64_t first, bool strict);
  void zeroRows(Value dst, int64_t first, int64_t count);

  const LinearRecurrenceShape &shape;
  const int64_t W, tiles;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  KernelEmitter e;
  RecurrenceBindings args;
  Heads heads;
  RecurrenceSequence seq;
  /// A ragged batch's sequences of at most this many steps are the step
  /// kernel's.
  const int64_t maxSteps;
  const int64_t C, Dk, Dv;
  /// DvP: the value columns of this workgroup (the padded Dv when whole).
  const int64_t DkP, DvP;
  Value batch, hv, hk;
  Value c0, c1, length, firstColumn;

  // Scratch tiles of one chunk, feature dims padded to whole vectors with
  // zeros: K, Q (normalized, Q scaled), V, the per-step gates, the
  // transposed keys, the C x C score tiles and the state.
  Value keys, queries, values, keysT, scores, outputs, state, cumulative;
  Value betas, transform, weights, scaledKeys, newValues, lastDecay;
  /// A decay per key feature: the rows of one block of the chunk and the
  /// keys before it, each decayed to the block's first step
  /// (decayedProducts), from the transposed keys and cumulative decays.
  Value decayFromBlock, rowsFromBlock, keysToBlockT, plainKeysT, cumulativeT;
  /// A tree: i32 [C, C], row t nonzero at t and t's ancestors.
  Value ancestors;
  /// The last row of the chunk, where G_last is.
  Value lastRow;
  /// The values the state update reads: V, or the delta rules' V'.
  Value update;
};

/// With a decay per key feature, the chunk's decayed products go in
/// blocks of this many rows, each one product (decayedProducts): chunks
/// are multiples of 16.
constexpr int64_t kDecayBlock = 16;
/// The most a block's log-decays may sum to (on any feature) for its pairs
/// to split at its first step: exp(60) ~ 1e26 leaves f32 room for keys up
/// to ~1e12, and exp(-60) is far from f32's denormals.
constexpr double kMaxBlockDecay = 60.0;

/// The steps of one chunk: the op's chunk size, or for a tree its
/// max_nodes rounded up to whole vectors and to the 16 steps the products'
/// register blocks take (nodes past the tree are zero steps).
static int64_t chunkOf(const LinearRecurrenceShape &shape, int64_t width) {
  if (!shape.tree)
    return shape.chunkSize;
  return roundUp(shape.chunkSize, std::max<int64_t>(16, width));
}

ChunkedRecurrenceKernel::ChunkedRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const CpuTiling &tiling,
    int64_t columns, TypeRange bindingTypes)
    : shape(shape), W(tiling.vectorWidth),
      tiles(shape.paddedValueDim(W) / columns), guard(builder),
      func(createKernel(builder, loc, name, bindingTypes, tiling,
                        tiles > 1 ? "chunked_columns" : "chunked")),
      b(loc, builder), e(b, W), args(func, shape),
      heads(e, shape, args.workgroup, tiles), seq(e, shape, args, heads.batch),
      maxSteps(tiling.recurrentMaxSteps), C(chunkOf(shape, W)),
      Dk(shape.keyDim), Dv(shape.valueDim), DkP(roundUp(Dk, W)), DvP(columns) {
  assert(columns % W == 0 && shape.paddedValueDim(W) % columns == 0 &&
         "a column tile is whole vectors and divides the padded Dv");
  batch = heads.batch, hv = heads.valueHead, hk = heads.keyHead;
}

func::FuncOp ChunkedRecurrenceKernel::build() {
  c0 = e.index(0), c1 = e.index(1);
  length = seq.length;
  firstColumn = tiles > 1 ? e.mul(heads.tile, e.index(DvP)) : Value();
  if (shape.ragged) {
    // In a ragged batch, the sequences of 1 .. maxSteps steps are the step
    // kernel's, and those of none keep their pool slot as it is.
    e.ifThen(e.icmp(arith::CmpIPredicate::ugt, length, e.index(maxSteps)),
             [&] { runChunks(); });
    func::ReturnOp::create(b);
    return func;
  }
  runChunks();
  func::ReturnOp::create(b);
  return func;
}

void ChunkedRecurrenceKernel::runChunks() {
  allocateScratch();
  loadInitialState();
  if (shape.tree) {
    // One chunk: the whole tree (the host checked T <= C).
    loadChunk(c0, length);
    findAncestors(length);
    accumulatePathDecays(length);
    transposeKeys();
    update = values;
    if (shape.featureDecay())
      scoreDecayedChunk();
    if (shape.isDelta())
      transformDeltaValues();
    scoreChunk();
    storeChunkOutputs(c0, length);
    return;
  }
  Value chunks = e.ceilDiv(length, e.index(C));
  e.loop(c0, chunks, c1, [&](Value chunk) {
    Value first = e.mul(chunk, e.index(C));
    Value steps = e.minS(e.index(C), e.sub(length, first));
    loadChunk(first, steps);
    accumulateDecays();
    transposeKeys();
    update = values;
    if (shape.featureDecay())
      scoreDecayedChunk();
    if (shape.isDelta())
      transformDeltaValues();
    scoreChunk();
    storeChunkOutputs(first, steps);
    carryState();
  });
  storeFinalState();
}

Value ChunkedRecurrenceKernel::column(int64_t off) {
  return firstColumn ? e.add(firstColumn, e.index(off)) : e.index(off);
}

SmallVector<Value> ChunkedRecurrenceKernel::at(ValueRange prefix, int64_t off) {
  SmallVector<Value> indices(prefix);
  indices.push_back(column(off));
  return indices;
}

Value ChunkedRecurrenceKernel::loadColumns(Value src, ValueRange prefix,
                                           int64_t off) {
  if (!firstColumn)
    return e.loadVector(src, at(prefix, off), std::min(W, Dv - off));
  return e.loadVector(src, at(prefix, off), e.sub(e.index(Dv), column(off)));
}

void ChunkedRecurrenceKernel::storeColumns(Value x, Value dst,
                                           ValueRange prefix, int64_t off) {
  if (!firstColumn)
    return e.storeVector(x, dst, at(prefix, off), std::min(W, Dv - off));
  e.storeVector(x, dst, at(prefix, off), e.sub(e.index(Dv), column(off)));
}

Value ChunkedRecurrenceKernel::decayToEnd(Value s, int64_t off) {
  if (shape.scalarDecay())
    return e.broadcast(
        e.exp(e.fsub(e.load(cumulative, lastRow), e.load(cumulative, s))));
  Value col = e.index(off);
  return e.exp(e.fsub(
      vector::LoadOp::create(b, e.vec, cumulative, ValueRange{lastRow, col}),
      vector::LoadOp::create(b, e.vec, cumulative, ValueRange{s, col})));
}

void ChunkedRecurrenceKernel::allocateScratch() {
  keys = e.scratch({C, DkP}), queries = e.scratch({C, DkP});
  values = e.scratch({C, DvP});
  keysT = e.scratch({DkP, C});
  scores = e.scratch({C, C});
  outputs = e.scratch({C, DvP});
  state = e.scratch({DkP, DvP});
  cumulative = shape.scalarDecay()    ? e.scratch({C})
               : shape.featureDecay() ? e.scratch({C, DkP})
                                      : Value();
  if (shape.isDelta()) {
    betas = e.scratch({C});
    transform = e.scratch({C, C});
    weights = e.scratch({C, DkP});
    scaledKeys = e.scratch({C, DkP});
    newValues = e.scratch({C, DvP});
  }
  lastDecay = shape.featureDecay() ? e.scratch({DkP}) : Value();
  if (shape.featureDecay() && !shape.tree) {
    decayFromBlock = e.scratch({kDecayBlock, DkP});
    rowsFromBlock = e.scratch({kDecayBlock, DkP});
    keysToBlockT = e.scratch({DkP, C});
    plainKeysT = e.scratch({DkP, C});
    cumulativeT = e.scratch({DkP, C});
  }
  if (shape.tree)
    ancestors = memref::AllocaOp::create(
        b, MemRefType::get({C, C}, b.getI32Type()), b.getI64IntegerAttr(64));
}

void ChunkedRecurrenceKernel::findAncestors(Value steps) {
  // Row t = its parent's row plus t itself, in index order (a parent
  // precedes its children); rows past the tree hold only themselves.
  auto i32Vec = VectorType::get({W}, b.getI32Type());
  Value zeros = arith::ConstantOp::create(
      b, DenseElementsAttr::get(i32Vec, static_cast<int32_t>(0)));
  Value one = arith::ConstantIntOp::create(b, b.getI32Type(), 1);
  e.loop(c0, e.index(C), c1, [&](Value t) {
    Value parent = e.ifElse(
        e.icmp(arith::CmpIPredicate::ult, t, steps),
        [&]() -> SmallVector<Value> {
          return {e.loadInt(args.parents, {batch, t})};
        },
        [&]() -> SmallVector<Value> { return {e.i32(-1)}; })[0];
    Value isRoot = e.icmp(arith::CmpIPredicate::slt, parent, e.i32(0));
    Value parentRow = e.toIndex(e.select(isRoot, e.i32(0), parent));
    for (int64_t off = 0; off < C; off += W) {
      Value col = e.index(off);
      Value inherited = vector::LoadOp::create(b, i32Vec, ancestors,
                                               ValueRange{parentRow, col});
      vector::StoreOp::create(b, e.select(isRoot, zeros, inherited), ancestors,
                              ValueRange{t, col});
    }
    memref::StoreOp::create(b, one, ancestors, ValueRange{t, t});
  });
}

void ChunkedRecurrenceKernel::accumulatePathDecays(Value steps) {
  // G_t = g_t + G_parent(t): the decays summed along t's path from the
  // root, in index order.
  if (!shape.hasDecay())
    return;
  lastRow = e.index(C - 1);
  e.loop(c0, steps, c1, [&](Value t) {
    Value parent = e.loadInt(args.parents, {batch, t});
    e.ifThen(e.icmp(arith::CmpIPredicate::sge, parent, e.i32(0)), [&] {
      Value p = e.toIndex(parent);
      if (shape.scalarDecay()) {
        e.store(e.fadd(e.load(cumulative, t), e.load(cumulative, p)),
                cumulative, {t});
        return;
      }
      for (int64_t off = 0; off < DkP; off += W) {
        Value col = e.index(off);
        vector::StoreOp::create(
            b,
            e.fadd(vector::LoadOp::create(b, e.vec, cumulative,
                                          ValueRange{t, col}),
                   vector::LoadOp::create(b, e.vec, cumulative,
                                          ValueRange{p, col})),
            cumulative, ValueRange{t, col});
      }
    });
  });
}

void ChunkedRecurrenceKernel::loadInitialState() {
  // S = S_init, zero in the padding.
  e.loop(c0, e.index(DkP), c1, [&](Value i) { zeroRow(e, state, {i}, DvP); });
  e.loop(c0, e.index(Dk), c1, [&](Value i) {
    SmallVector<Value> row = seq.state(hv);
    row.push_back(i);
    for (int64_t off = 0; off < DvP; off += W)
      vector::StoreOp::create(b, loadColumns(args.initialState, row, off),
                              state, ValueRange{i, e.index(off)});
  });
}

void ChunkedRecurrenceKernel::loadChunk(Value first, Value steps) {
  // Steps past the end are zeros (g = 0, beta = 0), which leave the state
  // and every real row unchanged.
  e.loop(c0, steps, c1, [&](Value t) {
    Value pos = e.add(first, t);
    SmallVector<Value> keyStep = seq.step(hk, pos),
                       valueStep = seq.step(hv, pos);
    copyFeatureRow(e, args.k, keyStep, Dk, shape.normalizeQueryKey, 1.0, keys,
                   {t});
    copyFeatureRow(e, args.q, keyStep, Dk, shape.normalizeQueryKey, shape.scale,
                   queries, {t});
    for (int64_t off = 0; off < DvP; off += W)
      vector::StoreOp::create(b, loadColumns(args.v, valueStep, off), values,
                              ValueRange{t, e.index(off)});
    if (shape.scalarDecay())
      e.store(e.load(args.g, valueStep), cumulative, {t});
    if (shape.featureDecay())
      copyFeatureRow(e, args.g, valueStep, Dk, false, 1.0, cumulative, {t});
    if (betas)
      e.store(e.load(args.beta, valueStep), betas, {t});
  });
  e.loop(steps, e.index(C), c1, [&](Value t) {
    zeroRow(e, keys, {t}, DkP);
    zeroRow(e, queries, {t}, DkP);
    zeroRow(e, values, {t}, DvP);
    if (shape.scalarDecay())
      e.store(e.scalar(0.0), cumulative, {t});
    if (shape.featureDecay())
      zeroRow(e, cumulative, {t}, DkP);
    if (betas)
      e.store(e.scalar(0.0), betas, {t});
  });
}

void ChunkedRecurrenceKernel::accumulateDecays() {
  // G = cumulative sum of g inside the chunk.
  if (shape.scalarDecay())
    e.loop(c0, e.index(C), c1, {e.scalar(0.0)}, [&](Value t, ValueRange it) {
      Value sum = e.fadd(it[0], e.load(cumulative, t));
      e.store(sum, cumulative, {t});
      return SmallVector<Value>{sum};
    });
  if (shape.featureDecay()) {
    SmallVector<Value> zeros(DkP / W, e.splat(0.0));
    e.loop(c0, e.index(C), c1, zeros, [&](Value t, ValueRange it) {
      SmallVector<Value> sums;
      for (int64_t x = 0; x < DkP / W; ++x) {
        Value col = e.index(x * W);
        sums.push_back(
            e.fadd(it[x], vector::LoadOp::create(b, e.vec, cumulative,
                                                 ValueRange{t, col})));
        vector::StoreOp::create(b, sums.back(), cumulative, ValueRange{t, col});
      }
      return sums;
    });
  }
  lastRow = e.index(C - 1);
}

void ChunkedRecurrenceKernel::transposeKeys() {
  // K^T, for gla and kda carrying exp(G_last - G_s) per feature for the
  // state update, beside the plain K^T and G^T their decayed products
  // read (decayKeysToBlock).
  auto transpose = [&](Value x, Value dst, Value s, int64_t off) {
    for (int64_t lane = 0; lane < W; ++lane)
      e.store(vector::ExtractOp::create(b, x, lane), dst,
              {e.index(off + lane), s});
  };
  e.loop(c0, e.index(C), c1, [&](Value s) {
    for (int64_t off = 0; off < DkP; off += W) {
      Value col = e.index(off);
      Value x = vector::LoadOp::create(b, e.vec, keys, ValueRange{s, col});
      if (!plainKeysT) {
        transpose(x, keysT, s, off);
        continue;
      }
      transpose(x, plainKeysT, s, off);
      transpose(
          vector::LoadOp::create(b, e.vec, cumulative, ValueRange{s, col}),
          cumulativeT, s, off);
      transpose(e.fmul(x, decayToEnd(s, off)), keysT, s, off);
    }
  });
}

void ChunkedRecurrenceKernel::transformDeltaValues() {
  // The UT transform and the new values V' = U - W S.
  // With a decay per key feature, scoreDecayedChunk made the Gram matrix.
  if (!shape.featureDecay()) {
    Product gram;
    gram.rows = C, gram.cols = C, gram.depth = DkP;
    gram.a = keys, gram.b = keysT, gram.c = transform, gram.lowerC = true;
    emitProduct(e, gram);
  }
  maskChunkScores(e, transform, C, shape.scalarDecay() ? cumulative : Value(),
                  betas, /*strict=*/true, ancestors);
  invertUnitLower(e, transform, C);
  // T diag(beta)
  e.loop(c0, e.index(C), c1, [&](Value t) {
    for (int64_t off = 0; off < C; off += W) {
      Value col = e.index(off);
      vector::StoreOp::create(
          b,
          e.fmul(
              vector::LoadOp::create(b, e.vec, transform, ValueRange{t, col}),
              vector::LoadOp::create(b, e.vec, betas, col)),
          transform, ValueRange{t, col});
    }
  });
  // -exp(G_s) k_s, so that V' = U + W S accumulates.
  e.loop(c0, e.index(C), c1, [&](Value s) {
    Value factor = shape.scalarDecay() ? e.broadcast(arith::NegFOp::create(
                                             b, e.exp(e.load(cumulative, s))))
                                       : e.splat(-1.0);
    for (int64_t off = 0; off < DkP; off += W) {
      Value col = e.index(off);
      Value scale =
          shape.featureDecay()
              ? e.fmul(factor, e.exp(vector::LoadOp::create(
                                   b, e.vec, cumulative, ValueRange{s, col})))
              : factor;
      vector::StoreOp::create(
          b,
          e.fmul(vector::LoadOp::create(b, e.vec, keys, ValueRange{s, col}),
                 scale),
          scaledKeys, ValueRange{s, col});
    }
  });
  Product w;
  w.rows = C, w.cols = DkP, w.depth = C;
  w.a = transform, w.b = scaledKeys, w.c = weights, w.lowerA = true;
  emitProduct(e, w);
  Product u;
  u.rows = C, u.cols = DvP, u.depth = C;
  u.a = transform, u.b = values, u.c = newValues, u.lowerA = true;
  emitProduct(e, u);
  Product correction;
  correction.rows = C, correction.cols = DvP, correction.depth = DkP;
  correction.a = weights, correction.b = state, correction.c = newValues;
  correction.accumulate = true;
  emitProduct(e, correction);
  update = newValues;
}

void ChunkedRecurrenceKernel::scoreChunk() {
  // P[t, s] = (q_t . k_s) exp(G_t - G_s) for s <= t (q carries the scale).
  // With a decay per key feature, scoreDecayedChunk made P.
  if (shape.featureDecay())
    return;
  Product p;
  p.rows = C, p.cols = C, p.depth = DkP;
  p.a = queries, p.b = keysT, p.c = scores, p.lowerC = true;
  emitProduct(e, p);
  maskChunkScores(e, scores, C, shape.scalarDecay() ? cumulative : Value(),
                  Value(), /*strict=*/false, ancestors);
}

void ChunkedRecurrenceKernel::scoreDecayedChunk() {
  // With a decay per key feature: P (scores) and, for kda, the Gram matrix
  // of the UT transform (transform, before its mask and beta), in one pass
  // that takes each block's decays once for both.
  SmallVector<DecayedProduct> products{{queries, scores, /*strict=*/false}};
  if (shape.isDelta())
    products.push_back({keys, transform, /*strict=*/true});
  decayedProducts(products);
}

void ChunkedRecurrenceKernel::decayedProducts(
    ArrayRef<DecayedProduct> products) {
  // dst[t, s] = sum_d rows[t, d] k[s, d] exp(G[t, d] - G[s, d]) for s <= t
  // (s < t when strict), zero elsewhere. With a decay per key feature the
  // decays do not factor out of the dot product; an exp per pair and
  // feature would cost more than the products. So, as fla's chunk_gla and
  // chunk_kda do, the chunk's rows go in blocks of 16 steps and each pair
  // splits at the first step r of t's block: exp(G_t - G_r) exp(G_r - G_s),
  // one product per block. Below the block both factors are <= 1; within
  // it exp(G_r - G_s) >= 1, which is safe while the block's decays sum to
  // at most kMaxBlockDecay, and otherwise that block takes its pairs one
  // at a time. A tree's G is summed along paths, not in index order, so a
  // tree takes every pair one at a time.
  for (const DecayedProduct &p : products)
    zeroRows(p.dst, 0, C);
  if (ancestors) {
    for (const DecayedProduct &p : products)
      decayedPairs(p.rows, p.dst, 0, C, p.strict);
    return;
  }
  for (int64_t first = 0; first < C; first += kDecayBlock) {
    Value reference = e.index(first);
    // decayFromBlock[t - first] = exp(G_t - G_first), t in the block.
    eachBlockRowVector(first, [&](Value i, Value t, Value col) {
      vector::StoreOp::create(
          b,
          e.exp(e.fsub(
              vector::LoadOp::create(b, e.vec, cumulative, ValueRange{t, col}),
              vector::LoadOp::create(b, e.vec, cumulative,
                                     ValueRange{reference, col}))),
          decayFromBlock, ValueRange{i, col});
    });
    // The block's largest decay, over its features: G_first - G_last.
    Value last = e.index(first + kDecayBlock - 1);
    Value spread = e.splat(0.0);
    for (int64_t off = 0; off < DkP; off += W) {
      Value col = e.index(off);
      spread = e.fmax(spread,
                      e.fsub(vector::LoadOp::create(b, e.vec, cumulative,
                                                    ValueRange{reference, col}),
                             vector::LoadOp::create(b, e.vec, cumulative,
                                                    ValueRange{last, col})));
    }
    Value withinBlock =
        arith::CmpFOp::create(b, arith::CmpFPredicate::OLE, e.maxLanes(spread),
                              e.scalar(kMaxBlockDecay));
    e.ifElse(
        withinBlock,
        [&]() -> SmallVector<Value> {
          decayKeysToBlock(first, first + kDecayBlock);
          for (const DecayedProduct &p : products) {
            blockProduct(p.rows, p.dst, first, first + kDecayBlock);
            maskAboveDiagonal(p.dst, first, p.strict);
          }
          return {};
        },
        [&]() -> SmallVector<Value> {
          decayKeysToBlock(first, first);
          for (const DecayedProduct &p : products) {
            blockProduct(p.rows, p.dst, first, first);
            decayedPairs(p.rows, p.dst, first, kDecayBlock, p.strict);
          }
          return {};
        });
  }
}

void ChunkedRecurrenceKernel::eachBlockRowVector(
    int64_t first, function_ref<void(Value, Value, Value)> body) {
  Value reference = e.index(first);
  e.loop(c0, e.index(kDecayBlock), c1, [&](Value i) {
    Value t = e.add(i, reference);
    for (int64_t off = 0; off < DkP; off += W)
      body(i, t, e.index(off));
  });
}

void ChunkedRecurrenceKernel::decayKeysToBlock(int64_t first, int64_t columns) {
  // keysToBlockT[:, s] = k[s] exp(G_first - G_s), s < columns, from the
  // transposed keys and decays a feature (row) at a time, s in vectors.
  Value reference = e.index(first);
  e.loop(c0, e.index(DkP), c1, [&](Value d) {
    Value atReference = e.broadcast(e.load(cumulativeT, {d, reference}));
    for (int64_t off = 0; off < columns; off += W) {
      Value col = e.index(off);
      Value decay = e.exp(
          e.fsub(atReference, vector::LoadOp::create(b, e.vec, cumulativeT,
                                                     ValueRange{d, col})));
      vector::StoreOp::create(
          b,
          e.fmul(
              vector::LoadOp::create(b, e.vec, plainKeysT, ValueRange{d, col}),
              decay),
          keysToBlockT, ValueRange{d, col});
    }
  });
}

void ChunkedRecurrenceKernel::blockProduct(Value rows, Value dst, int64_t first,
                                           int64_t columns) {
  // dst[first .. first + 16, 0 .. columns) = (rows * decayFromBlock)
  // keysToBlockT.
  if (columns == 0)
    return;
  eachBlockRowVector(first, [&](Value i, Value t, Value col) {
    vector::StoreOp::create(
        b,
        e.fmul(vector::LoadOp::create(b, e.vec, rows, ValueRange{t, col}),
               vector::LoadOp::create(b, e.vec, decayFromBlock,
                                      ValueRange{i, col})),
        rowsFromBlock, ValueRange{i, col});
  });
  Product p;
  p.rows = kDecayBlock, p.cols = columns, p.depth = DkP;
  p.a = rowsFromBlock, p.b = keysToBlockT;
  p.c = memref::SubViewOp::create(
      b, dst, ArrayRef<OpFoldResult>{b.getIndexAttr(first), b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(kDecayBlock),
                             b.getIndexAttr(columns)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1)});
  emitProduct(e, p);
}

void ChunkedRecurrenceKernel::maskAboveDiagonal(Value dst, int64_t first,
                                                bool strict) {
  // Zero dst[t, s] for s > t (s >= t when strict) in the block's columns.
  auto i32Vec = VectorType::get({W}, b.getI32Type());
  e.loop(e.index(first), e.index(first + kDecayBlock), c1, [&](Value t) {
    Value row = vector::BroadcastOp::create(
        b, i32Vec, arith::IndexCastOp::create(b, b.getI32Type(), t));
    for (int64_t off = first; off < first + kDecayBlock; off += W) {
      Value col = e.index(off);
      Value keep =
          e.icmp(strict ? arith::CmpIPredicate::slt : arith::CmpIPredicate::sle,
                 lanePositions(e, off), row);
      Value x = vector::LoadOp::create(b, e.vec, dst, ValueRange{t, col});
      vector::StoreOp::create(b, e.select(keep, x, e.splat(0.0)), dst,
                              ValueRange{t, col});
    }
  });
}

void ChunkedRecurrenceKernel::zeroRows(Value dst, int64_t first,
                                       int64_t count) {
  e.loop(e.index(first), e.index(first + count), c1,
         [&](Value t) { zeroRow(e, dst, {t}, C); });
}

void ChunkedRecurrenceKernel::decayedPairs(Value rows, Value dst, int64_t first,
                                           int64_t count, bool strict) {
  // dst[t, s] for t and s in [first, first + count), s <= t (s < t when
  // strict), one exp per pair and feature.
  Value begin = e.index(first);
  e.loop(begin, e.index(first + count), c1, [&](Value t) {
    e.loop(begin, strict ? t : e.add(t, c1), c1, [&](Value s) {
      Value dot = e.splat(0.0);
      for (int64_t off = 0; off < DkP; off += W) {
        Value col = e.index(off);
        Value decay = e.exp(e.fsub(
            vector::LoadOp::create(b, e.vec, cumulative, ValueRange{t, col}),
            vector::LoadOp::create(b, e.vec, cumulative, ValueRange{s, col})));
        Value product =
            e.fmul(vector::LoadOp::create(b, e.vec, rows, ValueRange{t, col}),
                   vector::LoadOp::create(b, e.vec, keys, ValueRange{s, col}));
        dot = e.fma(product, decay, dot);
      }
      Value score = e.sumLanes(dot);
      // A tree keeps its ancestors' columns only (the others' decays may
      // have overflowed).
      if (ancestors)
        score = e.select(
            e.icmp(arith::CmpIPredicate::ne,
                   memref::LoadOp::create(b, ancestors, ValueRange{t, s}),
                   e.i32(0)),
            score, e.scalar(0.0));
      e.store(score, dst, {t, s});
    });
  });
}

void ChunkedRecurrenceKernel::storeChunkOutputs(Value first, Value steps) {
  // O = (exp(G) * Q) S + P V'.
  if (shape.hasDecay())
    scaleRows(e, queries, C, DkP, [&](Value t, int64_t off) -> Value {
      if (shape.scalarDecay())
        return e.broadcast(e.exp(e.load(cumulative, t)));
      return e.exp(vector::LoadOp::create(b, e.vec, cumulative,
                                          ValueRange{t, e.index(off)}));
    });
  Product inter;
  inter.rows = C, inter.cols = DvP, inter.depth = DkP;
  inter.a = queries, inter.b = state, inter.c = outputs;
  emitProduct(e, inter);
  Product intra;
  intra.rows = C, intra.cols = DvP, intra.depth = C;
  intra.a = scores, intra.b = update, intra.c = outputs;
  intra.accumulate = true, intra.lowerA = true;
  emitProduct(e, intra);
  e.loop(c0, steps, c1, [&](Value t) {
    SmallVector<Value> at = seq.step(hv, e.add(first, t));
    if (!firstColumn) {
      storeRecurrenceRow(e, shape, args, outputs, {t}, at);
      return;
    }
    // A column tile holds part of each row: attn.rmsnorm_gate's kernel follows.
    for (int64_t off = 0; off < DvP; off += W)
      storeColumns(vector::LoadOp::create(b, e.vec, outputs,
                                          ValueRange{t, e.index(off)}),
                   args.out, at, off);
  });
}

void ChunkedRecurrenceKernel::carryState() {
  // S = exp(G_last) S + (exp(G_last - G) * K)^T V'.
  Product carry;
  carry.rows = DkP, carry.cols = DvP, carry.depth = C;
  carry.a = keysT, carry.b = update, carry.c = state;
  carry.accumulate = true;
  if (shape.scalarDecay()) {
    scaleRows(e, update, C, DvP,
              [&](Value s, int64_t) { return decayToEnd(s, 0); });
    carry.scale = e.exp(e.load(cumulative, lastRow));
  }
  if (shape.featureDecay()) {
    for (int64_t off = 0; off < DkP; off += W) {
      Value col = e.index(off);
      vector::StoreOp::create(
          b,
          e.exp(vector::LoadOp::create(b, e.vec, cumulative,
                                       ValueRange{lastRow, col})),
          lastDecay, col);
    }
    carry.rowScale = lastDecay;
  }
  emitProduct(e, carry);
}

void ChunkedRecurrenceKernel::storeFinalState() {
  e.loop(c0, e.index(Dk), c1, [&](Value i) {
    SmallVector<Value> row = seq.state(hv);
    row.push_back(i);
    for (int64_t off = 0; off < DvP; off += W)
      storeColumns(
          vector::LoadOp::create(b, e.vec, state, ValueRange{i, e.index(off)}),
          args.finalState, row, off);
  });
}

} // namespace

func::FuncOp mlir::attn::buildChunkedRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const CpuTiling &tiling,
    int64_t columns, TypeRange bindingTypes) {
  return ChunkedRecurrenceKernel(builder, loc, name, shape, tiling, columns,
                                 bindingTypes)
      .build();
}

//===----------------------------------------------------------------------===//
// Gate kernel (after column tiles)
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// Recurrent step kernel
//===----------------------------------------------------------------------===//

namespace {

/// The recurrent step kernel, built one phase at a time (see the file
/// comment): per step, its k, q and gates; then per block of state columns
/// the read pass (S^T q, S^T k), the step's values and outputs, and the
/// update pass; then the output row.
class RecurrentStepKernel {
public:
  RecurrentStepKernel(OpBuilder &builder, Location loc, StringRef name,
                      const LinearRecurrenceShape &shape,
                      const CpuTiling &tiling, TypeRange bindingTypes);

  /// Emits the phases in order and returns the kernel.
  func::FuncOp build();

private:
  /// One block of state columns: `lanes` real features in each of its
  /// vectors from column `block`.
  struct ColumnBlock {
    int64_t block;
    SmallVector<int64_t> lanes;
    int64_t size() const { return lanes.size(); }
  };

  // The phases of one step t, in the order build() emits them.
  void loadStep(Value t);
  SmallVector<Value> readState(const ColumnBlock &columns);
  SmallVector<Value> stepValues(Value t, const ColumnBlock &columns,
                                ArrayRef<Value> sums);
  void updateState(const ColumnBlock &columns, ArrayRef<Value> u);

  Value column(const ColumnBlock &columns, int64_t x) {
    return e.index(columns.block + x * W);
  }
  /// Where row `i` of the state has vector `x` of a column block.
  SmallVector<Value> stateIndex(Value i, const ColumnBlock &columns,
                                int64_t x) {
    SmallVector<Value> at(stateAt);
    at.push_back(i);
    at.push_back(column(columns, x));
    return at;
  }

  const LinearRecurrenceShape &shape;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  KernelEmitter e;
  const int64_t W, Dk, Dv, DkP, DvP;
  /// Columns of S per block: S^T k and S^T q of a block take 2 registers
  /// per vector, and the block (Dk x 32 floats) stays in L1 between the
  /// read pass and the update pass.
  static constexpr int64_t kBlockVectors = 4;
  RecurrenceBindings args;
  Heads heads;
  RecurrenceSequence seq;
  const int64_t maxSteps;
  Value batch, hv, hk, c0, c1;
  /// The index prefixes of the state and of step t's rows.
  SmallVector<Value> stateAt, keyStep, valueStep;
  Value key, query, decay, output;
  /// The key the delta rules read the state with: k, or for kda the key
  /// times this step's decays ((diag(a) S)^T k = S^T (a * k)).
  Value readKey;

  // What loadStep reads of step t: the state it starts from (S_init at
  // the first step, the state written in place after), k . q, the
  // scalar decay alpha and the delta rules' beta (broadcast).
  Value source, kqVec, alpha, beta;
};

RecurrentStepKernel::RecurrentStepKernel(OpBuilder &builder, Location loc,
                                         StringRef name,
                                         const LinearRecurrenceShape &shape,
                                         const CpuTiling &tiling,
                                         TypeRange bindingTypes)
    : shape(shape), guard(builder),
      func(createKernel(builder, loc, name, bindingTypes, tiling, "recurrent")),
      b(loc, builder), e(b, tiling.vectorWidth), W(e.width), Dk(shape.keyDim),
      Dv(shape.valueDim), DkP(roundUp(Dk, W)), DvP(roundUp(Dv, W)),
      args(func, shape), heads(e, shape, args.workgroup),
      seq(e, shape, args, heads.batch), maxSteps(tiling.recurrentMaxSteps) {
  batch = heads.batch, hv = heads.valueHead, hk = heads.keyHead;
  stateAt = seq.state(hv);
}

func::FuncOp RecurrentStepKernel::build() {
  c0 = e.index(0), c1 = e.index(1);
  Value length = seq.length;
  key = e.scratch({DkP}), query = e.scratch({DkP});
  decay = shape.featureDecay() ? e.scratch({DkP}) : Value();
  readKey = shape.featureDecay() && shape.isDelta() ? e.scratch({DkP}) : key;
  output = e.scratch({DvP});
  // In a ragged batch, the longer sequences are the chunked kernel's.
  if (shape.ragged)
    length =
        e.select(e.icmp(arith::CmpIPredicate::ule, length, e.index(maxSteps)),
                 length, c0);

  e.loop(c0, length, c1, [&](Value t) {
    keyStep = seq.step(hk, t), valueStep = seq.step(hv, t);
    loadStep(t);
    for (int64_t block = 0; block < Dv; block += kBlockVectors * W) {
      ColumnBlock columns{block, {}};
      for (int64_t off = block; off < std::min(Dv, block + kBlockVectors * W);
           off += W)
        columns.lanes.push_back(std::min(W, Dv - off));
      SmallVector<Value> sums = readState(columns);
      SmallVector<Value> u = stepValues(t, columns, sums);
      updateState(columns, u);
    }
    storeRecurrenceRow(e, shape, args, output, {}, valueStep);
  });
  func::ReturnOp::create(b);
  return func;
}

void RecurrentStepKernel::loadStep(Value t) {
  // The first step reads S_init, later ones the state written in place.
  Value first = e.icmp(arith::CmpIPredicate::eq, t, c0);
  source = e.select(first, args.initialState, args.finalState);

  copyFeatureRow(e, args.k, keyStep, Dk, shape.normalizeQueryKey, 1.0, key, {});
  copyFeatureRow(e, args.q, keyStep, Dk, shape.normalizeQueryKey, shape.scale,
                 query, {});
  // k . q, for the part of o_t that step t itself writes.
  Value kq = e.splat(0.0);
  for (int64_t off = 0; off < DkP; off += W)
    kq = e.fma(vector::LoadOp::create(b, e.vec, key, e.index(off)),
               vector::LoadOp::create(b, e.vec, query, e.index(off)), kq);
  kqVec = e.broadcast(e.sumLanes(kq));
  // The decay of this step: alpha (scalar), or per feature for gla and
  // kda, where it is folded into q for S^T q (and into k for kda's S^T k).
  alpha = Value();
  if (shape.scalarDecay())
    alpha = e.broadcast(e.exp(e.load(args.g, valueStep)));
  if (shape.featureDecay()) {
    copyFeatureRow(e, args.g, valueStep, Dk, false, 1.0, decay, {});
    for (int64_t off = 0; off < DkP; off += W) {
      Value col = e.index(off);
      Value a = e.exp(vector::LoadOp::create(b, e.vec, decay, col));
      vector::StoreOp::create(b, a, decay, col);
      vector::StoreOp::create(
          b, e.fmul(vector::LoadOp::create(b, e.vec, query, col), a), query,
          col);
      if (readKey != key)
        vector::StoreOp::create(
            b, e.fmul(vector::LoadOp::create(b, e.vec, key, col), a), readKey,
            col);
    }
  }
  beta = shape.isDelta() ? e.broadcast(e.load(args.beta, valueStep)) : Value();
}

SmallVector<Value> RecurrentStepKernel::readState(const ColumnBlock &columns) {
  // Pass 1: S^T q (and S^T k for the delta rules): the S^T q sums first,
  // then the S^T k sums.
  const int64_t nv = columns.size();
  bool needKey = shape.isDelta();
  SmallVector<Value> init(needKey ? 2 * nv : nv, e.splat(0.0));
  return e.loop(c0, e.index(Dk), c1, init, [&](Value i, ValueRange acc) {
    Value qb = e.broadcast(e.load(query, i));
    Value kb = needKey ? e.broadcast(e.load(readKey, i)) : Value();
    SmallVector<Value> byQuery, byKey;
    for (int64_t x = 0; x < nv; ++x) {
      Value s =
          e.loadVector(source, stateIndex(i, columns, x), columns.lanes[x]);
      byQuery.push_back(e.fma(qb, s, acc[x]));
      if (needKey)
        byKey.push_back(e.fma(kb, s, acc[nv + x]));
    }
    llvm::append_range(byQuery, byKey);
    return byQuery;
  });
}

SmallVector<Value> RecurrentStepKernel::stepValues(Value t,
                                                   const ColumnBlock &columns,
                                                   ArrayRef<Value> sums) {
  // u = v (+ delta correction), o = (decayed S)^T q + u (k . q).
  const int64_t nv = columns.size();
  SmallVector<Value> u;
  for (int64_t x = 0; x < nv; ++x) {
    SmallVector<Value> at(valueStep);
    at.push_back(column(columns, x));
    Value v = e.loadVector(args.v, at, columns.lanes[x]);
    Value sq = sums[x];
    if (shape.isDelta()) {
      Value sk = sums[nv + x];
      if (alpha)
        sk = e.fmul(sk, alpha);
      v = e.fmul(beta, e.fsub(v, sk));
    }
    if (alpha)
      sq = e.fmul(sq, alpha);
    u.push_back(v);
    vector::StoreOp::create(b, e.fma(v, kqVec, sq), output, column(columns, x));
  }
  return u;
}

void RecurrentStepKernel::updateState(const ColumnBlock &columns,
                                      ArrayRef<Value> u) {
  // Pass 2: S = decay * S + k u^T.
  e.loop(c0, e.index(Dk), c1, [&](Value i) {
    Value kb = e.broadcast(e.load(key, i));
    Value rowDecay = alpha;
    if (decay)
      rowDecay = e.broadcast(e.load(decay, i));
    for (int64_t x = 0; x < columns.size(); ++x) {
      SmallVector<Value> at = stateIndex(i, columns, x);
      Value s = e.loadVector(source, at, columns.lanes[x]);
      if (rowDecay)
        s = e.fmul(s, rowDecay);
      e.storeVector(e.fma(kb, u[x], s), args.finalState, at, columns.lanes[x]);
    }
  });
}

} // namespace

func::FuncOp mlir::attn::buildRecurrentStepKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const CpuTiling &tiling,
    TypeRange bindingTypes) {
  return RecurrentStepKernel(builder, loc, name, shape, tiling, bindingTypes)
      .build();
}
