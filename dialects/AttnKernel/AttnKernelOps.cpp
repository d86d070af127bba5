//===- AttnKernelOps.cpp - Ops below the dispatch boundary ----------------===//
//
// The dialect, and the verifiers of its ops.
//
//===----------------------------------------------------------------------===//

#include "AttnKernel/AttnKernelOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace mlir::attn;

#include "AttnKernel/AttnKernelOpsDialect.cpp.inc"

void AttnKernelDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "AttnKernel/AttnKernelOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "AttnKernel/AttnKernelOps.cpp.inc"

//===----------------------------------------------------------------------===//
// DispatchOp
//===----------------------------------------------------------------------===//

LogicalResult DispatchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto kernel = symbolTable.lookupNearestSymbolFrom<FunctionOpInterface>(
      *this, getKernelAttr());
  if (!kernel)
    return emitOpError() << "kernel " << getKernelAttr()
                         << " is not a function in this module";
  ArrayRef<Type> argTypes = kernel.getArgumentTypes();
  size_t numBindings = getBindings().size();
  if (argTypes.size() != numBindings + 1)
    return emitOpError() << "kernel " << getKernelAttr() << " takes "
                         << argTypes.size()
                         << " arguments, expected one per binding ("
                         << numBindings << ") plus the workgroup id";
  for (auto [index, binding] : llvm::enumerate(getBindings()))
    if (binding.getType() != argTypes[index])
      return emitOpError() << "binding #" << index << " has type "
                           << binding.getType() << " but kernel "
                           << getKernelAttr() << " takes " << argTypes[index];
  if (!argTypes.back().isIndex())
    return emitOpError() << "kernel " << getKernelAttr()
                         << " must take the workgroup id (index) last, got "
                         << argTypes.back();
  if (!kernel.getResultTypes().empty())
    return emitOpError() << "kernel " << getKernelAttr()
                         << " must not return values";
  return success();
}

//===----------------------------------------------------------------------===//
// IndexStatusOp
//===----------------------------------------------------------------------===//

LogicalResult IndexStatusOp::verify() {
  MemRefType type = getRecord().getType();
  if (type.getRank() != 1 || type.getDimSize(0) != kFields ||
      !type.getLayout().isIdentity())
    return emitOpError() << "the record is memref<" << kFields << "xi32>, got "
                         << type;
  return success();
}

//===----------------------------------------------------------------------===//
// WarpMmaOp
//===----------------------------------------------------------------------===//

/// The [rows, columns] tile a warp_mma operand holds: a row-major 2-D
/// buffer's shape, or a core-matrix tiled buffer's [r / 8, c / 8, 8, 8].
static std::pair<int64_t, int64_t> tileShape(MemRefType type) {
  if (type.getRank() == 4)
    return {type.getDimSize(0) * type.getDimSize(2),
            type.getDimSize(1) * type.getDimSize(3)};
  return {type.getDimSize(0), type.getDimSize(1)};
}

/// Whether `type` is row-major, or with `identityOnly` unset a view whose
/// rows are contiguous at a static stride (memref.subview of rows or
/// columns of a row-major buffer).
static bool unitStrideRows(MemRefType type, bool identityOnly) {
  if (type.getLayout().isIdentity())
    return true;
  SmallVector<int64_t> strides;
  int64_t offset;
  if (identityOnly || failed(type.getStridesAndOffset(strides, offset)))
    return false;
  return !strides.empty() && strides.back() == 1 &&
         llvm::none_of(strides, ShapedType::isDynamic);
}

LogicalResult WarpMmaOp::verify() {
  const bool warpgroup = getWarpgroup();
  auto check = [&](Value operand, StringRef name) -> LogicalResult {
    auto type = cast<MemRefType>(operand.getType());
    if (!type.hasStaticShape() || !unitStrideRows(type, warpgroup))
      return emitOpError() << "'" << name
                           << "' must be a row-major memref of static shape"
                           << (warpgroup ? "" : " (or a view of its rows)")
                           << ", got " << type;
    const int64_t side = kCoreMatrixSide;
    if (warpgroup && (type.getRank() != 4 || type.getDimSize(2) != side ||
                      type.getDimSize(3) != side))
      return emitOpError() << "'" << name
                           << "' of a warpgroup product must be core-matrix "
                              "tiled, [r / 8, c / 8, 8, 8], got "
                           << type;
    if (!warpgroup && type.getRank() != 2)
      return emitOpError() << "'" << name << "' must be 2-D, got " << type;
    return success();
  };
  if ((!getLhsFragment() && failed(check(getLhs(), "lhs"))) ||
      failed(check(getRhs(), "rhs")))
    return failure();
  if (!getAccFragment() && failed(check(getAcc(), "acc")))
    return failure();
  MemRefType lhs = getLhs().getType(), rhs = getRhs().getType(),
             acc = getAcc().getType();
  Type element = getProductType();
  StringRef typed = getLhsFragment() ? "rhs" : "lhs";
  if (!element.isF16() && !element.isBF16() && !element.isF32())
    return emitOpError() << "'" << typed
                         << "' elements must be f16, bf16 or f32, got "
                         << element;
  if (!getLhsFragment() && rhs.getElementType() != element)
    return emitOpError() << "'rhs' elements must match 'lhs' (" << element
                         << "), got " << rhs.getElementType();
  if (!acc.getElementType().isF32())
    return emitOpError() << "'acc' elements must be f32, got "
                         << acc.getElementType();
  const int64_t k = getK(), n = getN(), tiles = getRowTiles();
  if (tiles < 1)
    return emitOpError() << "row_tiles must be positive, got " << tiles;
  const int64_t rows = kRows * tiles;
  if (k <= 0 || k % kReductionStep != 0)
    return emitOpError() << "k must be a positive multiple of "
                         << kReductionStep << ", got " << k;
  if (n <= 0 || n % kFragmentColumns != 0)
    return emitOpError() << "n must be a positive multiple of "
                         << kFragmentColumns << ", got " << n;
  if (warpgroup) {
    if (element.isF32())
      return emitOpError() << "a warpgroup product takes f16 or bf16 "
                              "operands, got "
                           << element;
    if (!getAccFragment() || tiles != 1)
      return emitOpError() << "a warpgroup product accumulates into the "
                              "lane's fragment (acc_fragment) of one row "
                              "tile";
    if (n > kMaxWarpgroupColumns)
      return emitOpError() << "a warpgroup product has at most "
                           << kMaxWarpgroupColumns << " columns, got " << n;
  } else if (getAsync()) {
    return emitOpError() << "only a warpgroup product may be async";
  }
  auto tooSmall = [&](StringRef name, MemRefType type, int64_t rows,
                      int64_t columns) {
    auto [typeRows, typeColumns] = tileShape(type);
    return emitOpError() << "'" << name << "' [" << typeRows << ", "
                         << typeColumns << "] is smaller than the [" << rows
                         << ", " << columns << "] it must hold";
  };
  if (getLhsFragment()) {
    // The warp's fragments [32, T k / 8, 4], or (on the GPU, outlined) the
    // lane's own [T k / 8, 4].
    const int64_t blocks = tiles * k / kFragmentColumns;
    const bool warp = lhs.getRank() == 3 && lhs.getDimSize(0) == kWarpLanes;
    const bool own = lhs.getRank() == 2;
    ArrayRef<int64_t> fragment = lhs.getShape().take_back(2);
    if (!lhs.getElementType().isF32() || !lhs.hasStaticShape() ||
        !(warp || own) || fragment[0] != blocks || fragment[1] != 4)
      return emitOpError() << "'lhs' (fragments) must be f32 [" << kWarpLanes
                           << ", " << blocks
                           << ", 4] (each lane's 4 elements per 8 of the " << k
                           << " columns, per row tile) or a lane's own ["
                           << blocks << ", 4], got " << lhs;
  } else if (tileShape(lhs).first < rows || tileShape(lhs).second < k) {
    return tooSmall("lhs", lhs, rows, k);
  }
  if (getAccFragment()) {
    // The lane's fragment: 4 elements per block of 8 columns and row tile.
    const int64_t blocks = tiles * n / kFragmentColumns;
    if (acc.getRank() != 2 || !acc.hasStaticShape() ||
        acc.getDimSize(0) != blocks || acc.getDimSize(1) != 4)
      return emitOpError() << "'acc' (a fragment) must be [" << blocks
                           << ", 4] (4 elements per 8 of the " << n
                           << " columns, per row tile), got " << acc;
  } else if (acc.getDimSize(0) < rows || acc.getDimSize(1) < n) {
    return tooSmall("acc", acc, rows, n);
  }
  const int64_t rhsRows = getRhsTransposed() ? n : k;
  const int64_t rhsColumns = getRhsTransposed() ? k : n;
  if (tileShape(rhs).first < rhsRows || tileShape(rhs).second < rhsColumns)
    return tooSmall(getRhsTransposed() ? "rhs (transposed, [n, k])"
                                       : "rhs ([k, n])",
                    rhs, rhsRows, rhsColumns);
  return success();
}

//===----------------------------------------------------------------------===//
// AsyncCopyOp
//===----------------------------------------------------------------------===//

/// The operands of a copy of `elements` elements from `source` to
/// `target` (async_copy, bulk_copy): an index per dimension, both
/// contiguous along their last dimension, the same integer or float
/// elements, target rows that can hold them, and bytes copied that
/// `bytesAllowed` takes (`bytesRule` says which).
static LogicalResult
verifyCopyOperands(Operation *op, MemRefType source, ValueRange sourceIndices,
                   MemRefType target, ValueRange targetIndices,
                   int64_t elements, function_ref<bool(int64_t)> bytesAllowed,
                   StringRef bytesRule) {
  auto checkOperand = [&](StringRef name, MemRefType type,
                          ValueRange indices) -> LogicalResult {
    if (static_cast<int64_t>(indices.size()) != type.getRank())
      return op->emitOpError() << "'" << name << "' has rank " << type.getRank()
                               << " but " << indices.size() << " indices";
    SmallVector<int64_t> strides;
    int64_t offset;
    if (type.getRank() == 0 ||
        failed(type.getStridesAndOffset(strides, offset)) ||
        strides.back() != 1)
      return op->emitOpError() << "'" << name
                               << "' must be contiguous along its last "
                                  "dimension, got "
                               << type;
    return success();
  };
  if (failed(checkOperand("source", source, sourceIndices)) ||
      failed(checkOperand("target", target, targetIndices)))
    return failure();
  Type element = source.getElementType();
  if (target.getElementType() != element)
    return op->emitOpError() << "'target' elements must match 'source' ("
                             << element << "), got " << target.getElementType();
  if (!element.isIntOrFloat())
    return op->emitOpError()
           << "elements must be integers or floats, got " << element;
  if (!target.isDynamicDim(target.getRank() - 1) &&
      target.getDimSize(target.getRank() - 1) < elements)
    return op->emitOpError()
           << "'target' rows of " << target.getDimSize(target.getRank() - 1)
           << " elements cannot hold " << elements;
  const int64_t bytes = elements * element.getIntOrFloatBitWidth() / 8;
  if (elements <= 0 || !bytesAllowed(bytes))
    return op->emitOpError() << "copies " << bytesRule << ", got " << elements
                             << " elements of " << element;
  return success();
}

LogicalResult AsyncCopyOp::verify() {
  return verifyCopyOperands(
      *this, getSource().getType(), getSourceIndices(), getTarget().getType(),
      getTargetIndices(), getElements(),
      [](int64_t bytes) { return bytes == 4 || bytes == 8 || bytes == 16; },
      "4, 8 or 16 bytes");
}

//===----------------------------------------------------------------------===//
// AsyncWaitOp
//===----------------------------------------------------------------------===//

LogicalResult WarpgroupWaitOp::verify() {
  // The attribute's signed value (its getter's is unsigned).
  const int64_t pending = getPendingAttr().getInt();
  if (pending < 0)
    return emitOpError() << "pending must not be negative, got " << pending;
  return success();
}

LogicalResult AsyncWaitOp::verify() {
  // The attribute's signed value (its getter's is unsigned).
  const int64_t pending = getPendingAttr().getInt();
  if (pending < 0)
    return emitOpError() << "pending must not be negative, got " << pending;
  return success();
}

//===----------------------------------------------------------------------===//
// mbarrier ops
//===----------------------------------------------------------------------===//

/// The barriers of an mbarrier op: a 1-D buffer of 64-bit words.
static LogicalResult verifyBarriers(Operation *op, Value barriers) {
  auto type = cast<MemRefType>(barriers.getType());
  if (type.getRank() != 1 || !type.getElementType().isInteger(64))
    return op->emitOpError()
           << "'barriers' must be a 1-D buffer of i64 (a word per barrier), "
              "got "
           << type;
  return success();
}

LogicalResult MbarrierInitOp::verify() {
  const int64_t arrivals = getArrivalsAttr().getInt();
  if (arrivals < 1 || arrivals > kMaxArrivals)
    return emitOpError() << "arrivals must be in [1, " << kMaxArrivals
                         << "], got " << arrivals;
  return verifyBarriers(*this, getBarriers());
}

LogicalResult MbarrierArriveOp::verify() {
  // cp.async.mbarrier.arrive announces no transaction bytes.
  if (getAfterCopies() && getExpectBytes())
    return emitOpError()
           << "an arrival after copies cannot expect bytes as well";
  return verifyBarriers(*this, getBarriers());
}

LogicalResult MbarrierWaitOp::verify() {
  return verifyBarriers(*this, getBarriers());
}

LogicalResult BulkCopyOp::verify() {
  if (failed(verifyCopyOperands(
          *this, getSource().getType(), getSourceIndices(),
          getTarget().getType(), getTargetIndices(), getElements(),
          [](int64_t bytes) { return bytes % 16 == 0; },
          "a positive multiple of 16 bytes")))
    return failure();
  return verifyBarriers(*this, getBarriers());
}
