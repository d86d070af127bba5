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

scf::ParallelOp enclosingThreadLoop(Operation *op) {
  for (Operation *parent = op->getParentOp(); parent;
       parent = parent->getParentOp())
    if (scf::ParallelOp loop = asThreadLoop(parent))
      return loop;
  return {};
}

/// The thread of the thread loop that holds `op`.
Value threadOf(Operation *op) {
  return enclosingThreadLoop(op).getInductionVars().front();
}

/// The most threads of the thread loops that hold `ops`, if every one is
/// in a thread loop from thread 0 on a constant count of threads.
std::optional<int64_t> threadsHolding(ArrayRef<Operation *> ops) {
  int64_t most = 0;
  for (Operation *op : ops) {
    scf::ParallelOp loop = enclosingThreadLoop(op);
    std::optional<int64_t> threads =
        loop ? getConstantIntValue(loop.getUpperBound().front()) : std::nullopt;
    if (!threads || !isConstantIntValue(loop.getLowerBound().front(), 0))
      return std::nullopt;
    most = std::max(most, *threads);
  }
  return most;
}

Value indexConstant(OpBuilder &b, Location loc, int64_t value) {
  return arith::ConstantIndexOp::create(b, loc, value);
}

/// A queue per thread of a block kernel's work done late (copies that
/// land, products whose results appear), first in first out: `records`
/// [threads, capacity, fields] of index, each thread's entries in its
/// slots [heads[t], tails[t]) modulo the capacity, and a count per thread
/// (`counts`: the groups it closed, or the products it issued) that
/// numbers the groups. Field 0 of an entry is its group. A function of
/// the kernel's (the completer) does the thread's oldest entries while
/// their group is below a bound; it takes the queue and the buffers the
/// work touches (`extra`), which must be defined before every use.
class ThreadQueues {
public:
  static constexpr int64_t kGroup = 0;

  /// Does one entry: its fields, the completer's extra arguments.
  using CompleteEntry =
      function_ref<void(OpBuilder &, Location, Value thread, Value slot,
                        function_ref<Value(int64_t)> field, ValueRange extra)>;

  ThreadQueues(func::FuncOp kernel, int64_t threads, int64_t capacity,
               int64_t fields)
      : kernel(kernel), threads(threads), capacity(capacity), fields(fields) {}

  /// The queues, empty, and the completer `<kernel><suffix>(thread, bound,
  /// most, records, heads, tails, extra...)`, which does at most `most`
  /// entries.
  void build(StringRef suffix, ValueRange extraBuffers,
             CompleteEntry completeEntry) {
    extra.assign(extraBuffers.begin(), extraBuffers.end());
    allocate();
    buildCompleter(suffix, completeEntry);
  }

  /// Does the thread's entries of every group below `bound`.
  void complete(OpBuilder &b, Location loc, Value thread, Value bound) {
    callCompleter(b, loc, thread, bound, indexConstant(b, loc, capacity));
  }

  /// A new entry's slot in the thread's queue (its oldest entry done first
  /// when the queue is full, which both kinds of work allow), its group
  /// the thread's count; `fill` stores its other fields.
  void push(OpBuilder &b, Location loc, Value thread,
            function_ref<void(Value slot)> fill) {
    Value head = memref::LoadOp::create(b, loc, heads, thread);
    Value tail = memref::LoadOp::create(b, loc, tails, thread);
    Value full =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                              arith::SubIOp::create(b, loc, tail, head),
                              indexConstant(b, loc, capacity));
    scf::IfOp::create(b, loc, full, [&](OpBuilder &then, Location loc) {
      callCompleter(
          then, loc, thread,
          indexConstant(then, loc, std::numeric_limits<int64_t>::max()),
          indexConstant(then, loc, 1));
      scf::YieldOp::create(then, loc);
    });
    Value slot =
        arith::RemUIOp::create(b, loc, tail, indexConstant(b, loc, capacity));
    store(b, loc, thread, slot, kGroup, count(b, loc, thread));
    fill(slot);
    memref::StoreOp::create(
        b, loc, arith::AddIOp::create(b, loc, tail, indexConstant(b, loc, 1)),
        tails, thread);
  }

  void store(OpBuilder &b, Location loc, Value thread, Value slot,
             int64_t field, Value value) {
    memref::StoreOp::create(
        b, loc, value, records,
        ValueRange{thread, slot, indexConstant(b, loc, field)});
  }

  Value count(OpBuilder &b, Location loc, Value thread) {
    return memref::LoadOp::create(b, loc, counts, thread);
  }
  /// Adds 1 to the thread's count and returns the new count.
  Value step(OpBuilder &b, Location loc, Value thread) {
    Value next = arith::AddIOp::create(b, loc, count(b, loc, thread),
                                       indexConstant(b, loc, 1));
    memref::StoreOp::create(b, loc, next, counts, thread);
    return next;
  }

private:
  MemRefType countsType() {
    return MemRefType::get({threads}, IndexType::get(kernel.getContext()));
  }

  void allocate() {
    OpBuilder b = OpBuilder::atBlockBegin(&kernel.getBody().front());
    Location loc = kernel.getLoc();
    records = memref::AllocaOp::create(
        b, loc, MemRefType::get({threads, capacity, fields}, b.getIndexType()));
    heads = memref::AllocaOp::create(b, loc, countsType());
    tails = memref::AllocaOp::create(b, loc, countsType());
    counts = memref::AllocaOp::create(b, loc, countsType());
    Value zero = indexConstant(b, loc, 0);
    scf::ForOp::create(b, loc, zero, indexConstant(b, loc, threads),
                       indexConstant(b, loc, 1), ValueRange{},
                       [&](OpBuilder &b, Location loc, Value t, ValueRange) {
                         for (Value queue : {heads, tails, counts})
                           memref::StoreOp::create(b, loc, zero, queue, t);
                         scf::YieldOp::create(b, loc);
                       });
  }

  void buildCompleter(StringRef suffix, CompleteEntry completeEntry) {
    OpBuilder b(kernel);
    Location loc = kernel.getLoc();
    Type indexType = b.getIndexType();
    SmallVector<Type> inputs{indexType,       indexType,
                             indexType,       records.getType(),
                             heads.getType(), tails.getType()};
    for (Value buffer : extra)
      inputs.push_back(buffer.getType());
    completer =
        func::FuncOp::create(b, loc, (kernel.getSymName() + suffix).str(),
                             b.getFunctionType(inputs, {}));
    completer.setPrivate();
    Block *entry = completer.addEntryBlock();
    b.setInsertionPointToStart(entry);
    Value thread = entry->getArgument(0), bound = entry->getArgument(1),
          most = entry->getArgument(2), records = entry->getArgument(3),
          heads = entry->getArgument(4), tails = entry->getArgument(5);
    ValueRange extraInside = entry->getArguments().drop_front(6);
    auto slotOf = [&](OpBuilder &b, Location loc, Value head) {
      return arith::RemUIOp::create(b, loc, head,
                                    indexConstant(b, loc, capacity))
          .getResult();
    };
    auto fieldOf = [&](OpBuilder &b, Location loc, Value slot) {
      return [&b, loc, thread, slot, records](int64_t f) {
        return memref::LoadOp::create(
                   b, loc, records,
                   ValueRange{thread, slot, indexConstant(b, loc, f)})
            .getResult();
      };
    };
    scf::WhileOp::create(
        b, loc, TypeRange{indexType}, ValueRange{indexConstant(b, loc, 0)},
        [&](OpBuilder &b, Location loc, ValueRange done) {
          Value head = memref::LoadOp::create(b, loc, heads, thread);
          Value tail = memref::LoadOp::create(b, loc, tails, thread);
          auto less = [&](Value x, Value y) {
            return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x,
                                         y)
                .getResult();
          };
          Value group = fieldOf(b, loc, slotOf(b, loc, head))(kGroup);
          Value more = arith::AndIOp::create(b, loc, less(done[0], most),
                                             less(head, tail));
          scf::ConditionOp::create(
              b, loc, arith::AndIOp::create(b, loc, more, less(group, bound)),
              done);
        },
        [&](OpBuilder &b, Location loc, ValueRange done) {
          Value head = memref::LoadOp::create(b, loc, heads, thread);
          Value slot = slotOf(b, loc, head);
          completeEntry(b, loc, thread, slot, fieldOf(b, loc, slot),
                        extraInside);
          memref::StoreOp::create(
              b, loc,
              arith::AddIOp::create(b, loc, head, indexConstant(b, loc, 1)),
              heads, thread);
          scf::YieldOp::create(b, loc,
                               ValueRange{arith::AddIOp::create(
                                   b, loc, done[0], indexConstant(b, loc, 1))});
        });
    func::ReturnOp::create(b, loc);
  }

  void callCompleter(OpBuilder &b, Location loc, Value thread, Value bound,
                     Value most) {
    SmallVector<Value> operands{thread, bound, most, records, heads, tails};
    operands.append(extra);
    func::CallOp::create(b, loc, completer, operands);
  }

  func::FuncOp kernel;
  int64_t threads, capacity, fields;
  SmallVector<Value> extra;
  func::FuncOp completer;
  Value records, heads, tails, counts;
};

/// `cases` regions of an scf.index_switch on `selector`, case i built by
/// `buildCase(i)`, the default doing nothing.
void switchOver(OpBuilder &b, Location loc, Value selector, int64_t cases,
                function_ref<void(int64_t)> buildCase) {
  SmallVector<int64_t> values(cases);
  std::iota(values.begin(), values.end(), 0);
  auto sw =
      scf::IndexSwitchOp::create(b, loc, TypeRange{}, selector, values, cases);
  for (int64_t i = 0; i <= cases; ++i) {
    OpBuilder::InsertionGuard guard(b);
    b.createBlock(i < cases ? &sw.getCaseRegions()[i] : &sw.getDefaultRegion());
    if (i < cases)
      buildCase(i);
    scf::YieldOp::create(b, loc);
  }
}

//===-- -attn-defer-async-copies -----------------------------------------===//

/// A thread's copies in flight, at most this many; one more completes its
/// oldest first (a copy may always complete early).
constexpr int64_t kCopiesInFlight = 64;

/// What a queued copy keeps besides its group (the count of the thread's
/// waits before it): which copy (its site, an index into the kernel's
/// copies), whether it is valid, then its source and target indices.
enum CopyField : int64_t { kSite = 1, kValid = 2, kIndices = 3 };

/// A block kernel's asynchronous copies and waits.
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
  SmallVector<Operation *> ops;
  kernel.walk([&](Operation *op) {
    if (auto copy = dyn_cast<AsyncCopyOp>(op))
      found.copies.push_back(copy);
    else if (auto wait = dyn_cast<AsyncWaitOp>(op))
      found.waits.push_back(wait);
    else
      return;
    ops.push_back(op);
  });
  std::optional<int64_t> threads = threadsHolding(ops);
  if (!threads || found.copies.empty())
    return std::nullopt;
  found.threads = *threads;
  llvm::SetVector<Value> buffers;
  for (AsyncCopyOp copy : found.copies) {
    buffers.insert(copy.getSource());
    buffers.insert(copy.getTarget());
    found.fields = std::max<int64_t>(found.fields,
                                     kIndices + copy.getSourceIndices().size() +
                                         copy.getTargetIndices().size());
  }
  DominanceInfo dominance(kernel);
  for (Value buffer : buffers)
    for (Operation *op : ops)
      if (!dominance.properlyDominates(buffer, op))
        return std::nullopt;
  found.buffers = buffers.takeVector();
  return found;
}

/// Defers one block kernel's copies: each thread queues its copies and
/// its waits complete those the wait does not leave pending, through
/// `<kernel>__complete_copies`, which does a queued copy as the op at its
/// site, with the recorded validity and indices.
class CopyDeferral {
public:
  explicit CopyDeferral(KernelCopies copies)
      : k(std::move(copies)),
        queues(k.kernel, k.threads, kCopiesInFlight, k.fields) {}

  void run() {
    queues.build("__complete_copies", k.buffers,
                 [&](OpBuilder &b, Location loc, Value, Value,
                     function_ref<Value(int64_t)> field, ValueRange buffers) {
                   switchOver(b, loc, field(kSite), k.copies.size(),
                              [&](int64_t site) {
                                doCopy(b, k.copies[site], buffers, field);
                              });
                 });
    for (auto [site, copy] : llvm::enumerate(k.copies))
      queue(copy, site);
    for (AsyncWaitOp wait : k.waits)
      complete(wait);
  }

private:
  /// The copy at once (a plain copy once -attn-async-copy-to-loops runs),
  /// its validity and indices the queued record's fields, its buffers the
  /// completer's arguments.
  void doCopy(OpBuilder &b, AsyncCopyOp copy, ValueRange buffers,
              function_ref<Value(int64_t)> field) {
    Location loc = copy.getLoc();
    auto inside = [&](Value buffer) {
      return buffers[llvm::find(k.buffers, buffer) - k.buffers.begin()];
    };
    int64_t f = kIndices;
    SmallVector<Value> sourceIndices, targetIndices;
    for (size_t i = 0; i < copy.getSourceIndices().size(); ++i)
      sourceIndices.push_back(field(f++));
    for (size_t i = 0; i < copy.getTargetIndices().size(); ++i)
      targetIndices.push_back(field(f++));
    Value valid =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, field(kValid),
                              indexConstant(b, loc, 0));
    AsyncCopyOp::create(b, loc, inside(copy.getSource()), sourceIndices,
                        inside(copy.getTarget()), targetIndices, valid,
                        copy.getElementsAttr());
  }

  void queue(AsyncCopyOp copy, int64_t site) {
    OpBuilder b(copy);
    Location loc = copy.getLoc();
    Value thread = threadOf(copy);
    queues.push(b, loc, thread, [&](Value slot) {
      auto store = [&](int64_t f, Value value) {
        queues.store(b, loc, thread, slot, f, value);
      };
      store(kSite, indexConstant(b, loc, site));
      store(kValid, arith::IndexCastUIOp::create(b, loc, b.getIndexType(),
                                                 copy.getValid()));
      int64_t f = kIndices;
      for (Value i : copy.getSourceIndices())
        store(f++, i);
      for (Value i : copy.getTargetIndices())
        store(f++, i);
    });
    copy.erase();
  }

  /// The wait closes the thread's group and completes the copies of every
  /// group but its newest `pending`.
  void complete(AsyncWaitOp wait) {
    OpBuilder b(wait);
    Location loc = wait.getLoc();
    Value thread = threadOf(wait);
    Value groups = queues.step(b, loc, thread);
    queues.complete(
        b, loc, thread,
        arith::SubIOp::create(b, loc, groups,
                              indexConstant(b, loc, wait.getPending())));
    wait.erase();
  }

  KernelCopies k;
  ThreadQueues queues;
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

//===-- -attn-defer-warpgroup-products -----------------------------------===//

/// A thread's warpgroup products in flight, at most this many; one more
/// completes its oldest first.
constexpr int64_t kProductsInFlight = 8;

/// What a queued product keeps besides its group (the count of the
/// thread's products before it): which accumulator buffer (an index into
/// the kernel's), where its fragment starts in it and how many elements it
/// has.
enum ProductField : int64_t {
  kBuffer = 1,
  kOffset = 2,
  kElements = 3,
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

int64_t fragmentElements(WarpMmaOp product) {
  return cast<MemRefType>(product.getAcc().getType()).getNumElements();
}

/// A block kernel's warpgroup products and waits.
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
  SmallVector<Operation *> ops;
  bool deferrable = true;
  kernel.walk([&](Operation *op) {
    auto product = dyn_cast<WarpMmaOp>(op);
    if (product && !product.getWarpgroup())
      return;
    if (!product) {
      auto wait = dyn_cast<WarpgroupWaitOp>(op);
      if (!wait)
        return;
      found.waits.push_back(wait);
    } else if (!product.getAsync()) {
      found.syncProducts.push_back(product);
    } else if (memref::AllocaOp buffer = accumulatorBuffer(product)) {
      found.asyncProducts.push_back(product);
      if (!llvm::is_contained(found.buffers, buffer))
        found.buffers.push_back(buffer);
      found.mostElements =
          std::max(found.mostElements, fragmentElements(product));
    } else {
      deferrable = false;
    }
    ops.push_back(op);
  });
  std::optional<int64_t> threads = threadsHolding(ops);
  if (!deferrable || !threads || found.asyncProducts.empty())
    return std::nullopt;
  found.threads = *threads;
  return found;
}

/// Hides one block kernel's asynchronous warpgroup products' results until
/// the waits that complete them: after each such product (done at once on
/// the CPU) the thread moves its accumulator fragment to a slot of its
/// shadow buffer, queued, and leaves NaN in its place; each wait, and each
/// synchronous warpgroup product (which on the GPU waits for every product
/// before it), moves back those it completes, through
/// `<kernel>__complete_products`.
class ProductDeferral {
public:
  explicit ProductDeferral(KernelProducts products)
      : k(std::move(products)),
        queues(k.kernel, k.threads, kProductsInFlight, kProductFields) {}

  void run() {
    flattenBuffers();
    OpBuilder b = OpBuilder::atBlockBegin(&k.kernel.getBody().front());
    shadow = memref::AllocaOp::create(
        b, k.kernel.getLoc(),
        MemRefType::get({k.threads, kProductsInFlight, k.mostElements},
                        b.getF32Type()));
    SmallVector<Value> extra{shadow};
    extra.append(flat);
    queues.build("__complete_products", extra,
                 [&](OpBuilder &b, Location loc, Value thread, Value slot,
                     function_ref<Value(int64_t)> field, ValueRange extra) {
                   Value offset = field(kOffset), count = field(kElements);
                   switchOver(b, loc, field(kBuffer), flat.size(),
                              [&](int64_t buffer) {
                                move(b, loc, extra[1 + buffer], extra[0],
                                     thread, slot, offset, count,
                                     /*toShadow=*/false);
                              });
                 });
    for (WarpMmaOp product : k.asyncProducts)
      hide(product);
    for (WarpgroupWaitOp wait : k.waits) {
      OpBuilder b(wait);
      Location loc = wait.getLoc();
      Value thread = threadOf(wait);
      queues.complete(
          b, loc, thread,
          arith::SubIOp::create(b, loc, queues.count(b, loc, thread),
                                indexConstant(b, loc, wait.getPending())));
    }
    for (WarpMmaOp product : k.syncProducts) {
      OpBuilder b(product);
      queues.complete(b, product.getLoc(), threadOf(product),
                      indexConstant(b, product.getLoc(),
                                    std::numeric_limits<int64_t>::max()));
    }
  }

private:
  /// Each accumulator buffer as one row of its elements, right after it.
  void flattenBuffers() {
    for (memref::AllocaOp buffer : k.buffers) {
      OpBuilder b(buffer->getContext());
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

  /// Moves `count` elements between the flat buffer at `offset` and the
  /// thread's shadow slot, one way or the other (`toShadow`), leaving NaN
  /// in the buffer when hiding.
  static void move(OpBuilder &b, Location loc, Value flatBuffer, Value shadow,
                   Value thread, Value slot, Value offset, Value count,
                   bool toShadow) {
    Value nan = arith::ConstantOp::create(
        b, loc,
        FloatAttr::get(b.getF32Type(),
                       APFloat::getQNaN(APFloat::IEEEsingle())));
    scf::ForOp::create(
        b, loc, indexConstant(b, loc, 0), count, indexConstant(b, loc, 1),
        ValueRange{}, [&](OpBuilder &b, Location loc, Value i, ValueRange) {
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

  /// After the product: its fragment queued as the thread's newest
  /// product, NaN in its place.
  void hide(WarpMmaOp product) {
    OpBuilder b(product->getContext());
    b.setInsertionPointAfter(product);
    Location loc = product.getLoc();
    Value thread = threadOf(product);
    int64_t buffer =
        llvm::find(k.buffers, accumulatorBuffer(product)) - k.buffers.begin();
    Value count = indexConstant(b, loc, fragmentElements(product));
    Value offset =
        memref::ExtractStridedMetadataOp::create(b, loc, product.getAcc())
            .getOffset();
    queues.push(b, loc, thread, [&](Value slot) {
      queues.store(b, loc, thread, slot, kBuffer,
                   indexConstant(b, loc, buffer));
      queues.store(b, loc, thread, slot, kOffset, offset);
      queues.store(b, loc, thread, slot, kElements, count);
      move(b, loc, flat[buffer], shadow, thread, slot, offset, count,
           /*toShadow=*/true);
    });
    queues.step(b, loc, thread);
  }

  KernelProducts k;
  ThreadQueues queues;
  SmallVector<Value> flat;
  Value shadow;
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
