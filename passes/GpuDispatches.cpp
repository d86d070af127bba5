//===- GpuDispatches.cpp - Entries to host programs + CUDA kernels --------===//
//
// The CUDA half of entry lowering (EntryLowering.h builds the host
// function), with the kernels of SimtKernels.h. Softmax attention runs
// the flash block kernel, a block per (batch, head, query tile); decode
// calls (few query rows) split the keys over threads and merge the
// partials, a thread kernel's workgroup count being its thread count.
// Linear recurrences run the chunked block kernel, one block
// per (batch, value head, column tile), then (with the rmsnorm-silu gate)
// one thread per output row.
//
//===----------------------------------------------------------------------===//

#include "passes/EntryLowering.h"
#include "passes/Passes.h"
#include "passes/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
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
  LogicalResult lowerSoftmax(ImplicitLocOpBuilder &b,
                             AttentionOpInterface op) override;
  LogicalResult lowerRecurrence(ImplicitLocOpBuilder &b,
                                AttentionOpInterface op) override;

  const GpuTiling &tiling;
};

LogicalResult GpuEntryLowering::lowerSoftmax(ImplicitLocOpBuilder &b,
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

  SoftmaxBuffers s =
      bindSoftmax(b, op, shape.epilogue == Epilogue::SigmoidGate);

  // Decode calls take split-KV + merge, others the flash block kernel; the
  // other path gets zero workgroups and empty temporaries.
  Value zero = index(0);
  Value decode = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, s.lq,
                                       index(tiling.decodeMaxQueries));
  SimtFlashTiling flash = SimtFlashTiling::choose(
      shape, cast<MemRefType>(s.q.getType()).getElementType(), tiling);
  Value queryTiles =
      arith::CeilDivUIOp::create(b, s.lq, index(flash.queryTile()));
  Value flashBlocks = select(
      decode, zero, mul(mul(s.batch, index(shape.numHeads)), queryTiles));
  Value decodeBatch = select(decode, s.batch, zero);
  Value decodeRows = select(decode, s.lq, zero);
  Value decodeSplits = select(
      decode, arith::CeilDivUIOp::create(b, s.lk, index(tiling.splitKeys)),
      zero);
  allocateSplitPartials(b, s, shape.numHeads, shape.valueDim, decodeBatch,
                        decodeRows, decodeSplits);
  Value mergeThreads = mul(mul(decodeBatch, index(shape.numHeads)), decodeRows);
  Value splitThreads = mul(mergeThreads, decodeSplits);
  SmallVector<Value> rowBindings = s.rowBindings();
  SmallVector<Value> splitBindings = s.splitBindings();
  SmallVector<Value> mergeBindings = s.mergeBindings();

  OpBuilder kernelBuilder(host);
  auto types = [](ValueRange values) {
    return SmallVector<Type>(values.getTypes());
  };
  auto dispatch = [&](func::FuncOp kernel, Value threads, ValueRange bindings) {
    DispatchOp::create(b, kernel.getSymName(), threads, bindings);
  };
  dispatch(buildSimtFlashKernel(kernelBuilder, op.getLoc(), kernelName("flash"),
                                shape, flash, tiling, types(rowBindings)),
           flashBlocks, rowBindings);
  dispatch(buildSimtSplitKvKernel(kernelBuilder, op.getLoc(),
                                  kernelName("split_kv"), shape, tiling,
                                  types(splitBindings)),
           splitThreads, splitBindings);
  dispatch(buildSimtMergeKernel(kernelBuilder, op.getLoc(), kernelName("merge"),
                                shape, tiling, types(mergeBindings)),
           mergeThreads, mergeBindings);
  return success();
}

LogicalResult GpuEntryLowering::lowerRecurrence(ImplicitLocOpBuilder &b,
                                                AttentionOpInterface op) {
  FailureOr<LinearRecurrenceShape> maybeShape =
      LinearRecurrenceShape::get(op, "CUDA");
  if (failed(maybeShape))
    return failure();
  const LinearRecurrenceShape &shape = *maybeShape;
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto mul = [&](Value x, Value y) { return arith::MulIOp::create(b, x, y); };
  RecurrenceBuffers r = bindRecurrence(b, op);
  SmallVector<Type> types(ValueRange(r.bindings).getTypes());

  // One state column per thread: blocks of whole warps, no wider than the
  // state (a narrow state leaves no idle warps).
  const int64_t threads =
      std::min(tiling.blockThreads, roundUp(shape.valueDim, 32));
  const int64_t tiles = (shape.valueDim + threads - 1) / threads;
  OpBuilder kernelBuilder(host);
  func::FuncOp chunked = buildSimtChunkedRecurrenceKernel(
      kernelBuilder, op.getLoc(), kernelName("chunked"), shape, threads, tiling,
      types);
  Value heads = mul(r.batch, index(shape.numValueHeads));
  DispatchOp::create(b, chunked.getSymName(), mul(heads, index(tiles)),
                     r.bindings);
  if (shape.rmsNormGate) {
    func::FuncOp gate = buildSimtRecurrenceGateKernel(
        kernelBuilder, op.getLoc(), kernelName("gate"), shape, tiling, types);
    DispatchOp::create(b, gate.getSymName(), mul(heads, r.length), r.bindings);
  }
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
    tiling.maxSharedBytes = maxSharedBytes;
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
