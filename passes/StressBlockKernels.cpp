//===- StressBlockKernels.cpp - Block kernels run at their least convenient
//-===//
//
// Test aids for the CUDA kernels' bodies run on the CPU, where a block's
// threads run one after another and its buffers are stack memory that
// often holds the previous block's values. Four passes run them as a GPU
// may at its least convenient, so that a kernel that works on the CPU by
// chance fails (see their descriptions in Passes.td):
//
//  * -attn-defer-async-copies: each thread's asynchronous copies land as
//    late as their waits allow, their targets NaN until then, so that data
//    used before its wait is not there yet;
//  * -attn-defer-warpgroup-products: the results of asynchronous
//    warpgroup products appear only at the waits that complete them, and
//    are NaN where what the product reads or writes changed in flight;
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

/// Sibling thread loops over the same threads in which every loop but the
/// last waits for its warp alone, so that warps of a GPU run through them
/// independently, and
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

/// Whether two thread loops run over the same constant threads.
bool sameThreads(scf::ParallelOp x, scf::ParallelOp y) {
  auto bound = [](Value v) { return getConstantIntValue(v); };
  std::optional<int64_t> first = bound(x.getLowerBound().front());
  std::optional<int64_t> end = bound(x.getUpperBound().front());
  return first && end && first == bound(y.getLowerBound().front()) &&
         end == bound(y.getUpperBound().front());
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
      if (!next || !sameThreads(next, run.loops.front()))
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
/// warp's 32 threads. The loops run over the same whole warps (a role's,
/// or the block's).
void runWarpByWarp(const WarpRun &run) {
  scf::ParallelOp first = run.loops.front();
  std::optional<int64_t> firstThread =
      getConstantIntValue(first.getLowerBound().front());
  std::optional<int64_t> end =
      getConstantIntValue(first.getUpperBound().front());
  if (!firstThread || !end || *firstThread % kWarpThreads != 0 ||
      *end % kWarpThreads != 0)
    return;
  for (scf::ParallelOp loop : run.loops)
    if (getConstantIntValue(loop.getUpperBound().front()) != end ||
        getConstantIntValue(loop.getLowerBound().front()) != firstThread)
      return;
  // They depend on nothing the loops compute (the loops have no results).
  for (Operation *op : run.between)
    op->moveBefore(first);
  OpBuilder b(first);
  Location loc = first.getLoc();
  auto index = [&](int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value);
  };
  const int64_t warps = (*end - *firstThread) / kWarpThreads;
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
                       if (*firstThread != 0)
                         begin = arith::AddIOp::create(
                             b, loc, index(*firstThread), begin);
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

/// `buffer` (static shape, identity layout: contiguous) as one row of its
/// elements.
Value flatten(OpBuilder &b, Location loc, Value buffer) {
  auto type = cast<MemRefType>(buffer.getType());
  if (type.getRank() == 1)
    return buffer;
  ReassociationIndices all;
  for (int64_t dim = 0; dim < type.getRank(); ++dim)
    all.push_back(dim);
  return memref::CollapseShapeOp::create(b, loc, buffer,
                                         ArrayRef<ReassociationIndices>{all});
}

/// Stores `element` into every element of `buffer` (static shape, identity
/// layout).
void fill(OpBuilder &b, Location loc, Value buffer, TypedAttr element) {
  Value flat = flatten(b, loc, buffer);
  Value value = arith::ConstantOp::create(b, loc, element);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value count = arith::ConstantIndexOp::create(
      b, loc, cast<MemRefType>(buffer.getType()).getNumElements());
  scf::ForOp::create(b, loc, zero, count, one, ValueRange{},
                     [&](OpBuilder &nested, Location, Value i, ValueRange) {
                       memref::StoreOp::create(nested, loc, value, flat, i);
                       scf::YieldOp::create(nested, loc);
                     });
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
  fill(b, loc, alloca, poisonValue(type.getElementType()));
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

/// The threads below the last of the thread loops that hold `ops` (how
/// many a per-thread record of them takes), if every one is in a thread
/// loop of constant bounds.
std::optional<int64_t> threadsHolding(ArrayRef<Operation *> ops) {
  int64_t most = 0;
  for (Operation *op : ops) {
    scf::ParallelOp loop = enclosingThreadLoop(op);
    std::optional<int64_t> threads =
        loop ? getConstantIntValue(loop.getUpperBound().front()) : std::nullopt;
    if (!threads || !getConstantIntValue(loop.getLowerBound().front()))
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
    for (Value queue : {heads, tails, counts})
      fill(b, loc, queue, b.getIndexAttr(0));
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
  /// The mbarrier arrivals after the thread's copies.
  SmallVector<MbarrierArriveOp> arrivals;
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
    else if (auto arrive = dyn_cast<MbarrierArriveOp>(op);
             arrive && arrive.getAfterCopies())
      found.arrivals.push_back(arrive);
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
    for (AsyncWaitOp wait : k.waits) {
      completeAt(wait, wait.getPending());
      wait.erase();
    }
    // The arrival happens once the thread's copies have landed: they land
    // at it, the latest this thread's order allows.
    for (MbarrierArriveOp arrive : k.arrivals)
      completeAt(arrive, /*pending=*/0);
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
    poisonTarget(b, copy);
    copy.erase();
  }

  /// The copy's target holds poison until the copy lands: on the GPU it is
  /// undefined while the copy is in flight, so that a read before the wait
  /// gets NaN, and a product in flight that still reads the target (a
  /// buffer reused too early) sees it change.
  static void poisonTarget(OpBuilder &b, AsyncCopyOp copy) {
    Location loc = copy.getLoc();
    auto type = cast<MemRefType>(copy.getTarget().getType());
    Value poison =
        arith::ConstantOp::create(b, loc, poisonValue(type.getElementType()));
    SmallVector<Value> at(copy.getTargetIndices());
    Value first = at.back();
    for (int64_t i = 0, n = copy.getElements(); i < n; ++i) {
      at.back() =
          arith::AddIOp::create(b, loc, first, indexConstant(b, loc, i));
      memref::StoreOp::create(b, loc, poison, copy.getTarget(), at);
    }
  }

  /// Before `op` (a wait or an arrival after copies), closes the thread's
  /// group and completes the copies of every group but its newest
  /// `pending`.
  void completeAt(Operation *op, int64_t pending) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    Value thread = threadOf(op);
    Value groups = queues.step(b, loc, thread);
    queues.complete(
        b, loc, thread,
        arith::SubIOp::create(b, loc, groups, indexConstant(b, loc, pending)));
  }

  KernelCopies k;
  ThreadQueues queues;
};

struct AttnDeferAsyncCopies final
    : mlir::attn::impl::AttnDeferAsyncCopiesBase<AttnDeferAsyncCopies> {
  void runOnOperation() override {
    SmallVector<KernelCopies, 0> kernels;
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

/// The threads of a warpgroup, which issue each of its products together.
constexpr int64_t kWarpgroupThreads =
    WarpMmaOp::kWarpgroupWarps * WarpMmaOp::kWarpLanes;

/// What a queued product keeps besides its group (the count of the
/// thread's products before it): which product (its site), where its
/// accumulator fragment and its operands' views start in their buffers
/// (rhs; lhs, or the lane's own fragments of lhs), and the fingerprint of
/// the lane's own fragments of lhs when the product was issued.
enum ProductField : int64_t {
  kProductSite = 1,
  kAccOffset = 2,
  kRhsOffset = 3,
  kLhsOffset = 4,
  kOwnLhsPrint = 5,
  kProductFields = 6
};

/// What a warpgroup keeps of each of its products in flight, at the
/// product's number modulo kProductsInFlight: the number plus one (0:
/// none), how many of its threads have issued it, the fingerprint of its
/// shared operands at the first issue, whether they were fingerprinted
/// again, and whether they had changed then.
enum FlightField : int64_t {
  kTag,
  kIssued,
  kSharedPrint,
  kChecked,
  kChanged,
  kFlightFields
};

/// The elements of a buffer that an operand of a product is: a view with
/// static sizes and strides (its offset known at the product) of a
/// buffer of static shape (an index into KernelProducts::buffers).
struct BufferPart {
  int64_t buffer = -1;
  SmallVector<int64_t> sizes, strides;

  int64_t numElements() const {
    return std::accumulate(sizes.begin(), sizes.end(), int64_t{1},
                           std::multiplies<>());
  }
};

/// An asynchronous warpgroup product and the parts of buffers it reads
/// and writes; an operand whose part is unknown is not checked.
struct ProductSite {
  WarpMmaOp op;
  BufferPart acc;
  /// rhs, and lhs where it is a shared tile.
  std::optional<BufferPart> rhs, sharedLhs;
  /// With `lhs_fragment`, the lane's own fragments of lhs, which the lane
  /// must not write while the product is in flight: [blocks read, 4] at
  /// lhs[lane].
  std::optional<BufferPart> ownLhs;

  bool readsShared() const { return rhs || sharedLhs; }
};

/// A block kernel's warpgroup products and waits.
struct KernelProducts {
  func::FuncOp kernel;
  std::vector<ProductSite> sites;
  SmallVector<WarpMmaOp> syncProducts;
  SmallVector<WarpgroupWaitOp> waits;
  /// The buffers of the sites' parts, each once.
  SmallVector<memref::AllocaOp> buffers;
  int64_t threads = 0, mostElements = 0;
};

/// Finds the parts of buffers that products read and write: the root
/// buffer of a view must be an alloca of static shape and identity layout
/// defined before every product and wait (the completer takes it).
class BufferParts {
public:
  BufferParts(func::FuncOp kernel, ArrayRef<Operation *> users,
              SmallVectorImpl<memref::AllocaOp> &buffers)
      : dominance(kernel), users(users), buffers(buffers) {}

  /// The part `view` (through subviews) is of its buffer, if known.
  std::optional<BufferPart> of(Value view) {
    auto type = dyn_cast<MemRefType>(view.getType());
    SmallVector<int64_t> strides;
    int64_t offset;
    if (!type || !type.hasStaticShape() ||
        failed(type.getStridesAndOffset(strides, offset)) ||
        llvm::any_of(strides, ShapedType::isDynamic))
      return std::nullopt;
    Value root = view;
    while (auto subview = root.getDefiningOp<memref::SubViewOp>())
      root = subview.getSource();
    auto alloca = root.getDefiningOp<memref::AllocaOp>();
    if (!alloca || !alloca.getType().hasStaticShape() ||
        !alloca.getType().getLayout().isIdentity() ||
        !alloca.getType().getElementType().isIntOrFloat() ||
        llvm::any_of(users, [&](Operation *user) {
          return !dominance.properlyDominates(alloca.getResult(), user);
        }))
      return std::nullopt;
    auto known = llvm::find(buffers, alloca);
    if (known == buffers.end())
      buffers.push_back(alloca);
    return BufferPart{llvm::find(buffers, alloca) - buffers.begin(),
                      SmallVector<int64_t>(type.getShape()), strides};
  }

  /// The lane's own fragments of a product's lhs (`lhs_fragment`, the
  /// warp's [32, blocks, 4]): the blocks the product reads, [rowTiles k /
  /// 8, 4] at lhs[lane].
  std::optional<BufferPart> ownFragments(WarpMmaOp product) {
    std::optional<BufferPart> warp = of(product.getLhs());
    if (!warp || warp->sizes.size() != 3)
      return std::nullopt;
    int64_t blocks =
        product.getRowTiles() * product.getK() / WarpMmaOp::kFragmentColumns;
    return BufferPart{warp->buffer,
                      {blocks, warp->sizes[2]},
                      {warp->strides[1], warp->strides[2]}};
  }

private:
  DominanceInfo dominance;
  ArrayRef<Operation *> users;
  SmallVectorImpl<memref::AllocaOp> &buffers;
};

/// The kernel's warpgroup products and waits, if their results can be
/// hidden: every one in a thread loop from thread 0 on a constant count of
/// threads, each asynchronous product's accumulator a contiguous f32 part
/// of a register buffer defined before all of them. Else none.
std::optional<KernelProducts> deferrableProducts(func::FuncOp kernel) {
  KernelProducts found{kernel};
  SmallVector<WarpMmaOp> asyncProducts;
  SmallVector<Operation *> ops;
  kernel.walk([&](Operation *op) {
    auto product = dyn_cast<WarpMmaOp>(op);
    if (product && !product.getWarpgroup())
      return;
    if (!product) {
      auto wait = dyn_cast<WarpgroupWaitOp>(op);
      if (!wait)
        return;
      found.waits.push_back(wait);
    } else if (product.getAsync()) {
      asyncProducts.push_back(product);
    } else {
      found.syncProducts.push_back(product);
    }
    ops.push_back(op);
  });
  std::optional<int64_t> threads = threadsHolding(ops);
  if (!threads || asyncProducts.empty())
    return std::nullopt;
  found.threads = *threads;
  BufferParts parts(kernel, ops, found.buffers);
  for (WarpMmaOp product : asyncProducts) {
    ProductSite site{product};
    std::optional<BufferPart> acc = parts.of(product.getAcc());
    auto accType = cast<MemRefType>(product.getAcc().getType());
    if (!acc || !accType.getElementType().isF32() ||
        !memref::isStaticShapeAndContiguousRowMajor(accType))
      return std::nullopt;
    site.acc = {acc->buffer, {accType.getNumElements()}, {1}};
    site.rhs = parts.of(product.getRhs());
    if (product.getLhsFragment())
      site.ownLhs = parts.ownFragments(product);
    else
      site.sharedLhs = parts.of(product.getLhs());
    found.mostElements = std::max(found.mostElements, site.acc.numElements());
    found.sites.push_back(std::move(site));
  }
  return found;
}

Value i64Constant(OpBuilder &b, Location loc, int64_t value) {
  return arith::ConstantIntOp::create(b, loc, b.getI64Type(), value);
}

/// The FNV-1a offset basis, where a fingerprint starts.
constexpr int64_t kFingerprintStart = static_cast<int64_t>(0xcbf29ce484222325);

/// `start` extended by every element of `part` of the flat buffer `flat`
/// from `offset`, in order: an FNV-1a hash of the elements' bits (i64).
Value fingerprint(OpBuilder &b, Location loc, Value flat, Value offset,
                  const BufferPart &part, Value start) {
  Type element = cast<MemRefType>(flat.getType()).getElementType();
  unsigned width = element.getIntOrFloatBitWidth();
  Type i64 = b.getI64Type();
  std::function<Value(OpBuilder &, Location, size_t, Value, Value)> over =
      [&](OpBuilder &b, Location loc, size_t dim, Value at,
          Value hash) -> Value {
    if (dim == part.sizes.size()) {
      Value bits = memref::LoadOp::create(b, loc, flat, at);
      if (isa<FloatType>(element))
        bits = arith::BitcastOp::create(b, loc, b.getIntegerType(width), bits);
      if (width < 64)
        bits = arith::ExtUIOp::create(b, loc, i64, bits);
      return arith::MulIOp::create(b, loc,
                                   arith::XOrIOp::create(b, loc, hash, bits),
                                   i64Constant(b, loc, 0x100000001b3));
    }
    auto loop = scf::ForOp::create(
        b, loc, indexConstant(b, loc, 0),
        indexConstant(b, loc, part.sizes[dim]), indexConstant(b, loc, 1),
        ValueRange{hash},
        [&](OpBuilder &b, Location loc, Value i, ValueRange it) {
          Value next = arith::AddIOp::create(
              b, loc, at,
              arith::MulIOp::create(b, loc, i,
                                    indexConstant(b, loc, part.strides[dim])));
          scf::YieldOp::create(b, loc, over(b, loc, dim + 1, next, it[0]));
        });
    return loop.getResult(0);
  };
  return over(b, loc, 0, offset, start);
}

Value asIndex(OpBuilder &b, Location loc, Value i64) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), i64);
}

Value asI64(OpBuilder &b, Location loc, Value index) {
  return arith::IndexCastOp::create(b, loc, b.getI64Type(), index);
}

/// Hides one block kernel's asynchronous warpgroup products' results until
/// the waits that complete them, and checks that nothing touches what a
/// product in flight reads or writes (see -attn-defer-warpgroup-products).
/// After each such product (done at once on the CPU) the thread moves its
/// accumulator fragment to a slot of its shadow buffer, queued, and leaves
/// NaN in its place; each wait, and each synchronous warpgroup product
/// (which on the GPU waits for every product before it), moves back those
/// it completes, through `<kernel>__complete_products`, or leaves NaN
/// there where the product's operands or accumulator changed in flight.
class ProductDeferral {
public:
  explicit ProductDeferral(KernelProducts products)
      : k(std::move(products)),
        queues(k.kernel, k.threads, kProductsInFlight, kProductFields) {}

  void run() {
    flattenBuffers();
    allocate();
    SmallVector<Value> extra{shadow, flights};
    extra.append(flat);
    queues.build("__complete_products", extra,
                 [&](OpBuilder &b, Location loc, Value thread, Value slot,
                     function_ref<Value(int64_t)> field, ValueRange extra) {
                   Inside inside{extra[0], extra[1], extra.drop_front(2)};
                   switchOver(b, loc, field(kProductSite), k.sites.size(),
                              [&](int64_t site) {
                                complete(b, loc, k.sites[site], inside, thread,
                                         slot, field);
                              });
                 });
    for (auto [index, site] : llvm::enumerate(k.sites))
      hide(site, index);
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
  /// The completer's arguments for the shadow, the flights and the flat
  /// buffers.
  struct Inside {
    Value shadow, flights;
    ValueRange flat;
  };

  /// Each buffer as one row of its elements, right after it.
  void flattenBuffers() {
    for (memref::AllocaOp buffer : k.buffers) {
      OpBuilder b(buffer->getContext());
      b.setInsertionPointAfter(buffer);
      flat.push_back(flatten(b, buffer.getLoc(), buffer));
    }
  }

  /// The shadow slots of each thread and the flights of each warpgroup
  /// (none yet).
  void allocate() {
    OpBuilder b = OpBuilder::atBlockBegin(&k.kernel.getBody().front());
    Location loc = k.kernel.getLoc();
    shadow = memref::AllocaOp::create(
        b, loc,
        MemRefType::get({k.threads, kProductsInFlight, k.mostElements},
                        b.getF32Type()));
    int64_t warpgroups = llvm::divideCeil(k.threads, kWarpgroupThreads);
    flights = memref::AllocaOp::create(
        b, loc,
        MemRefType::get({warpgroups, kProductsInFlight, kFlightFields},
                        b.getIndexType()));
    fill(b, loc, flights, b.getIndexAttr(0));
  }

  /// Moves `count` elements between the flat buffer at `offset` and the
  /// thread's shadow slot, one way or the other (`toShadow`), leaving NaN
  /// in the buffer when hiding.
  static void move(OpBuilder &b, Location loc, Value flatBuffer, Value shadow,
                   Value thread, Value slot, Value offset, int64_t count,
                   bool toShadow) {
    Value nan = nanConstant(b, loc);
    scf::ForOp::create(
        b, loc, indexConstant(b, loc, 0), indexConstant(b, loc, count),
        indexConstant(b, loc, 1), ValueRange{},
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

  /// The NaN a hidden fragment holds (the poison of an f32 buffer).
  static Value nanConstant(OpBuilder &b, Location loc) {
    return arith::ConstantOp::create(b, loc, poisonValue(b.getF32Type()));
  }

  /// The element offset of `view` in its buffer.
  static Value offsetOf(OpBuilder &b, Location loc, Value view) {
    return memref::ExtractStridedMetadataOp::create(b, loc, view).getOffset();
  }

  /// Where the lane's own fragments of the product's lhs start.
  static Value ownLhsOffset(OpBuilder &b, Location loc, WarpMmaOp product) {
    SmallVector<int64_t> strides;
    int64_t offset;
    (void)cast<MemRefType>(product.getLhs().getType())
        .getStridesAndOffset(strides, offset);
    return arith::AddIOp::create(
        b, loc, offsetOf(b, loc, product.getLhs()),
        arith::MulIOp::create(b, loc, product.getLane(),
                              indexConstant(b, loc, strides.front())));
  }

  /// The fingerprint of the site's shared operands from their offsets.
  Value sharedPrint(OpBuilder &b, Location loc, const ProductSite &site,
                    ValueRange flatBuffers, Value rhsOffset, Value lhsOffset) {
    Value print = i64Constant(b, loc, kFingerprintStart);
    if (site.rhs)
      print = fingerprint(b, loc, flatBuffers[site.rhs->buffer], rhsOffset,
                          *site.rhs, print);
    if (site.sharedLhs)
      print = fingerprint(b, loc, flatBuffers[site.sharedLhs->buffer],
                          lhsOffset, *site.sharedLhs, print);
    return print;
  }

  /// The thread's warpgroup's record of its product number `number` in
  /// `flightsBuffer`.
  struct Flight {
    OpBuilder &b;
    Location loc;
    Value flights, warpgroup, slot;

    Value load(int64_t field) {
      return memref::LoadOp::create(b, loc, flights, at(field));
    }
    void store(int64_t field, Value value) {
      memref::StoreOp::create(b, loc, value, flights, at(field));
    }
    SmallVector<Value> at(int64_t field) {
      return {warpgroup, slot, indexConstant(b, loc, field)};
    }
  };
  static Flight flightOf(OpBuilder &b, Location loc, Value flightsBuffer,
                         Value thread, Value number) {
    return Flight{
        b, loc, flightsBuffer,
        arith::DivUIOp::create(b, loc, thread,
                               indexConstant(b, loc, kWarpgroupThreads)),
        arith::RemUIOp::create(b, loc, number,
                               indexConstant(b, loc, kProductsInFlight))};
  }

  /// The thread issues the product: the first issuer of its warpgroup
  /// fingerprints the shared operands, every issuer is counted.
  void countIssue(OpBuilder &b, Location loc, const ProductSite &site,
                  Value thread, Value number) {
    WarpMmaOp product = site.op;
    Flight flight = flightOf(b, loc, flights, thread, number);
    Value tag = arith::AddIOp::create(b, loc, number, indexConstant(b, loc, 1));
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                        flight.load(kTag), tag);
    scf::IfOp::create(b, loc, first, [&](OpBuilder &then, Location loc) {
      Flight fresh = flightOf(then, loc, flights, thread, number);
      Value zero = indexConstant(then, loc, 0);
      fresh.store(kTag, tag);
      fresh.store(kIssued, zero);
      fresh.store(kChecked, zero);
      fresh.store(kChanged, zero);
      fresh.store(kSharedPrint,
                  asIndex(then, loc,
                          sharedPrint(then, loc, site, flat,
                                      offsetOf(then, loc, product.getRhs()),
                                      offsetOf(then, loc, product.getLhs()))));
      scf::YieldOp::create(then, loc);
    });
    flight.store(kIssued, arith::AddIOp::create(b, loc, flight.load(kIssued),
                                                indexConstant(b, loc, 1)));
  }

  /// After the product: its fragment queued as the thread's newest
  /// product, NaN in its place.
  void hide(const ProductSite &site, int64_t index) {
    WarpMmaOp product = site.op;
    OpBuilder b(product->getContext());
    b.setInsertionPointAfter(product);
    Location loc = product.getLoc();
    Value thread = threadOf(product);
    Value number = queues.count(b, loc, thread);
    if (site.readsShared())
      countIssue(b, loc, site, thread, number);
    Value accOffset = offsetOf(b, loc, product.getAcc());
    queues.push(b, loc, thread, [&](Value slot) {
      auto store = [&](int64_t field, Value value) {
        queues.store(b, loc, thread, slot, field, value);
      };
      store(kProductSite, indexConstant(b, loc, index));
      store(kAccOffset, accOffset);
      if (site.rhs)
        store(kRhsOffset, offsetOf(b, loc, product.getRhs()));
      if (site.sharedLhs)
        store(kLhsOffset, offsetOf(b, loc, product.getLhs()));
      if (site.ownLhs) {
        Value at = ownLhsOffset(b, loc, product);
        store(kLhsOffset, at);
        store(kOwnLhsPrint,
              asIndex(b, loc,
                      fingerprint(b, loc, flat[site.ownLhs->buffer], at,
                                  *site.ownLhs,
                                  i64Constant(b, loc, kFingerprintStart))));
      }
      move(b, loc, flat[site.acc.buffer], shadow, thread, slot, accOffset,
           site.acc.numElements(), /*toShadow=*/true);
    });
    queues.step(b, loc, thread);
  }

  /// Whether the accumulator fragment still holds the NaN it was left
  /// with, bit for bit.
  static Value untouched(OpBuilder &b, Location loc, Value flatAcc,
                         Value offset, int64_t count) {
    Value nanBits =
        arith::BitcastOp::create(b, loc, b.getI32Type(), nanConstant(b, loc));
    Value all = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1);
    auto loop = scf::ForOp::create(
        b, loc, indexConstant(b, loc, 0), indexConstant(b, loc, count),
        indexConstant(b, loc, 1), ValueRange{all},
        [&](OpBuilder &b, Location loc, Value i, ValueRange it) {
          Value x = memref::LoadOp::create(
              b, loc, flatAcc,
              ValueRange{arith::AddIOp::create(b, loc, offset, i)});
          Value same = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::eq,
              arith::BitcastOp::create(b, loc, b.getI32Type(), x), nanBits);
          scf::YieldOp::create(
              b, loc, ValueRange{arith::AndIOp::create(b, loc, it[0], same)});
        });
    return loop.getResult(0);
  }

  /// Whether the product's shared operands changed while it was in
  /// flight: fingerprinted again at the first completion by a thread of
  /// its warpgroup after every thread issued it (on the GPU, every write
  /// between the last issue and the first completion overlaps the
  /// product), and compared with the first issue's fingerprint; later
  /// completions read the verdict. False where the record was reused.
  Value sharedChanged(OpBuilder &b, Location loc, const ProductSite &site,
                      const Inside &inside, Value thread,
                      function_ref<Value(int64_t)> field) {
    Value number = field(ThreadQueues::kGroup);
    Flight flight = flightOf(b, loc, inside.flights, thread, number);
    Value tag = arith::AddIOp::create(b, loc, number, indexConstant(b, loc, 1));
    Value tracked = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                          flight.load(kTag), tag);
    auto ifTracked = scf::IfOp::create(
        b, loc, tracked,
        [&](OpBuilder &then, Location loc) {
          Flight f = flightOf(then, loc, inside.flights, thread, number);
          auto eq = [&](Value x, int64_t y) {
            return arith::CmpIOp::create(then, loc, arith::CmpIPredicate::eq, x,
                                         indexConstant(then, loc, y))
                .getResult();
          };
          Value checkNow = arith::AndIOp::create(
              then, loc, eq(f.load(kIssued), kWarpgroupThreads),
              eq(f.load(kChecked), 0));
          scf::IfOp::create(
              then, loc, checkNow, [&](OpBuilder &now, Location loc) {
                Flight g = flightOf(now, loc, inside.flights, thread, number);
                Value print =
                    asIndex(now, loc,
                            sharedPrint(now, loc, site, inside.flat,
                                        field(kRhsOffset), field(kLhsOffset)));
                Value changed =
                    arith::CmpIOp::create(now, loc, arith::CmpIPredicate::ne,
                                          print, g.load(kSharedPrint));
                g.store(kChecked, indexConstant(now, loc, 1));
                g.store(kChanged, arith::IndexCastUIOp::create(
                                      now, loc, now.getIndexType(), changed));
                scf::YieldOp::create(now, loc);
              });
          Value changed = arith::CmpIOp::create(
              then, loc, arith::CmpIPredicate::ne,
              flightOf(then, loc, inside.flights, thread, number)
                  .load(kChanged),
              indexConstant(then, loc, 0));
          scf::YieldOp::create(then, loc, changed);
        },
        [&](OpBuilder &otherwise, Location loc) {
          scf::YieldOp::create(otherwise, loc,
                               ValueRange{arith::ConstantIntOp::create(
                                   otherwise, loc, otherwise.getI1Type(), 0)});
        });
    return ifTracked.getResult(0);
  }

  /// Completes one queued product: moves its fragment back where nothing
  /// it reads or writes changed while it was in flight, else leaves NaN.
  void complete(OpBuilder &b, Location loc, const ProductSite &site,
                const Inside &inside, Value thread, Value slot,
                function_ref<Value(int64_t)> field) {
    Value flatAcc = inside.flat[site.acc.buffer];
    Value accOffset = field(kAccOffset);
    int64_t count = site.acc.numElements();
    Value intact = untouched(b, loc, flatAcc, accOffset, count);
    if (site.ownLhs) {
      Value print = fingerprint(b, loc, inside.flat[site.ownLhs->buffer],
                                field(kLhsOffset), *site.ownLhs,
                                i64Constant(b, loc, kFingerprintStart));
      intact = arith::AndIOp::create(
          b, loc, intact,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, print,
                                asI64(b, loc, field(kOwnLhsPrint))));
    }
    if (site.readsShared())
      intact = arith::AndIOp::create(
          b, loc, intact,
          arith::XOrIOp::create(
              b, loc, sharedChanged(b, loc, site, inside, thread, field),
              arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1)));
    scf::IfOp::create(
        b, loc, intact,
        [&](OpBuilder &then, Location loc) {
          move(then, loc, flatAcc, inside.shadow, thread, slot, accOffset,
               count, /*toShadow=*/false);
          scf::YieldOp::create(then, loc);
        },
        [&](OpBuilder &otherwise, Location loc) {
          Value nan = nanConstant(otherwise, loc);
          scf::ForOp::create(
              otherwise, loc, indexConstant(otherwise, loc, 0),
              indexConstant(otherwise, loc, count),
              indexConstant(otherwise, loc, 1), ValueRange{},
              [&](OpBuilder &b, Location loc, Value i, ValueRange) {
                memref::StoreOp::create(
                    b, loc, nan, flatAcc,
                    ValueRange{arith::AddIOp::create(b, loc, accOffset, i)});
                scf::YieldOp::create(b, loc);
              });
          scf::YieldOp::create(otherwise, loc);
        });
  }

  KernelProducts k;
  ThreadQueues queues;
  SmallVector<Value> flat;
  Value shadow, flights;
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
