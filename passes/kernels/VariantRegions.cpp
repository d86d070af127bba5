//===- VariantRegions.cpp - score_mod / mask_mod inside kernels -----------===//
//
// A region is scalar code (the verifier allows arith, math and
// tensor.extract only). It is emitted lane-wise: a value that depends on
// no vector argument stays a scalar, computed once (LLVM hoists what depends
// only on the head); every other value becomes a vector of the same op, its
// index values i32 lanes. tensor.extract becomes a load (scalar indices) or
// a gather (lane indices), its indices clamped into the tensor so that no
// region, and no lane past the end of a tile, can read outside it (an empty
// tensor reads as 0).
//
// Where arith leaves a result undefined, a region's is defined, the same on
// every target and for scalars and lanes alike (docs/new-variant.md): a
// division by a table entry of 0 must not trap the process (x86's idiv does)
// and a NaN converted to an integer must not become an index that is poison
// before it is clamped. Integer division by 0 gives 0 and remainder by 0
// the dividend; division by -1 wraps (INT_MIN / -1 = INT_MIN, not a trap);
// shifts by an amount outside [0, width) give 0 (shrsi: the sign);
// float-to-integer conversions saturate, NaN giving 0; overflow flags
// (nsw, nuw) are dropped, so arithmetic wraps. Index values count as 32-bit,
// the width of the lanes they become; a scalar past them saturates as it
// becomes lanes.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/VariantRegions.h"

#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

#include <limits>

using namespace mlir;
using namespace mlir::attn;

VariantRegions VariantRegions::of(AttentionOpInterface op) {
  VariantRegions regions;
  regions.scoreMod = op.getScoreModifier();
  regions.maskMod = op.getMaskModifier();
  regions.tensors = getVariantTensors(op);
  return regions;
}

ValueRange VariantRegions::buffersOf(func::FuncOp kernel) const {
  auto args = kernel.getArguments();
  return ValueRange(args).slice(args.size() - 1 - tensors.size(),
                                tensors.size());
}

namespace {

/// Emits one region's ops lane-wise (see the file comment).
class LanewiseEmitter {
public:
  LanewiseEmitter(ImplicitLocOpBuilder &b,
                  const llvm::DenseMap<Value, Value> &bufferOf)
      : b(b), bufferOf(bufferOf) {}

  Value run(Region &region, ArrayRef<Value> args) {
    Block &block = region.front();
    for (auto [arg, value] : llvm::zip_equal(block.getArguments(), args)) {
      if (auto type = dyn_cast<VectorType>(value.getType())) {
        width = type.getNumElements();
        lanes[arg] = value;
      } else {
        scalars.map(arg, value);
      }
    }
    for (Operation &op : block.without_terminator()) {
      for (Value operand : op.getOperands())
        mapHoistedConstant(operand);
      if (auto extract = dyn_cast<tensor::ExtractOp>(op))
        emitExtract(extract);
      else if (llvm::any_of(op.getOperands(), isLanes))
        emitLanewise(op);
      else
        emitScalar(op);
    }
    Value yielded = cast<YieldOp>(block.getTerminator()).getValue();
    mapHoistedConstant(yielded);
    return isLanes(yielded) ? lanes.lookup(yielded) : scalars.lookup(yielded);
  }

private:
  /// Clones a constant that canonicalization hoisted out of the region
  /// (the only scalars a region reads from above; its tensors are bound).
  void mapHoistedConstant(Value value) {
    Operation *def = value.getDefiningOp();
    if (def && def->hasTrait<OpTrait::ConstantLike>() && !isLanes(value) &&
        !scalars.contains(value))
      b.clone(*def, scalars);
  }

  /// The lane type of a region type: index values are i32 lanes.
  Type laneType(Type type) const {
    return type.isIndex() ? b.getI32Type() : type;
  }
  VectorType vectorOf(Type type) const {
    return VectorType::get({width}, laneType(type));
  }
  /// `value` as a vector: its lanes, or its scalar broadcast. An index
  /// scalar saturates into the i32 lanes, so that a comparison with a
  /// constant past them (`kp < 2^32`) says what it says on 64-bit scalars.
  Value lanesOf(Value value) {
    if (Value vector = lanes.lookup(value))
      return vector;
    Value scalar = scalars.lookup(value);
    if (scalar.getType().isIndex()) {
      Value low = arith::ConstantIndexOp::create(
          b, std::numeric_limits<int32_t>::min());
      Value high = arith::ConstantIndexOp::create(
          b, std::numeric_limits<int32_t>::max());
      scalar = arith::MinSIOp::create(b, arith::MaxSIOp::create(b, scalar, low),
                                      high);
      scalar = arith::IndexCastOp::create(b, b.getI32Type(), scalar);
    }
    return vector::BroadcastOp::create(b, vectorOf(value.getType()), scalar);
  }

  /// `index` clamped into [0, size - 1]: a scalar index, or i32 lanes.
  Value clamp(Value index, Value size) {
    Value zero, last;
    if (isa<VectorType>(index.getType())) {
      auto type = cast<VectorType>(index.getType());
      zero = arith::ConstantOp::create(
          b, DenseElementsAttr::get(type, b.getI32IntegerAttr(0)));
      last = vector::BroadcastOp::create(
          b, type,
          arith::IndexCastOp::create(
              b, b.getI32Type(),
              arith::SubIOp::create(b, size,
                                    arith::ConstantIndexOp::create(b, 1))));
    } else {
      zero = arith::ConstantIndexOp::create(b, 0);
      last =
          arith::SubIOp::create(b, size, arith::ConstantIndexOp::create(b, 1));
    }
    return arith::MaxSIOp::create(b, zero,
                                  arith::MinSIOp::create(b, index, last));
  }

  /// A load at scalar indices; a gather from the flattened buffer at lane
  /// indices (row-major offsets, i32).
  void emitExtract(tensor::ExtractOp op) {
    Value buffer = bufferOf.lookup(op.getTensor());
    assert(buffer && "a region tensor without a kernel binding");
    auto type = cast<MemRefType>(buffer.getType());
    int64_t rank = type.getRank();
    SmallVector<Value> sizes;
    for (int64_t d = 0; d < rank; ++d)
      sizes.push_back(memref::DimOp::create(b, buffer, d));
    // An empty tensor has no element to clamp to: it reads as 0.
    Value nonEmpty;
    for (Value size : sizes) {
      Value positive =
          arith::CmpIOp::create(b, arith::CmpIPredicate::sgt, size,
                                arith::ConstantIndexOp::create(b, 0));
      nonEmpty =
          nonEmpty ? arith::AndIOp::create(b, nonEmpty, positive) : positive;
    }
    Type element = type.getElementType();
    if (!llvm::any_of(op.getIndices(), isLanes)) {
      SmallVector<Value> indices;
      for (auto [index, size] : llvm::zip(op.getIndices(), sizes))
        indices.push_back(clamp(scalars.lookup(index), size));
      Value loaded;
      if (!nonEmpty) {
        loaded = memref::LoadOp::create(b, buffer, indices);
      } else {
        auto read = scf::IfOp::create(b, element, nonEmpty,
                                      /*withElseRegion=*/true);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(read.thenBlock());
        scf::YieldOp::create(
            b, ValueRange{memref::LoadOp::create(b, buffer, indices)});
        b.setInsertionPointToStart(read.elseBlock());
        scf::YieldOp::create(b, ValueRange{arith::ConstantOp::create(
                                    b, b.getZeroAttr(element))});
        loaded = read.getResult(0);
      }
      scalars.map(op.getResult(), loaded);
      return;
    }
    VectorType offsetType = vectorOf(b.getIndexType());
    Value offset, stride;
    for (int64_t d = rank - 1; d >= 0; --d) {
      Value index = clamp(lanesOf(op.getIndices()[d]), sizes[d]);
      if (stride)
        index = arith::MulIOp::create(
            b, index,
            vector::BroadcastOp::create(
                b, offsetType,
                arith::IndexCastOp::create(b, b.getI32Type(), stride)));
      offset = offset ? arith::AddIOp::create(b, offset, index) : index;
      stride = stride ? arith::MulIOp::create(b, stride, sizes[d]) : sizes[d];
    }
    Value flat = buffer;
    if (rank > 1) {
      SmallVector<ReassociationIndices> all(1);
      for (int64_t d = 0; d < rank; ++d)
        all[0].push_back(d);
      flat = memref::CollapseShapeOp::create(b, buffer, all);
    }
    auto resultType = VectorType::get({width}, element);
    Value readLanes = vector::BroadcastOp::create(
        b, VectorType::get({width}, b.getI1Type()), nonEmpty);
    Value zero = arith::ConstantOp::create(
        b, DenseElementsAttr::get(resultType, b.getZeroAttr(element)));
    lanes[op.getResult()] = vector::GatherOp::create(
        b, resultType, flat, ValueRange{arith::ConstantIndexOp::create(b, 0)},
        offset, readLanes, zero);
  }

  /// The op on vectors. Casts between index (i32 lanes) and an integer
  /// type become the integer casts they are on lanes.
  void emitLanewise(Operation &op) {
    if (isa<arith::IndexCastOp, arith::IndexCastUIOp>(op)) {
      Value from = lanesOf(op.getOperand(0));
      auto to = vectorOf(op.getResult(0).getType());
      unsigned fromBits = getElementTypeOrSelf(from).getIntOrFloatBitWidth();
      unsigned toBits = to.getElementType().getIntOrFloatBitWidth();
      // An index lane holds its value sign-extended from 64 bits, so even
      // index_castui widens it by its sign (the 64-bit index's bits).
      bool isSigned =
          isa<arith::IndexCastOp>(op) || op.getOperand(0).getType().isIndex();
      Value cast = from;
      if (toBits < fromBits)
        cast = arith::TruncIOp::create(b, to, from);
      else if (toBits > fromBits && isSigned)
        cast = arith::ExtSIOp::create(b, to, from);
      else if (toBits > fromBits)
        cast = arith::ExtUIOp::create(b, to, from);
      lanes[op.getResult(0)] = cast;
      return;
    }
    SmallVector<Value> operands;
    for (Value operand : op.getOperands())
      operands.push_back(lanesOf(operand));
    SmallVector<Type> types;
    for (Type type : op.getResultTypes())
      types.push_back(vectorOf(type));
    for (auto [result, vector] :
         llvm::zip(op.getResults(), emitDefined(op, operands, types)))
      lanes[result] = vector;
  }

  /// The op on the scalars its operands are.
  void emitScalar(Operation &op) {
    SmallVector<Value> operands;
    for (Value operand : op.getOperands())
      operands.push_back(scalars.lookupOrDefault(operand));
    for (auto [result, scalar] : llvm::zip(
             op.getResults(), emitDefined(op, operands, op.getResultTypes())))
      scalars.map(result, scalar);
  }

  /// `op` on `operands` (scalars or lanes) giving `types`, defined where
  /// arith leaves it undefined (see the file comment).
  SmallVector<Value> emitDefined(Operation &op, ValueRange operands,
                                 TypeRange types) {
    auto build = [&](ValueRange args) {
      return create(op, args, types)->getResult(0);
    };
    if (isa<arith::DivSIOp, arith::FloorDivSIOp, arith::CeilDivSIOp,
            arith::DivUIOp, arith::CeilDivUIOp, arith::RemSIOp, arith::RemUIOp>(
            op))
      return {divideDefined(op, operands[0], operands[1], build)};
    if (isa<arith::ShLIOp, arith::ShRUIOp, arith::ShRSIOp>(op))
      return {shiftDefined(op, operands[0], operands[1], build)};
    if (isa<arith::FPToSIOp, arith::FPToUIOp>(op))
      return {convertDefined(op, operands[0], types[0], build)};
    return create(op, operands, types)->getResults();
  }

  /// `op` (a region's) on `operands` giving `types`, with no overflow
  /// flags.
  Operation *create(Operation &op, ValueRange operands, TypeRange types) {
    OperationState state(op.getLoc(), op.getName(), operands, types,
                         op.getAttrs());
    Operation *built = b.create(state);
    if (auto flags = dyn_cast<arith::ArithIntegerOverflowFlagsInterface>(built))
      built->setAttr(flags.getIntegerOverflowAttrName(),
                     arith::IntegerOverflowFlagsAttr::get(
                         b.getContext(), arith::IntegerOverflowFlags::none));
    return built;
  }

  /// x / d or x % d: a divisor of 0, or of -1 where a signed division traps
  /// on INT_MIN / -1, divides by 1 instead and the result is chosen after:
  /// x / 0 = 0, x % 0 = x (so that x = (x / d) d + x % d still holds),
  /// x / -1 = 0 - x (wrapping), x % -1 = x % 1 = 0.
  Value divideDefined(Operation &op, Value x, Value d,
                      function_ref<Value(ValueRange)> build) {
    bool isSigned = isa<arith::DivSIOp, arith::FloorDivSIOp, arith::CeilDivSIOp,
                        arith::RemSIOp>(op);
    bool isRemainder = isa<arith::RemSIOp, arith::RemUIOp>(op);
    Value byZero = equals(d, 0), byMinusOne, replaced = byZero;
    if (isSigned) {
      byMinusOne = equals(d, -1);
      replaced = arith::OrIOp::create(b, byZero, byMinusOne);
    }
    Value result =
        build({x, arith::SelectOp::create(b, replaced, constantLike(d, 1), d)});
    if (isSigned && !isRemainder)
      result = arith::SelectOp::create(
          b, byMinusOne, arith::SubIOp::create(b, constantLike(x, 0), x),
          result);
    return arith::SelectOp::create(
        b, byZero, isRemainder ? x : constantLike(x, 0), result);
  }

  /// x shifted by an amount outside [0, width): 0, or for shrsi the sign.
  Value shiftDefined(Operation &op, Value x, Value amount,
                     function_ref<Value(ValueRange)> build) {
    int64_t width = bitWidth(x.getType());
    Value inRange = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, amount,
                                          constantLike(amount, width));
    if (isa<arith::ShRSIOp>(op))
      return build(
          {x, arith::SelectOp::create(b, inRange, amount,
                                      constantLike(amount, width - 1))});
    Value shifted =
        build({x, arith::SelectOp::create(b, inRange, amount,
                                          constantLike(amount, 0))});
    return arith::SelectOp::create(b, inRange, shifted, constantLike(x, 0));
  }

  /// A float converted to an integer of `type`, saturating; NaN gives 0.
  Value convertDefined(Operation &op, Value x, Type type,
                       function_ref<Value(ValueRange)> build) {
    bool isSigned = isa<arith::FPToSIOp>(op);
    int64_t width = bitWidth(type);
    const llvm::fltSemantics &semantics =
        cast<FloatType>(getElementTypeOrSelf(x)).getFloatSemantics();
    APInt lowest =
        isSigned ? APInt::getSignedMinValue(width) : APInt::getMinValue(width);
    APInt highest =
        isSigned ? APInt::getSignedMaxValue(width) : APInt::getMaxValue(width);
    // The bounds as floats rounded toward zero, so that a value clamped
    // between them converts: the low one (0 or -2^(w-1)) is exact, and
    // above the high one is the integer maximum.
    auto towardZero = [&](const APInt &limit) {
      APFloat f(semantics);
      f.convertFromAPInt(limit, isSigned, APFloat::rmTowardZero);
      return createScalarOrSplatConstant(b, b.getLoc(), x.getType(), f);
    };
    Value high = towardZero(highest);
    Value isNan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, x, x);
    Value clamped = arith::MinimumFOp::create(
        b, arith::MaximumFOp::create(b, x, towardZero(lowest)), high);
    Value number = arith::SelectOp::create(
        b, isNan,
        createScalarOrSplatConstant(b, b.getLoc(), x.getType(),
                                    APFloat::getZero(semantics)),
        clamped);
    Value above = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, x, high);
    return arith::SelectOp::create(
        b, above, createScalarOrSplatConstant(b, b.getLoc(), type, highest),
        build({number}));
  }

  /// The bits of an integer or index value (scalar or lanes): index counts
  /// as the 32 bits of its lanes.
  static int64_t bitWidth(Type type) {
    Type element = getElementTypeOrSelf(type);
    return element.isIndex() ? 32 : element.getIntOrFloatBitWidth();
  }
  /// `x` as a constant of `like`'s type (a scalar or a splat).
  Value constantLike(Value like, int64_t x) {
    Type type = like.getType();
    Type element = getElementTypeOrSelf(type);
    TypedAttr value = element.isIndex()
                          ? TypedAttr(b.getIndexAttr(x))
                          : TypedAttr(b.getIntegerAttr(element, x));
    return splatLike(type, value);
  }
  /// `value` as a constant of `type`: itself, or its splat.
  Value splatLike(Type type, TypedAttr value) {
    if (auto vector = dyn_cast<VectorType>(type))
      return arith::ConstantOp::create(b,
                                       DenseElementsAttr::get(vector, value));
    return arith::ConstantOp::create(b, value);
  }
  /// Whether the integer `v` (scalar or lanes) equals `x`.
  Value equals(Value v, int64_t x) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::eq, v,
                                 constantLike(v, x));
  }

  ImplicitLocOpBuilder &b;
  const llvm::DenseMap<Value, Value> &bufferOf;
  int64_t width = 1;
  /// Region value -> its scalar in the kernel (the region's own type).
  IRMapping scalars;
  /// Region value -> its vector of lanes in the kernel.
  llvm::DenseMap<Value, Value> lanes;
  std::function<bool(Value)> isLanes = [this](Value v) {
    return lanes.contains(v);
  };
};

} // namespace

VariantEmitter::VariantEmitter(KernelEmitter &e, const VariantRegions &regions,
                               ValueRange buffers)
    : e(e), regions(regions) {
  for (auto [tensor, buffer] : llvm::zip_equal(regions.tensors, buffers))
    bufferOf[tensor] = buffer;
}

Value VariantEmitter::emit(Region &region, ArrayRef<Value> args) {
  return LanewiseEmitter(e.b, bufferOf).run(region, args);
}

Value VariantEmitter::score(Value s, Value batch, Value head, Value queryPos,
                            Value keyPos) {
  if (!regions.scoreMod)
    return s;
  Value modified = emit(*regions.scoreMod, {s, batch, head, queryPos, keyPos});
  // A score_mod that ignores a vector score's lanes yields a scalar.
  if (isa<VectorType>(s.getType()) && !isa<VectorType>(modified.getType()))
    modified = vector::BroadcastOp::create(e.b, s.getType(), modified);
  return modified;
}

Value VariantEmitter::visible(Value batch, Value head, Value queryPos,
                              Value keyPos) {
  assert(regions.maskMod && "visible() needs a mask_mod");
  Value visible = emit(*regions.maskMod, {batch, head, queryPos, keyPos});
  // A verdict that depends on no lane holds for every lane.
  if (e.width > 1 && !isa<VectorType>(visible.getType()))
    visible = vector::BroadcastOp::create(
        e.b, VectorType::get({e.width}, e.b.getI1Type()), visible);
  return visible;
}
