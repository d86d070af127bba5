//===- WarpMma.cpp - Lowerings of attn_kernel.warp_mma ----------------===//
//
// attn_kernel.warp_mma is one lane's share of a warp's 16-row matrix product:
// the elements of mma.m16n8k16's accumulator fragment that the lane holds, in
// every block of 8 columns (see the op). Two lowerings compute that share:
//
//  * loops (-attn-warp-mma-to-loops): per element, a fused multiply-add
//    chain over K in f32. The CPU runs block kernels this way, and so do
//    chips without bf16 mma.sync (before sm_80);
//  * tensor cores (-attn-warp-mma-to-nvvm): the lane's A and B fragments
//    loaded from the shared buffers and one nvvm.mma.sync per 16 x 8 x 16
//    step, the accumulators in registers across K; f32 products take three
//    tf32 mma.sync per 16 x 8 x 8 step (lowerToTf32MmaSync);
//  * warpgroup tensor cores (-attn-warp-mma-to-nvvm on sm_90a, ops marked
//    `warpgroup`): one wgmma.mma_async per 16 of K for the warpgroup's 64
//    rows, the shared operands read through matrix descriptors; `async`
//    ones are waited for by attn_kernel.warpgroup_wait (wgmma.wait_group),
//    which the loops erase.
//
// Both place the lane's elements with the same function (MmaFragmentLayout
// in SimtKernels.h), PTX's layout for mma.m16n8k16 with .row.col and 16-bit
// inputs, where g = lane / 4 and t = lane % 4:
//
//   A [16 x 16]: a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..),
//                a3 = (g+8, 2t+8..)                  (row, k), 2 per reg
//   B [16 x 8]:  b0 = (2t..2t+1, g), b1 = (2t+8..2t+9, g)     (k, column)
//   C [16 x 8]:  c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1)
//
// A fragment acc (acc_fragment) holds c0..c3 of block b at [b, 0..3].
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"
#include "passes/Passes.h"
#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNWARPMMATOLOOPS
#define GEN_PASS_DEF_ATTNWARPMMATONVVM
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

/// The op that may write `memref` (a register buffer or a view of one)
/// among `user` and the users of the views it makes, or null.
static Operation *writerOf(Operation *user, Value memref) {
  if (auto view = dyn_cast<memref::SubViewOp>(user)) {
    for (Operation *viewUser : view->getUsers())
      if (Operation *writer = writerOf(viewUser, view))
        return writer;
    return nullptr;
  }
  bool writes;
  if (auto mma = dyn_cast<WarpMmaOp>(user))
    writes = mma.getAcc() == memref;
  else if (auto copy = dyn_cast<AsyncCopyOp>(user))
    writes = copy.getTarget() == memref;
  else if (auto effects = dyn_cast<MemoryEffectOpInterface>(user))
    writes = effects.getEffectOnValue<MemoryEffects::Write>(memref).has_value();
  else
    writes = true;
  return writes ? user : nullptr;
}

LogicalResult mlir::attn::verifyWarpFragmentRead(WarpMmaOp op) {
  auto view = op.getLhs().getDefiningOp<memref::SubViewOp>();
  auto buffer = view ? view.getSource().getDefiningOp<memref::AllocaOp>()
                     : memref::AllocaOp();
  auto loop = dyn_cast<scf::ParallelOp>(op->getParentOp());
  if (!buffer || !buffer->hasAttr(kRegisterBufferAttr) || !loop ||
      !loop->hasAttr(kThreadLoopAttr))
    return op.emitOpError(
        "'lhs' (fragments) must be a warp's view of a register buffer "
        "(memref.subview of a memref.alloca {attn.registers}) in the thread "
        "loop that holds the op");
  // The view starts at the warp's first thread, (thread / 32) 32, and takes
  // all of the next 32 threads' registers.
  Value thread = loop.getInductionVars().front();
  // getMixedOffsets() returns a new vector: keep it alive for the loops
  // below.
  SmallVector<OpFoldResult> offsets = view.getMixedOffsets();
  auto first = dyn_cast_if_present<Value>(offsets.front());
  auto times = first ? first.getDefiningOp<arith::MulIOp>() : nullptr;
  auto quotient =
      times ? times.getLhs().getDefiningOp<arith::DivUIOp>() : arith::DivUIOp();
  const int64_t lanes = WarpMmaOp::kWarpLanes;
  bool warpStart = quotient && quotient.getLhs() == thread &&
                   isConstantIntValue(quotient.getRhs(), lanes) &&
                   isConstantIntValue(times.getRhs(), lanes);
  for (OpFoldResult offset : ArrayRef(offsets).drop_front())
    warpStart &= isConstantIntValue(offset, 0);
  for (OpFoldResult stride : view.getMixedStrides())
    warpStart &= isConstantIntValue(stride, 1);
  if (!warpStart)
    return op.emitOpError(
        "'lhs' (fragments) must view the registers of the warp of the "
        "loop's thread: offsets [(thread / 32) * 32, 0, ...], strides 1");
  for (Operation *user : buffer->getUsers()) {
    Operation *writer = user != view && loop->isProperAncestor(user)
                            ? writerOf(user, buffer)
                            : nullptr;
    if (writer)
      return op.emitOpError("'lhs' (the warp's fragments) is written in the "
                            "same thread loop, where lanes would read "
                            "fragments that other lanes have already changed")
                 .attachNote(writer->getLoc())
             << "written here";
  }
  return success();
}

namespace {

/// The blocks of 8 columns of the op's product.
int64_t columnBlocks(WarpMmaOp op) {
  return op.getN() / WarpMmaOp::kFragmentColumns;
}

/// Where the lane's accumulator element `el` (0, 1) of half `half` in
/// column block `block` of row tile `tile` (whose rows `layout` places)
/// lies in acc: (its row, its column) of a shared tile, or (tile * blocks +
/// block, 2 half + el) of a fragment.
SmallVector<Value, 2> accIndices(SimtEmitter &e, WarpMmaOp op,
                                 MmaFragmentLayout &layout, int64_t tile,
                                 Value block, int64_t half, int64_t el) {
  if (op.getAccFragment())
    return {e.add(e.index(tile * columnBlocks(op)), block),
            e.index(2 * half + el)};
  return {layout.accRow(e, half), layout.accColumn(e, block, el)};
}

/// The layout of row tile `tile` of the op: its rows from row + 16 tile.
MmaFragmentLayout tileLayout(SimtEmitter &e, WarpMmaOp op, int64_t tile) {
  return MmaFragmentLayout(
      e, e.add(op.getRow(), e.index(tile * WarpMmaOp::kRows)), op.getLane());
}

/// The layouts of the op's row tiles, in order.
SmallVector<MmaFragmentLayout> eachTileLayout(SimtEmitter &e, WarpMmaOp op) {
  SmallVector<MmaFragmentLayout> layouts;
  for (int64_t tile = 0, tiles = op.getRowTiles(); tile < tiles; ++tile)
    layouts.push_back(tileLayout(e, op, tile));
  return layouts;
}

/// Where B[k, column] of the op lies: at (k, column) of rhs, or (column,
/// k) when transposed (of a 2-D or a core-matrix tiled buffer).
SmallVector<Value, 4> rhsIndices(SimtEmitter &e, WarpMmaOp op, Value k,
                                 Value column) {
  if (op.getRhsTransposed())
    return tileElement(e, op.getRhs(), column, k);
  return tileElement(e, op.getRhs(), k, column);
}

/// A[row, k] of an op whose lhs is a shared tile.
Value sharedLhs(SimtEmitter &e, WarpMmaOp op, Value row, Value k) {
  return e.load(op.getLhs(), tileElement(e, op.getLhs(), row, k));
}

/// A[row + 16 tile + g + 8 half, k] of an op whose lhs is fragments (g =
/// `group`, the lane's): from the fragment of lane 4 g + (k % 8) / 2, read
/// from the warp's buffer, or (the lane's own, on the GPU) shuffled from
/// that lane, all lanes offering the element at the same place of theirs.
Value fragmentLhs(SimtEmitter &e, WarpMmaOp op, int64_t tile, Value group,
                  int64_t half, Value k) {
  Value c2 = e.index(2), c8 = e.index(8);
  Value owner = e.add(e.mul(group, e.index(4)), e.div(e.rem(k, c8), c2));
  Value block = e.add(e.index(tile * op.getK() / 8), e.div(k, c8));
  Value element = e.add(e.index(2 * half), e.rem(k, c2));
  if (op.getLhs().getType().getRank() == 3)
    return e.load(op.getLhs(), {owner, block, element});
  ImplicitLocOpBuilder &b = e.b;
  Value offered = e.load(op.getLhs(), {block, element});
  auto i32 = [&](Value index) {
    return arith::IndexCastOp::create(b, b.getI32Type(), index).getResult();
  };
  return gpu::ShuffleOp::create(b, offered, i32(owner),
                                i32(e.index(WarpMmaOp::kWarpLanes)),
                                gpu::ShuffleMode::IDX)
      .getShuffleResult();
}

/// `values` (f32) passed through an empty inline asm, so that the code
/// generator computes them before anything uses them. Without it LLVM's
/// code generation puts every unrolled step's shuffles and loads ahead of
/// the first multiply-add (about 1,000 values live in an f32 `P V'` of 64
/// steps, which ptxas spills: 8 KB); an asm with a memory clobber alone
/// keeps the loads in their steps but not the multiply-adds.
SmallVector<Value> computedBeforeUse(ImplicitLocOpBuilder &b,
                                     ValueRange values) {
  std::string constraints;
  for (size_t i = 0; i < values.size(); ++i)
    constraints += "=f,";
  for (size_t i = 0; i < values.size(); ++i)
    constraints += std::to_string(i) + (i + 1 < values.size() ? "," : "");
  auto type = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(values.size(), b.getF32Type()));
  Value pinned = LLVM::InlineAsmOp::create(
                     b, type, values, "", constraints,
                     /*has_side_effects=*/false, /*is_align_stack=*/false,
                     LLVM::tailcallkind::TailCallKind::None,
                     /*asm_dialect=*/LLVM::AsmDialectAttr(),
                     /*operand_attrs=*/ArrayAttr())
                     .getResult(0);
  SmallVector<Value> results;
  for (size_t i = 0; i < values.size(); ++i)
    results.push_back(LLVM::ExtractValueOp::create(b, pinned, i));
  return results;
}

/// The lane's accumulator elements of row tile `tile` of an op whose acc is
/// fragments, in loops. The elements are values (iteration arguments of
/// the loop over k), never a register array indexed by a variable, which
/// the GPU would put in local memory; where lhs is the lane's own fragments
/// (on the GPU), the steps k are unrolled, so that A's elements are
/// shuffled from constant places of the lane's registers, once a step for
/// all the columns (on the CPU, a loop reads them from the warp's buffer).
/// Each element adds its products in the order of k.
void lowerFragmentAccTile(SimtEmitter &e, WarpMmaOp op, int64_t tile,
                          MmaFragmentLayout &layout) {
  // Element (block, half, el) of the tile at (block * 2 + half) * 2 + el.
  struct Element {
    int64_t half;
    Value column;
    SmallVector<Value, 2> at;
  };
  SmallVector<Element> elements;
  SmallVector<Value> sums;
  for (int64_t block = 0; block < columnBlocks(op); ++block)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t el = 0; el < 2; ++el) {
        Value blockIndex = e.index(block);
        elements.push_back(
            {half, layout.accColumn(e, blockIndex, el),
             accIndices(e, op, layout, tile, blockIndex, half, el)});
        sums.push_back(op.getAccumulate()
                           ? e.load(op.getAcc(), elements.back().at)
                           : e.scalar(0.0));
      }
  Value rows[2] = {layout.accRow(e, 0), layout.accRow(e, 1)};
  auto step = [&](Value k, ValueRange before) {
    Value a[2];
    for (int64_t half = 0; half < 2; ++half)
      a[half] = op.getLhsFragment()
                    ? fragmentLhs(e, op, tile, layout.group, half, k)
                    : sharedLhs(e, op, rows[half], k);
    SmallVector<Value> after;
    for (auto [element, sum] : llvm::zip(elements, before)) {
      Value y = e.load(op.getRhs(), rhsIndices(e, op, k, element.column));
      after.push_back(e.fma(a[element.half], y, sum));
    }
    return after;
  };
  if (op.getLhsFragment() && op.getLhs().getType().getRank() == 2) {
    for (int64_t k = 0, steps = op.getK(); k < steps; ++k) {
      sums = step(e.index(k), sums);
      if (k + 1 < steps)
        sums = computedBeforeUse(e.b, sums);
    }
  } else {
    sums = e.loop(e.index(0), e.index(op.getK()), e.index(1), sums,
                  [&](Value k, ValueRange it) { return step(k, it); });
  }
  for (auto [element, sum] : llvm::zip(elements, sums))
    e.store(sum, op.getAcc(), element.at);
}

void lowerToLoops(WarpMmaOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  SimtEmitter e(b);
  Value c0 = e.index(0), c1 = e.index(1);
  const int64_t tiles = op.getRowTiles();
  for (int64_t tile = 0; tile < tiles; ++tile) {
    MmaFragmentLayout layout = tileLayout(e, op, tile);
    if (op.getAccFragment()) {
      lowerFragmentAccTile(e, op, tile, layout);
      continue;
    }
    e.loop(c0, e.index(columnBlocks(op)), c1, [&](Value block) {
      for (int64_t half = 0; half < 2; ++half) {
        Value row = layout.accRow(e, half);
        for (int64_t element = 0; element < 2; ++element) {
          Value column = layout.accColumn(e, block, element);
          SmallVector<Value, 2> at =
              accIndices(e, op, layout, tile, block, half, element);
          Value init =
              op.getAccumulate() ? e.load(op.getAcc(), at) : e.scalar(0.0);
          Value sum = e.loop(
              c0, e.index(op.getK()), c1, {init}, [&](Value k, ValueRange it) {
                Value x = op.getLhsFragment()
                              ? fragmentLhs(e, op, tile, layout.group, half, k)
                              : sharedLhs(e, op, row, k);
                Value y = e.load(op.getRhs(), rhsIndices(e, op, k, column));
                return SmallVector<Value>{e.fma(x, y, it[0])};
              })[0];
          e.store(sum, op.getAcc(), at);
        }
      }
    });
  }
  op.erase();
}

/// Whether `ldmatrix` can read 8 x 8 matrices of `memref`: it is in shared
/// memory and its rows are whole 16-byte pieces (each lane's row address
/// must be 16-byte aligned; shared buffers start 16-byte aligned and the
/// matrices start at columns that are multiples of 8). A view's offset
/// must keep that alignment (the op's contract); a static one is checked.
bool ldmatrixReads(Value memref) {
  auto type = cast<MemRefType>(memref.getType());
  auto space = dyn_cast_or_null<gpu::AddressSpaceAttr>(type.getMemorySpace());
  SmallVector<int64_t, 2> strides;
  int64_t offset;
  if (!space || space.getValue() != gpu::AddressSpace::Workgroup ||
      !type.hasStaticShape() || type.getRank() != 2 ||
      failed(type.getStridesAndOffset(strides, offset)))
    return false;
  const int64_t bytes = type.getElementTypeBitWidth() / 8;
  auto aligned = [&](int64_t elements) {
    return ShapedType::isDynamic(elements) || elements * bytes % 16 == 0;
  };
  return strides[1] == 1 && !ShapedType::isDynamic(strides[0]) &&
         aligned(strides[0]) && aligned(offset);
}

/// Element `index` (2 half + el) of column block `block` of the lane's own
/// fragments (lhs_fragment): the lane's [block, index], or [lane, block,
/// index] of a warp's buffer.
Value ownFragmentElement(ImplicitLocOpBuilder &b, WarpMmaOp op, int64_t block,
                         int64_t index) {
  SmallVector<Value, 3> at{arith::ConstantIndexOp::create(b, block),
                           arith::ConstantIndexOp::create(b, index)};
  if (cast<MemRefType>(op.getLhs().getType()).getRank() == 3)
    at.insert(at.begin(), op.getLane());
  return memref::LoadOp::create(b, op.getLhs(), at);
}

/// A of row tile `tile` in reduction step `step` from the lane's own
/// fragments (lhs_fragment), as the 4 pairs of 16-bit elements that an
/// mma.m16n8k16 (or a wgmma .m64nNk16, per warp) takes: the accumulator
/// layout of column blocks 2 step and 2 step + 1 is A's, a0 = (c0, c1) of
/// the first, a1 = (c2, c3), a2 and a3 the same of the second. f32 elements
/// are rounded to the product type.
SmallVector<Value, 4> ownFragmentPairs(ImplicitLocOpBuilder &b, WarpMmaOp op,
                                       int64_t tile, int64_t step) {
  Type element = op.getProductType();
  auto pairType = VectorType::get({2}, element);
  const int64_t firstBlock = tile * op.getK() / 8 + 2 * step;
  SmallVector<Value, 4> pairs;
  for (int64_t block : {firstBlock, firstBlock + 1})
    for (int64_t half = 0; half < 2; ++half) {
      SmallVector<Value, 2> pair;
      for (int64_t el = 0; el < 2; ++el)
        pair.push_back(arith::TruncFOp::create(
            b, element, ownFragmentElement(b, op, block, 2 * half + el)));
      pairs.push_back(vector::FromElementsOp::create(b, pairType, pair));
    }
  return pairs;
}

/// The lane's accumulator elements of `op` as values: [tile][block] =
/// {c0, c1, c2, c3}, from acc when the op accumulates, else zeros.
using AccumulatorValues = SmallVector<SmallVector<SmallVector<Value, 4>>>;

AccumulatorValues loadAccumulators(SimtEmitter &e, WarpMmaOp op,
                                   ArrayRef<MmaFragmentLayout> tileLayouts) {
  AccumulatorValues acc(op.getRowTiles(),
                        SmallVector<SmallVector<Value, 4>>(columnBlocks(op)));
  for (auto [tile, blocks] : llvm::enumerate(acc)) {
    MmaFragmentLayout layout = tileLayouts[tile];
    for (auto [block, values] : llvm::enumerate(blocks))
      for (int64_t half = 0; half < 2; ++half)
        for (int64_t el = 0; el < 2; ++el)
          values.push_back(
              op.getAccumulate()
                  ? e.load(op.getAcc(), accIndices(e, op, layout, tile,
                                                   e.index(block), half, el))
                  : e.scalar(0.0));
  }
  return acc;
}

void storeAccumulators(SimtEmitter &e, WarpMmaOp op,
                       ArrayRef<MmaFragmentLayout> tileLayouts,
                       const AccumulatorValues &acc) {
  for (auto [tile, blocks] : llvm::enumerate(acc)) {
    MmaFragmentLayout layout = tileLayouts[tile];
    for (auto [block, values] : llvm::enumerate(blocks))
      for (int64_t half = 0; half < 2; ++half)
        for (int64_t el = 0; el < 2; ++el)
          e.store(values[2 * half + el], op.getAcc(),
                  accIndices(e, op, layout, tile, e.index(block), half, el));
  }
}

/// acc (c0..c3) = A B + acc by one nvvm.mma.sync .m16n8k`k` .row.col with
/// f32 accumulators, A and B of `type`.
void mmaSync(ImplicitLocOpBuilder &b, NVVM::MMATypes type, int64_t k,
             ValueRange a, ValueRange bRegs, SmallVectorImpl<Value> &acc) {
  auto structType = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(4, b.getF32Type()));
  Value result = NVVM::MmaOp::create(
      b, structType, a, bRegs, acc,
      ArrayRef<int64_t>{WarpMmaOp::kRows, WarpMmaOp::kFragmentColumns, k},
      std::nullopt, std::nullopt, std::array<NVVM::MMATypes, 2>{type, type},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  for (int64_t i = 0; i < 4; ++i)
    acc[i] = LLVM::ExtractValueOp::create(b, result, i);
}

/// The unrolled mma.sync form of `op` (f16 or bf16).
///
/// ldmatrix (.x4) loads four 8 x 8 matrices of 16-bit elements for the
/// warp: lane l gives the address of row l % 8 of matrix l / 8 and gets, in
/// register i, the pair (row g, columns 2t, 2t + 1) of matrix i, or with
/// .trans the pair (rows 2t, 2t + 1, column g). So for
///  * A, matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)
///    of the step give a0..a3: lane l points at row l % 8 + 8 ((l / 8) % 2),
///    column 8 (l / 16);
///  * B read as rhs[n, k] (transposed), matrices (block b, k 0-7), (b, k
///    8-15), (b + 1, k 0-7), (b + 1, k 8-15) give b0, b1 of two blocks: lane
///    l points at rhs row 8 b + l % 8 + 8 (l / 16), column k + 8 ((l / 8) %
///    2);
///  * B read as rhs[k, n], with .trans, the matrices (k 0-7, block b),
///    (k 8-15, b), (k 0-7, b + 1), (k 8-15, b + 1) do: lane l points at rhs
///    row k + l % 8 + 8 ((l / 8) % 2), column 8 b + 8 (l / 16).
/// A last odd block takes .x2 (the first two matrices; lanes 16-31 point
/// inside that block too).
void lowerToMmaSync(WarpMmaOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  SimtEmitter e(b);
  // B's fragments (the lane's column g, k 2t..) are the same in every row
  // tile: `layout` places them; the tiles' own place their rows.
  MmaFragmentLayout layout(e, op.getRow(), op.getLane());
  const int64_t tiles = op.getRowTiles();
  SmallVector<MmaFragmentLayout> tileLayouts = eachTileLayout(e, op);
  Type element = op.getProductType();
  const bool bf16 = element.isBF16();
  auto pairType = VectorType::get({2}, element);
  // A register of a fragment: two elements, the lower index in the low
  // half. bf16 pairs travel as i32 (what the intrinsic takes).
  auto reg = [&](Value pair) -> Value {
    if (!bf16)
      return pair;
    Value word = vector::BitCastOp::create(
        b, VectorType::get({1}, b.getI32Type()), pair);
    return vector::ExtractOp::create(b, word, 0);
  };
  auto adjacentPair = [&](Value memref, Value i, Value j) {
    return reg(vector::LoadOp::create(b, pairType, memref, ValueRange{i, j}));
  };
  auto fragmentA = [&](int64_t tile, int64_t step) {
    SmallVector<Value, 4> regs;
    for (Value pair : ownFragmentPairs(b, op, tile, step))
      regs.push_back(reg(pair));
    return regs;
  };
  // The registers of `count` matrices at [row, column] (this lane's
  // address) of `memref`.
  auto ldmatrix = [&](Value memref, Value row, Value column, int64_t count,
                      bool transpose) {
    Value matrices = nvgpu::LdMatrixOp::create(
        b, VectorType::get({count, 2}, element), memref,
        ValueRange{row, column}, b.getBoolAttr(transpose),
        b.getI32IntegerAttr(count));
    SmallVector<Value, 4> regs;
    for (int64_t i = 0; i < count; ++i)
      regs.push_back(reg(vector::ExtractOp::create(b, matrices, i)));
    return regs;
  };
  Value c1 = e.index(1), c8 = e.index(8);
  Value lane = op.getLane();
  // l % 8 + 8 ((l / 8) % 2) = l % 16, and 8 (l / 16).
  Value laneRow = e.rem(lane, e.index(16));
  Value laneHalf = e.mul(e.div(lane, e.index(16)), c8);
  Value laneMatrixRow = e.rem(lane, c8);
  Value laneOddMatrix = e.mul(e.rem(e.div(lane, c8), e.index(2)), c8);
  const bool lhsMatrices = !op.getLhsFragment() && ldmatrixReads(op.getLhs());
  const bool rhsMatrices = ldmatrixReads(op.getRhs());

  const int64_t blocks = columnBlocks(op);
  const int64_t steps = op.getK() / WarpMmaOp::kReductionStep;
  AccumulatorValues acc = loadAccumulators(e, op, tileLayouts);

  // B's registers {b0, b1} of column block `block` in the step at k0,
  // read alone.
  auto loadB = [&](int64_t block, Value k0) {
    Value column =
        e.add(e.index(block * WarpMmaOp::kFragmentColumns), layout.group);
    SmallVector<Value, 2> regs;
    for (Value k : {e.add(k0, layout.pairColumn),
                    e.add(k0, e.add(layout.pairColumn, c8))}) {
      if (op.getRhsTransposed()) {
        regs.push_back(adjacentPair(op.getRhs(), column, k));
        continue;
      }
      // Down a column of rhs [K, N]: two loads.
      Value lo = memref::LoadOp::create(b, op.getRhs(), ValueRange{k, column});
      Value hi = memref::LoadOp::create(b, op.getRhs(),
                                        ValueRange{e.add(k, c1), column});
      regs.push_back(
          reg(vector::FromElementsOp::create(b, pairType, ValueRange{lo, hi})));
    }
    return regs;
  };
  // B's registers of blocks `block` and (when `pair`) block + 1 through
  // ldmatrix: b0, b1 of the first, then of the second.
  auto ldmatrixB = [&](int64_t block, Value k0, bool pair) {
    Value first = e.index(block * WarpMmaOp::kFragmentColumns);
    Value other = pair ? laneHalf : e.index(0);
    if (op.getRhsTransposed())
      return ldmatrix(op.getRhs(), e.add(first, e.add(laneMatrixRow, other)),
                      e.add(k0, laneOddMatrix), pair ? 4 : 2,
                      /*transpose=*/false);
    return ldmatrix(op.getRhs(), e.add(k0, laneRow), e.add(first, other),
                    pair ? 4 : 2, /*transpose=*/true);
  };

  auto mma = [&](ValueRange a, ValueRange bRegs, int64_t tile, int64_t block) {
    mmaSync(b, bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16,
            WarpMmaOp::kReductionStep, a, bRegs, acc[tile][block]);
  };
  for (int64_t step = 0; step < steps; ++step) {
    Value k0 = e.index(step * WarpMmaOp::kReductionStep);
    // k of the lane's first pair in this step, and 8 further.
    Value kLane = e.add(k0, layout.pairColumn);
    Value kLane8 = e.add(kLane, c8);
    // Each row tile's A fragment of the step.
    SmallVector<SmallVector<Value, 4>> a;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      if (op.getLhsFragment()) {
        a.push_back(fragmentA(tile, step));
        continue;
      }
      MmaFragmentLayout &rows = tileLayouts[tile];
      Value row0 = rows.accRow(e, 0), row8 = rows.accRow(e, 1);
      a.push_back(
          lhsMatrices
              ? ldmatrix(op.getLhs(), e.add(rows.row, laneRow),
                         e.add(k0, laneHalf), 4, /*transpose=*/false)
              : SmallVector<Value, 4>{adjacentPair(op.getLhs(), row0, kLane),
                                      adjacentPair(op.getLhs(), row8, kLane),
                                      adjacentPair(op.getLhs(), row0, kLane8),
                                      adjacentPair(op.getLhs(), row8, kLane8)});
    }
    // Each B fragment once, for every row tile.
    auto mmaEachTile = [&](ValueRange bRegs, int64_t block) {
      for (int64_t tile = 0; tile < tiles; ++tile)
        mma(a[tile], bRegs, tile, block);
    };
    for (int64_t block = 0; block < blocks; ++block) {
      if (!rhsMatrices) {
        mmaEachTile(loadB(block, k0), block);
        continue;
      }
      const bool pair = block + 1 < blocks;
      SmallVector<Value, 4> bRegs = ldmatrixB(block, k0, pair);
      mmaEachTile(ArrayRef(bRegs).take_front(2), block);
      if (pair)
        mmaEachTile(ArrayRef(bRegs).drop_front(2), ++block);
    }
  }
  storeAccumulators(e, op, tileLayouts, acc);
  op.erase();
}

/// The three-tf32 mma.sync form of an f32 `op` (sm_80 and newer), as
/// CUTLASS's "fast accurate" f32 GEMM: each operand x is split as hi =
/// tf32(x) and lo = tf32(x - hi), both rounded to nearest (cvt.rna; x - hi
/// is exact in f32), and a b is taken as hi_a lo_b + lo_a hi_b + hi_a hi_b,
/// smaller terms first. hi and lo keep 11 significant bits each, so a
/// product is good to about 2^-21 of |a b|, near f32's own rounding; one
/// tf32 product (2^-11) would break SPEC's f32 tolerances. Three tf32
/// products take the tensor cores half the time of one 16-wide bf16 step
/// each, which still beats fused multiply-adds on the CUDA cores (whose
/// operands, moreover, come one element a load or a shuffle).
///
/// PTX's fragments of mma.m16n8k8 with .tf32 (g = lane / 4, t = lane % 4)
/// give each lane two "k slots", t and t + 4:
///
///   A [16 x 8]: a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4)
///   B [8 x 8]:  b0 = (t, g), b1 = (t+4, g)
///   C:          as m16n8k16's (the op's accumulator fragment)
///
/// A step's sum over its 8 k does not depend on their order, so the slots
/// may hold any two of them as long as A and B agree. `natural` slots hold k
/// t and t + 4; `paired` ones k 2t and 2t + 1, where A's elements are c0,
/// c2, c1 and c3 of the accumulator fragment of the step's column block:
/// A from the lane's own fragments (P in registers) needs no shuffle.
/// Paired slots are taken for fragments and for B read down its columns
/// (rhs [k, n]), natural ones otherwise: with shared rows padded by 16
/// bytes (4 floats, as the kernels' operands are), the lanes of a load of
/// B (and of A, natural) then hit 32 different banks.
void lowerToTf32MmaSync(WarpMmaOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  SimtEmitter e(b);
  MmaFragmentLayout layout(e, op.getRow(), op.getLane());
  const int64_t tiles = op.getRowTiles();
  SmallVector<MmaFragmentLayout> tileLayouts = eachTileLayout(e, op);
  const int64_t blocks = columnBlocks(op);
  const int64_t step = WarpMmaOp::kFragmentColumns;
  AccumulatorValues acc = loadAccumulators(e, op, tileLayouts);

  // The lane's k slots in a step, from the step's first k: 2t and 2t + 1
  // (the layout's pair), or t and t + 4.
  const bool paired = op.getLhsFragment() || !op.getRhsTransposed();
  Value firstSlot =
      paired ? layout.pairColumn : e.rem(op.getLane(), e.index(4));
  Value slots[2] = {firstSlot, e.add(firstSlot, e.index(paired ? 1 : 4))};
  // hi lo, lo hi, hi hi: of the orders with the small terms first, the one
  // after which ptxas spills nothing in the f32 flash kernels of head_dim
  // 256 (lo hi first: 16-36 bytes in decode).
  const std::array<std::pair<int, int>, 3> terms = {
      std::pair{0, 1}, std::pair{1, 0}, std::pair{0, 0}};
  // x as {hi, lo}, each a tf32 in an i32.
  auto split = [&](Value x) -> std::array<Value, 2> {
    auto tf32 = [&](Value value) -> Value {
      return NVVM::ConvertFloatToTF32Op::create(b, b.getI32Type(), value,
                                                NVVM::FPRoundingMode::RNA);
    };
    Value hi = tf32(x);
    Value rest = e.fsub(x, arith::BitcastOp::create(b, e.f32, hi));
    return {hi, tf32(rest)};
  };
  // {hi parts, lo parts} of `values`.
  auto splitAll = [&](ArrayRef<Value> values) {
    std::array<SmallVector<Value, 4>, 2> parts;
    for (Value x : values) {
      auto [hi, lo] = split(x);
      parts[0].push_back(hi);
      parts[1].push_back(lo);
    }
    return parts;
  };
  // A's elements {a0, a1, a2, a3} of row tile `tile` in the step at k0.
  auto fragmentA = [&](int64_t tile, int64_t stepIndex, Value k0) {
    if (op.getLhsFragment()) {
      // Column block `block` of the lane's fragments: (g, 2t) = [block,
      // 0], (g + 8, 2t) = [block, 2], then 2t + 1 at [block, 1], [block, 3].
      const int64_t block = tile * op.getK() / step + stepIndex;
      SmallVector<Value, 4> a;
      for (int64_t element : {0, 2, 1, 3})
        a.push_back(ownFragmentElement(b, op, block, element));
      return a;
    }
    MmaFragmentLayout &rows = tileLayouts[tile];
    SmallVector<Value, 4> a;
    for (Value slot : slots)
      for (int64_t half = 0; half < 2; ++half)
        a.push_back(sharedLhs(e, op, rows.accRow(e, half), e.add(k0, slot)));
    return a;
  };
  const int64_t steps = op.getK() / step;
  for (int64_t stepIndex = 0; stepIndex < steps; ++stepIndex) {
    Value k0 = e.index(stepIndex * step);
    SmallVector<std::array<SmallVector<Value, 4>, 2>> a;
    for (int64_t tile = 0; tile < tiles; ++tile)
      a.push_back(splitAll(fragmentA(tile, stepIndex, k0)));
    for (int64_t block = 0; block < blocks; ++block) {
      Value column = e.add(e.index(block * step), layout.group);
      SmallVector<Value, 2> bValues;
      for (Value slot : slots)
        bValues.push_back(
            e.load(op.getRhs(), rhsIndices(e, op, e.add(k0, slot), column)));
      auto bParts = splitAll(bValues);
      for (int64_t tile = 0; tile < tiles; ++tile) {
        auto &aParts = a[tile];
        for (auto [aPart, bPart] : terms)
          mmaSync(b, NVVM::MMATypes::tf32, step, aParts[aPart], bParts[bPart],
                  acc[tile][block]);
      }
    }
  }
  storeAccumulators(e, op, tileLayouts, acc);
  op.erase();
}

/// The wgmma matrix descriptor of a core-matrix tiled operand without
/// swizzling (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start
/// address, 16-29 the leading dimension byte offset (LBO), 32-45 the stride
/// dimension byte offset (SBO), each encoded as (x & 0x3FFFF) >> 4; bits
/// 62-63 the swizzle mode, 0 here. In the canonical layouts of no
/// swizzling, K-major ((8, m), (T, 2k)) : ((1T, SBO), (1, LBO)) and
/// MN-major ((T, 1, m), (8, k)) : ((1, T, SBO), (1T, LBO)), LBO is the
/// stride between core matrices along K and SBO along M or N.
Value wgmmaDescriptor(ImplicitLocOpBuilder &b, Value address,
                      int64_t kGroupBytes, int64_t mnGroupBytes) {
  auto i64 = [&](int64_t value) {
    return arith::ConstantIntOp::create(b, b.getI64Type(), value).getResult();
  };
  auto encode = [&](int64_t bytes) { return (bytes & 0x3FFFF) >> 4; };
  Value start = arith::ShRUIOp::create(
      b, arith::AndIOp::create(b, address, i64(0x3FFFF)), i64(4));
  int64_t strides = (encode(kGroupBytes) << 16) | (encode(mnGroupBytes) << 32);
  return arith::OrIOp::create(b, start, i64(strides));
}

/// The warpgroup form of `op` on sm_90a: wgmma.mma_async .m64nNk16, one per
/// 16 of k, on the 64 rows of the op's warpgroup, from the core-matrix tiled
/// shared operands (descriptors) or, for lhs fragments, the lane's
/// registers; then the lane's accumulator fragment is the wgmma's D
/// fragment, whose per-warp layout is mma.m16n8k16's (d[4 b + 2 h + e] =
/// acc[b, 2 h + e]). The group waits for its products before the lanes use
/// them (commit, wait 0), unless the op is async (commit only; its
/// attn_kernel.warpgroup_wait is wgmma.wait_group).
void lowerToWgmma(WarpMmaOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  SimtEmitter e(b);
  MLIRContext *context = b.getContext();
  const int64_t n = op.getN(), k = op.getK();
  const int64_t steps = k / WarpMmaOp::kReductionStep;
  const int64_t accCount = n / 2;
  Type element = op.getProductType();
  const int64_t elementBytes = element.getIntOrFloatBitWidth() / 8;
  const int64_t side = WarpMmaOp::kCoreMatrixSide;
  const int64_t coreBytes = side * side * elementBytes;
  auto i64 = [&](int64_t value) {
    return arith::ConstantIntOp::create(b, b.getI64Type(), value).getResult();
  };
  auto toI64 = [&](Value index) {
    return arith::IndexCastUIOp::create(b, b.getI64Type(), index).getResult();
  };
  auto baseAddress = [&](Value memref) {
    return toI64(memref::ExtractAlignedPointerAsIndexOp::create(b, memref));
  };
  // The byte strides of a tiled operand's first two dimensions.
  auto groupBytes = [&](Value memref, int64_t dim) {
    auto type = cast<MemRefType>(memref.getType());
    return dim == 0 ? type.getDimSize(1) * coreBytes : coreBytes;
  };

  // The warpgroup's first row: that of warp 0 of the group, whose warps
  // have rows R + 16 w (the op's contract).
  Value thread = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value warpInGroup = e.rem(e.div(thread, e.index(WarpMmaOp::kWarpLanes)),
                            e.index(WarpMmaOp::kWarpgroupWarps));
  Value groupRow =
      e.sub(op.getRow(), e.mul(warpInGroup, e.index(WarpMmaOp::kRows)));

  // A: K-major, rows [R, R + 64) from core-matrix row R / 8.
  Value lhsBase;
  if (!op.getLhsFragment()) {
    Value lhs = op.getLhs();
    lhsBase =
        e.add(baseAddress(lhs), e.mul(toI64(e.div(groupRow, e.index(side))),
                                      i64(groupBytes(lhs, 0))));
  }
  // B: K-major when transposed ([n / 8, k / 8, 8, 8]), else N-major
  // ([k / 8, n / 8, 8, 8]).
  Value rhs = op.getRhs();
  const bool kMajorB = op.getRhsTransposed();
  const int64_t rhsKGroup = groupBytes(rhs, kMajorB ? 1 : 0);
  const int64_t rhsNGroup = groupBytes(rhs, kMajorB ? 0 : 1);
  Value rhsBase = baseAddress(rhs);

  // The accumulators, d0 .. d(n/2 - 1). A product that does not
  // accumulate takes none: its first wgmma has scale-d 0 (D = A B), so its
  // accumulator registers go in unset instead of zeroed one by one.
  SmallVector<SmallVector<Value, 2>> accAt;
  SmallVector<Value> acc;
  for (int64_t i = 0; i < accCount; ++i) {
    accAt.push_back({e.index(i / 4), e.index(i % 4)});
    acc.push_back(op.getAccumulate()
                      ? e.load(op.getAcc(), accAt.back())
                      : LLVM::PoisonOp::create(b, e.f32).getResult());
  }
  auto scalesD = [&](int64_t step) {
    return op.getAccumulate() || step > 0;
  };
  auto structType = LLVM::LLVMStructType::getLiteral(
      context, SmallVector<Type>(accCount, e.f32));
  auto pack = [&](ArrayRef<Value> values) {
    Value packed = LLVM::PoisonOp::create(b, structType);
    for (auto [i, value] : llvm::enumerate(values))
      packed = LLVM::InsertValueOp::create(b, packed, value, i);
    return packed;
  };
  auto unpack = [&](Value packed) {
    for (int64_t i = 0; i < accCount; ++i)
      acc[i] = LLVM::ExtractValueOp::create(b, packed, i);
  };
  const bool bf16 = element.isBF16();
  const char *ptxType = bf16 ? "bf16" : "f16";
  auto wgmmaType = NVVM::WGMMATypesAttr::get(
      context, bf16 ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16);

  // A's registers of every step, made before the fence: wgmma may read
  // only registers written before it (ptxas otherwise injects a warpgroup
  // arrive before each product).
  SmallVector<SmallVector<Value, 4>> fragmentA(steps);
  if (op.getLhsFragment())
    for (int64_t step = 0; step < steps; ++step)
      for (Value pair : ownFragmentPairs(b, op, /*tile=*/0, step))
        fragmentA[step].push_back(vector::ExtractOp::create(
            b,
            vector::BitCastOp::create(b, VectorType::get({1}, b.getI32Type()),
                                      pair),
            0));

  NVVM::WgmmaFenceAlignedOp::create(b);
  for (int64_t step = 0; step < steps; ++step) {
    // 16 of k are two core matrices along K.
    Value rhsDescriptor = wgmmaDescriptor(
        b, e.add(rhsBase, i64(2 * step * rhsKGroup)), rhsKGroup, rhsNGroup);
    if (!op.getLhsFragment()) {
      const int64_t lhsKGroup = groupBytes(op.getLhs(), 1);
      Value lhsDescriptor =
          wgmmaDescriptor(b, e.add(lhsBase, i64(2 * step * lhsKGroup)),
                          lhsKGroup, groupBytes(op.getLhs(), 0));
      // layout row (A) / col (B): K-major, no transpose.
      Value result = NVVM::WgmmaMmaAsyncOp::create(
          b, structType, pack(acc), lhsDescriptor, rhsDescriptor,
          NVVM::MMAShapeAttr::get(context, 64, n, 16), wgmmaType, wgmmaType,
          NVVM::WGMMATypesAttr::get(context, NVVM::WGMMATypes::f32),
          NVVM::WGMMAScaleOutAttr::get(context, scalesD(step)
                                                    ? NVVM::WGMMAScaleOut::one
                                                    : NVVM::WGMMAScaleOut::zero),
          NVVM::WGMMAScaleInAttr::get(context, NVVM::WGMMAScaleIn::one),
          NVVM::WGMMAScaleInAttr::get(context, NVVM::WGMMAScaleIn::one),
          NVVM::MMALayoutAttr::get(context, NVVM::MMALayout::row),
          NVVM::MMALayoutAttr::get(context, kMajorB ? NVVM::MMALayout::col
                                                    : NVVM::MMALayout::row),
          NVVM::MMAIntOverflowAttr());
      unpack(result);
      continue;
    }
    // A from registers: nvvm.wgmma.mma_async takes descriptors only, so
    // this form is written as PTX (FlashAttention-3 keeps P in registers
    // for P V the same way).
    SmallVector<Value> operands(acc);
    llvm::append_range(operands, fragmentA[step]);
    operands.push_back(rhsDescriptor);
    std::string ptx, constraints;
    llvm::raw_string_ostream text(ptx), constraintText(constraints);
    text << "wgmma.mma_async.sync.aligned.m64n" << n << "k16.f32." << ptxType
         << "." << ptxType << " {";
    for (int64_t i = 0; i < accCount; ++i) {
      text << (i ? ", " : "") << "$" << i;
      constraintText << (i ? "," : "") << "=f";
    }
    // The accumulators in (tied to the outputs), A's 4 registers, B's
    // descriptor; scale-d (1: accumulate), A and B not negated, B
    // transposed when N-major.
    for (int64_t i = 0; i < accCount; ++i)
      constraintText << "," << i;
    constraintText << ",r,r,r,r,l";
    text << "}, {$" << 2 * accCount << ", $" << 2 * accCount + 1 << ", $"
         << 2 * accCount + 2 << ", $" << 2 * accCount + 3 << "}, $"
         << 2 * accCount + 4 << ", " << (scalesD(step) ? 1 : 0) << ", 1, 1, "
         << (kMajorB ? 0 : 1) << ";";
    auto asmOp = LLVM::InlineAsmOp::create(
        b, structType, operands, ptx, constraints, /*has_side_effects=*/true,
        /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
        LLVM::AsmDialectAttr::get(context, LLVM::AsmDialect::AD_ATT),
        ArrayAttr());
    unpack(asmOp.getResult(0));
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  // An async op's group completes at a later attn_kernel.warpgroup_wait;
  // until then its results are the registers the tensor cores write.
  if (!op.getAsync())
    NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  for (int64_t i = 0; i < accCount; ++i)
    e.store(acc[i], op.getAcc(), accAt[i]);
  op.erase();
}

struct AttnWarpMmaToLoops final
    : mlir::attn::impl::AttnWarpMmaToLoopsBase<AttnWarpMmaToLoops> {
  void runOnOperation() override {
    SmallVector<WarpMmaOp> ops;
    getOperation()->walk([&](WarpMmaOp op) { ops.push_back(op); });
    for (WarpMmaOp op : ops)
      if (op.getLhsFragment() && failed(verifyWarpFragmentRead(op)))
        return signalPassFailure();
    for (WarpMmaOp op : ops)
      lowerToLoops(op);
    // Products done when issued leave nothing to wait for.
    getOperation()->walk([](WarpgroupWaitOp op) { op.erase(); });
  }
};

struct AttnWarpMmaToNvvm final
    : mlir::attn::impl::AttnWarpMmaToNvvmBase<AttnWarpMmaToNvvm> {
  using Base::Base;

  void runOnOperation() override {
    // bf16 and tf32 mma.sync and f16 m16n8k16 need sm_80; wgmma sm_90a (the
    // architecture-specific features of sm_90, which no later chip has).
    const bool tensorCores = smVersionOf(chip) >= 80;
    const bool warpgroupProducts = chip == "sm_90a";
    SmallVector<WarpMmaOp> ops;
    getOperation()->walk([&](WarpMmaOp op) { ops.push_back(op); });
    for (WarpMmaOp op : ops) {
      if (op.getWarpgroup()) {
        if (!warpgroupProducts) {
          op.emitOpError() << "a warpgroup product (wgmma) needs sm_90a, not "
                           << chip;
          return signalPassFailure();
        }
        lowerToWgmma(op);
        continue;
      }
      Type element = op.getProductType();
      if (tensorCores && (element.isF16() || element.isBF16()))
        lowerToMmaSync(op);
      else if (tensorCores && element.isF32())
        lowerToTf32MmaSync(op);
      else
        lowerToLoops(op);
    }
    SmallVector<WarpgroupWaitOp> waits;
    getOperation()->walk([&](WarpgroupWaitOp op) { waits.push_back(op); });
    for (WarpgroupWaitOp wait : waits) {
      if (!warpgroupProducts) {
        wait.emitOpError() << "waits for warpgroup products (wgmma), which "
                              "need sm_90a, not "
                           << chip;
        return signalPassFailure();
      }
      OpBuilder b(wait);
      NVVM::WgmmaWaitGroupSyncOp::create(b, wait.getLoc(),
                                         wait.getPendingAttr().getInt());
      wait.erase();
    }
  }
};

} // namespace
