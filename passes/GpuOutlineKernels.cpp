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
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNGPUOUTLINEKERNELS
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

/// A thread loop in its role's copy of a region split by roles: every
/// thread that runs it is one of the loop's.
constexpr llvm::StringLiteral kInRoleAttr = "attn.in_role";

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

  /// The threads [first, end) a thread loop runs over (checked by
  /// checkThreadLoops).
  struct ThreadBounds {
    int64_t first, end;
    bool operator==(const ThreadBounds &other) const {
      return first == other.first && end == other.end;
    }
  };
  static ThreadBounds threadBoundsOf(scf::ParallelOp loop) {
    return {*getConstantIntValue(loop.getLowerBound().front()),
            *getConstantIntValue(loop.getUpperBound().front())};
  }
  static Value threadIn(OpBuilder &b, Location loc, Value thread,
                        ThreadBounds bounds) {
    auto index = [&](int64_t value) {
      return arith::ConstantIndexOp::create(b, loc, value);
    };
    Value fromFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                            thread, index(bounds.first));
    Value beforeEnd = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                            thread, index(bounds.end));
    return arith::AndIOp::create(b, loc, fromFirst, beforeEnd);
  }

  /// Thread loops run over constant [first, end) within the block's
  /// threads, whole warps unless they are all of them, with step 1, and do
  /// not nest.
  static LogicalResult checkThreadLoops(gpu::GPUFuncOp func,
                                        const SimtLaunch &launch) {
    WalkResult bad = func.walk([&](scf::ParallelOp loop) {
      if (!loop->hasAttr(kThreadLoopAttr))
        return WalkResult::advance();
      auto first = getConstantIntValue(loop.getLowerBound().front());
      auto end = getConstantIntValue(loop.getUpperBound().front());
      const bool whole =
          first && end && *first == 0 && *end == launch.blockThreads;
      const bool warps = first && end && *first >= 0 && *first < *end &&
                         *end <= launch.blockThreads && *first % 32 == 0 &&
                         *end % 32 == 0;
      if (loop.getNumLoops() != 1 ||
          !isConstantIntValue(loop.getStep().front(), 1) || !(whole || warps)) {
        loop.emitError("a thread loop must run with step 1 over [0, ")
            << launch.blockThreads
            << ") or over whole warps of it (constant bounds, multiples of 32)";
        return WalkResult::interrupt();
      }
      if (loop->getParentOfType<scf::ParallelOp>()) {
        loop.emitError("thread loops do not nest");
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    return failure(bad.wasInterrupted());
  }

  /// Each region split by roles (SimtEmitter::byRoles) -> one copy per
  /// role, under the condition that the thread is one of the role's,
  /// holding that role's thread loops alone (marked kInRoleAttr). The
  /// roles hand data to one another through mbarriers, which hold in any
  /// order of their loops; each copy then runs its loops as far ahead of
  /// the others' as its waits allow (a producer warp's loop of tiles is a
  /// loop of its own). What the region does outside thread loops is the
  /// block's uniform arithmetic and loads, which each copy does again.
  LogicalResult splitByRoles(gpu::GPUFuncOp func) {
    SmallVector<scf::ExecuteRegionOp> regions;
    func.walk([&](scf::ExecuteRegionOp region) {
      if (region->hasAttr(kByRolesAttr))
        regions.push_back(region);
    });
    for (scf::ExecuteRegionOp region : regions) {
      if (region->getNumResults() != 0 || !region.getRegion().hasOneBlock())
        return region.emitError(
            "a region split by roles has one block and no results");
      if (region->getParentOfType<scf::ParallelOp>())
        return region.emitError(
            "a region split by roles may not be in a thread loop");
      SmallVector<ThreadBounds> roles;
      WalkResult bad = region->walk<WalkOrder::PreOrder>([&](Operation *op) {
        if (op != region.getOperation() && op->hasAttr(kByRolesAttr)) {
          op->emitError("regions split by roles do not nest");
          return WalkResult::interrupt();
        }
        auto loop = dyn_cast<scf::ParallelOp>(op);
        if (loop && loop->hasAttr(kThreadLoopAttr)) {
          if (!loop->hasAttr(kWarpSyncAttr) &&
              !loop->hasAttr(kMbarrierSyncAttr)) {
            loop.emitError("a thread loop in a region split by roles must "
                           "end with warp or mbarrier sync (a block-wide "
                           "barrier would wait for the other roles' threads)");
            return WalkResult::interrupt();
          }
          ThreadBounds bounds = threadBoundsOf(loop);
          if (llvm::is_contained(roles, bounds))
            return WalkResult::skip();
          for (ThreadBounds role : roles)
            if (bounds.first < role.end && role.first < bounds.end) {
              loop.emitError("the roles of a region split by roles take "
                             "disjoint threads: [")
                  << bounds.first << ", " << bounds.end << ") overlaps ["
                  << role.first << ", " << role.end << ")";
              return WalkResult::interrupt();
            }
          roles.push_back(bounds);
          return WalkResult::skip();
        }
        if (op->getNumRegions() == 0 && !isa<scf::YieldOp>(op) &&
            mightHaveEffect<MemoryEffects::Write>(op)) {
          op->emitError("a region split by roles writes memory in thread "
                        "loops alone (each role runs what is outside them), "
                        "not in '")
              << op->getName() << "'";
          return WalkResult::interrupt();
        }
        return WalkResult::advance();
      });
      if (bad.wasInterrupted())
        return failure();

      OpBuilder b(region);
      Location loc = region.getLoc();
      Block &body = region.getRegion().front();
      for (ThreadBounds role : roles) {
        Value thread = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
        auto inRole = scf::IfOp::create(b, loc, threadIn(b, loc, thread, role),
                                        /*withElseRegion=*/false);
        OpBuilder inside = OpBuilder::atBlockBegin(inRole.thenBlock());
        IRMapping mapping;
        for (Operation &op : body.without_terminator())
          inside.clone(op, mapping);
        SmallVector<scf::ParallelOp> others;
        inRole.walk([&](scf::ParallelOp loop) {
          if (!loop->hasAttr(kThreadLoopAttr))
            return;
          if (threadBoundsOf(loop) == role)
            loop->setAttr(kInRoleAttr, b.getUnitAttr());
          else
            others.push_back(loop);
        });
        for (scf::ParallelOp loop : others)
          loop.erase();
      }
      region.erase();
    }
    return success();
  }

  /// A block kernel's shared buffers -> views into dynamic shared memory,
  /// thread loops -> their bodies for threadIdx.x, each then a barrier.
  LogicalResult lowerBlockStructure(gpu::GPUFuncOp func,
                                    const SimtLaunch &launch) {
    MLIRContext *context = func.getContext();
    if (failed(checkThreadLoops(func, launch)) || failed(splitByRoles(func)))
      return failure();
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
      ThreadBounds bounds = threadBoundsOf(loop);
      Location loc = loop.getLoc();
      rewriter.setInsertionPoint(loop);
      Value thread = gpu::ThreadIdOp::create(rewriter, loc, gpu::Dimension::x);
      // A loop over some of the threads: its body under a condition, unless
      // it is in its role's copy of a region split by roles.
      if (!loop->hasAttr(kInRoleAttr) &&
          (bounds.first != 0 || bounds.end != launch.blockThreads)) {
        auto inRange = scf::IfOp::create(
            rewriter, loc, threadIn(rewriter, loc, thread, bounds),
            /*withElseRegion=*/false);
        rewriter.setInsertionPoint(inRange.thenBlock()->getTerminator());
      }
      Block *loopBody = loop.getBody();
      rewriter.eraseOp(loopBody->getTerminator());
      rewriter.inlineBlockBefore(loopBody, rewriter.getInsertionBlock(),
                                 rewriter.getInsertionPoint(),
                                 ValueRange{thread});
      rewriter.setInsertionPoint(loop);
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
