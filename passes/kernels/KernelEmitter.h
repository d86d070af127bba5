//===- KernelEmitter.h - Building CPU kernel IR -----------------*- C++ -*-===//
//
// What every CPU kernel builder shares: the tile sizes recorded on kernels,
// the kernel function skeleton, and KernelEmitter, small helpers over an
// ImplicitLocOpBuilder (loops, masked vector loads, reductions, the safe
// exponentials) so that kernel builders read like the algorithm.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_KERNELS_KERNELEMITTER_H
#define ATTN_PASSES_KERNELS_KERNELEMITTER_H

#include "Attn/AttnDialect.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/TypeUtilities.h"

#include <algorithm>
#include <limits>

namespace mlir::attn {

/// Tile sizes of the CPU kernels; chosen for the host by attnc and recorded
/// on every kernel as `attn.tiling`.
struct CpuTiling {
  /// f32 lanes of one vector register (8 for AVX2, 16 for AVX-512).
  int64_t vectorWidth = 8;
  /// Query rows per flash workgroup (a multiple of vectorWidth).
  int64_t queryTile = 32;
  /// Keys per flash step (a multiple of 4).
  int64_t keyTile = 32;
  /// Keys per split-KV workgroup.
  int64_t splitKeys = 512;
  /// Entries with at most this many query rows take the split-KV path.
  int64_t decodeMaxQueries = 8;
  /// Recurrences of at most this many steps run step by step; longer ones
  /// take the chunked form.
  int64_t recurrentMaxSteps = 1;
  /// The narrowest column tile of the recurrent state (value features per
  /// workgroup of the chunked kernel when batch x value heads leaves
  /// workers idle).
  int64_t stateColumns = 32;
  /// The target has AVX512-BF16 (vdpbf16ps): products whose operands are
  /// both stored as bf16 take two bf16 products a lane per instruction
  /// (KernelEmitter::dotPairs) where the f32 path takes one.
  bool bf16Dot = false;
  /// The target has AMX-BF16 (with bf16Dot): flash attention over bf16 q,
  /// k and v takes q k^T and P V on AMX tiles (amx.tile_mulf), 16 x 16
  /// f32 results of 32-long bf16 pair products; queryTile a multiple of
  /// 32, keyTile of 32.
  bool amxTiles = false;
  /// Split-KV decode requests its coming K and V rows into L1 (locality 3,
  /// prefetcht0) instead of L2 (locality 2, prefetcht1): which is faster
  /// depends on the micro-architecture (CpuTarget::host).
  bool prefetchIntoL1 = false;

  /// The locality of those requests, as memref.prefetch takes it.
  uint32_t prefetchLocality() const { return prefetchIntoL1 ? 3 : 2; }

  /// The tiling as the dictionary attribute recorded on kernels.
  DictionaryAttr toAttr(MLIRContext *context) const;
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// `prefix` followed by `last`: a row's indices and a feature, say, as
/// KeyRows::at and QueryRows::at give rows.
inline SmallVector<Value> withIndex(ArrayRef<Value> prefix, Value last) {
  SmallVector<Value> indices(prefix);
  indices.push_back(last);
  return indices;
}

/// Rounds `value` up to a multiple of `multiple`.
inline int64_t roundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// Creates `func.func private @name(bindings..., %workgroup: index)` marked
/// as a kernel of `kind` with the tiling recorded on it, and leaves the
/// builder inside its body.
func::FuncOp createKernel(OpBuilder &builder, Location loc, StringRef name,
                          TypeRange bindingTypes, DictionaryAttr tiling,
                          StringRef kind);
inline func::FuncOp createKernel(OpBuilder &builder, Location loc,
                                 StringRef name, TypeRange bindingTypes,
                                 const CpuTiling &tiling, StringRef kind) {
  return createKernel(builder, loc, name, bindingTypes,
                      tiling.toAttr(builder.getContext()), kind);
}

/// Builds kernel IR with the vector width fixed: small helpers over an
/// ImplicitLocOpBuilder so the kernels read like the algorithm.
class KernelEmitter {
public:
  KernelEmitter(ImplicitLocOpBuilder &b, int64_t vectorWidth)
      : b(b), width(vectorWidth), f32(b.getF32Type()),
        vec(VectorType::get({vectorWidth}, b.getF32Type())) {}

  ImplicitLocOpBuilder &b;
  const int64_t width;
  const Type f32;
  const VectorType vec;

  Value index(int64_t value) {
    return arith::ConstantIndexOp::create(b, value);
  }
  Value scalar(double value) {
    return arith::ConstantOp::create(b, b.getF32FloatAttr(value));
  }
  Value splat(double value) {
    return arith::ConstantOp::create(
        b, DenseElementsAttr::get(vec, static_cast<float>(value)));
  }
  Value broadcast(Value scalarValue) {
    return vector::BroadcastOp::create(b, vec, scalarValue);
  }
  Value dim(Value memref, int64_t d) {
    return memref::DimOp::create(b, memref, d);
  }

  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, x, y); }
  Value div(Value x, Value y) { return arith::DivUIOp::create(b, x, y); }
  Value rem(Value x, Value y) { return arith::RemUIOp::create(b, x, y); }
  Value ceilDiv(Value x, Value y) {
    return arith::CeilDivUIOp::create(b, x, y);
  }
  Value minS(Value x, Value y) { return arith::MinSIOp::create(b, x, y); }
  Value maxS(Value x, Value y) { return arith::MaxSIOp::create(b, x, y); }

  Value fadd(Value x, Value y) { return arith::AddFOp::create(b, x, y); }
  Value fsub(Value x, Value y) { return arith::SubFOp::create(b, x, y); }
  Value fmul(Value x, Value y) { return arith::MulFOp::create(b, x, y); }
  Value fdiv(Value x, Value y) { return arith::DivFOp::create(b, x, y); }
  Value fmax(Value x, Value y) { return arith::MaximumFOp::create(b, x, y); }
  Value fma(Value x, Value y, Value acc) {
    return vector::FMAOp::create(b, x, y, acc);
  }
  Value exp(Value x) { return math::ExpOp::create(b, x); }
  /// 2^x: on the GPU libdevice's __nv_exp2f, one ex2.approx (relative
  /// error about 2^-22), where exp is __nv_expf, ten instructions.
  Value exp2(Value x) { return math::Exp2Op::create(b, x); }
  Value select(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, c, x, y);
  }
  Value fcmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b, p, x, y);
  }
  Value icmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, p, x, y);
  }
  // Loads and stores of storage dtypes: f16 and bf16 are widened to f32 as
  // they are loaded and rounded back as they are stored, so every kernel
  // computes in f32 whatever the storage (SPEC: accumulate in f32).

  /// `x` (a scalar or vector of f32, f16 or bf16) as f32.
  Value widen(Value x) {
    Type type = x.getType();
    if (getElementTypeOrSelf(type).isF32())
      return x;
    auto shaped = dyn_cast<VectorType>(type);
    Type wide = shaped ? Type(VectorType::get(shaped.getShape(), f32)) : f32;
    return arith::ExtFOp::create(b, wide, x);
  }
  /// The f32 `x` rounded to `storage` (to nearest even).
  Value narrow(Value x, Type storage) {
    if (storage.isF32())
      return x;
    auto shaped = dyn_cast<VectorType>(x.getType());
    Type narrowType =
        shaped ? Type(VectorType::get(shaped.getShape(), storage)) : storage;
    return arith::TruncFOp::create(b, narrowType, x);
  }
  static Type storageType(Value memref) {
    return cast<MemRefType>(memref.getType()).getElementType();
  }
  Value load(Value memref, ValueRange indices) {
    return widen(memref::LoadOp::create(b, memref, indices));
  }
  void store(Value value, Value memref, ValueRange indices) {
    memref::StoreOp::create(b, narrow(value, storageType(memref)), memref,
                            indices);
  }

  /// A mask of the first `count` lanes.
  Value prefixMask(int64_t count) {
    SmallVector<bool> bits(width, false);
    for (int64_t lane = 0; lane < count; ++lane)
      bits[lane] = true;
    return arith::ConstantOp::create(
        b, DenseElementsAttr::get(VectorType::get({width}, b.getI1Type()),
                                  ArrayRef<bool>(bits)));
  }
  /// Loads `lanes` (<= width) contiguous elements along the last dim,
  /// zero-filling the rest, without touching memory past them.
  Value loadVector(Value memref, ValueRange indices, int64_t lanes) {
    return loadVectorMasked(memref, indices,
                            lanes == width ? Value() : prefixMask(lanes));
  }
  void storeVector(Value value, Value memref, ValueRange indices,
                   int64_t lanes) {
    storeVectorMasked(value, memref, indices,
                      lanes == width ? Value() : prefixMask(lanes));
  }
  /// The same with a run-time lane count (clamped to [0, width]).
  Value loadVector(Value memref, ValueRange indices, Value lanes) {
    if (std::optional<int64_t> known = getConstantIntValue(lanes))
      return loadVector(memref, indices, std::clamp<int64_t>(*known, 0, width));
    return loadVectorMasked(memref, indices, dynamicMask(lanes));
  }
  void storeVector(Value value, Value memref, ValueRange indices, Value lanes) {
    if (std::optional<int64_t> known = getConstantIntValue(lanes))
      return storeVector(value, memref, indices,
                         std::clamp<int64_t>(*known, 0, width));
    storeVectorMasked(value, memref, indices, dynamicMask(lanes));
  }
  /// A vector load (the lanes of `mask`, zero elsewhere; all lanes without
  /// a mask) of the memref's storage dtype, widened to f32.
  Value loadVectorMasked(Value memref, ValueRange indices, Value mask) {
    return widen(loadStoredMasked(memref, indices, mask));
  }
  /// The same as stored (not widened).
  Value loadStoredMasked(Value memref, ValueRange indices, Value mask) {
    auto type = VectorType::get({width}, storageType(memref));
    if (!mask)
      return vector::LoadOp::create(b, type, memref, indices);
    Value zero = arith::ConstantOp::create(
        b, DenseElementsAttr::get(type,
                                  b.getFloatAttr(type.getElementType(), 0.0)));
    return vector::MaskedLoadOp::create(b, type, memref, indices, mask, zero);
  }
  /// `lanes` (<= width) contiguous elements as stored, zero past them.
  Value loadStored(Value memref, ValueRange indices, int64_t lanes) {
    return loadStoredMasked(memref, indices,
                            lanes == width ? Value() : prefixMask(lanes));
  }
  void storeVectorMasked(Value value, Value memref, ValueRange indices,
                         Value mask) {
    value = narrow(value, storageType(memref));
    if (!mask)
      vector::StoreOp::create(b, value, memref, indices);
    else
      vector::MaskedStoreOp::create(b, memref, indices, mask, value);
  }
  /// A mask of the first `count` lanes, `count` known at run time only.
  Value dynamicMask(Value count) {
    Value clamped = minS(maxS(count, index(0)), index(width));
    return vector::CreateMaskOp::create(
        b, VectorType::get({width}, b.getI1Type()), ValueRange{clamped});
  }
  Value scratch(ArrayRef<int64_t> shape, Type element = {}) {
    return memref::AllocaOp::create(
        b, MemRefType::get(shape, element ? element : Type(f32)),
        /*alignment=*/b.getI64IntegerAttr(64));
  }

  // Products of bf16 operands on AVX512-BF16 (CpuTiling::bf16Dot). vdpbf16ps
  // adds to each f32 lane the products of a pair of bf16 elements of each
  // operand: pairs along the reduction, so a product's operands go as
  // vectors of 2 x width bf16, element 2l + p being lane l's p-th term.
  // The products of two bf16 numbers are exact in f32, as when the f32
  // path widens them first.

  /// The 2 x width bf16 vector holding, in every lane, the pair `memref`
  /// has at `indices` and the element after it along the last dim.
  Value broadcastPair(Value memref, ValueRange indices) {
    Value pair = vector::LoadOp::create(
        b, VectorType::get({2}, b.getBF16Type()), memref, indices);
    return broadcastLanePair(pair, 0);
  }
  /// The same from a bf16 vector in registers: its lanes `lane` and
  /// `lane` + 1 (`lane` even) in every lane.
  Value broadcastLanePair(Value x, int64_t lane) {
    Type i32 = b.getI32Type();
    int64_t lanes = cast<VectorType>(x.getType()).getNumElements();
    Value words =
        vector::BitCastOp::create(b, VectorType::get({lanes / 2}, i32), x);
    Value bits = vector::ExtractOp::create(b, words, lane / 2);
    Value all =
        vector::BroadcastOp::create(b, VectorType::get({width}, i32), bits);
    return vector::BitCastOp::create(
        b, VectorType::get({2 * width}, b.getBF16Type()), all);
  }
  /// The f32 vector `x` (8 or 16 lanes) rounded to bf16 as a pair
  /// product's operand: one vcvtneps2bf16, which every target with pair
  /// products has, where narrow() takes about eight integer instructions
  /// (x86 has no other conversion). Both round to nearest even; this one
  /// flushes denormals to zero, far below what a bf16 product resolves.
  Value toPairOperand(Value x) {
    auto shaped = cast<VectorType>(x.getType());
    return x86vector::CvtPackedF32ToBF16Op::create(
        b, VectorType::get(shaped.getShape(), b.getBF16Type()), x);
  }
  /// acc + the lane-wise sums of the pairs' products of `x` and `y`.
  Value dotPairs(Value acc, Value x, Value y) {
    return x86vector::DotBF16Op::create(b, vec, acc, x, y);
  }
  /// The transpose of the square matrix whose rows are `rows` (n vectors
  /// of n elements, n a power of 2), in log2 n rounds of two-input
  /// shuffles. Round d swaps bit d of the row and column indices: of each
  /// pair of rows i, i + d (bit d of i clear), element j of the new row i
  /// is row i's j where bit d of j is clear, else row i + d's j - d; of
  /// the new row i + d, row i's j + d where it is clear, else row i + d's
  /// j. AVX-512 does each shuffle in one vpermt2d, n log2 n in all.
  /// vector.transpose would do, but canonicalization folds it with the
  /// rows' inserts and extracts into element-by-element moves.
  SmallVector<Value> transposeRows(ArrayRef<Value> rows) {
    const int64_t n = rows.size();
    assert(llvm::isPowerOf2_64(n) &&
           cast<VectorType>(rows[0].getType()).getNumElements() == n);
    SmallVector<Value> r(rows);
    for (int64_t d = n / 2; d >= 1; d /= 2) {
      SmallVector<int64_t> low(n), high(n);
      for (int64_t j = 0; j < n; ++j) {
        low[j] = j & d ? n + j - d : j;
        high[j] = j & d ? n + j : j + d;
      }
      for (int64_t i = 0; i < n; ++i) {
        if (i & d)
          continue;
        Value upper = r[i], lower = r[i + d];
        r[i] = vector::ShuffleOp::create(b, upper, lower, low);
        r[i + d] = vector::ShuffleOp::create(b, upper, lower, high);
      }
    }
    return r;
  }
  /// The pairs (first[l], second[l]) at elements 2 l and 2 l + 1: rows of
  /// two keys as a pair product's operand.
  Value interleavePairs(Value first, Value second) {
    return vector::InterleaveOp::create(b, first, second);
  }

  /// scf.for with the body built inline; returns the loop results.
  SmallVector<Value>
  loop(Value lower, Value upper, Value step, ValueRange inits,
       function_ref<SmallVector<Value>(Value iv, ValueRange iters)> body) {
    auto forOp = scf::ForOp::create(
        b, lower, upper, step, inits,
        [&](OpBuilder &nested, Location, Value iv, ValueRange iters) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToEnd(nested.getInsertionBlock());
          SmallVector<Value> yielded = body(iv, iters);
          scf::YieldOp::create(b, yielded);
        });
    return SmallVector<Value>(forOp.getResults());
  }
  void loop(Value lower, Value upper, Value step,
            function_ref<void(Value iv)> body) {
    loop(lower, upper, step, {}, [&](Value iv, ValueRange) {
      body(iv);
      return SmallVector<Value>();
    });
  }

  /// scf.if without results.
  void ifThen(Value condition, function_ref<void()> body) {
    // The op exists before its body is built, so the body can reach the
    // enclosing function (SimtEmitter::shared allocates at its entry).
    auto op = scf::IfOp::create(b, condition, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    body();
  }
  /// scf.if yielding the values of `thenBody` or `elseBody` (same types).
  SmallVector<Value> ifElse(Value condition,
                            function_ref<SmallVector<Value>()> thenBody,
                            function_ref<SmallVector<Value>()> elseBody) {
    auto region = [&](function_ref<SmallVector<Value>()> body) {
      return [&, body](OpBuilder &nested, Location) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToEnd(nested.getInsertionBlock());
        scf::YieldOp::create(b, body());
      };
    };
    auto op =
        scf::IfOp::create(b, condition, region(thenBody), region(elseBody));
    return SmallVector<Value>(op.getResults());
  }
  /// scf.while: runs `body(iters)` (returning the next iters) while
  /// `condition(iters)` holds; returns the final iters.
  SmallVector<Value>
  whileLoop(ValueRange inits, function_ref<Value(ValueRange iters)> condition,
            function_ref<SmallVector<Value>(ValueRange iters)> body) {
    SmallVector<Type> types(inits.getTypes());
    auto op = scf::WhileOp::create(
        b, types, inits,
        [&](OpBuilder &nested, Location, ValueRange iters) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToEnd(nested.getInsertionBlock());
          scf::ConditionOp::create(b, condition(iters), iters);
        },
        [&](OpBuilder &nested, Location, ValueRange iters) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToEnd(nested.getInsertionBlock());
          scf::YieldOp::create(b, body(iters));
        });
    return SmallVector<Value>(op.getResults());
  }

  /// i32 values (indices into keys, tree nodes, token ids).
  Value i32(int64_t value) {
    return arith::ConstantIntOp::create(b, b.getI32Type(), value);
  }
  Value toIndex(Value i32Value) {
    return arith::IndexCastOp::create(b, b.getIndexType(), i32Value);
  }
  Value toI32(Value indexValue) {
    return arith::IndexCastOp::create(b, b.getI32Type(), indexValue);
  }
  /// An element of an integer memref, as it is stored.
  Value loadInt(Value memref, ValueRange indices) {
    return memref::LoadOp::create(b, memref, indices);
  }
  Value andI(Value x, Value y) { return arith::AndIOp::create(b, x, y); }
  Value orI(Value x, Value y) { return arith::OrIOp::create(b, x, y); }

  /// `c * tanh(s / c)` when the softcap `c` is set.
  Value softcap(Value s, double cap) {
    if (cap <= 0.0)
      return s;
    Value c = s.getType() == f32 ? scalar(cap) : splat(cap);
    Value inv = s.getType() == f32 ? scalar(1.0 / cap) : splat(1.0 / cap);
    return fmul(c, math::TanhOp::create(b, fmul(s, inv)));
  }
  /// The max to exponentiate against: m, or 0 where m = -inf (an empty row
  /// so far), so that exp(-inf - safe) = 0 and never NaN.
  Value safeMax(Value m) {
    bool isVector = m.getType() != f32;
    Value negInf = isVector ? splat(kNegInf) : scalar(kNegInf);
    Value zero = isVector ? splat(0.0) : scalar(0.0);
    return select(fcmp(arith::CmpFPredicate::OEQ, m, negInf), zero, m);
  }
  /// The vector whose lane i is the sum of the lanes of `vectors[i]`
  /// (`width` vectors): a transpose-and-add tree of log2(width) levels of
  /// shuffles, instead of one horizontal reduction per vector.
  Value sumEach(ArrayRef<Value> input) {
    std::vector<Value> vectors(input.begin(), input.end());
    for (int64_t stride = 1; vectors.size() > 1; stride *= 2) {
      SmallVector<int64_t> even(width), odd(width);
      for (int64_t lane = 0; lane < width; ++lane) {
        int64_t block = lane / (2 * stride), r = lane % (2 * stride);
        even[lane] = r < stride ? block * 2 * stride + r
                                : width + block * 2 * stride + r - stride;
        odd[lane] = even[lane] + stride;
      }
      std::vector<Value> next;
      for (size_t i = 0; i + 1 < vectors.size(); i += 2)
        next.push_back(fadd(
            vector::ShuffleOp::create(b, vectors[i], vectors[i + 1], even),
            vector::ShuffleOp::create(b, vectors[i], vectors[i + 1], odd)));
      vectors = std::move(next);
    }
    return vectors.front();
  }
  /// The sum of the lanes of `v`, as a scalar.
  Value sumLanes(Value v) { return reduceLanes(v, /*isMax=*/false); }
  /// The largest lane of `v` (NaN if any lane is NaN), as a scalar.
  Value maxLanes(Value v) { return reduceLanes(v, /*isMax=*/true); }
  /// log2(width) levels of "fold the upper half onto the lower". A
  /// vector.reduction without reassociation lowers to a chain of width
  /// scalar adds, and a maximumf one to compare-and-branch code on x86.
  Value reduceLanes(Value v, bool isMax) {
    for (int64_t half = width / 2; half >= 1; half /= 2) {
      SmallVector<int64_t> upper(width);
      for (int64_t lane = 0; lane < width; ++lane)
        upper[lane] = (lane + half) % width;
      Value folded = vector::ShuffleOp::create(b, v, v, upper);
      v = isMax ? fmax(v, folded) : fadd(v, folded);
    }
    return vector::ExtractOp::create(b, v, 0);
  }
  /// 1 / l for a row that saw a key (l > 0), 0 for an empty row.
  Value reciprocalOrZero(Value l) {
    Value nonEmpty = fcmp(arith::CmpFPredicate::OGT, l, scalar(0.0));
    return select(nonEmpty, fdiv(scalar(1.0), l), scalar(0.0));
  }
  /// The log-sum-exp m + log l of a row, -inf for an empty row (l = 0).
  Value logSumExp(Value m, Value l) {
    Value nonEmpty = fcmp(arith::CmpFPredicate::OGT, l, scalar(0.0));
    return select(nonEmpty, fadd(m, math::LogOp::create(b, l)),
                  scalar(kNegInf));
  }
  /// How a softmax row ends, from its running max `m` and its sum `l` of
  /// exp(s - m): `scale`, which turns the row's sum of exp(s - m) v into o,
  /// and the row's log-sum-exp `lse`.
  struct RowEnd {
    Value scale, lse;
  };
  /// Without a sink: 1 / l and m + log l (0 and -inf for an empty row).
  /// An attention sink (a logit in the denominator with no value; null for
  /// none) makes the denominator l + exp(sink - m): o is scaled by
  /// sigmoid(lse - sink) and lse becomes logaddexp(lse, sink). Written from
  /// lse, so that an empty row stays 0 (its lse is the sink) and a sink of
  /// -inf changes nothing.
  RowEnd endSoftmaxRow(Value m, Value l, Value sink = Value()) {
    RowEnd end{reciprocalOrZero(l), logSumExp(m, l)};
    if (!sink)
      return end;
    Value nonEmpty = fcmp(arith::CmpFPredicate::OGT, l, scalar(0.0));
    Value one = scalar(1.0);
    Value kept = fdiv(one, fadd(one, exp(fsub(sink, end.lse))));
    end.scale = select(nonEmpty, fmul(end.scale, kept), scalar(0.0));
    Value hi = fmax(end.lse, sink);
    Value lo = arith::MinimumFOp::create(b, end.lse, sink);
    Value merged =
        fadd(hi, math::LogOp::create(b, fadd(one, exp(fsub(lo, hi)))));
    Value none = fcmp(arith::CmpFPredicate::OEQ, hi, scalar(kNegInf));
    end.lse = select(none, scalar(kNegInf), merged);
    return end;
  }
  /// The i32 vector [0, 1, ..., width - 1].
  Value laneIds() {
    SmallVector<int32_t> ids(width);
    for (int64_t lane = 0; lane < width; ++lane)
      ids[lane] = static_cast<int32_t>(lane);
    return arith::ConstantOp::create(
        b, DenseElementsAttr::get(VectorType::get({width}, b.getI32Type()),
                                  ArrayRef<int32_t>(ids)));
  }
  /// The constant `value` shaped as `like`: a vector of f32, or f32.
  Value constantLike(Value like, double value) {
    auto type = dyn_cast<VectorType>(like.getType());
    if (!type)
      return scalar(value);
    return arith::ConstantOp::create(
        b, DenseElementsAttr::get(type, static_cast<float>(value)));
  }
  /// x * sigmoid(g), vectors or scalars.
  Value sigmoidGate(Value x, Value g) {
    return fdiv(x,
                fadd(constantLike(x, 1.0), exp(fsub(constantLike(g, 0.0), g))));
  }
  /// x * act(z), an output gate's activation of its logits: sigmoid(z), or
  /// silu(z) = z sigmoid(z).
  Value activationGate(Value x, GateActivation activation, Value z) {
    if (activation == GateActivation::Sigmoid)
      return sigmoidGate(x, z);
    return sigmoidGate(fmul(x, z), z);
  }
};

/// A binary heap over items kept in slots [0, size) of some buffers, for
/// the selections' budgets and sorts (SPEC §1.3). An item is one or more
/// values (a block index; a score and a key index); `worse(a, b)` orders
/// them and the root is the worst item, so a heap of k items keeps the k
/// best seen so far and a heap sort leaves the items best first. Where
/// the items live (a scratch row, a row of a temporary) is the kernel's.
struct HeapStorage {
  function_ref<SmallVector<Value>(Value slot)> load;
  function_ref<void(Value slot, ValueRange item)> store;
  function_ref<Value(ValueRange a, ValueRange b)> worse;
};

/// Moves the item at slot `start` down to its place in [0, size).
void siftDown(KernelEmitter &e, const HeapStorage &heap, Value size,
              Value start);
/// Makes slots [0, size) a heap.
void heapify(KernelEmitter &e, const HeapStorage &heap, Value size);
/// Sorts slots [0, size) best first (a heap sort: the worst goes last).
void sortBestFirst(KernelEmitter &e, const HeapStorage &heap, Value size);

} // namespace mlir::attn

#endif // ATTN_PASSES_KERNELS_KERNELEMITTER_H
