//===- AsyncCopy.cpp - Lowerings of attn_kernel.async_copy ------------===//
//
// attn_kernel.async_copy is one thread's copy of 4, 8 or 16 bytes into a shared
// buffer that may complete as late as the thread's next attn_kernel.async_wait
// (see the op). Block kernels stage their tiles with it so that a thread
// has all its copies of a tile in flight at once, instead of one load and
// its store at a time. Two lowerings (which also lower
// attn_kernel.device_fence: dropped on the CPU, membar.gl on the GPU):
//
//  * a copy done at once (-attn-async-copy-to-loops): the CPU runs a
//    block's threads one after another, so there is nothing to overlap;
//  * cp.async (-attn-async-copy-to-nvvm): global memory to shared memory
//    without passing through registers, zero-filled where the copy is not
//    valid, committed and waited for at attn_kernel.async_wait.
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"
#include "passes/Passes.h"
#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNASYNCCOPYTOLOOPS
#define GEN_PASS_DEF_ATTNASYNCCOPYTONVVM
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

int64_t bytesOf(AsyncCopyOp op) {
  Type element = op.getSource().getType().getElementType();
  return op.getElements() * element.getIntOrFloatBitWidth() / 8;
}

/// The copy, done at once: a vector load and store where it is valid, else
/// zeros an element at a time (one vector store of a select would make x86
/// widen bf16 vectors to f32 and back through library calls).
void lowerToCopy(AsyncCopyOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Type element = op.getSource().getType().getElementType();
  const int64_t elements = op.getElements();
  auto vectorType = VectorType::get({elements}, element);
  llvm::MaybeAlign align(bytesOf(op));
  scf::IfOp::create(
      b, loc, op.getValid(),
      [&](OpBuilder &then, Location loc) {
        Value piece = vector::LoadOp::create(
            then, loc, vectorType, op.getSource(), op.getSourceIndices(),
            /*nontemporal=*/false, align);
        vector::StoreOp::create(then, loc, piece, op.getTarget(),
                                op.getTargetIndices(), /*nontemporal=*/false,
                                align);
        scf::YieldOp::create(then, loc);
      },
      [&](OpBuilder &otherwise, Location loc) {
        Value zero = arith::ConstantOp::create(otherwise, loc,
                                               otherwise.getZeroAttr(element));
        SmallVector<Value> at(op.getTargetIndices());
        Value last = at.back();
        for (int64_t i = 0; i < elements; ++i) {
          if (i > 0)
            at.back() = arith::AddIOp::create(
                otherwise, loc, last,
                arith::ConstantIndexOp::create(otherwise, loc, i));
          memref::StoreOp::create(otherwise, loc, zero, op.getTarget(), at);
        }
        scf::YieldOp::create(otherwise, loc);
      });
  op.erase();
}

/// cp.async of the op's bytes; a source size of 0 makes it write zeros.
void lowerToCpAsync(AsyncCopyOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value all = arith::ConstantIndexOp::create(b, loc, op.getElements());
  Value none = arith::ConstantIndexOp::create(b, loc, 0);
  Value sourceElements =
      arith::SelectOp::create(b, loc, op.getValid(), all, none);
  // .cg (through L2 only) exists for 16-byte copies alone.
  UnitAttr bypassL1 = bytesOf(op) == 16 ? b.getUnitAttr() : UnitAttr();
  nvgpu::DeviceAsyncCopyOp::create(
      b, loc, op.getTarget(), op.getTargetIndices(), op.getSource(),
      op.getSourceIndices(), b.getIndexAttr(op.getElements()), sourceElements,
      bypassL1);
  op.erase();
}

struct AttnAsyncCopyToLoops final
    : mlir::attn::impl::AttnAsyncCopyToLoopsBase<AttnAsyncCopyToLoops> {
  void runOnOperation() override {
    getOperation()->walk([](Operation *op) {
      if (auto copy = dyn_cast<AsyncCopyOp>(op))
        lowerToCopy(copy);
      else if (isa<AsyncWaitOp, DeviceFenceOp>(op))
        op->erase();
    });
  }
};

struct AttnAsyncCopyToNvvm final
    : mlir::attn::impl::AttnAsyncCopyToNvvmBase<AttnAsyncCopyToNvvm> {
  using Base::Base;

  void runOnOperation() override {
    // cp.async needs sm_80.
    const bool cpAsync = smVersionOf(chip) >= 80;
    // The async proxy (and wgmma, which reads through it) begins at sm_90.
    const bool asyncProxy = smVersionOf(chip) >= 90;
    WalkResult result = getOperation()->walk([&](Operation *op) {
      if (auto copy = dyn_cast<AsyncCopyOp>(op)) {
        if (!cpAsync) {
          lowerToCopy(copy);
          return WalkResult::advance();
        }
        if (!nvgpu::NVGPUDialect::hasSharedMemoryAddressSpace(
                copy.getTarget().getType())) {
          copy.emitOpError()
              << "target must be in shared (workgroup) memory on the GPU, "
                 "got "
              << copy.getTarget().getType()
              << " (run -attn-gpu-outline-kernels first)";
          return WalkResult::interrupt();
        }
        lowerToCpAsync(copy);
      } else if (isa<DeviceFenceOp>(op)) {
        OpBuilder b(op);
        NVVM::MembarOp::create(b, op->getLoc(), NVVM::MemScopeKind::GPU);
        op->erase();
      } else if (auto wait = dyn_cast<AsyncWaitOp>(op)) {
        OpBuilder b(op);
        if (cpAsync) {
          NVVM::CpAsyncCommitGroupOp::create(b, op->getLoc());
          NVVM::CpAsyncWaitGroupOp::create(b, op->getLoc(), wait.getPending());
        }
        // The thread's shared-memory writes, now complete, made visible to
        // the async proxy through which wgmma reads its operands.
        if (wait.getAsyncProxy() && asyncProxy)
          NVVM::FenceProxyOp::create(
              b, op->getLoc(),
              NVVM::ProxyKindAttr::get(b.getContext(),
                                       NVVM::ProxyKind::async_shared),
              NVVM::SharedSpaceAttr::get(b.getContext(),
                                         NVVM::SharedSpace::shared_cta));
        op->erase();
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
