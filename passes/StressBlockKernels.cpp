//===- StressBlockKernels.cpp - Block kernels run at their least convenient
//-===//
//
// Test aids for the CUDA kernels' bodies run on the CPU, where a block's
// threads run one after another and its buffers are stack memory that
// often holds the previous block's values. Two passes run them as a GPU
// may at its least convenient, so that a kernel that works on the CPU by
// chance fails (see their descriptions in Passes.td):
//
//  * -attn-defer-async-copies: each thread's asynchronous copies land as
//    late as their waits allow, so that data used before its wait is not
//    there yet;
//  * -attn-defer-warpgroup-products: the results of asynchronous
//    warpgroup products appear only at the waits that complete them;
//  * -attn-reorder-thread-loops: the threads in another order (in even
//    blocks; odd blocks first to last), so that a race reads something
//    else;
//  * -attn-poison-kernel-buffers: shared and register buffers start as NaN
//    (or -1), so that an element read before any write gives NaN.
//
//===----------------------------------------------------------------------===//

#include "AttnKernel/AttnKernelOps.h"
#include "passes/Passes.h"
#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Utils/MemRefUtils.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/Dominance.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <limits>
#include <numeric>

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNDEFERASYNCCOPIES
#define GEN_PASS_DEF_ATTNDEFERWARPGROUPPRODUCTS
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

/// A thread's copies in flight, at most this many; one more completes its
/// oldest first (a copy may always complete early).
constexpr int64_t kCopiesInFlight = 64;

/// What a queued copy keeps: which copy (its site, an index into the
/// kernel's copies), whether it is valid, its group (the count of the
/// thread's waits before it), then its source and target indices.
enum CopyField : int64_t { kSite = 0, kValid = 1, kGroup = 2, kIndices = 3 };

scf::ParallelOp enclosingThreadLoop(Operation *op) {
  for (Operation *parent = op->getParentOp(); parent;
       parent = parent->getParentOp())
    if (scf::ParallelOp loop = asThreadLoop(parent))
      return loop;
  return {};
}

/// A block kernel's asynchronous copies and waits, and what deferring them
/// takes.
struct KernelCopies {
  func::FuncOp kernel;
  SmallVector<AsyncCopyOp> copies;
  SmallVector<AsyncWaitOp> waits;
  /// Every source and target buffer, each once, in order of first use.
  SmallVector<Value> buffers;
  /// The most threads of the thread loops that hold them; the fields of a
  /// queued copy.
  int64_t threads = 0, fields = kIndices;
};

/// The kernel's copies and waits, if they can be deferred: every one in a
/// thread loop from thread 0 on a constant count of threads, and every
/// buffer they copy between defined before all of them (so that a copy can
/// be done where a later wait completes it). Else none.
std::optional<KernelCopies> deferrableCopies(func::FuncOp kernel) {
  KernelCopies found{kernel};
  bool deferrable = true;
  kernel.walk([&](Operation *op) {
    if (!isa<AsyncCopyOp, AsyncWaitOp>(op))
      return;
    scf::ParallelOp loop = enclosingThreadLoop(op);
    std::optional<int64_t> threads =
        loop ? getConstantIntValue(loop.getUpperBound().front()) : std::nullopt;
    if (!threads || !isConstantIntValue(loop.getLowerBound().front(), 0)) {
      deferrable = false;
      return;
    }
    found.threads = std::max(found.threads, *threads);
    if (auto copy = dyn_cast<AsyncCopyOp>(op))
      found.copies.push_back(copy);
    else
      found.waits.push_back(cast<AsyncWaitOp>(op));
  });
  if (!deferrable || found.copies.empty())
    return std::nullopt;
  llvm::SetVector<Value> buffers;
  for (AsyncCopyOp copy : found.copies) {
    buffers.insert(copy.getSource());
    buffers.insert(copy.getTarget());
    found.fields = std::max<int64_t>(found.fields,
                                     kIndices + copy.getSourceIndices().size() +
                                         copy.getTargetIndices().size());
  }
  DominanceInfo dominance(kernel);
  auto beforeAll = [&](Value buffer, auto ops) {
    return llvm::all_of(ops, [&](Operation *op) {
      return dominance.properlyDominates(buffer, op);
    });
  };
  for (Value buffer : buffers)
    if (!beforeAll(buffer, found.copies) || !beforeAll(buffer, found.waits))
      return std::nullopt;
  found.buffers = buffers.takeVector();
  return found;
}

/// Defers one block kernel's copies: each thread queues its copies in
/// `records` (its slots [heads[t], tails[t]) modulo kCopiesInFlight) and
/// its waits complete those the wait does not leave pending, through a
/// function of the kernel's (`<kernel>__complete_copies`), which does a
/// queued copy as the op at its site, with the recorded indices.
class CopyDeferral {
public:
  explicit CopyDeferral(KernelCopies copies) : k(std::move(copies)) {}

  void run() {
    buildCompleter();
    allocateQueues();
    for (auto [site, copy] : llvm::enumerate(k.copies))
      queue(copy, site);
    for (AsyncWaitOp wait : k.waits)
      complete(wait);
  }

private:
  Value index(OpBuilder &b, Location loc, int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value);
  }
  MemRefType recordsType() {
    return MemRefType::get({k.threads, kCopiesInFlight, k.fields},
                           IndexType::get(k.kernel.getContext()));
  }
  MemRefType countsType() {
    return MemRefType::get({k.threads}, IndexType::get(k.kernel.getContext()));
  }

  /// @<kernel>__complete_copies(thread, bound, most, records, heads, tails,
  /// buffers...): completes the thread's oldest queued copies, at most
  /// `most`, while their group is below `bound`.
  void buildCompleter() {
    OpBuilder b(k.kernel);
    Location loc = k.kernel.getLoc();
    Type indexType = b.getIndexType();
    SmallVector<Type> inputs{indexType,     indexType,    indexType,
                             recordsType(), countsType(), countsType()};
    for (Value buffer : k.buffers)
      inputs.push_back(buffer.getType());
    completer = func::FuncOp::create(
        b, loc, (k.kernel.getSymName() + "__complete_copies").str(),
        b.getFunctionType(inputs, {}));
    completer.setPrivate();
    Block *entry = completer.addEntryBlock();
    b.setInsertionPointToStart(entry);
    Value thread = entry->getArgument(0), bound = entry->getArgument(1),
          most = entry->getArgument(2), records = entry->getArgument(3),
          heads = entry->getArgument(4), tails = entry->getArgument(5);
    IRMapping inside;
    for (auto [i, buffer] : llvm::enumerate(k.buffers))
      inside.map(buffer, entry->getArgument(6 + i));
    Value capacity = index(b, loc, kCopiesInFlight);
    auto field = [&](OpBuilder &b, Value slot, int64_t f) {
      return memref::LoadOp::create(b, loc, records,
                                    ValueRange{thread, slot, index(b, loc, f)})
          .getResult();
    };
    scf::WhileOp::create(
        b, loc, TypeRange{indexType}, ValueRange{index(b, loc, 0)},
        [&](OpBuilder &b, Location loc, ValueRange args) {
          Value head = memref::LoadOp::create(b, loc, heads, thread);
          Value tail = memref::LoadOp::create(b, loc, tails, thread);
          Value slot = arith::RemUIOp::create(b, loc, head, capacity);
          auto less = [&](Value x, Value y) {
            return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x,
                                         y)
                .getResult();
          };
          Value more = arith::AndIOp::create(b, loc, less(args[0], most),
                                             less(head, tail));
          Value due = less(field(b, slot, kGroup), bound);
          scf::ConditionOp::create(
              b, loc, arith::AndIOp::create(b, loc, more, due), args);
        },
        [&](OpBuilder &b, Location loc, ValueRange args) {
          Value head = memref::LoadOp::create(b, loc, heads, thread);
          Value slot = arith::RemUIOp::create(b, loc, head, capacity);
          SmallVector<int64_t> sites(k.copies.size());
          std::iota(sites.begin(), sites.end(), 0);
          auto sw = scf::IndexSwitchOp::create(
              b, loc, TypeRange{}, field(b, slot, kSite), sites, sites.size());
          for (auto [site, copy] : llvm::enumerate(k.copies)) {
            OpBuilder::InsertionGuard guard(b);
            b.createBlock(&sw.getCaseRegions()[site]);
            doCopy(b, copy, inside,
                   [&](int64_t f) { return field(b, slot, f); });
            scf::YieldOp::create(b, loc);
          }
          {
            OpBuilder::InsertionGuard guard(b);
            b.createBlock(&sw.getDefaultRegion());
            scf::YieldOp::create(b, loc);
          }
          memref::StoreOp::create(
              b, loc, arith::AddIOp::create(b, loc, head, index(b, loc, 1)),
              heads, thread);
          scf::YieldOp::create(b, loc,
                               ValueRange{arith::AddIOp::create(
                                   b, loc, args[0], index(b, loc, 1))});
        });
    func::ReturnOp::create(b, loc);
  }

  /// The copy at once (a plain copy once -attn-async-copy-to-loops runs),
  /// its validity and indices the queued record's fields.
  void doCopy(OpBuilder &b, AsyncCopyOp copy, const IRMapping &inside,
              function_ref<Value(int64_t)> field) {
    Location loc = copy.getLoc();
    int64_t f = kIndices;
    SmallVector<Value> sourceIndices, targetIndices;
    for (size_t i = 0; i < copy.getSourceIndices().size(); ++i)
      sourceIndices.push_back(field(f++));
    for (size_t i = 0; i < copy.getTargetIndices().size(); ++i)
      targetIndices.push_back(field(f++));
    Value valid = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                        field(kValid), index(b, loc, 0));
    AsyncCopyOp::create(b, loc, inside.lookup(copy.getSource()), sourceIndices,
                        inside.lookup(copy.getTarget()), targetIndices, valid,
                        copy.getElementsAttr());
  }

  /// The queues, empty, at the kernel's start.
  void allocateQueues() {
    OpBuilder b = OpBuilder::atBlockBegin(&k.kernel.getBody().front());
    Location loc = k.kernel.getLoc();
    records = memref::AllocaOp::create(b, loc, recordsType());
    heads = memref::AllocaOp::create(b, loc, countsType());
    tails = memref::AllocaOp::create(b, loc, countsType());
    groups = memref::AllocaOp::create(b, loc, countsType());
    Value zero = index(b, loc, 0);
    scf::ForOp::create(b, loc, zero, index(b, loc, k.threads), index(b, loc, 1),
                       ValueRange{},
                       [&](OpBuilder &b, Location loc, Value t, ValueRange) {
                         for (Value counts : {heads, tails, groups})
                           memref::StoreOp::create(b, loc, zero, counts, t);
                         scf::YieldOp::create(b, loc);
                       });
  }

  void callCompleter(OpBuilder &b, Location loc, Value thread, Value bound,
                     Value most) {
    SmallVector<Value> operands{thread, bound, most, records, heads, tails};
    operands.append(k.buffers);
    func::CallOp::create(b, loc, completer, operands);
  }

  /// The copy queued in its thread's next slot, the oldest completed
  /// first if the queue is full.
  void queue(AsyncCopyOp copy, int64_t site) {
    OpBuilder b(copy);
    Location loc = copy.getLoc();
    Value thread = enclosingThreadLoop(copy).getInductionVars().front();
    Value capacity = index(b, loc, kCopiesInFlight);
    Value head = memref::LoadOp::create(b, loc, heads, thread);
    Value tail = memref::LoadOp::create(b, loc, tails, thread);
    Value full = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::sge,
        arith::SubIOp::create(b, loc, tail, head), capacity);
    scf::IfOp::create(b, loc, full, [&](OpBuilder &then, Location loc) {
      callCompleter(then, loc, thread,
                    index(then, loc, std::numeric_limits<int64_t>::max()),
                    index(then, loc, 1));
      scf::YieldOp::create(then, loc);
    });
    Value slot = arith::RemUIOp::create(b, loc, tail, capacity);
    auto store = [&](Value value, int64_t f) {
      memref::StoreOp::create(b, loc, value, records,
                              ValueRange{thread, slot, index(b, loc, f)});
    };
    store(index(b, loc, site), kSite);
    store(
        arith::IndexCastUIOp::create(b, loc, b.getIndexType(), copy.getValid()),
        kValid);
    store(memref::LoadOp::create(b, loc, groups, thread), kGroup);
    int64_t f = kIndices;
    for (Value i : copy.getSourceIndices())
      store(i, f++);
    for (Value i : copy.getTargetIndices())
      store(i, f++);
    memref::StoreOp::create(
        b, loc, arith::AddIOp::create(b, loc, tail, index(b, loc, 1)), tails,
        thread);
    copy.erase();
  }

  /// The wait closes the thread's group and completes the copies of every
  /// group but its newest `pending`.
  void complete(AsyncWaitOp wait) {
    OpBuilder b(wait);
    Location loc = wait.getLoc();
    Value thread = enclosingThreadLoop(wait).getInductionVars().front();
    Value group = arith::AddIOp::create(
        b, loc, memref::LoadOp::create(b, loc, groups, thread),
        index(b, loc, 1));
    memref::StoreOp::create(b, loc, group, groups, thread);
    Value bound =
        arith::SubIOp::create(b, loc, group, index(b, loc, wait.getPending()));
    callCompleter(b, loc, thread, bound, index(b, loc, kCopiesInFlight));
    wait.erase();
  }

  KernelCopies k;
  func::FuncOp completer;
  Value records, heads, tails, groups;
};

struct AttnDeferAsyncCopies final
    : mlir::attn::impl::AttnDeferAsyncCopiesBase<AttnDeferAsyncCopies> {
  void runOnOperation() override {
    SmallVector<KernelCopies> kernels;
    getOperation()->walk([&](func::FuncOp kernel) {
      if (kernel->hasAttr(kBlockKernelAttr))
        if (std::optional<KernelCopies> copies = deferrableCopies(kernel))
          kernels.push_back(std::move(*copies));
    });
    for (KernelCopies &copies : kernels)
      CopyDeferral(std::move(copies)).run();
  }
};

/// A thread's warpgroup products in flight, at most this many; one more
/// completes its oldest first.
constexpr int64_t kProductsInFlight = 8;

/// What a queued product keeps: which accumulator buffer (an index into
/// the kernel's), where its fragment starts in it, how many elements it
/// has, and its group (the count of the thread's products before it).
enum ProductField : int64_t {
  kRoot = 0,
  kOffset = 1,
  kElements = 2,
  kProductGroup = 3,
  kProductFields = 4
};

/// The register buffer whose contiguous part a product's accumulator
/// fragment is (through views), or null.
memref::AllocaOp accumulatorBuffer(WarpMmaOp product) {
  auto type = cast<MemRefType>(product.getAcc().getType());
  if (!memref::isStaticShapeAndContiguousRowMajor(type) ||
      !type.getElementType().isF32())
    return {};
  Value acc = product.getAcc();
  while (auto view = acc.getDefiningOp<memref::SubViewOp>())
    acc = view.getSource();
  auto buffer = acc.getDefiningOp<memref::AllocaOp>();
  return buffer && buffer.getType().hasStaticShape() &&
                 buffer.getType().getLayout().isIdentity()
             ? buffer
             : memref::AllocaOp();
}

/// A block kernel's warpgroup products and waits, and what hiding the
/// asynchronous products' results until their waits takes.
struct KernelProducts {
  func::FuncOp kernel;
  SmallVector<WarpMmaOp> asyncProducts, syncProducts;
  SmallVector<WarpgroupWaitOp> waits;
  /// The asynchronous products' accumulator buffers, each once.
  SmallVector<memref::AllocaOp> buffers;
  int64_t threads = 0, mostElements = 0;
};

/// The kernel's warpgroup products and waits, if their results can be
/// hidden: every one in a thread loop from thread 0 on a constant count of
/// threads, each asynchronous product's accumulator a contiguous part of a
/// register buffer. Else none.
std::optional<KernelProducts> deferrableProducts(func::FuncOp kernel) {
  KernelProducts found{kernel};
  bool deferrable = true;
  kernel.walk([&](Operation *op) {
    auto product = dyn_cast<WarpMmaOp>(op);
    if (!(product && product.getWarpgroup()) && !isa<WarpgroupWaitOp>(op))
      return;
    scf::ParallelOp loop = enclosingThreadLoop(op);
    std::optional<int64_t> threads =
        loop ? getConstantIntValue(loop.getUpperBound().front()) : std::nullopt;
    if (!threads || !isConstantIntValue(loop.getLowerBound().front(), 0)) {
      deferrable = false;
      return;
    }
    found.threads = std::max(found.threads, *threads);
    if (!product) {
      found.waits.push_back(cast<WarpgroupWaitOp>(op));
    } else if (!product.getAsync()) {
      found.syncProducts.push_back(product);
    } else if (memref::AllocaOp buffer = accumulatorBuffer(product)) {
      found.asyncProducts.push_back(product);
      if (!llvm::is_contained(found.buffers, buffer))
        found.buffers.push_back(buffer);
      found.mostElements = std::max(
          found.mostElements,
          cast<MemRefType>(product.getAcc().getType()).getNumElements());
    } else {
      deferrable = false;
    }
  });
  if (!deferrable || found.asyncProducts.empty())
    return std::nullopt;
  return found;
}

/// Hides one block kernel's asynchronous warpgroup products' results until
/// the waits that complete them: after each such product (done at once on
/// the CPU) the thread moves its accumulator fragment to a slot of its
/// queue and leaves NaN in its place; each wait, and each synchronous
/// warpgroup product (which waits for all before it on the GPU), moves
/// back those it completes, through a function of the kernel's
/// (`<kernel>__complete_products`).
class ProductDeferral {
public:
  explicit ProductDeferral(KernelProducts products) : k(std::move(products)) {}

  void run() {
    flattenBuffers();
    buildCompleter();
    allocateQueues();
    for (WarpMmaOp product : k.asyncProducts)
      hide(product);
    for (WarpgroupWaitOp wait : k.waits) {
      OpBuilder b(wait);
      Value thread = enclosingThreadLoop(wait).getInductionVars().front();
      Value issued =
          memref::LoadOp::create(b, wait.getLoc(), issuedCounts, thread);
      callCompleter(
          b, wait.getLoc(), thread,
          arith::SubIOp::create(b, wait.getLoc(), issued,
                                index(b, wait.getLoc(), wait.getPending())));
    }
    for (WarpMmaOp product : k.syncProducts) {
      OpBuilder b(product);
      callCompleter(
          b, product.getLoc(),
          enclosingThreadLoop(product).getInductionVars().front(),
          index(b, product.getLoc(), std::numeric_limits<int64_t>::max()));
    }
  }

private:
  Value index(OpBuilder &b, Location loc, int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value);
  }
  MLIRContext *context() { return k.kernel.getContext(); }
  MemRefType recordsType() {
    return MemRefType::get({k.threads, kProductsInFlight, kProductFields},
                           IndexType::get(context()));
  }
  MemRefType shadowType() {
    return MemRefType::get({k.threads, kProductsInFlight, k.mostElements},
                           Float32Type::get(context()));
  }
  MemRefType countsType() {
    return MemRefType::get({k.threads}, IndexType::get(context()));
  }

  /// Each accumulator buffer as one row of its elements, right after it.
  void flattenBuffers() {
    for (memref::AllocaOp buffer : k.buffers) {
      OpBuilder b(context());
      b.setInsertionPointAfter(buffer);
      ReassociationIndices all;
      for (int64_t dim = 0; dim < buffer.getType().getRank(); ++dim)
        all.push_back(dim);
      flat.push_back(buffer.getType().getRank() == 1
                         ? buffer.getResult()
                         : memref::CollapseShapeOp::create(
                               b, buffer.getLoc(), buffer,
                               ArrayRef<ReassociationIndices>{all})
                               .getResult());
    }
  }

  /// Copies `count` elements between the flat buffer at `offset` and the
  /// thread's shadow slot, from one to the other (`toShadow`), leaving NaN
  /// in the buffer when hiding.
  void move(OpBuilder &b, Location loc, Value flatBuffer, Value shadow,
            Value thread, Value slot, Value offset, Value count,
            bool toShadow) {
    Value nan = arith::ConstantOp::create(
        b, loc,
        FloatAttr::get(b.getF32Type(),
                       APFloat::getQNaN(APFloat::IEEEsingle())));
    scf::ForOp::create(
        b, loc, index(b, loc, 0), count, index(b, loc, 1), ValueRange{},
        [&](OpBuilder &b, Location loc, Value i, ValueRange) {
          Value at = arith::AddIOp::create(b, loc, offset, i);
          SmallVector<Value> inShadow{thread, slot, i};
          if (toShadow) {
            Value x = memref::LoadOp::create(b, loc, flatBuffer, at);
            memref::StoreOp::create(b, loc, x, shadow, inShadow);
            memref::StoreOp::create(b, loc, nan, flatBuffer, at);
          } else {
            Value x = memref::LoadOp::create(b, loc, shadow, inShadow);
            memref::StoreOp::create(b, loc, x, flatBuffer, at);
          }
          scf::YieldOp::create(b, loc);
        });
  }

  /// @<kernel>__complete_products(thread, bound, records, shadow, heads,
  /// tails, buffers...): moves back the thread's oldest hidden fragments
  /// while their group is below `bound`.
  void buildCompleter() {
    OpBuilder b(k.kernel);
    Location loc = k.kernel.getLoc();
    Type indexType = b.getIndexType();
    SmallVector<Type> inputs{indexType,    indexType,    recordsType(),
                             shadowType(), countsType(), countsType()};
    for (Value buffer : flat)
      inputs.push_back(buffer.getType());
    completer = func::FuncOp::create(
        b, loc, (k.kernel.getSymName() + "__complete_products").str(),
        b.getFunctionType(inputs, {}));
    completer.setPrivate();
    Block *entry = completer.addEntryBlock();
    b.setInsertionPointToStart(entry);
    Value thread = entry->getArgument(0), bound = entry->getArgument(1),
          records = entry->getArgument(2), shadow = entry->getArgument(3),
          heads = entry->getArgument(4), tails = entry->getArgument(5);
    Value capacity = index(b, loc, kProductsInFlight);
    auto field = [&](OpBuilder &b, Value slot, int64_t f) {
      return memref::LoadOp::create(b, loc, records,
                                    ValueRange{thread, slot, index(b, loc, f)})
          .getResult();
    };
    scf::WhileOp::create(
        b, loc, TypeRange{}, ValueRange{},
        [&](OpBuilder &b, Location loc, ValueRange) {
          Value head = memref::LoadOp::create(b, loc, heads, thread);
          Value tail = memref::LoadOp::create(b, loc, tails, thread);
          Value slot = arith::RemUIOp::create(b, loc, head, capacity);
          auto less = [&](Value x, Value y) {
            return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x,
                                         y)
                .getResult();
          };
          Value due =
              arith::AndIOp::create(b, loc, less(head, tail),
                                    less(field(b, slot, kProductGroup), bound));
          scf::ConditionOp::create(b, loc, due, ValueRange{});
        },
        [&](OpBuilder &b, Location loc, ValueRange) {
          Value head = memref::LoadOp::create(b, loc, heads, thread);
          Value slot = arith::RemUIOp::create(b, loc, head, capacity);
          SmallVector<int64_t> roots(flat.size());
          std::iota(roots.begin(), roots.end(), 0);
          auto sw = scf::IndexSwitchOp::create(
              b, loc, TypeRange{}, field(b, slot, kRoot), roots, roots.size());
          for (int64_t root : roots) {
            OpBuilder::InsertionGuard guard(b);
            b.createBlock(&sw.getCaseRegions()[root]);
            move(b, loc, entry->getArgument(6 + root), shadow, thread, slot,
                 field(b, slot, kOffset), field(b, slot, kElements),
                 /*toShadow=*/false);
            scf::YieldOp::create(b, loc);
          }
          {
            OpBuilder::InsertionGuard guard(b);
            b.createBlock(&sw.getDefaultRegion());
            scf::YieldOp::create(b, loc);
          }
          memref::StoreOp::create(
              b, loc, arith::AddIOp::create(b, loc, head, index(b, loc, 1)),
              heads, thread);
          scf::YieldOp::create(b, loc);
        });
    func::ReturnOp::create(b, loc);
  }

  /// The queues, empty, at the kernel's start.
  void allocateQueues() {
    OpBuilder b = OpBuilder::atBlockBegin(&k.kernel.getBody().front());
    Location loc = k.kernel.getLoc();
    records = memref::AllocaOp::create(b, loc, recordsType());
    shadow = memref::AllocaOp::create(b, loc, shadowType());
    heads = memref::AllocaOp::create(b, loc, countsType());
    tails = memref::AllocaOp::create(b, loc, countsType());
    issuedCounts = memref::AllocaOp::create(b, loc, countsType());
    Value zero = index(b, loc, 0);
    scf::ForOp::create(b, loc, zero, index(b, loc, k.threads), index(b, loc, 1),
                       ValueRange{},
                       [&](OpBuilder &b, Location loc, Value t, ValueRange) {
                         for (Value counts : {heads, tails, issuedCounts})
                           memref::StoreOp::create(b, loc, zero, counts, t);
                         scf::YieldOp::create(b, loc);
                       });
  }

  void callCompleter(OpBuilder &b, Location loc, Value thread, Value bound) {
    SmallVector<Value> operands{thread, bound, records, shadow, heads, tails};
    operands.append(flat);
    func::CallOp::create(b, loc, completer, operands);
  }

  /// After the product: its fragment queued in the thread's next slot
  /// (the oldest moved back first if the queue is full), NaN in its place.
  void hide(WarpMmaOp product) {
    OpBuilder b(context());
    b.setInsertionPointAfter(product);
    Location loc = product.getLoc();
    Value thread = enclosingThreadLoop(product).getInductionVars().front();
    Value capacity = index(b, loc, kProductsInFlight);
    Value head = memref::LoadOp::create(b, loc, heads, thread);
    Value tail = memref::LoadOp::create(b, loc, tails, thread);
    Value issued = memref::LoadOp::create(b, loc, issuedCounts, thread);
    Value full = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::sge,
        arith::SubIOp::create(b, loc, tail, head), capacity);
    scf::IfOp::create(b, loc, full, [&](OpBuilder &then, Location loc) {
      // The oldest product's group and the ones before it.
      Value oldest = memref::LoadOp::create(
          then, loc, records,
          ValueRange{thread, arith::RemUIOp::create(then, loc, head, capacity),
                     index(then, loc, kProductGroup)});
      callCompleter(
          then, loc, thread,
          arith::AddIOp::create(then, loc, oldest, index(then, loc, 1)));
      scf::YieldOp::create(then, loc);
    });
    Value slot = arith::RemUIOp::create(b, loc, tail, capacity);
    auto root = std::distance(
        k.buffers.begin(), llvm::find(k.buffers, accumulatorBuffer(product)));
    const int64_t elements =
        cast<MemRefType>(product.getAcc().getType()).getNumElements();
    Value offset =
        memref::ExtractStridedMetadataOp::create(b, loc, product.getAcc())
            .getOffset();
    auto store = [&](Value value, int64_t f) {
      memref::StoreOp::create(b, loc, value, records,
                              ValueRange{thread, slot, index(b, loc, f)});
    };
    store(index(b, loc, root), kRoot);
    store(offset, kOffset);
    store(index(b, loc, elements), kElements);
    store(issued, kProductGroup);
    move(b, loc, flat[root], shadow, thread, slot, offset,
         index(b, loc, elements), /*toShadow=*/true);
    memref::StoreOp::create(
        b, loc, arith::AddIOp::create(b, loc, issued, index(b, loc, 1)),
        issuedCounts, thread);
    memref::StoreOp::create(
        b, loc, arith::AddIOp::create(b, loc, tail, index(b, loc, 1)), tails,
        thread);
  }

  KernelProducts k;
  SmallVector<Value> flat;
  func::FuncOp completer;
  Value records, shadow, heads, tails, issuedCounts;
};

struct AttnDeferWarpgroupProducts final
    : mlir::attn::impl::AttnDeferWarpgroupProductsBase<
          AttnDeferWarpgroupProducts> {
  void runOnOperation() override {
    std::vector<KernelProducts> kernels;
    getOperation()->walk([&](func::FuncOp kernel) {
      if (kernel->hasAttr(kBlockKernelAttr))
        if (std::optional<KernelProducts> products = deferrableProducts(kernel))
          kernels.push_back(std::move(*products));
    });
    for (KernelProducts &products : kernels)
      ProductDeferral(std::move(products)).run();
  }
};

} // namespace
