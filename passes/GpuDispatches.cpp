//===- GpuDispatches.cpp - Entries to host programs + CUDA kernels --------===//
//
// The CUDA half of entry lowering (EntryLowering.h builds the host
// function): softmax attention runs one query row per thread, decode calls
// (few query rows) split the keys over threads and merge the partials. The
// kernels are the one-thread bodies of SimtKernels.h; a dispatch's
// workgroup count is its thread count.
//
//===----------------------------------------------------------------------===//

#include "passes/EntryLowering.h"
#include "passes/Passes.h"
#include "passes/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNGPUDISPATCHES
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

class GpuEntryLowering : public EntryLowering {
public:
  GpuEntryLowering(func::FuncOp entry, const GpuTiling &tiling)
      : EntryLowering(entry, "CUDA"), tiling(tiling) {}

private:
  LogicalResult checkLowerable(AttentionOpInterface op) override {
    if (op.getNormalizer() == Normalizer::RecurrentState)
      return op->emitError(
          "no CUDA lowering for linear recurrences yet (compile with "
          "--target cpu)");
    return SoftmaxAttentionShape::get(op, "CUDA");
  }
  LogicalResult lowerAttention(ImplicitLocOpBuilder &b,
                               AttentionOpInterface op) override;

  const GpuTiling &tiling;
};

LogicalResult GpuEntryLowering::lowerAttention(ImplicitLocOpBuilder &b,
                                               AttentionOpInterface op) {
  FailureOr<SoftmaxAttentionShape> maybeShape =
      SoftmaxAttentionShape::get(op, "CUDA");
  if (failed(maybeShape))
    return failure();
  const SoftmaxAttentionShape &shape = *maybeShape;
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto mul = [&](Value x, Value y) { return arith::MulIOp::create(b, x, y); };
  auto select = [&](Value c, Value x, Value y) {
    return arith::SelectOp::create(b, c, x, y);
  };

  Value q = buffers.lookup(op.getQuery()), k = buffers.lookup(op.getKey()),
        v = buffers.lookup(op.getValue());
  Value gate;
  if (shape.epilogue == Epilogue::SigmoidGate)
    gate = buffers.lookup(op.getEpilogueOperands()[0]);
  Value batch = memref::DimOp::create(b, q, 0);
  Value lq = memref::DimOp::create(b, q, 2);
  Value lk = memref::DimOp::create(b, k, 2);

  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  SmallVector<Value> outSizes;
  for (int64_t d = 0; d < outType.getRank(); ++d)
    if (outType.isDynamicDim(d))
      outSizes.push_back(d == 0 ? batch : lq);
  Value out = bufferFor(b, op.getOutput(), outSizes);
  buffers.map(op.getOutput(), out);
  Value lse;
  if (Value lseResult = op.getLogSumExp()) {
    lse = bufferFor(b, lseResult, {batch, lq});
    buffers.map(lseResult, lse);
  }

  // Decode calls take split-KV + merge, others one thread per row; the
  // other path gets zero threads and empty temporaries.
  Value zero = index(0);
  Value decode = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, lq,
                                       index(tiling.decodeMaxQueries));
  Value rows = mul(mul(batch, index(shape.numHeads)), lq);
  Value rowThreads = select(decode, zero, rows);
  Value decodeBatch = select(decode, batch, zero);
  Value decodeRows = select(decode, lq, zero);
  Value decodeSplits = select(
      decode, arith::CeilDivUIOp::create(b, lk, index(tiling.splitKeys)), zero);
  auto partialOutType = MemRefType::get({ShapedType::kDynamic, shape.numHeads,
                                         ShapedType::kDynamic,
                                         ShapedType::kDynamic, shape.valueDim},
                                        b.getF32Type());
  auto partialLseType =
      MemRefType::get({ShapedType::kDynamic, shape.numHeads,
                       ShapedType::kDynamic, ShapedType::kDynamic},
                      b.getF32Type());
  Value partialOut = memref::AllocOp::create(
      b, partialOutType, ValueRange{decodeBatch, decodeRows, decodeSplits});
  Value partialLse = memref::AllocOp::create(
      b, partialLseType, ValueRange{decodeBatch, decodeRows, decodeSplits});
  Value mergeThreads = mul(mul(decodeBatch, index(shape.numHeads)), decodeRows);
  Value splitThreads = mul(mergeThreads, decodeSplits);

  SmallVector<Value> rowBindings{q, k, v};
  if (gate)
    rowBindings.push_back(gate);
  rowBindings.push_back(out);
  if (lse)
    rowBindings.push_back(lse);
  SmallVector<Value> splitBindings{q, k, v, partialOut, partialLse};
  SmallVector<Value> mergeBindings{partialOut, partialLse};
  if (gate)
    mergeBindings.push_back(gate);
  mergeBindings.push_back(out);
  if (lse)
    mergeBindings.push_back(lse);

  OpBuilder kernelBuilder(host);
  auto types = [](ValueRange values) {
    return SmallVector<Type>(values.getTypes());
  };
  auto dispatch = [&](func::FuncOp kernel, Value threads, ValueRange bindings) {
    DispatchOp::create(b, kernel.getSymName(), threads, bindings);
  };
  dispatch(buildSimtAttentionKernel(kernelBuilder, op.getLoc(),
                                    kernelName("attention"), shape, tiling,
                                    types(rowBindings)),
           rowThreads, rowBindings);
  dispatch(buildSimtSplitKvKernel(kernelBuilder, op.getLoc(),
                                  kernelName("split_kv"), shape, tiling,
                                  types(splitBindings)),
           splitThreads, splitBindings);
  dispatch(buildSimtMergeKernel(kernelBuilder, op.getLoc(), kernelName("merge"),
                                shape, tiling, types(mergeBindings)),
           mergeThreads, mergeBindings);
  return success();
}

struct AttnGpuDispatches final
    : mlir::attn::impl::AttnGpuDispatchesBase<AttnGpuDispatches> {
  using Base::Base;

  void runOnOperation() override {
    GpuTiling tiling;
    tiling.blockThreads = blockThreads;
    tiling.splitKeys = splitKeys;
    tiling.decodeMaxQueries = decodeMaxQueries;
    if (tiling.blockThreads <= 0 || tiling.blockThreads > 1024 ||
        tiling.blockThreads % 32 != 0 || tiling.splitKeys <= 0) {
      getOperation().emitError()
          << "bad CUDA tiling: block-threads (" << tiling.blockThreads
          << ") must be a multiple of 32 in [32, 1024], split-keys ("
          << tiling.splitKeys << ") positive";
      return signalPassFailure();
    }
    for (func::FuncOp entry : EntryLowering::entriesOf(getOperation()))
      if (failed(GpuEntryLowering(entry, tiling).run()))
        return signalPassFailure();
  }
};

} // namespace
