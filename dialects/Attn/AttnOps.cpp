//===- AttnOps.cpp - Ops of the attn dialect ------------------------------===//
//
// Result type inference, verifiers and AttentionOpInterface methods.
//
// Inference checks only what it needs to build the result types (ranks and
// positive sizes); the verifiers check everything else. Both report through
// the named checks of ShapeChecks.h.
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnOps.h"
#include "Attn/Limits.h"
#include "Attn/ShapeChecks.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <cmath>

using namespace mlir;
using namespace mlir::attn;

//===----------------------------------------------------------------------===//
// Layouts: the name of every dimension of every operand, for messages.
//===----------------------------------------------------------------------===//

namespace {
const char *const kQueryDims[] = {"B", "H", "Lq", "D"};
const char *const kPagedKeyDims[] = {"NP", "P", "Hkv", "D"};
const char *const kPagedValueDims[] = {"NP", "P", "Hkv", "Dv"};
const char *const kPageTableDims[] = {"B", "MP"};
const char *const kKeyDims[] = {"B", "Hkv", "Lk", "D"};
const char *const kValueDims[] = {"B", "Hkv", "Lk", "Dv"};
const char *const kGateDims[] = {"B", "H", "Lq", "Dv or 1"};
const char *const kSelectionDims[] = {"B", "H", "Lq", "N"};
const char *const kMetaDims[] = {"B", "Hkv", "NB", "2", "D"};
const char *const kPagedMetaDims[] = {"NP", "2", "Hkv", "D"};
const char *const kPackedSelectionDims[] = {"T", "H", "N"};
const char *const kTreeQueryDims[] = {"B", "H", "T", "D"};
const char *const kTreeKeyDims[] = {"B", "Hkv", "P+T", "D"};
const char *const kTreeValueDims[] = {"B", "Hkv", "P+T", "Dv"};
const char *const kTreeDims[] = {"B", "T"};
const char *const kBatchDims[] = {"B"};
const char *const kRowDims[] = {"B", "H", "L", "Dv"};
const char *const kRowGateDims[] = {"B", "H", "L", "Dv or 1"};
const char *const kFeatureDims[] = {"Dv"};
const char *const kWeightDims[] = {"Dv or H*Dv"};
const char *const kSkipScaleDims[] = {"H"};
const char *const kRecQueryDims[] = {"B", "Hk", "L", "Dk"};
const char *const kRecValueDims[] = {"B", "Hv", "L", "Dv"};
const char *const kRecScalarGateDims[] = {"B", "Hv", "L"};
const char *const kRecVectorGateDims[] = {"B", "Hv", "L", "Dk"};
const char *const kRecStateDims[] = {"B", "Hv", "Dk", "Dv"};
const char *const kRecTreeDims[] = {"B", "L"};
// A ragged batch (SPEC §8): per-step tensors packed token-major.
const char *const kPackedQueryDims[] = {"T", "Hk", "Dk"};
const char *const kPackedValueDims[] = {"T", "Hv", "Dv"};
const char *const kPackedScalarGateDims[] = {"T", "Hv"};
const char *const kPackedVectorGateDims[] = {"T", "Hv", "Dk"};
const char *const kPoolDims[] = {"N", "Hv", "Dk", "Dv"};
const char *const kOffsetDims[] = {"B+1"};
const char *const kRowsDims[] = {"T", "H", "Dv"};
const char *const kRowsGateDims[] = {"T", "H", "Dv or 1"};
const char *const kPackedSoftmaxQueryDims[] = {"T", "H", "D"};
const char *const kPackedKeyDims[] = {"Tk", "Hkv", "D"};
const char *const kPackedSoftmaxValueDims[] = {"Tk", "Hkv", "Dv"};
} // namespace

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A diagnostic emitter for type inference, which runs before the op exists:
/// it writes at the op's location with the prefix emitOpError would use.
static auto inferenceErrorAt(MLIRContext *context,
                             std::optional<Location> location,
                             StringRef opName) {
  return [=]() {
    InFlightDiagnostic diag =
        emitError(location ? *location : UnknownLoc::get(context));
    diag << "'" << opName << "' op ";
    return diag;
  };
}

/// An inherent attribute as inference sees it: builders have already stored
/// it in the op's properties, while the parser still holds it in the
/// attribute dictionary.
template <typename AttrT>
static AttrT inherentAttr(Attribute fromProperties, DictionaryAttr attributes,
                          StringRef name) {
  if (auto attr = llvm::dyn_cast_or_null<AttrT>(fromProperties))
    return attr;
  return attributes ? attributes.getAs<AttrT>(name) : AttrT();
}

/// Whether a softmax-attention op being inferred returns its lse.
template <typename AdaptorT> static bool returnsLse(AdaptorT &adaptor) {
  return static_cast<bool>(
      inherentAttr<UnitAttr>(adaptor.getProperties().return_lse,
                             adaptor.getAttributes(), "return_lse"));
}

static std::optional<double> toDouble(std::optional<APFloat> value) {
  if (!value)
    return std::nullopt;
  return value->convertToDouble();
}

static RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

/// Checks that `value` is a ranked tensor with as many dims as `dims` names,
/// and returns it named; used by inference before anything else is known.
static FailureOr<NamedTensor> namedWithRank(EmitErrorFn emitError,
                                            StringRef name, Value value,
                                            ArrayRef<const char *> dims) {
  auto type = llvm::dyn_cast<RankedTensorType>(value.getType());
  if (!type)
    return emitError() << "'" << name << "' must be a ranked tensor, got "
                       << value.getType();
  NamedTensor t{name, type, dims};
  if (failed(checkRank(emitError, t)))
    return failure();
  return t;
}

static LogicalResult checkSoftcap(EmitErrorFn emitError, double softcap) {
  if (std::isfinite(softcap) && softcap >= 0.0)
    return success();
  return emitError() << "'softcap' must be finite and >= 0 (0 disables it), "
                        "got "
                     << softcap;
}

/// The results of the softmax-attention ops: `output [B, H, Lq, Dv]` in the
/// query's element type and, with `return_lse`, `lse [B, H, Lq]` in f32.
static LogicalResult inferAttentionResults(EmitErrorFn emitError, Value query,
                                           Value value, bool returnLse,
                                           ArrayRef<const char *> queryDims,
                                           ArrayRef<const char *> valueDims,
                                           SmallVectorImpl<Type> &results) {
  FailureOr<NamedTensor> q =
      namedWithRank(emitError, "query", query, queryDims);
  FailureOr<NamedTensor> v =
      namedWithRank(emitError, "value", value, valueDims);
  if (failed(q) || failed(v))
    return failure();
  Type elementType = q->type.getElementType();
  // Dv: the value's last dim ([B, Hkv, Lk, Dv], a paged cache's [NP, P,
  // Hkv, Dv] or packed [Tk, Hkv, Dv]).
  const int64_t valueDim = v->dim(valueDims.size() - 1);
  results.push_back(
      tensorOf({q->dim(0), q->dim(1), q->dim(2), valueDim}, elementType));
  if (returnLse)
    results.push_back(tensorOf({q->dim(0), q->dim(1), q->dim(2)},
                               Float32Type::get(query.getContext())));
  return success();
}

/// Checks the sigmoid gate operand of an output `[B, H, L, Dv]` (or packed
/// `[T, H, Dv]`): same element type, the rows' leading dims and a last dim
/// of Dv (elementwise) or 1 (headwise).
static LogicalResult verifyGateOperand(EmitErrorFn emitError,
                                       const NamedTensor &gate,
                                       const NamedTensor &rows,
                                       const NamedTensor &features,
                                       unsigned featureDim) {
  if (failed(checkRank(emitError, gate)) ||
      failed(checkSameElementType(emitError, gate, rows)))
    return failure();
  const unsigned last = gate.type.getRank() - 1;
  for (unsigned d = 0; d < last; ++d)
    if (failed(checkSameDim(emitError, gate, d, rows, d)))
      return failure();
  if (gate.isStatic(last) && gate.dim(last) != 1 &&
      features.isStatic(featureDim) &&
      gate.dim(last) != features.dim(featureDim))
    return emitError() << "'" << gate.name << "' dim " << last
                       << " must be 1 (headwise gate) or match '"
                       << features.name << "' dim " << featureDim << " ("
                       << features.dims[featureDim]
                       << ", elementwise gate): expected 1 or "
                       << features.dim(featureDim) << ", got "
                       << gate.dim(last);
  return success();
}

/// Checks Mamba2's skip of an output gate: `x` shaped as the gated rows
/// (`rowDims`), `d [H]`; both or neither.
static LogicalResult verifySkipOperands(EmitErrorFn emitError, Value input,
                                        Value scale, const NamedTensor &rows,
                                        ArrayRef<const char *> rowDims) {
  if (!input != !scale)
    return emitError() << "'skip' takes both the input x and the scale d";
  if (!input)
    return success();
  NamedTensor x = named("skip input", input, rowDims);
  NamedTensor d = named("skip scale", scale, kSkipScaleDims);
  if (failed(checkRank(emitError, x)) || failed(checkRank(emitError, d)) ||
      failed(checkSameDim(emitError, d, 0, rows, 1)))
    return failure();
  for (unsigned dim = 0; dim < rowDims.size(); ++dim)
    if (failed(checkSameDim(emitError, x, dim, rows, dim)))
      return failure();
  return success();
}

/// Checks `query [B, H, Lq, D]`, `key [B, Hkv, Lk, D]`,
/// `value [B, Hkv, Lk, Dv]`, the optional gate and the score modifier, as
/// shared by every softmax-attention op.
static LogicalResult
verifySoftmaxAttention(EmitErrorFn emitError, const NamedTensor &q,
                       const NamedTensor &k, const NamedTensor &v, Value gate,
                       std::optional<double> scale, double softcap) {
  for (const NamedTensor *t : {&q, &k, &v})
    if (failed(checkRank(emitError, *t)))
      return failure();
  for (const NamedTensor *t : {&q, &k, &v})
    for (unsigned d : {1u, 3u})
      if (failed(checkStaticDim(emitError, *t, d)))
        return failure();
  if (failed(checkSameElementType(emitError, k, q)) ||
      failed(checkSameElementType(emitError, v, q)) ||
      failed(checkSameDim(emitError, k, 0, q, 0)) ||
      failed(checkSameDim(emitError, v, 0, q, 0)) ||
      failed(checkSameDim(emitError, k, 3, q, 3)) ||
      failed(checkSameDim(emitError, v, 1, k, 1)) ||
      failed(checkSameDim(emitError, v, 2, k, 2)) ||
      failed(checkDimMultiple(emitError, q, k, 1)))
    return failure();
  if (gate && failed(verifyGateOperand(
                  emitError, named("gate", gate, kGateDims), q, v, 3)))
    return failure();
  return failure(failed(checkScale(emitError, scale)) ||
                 failed(checkSoftcap(emitError, softcap)));
}

/// A causal (or chunked) mask places query row i at Lk - Lq + i, which must
/// not be negative: such attention needs Lq <= Lk.
static LogicalResult verifyMaskFitsLengths(EmitErrorFn emitError, MaskAttr mask,
                                           const NamedTensor &q,
                                           const NamedTensor &k) {
  if (!mask.requiresQueriesWithinKeys() || !q.isStatic(2) || !k.isStatic(2) ||
      q.dim(2) <= k.dim(2))
    return success();
  return emitError() << "a " << stringifyMaskKind(mask.getKind())
                     << " mask needs 'query' dim 2 (Lq) <= 'key' dim "
                        "2 (Lk), got Lq = "
                     << q.dim(2) << " and Lk = " << k.dim(2);
}

/// An op's attention sinks, when it has them, are one f32 logit per query
/// head: [H], H being dim 1 of the query ([B, H, Lq, D] or [T, H, D]).
template <typename OpTy> static LogicalResult verifySinks(OpTy op) {
  Value sinks = op.getSinks();
  if (!sinks)
    return success();
  auto type = cast<RankedTensorType>(sinks.getType());
  int64_t heads = op.getQuery().getType().getDimSize(1);
  if (type.getRank() == 1 && type.getDimSize(0) == heads &&
      !ShapedType::isDynamic(heads))
    return success();
  return op.emitOpError() << "'sinks' must hold one logit per query head, ["
                          << heads << "], got " << type;
}

/// The interface answers shared by the softmax-attention ops (sdpa,
/// sparse_sdpa, tree_sdpa): their scale, softcap and sigmoid-gate epilogue.
template <typename OpTy> static double softmaxScoreScale(OpTy op) {
  // D is the last dim of [B, H, Lq, D] and of a ragged batch's [T, H, D].
  RankedTensorType query = op.getQuery().getType();
  return resolveScale(toDouble(op.getScale()),
                      query.getDimSize(query.getRank() - 1));
}
template <typename OpTy> static Epilogue softmaxEpilogue(OpTy op) {
  return op.getGate() ? Epilogue::SigmoidGate : Epilogue::None;
}
template <typename OpTy>
static SmallVector<Value> softmaxEpilogueOperands(OpTy op) {
  if (Value gate = op.getGate())
    return {gate};
  return {};
}

/// Epilogue fusion for the softmax ops: a clone that takes the sigmoid
/// gate's logits as its `gate` operand. The gate op verified that the logits
/// fit the output, so the fused op verifies too.
template <typename OpTy>
static FailureOr<Operation *> fuseSigmoidGate(OpTy op, RewriterBase &rewriter,
                                              EpilogueOpInterface epilogue) {
  auto gate = llvm::dyn_cast<GateOp>(epilogue.getOperation());
  if (!gate || !gate.isAttentionGate() || op.getGate())
    return failure();
  auto fused = llvm::cast<OpTy>(rewriter.clone(*op.getOperation()));
  rewriter.modifyOpInPlace(
      fused, [&] { fused.getGateMutable().assign(gate.getGate()); });
  return fused.getOperation();
}

/// The block arguments of the variant regions (SPEC §7).
enum class VariantRegion { Score, Mask };

static StringRef regionName(VariantRegion kind) {
  return kind == VariantRegion::Score ? "score_mod" : "mask_mod";
}

static std::string typeList(TypeRange types) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "(";
  llvm::interleaveComma(types, os);
  os << ")";
  return text;
}

/// Checks one variant region: empty, or a single block taking
/// `(s: f32, b, h, qp, kp: index)` (score_mod) or `(b, h, qp, kp: index)`
/// (mask_mod) whose ops are `arith` and `math` on scalars and
/// `tensor.extract` of tensors defined above, ending in an `attn.yield` of
/// an f32 (score_mod) or an i1 (mask_mod). A static dim read at the head
/// index `h` must hold every one of the `numHeads` heads.
static LogicalResult verifyVariantRegion(Operation *op, Region &region,
                                         VariantRegion kind, int64_t numHeads) {
  if (region.empty())
    return success();
  StringRef name = regionName(kind);
  MLIRContext *context = op->getContext();
  Type f32 = Float32Type::get(context), index = IndexType::get(context);
  SmallVector<Type> expected;
  if (kind == VariantRegion::Score)
    expected.push_back(f32);
  expected.append(4, index);
  Block &block = region.front();
  if (!llvm::equal(block.getArgumentTypes(), expected))
    return op->emitOpError()
           << "'" << name << "' must take " << typeList(expected) << " ("
           << (kind == VariantRegion::Score ? "s, " : "")
           << "b, h, qp, kp), got " << typeList(block.getArgumentTypes());
  Value head = block.getArgument(kind == VariantRegion::Score ? 2 : 1);

  for (Operation &nested : block) {
    bool scalarCode =
        isa<arith::ArithDialect, math::MathDialect>(nested.getDialect());
    if (!scalarCode && !isa<tensor::ExtractOp, YieldOp>(nested))
      return op->emitOpError()
             << "'" << name
             << "' may hold only arith, math and tensor.extract ops and "
                "attn.yield, got '"
             << nested.getName() << "'";
    if (scalarCode)
      for (Type type : llvm::concat<Type>(nested.getOperandTypes(),
                                          nested.getResultTypes()))
        if (!type.isIntOrIndexOrFloat())
          return op->emitOpError()
                 << "'" << name << "' computes on scalars only: '"
                 << nested.getName() << "' has a value of type " << type;
    for (OpOperand &use : nested.getOpOperands()) {
      Value operand = use.get();
      if (region.isAncestor(operand.getParentRegion()))
        continue;
      // Canonicalization hoists a region's constants out of it.
      if (matchPattern(operand, m_Constant()) &&
          operand.getType().isIntOrIndexOrFloat())
        continue;
      auto extract = dyn_cast<tensor::ExtractOp>(nested);
      if (!extract || use.getOperandNumber() != 0)
        return op->emitOpError()
               << "'" << name << "' reads only tensors defined above it, "
               << "with tensor.extract, and scalar constants; operand #"
               << use.getOperandNumber() << " of '" << nested.getName()
               << "' is a value of type " << operand.getType()
               << " defined outside it";
    }
    if (auto extract = dyn_cast<tensor::ExtractOp>(nested)) {
      RankedTensorType type = extract.getTensor().getType();
      Type element = type.getElementType();
      if (!element.isF32() && !element.isF16() && !element.isBF16() &&
          !element.isInteger(32))
        return op->emitOpError()
               << "'" << name << "' reads a " << type
               << "; region tensors hold f32, f16, bf16 or i32";
      for (auto [dim, at] : llvm::enumerate(extract.getIndices()))
        if (at == head && !type.isDynamicDim(dim) &&
            type.getDimSize(dim) < numHeads)
          return op->emitOpError()
                 << "'" << name << "' reads dim " << dim << " of a " << type
                 << " at the head index h, which reaches " << numHeads - 1
                 << " (H = " << numHeads << ")";
    }
  }
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  Type yieldType =
      kind == VariantRegion::Score ? f32 : IntegerType::get(context, 1);
  if (!yield || yield.getValue().getType() != yieldType)
    return op->emitOpError()
           << "'" << name << "' must end in attn.yield of an " << yieldType
           << (kind == VariantRegion::Score ? " (the modified score)"
                                            : " (whether the key is visible)");
  return success();
}

/// Both variant regions of a softmax-attention op.
template <typename OpTy> static LogicalResult verifyVariantRegions(OpTy op) {
  int64_t numHeads = op.getQuery().getType().getDimSize(1);
  return failure(failed(verifyVariantRegion(op, op.getScoreMod(),
                                            VariantRegion::Score, numHeads)) ||
                 failed(verifyVariantRegion(op, op.getMaskMod(),
                                            VariantRegion::Mask, numHeads)));
}

/// Names the regions' block arguments after SPEC §7 in the printed IR.
static void nameVariantArguments(Operation *op, OpAsmSetValueNameFn setName) {
  static const char *const scoreNames[] = {"s", "b", "h", "qp", "kp"};
  for (auto [index, region] : llvm::enumerate(op->getRegions())) {
    if (region.empty())
      continue;
    // mask_mod's arguments are score_mod's but the score.
    ArrayRef<const char *> names(scoreNames);
    if (index != 0)
      names = names.drop_front();
    for (auto [arg, name] : llvm::zip(region.front().getArguments(), names))
      setName(arg, name);
  }
}

static Region *nonEmpty(Region &region) {
  return region.empty() ? nullptr : &region;
}

//===----------------------------------------------------------------------===//
// SdpaOp
//===----------------------------------------------------------------------===//

/// The results of attention over a ragged batch: output [T, H, Dv] and
/// lse [T, H]; Dv is the last dim of the packed values and of a paged
/// cache alike.
static LogicalResult inferPackedResults(EmitErrorFn emitError, Value query,
                                        Value value, bool withLse,
                                        SmallVectorImpl<Type> &results) {
  FailureOr<NamedTensor> q =
      namedWithRank(emitError, "query", query, kPackedSoftmaxQueryDims);
  auto values = llvm::dyn_cast<RankedTensorType>(value.getType());
  if (failed(q))
    return failure();
  if (!values || values.getRank() < 1)
    return emitError() << "'value' must be a ranked tensor, got "
                       << value.getType();
  results.push_back(
      tensorOf({q->dim(0), q->dim(1), values.getDimSize(values.getRank() - 1)},
               q->type.getElementType()));
  if (withLse)
    results.push_back(
        tensorOf({q->dim(0), q->dim(1)}, Float32Type::get(query.getContext())));
  return success();
}

LogicalResult
SdpaOp::inferReturnTypes(MLIRContext *context, std::optional<Location> location,
                         Adaptor adaptor,
                         SmallVectorImpl<Type> &inferredReturnTypes) {
  auto emitError = inferenceErrorAt(context, location, getOperationName());
  if (!adaptor.getCuSeqlensQ())
    return inferAttentionResults(emitError, adaptor.getQuery(),
                                 adaptor.getValue(), returnsLse(adaptor),
                                 kQueryDims, kValueDims, inferredReturnTypes);
  return inferPackedResults(emitError, adaptor.getQuery(), adaptor.getValue(),
                            returnsLse(adaptor), inferredReturnTypes);
}

/// Checks a ragged batch's offsets `[B+1]`, and when `batchOf` (`[B]`, named
/// `batchName`) is given, that they number one more than its elements.
static LogicalResult verifyOffsets(EmitErrorFn emitError, Value offsets,
                                   StringRef name, Value batchOf,
                                   StringRef batchName) {
  NamedTensor cu = named(name, offsets, kOffsetDims);
  if (failed(checkRank(emitError, cu)))
    return failure();
  if (!batchOf)
    return success();
  NamedTensor batch = named(batchName, batchOf, kBatchDims);
  if (failed(checkRank(emitError, batch)))
    return failure();
  if (cu.isStatic(0) && batch.isStatic(0) && cu.dim(0) != batch.dim(0) + 1)
    return emitError() << "'" << name << "' must have one more element than '"
                       << batchName << "' (B + 1 offsets of B sequences), got "
                       << cu.dim(0) << " and " << batch.dim(0);
  return success();
}

/// Checks a paged cache (SPEC §8): `key [NP, P, Hkv, D]`, `value [NP, P,
/// Hkv, Dv]`, `page_table [B, MP]` and `seq_lens [B]` beside `query [B, H,
/// Lq, D]`.
static LogicalResult verifyPagedCache(EmitErrorFn emitError,
                                      const NamedTensor &q, Value key,
                                      Value value, Value pageTable,
                                      Value seqLens, Value gate,
                                      std::optional<double> scale,
                                      double softcap, Value queryOffsets) {
  // The queries [B, H, Lq, D], or packed [T, H, D] with B + 1 offsets.
  const unsigned qFeature = queryOffsets ? 2 : 3;
  const NamedTensor k = named("key", key, kPagedKeyDims);
  const NamedTensor v = named("value", value, kPagedValueDims);
  const NamedTensor table = named("page_table", pageTable, kPageTableDims);
  const NamedTensor lengths = named("seq_lens", seqLens, kBatchDims);
  for (const NamedTensor *t : {&q, &k, &v, &table, &lengths})
    if (failed(checkRank(emitError, *t)))
      return failure();
  for (unsigned d : {1u, qFeature})
    if (failed(checkStaticDim(emitError, q, d)))
      return failure();
  for (const NamedTensor *t : {&k, &v})
    for (unsigned d : {1u, 2u, 3u})
      if (failed(checkStaticDim(emitError, *t, d)))
        return failure();
  if (failed(checkSameElementType(emitError, k, q)) ||
      failed(checkSameElementType(emitError, v, q)) ||
      failed(checkSameDim(emitError, k, 3, q, qFeature)) ||
      failed(checkSameDim(emitError, v, 0, k, 0)) ||
      failed(checkSameDim(emitError, v, 1, k, 1)) ||
      failed(checkSameDim(emitError, v, 2, k, 2)))
    return failure();
  // B: q's dim 0, or one less than the queries' offsets in a ragged batch.
  if (!queryOffsets && failed(checkSameDim(emitError, table, 0, q, 0)))
    return failure();
  if (failed(checkSameDim(emitError, lengths, 0, table, 0)))
    return failure();
  if (queryOffsets &&
      failed(verifyOffsets(emitError, queryOffsets, "cu_seqlens_q", seqLens,
                           "seq_lens")))
    return failure();
  if (q.dim(1) % k.dim(2) != 0)
    return emitError() << "'query' dim 1 (H) must be a multiple of 'key' "
                          "dim 2 (Hkv), got "
                       << q.dim(1) << " and " << k.dim(2);
  // The gate's feature dim is the value's (dim 3 of the cache).
  if (gate && failed(verifyGateOperand(
                  emitError,
                  named("gate", gate,
                        queryOffsets ? ArrayRef<const char *>(kRowsGateDims)
                                     : ArrayRef<const char *>(kGateDims)),
                  q, v, 3)))
    return failure();
  return failure(failed(checkScale(emitError, scale)) ||
                 failed(checkSoftcap(emitError, softcap)));
}

/// Checks a ragged batch's packed keys (SPEC §8): `key [Tk, Hkv, D]` and
/// `value [Tk, Hkv, Dv]` with `cu_seqlens_k [B+1]`, beside packed queries
/// `query [T, H, D]` with `cu_seqlens_q [B+1]`, or, without `queryOffsets`,
/// a draft tree's `query [B, H, T, D]`.
static LogicalResult
verifyPackedKeys(EmitErrorFn emitError, const NamedTensor &q, Value key,
                 Value value, Value gate, Value queryOffsets, Value keyOffsets,
                 std::optional<double> scale, double softcap) {
  const unsigned qFeature = queryOffsets ? 2 : 3;
  const NamedTensor k = named("key", key, kPackedKeyDims);
  const NamedTensor v = named("value", value, kPackedSoftmaxValueDims);
  for (const NamedTensor *t : {&q, &k, &v})
    if (failed(checkRank(emitError, *t)))
      return failure();
  for (unsigned d : {1u, qFeature})
    if (failed(checkStaticDim(emitError, q, d)))
      return failure();
  for (const NamedTensor *t : {&k, &v})
    for (unsigned d : {1u, 2u})
      if (failed(checkStaticDim(emitError, *t, d)))
        return failure();
  if (failed(checkSameElementType(emitError, k, q)) ||
      failed(checkSameElementType(emitError, v, q)) ||
      failed(checkSameDim(emitError, k, 2, q, qFeature)) ||
      failed(checkSameDim(emitError, v, 0, k, 0)) ||
      failed(checkSameDim(emitError, v, 1, k, 1)) ||
      failed(checkDimMultiple(emitError, q, k, 1)) ||
      failed(verifyOffsets(emitError, keyOffsets, "cu_seqlens_k", {}, "")))
    return failure();
  const NamedTensor keys = named("cu_seqlens_k", keyOffsets, kOffsetDims);
  if (queryOffsets) {
    const NamedTensor queries =
        named("cu_seqlens_q", queryOffsets, kOffsetDims);
    if (failed(checkSameDim(emitError, keys, 0, queries, 0)))
      return failure();
  } else if (keys.isStatic(0) && q.isStatic(0) && keys.dim(0) != q.dim(0) + 1) {
    return emitError() << "'cu_seqlens_k' must hold B + 1 offsets for the "
                          "B = "
                       << q.dim(0) << " trees of 'query', got " << keys.dim(0);
  }
  if (gate && failed(verifyGateOperand(
                  emitError,
                  named("gate", gate,
                        queryOffsets ? ArrayRef<const char *>(kRowsGateDims)
                                     : ArrayRef<const char *>(kGateDims)),
                  q, v, 2)))
    return failure();
  return failure(failed(checkScale(emitError, scale)) ||
                 failed(checkSoftcap(emitError, softcap)));
}

LogicalResult SdpaOp::verify() {
  if (failed(verifySinks(*this)))
    return failure();
  auto emit = [&]() { return emitOpError(); };
  if (static_cast<bool>(getPageTable()) != static_cast<bool>(getSeqLens()))
    return emitOpError() << "a paged cache needs both 'page_table' and "
                            "'seq_lens'";
  Value queryOffsets = getCuSeqlensQ(), keyOffsets = getCuSeqlensK();
  if (queryOffsets) {
    if (failed(verifyOffsets(emit, queryOffsets, "cu_seqlens_q", {}, "")))
      return failure();
    NamedTensor q = named("query", getQuery(), kPackedSoftmaxQueryDims);
    if (getPageTable() && keyOffsets)
      return emitOpError() << "a ragged batch over a paged cache takes the "
                              "queries' offsets alone: the cache's 'seq_lens' "
                              "place the keys";
    if (getPageTable())
      return verifyPagedCache(emit, q, getKey(), getValue(), getPageTable(),
                              getSeqLens(), getGate(), toDouble(getScale()),
                              getSoftcap().convertToDouble(), queryOffsets);
    if (!keyOffsets)
      return emitOpError() << "a ragged batch needs the keys' offsets "
                              "'cu_seqlens_k' (or a paged cache)";
    return verifyPackedKeys(emit, q, getKey(), getValue(), getGate(),
                            queryOffsets, keyOffsets, toDouble(getScale()),
                            getSoftcap().convertToDouble());
  }
  if (getPageTable())
    return verifyPagedCache(emit, named("query", getQuery(), kQueryDims),
                            getKey(), getValue(), getPageTable(), getSeqLens(),
                            getGate(), toDouble(getScale()),
                            getSoftcap().convertToDouble(), Value());
  NamedTensor q = named("query", getQuery(), kQueryDims);
  NamedTensor k = named("key", getKey(), kKeyDims);
  NamedTensor v = named("value", getValue(), kValueDims);
  if (failed(verifySoftmaxAttention(emit, q, k, v, getGate(),
                                    toDouble(getScale()),
                                    getSoftcap().convertToDouble())))
    return failure();
  return verifyMaskFitsLengths(emit, getMask(), q, k);
}

void SdpaOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  setName(getOutput(), "output");
  if (Value lse = getLse())
    setName(lse, "lse");
}

void SdpaOp::getAsmBlockArgumentNames(Region &region,
                                      OpAsmSetValueNameFn setName) {
  if (&region == &getScoreMod() || &region == &getMaskMod())
    nameVariantArguments(*this, setName);
}

LogicalResult SdpaOp::verifyRegions() { return verifyVariantRegions(*this); }

Value SdpaOp::getLogSumExp() { return getLse(); }
Value SdpaOp::getAttentionSinks() { return getSinks(); }
Value SdpaOp::getKeyPageTable() { return getPageTable(); }
Value SdpaOp::getKeyLengths() { return getSeqLens(); }
Value SdpaOp::getSequenceOffsets() { return getCuSeqlensQ(); }
Value SdpaOp::getKeyOffsets() { return getCuSeqlensK(); }
Region *SdpaOp::getScoreModifier() { return nonEmpty(getScoreMod()); }
Region *SdpaOp::getMaskModifier() { return nonEmpty(getMaskMod()); }
MaskAttr SdpaOp::getPositionMask() { return getMask(); }
double SdpaOp::getScoreScale() { return softmaxScoreScale(*this); }
double SdpaOp::getScoreSoftcap() { return getSoftcap().convertToDouble(); }
Epilogue SdpaOp::getEpilogue() { return softmaxEpilogue(*this); }
SmallVector<Value> SdpaOp::getEpilogueOperands() {
  return softmaxEpilogueOperands(*this);
}
FailureOr<Operation *> SdpaOp::fuseEpilogue(RewriterBase &rewriter,
                                            EpilogueOpInterface epilogue) {
  return fuseSigmoidGate(*this, rewriter, epilogue);
}

//===----------------------------------------------------------------------===//
// GateOp
//===----------------------------------------------------------------------===//

LogicalResult
GateOp::inferReturnTypes(MLIRContext *context, std::optional<Location> location,
                         Adaptor adaptor,
                         SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getOutput().getType());
  return success();
}

LogicalResult GateOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  // [B, H, L, Dv], or a ragged batch's packed [T, H, Dv].
  const bool packed = getOutput().getType().getRank() == 3;
  ArrayRef<const char *> rowDims = packed ? ArrayRef(kRowsDims) : kRowDims;
  NamedTensor rows = named("output", getOutput(), rowDims);
  if (failed(checkRank(emit, rows)) ||
      failed(verifyGateOperand(
          emit,
          named("gate", getGate(),
                packed ? ArrayRef(kRowsGateDims) : ArrayRef(kRowGateDims)),
          rows, rows, packed ? 2 : 3)))
    return failure();
  return verifySkipOperands(emit, getSkipInput(), getSkipScale(), rows,
                            rowDims);
}

bool GateOp::isAttentionGate() {
  return getActivation() == GateActivation::Sigmoid && !getSkipInput();
}

Value GateOp::getEpilogueInput() { return getOutput(); }
Epilogue GateOp::getEpilogueKind() { return Epilogue::SigmoidGate; }
SmallVector<Value> GateOp::getEpilogueParameters() { return {getGate()}; }

//===----------------------------------------------------------------------===//
// BlockMetaOp
//===----------------------------------------------------------------------===//

/// The queries of a selection: `[B, H, Lq, D]`, or packed token-major
/// `[T, H, D]` in a ragged batch (`ragged`).
static NamedTensor selectionQueries(Value query, bool ragged) {
  return named("query", query,
               ragged ? ArrayRef<const char *>(kPackedSoftmaxQueryDims)
                      : ArrayRef<const char *>(kQueryDims));
}

/// The result of a selection with `slots` entries a row: [B, H, Lq, slots],
/// or [T, H, slots] for packed queries.
static RankedTensorType selectionType(const NamedTensor &q, int64_t slots) {
  Type i32 = IntegerType::get(q.type.getContext(), 32);
  if (q.type.getRank() == 3)
    return tensorOf({q.dim(0), q.dim(1), slots}, i32);
  return tensorOf({q.dim(0), q.dim(1), q.dim(2), slots}, i32);
}

/// Checks the queries' offsets of a ragged selection: only over a paged
/// cache, and B + 1 of them for the B sequences of `seq_lens`.
static LogicalResult verifyRaggedSelection(EmitErrorFn emitError,
                                           Value queryOffsets, Value pageTable,
                                           Value seqLens) {
  if (!queryOffsets)
    return success();
  if (!pageTable)
    return emitError() << "a ragged batch's selections read their keys from "
                          "a paged cache: 'ragged' needs 'paged'";
  return verifyOffsets(emitError, queryOffsets, "cu_seqlens_q", seqLens,
                       "seq_lens");
}

/// Checks a paged cache's `page_table [B, MP]` and `seq_lens [B]`, given
/// both or neither (`opName` says what needs them), and when `q` is given
/// that B is its dim 0.
static LogicalResult verifyPageTable(EmitErrorFn emitError, Value pageTable,
                                     Value seqLens, const NamedTensor *q) {
  if (static_cast<bool>(pageTable) != static_cast<bool>(seqLens))
    return emitError() << "a paged cache needs both 'page_table' and "
                          "'seq_lens'";
  if (!pageTable)
    return success();
  const NamedTensor table = named("page_table", pageTable, kPageTableDims);
  const NamedTensor lengths = named("seq_lens", seqLens, kBatchDims);
  if (failed(checkRank(emitError, table)) ||
      failed(checkRank(emitError, lengths)) ||
      failed(checkSameDim(emitError, lengths, 0, table, 0)))
    return failure();
  return failure(q && failed(checkSameDim(emitError, table, 0, *q, 0)));
}

LogicalResult
BlockMetaOp::inferReturnTypes(MLIRContext *context,
                              std::optional<Location> location, Adaptor adaptor,
                              SmallVectorImpl<Type> &inferredReturnTypes) {
  auto emit = inferenceErrorAt(context, location, getOperationName());
  if (adaptor.getPageTable()) {
    // A page's [2, Hkv, D] per page of the cache.
    FailureOr<NamedTensor> cache =
        namedWithRank(emit, "key", adaptor.getKey(), kPagedKeyDims);
    if (failed(cache))
      return failure();
    inferredReturnTypes.push_back(
        tensorOf({cache->dim(0), 2, cache->dim(2), cache->dim(3)},
                 cache->type.getElementType()));
    return success();
  }
  FailureOr<NamedTensor> k =
      namedWithRank(emit, "key", adaptor.getKey(), kKeyDims);
  auto blockSizeAttr =
      inherentAttr<IntegerAttr>(adaptor.getProperties().block_size,
                                adaptor.getAttributes(), "block_size");
  if (failed(k))
    return failure();
  if (!blockSizeAttr)
    return emit() << "needs a 'block_size' attribute";
  int64_t blockSize = blockSizeAttr.getInt();
  if (failed(checkPositive(emit, "block_size", blockSize)))
    return failure();
  int64_t numBlocks = k->isStatic(2) ? llvm::divideCeil(k->dim(2), blockSize)
                                     : ShapedType::kDynamic;
  inferredReturnTypes.push_back(
      tensorOf({k->dim(0), k->dim(1), numBlocks, 2, k->dim(3)},
               k->type.getElementType()));
  return success();
}

LogicalResult BlockMetaOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  if (failed(verifyPageTable(emit, getPageTable(), getSeqLens(), nullptr)))
    return failure();
  if (getPageTable()) {
    NamedTensor cache = named("key", getKey(), kPagedKeyDims);
    for (unsigned d : {1u, 2u, 3u})
      if (failed(checkStaticDim(emit, cache, d)))
        return failure();
    if (failed(checkPositive(emit, "block_size", getBlockSize())))
      return failure();
    if (static_cast<int64_t>(getBlockSize()) != cache.dim(1))
      return emitOpError() << "over a paged cache the blocks are its pages: "
                              "'block_size' ("
                           << getBlockSize()
                           << ") must be the page size P = " << cache.dim(1);
    return success();
  }
  NamedTensor k = named("key", getKey(), kKeyDims);
  return failure(failed(checkStaticDim(emit, k, 1)) ||
                 failed(checkStaticDim(emit, k, 3)));
}

//===----------------------------------------------------------------------===//
// SelectTopKOp
//===----------------------------------------------------------------------===//

LogicalResult SelectTopKOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  auto emit = inferenceErrorAt(context, location, getOperationName());
  FailureOr<NamedTensor> q = namedWithRank(
      emit, "query", adaptor.getQuery(),
      adaptor.getCuSeqlensQ() ? ArrayRef<const char *>(kPackedSoftmaxQueryDims)
                              : ArrayRef<const char *>(kQueryDims));
  auto topKAttr = inherentAttr<IntegerAttr>(adaptor.getProperties().top_k,
                                            adaptor.getAttributes(), "top_k");
  if (failed(q))
    return failure();
  if (!topKAttr)
    return emit() << "needs a 'top_k' attribute";
  int64_t topK = topKAttr.getInt();
  if (failed(checkPositive(emit, "top_k", topK)))
    return failure();
  // A row keeps at most every block the keys have: the budget is capped by
  // the metadata's block count, so no buffer is sized by a budget alone.
  // Over a paged cache a sequence has at most MP blocks (its pages).
  int64_t slots = ShapedType::kDynamic;
  if (Value pageTable = adaptor.getPageTable()) {
    auto table = dyn_cast<RankedTensorType>(pageTable.getType());
    if (table && table.getRank() == 2 && !table.isDynamicDim(1))
      slots = std::min(topK, table.getDimSize(1));
  } else if (auto meta =
                 dyn_cast<RankedTensorType>(adaptor.getMeta().getType())) {
    if (meta.getRank() == 5 && !meta.isDynamicDim(2))
      slots = std::min(topK, meta.getDimSize(2));
  }
  inferredReturnTypes.push_back(selectionType(*q, slots));
  return success();
}

LogicalResult SelectTopKOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  const bool ragged = static_cast<bool>(getCuSeqlensQ());
  NamedTensor q = selectionQueries(getQuery(), ragged);
  const unsigned qFeature = ragged ? 2 : 3;
  const bool paged = static_cast<bool>(getPageTable());
  if (paged == static_cast<bool>(getKeyLength()))
    return emitOpError() << "needs either 'key_length' or a paged cache's "
                            "'page_table' and 'seq_lens', not both";
  if (failed(checkRank(emit, q)) ||
      failed(verifyPageTable(emit, getPageTable(), getSeqLens(),
                             ragged ? nullptr : &q)) ||
      failed(verifyRaggedSelection(emit, getCuSeqlensQ(), getPageTable(),
                                   getSeqLens())))
    return failure();
  // [B, Hkv, NB, 2, D], or a page's [2, Hkv, D] per page of the cache.
  NamedTensor meta = named("meta", getMeta(),
                           paged ? ArrayRef<const char *>(kPagedMetaDims)
                                 : ArrayRef<const char *>(kMetaDims));
  const unsigned metaHeads = paged ? 2 : 1, metaFeature = paged ? 3 : 4;
  const unsigned metaPair = paged ? 1 : 3;
  if (failed(checkRank(emit, meta)) || failed(checkStaticDim(emit, q, 1)) ||
      failed(checkStaticDim(emit, q, qFeature)) ||
      failed(checkStaticDim(emit, meta, metaHeads)) ||
      failed(checkStaticDim(emit, meta, metaFeature)) ||
      failed(checkSameElementType(emit, meta, q)) ||
      (!paged && failed(checkSameDim(emit, meta, 0, q, 0))) ||
      failed(checkDimIs(emit, meta, metaPair, 2)) ||
      failed(checkSameDim(emit, meta, metaFeature, q, qFeature)) ||
      failed(checkPositive(emit, "block_size", getBlockSize())) ||
      failed(checkScale(emit, toDouble(getScale()))))
    return failure();
  if (q.dim(1) % meta.dim(metaHeads) != 0)
    return emitOpError() << "'query' dim 1 (H) must be a multiple of 'meta' "
                            "dim "
                         << metaHeads << " (Hkv), got " << q.dim(1) << " and "
                         << meta.dim(metaHeads);
  int64_t sink = getSinkBlocks(), local = getLocalBlocks();
  if (sink < 0 || local < 0)
    return emitOpError() << "'sink_blocks' and 'local_blocks' must be >= 0, "
                            "got "
                         << sink << " and " << local;
  // Both are >= 0: compare without a sum that could overflow.
  if (sink > static_cast<int64_t>(getTopK()) ||
      local > static_cast<int64_t>(getTopK()) - sink)
    return emitOpError() << "'sink_blocks' + 'local_blocks' (" << sink << " + "
                         << local << ") must not exceed 'top_k' (" << getTopK()
                         << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// SelectTopPOp
//===----------------------------------------------------------------------===//

LogicalResult SelectTopPOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  auto emit = inferenceErrorAt(context, location, getOperationName());
  FailureOr<NamedTensor> q = namedWithRank(
      emit, "query", adaptor.getQuery(),
      adaptor.getCuSeqlensQ() ? ArrayRef<const char *>(kPackedSoftmaxQueryDims)
                              : ArrayRef<const char *>(kQueryDims));
  FailureOr<NamedTensor> k =
      namedWithRank(emit, "key", adaptor.getKey(), kKeyDims);
  if (failed(q) || failed(k))
    return failure();
  // Over a paged cache a sequence has at most MP * P keys.
  int64_t capacity = k->dim(2);
  if (Value pageTable = adaptor.getPageTable()) {
    auto table = dyn_cast<RankedTensorType>(pageTable.getType());
    capacity = table && table.getRank() == 2 && !table.isDynamicDim(1) &&
                       k->isStatic(1)
                   ? table.getDimSize(1) * k->dim(1)
                   : ShapedType::kDynamic;
  }
  if (auto maxTokens =
          inherentAttr<IntegerAttr>(adaptor.getProperties().max_tokens,
                                    adaptor.getAttributes(), "max_tokens")) {
    capacity = maxTokens.getInt();
    if (failed(checkPositive(emit, "max_tokens", capacity)))
      return failure();
  }
  inferredReturnTypes.push_back(selectionType(*q, capacity));
  return success();
}

LogicalResult SelectTopPOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  const bool ragged = static_cast<bool>(getCuSeqlensQ());
  NamedTensor q = selectionQueries(getQuery(), ragged);
  const unsigned qFeature = ragged ? 2 : 3;
  const bool paged = static_cast<bool>(getPageTable());
  // [B, Hkv, Lk, D], or a paged cache [NP, P, Hkv, D].
  NamedTensor k = named("key", getKey(),
                        paged ? ArrayRef<const char *>(kPagedKeyDims)
                              : ArrayRef<const char *>(kKeyDims));
  const unsigned kvHeads = paged ? 2 : 1;
  if (failed(checkRank(emit, q)) || failed(checkRank(emit, k)) ||
      failed(verifyPageTable(emit, getPageTable(), getSeqLens(),
                             ragged ? nullptr : &q)) ||
      failed(verifyRaggedSelection(emit, getCuSeqlensQ(), getPageTable(),
                                   getSeqLens())))
    return failure();
  for (unsigned d : {1u, qFeature})
    if (failed(checkStaticDim(emit, q, d)))
      return failure();
  for (unsigned d : {kvHeads, 3u})
    if (failed(checkStaticDim(emit, k, d)))
      return failure();
  if (paged && failed(checkStaticDim(emit, k, 1)))
    return failure();
  if (q.dim(1) % k.dim(kvHeads) != 0)
    return emitOpError() << "'query' dim 1 (H) must be a multiple of 'key' "
                            "dim "
                         << kvHeads << " (Hkv), got " << q.dim(1) << " and "
                         << k.dim(kvHeads);
  if (failed(checkSameElementType(emit, k, q)) ||
      (!paged && failed(checkSameDim(emit, k, 0, q, 0))) ||
      failed(checkSameDim(emit, k, 3, q, qFeature)) ||
      failed(checkScale(emit, toDouble(getScale()))) ||
      failed(checkSoftcap(emit, getSoftcap().convertToDouble())))
    return failure();
  if (Value blocks = getBlocks()) {
    NamedTensor sel =
        named("blocks", blocks,
              ragged ? ArrayRef<const char *>(kPackedSelectionDims)
                     : ArrayRef<const char *>(kSelectionDims));
    if (failed(checkRank(emit, sel)))
      return failure();
    for (unsigned d = 0; d < qFeature; ++d)
      if (failed(checkSameDim(emit, sel, d, q, d)))
        return failure();
    if (!getBlockSize())
      return emitOpError() << "a 'blocks' operand needs the 'block_size' "
                              "attribute that its entries count in";
    if (failed(checkPositive(emit, "block_size", *getBlockSize())))
      return failure();
  } else if (getBlockSize()) {
    return emitOpError() << "'block_size' is only meaningful with a 'blocks' "
                            "operand";
  }
  double topP = getTopP().convertToDouble();
  if (!(topP > 0.0 && topP <= 1.0))
    return emitOpError() << "'top_p' must be in (0, 1], got " << topP;
  int64_t minTokens = getMinTokens();
  if (minTokens < 0)
    return emitOpError() << "'min_tokens' must be >= 0, got " << minTokens;
  if (std::optional<uint64_t> maxTokens = getMaxTokens()) {
    int64_t maxTokensValue = static_cast<int64_t>(*maxTokens);
    if (failed(checkPositive(emit, "max_tokens", maxTokensValue)))
      return failure();
    if (minTokens > maxTokensValue)
      return emitOpError() << "'min_tokens' (" << minTokens
                           << ") must not exceed 'max_tokens' ("
                           << maxTokensValue << ")";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// SparseSdpaOp
//===----------------------------------------------------------------------===//

LogicalResult SparseSdpaOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  if (adaptor.getCuSeqlensQ())
    return inferPackedResults(
        inferenceErrorAt(context, location, getOperationName()),
        adaptor.getQuery(), adaptor.getValue(), returnsLse(adaptor),
        inferredReturnTypes);
  return inferAttentionResults(
      inferenceErrorAt(context, location, getOperationName()),
      adaptor.getQuery(), adaptor.getValue(), returnsLse(adaptor), kQueryDims,
      kValueDims, inferredReturnTypes);
}

LogicalResult SparseSdpaOp::verify() {
  if (failed(verifySinks(*this)))
    return failure();
  auto emit = [&]() { return emitOpError(); };
  NamedTensor q = named("query", getQuery(), kQueryDims);
  if (static_cast<bool>(getPageTable()) != static_cast<bool>(getSeqLens()))
    return emitOpError() << "a paged cache needs both 'page_table' and "
                            "'seq_lens'";
  const bool ragged = static_cast<bool>(getCuSeqlensQ());
  if (ragged) {
    if (!getPageTable())
      return emitOpError() << "a ragged batch's sparse attention reads its "
                              "keys from a paged cache: 'ragged' needs "
                              "'paged'";
    q = named("query", getQuery(), kPackedSoftmaxQueryDims);
    if (failed(verifyOffsets(emit, getCuSeqlensQ(), "cu_seqlens_q", {}, "")))
      return failure();
  }
  if (getPageTable()) {
    if (failed(verifyPagedCache(emit, q, getKey(), getValue(), getPageTable(),
                                getSeqLens(), getGate(), toDouble(getScale()),
                                getSoftcap().convertToDouble(),
                                getCuSeqlensQ())))
      return failure();
  } else {
    NamedTensor k = named("key", getKey(), kKeyDims);
    NamedTensor v = named("value", getValue(), kValueDims);
    if (failed(verifySoftmaxAttention(emit, q, k, v, getGate(),
                                      toDouble(getScale()),
                                      getSoftcap().convertToDouble())) ||
        failed(verifyMaskFitsLengths(emit, getMask(), q, k)))
      return failure();
  }
  if (failed(checkPositive(emit, "block_size", getBlockSize())))
    return failure();
  NamedTensor sel = named("selection", getSelection(),
                          ragged ? ArrayRef<const char *>(kPackedSelectionDims)
                                 : ArrayRef<const char *>(kSelectionDims));
  if (failed(checkRank(emit, sel)))
    return failure();
  for (unsigned d = 0; d < (ragged ? 2u : 3u); ++d)
    if (failed(checkSameDim(emit, sel, d, q, d)))
      return failure();
  return success();
}

void SparseSdpaOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  setName(getOutput(), "output");
  if (Value lse = getLse())
    setName(lse, "lse");
}

void SparseSdpaOp::getAsmBlockArgumentNames(Region &region,
                                            OpAsmSetValueNameFn setName) {
  if (&region == &getScoreMod() || &region == &getMaskMod())
    nameVariantArguments(*this, setName);
}

LogicalResult SparseSdpaOp::verifyRegions() {
  return verifyVariantRegions(*this);
}

Value SparseSdpaOp::getLogSumExp() { return getLse(); }
Value SparseSdpaOp::getAttentionSinks() { return getSinks(); }
Region *SparseSdpaOp::getScoreModifier() { return nonEmpty(getScoreMod()); }
Region *SparseSdpaOp::getMaskModifier() { return nonEmpty(getMaskMod()); }
MaskAttr SparseSdpaOp::getPositionMask() { return getMask(); }
double SparseSdpaOp::getScoreScale() { return softmaxScoreScale(*this); }
double SparseSdpaOp::getScoreSoftcap() {
  return getSoftcap().convertToDouble();
}
Epilogue SparseSdpaOp::getEpilogue() { return softmaxEpilogue(*this); }
SmallVector<Value> SparseSdpaOp::getEpilogueOperands() {
  return softmaxEpilogueOperands(*this);
}
FailureOr<Operation *>
SparseSdpaOp::fuseEpilogue(RewriterBase &rewriter,
                           EpilogueOpInterface epilogue) {
  return fuseSigmoidGate(*this, rewriter, epilogue);
}
KeySelectionKind SparseSdpaOp::getKeySelectionKind() {
  return KeySelectionKind::Blocks;
}
Value SparseSdpaOp::getKeySelection() { return getSelection(); }
Value SparseSdpaOp::getKeyPageTable() { return getPageTable(); }
Value SparseSdpaOp::getKeyLengths() { return getSeqLens(); }
Value SparseSdpaOp::getSequenceOffsets() { return getCuSeqlensQ(); }
int64_t SparseSdpaOp::getSelectionBlockSize() { return getBlockSize(); }

//===----------------------------------------------------------------------===//
// TreeSdpaOp
//===----------------------------------------------------------------------===//

LogicalResult
TreeSdpaOp::inferReturnTypes(MLIRContext *context,
                             std::optional<Location> location, Adaptor adaptor,
                             SmallVectorImpl<Type> &inferredReturnTypes) {
  return inferAttentionResults(
      inferenceErrorAt(context, location, getOperationName()),
      adaptor.getQuery(), adaptor.getValue(), returnsLse(adaptor),
      kTreeQueryDims,
      // Packed keys (the verifier refuses them beside a paged cache).
      adaptor.getCuSeqlensK() && !adaptor.getPageTable()
          ? ArrayRef<const char *>(kPackedSoftmaxValueDims)
          : ArrayRef<const char *>(kTreeValueDims),
      inferredReturnTypes);
}

/// A tree's position mask narrows causal by at most one of a window and a
/// chunk, each positive.
static LogicalResult verifyTreeMask(TreeSdpaOp op) {
  auto emit = [&]() { return op.emitOpError(); };
  std::optional<uint64_t> window = op.getWindow(), chunk = op.getChunk();
  if (window && chunk)
    return op.emitOpError() << "takes a 'window' or a 'chunk', not both";
  if (window)
    return checkPositive(emit, "window", static_cast<int64_t>(*window));
  if (chunk)
    return checkPositive(emit, "chunk", static_cast<int64_t>(*chunk));
  return success();
}

/// Checks a tree's keys and values in their layout: packed with their
/// offsets, in a paged cache, or dense `[B, Hkv, P+T, D]`.
static LogicalResult verifyTreeKeys(TreeSdpaOp op, const NamedTensor &q) {
  auto emit = [&]() { return op.emitOpError(); };
  const std::optional<double> scale = toDouble(op.getScale());
  const double softcap = op.getSoftcap().convertToDouble();
  if (Value keyOffsets = op.getCuSeqlensK())
    return verifyPackedKeys(emit, q, op.getKey(), op.getValue(), op.getGate(),
                            Value(), keyOffsets, scale, softcap);
  if (op.getPageTable())
    return verifyPagedCache(emit, q, op.getKey(), op.getValue(),
                            op.getPageTable(), op.getSeqLens(), op.getGate(),
                            scale, softcap, Value());
  NamedTensor k = named("key", op.getKey(), kTreeKeyDims);
  NamedTensor v = named("value", op.getValue(), kTreeValueDims);
  if (failed(
          verifySoftmaxAttention(emit, q, k, v, op.getGate(), scale, softcap)))
    return failure();
  if (q.isStatic(2) && k.isStatic(2) && k.dim(2) < q.dim(2))
    return emit() << "'key' dim 2 (P+T) must hold at least the T = " << q.dim(2)
                  << " tree tokens, got " << k.dim(2);
  return success();
}

LogicalResult TreeSdpaOp::verify() {
  if (failed(verifySinks(*this)) || failed(verifyTreeMask(*this)))
    return failure();
  auto emit = [&]() { return emitOpError(); };
  if (static_cast<bool>(getPageTable()) != static_cast<bool>(getSeqLens()))
    return emitOpError() << "a paged cache needs both 'page_table' and "
                            "'seq_lens'";
  if (getPageTable() && getCuSeqlensK())
    return emitOpError() << "takes a paged cache or packed keys, not both";
  NamedTensor q = named("query", getQuery(), kTreeQueryDims);
  if (failed(verifyTreeKeys(*this, q)))
    return failure();
  NamedTensor parents = named("parents", getParents(), kTreeDims);
  return failure(failed(checkRank(emit, parents)) ||
                 failed(checkSameDim(emit, parents, 0, q, 0)) ||
                 failed(checkSameDim(emit, parents, 1, q, 2)));
}

void TreeSdpaOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  setName(getOutput(), "output");
  if (Value lse = getLse())
    setName(lse, "lse");
}

void TreeSdpaOp::getAsmBlockArgumentNames(Region &region,
                                          OpAsmSetValueNameFn setName) {
  if (&region == &getScoreMod() || &region == &getMaskMod())
    nameVariantArguments(*this, setName);
}

LogicalResult TreeSdpaOp::verifyRegions() {
  return verifyVariantRegions(*this);
}

Value TreeSdpaOp::getLogSumExp() { return getLse(); }
Value TreeSdpaOp::getAttentionSinks() { return getSinks(); }
Region *TreeSdpaOp::getScoreModifier() { return nonEmpty(getScoreMod()); }
Region *TreeSdpaOp::getMaskModifier() { return nonEmpty(getMaskMod()); }
MaskAttr TreeSdpaOp::getPositionMask() {
  // The tree narrows a causal mask: a node never sees a later position.
  if (std::optional<uint64_t> window = getWindow())
    return MaskAttr::get(getContext(), MaskKind::SlidingWindow,
                         static_cast<int64_t>(*window));
  if (std::optional<uint64_t> chunk = getChunk())
    return MaskAttr::get(getContext(), MaskKind::Chunked,
                         static_cast<int64_t>(*chunk));
  return MaskAttr::get(getContext(), MaskKind::Causal, 0);
}
double TreeSdpaOp::getScoreScale() { return softmaxScoreScale(*this); }
double TreeSdpaOp::getScoreSoftcap() { return getSoftcap().convertToDouble(); }
Epilogue TreeSdpaOp::getEpilogue() { return softmaxEpilogue(*this); }
SmallVector<Value> TreeSdpaOp::getEpilogueOperands() {
  return softmaxEpilogueOperands(*this);
}
FailureOr<Operation *> TreeSdpaOp::fuseEpilogue(RewriterBase &rewriter,
                                                EpilogueOpInterface epilogue) {
  return fuseSigmoidGate(*this, rewriter, epilogue);
}
KeySelectionKind TreeSdpaOp::getKeySelectionKind() {
  return KeySelectionKind::Tree;
}
Value TreeSdpaOp::getKeySelection() { return getParents(); }
Value TreeSdpaOp::getKeyPageTable() { return getPageTable(); }
Value TreeSdpaOp::getKeyLengths() { return getSeqLens(); }
Value TreeSdpaOp::getKeyOffsets() { return getCuSeqlensK(); }

//===----------------------------------------------------------------------===//
// TreeAcceptOp
//===----------------------------------------------------------------------===//

LogicalResult TreeAcceptOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  auto emit = inferenceErrorAt(context, location, getOperationName());
  FailureOr<NamedTensor> tokens =
      namedWithRank(emit, "tokens", adaptor.getTokens(), kTreeDims);
  if (failed(tokens))
    return failure();
  Type i32 = IntegerType::get(context, 32);
  inferredReturnTypes.push_back(
      tensorOf({tokens->dim(0), tokens->dim(1)}, i32));
  inferredReturnTypes.push_back(tensorOf({tokens->dim(0)}, i32));
  inferredReturnTypes.push_back(tensorOf({tokens->dim(0)}, i32));
  return success();
}

LogicalResult TreeAcceptOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  NamedTensor tokens = named("tokens", getTokens(), kTreeDims);
  for (auto [name, value] : {std::pair<StringRef, Value>{"target", getTarget()},
                             {"parents", getParents()}}) {
    NamedTensor t = named(name, value, kTreeDims);
    if (failed(checkRank(emit, t)) ||
        failed(checkSameDim(emit, t, 0, tokens, 0)) ||
        failed(checkSameDim(emit, t, 1, tokens, 1)))
      return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// KvCompactOp
//===----------------------------------------------------------------------===//

LogicalResult
KvCompactOp::inferReturnTypes(MLIRContext *context,
                              std::optional<Location> location, Adaptor adaptor,
                              SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getKey().getType());
  if (Value value = adaptor.getValue())
    inferredReturnTypes.push_back(value.getType());
  return success();
}

LogicalResult
KvAppendOp::inferReturnTypes(MLIRContext *context,
                             std::optional<Location> location, Adaptor adaptor,
                             SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getKeyCache().getType());
  if (Value valueCache = adaptor.getValueCache())
    inferredReturnTypes.push_back(valueCache.getType());
  return success();
}

namespace {
/// Parses the `[attr-dict] : types` after a kv op's operands (already
/// parsed), one type per operand, and resolves the operands into `result`.
ParseResult
parseTypedOperands(OpAsmParser &parser, OperationState &result,
                   ArrayRef<OpAsmParser::UnresolvedOperand> operands,
                   SmallVectorImpl<Type> &types) {
  SMLoc typesLoc;
  if (parser.parseOptionalAttrDict(result.attributes) || parser.parseColon() ||
      (typesLoc = parser.getCurrentLocation(), false) ||
      parser.parseTypeList(types))
    return failure();
  if (types.size() != operands.size())
    return parser.emitError(typesLoc)
           << "expected " << operands.size() << " types, one per operand, got "
           << types.size();
  return parser.resolveOperands(operands, types, typesLoc, result.operands);
}
} // namespace

ParseResult KvCompactOp::parse(OpAsmParser &parser, OperationState &result) {
  // key, [value,] path, length [packed(cu_seqlens_k : type)]: 4 operands
  // with values, 3 without.
  SmallVector<OpAsmParser::UnresolvedOperand, 4> operands;
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<Type, 4> types;
  if (parser.parseOperandList(operands))
    return failure();
  if (operands.size() != 3 && operands.size() != 4)
    return parser.emitError(loc)
           << "expected key, [value,] path and length, got " << operands.size()
           << " operands";
  OpAsmParser::UnresolvedOperand keyOffsets;
  Type keyOffsetsType;
  const bool packed = succeeded(parser.parseOptionalKeyword("packed"));
  if (packed && (parser.parseLParen() || parser.parseOperand(keyOffsets) ||
                 parser.parseColonType(keyOffsetsType) || parser.parseRParen()))
    return failure();
  if (parseTypedOperands(parser, result, operands, types))
    return failure();
  const int32_t values = operands.size() == 4 ? 1 : 0;
  if (packed &&
      parser.resolveOperand(keyOffsets, keyOffsetsType, result.operands))
    return failure();
  result.getOrAddProperties<Properties>().operandSegmentSizes = {
      1, values, 1, 1, packed ? 1 : 0};
  result.addTypes(types[0]);
  if (values)
    result.addTypes(types[1]);
  return success();
}

void KvCompactOp::print(OpAsmPrinter &p) {
  p << ' ' << getKey();
  if (getValue())
    p << ", " << getValue();
  p << ", " << getPath() << ", " << getLength();
  if (Value keyOffsets = getCuSeqlensK())
    p << " packed(" << keyOffsets << " : " << keyOffsets.getType() << ")";
  p.printOptionalAttrDict((*this)->getAttrs(),
                          /*elidedAttrs=*/{"operandSegmentSizes"});
  p << " : " << getKey().getType();
  if (getValue())
    p << ", " << getValue().getType();
  p << ", " << getPath().getType() << ", " << getLength().getType();
}

ParseResult KvAppendOp::parse(OpAsmParser &parser, OperationState &result) {
  // key, [value,] slots into key_cache[, value_cache].
  SmallVector<OpAsmParser::UnresolvedOperand, 3> rows, caches;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseOperandList(rows) || parser.parseKeyword("into") ||
      parser.parseOperandList(caches))
    return failure();
  const bool values = rows.size() == 3 && caches.size() == 2;
  if (!values && !(rows.size() == 2 && caches.size() == 1))
    return parser.emitError(loc)
           << "expected key, [value,] slots into key_cache[, value_cache], "
              "got "
           << rows.size() << " operands before 'into' and " << caches.size()
           << " after";
  SmallVector<OpAsmParser::UnresolvedOperand, 5> operands(rows.begin(),
                                                          rows.end());
  llvm::append_range(operands, caches);
  SmallVector<Type, 5> types;
  if (parseTypedOperands(parser, result, operands, types))
    return failure();
  const int32_t v = values ? 1 : 0;
  result.getOrAddProperties<Properties>().operandSegmentSizes = {1, v, 1, 1, v};
  result.addTypes(types[values ? 3 : 2]);
  if (values)
    result.addTypes(types[4]);
  return success();
}

void KvAppendOp::print(OpAsmPrinter &p) {
  p << ' ' << getKey();
  if (getValue())
    p << ", " << getValue();
  p << ", " << getSlots() << " into " << getKeyCache();
  if (getValueCache())
    p << ", " << getValueCache();
  p.printOptionalAttrDict((*this)->getAttrs());
  p << " : " << getOperandTypes();
}

LogicalResult KvAppendOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  const char *const keyDims[] = {"T", "Hkv", "D"};
  const char *const valueDims[] = {"T", "Hkv", "Dv"};
  const char *const slotDims[] = {"T"};
  const NamedTensor k = named("key", getKey(), keyDims);
  const NamedTensor slots = named("slots", getSlots(), slotDims);
  const NamedTensor kc = named("key_cache", getKeyCache(), kPagedKeyDims);
  for (const NamedTensor *t : {&k, &slots, &kc})
    if (failed(checkRank(emit, *t)))
      return failure();
  for (unsigned d : {1u, 2u, 3u})
    if (failed(checkStaticDim(emit, kc, d)))
      return failure();
  if (failed(checkSameElementType(emit, kc, k)) ||
      failed(checkSameDim(emit, slots, 0, k, 0)) ||
      failed(checkSameDim(emit, k, 1, kc, 2)) ||
      failed(checkSameDim(emit, k, 2, kc, 3)))
    return failure();
  if (static_cast<bool>(getValue()) != static_cast<bool>(getValueCache()))
    return emitOpError() << "takes 'value' and 'value_cache' together (a "
                            "latent cache has neither)";
  if (!getValue())
    return success();
  const NamedTensor v = named("value", getValue(), valueDims);
  const NamedTensor vc = named("value_cache", getValueCache(), kPagedValueDims);
  for (const NamedTensor *t : {&v, &vc})
    if (failed(checkRank(emit, *t)))
      return failure();
  for (unsigned d : {1u, 2u, 3u})
    if (failed(checkStaticDim(emit, vc, d)))
      return failure();
  if (failed(checkSameElementType(emit, v, k)) ||
      failed(checkSameElementType(emit, vc, k)) ||
      failed(checkSameDim(emit, v, 0, k, 0)) ||
      failed(checkSameDim(emit, v, 1, vc, 2)) ||
      failed(checkSameDim(emit, v, 2, vc, 3)))
    return failure();
  for (unsigned d = 0; d < 3; ++d)
    if (failed(checkSameDim(emit, vc, d, kc, d)))
      return failure();
  return success();
}

LogicalResult PageMetaUpdateOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getMeta().getType());
  return success();
}

LogicalResult PageMetaUpdateOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  const char *const slotDims[] = {"T"};
  const NamedTensor kc = named("key_cache", getKeyCache(), kPagedKeyDims);
  const NamedTensor slots = named("slots", getSlots(), slotDims);
  const NamedTensor meta = named("meta", getMeta(), kPagedMetaDims);
  for (const NamedTensor *t : {&kc, &slots, &meta})
    if (failed(checkRank(emit, *t)))
      return failure();
  for (unsigned d : {1u, 2u, 3u})
    if (failed(checkStaticDim(emit, kc, d)))
      return failure();
  if (meta.isStatic(1) && meta.dim(1) != 2)
    return emitOpError() << "'meta' holds a page's min and max: its dim 1 "
                            "must be 2, got "
                         << meta.dim(1);
  return failure(failed(checkSameElementType(emit, meta, kc)) ||
                 failed(checkSameDim(emit, meta, 0, kc, 0)) ||
                 failed(checkSameDim(emit, meta, 2, kc, 2)) ||
                 failed(checkSameDim(emit, meta, 3, kc, 3)));
}

LogicalResult KvCompactOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  NamedTensor path = named("path", getPath(), kTreeDims);
  NamedTensor length = named("length", getLength(), kBatchDims);
  for (const NamedTensor *t : {&path, &length})
    if (failed(checkRank(emit, *t)))
      return failure();
  // Keys [Tk, Hkv, D] packed by their offsets [B+1]: each sequence's own
  // key count holds its tree (checked at run time).
  if (Value keyOffsets = getCuSeqlensK()) {
    if (failed(checkSameDim(emit, length, 0, path, 0)))
      return failure();
    NamedTensor k = named("key", getKey(), kPackedKeyDims);
    NamedTensor cu = named("cu_seqlens_k", keyOffsets, kOffsetDims);
    if (failed(checkRank(emit, k)) || failed(checkRank(emit, cu)))
      return failure();
    if (cu.isStatic(0) && path.isStatic(0) && cu.dim(0) != path.dim(0) + 1)
      return emitOpError() << "'cu_seqlens_k' must hold B + 1 offsets for "
                              "the B = "
                           << path.dim(0) << " paths of 'path', got "
                           << cu.dim(0);
    if (!getValue())
      return success();
    NamedTensor v = named("value", getValue(), kPackedSoftmaxValueDims);
    return failure(failed(checkRank(emit, v)) ||
                   failed(checkSameElementType(emit, v, k)) ||
                   failed(checkSameDim(emit, v, 0, k, 0)) ||
                   failed(checkSameDim(emit, v, 1, k, 1)));
  }
  NamedTensor k = named("key", getKey(), kTreeKeyDims);
  if (failed(checkRank(emit, k)) || failed(checkSameDim(emit, path, 0, k, 0)) ||
      failed(checkSameDim(emit, length, 0, k, 0)))
    return failure();
  if (getValue()) {
    NamedTensor v = named("value", getValue(), kTreeValueDims);
    if (failed(checkRank(emit, v)) ||
        failed(checkSameElementType(emit, v, k)) ||
        failed(checkSameDim(emit, v, 0, k, 0)) ||
        failed(checkSameDim(emit, v, 1, k, 1)) ||
        failed(checkSameDim(emit, v, 2, k, 2)))
      return failure();
  }
  if (path.isStatic(1) && k.isStatic(2) && k.dim(2) < path.dim(1))
    return emitOpError() << "'key' dim 2 (P+T) must hold at least the T = "
                         << path.dim(1) << " tree tokens of 'path', got "
                         << k.dim(2);
  return success();
}

//===----------------------------------------------------------------------===//
// PathStepsOp
//===----------------------------------------------------------------------===//

LogicalResult
PathStepsOp::inferReturnTypes(MLIRContext *context,
                              std::optional<Location> location, Adaptor adaptor,
                              SmallVectorImpl<Type> &inferredReturnTypes) {
  // The input's type with the path's T steps.
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto path = cast<RankedTensorType>(adaptor.getPath().getType());
  SmallVector<int64_t> shape(input.getShape());
  if (shape.size() >= 3 && path.getRank() == 2)
    shape[2] = path.getDimSize(1);
  inferredReturnTypes.push_back(input.clone(shape));
  return success();
}

LogicalResult PathStepsOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  auto input = cast<RankedTensorType>(getInput().getType());
  if (input.getRank() != 3 && input.getRank() != 4)
    return emitOpError() << "'input' must be [B, H, T] or [B, H, T, F], got "
                            "rank "
                         << input.getRank();
  const char *const inputDims[] = {"B", "H", "T", "F"};
  NamedTensor in = named("input", getInput(),
                         ArrayRef(inputDims).take_front(input.getRank()));
  NamedTensor path = named("path", getPath(), kRecTreeDims);
  NamedTensor length = named("length", getLength(), kBatchDims);
  if (failed(checkRank(emit, path)) || failed(checkRank(emit, length)) ||
      failed(checkSameDim(emit, path, 0, in, 0)) ||
      failed(checkSameDim(emit, length, 0, in, 0)) ||
      failed(checkSameDim(emit, path, 1, in, 2)))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// LinearRecurrenceOp
//===----------------------------------------------------------------------===//

LogicalResult LinearRecurrenceOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  // o[B, Hv, L, Dv] has the value's shape; the state keeps its own type.
  inferredReturnTypes.push_back(adaptor.getValue().getType());
  inferredReturnTypes.push_back(adaptor.getInitialState().getType());
  return success();
}

/// Where the dims of a recurrence's per-step tensors are: [B, H, L, F], or
/// packed token-major [T, H, F] in a ragged batch (no batch dim).
/// The states are [B, Hv, Dk, Dv], or a pool [N, Hv, Dk, Dv] in a ragged
/// batch and wherever slots index it.
struct StepLayout {
  bool packed, pooled;
  ArrayRef<const char *> queryDims, valueDims, scalarGateDims, vectorGateDims,
      stateDims;
  /// The dims of the head, the step and the feature.
  unsigned head() const { return 1; }
  unsigned step() const { return packed ? 0 : 2; }
  unsigned feature() const { return packed ? 2 : 3; }
  unsigned rank() const { return packed ? 3 : 4; }

  static StepLayout get(bool packed, bool pooled) {
    ArrayRef<const char *> states =
        pooled ? ArrayRef<const char *>(kPoolDims) : kRecStateDims;
    if (packed)
      return {true,
              true,
              kPackedQueryDims,
              kPackedValueDims,
              kPackedScalarGateDims,
              kPackedVectorGateDims,
              states};
    return {false,
            pooled,
            kRecQueryDims,
            kRecValueDims,
            kRecScalarGateDims,
            kRecVectorGateDims,
            states};
  }
};

/// A batch [B, H, L, ...] whose states are slots `indices [B]` of a pool:
/// one slot per batch row.
static LogicalResult verifyPoolIndices(EmitErrorFn emitError, Value query,
                                       Value indices) {
  const NamedTensor q = named("query", query, kRecQueryDims);
  const NamedTensor slots = named("pool_indices", indices, kBatchDims);
  if (failed(checkRank(emitError, slots)))
    return failure();
  return checkSameDim(emitError, slots, 0, q, 0);
}

/// What attn.linear_recurrence and attn.tree_recurrence verify alike: the
/// operands of SPEC §2 (q, k, v, the rule's gates, the state, the output
/// gate) and the scale, in the layout `layout`.
template <typename RecurrenceOp>
static LogicalResult verifyRecurrenceOperands(RecurrenceOp op,
                                              const StepLayout &layout) {
  auto emit = [&]() { return op.emitOpError(); };
  RecurrenceRule rule = op.getRule();
  StringRef ruleName = stringifyRecurrenceRule(rule);
  const unsigned H = layout.head(), L = layout.step(), F = layout.feature();
  NamedTensor q = named("query", op.getQuery(), layout.queryDims);
  NamedTensor k = named("key", op.getKey(), layout.queryDims);
  NamedTensor v = named("value", op.getValue(), layout.valueDims);
  NamedTensor s =
      named("initial_state", op.getInitialState(), layout.stateDims);
  for (const NamedTensor *t : {&q, &k, &v, &s})
    if (failed(checkRank(emit, *t)))
      return failure();
  for (const NamedTensor *t : {&q, &k, &v})
    for (unsigned d : {H, F})
      if (failed(checkStaticDim(emit, *t, d)))
        return failure();
  if (failed(checkSameElementType(emit, k, q)) ||
      failed(checkSameElementType(emit, v, q)))
    return failure();
  for (unsigned d = 0; d < layout.rank(); ++d)
    if (failed(checkSameDim(emit, k, d, q, d)))
      return failure();
  if ((!layout.packed && failed(checkSameDim(emit, v, 0, q, 0))) ||
      (!layout.pooled && failed(checkSameDim(emit, s, 0, q, 0))) ||
      failed(checkSameDim(emit, v, L, q, L)) ||
      failed(checkDimMultiple(emit, v, q, H)) ||
      failed(checkSameDim(emit, s, 1, v, H)) ||
      failed(checkSameDim(emit, s, 2, q, F)) ||
      failed(checkSameDim(emit, s, 3, v, F)))
    return failure();

  // Operands the rule needs, and only those.
  auto checkPerStep = [&](StringRef name, Value operand, bool wanted,
                          ArrayRef<const char *> dims) -> LogicalResult {
    if (!wanted) {
      if (operand)
        return op.emitOpError()
               << "rule '" << ruleName << "' takes no '" << name << "' operand";
      return success();
    }
    if (!operand)
      return op.emitOpError() << "rule '" << ruleName << "' needs a '" << name
                              << "' operand " << formatLayout(dims);
    NamedTensor t = named(name, operand, dims);
    if (failed(checkRank(emit, t)) || failed(checkSameElementType(emit, t, q)))
      return failure();
    for (unsigned d = 0; d <= std::max(L, H); ++d)
      if (failed(checkSameDim(emit, t, d, v, d)))
        return failure();
    if (dims.size() == layout.rank() && failed(checkSameDim(emit, t, F, q, F)))
      return failure();
    return success();
  };
  ArrayRef<const char *> decayDims =
      hasFeatureDecay(rule) ? layout.vectorGateDims : layout.scalarGateDims;
  if (failed(checkPerStep("decay", op.getDecay(),
                          hasScalarDecay(rule) || hasFeatureDecay(rule),
                          decayDims)) ||
      failed(checkPerStep("beta", op.getBeta(), isDeltaRule(rule),
                          layout.scalarGateDims)))
    return failure();

  if (static_cast<bool>(op.getGateZ()) != static_cast<bool>(op.getGateWeight()))
    return op.emitOpError() << "the output gate needs both 'gate_z' and "
                               "'gate_weight'";
  if (Value z = op.getGateZ()) {
    NamedTensor zt = named("gate_z", z, layout.valueDims);
    NamedTensor wt = named("gate_weight", op.getGateWeight(), kFeatureDims);
    if (failed(checkRank(emit, zt)) || failed(checkRank(emit, wt)) ||
        failed(checkSameElementType(emit, zt, v)) ||
        failed(checkSameElementType(emit, wt, v)))
      return failure();
    for (unsigned d = 0; d < layout.rank(); ++d)
      if (failed(checkSameDim(emit, zt, d, v, d)))
        return failure();
    if (failed(checkSameDim(emit, wt, 0, v, F)))
      return failure();
    double eps = op.getGateEps().convertToDouble();
    if (!(eps > 0.0))
      return op.emitOpError() << "'gate_eps' must be > 0, got " << eps;
  } else if (op.getGateActivation() != GateActivation::Silu) {
    return op.emitOpError() << "'gate_activation' needs an output gate";
  }

  return checkScale(emit, toDouble(op.getScale()));
}

LogicalResult LinearRecurrenceOp::verify() {
  // A ragged batch takes both its offsets and its state slots.
  Value offsets = getCuSeqlens(), slots = getStateIndices();
  if (static_cast<bool>(offsets) != static_cast<bool>(slots))
    return emitOpError() << "a ragged batch needs both 'cu_seqlens' and "
                            "'state_indices'";
  if (offsets && getPoolIndices())
    return emitOpError() << "a ragged batch names its pool slots with its "
                            "offsets: 'pool_indices' is for [B, H, L, ...] "
                            "steps";
  const bool pooled = offsets || getPoolIndices();
  if (failed(verifyRecurrenceOperands(
          *this, StepLayout::get(offsets != nullptr, pooled))))
    return failure();
  if (Value indices = getPoolIndices();
      indices && failed(verifyPoolIndices([&]() { return emitOpError(); },
                                          getQuery(), indices)))
    return failure();
  if (offsets && failed(verifyOffsets([&]() { return emitOpError(); }, offsets,
                                      "cu_seqlens", slots, "state_indices")))
    return failure();
  int64_t chunk = getChunkSize();
  if (chunk != 16 && chunk != 32 && chunk != 64 && chunk != 128)
    return emitOpError() << "'chunk_size' must be 16, 32, 64 or 128, got "
                         << chunk;
  return success();
}

MaskAttr LinearRecurrenceOp::getPositionMask() {
  return MaskAttr::get(getContext(), MaskKind::Causal, 0);
}
double LinearRecurrenceOp::getScoreScale() {
  // Dk is the last dim: [B, Hk, L, Dk], or [T, Hk, Dk] in a ragged batch.
  auto query = getQuery().getType();
  return resolveScale(toDouble(getScale()),
                      query.getDimSize(query.getRank() - 1));
}
Normalizer LinearRecurrenceOp::getNormalizer() {
  return Normalizer::RecurrentState;
}
Epilogue LinearRecurrenceOp::getEpilogue() {
  return getGateZ() ? Epilogue::RmsNormSiluGate : Epilogue::None;
}
SmallVector<Value> LinearRecurrenceOp::getEpilogueOperands() {
  if (getGateZ())
    return {getGateZ(), getGateWeight()};
  return {};
}
RecurrenceRule LinearRecurrenceOp::getRecurrenceRule() { return getRule(); }
Value LinearRecurrenceOp::getStepDecay() { return getDecay(); }
Value LinearRecurrenceOp::getStepBeta() { return getBeta(); }
Value LinearRecurrenceOp::getStateInput() { return getInitialState(); }
Value LinearRecurrenceOp::getStateOutput() { return getFinalState(); }
int64_t LinearRecurrenceOp::getStepChunkSize() { return getChunkSize(); }
Value LinearRecurrenceOp::getSequenceOffsets() { return getCuSeqlens(); }
Value LinearRecurrenceOp::getStateSlots() {
  return getStateIndices() ? getStateIndices() : getPoolIndices();
}
bool LinearRecurrenceOp::getNormalizesQueryKey() { return getQkL2norm(); }
double LinearRecurrenceOp::getEpilogueEpsilon() {
  return getGateZ() ? getGateEps().convertToDouble() : 0.0;
}
GateActivation LinearRecurrenceOp::getEpilogueActivation() {
  return getGateActivation();
}
/// A clone of the recurrence `op` (linear or tree) with the rmsnorm gate
/// `epilogue` folded in; fails for another epilogue or when `op` has a gate.
template <typename RecurrenceOp>
static FailureOr<Operation *> fuseRmsNormGate(RecurrenceOp op,
                                              RewriterBase &rewriter,
                                              EpilogueOpInterface epilogue) {
  auto gate = llvm::dyn_cast<RmsNormGateOp>(epilogue.getOperation());
  // Groups spanning heads, or a weight per head, take their own kernel.
  if (!gate || !gate.isPerHeadForm() || op.getGateZ())
    return failure();
  auto fused = llvm::cast<RecurrenceOp>(rewriter.clone(*op.getOperation()));
  rewriter.modifyOpInPlace(fused, [&] {
    fused.getGateZMutable().assign(gate.getZ());
    fused.getGateWeightMutable().assign(gate.getWeight());
    fused.setGateEpsAttr(gate.getEpsAttr());
    fused.setGateActivationAttr(gate.getActivationAttr());
  });
  return fused.getOperation();
}

FailureOr<Operation *>
LinearRecurrenceOp::fuseEpilogue(RewriterBase &rewriter,
                                 EpilogueOpInterface epilogue) {
  return fuseRmsNormGate(*this, rewriter, epilogue);
}

//===----------------------------------------------------------------------===//
// TreeRecurrenceOp
//===----------------------------------------------------------------------===//

LogicalResult TreeRecurrenceOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getValue().getType());
  return success();
}

LogicalResult TreeRecurrenceOp::verify() {
  if (failed(verifyRecurrenceOperands(
          *this, StepLayout::get(false, getPoolIndices() != nullptr))))
    return failure();
  if (Value indices = getPoolIndices();
      indices && failed(verifyPoolIndices([&]() { return emitOpError(); },
                                          getQuery(), indices)))
    return failure();
  auto emit = [&]() { return emitOpError(); };
  NamedTensor q = named("query", getQuery(), kRecQueryDims);
  NamedTensor parents = named("parents", getParents(), kRecTreeDims);
  if (failed(checkRank(emit, parents)) ||
      failed(checkSameDim(emit, parents, 0, q, 0)) ||
      failed(checkSameDim(emit, parents, 1, q, 2)))
    return failure();
  int64_t maxNodes = getMaxNodes();
  // The kernels hold T x T tiles (SPEC §10: trees up to 256 nodes).
  if (maxNodes < 1 || maxNodes > limits::kMaxTreeRecurrenceNodes)
    return emitOpError() << "'max_nodes' must be in [1, "
                         << limits::kMaxTreeRecurrenceNodes << "], got "
                         << maxNodes;
  if (q.isStatic(2) && q.dim(2) > maxNodes)
    return emitOpError() << "a tree of " << q.dim(2)
                         << " nodes exceeds 'max_nodes' = " << maxNodes;
  return success();
}

MaskAttr TreeRecurrenceOp::getPositionMask() {
  return MaskAttr::get(getContext(), MaskKind::Causal, 0);
}
double TreeRecurrenceOp::getScoreScale() {
  return resolveScale(toDouble(getScale()), getQuery().getType().getDimSize(3));
}
Normalizer TreeRecurrenceOp::getNormalizer() {
  return Normalizer::RecurrentState;
}
Epilogue TreeRecurrenceOp::getEpilogue() {
  return getGateZ() ? Epilogue::RmsNormSiluGate : Epilogue::None;
}
SmallVector<Value> TreeRecurrenceOp::getEpilogueOperands() {
  if (getGateZ())
    return {getGateZ(), getGateWeight()};
  return {};
}
RecurrenceRule TreeRecurrenceOp::getRecurrenceRule() { return getRule(); }
Value TreeRecurrenceOp::getStepDecay() { return getDecay(); }
Value TreeRecurrenceOp::getStepBeta() { return getBeta(); }
Value TreeRecurrenceOp::getStateInput() { return getInitialState(); }
int64_t TreeRecurrenceOp::getStepChunkSize() { return getMaxNodes(); }
bool TreeRecurrenceOp::getNormalizesQueryKey() { return getQkL2norm(); }
double TreeRecurrenceOp::getEpilogueEpsilon() {
  return getGateZ() ? getGateEps().convertToDouble() : 0.0;
}
GateActivation TreeRecurrenceOp::getEpilogueActivation() {
  return getGateActivation();
}
KeySelectionKind TreeRecurrenceOp::getKeySelectionKind() {
  return KeySelectionKind::Tree;
}
Value TreeRecurrenceOp::getKeySelection() { return getParents(); }
Value TreeRecurrenceOp::getStateSlots() { return getPoolIndices(); }
FailureOr<Operation *>
TreeRecurrenceOp::fuseEpilogue(RewriterBase &rewriter,
                               EpilogueOpInterface epilogue) {
  return fuseRmsNormGate(*this, rewriter, epilogue);
}

//===----------------------------------------------------------------------===//
// RmsNormGateOp
//===----------------------------------------------------------------------===//

LogicalResult RmsNormGateOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferredReturnTypes) {
  inferredReturnTypes.push_back(adaptor.getOutput().getType());
  return success();
}

LogicalResult RmsNormGateOp::verify() {
  auto emit = [&]() { return emitOpError(); };
  // [B, H, L, Dv], or packed token-major [T, H, Dv] (SPEC §8).
  bool packed = getOutput().getType().getRank() == 3;
  ArrayRef<const char *> rowDims = packed ? ArrayRef(kRowsDims) : kRowDims;
  NamedTensor o = named("output", getOutput(), rowDims);
  NamedTensor z = named("z", getZ(), rowDims);
  NamedTensor w = named("weight", getWeight(), kWeightDims);
  for (const NamedTensor *t : {&o, &z, &w})
    if (failed(checkRank(emit, *t)))
      return failure();
  for (unsigned d = 0; d < rowDims.size(); ++d)
    if (failed(checkSameDim(emit, z, d, o, d)))
      return failure();
  if (failed(
          verifySkipOperands(emit, getSkipInput(), getSkipScale(), o, rowDims)))
    return failure();
  double eps = getEps().convertToDouble();
  if (!(eps > 0.0))
    return emitOpError() << "'eps' must be > 0, got " << eps;
  const int64_t headFeatures = getHeadFeatures();
  const int64_t tokenFeatures = getTokenFeatures();
  const int64_t weightSize = getWeight().getType().getDimSize(0);
  if (ShapedType::isDynamic(headFeatures) ||
      ShapedType::isDynamic(tokenFeatures) || ShapedType::isDynamic(weightSize))
    return emitOpError() << "needs static head counts and feature sizes "
                            "(H, Dv and the weight's size)";
  if (weightSize != headFeatures && weightSize != tokenFeatures)
    return emitOpError() << "'weight' must hold a head's " << headFeatures
                         << " features (Dv) or a token's " << tokenFeatures
                         << " (H * Dv), got " << weightSize;
  const int64_t group = getGroupFeatures();
  if (group < 1 || tokenFeatures % group != 0 ||
      (headFeatures % group != 0 && group % headFeatures != 0))
    return emitOpError()
           << "'group_size' must divide a token's " << tokenFeatures
           << " features (H * Dv) and be a divisor or a multiple of a "
              "head's "
           << headFeatures << " (Dv), got " << group;
  return success();
}

int64_t RmsNormGateOp::getHeadFeatures() {
  auto type = getOutput().getType();
  return type.getDimSize(type.getRank() - 1);
}

int64_t RmsNormGateOp::getTokenFeatures() {
  auto type = getOutput().getType();
  const int64_t heads = type.getDimSize(1);
  const int64_t features = getHeadFeatures();
  if (ShapedType::isDynamic(heads) || ShapedType::isDynamic(features))
    return ShapedType::kDynamic;
  return heads * features;
}

int64_t RmsNormGateOp::getGroupFeatures() {
  return getGroupSize().value_or(getHeadFeatures());
}

bool RmsNormGateOp::isPerHeadForm() {
  return getGroupFeatures() == getHeadFeatures() && getNormBeforeGate() &&
         getWeight().getType().getDimSize(0) == getHeadFeatures() &&
         !getSkipInput();
}

Value RmsNormGateOp::getEpilogueInput() { return getOutput(); }
Epilogue RmsNormGateOp::getEpilogueKind() { return Epilogue::RmsNormSiluGate; }
SmallVector<Value> RmsNormGateOp::getEpilogueParameters() {
  SmallVector<Value> parameters{getZ(), getWeight()};
  if (getSkipInput())
    parameters.append({getSkipInput(), getSkipScale()});
  return parameters;
}

//===----------------------------------------------------------------------===//
// Custom assembly directives
//===----------------------------------------------------------------------===//

/// The rule of a linear recurrence, spelled as a bare keyword right after the
/// op name: `attn.linear_recurrence gated_delta %q, ...`.
static ParseResult parseRuleKeyword(OpAsmParser &parser,
                                    RecurrenceRuleAttr &rule) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<RecurrenceRule> value = symbolizeRecurrenceRule(keyword);
  if (!value)
    return parser.emitError(loc)
           << "unknown recurrence rule '" << keyword
           << "'; expected linear, decay, gla, delta, gated_delta or kda";
  rule = RecurrenceRuleAttr::get(parser.getContext(), *value);
  return success();
}

static void printRuleKeyword(OpAsmPrinter &printer, Operation *,
                             RecurrenceRuleAttr rule) {
  printer << stringifyRecurrenceRule(rule.getValue());
}

#define GET_OP_CLASSES
#include "Attn/AttnOps.cpp.inc"
