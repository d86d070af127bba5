//===- WarpMma.cpp - Lowerings of attn.warp_mma ---------------------------===//
//
// attn.warp_mma is one lane's share of a warp's 16-row matrix product: the
// elements of mma.m16n8k16's accumulator fragment that the lane holds, in
// every block of 8 columns (see the op). Two lowerings compute that share:
//
//  * loops (-attn-warp-mma-to-loops): per element, a fused multiply-add
//    chain over K in f32. The CPU runs block kernels this way, and the GPU
//    runs f32 products (and those of chips without bf16 mma.sync) this way;
//  * tensor cores (-attn-warp-mma-to-nvvm): the lane's A and B fragments
//    loaded from the shared buffers and one nvvm.mma.sync per 16 x 8 x 16
//    step, the accumulators in registers across K.
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
#include "passes/Passes.h"
#include "passes/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNWARPMMATOLOOPS
#define GEN_PASS_DEF_ATTNWARPMMATONVVM
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

/// Where the lane's accumulator element `el` (0, 1) of half `half` in
/// column block `block` lies in acc: (its row, its column) of a shared
/// tile, or (block, 2 half + el) of a fragment.
SmallVector<Value, 2> accIndices(SimtEmitter &e, WarpMmaOp op,
                                 MmaFragmentLayout &layout, Value block,
                                 int64_t half, int64_t el) {
  if (op.getAccFragment())
    return {block, e.index(2 * half + el)};
  return {layout.accRow(e, half), layout.accColumn(e, block, el)};
}

/// B[k, column] of the op: rhs[k, column], or rhs[column, k] when
/// transposed.
SmallVector<Value, 2> rhsIndices(WarpMmaOp op, Value k, Value column) {
  if (op.getRhsTransposed())
    return {column, k};
  return {k, column};
}

void lowerToLoops(WarpMmaOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  SimtEmitter e(b);
  MmaFragmentLayout layout(e, op.getRow(), op.getLane());
  Value c0 = e.index(0), c1 = e.index(1);
  e.loop(c0, e.index(op.getN() / WarpMmaOp::kFragmentColumns), c1,
         [&](Value block) {
           for (int64_t half = 0; half < 2; ++half) {
             Value row = layout.accRow(e, half);
             for (int64_t element = 0; element < 2; ++element) {
               Value column = layout.accColumn(e, block, element);
               SmallVector<Value, 2> at =
                   accIndices(e, op, layout, block, half, element);
               Value init =
                   op.getAccumulate() ? e.load(op.getAcc(), at) : e.scalar(0.0);
               Value sum =
                   e.loop(c0, e.index(op.getK()), c1, {init},
                          [&](Value k, ValueRange it) {
                            Value x = e.load(op.getLhs(), {row, k});
                            Value y =
                                e.load(op.getRhs(), rhsIndices(op, k, column));
                            return SmallVector<Value>{e.fma(x, y, it[0])};
                          })[0];
               e.store(sum, op.getAcc(), at);
             }
           }
         });
  op.erase();
}

/// The unrolled mma.sync form of `op` (f16 or bf16).
void lowerToMmaSync(WarpMmaOp op) {
  ImplicitLocOpBuilder b(op.getLoc(), op);
  SimtEmitter e(b);
  MmaFragmentLayout layout(e, op.getRow(), op.getLane());
  Type element = op.getLhs().getType().getElementType();
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
  Value c1 = e.index(1);

  const int64_t blocks = op.getN() / WarpMmaOp::kFragmentColumns;
  const int64_t steps = op.getK() / WarpMmaOp::kReductionStep;
  Value rows[2] = {layout.accRow(e, 0), layout.accRow(e, 1)};
  // acc[block] = {c0, c1, c2, c3}.
  SmallVector<SmallVector<Value, 4>> acc(blocks);
  for (int64_t block = 0; block < blocks; ++block)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t el = 0; el < 2; ++el)
        acc[block].push_back(
            op.getAccumulate()
                ? e.load(op.getAcc(),
                         accIndices(e, op, layout, e.index(block), half, el))
                : e.scalar(0.0));

  auto structType = LLVM::LLVMStructType::getLiteral(
      b.getContext(), SmallVector<Type>(4, e.f32));
  std::array<NVVM::MMATypes, 2> ptxTypes = {
      bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16,
      bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16};
  std::array<NVVM::MMALayout, 2> layouts = {NVVM::MMALayout::row,
                                            NVVM::MMALayout::col};
  for (int64_t step = 0; step < steps; ++step) {
    // k of the lane's first pair in this step, and 8 further.
    Value k0 =
        e.add(e.index(step * WarpMmaOp::kReductionStep), layout.pairColumn);
    Value k8 = e.add(k0, e.index(8));
    SmallVector<Value, 4> a = {adjacentPair(op.getLhs(), rows[0], k0),
                               adjacentPair(op.getLhs(), rows[1], k0),
                               adjacentPair(op.getLhs(), rows[0], k8),
                               adjacentPair(op.getLhs(), rows[1], k8)};
    for (int64_t block = 0; block < blocks; ++block) {
      Value column =
          e.add(e.index(block * WarpMmaOp::kFragmentColumns), layout.group);
      SmallVector<Value, 2> bRegs;
      for (Value k : {k0, k8}) {
        if (op.getRhsTransposed()) {
          bRegs.push_back(adjacentPair(op.getRhs(), column, k));
          continue;
        }
        // Down a column of rhs [K, N]: two loads.
        Value lo =
            memref::LoadOp::create(b, op.getRhs(), ValueRange{k, column});
        Value hi = memref::LoadOp::create(b, op.getRhs(),
                                          ValueRange{e.add(k, c1), column});
        bRegs.push_back(reg(
            vector::FromElementsOp::create(b, pairType, ValueRange{lo, hi})));
      }
      Value result = NVVM::MmaOp::create(
          b, structType, a, bRegs, acc[block],
          ArrayRef<int64_t>{WarpMmaOp::kRows, WarpMmaOp::kFragmentColumns,
                            WarpMmaOp::kReductionStep},
          std::nullopt, std::nullopt, ptxTypes, layouts);
      for (int64_t i = 0; i < 4; ++i)
        acc[block][i] = LLVM::ExtractValueOp::create(b, result, i);
    }
  }
  for (int64_t block = 0; block < blocks; ++block)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t el = 0; el < 2; ++el)
        e.store(acc[block][2 * half + el], op.getAcc(),
                accIndices(e, op, layout, e.index(block), half, el));
  op.erase();
}

struct AttnWarpMmaToLoops final
    : mlir::attn::impl::AttnWarpMmaToLoopsBase<AttnWarpMmaToLoops> {
  void runOnOperation() override {
    SmallVector<WarpMmaOp> ops;
    getOperation()->walk([&](WarpMmaOp op) { ops.push_back(op); });
    for (WarpMmaOp op : ops)
      lowerToLoops(op);
  }
};

struct AttnWarpMmaToNvvm final
    : mlir::attn::impl::AttnWarpMmaToNvvmBase<AttnWarpMmaToNvvm> {
  using Base::Base;

  void runOnOperation() override {
    // bf16 mma.sync and f16 m16n8k16 need sm_80.
    const bool tensorCores = smVersionOf(chip) >= 80;
    SmallVector<WarpMmaOp> ops;
    getOperation()->walk([&](WarpMmaOp op) { ops.push_back(op); });
    for (WarpMmaOp op : ops) {
      Type element = op.getLhs().getType().getElementType();
      if (tensorCores && (element.isF16() || element.isBF16()))
        lowerToMmaSync(op);
      else
        lowerToLoops(op);
    }
  }
};

} // namespace
