//===- StressBlockKernels.cpp - Block kernels run at their least convenient
//-===//
//
// Test aids for the CUDA kernels' bodies run on the CPU, where a block's
// threads run one after another and its buffers are stack memory that
// often holds the previous block's values. Two passes run them as a GPU
// may at its least convenient, so that a kernel that works on the CPU by
// chance fails (see their descriptions in Passes.td):
//
//  * -attn-reorder-thread-loops: the threads in another order (in even
//    blocks; odd blocks first to last), so that a race reads something
//    else;
//  * -attn-poison-kernel-buffers: shared and register buffers start as NaN
//    (or -1), so that an element read before any write gives NaN.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNPOISONKERNELBUFFERS
#define GEN_PASS_DEF_ATTNREORDERTHREADLOOPS
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

constexpr int64_t kWarpThreads = 32;

scf::ParallelOp asThreadLoop(Operation *op) {
  auto loop = dyn_cast_if_present<scf::ParallelOp>(op);
  return loop && loop->hasAttr(kThreadLoopAttr) ? loop : scf::ParallelOp();
}

/// Sibling thread loops in which every loop but the last waits for its
/// warp alone, so that warps of a GPU run through them independently, and
/// the ops between them, which have no memory effects (the constants and
/// index arithmetic of the loops' bounds and bodies).
struct WarpRun {
  SmallVector<scf::ParallelOp> loops;
  SmallVector<Operation *> between;
};

/// The thread loop after `op`, past ops without memory effects (added to
/// `between`), or null.
scf::ParallelOp nextThreadLoop(Operation *op,
                               SmallVectorImpl<Operation *> &between) {
  for (Operation *next = op->getNextNode(); next; next = next->getNextNode()) {
    if (scf::ParallelOp loop = asThreadLoop(next))
      return loop;
    if (next->getNumRegions() != 0 || !isMemoryEffectFree(next))
      return {};
    between.push_back(next);
  }
  return {};
}

SmallVector<WarpRun> warpRuns(Operation *root) {
  SmallVector<WarpRun> runs;
  DenseSet<Operation *> inRun;
  root->walk([&](scf::ParallelOp loop) {
    if (!loop->hasAttr(kThreadLoopAttr) || !loop->hasAttr(kWarpSyncAttr) ||
        inRun.contains(loop))
      return;
    WarpRun run;
    run.loops.push_back(loop);
    while (run.loops.back()->hasAttr(kWarpSyncAttr)) {
      SmallVector<Operation *> between;
      scf::ParallelOp next = nextThreadLoop(run.loops.back(), between);
      if (!next)
        break;
      run.loops.push_back(next);
      run.between.append(between);
    }
    for (scf::ParallelOp member : run.loops)
      inRun.insert(member);
    if (run.loops.size() > 1)
      runs.push_back(std::move(run));
  });
  return runs;
}

/// Whether the block running `op` takes the reversed order: in a block
/// kernel (its last argument the block), the even blocks do and the odd
/// ones keep the usual order, so that a kernel of two blocks or more meets
/// each race in both orders (a thread that reads another's write before the
/// barrier that orders them reads the old value in one of them). Null where
/// every block reverses (a thread loop outside a block kernel).
Value reversesInThisBlock(OpBuilder &b, Location loc, Operation *op) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  if (!func || !func->hasAttr(kBlockKernelAttr) || func.getNumArguments() == 0)
    return {};
  Value block = func.getArgument(func.getNumArguments() - 1);
  if (!block.getType().isIndex())
    return {};
  Value parity = arith::AndIOp::create(
      b, loc, block, arith::ConstantIndexOp::create(b, loc, 1));
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, parity,
                               arith::ConstantIndexOp::create(b, loc, 0));
}

/// `reversed` in a block that reverses (`reverses`), `usual` in the others.
Value inThisBlocksOrder(OpBuilder &b, Location loc, Value reverses,
                        Value reversed, Value usual) {
  if (!reverses)
    return reversed;
  return arith::SelectOp::create(b, loc, reverses, reversed, usual);
}

/// The run's loops, warp by warp, last warp first (first warp first in the
/// blocks that keep the usual order): for each warp, every loop over that
/// warp's 32 threads.
void runWarpByWarp(const WarpRun &run) {
  scf::ParallelOp first = run.loops.front();
  std::optional<int64_t> threads =
      getConstantIntValue(first.getUpperBound().front());
  if (!threads || *threads % kWarpThreads != 0)
    return;
  for (scf::ParallelOp loop : run.loops)
    if (getConstantIntValue(loop.getUpperBound().front()) != threads ||
        !isConstantIntValue(loop.getLowerBound().front(), 0))
      return;
  // They depend on nothing the loops compute (the loops have no results).
  for (Operation *op : run.between)
    op->moveBefore(first);
  OpBuilder b(first);
  Location loc = first.getLoc();
  auto index = [&](int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value);
  };
  const int64_t warps = *threads / kWarpThreads;
  Value lastWarp = index(warps - 1), warpThreads = index(kWarpThreads);
  scf::ForOp::create(b, loc, index(0), index(warps), index(1), ValueRange{},
                     [&](OpBuilder &nested, Location, Value i, ValueRange) {
                       OpBuilder::InsertionGuard guard(b);
                       b.setInsertionPoint(nested.getInsertionBlock(),
                                           nested.getInsertionPoint());
                       Value warp = inThisBlocksOrder(
                           b, loc, reversesInThisBlock(b, loc, first),
                           arith::SubIOp::create(b, loc, lastWarp, i), i);
                       Value begin =
                           arith::MulIOp::create(b, loc, warp, warpThreads);
                       Value end =
                           arith::AddIOp::create(b, loc, begin, warpThreads);
                       for (scf::ParallelOp loop : run.loops) {
                         auto part = cast<scf::ParallelOp>(b.clone(*loop));
                         part.getLowerBoundMutable().assign(begin);
                         part.getUpperBoundMutable().assign(end);
                       }
                       scf::YieldOp::create(b, loc);
                     });
  for (scf::ParallelOp loop : run.loops)
    loop.erase();
}

/// Thread t of [begin, end) becomes begin + end - 1 - t (in the blocks
/// that reverse).
void reverseThreads(scf::ParallelOp loop) {
  Value thread = loop.getInductionVars().front();
  OpBuilder b = OpBuilder::atBlockBegin(loop.getBody());
  Location loc = loop.getLoc();
  Value bounds = arith::AddIOp::create(b, loc, loop.getLowerBound().front(),
                                       loop.getUpperBound().front());
  Value last = arith::SubIOp::create(b, loc, bounds,
                                     arith::ConstantIndexOp::create(b, loc, 1));
  Value reversed = arith::SubIOp::create(b, loc, last, thread);
  Value ordered = inThisBlocksOrder(b, loc, reversesInThisBlock(b, loc, loop),
                                    reversed, thread);
  SmallPtrSet<Operation *, 2> keep{reversed.getDefiningOp(),
                                   ordered.getDefiningOp()};
  thread.replaceAllUsesExcept(ordered, keep);
}

struct AttnReorderThreadLoops final
    : mlir::attn::impl::AttnReorderThreadLoopsBase<AttnReorderThreadLoops> {
  void runOnOperation() override {
    for (const WarpRun &run : warpRuns(getOperation()))
      runWarpByWarp(run);
    getOperation()->walk([](scf::ParallelOp loop) {
      if (loop->hasAttr(kThreadLoopAttr))
        reverseThreads(loop);
    });
  }
};

/// NaN for a float element, -1 (every bit set) for an integer.
TypedAttr poisonValue(Type element) {
  if (auto floatType = dyn_cast<FloatType>(element))
    return FloatAttr::get(floatType,
                          APFloat::getQNaN(floatType.getFloatSemantics()));
  return IntegerAttr::get(element, -1);
}

/// Fills the block kernel buffer `alloca` (static shape) with the poison
/// value of its element, right after it.
void poison(memref::AllocaOp alloca) {
  MemRefType type = alloca.getType();
  if (!type.hasStaticShape() || type.getRank() == 0 ||
      !type.getElementType().isIntOrFloat())
    return;
  OpBuilder b(alloca->getContext());
  b.setInsertionPointAfter(alloca);
  Location loc = alloca.getLoc();
  // The whole buffer as one row of elements (an alloca is contiguous).
  SmallVector<ReassociationIndices> all(1);
  for (int64_t dim = 0; dim < type.getRank(); ++dim)
    all.front().push_back(dim);
  Value flat = type.getRank() == 1
                   ? alloca.getResult()
                   : memref::CollapseShapeOp::create(b, loc, alloca, all);
  Value value =
      arith::ConstantOp::create(b, loc, poisonValue(type.getElementType()));
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value count = arith::ConstantIndexOp::create(b, loc, type.getNumElements());
  scf::ForOp::create(b, loc, zero, count, one, ValueRange{},
                     [&](OpBuilder &nested, Location, Value i, ValueRange) {
                       memref::StoreOp::create(nested, loc, value, flat, i);
                       scf::YieldOp::create(nested, loc);
                     });
}

struct AttnPoisonKernelBuffers final
    : mlir::attn::impl::AttnPoisonKernelBuffersBase<AttnPoisonKernelBuffers> {
  void runOnOperation() override {
    SmallVector<memref::AllocaOp> buffers;
    getOperation()->walk([&](memref::AllocaOp alloca) {
      if (alloca->hasAttr(kSharedBufferAttr) ||
          alloca->hasAttr(kRegisterBufferAttr))
        buffers.push_back(alloca);
    });
    for (memref::AllocaOp alloca : buffers)
      poison(alloca);
  }
};

} // namespace
