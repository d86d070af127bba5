//===- GpuOutlineKernels.cpp - CUDA kernels into a gpu.module -------------===//
//
// Moves every kernel function into `gpu.module @attn_kernels` (with the
// NVVM target) as a `gpu.func` kernel taking the bindings and the
// dispatch's workgroup count. A thread kernel's body runs for global
// thread index blockIdx.x * blockDim.x + threadIdx.x when that index is
// below the count; a block kernel's for blockIdx.x, with its thread loops
// run by threadIdx.x and separated by barriers, its shared buffers in
// dynamic shared memory and its register buffers in per-thread arrays
// (SimtKernels.h). The host functions are dropped;
// their dispatch programs are in the binary by then.
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"
#include "passes/Passes.h"
#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNGPUOUTLINEKERNELS
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

struct AttnGpuOutlineKernels final
    : mlir::attn::impl::AttnGpuOutlineKernelsBase<AttnGpuOutlineKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *context = &getContext();
    SmallVector<func::FuncOp> kernels, hosts;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func->hasAttr("attn.kernel"))
        kernels.push_back(func);
      else if (func->hasAttr("attn.entry"))
        hosts.push_back(func);
    }
    for (func::FuncOp host : hosts)
      host.erase();
    if (kernels.empty())
      return;

    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(context));
    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    auto target = NVVM::NVVMTargetAttr::get(
        context, /*optLevel=*/3, "nvptx64-nvidia-cuda", chip, features);
    auto gpuModule =
        gpu::GPUModuleOp::create(builder, module.getLoc(), "attn_kernels",
                                 builder.getArrayAttr({target}));

    for (func::FuncOp kernel : kernels) {
      if (failed(outline(kernel, gpuModule)))
        return signalPassFailure();
      kernel.erase();
    }
  }

  LogicalResult outline(func::FuncOp kernel, gpu::GPUModuleOp gpuModule) {
    FailureOr<SimtLaunch> launch = SimtLaunch::get(kernel);
    if (failed(launch))
      return failure();
    // Same signature: the last index argument is the workgroup count
    // instead of the workgroup.
    OpBuilder builder = OpBuilder::atBlockEnd(gpuModule.getBody());
    auto func =
        gpu::GPUFuncOp::create(builder, kernel.getLoc(), kernel.getSymName(),
                               kernel.getFunctionType());
    func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  builder.getUnitAttr());
    func.setKnownBlockSizeAttr(builder.getDenseI32ArrayAttr(
        {static_cast<int32_t>(launch->blockThreads), 1, 1}));
    for (StringRef name : {"attn.kernel", "attn.tiling"})
      func->setAttr(name, kernel->getAttr(name));

    Block &entry = func.getBody().front();
    ImplicitLocOpBuilder b(kernel.getLoc(), OpBuilder::atBlockBegin(&entry));
    Value block = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value workgroup =
        launch->perBlock
            ? block
            : arith::AddIOp::create(
                  b,
                  arith::MulIOp::create(
                      b, block, gpu::BlockDimOp::create(b, gpu::Dimension::x)),
                  gpu::ThreadIdOp::create(b, gpu::Dimension::x));
    Value count = entry.getArguments().back();
    // Uniform over a block kernel's threads, so its barriers stay uniform.
    Value inRange =
        arith::CmpIOp::create(b, arith::CmpIPredicate::ult, workgroup, count);
    auto guard = scf::IfOp::create(b, inRange, /*withElseRegion=*/false);
    gpu::ReturnOp::create(b);

    // Move the body under the guard, the workgroup replacing the last
    // argument.
    Block &body = kernel.getBody().front();
    body.getTerminator()->erase();
    SmallVector<Value> replacements(entry.getArguments());
    replacements.back() = workgroup;
    Block *then = guard.thenBlock();
    then->getOperations().splice(then->begin(), body.getOperations());
    for (auto [from, to] : llvm::zip(body.getArguments(), replacements))
      from.replaceAllUsesWith(to);
    // A warp's lanes must run a warp_mma together: it sits directly in a
    // thread loop of a block kernel, which every thread of the block runs.
    WalkResult divergent = func.walk([&](WarpMmaOp op) {
      auto loop = dyn_cast<scf::ParallelOp>(op->getParentOp());
      if (launch->perBlock && loop && loop->hasAttr(kThreadLoopAttr))
        return WalkResult::advance();
      op.emitError(
          "attn_kernel.warp_mma must be directly in a thread loop of a "
          "block kernel, where the 32 lanes of a warp run it "
          "together");
      return WalkResult::interrupt();
    });
    if (divergent.wasInterrupted())
      return failure();
    if (launch->perBlock)
      return lowerBlockStructure(func, *launch);
    WalkResult registers = func.walk([&](memref::AllocaOp alloca) {
      if (!alloca->hasAttr(kRegisterBufferAttr))
        return WalkResult::advance();
      alloca.emitError("register buffers are for block kernels (a thread "
                       "kernel's values are its own already)");
      return WalkResult::interrupt();
    });
    return failure(registers.wasInterrupted());
  }

  /// A block kernel's register buffers [threads, shape...] -> one
  /// [shape...] array per thread (SROA makes it registers where its indices
  /// are constants), which each thread's views of its own slice become.
  LogicalResult lowerRegisterBuffers(gpu::GPUFuncOp func) {
    SmallVector<memref::AllocaOp> buffers;
    func.walk([&](memref::AllocaOp alloca) {
      if (alloca->hasAttr(kRegisterBufferAttr))
        buffers.push_back(alloca);
    });
    // Warps' fragments read as lhs, checked while the buffers are whole.
    WalkResult badRead = func.walk([&](WarpMmaOp op) {
      if (op.getLhsFragment() && failed(verifyWarpFragmentRead(op)))
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (badRead.wasInterrupted())
      return failure();
    // In the entry block (the kernel's body sits under its range guard):
    // LLVM promotes only entry-block allocas to registers.
    auto b = OpBuilder::atBlockBegin(&func.getBody().front());
    for (memref::AllocaOp alloca : buffers) {
      MemRefType type = alloca.getType();
      auto perThread = memref::AllocaOp::create(
          b, alloca.getLoc(),
          MemRefType::get(type.getShape().drop_front(), type.getElementType()),
          alloca.getAlignmentAttr());
      b.setInsertionPointAfter(perThread);
      for (Operation *user : llvm::make_early_inc_range(alloca->getUsers())) {
        auto view = dyn_cast<memref::SubViewOp>(user);
        // A warp's view, read by attn_kernel.warp_mma as lhs fragments: on the
        // GPU each lane holds its own, and the lowering shuffles the others'.
        auto fragmentRead = [&](Operation *viewUser) {
          auto mma = dyn_cast<WarpMmaOp>(viewUser);
          return mma && mma.getLhsFragment() && mma.getLhs() == view &&
                 mma.getAcc() != view && mma.getRhs() != view;
        };
        if (view && !view->use_empty() &&
            llvm::all_of(view->getUsers(), fragmentRead)) {
          for (Operation *viewUser :
               llvm::make_early_inc_range(view->getUsers()))
            cast<WarpMmaOp>(viewUser).getLhsMutable().assign(perThread);
          view.erase();
          continue;
        }
        auto loop = user->getParentOfType<scf::ParallelOp>();
        auto ownSlice = [&] {
          if (!view || !loop || !loop->hasAttr(kThreadLoopAttr) ||
              view.getMixedOffsets().front() !=
                  OpFoldResult(loop.getInductionVars().front()) ||
              view.getType().getRank() != type.getRank() - 1)
            return false;
          SmallVector<OpFoldResult> offsets = view.getMixedOffsets();
          for (OpFoldResult offset : ArrayRef(offsets).drop_front())
            if (!isConstantIntValue(offset, 0))
              return false;
          for (OpFoldResult stride : view.getMixedStrides())
            if (!isConstantIntValue(stride, 1))
              return false;
          return true;
        };
        if (!ownSlice())
          return user->emitError(
              "a register buffer may only be used through a thread's view of "
              "its own slice (memref.subview at the thread of the enclosing "
              "thread loop), or its warp's that attn_kernel.warp_mma reads as "
              "lhs "
              "fragments");
        OpBuilder at(view);
        view.replaceAllUsesWith(
            memref::CastOp::create(at, view.getLoc(), view.getType(), perThread)
                .getResult());
        view.erase();
      }
      alloca.erase();
    }
    return success();
  }

  /// A block kernel's shared buffers -> views into dynamic shared memory,
  /// thread loops -> their bodies for threadIdx.x, each then a barrier.
  LogicalResult lowerBlockStructure(gpu::GPUFuncOp func,
                                    const SimtLaunch &launch) {
    MLIRContext *context = func.getContext();
    SmallVector<memref::AllocaOp> sharedBuffers;
    SmallVector<scf::ParallelOp> threadLoops;
    func.walk([&](Operation *op) {
      if (auto alloca = dyn_cast<memref::AllocaOp>(op);
          alloca && alloca->hasAttr(kSharedBufferAttr))
        sharedBuffers.push_back(alloca);
      if (auto loop = dyn_cast<scf::ParallelOp>(op);
          loop && loop->hasAttr(kThreadLoopAttr))
        threadLoops.push_back(loop);
    });

    ImplicitLocOpBuilder b(func.getLoc(),
                           OpBuilder::atBlockBegin(&func.getBody().front()));
    auto workgroupSpace =
        gpu::AddressSpaceAttr::get(context, gpu::AddressSpace::Workgroup);
    Value base;
    if (!sharedBuffers.empty())
      base = gpu::DynamicSharedMemoryOp::create(
          b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                             MemRefLayoutAttrInterface(), workgroupSpace));
    int64_t offset = 0;
    for (memref::AllocaOp alloca : sharedBuffers) {
      // Views (a warp's rows or columns of an operand) only as products'
      // operands: they are rebuilt on the shared buffer below.
      SmallVector<memref::SubViewOp> operandViews;
      for (Operation *user : alloca->getUsers()) {
        auto subview = dyn_cast<memref::SubViewOp>(user);
        if (subview &&
            llvm::all_of(subview->getUsers(), llvm::IsaPred<WarpMmaOp>)) {
          operandViews.push_back(subview);
          continue;
        }
        if (!isa<memref::LoadOp, memref::StoreOp, memref::AtomicRMWOp,
                 vector::LoadOp, vector::StoreOp, WarpMmaOp, AsyncCopyOp,
                 BulkCopyOp, MbarrierInitOp, MbarrierArriveOp, MbarrierWaitOp>(
                user))
          return user->emitError(
              "a shared buffer may only be loaded, stored (elements or "
              "vectors), updated atomically (memref.atomic_rmw) and used by "
              "attn_kernel.warp_mma (itself or through memref.subview), "
              "the copies (attn_kernel.async_copy, bulk_copy) and the "
              "attn_kernel.mbarrier ops");
      }
      MemRefType type = alloca.getType();
      auto sharedType =
          MemRefType::get(type.getShape(), type.getElementType(),
                          MemRefLayoutAttrInterface(), workgroupSpace);
      Value view = memref::ViewOp::create(
          b, sharedType, base, arith::ConstantIndexOp::create(b, offset),
          ValueRange());
      alloca.replaceAllUsesWith(view);
      alloca.erase();
      for (memref::SubViewOp subview : operandViews) {
        OpBuilder at(subview);
        Value shared = memref::SubViewOp::create(
            at, subview.getLoc(), view, subview.getMixedOffsets(),
            subview.getMixedSizes(), subview.getMixedStrides());
        subview.replaceAllUsesWith(shared);
        subview.erase();
      }
      offset += roundUp(
          type.getNumElements() * type.getElementTypeBitWidth() / 8, 16);
    }
    assert(offset == launch.sharedBytes && "SimtLaunch counts the same");

    if (failed(lowerRegisterBuffers(func)))
      return failure();

    IRRewriter rewriter(context);
    for (scf::ParallelOp loop : threadLoops) {
      auto upper = getConstantIntValue(loop.getUpperBound().front());
      if (loop.getNumLoops() != 1 ||
          !isConstantIntValue(loop.getLowerBound().front(), 0) ||
          !isConstantIntValue(loop.getStep().front(), 1) || !upper ||
          *upper != launch.blockThreads)
        return loop.emitError("a thread loop must run over [0, ")
               << launch.blockThreads << ") with step 1";
      if (loop->getParentOfType<scf::ParallelOp>())
        return loop.emitError("thread loops do not nest");
      rewriter.setInsertionPoint(loop);
      Value thread =
          gpu::ThreadIdOp::create(rewriter, loop.getLoc(), gpu::Dimension::x);
      Block *loopBody = loop.getBody();
      rewriter.eraseOp(loopBody->getTerminator());
      rewriter.inlineBlockBefore(loopBody, loop, ValueRange{thread});
      // After an mbarrier-synced loop, nothing: its threads hand on what
      // they wrote through the mbarriers in it.
      if (loop->hasAttr(kWarpSyncAttr))
        NVVM::SyncWarpOp::create(
            rewriter, loop.getLoc(),
            arith::ConstantIntOp::create(rewriter, loop.getLoc(), -1, 32));
      else if (!loop->hasAttr(kMbarrierSyncAttr))
        gpu::BarrierOp::create(rewriter, loop.getLoc());
      rewriter.eraseOp(loop);
    }
    return success();
  }
};

} // namespace
