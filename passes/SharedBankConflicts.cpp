//===- SharedBankConflicts.cpp - Bank conflicts of the block kernels ------===//
//
// -attn-report-bank-conflicts (Passes.td): how many shared-memory
// wavefronts each warp's access takes in the CUDA block kernels, found by
// evaluating every thread's address on the kernels' IR, with no GPU. A
// bank conflict costs time, never a wrong answer, so no test of results
// can see one; this pass lets a lit test see them.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/kernels/cuda/SimtKernels.h"

#include "AttnKernel/AttnKernelOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNREPORTBANKCONFLICTS
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

constexpr int64_t kWarpThreads = 32;

/// The integer and index values of a thread loop's body as one thread of
/// the block computes them on the body's first pass: the loop's index is
/// the thread, a loop inside it is at its first iteration.
class ThreadValues {
public:
  ThreadValues(scf::ParallelOp loop, int64_t thread)
      : loop(loop), thread(thread) {}

  /// `v` for the thread, or nothing where it depends on what the thread
  /// loads or on an op this does not evaluate. With `uniformAsZero`, values
  /// from outside the thread loop that are no constants are 0 (the same
  /// for every thread, so that an address offset by one moves every
  /// thread's alike and changes no conflict); without, they are unknown.
  std::optional<int64_t> get(Value v, bool uniformAsZero) {
    auto key = std::make_pair(v, unsigned(uniformAsZero));
    if (auto it = known.find(key); it != known.end())
      return it->second;
    std::optional<int64_t> value = compute(v, uniformAsZero);
    known[key] = value;
    return value;
  }

private:
  std::optional<int64_t> compute(Value v, bool uniformAsZero);
  std::optional<int64_t> computeOp(Operation *op, bool uniformAsZero);

  bool insideLoop(Value v) {
    return loop->isAncestor(v.getParentRegion()->getParentOp());
  }

  scf::ParallelOp loop;
  int64_t thread;
  DenseMap<std::pair<Value, unsigned>, std::optional<int64_t>> known;
};

std::optional<int64_t> ThreadValues::compute(Value v, bool uniformAsZero) {
  if (v == loop.getInductionVars().front())
    return thread;
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto forOp = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp());
    if (forOp && arg == forOp.getInductionVar() && insideLoop(v))
      return get(forOp.getLowerBound(), uniformAsZero);
  } else if (std::optional<int64_t> value =
                 computeOp(v.getDefiningOp(), uniformAsZero)) {
    return value;
  }
  if (!insideLoop(v) && uniformAsZero && v.getType().isIntOrIndex())
    return 0;
  return std::nullopt;
}

std::optional<int64_t> ThreadValues::computeOp(Operation *op,
                                               bool uniformAsZero) {
  auto operand = [&](unsigned i) {
    return get(op->getOperand(i), uniformAsZero);
  };
  auto binary = [&](function_ref<std::optional<int64_t>(int64_t, int64_t)> f)
      -> std::optional<int64_t> {
    std::optional<int64_t> lhs = operand(0), rhs = operand(1);
    if (!lhs || !rhs)
      return std::nullopt;
    return f(*lhs, *rhs);
  };
  auto dividing = [&](function_ref<int64_t(int64_t, int64_t)> f) {
    return binary([&](int64_t a, int64_t b) -> std::optional<int64_t> {
      if (b == 0)
        return std::nullopt;
      return f(a, b);
    });
  };
  auto same = [&]() { return operand(0); };
  return TypeSwitch<Operation *, std::optional<int64_t>>(op)
      .Case([](arith::ConstantOp constant) -> std::optional<int64_t> {
        if (auto integer = dyn_cast<IntegerAttr>(constant.getValue()))
          return integer.getValue().getSExtValue();
        return std::nullopt;
      })
      .Case([&](arith::AddIOp) { return binary(std::plus<int64_t>()); })
      .Case([&](arith::SubIOp) { return binary(std::minus<int64_t>()); })
      .Case([&](arith::MulIOp) { return binary(std::multiplies<int64_t>()); })
      .Case([&](arith::AndIOp) { return binary(std::bit_and<int64_t>()); })
      .Case([&](arith::OrIOp) { return binary(std::bit_or<int64_t>()); })
      .Case([&](arith::XOrIOp) { return binary(std::bit_xor<int64_t>()); })
      .Case([&](arith::ShLIOp) {
        return binary([](int64_t a, int64_t b) -> std::optional<int64_t> {
          return b >= 0 && b < 63 ? std::optional(a << b) : std::nullopt;
        });
      })
      .Case<arith::ShRUIOp, arith::ShRSIOp>([&](auto) {
        return binary([](int64_t a, int64_t b) -> std::optional<int64_t> {
          return b >= 0 && b < 63 ? std::optional(a >> b) : std::nullopt;
        });
      })
      .Case<arith::DivUIOp, arith::DivSIOp>(
          [&](auto) { return dividing(std::divides<int64_t>()); })
      .Case<arith::RemUIOp, arith::RemSIOp>(
          [&](auto) { return dividing(std::modulus<int64_t>()); })
      .Case<arith::CeilDivUIOp, arith::CeilDivSIOp>([&](auto) {
        return dividing([](int64_t a, int64_t b) { return (a + b - 1) / b; });
      })
      .Case<arith::MinSIOp, arith::MinUIOp>([&](auto) {
        return binary([](int64_t a, int64_t b) { return std::min(a, b); });
      })
      .Case<arith::MaxSIOp, arith::MaxUIOp>([&](auto) {
        return binary([](int64_t a, int64_t b) { return std::max(a, b); });
      })
      .Case<arith::IndexCastOp, arith::IndexCastUIOp, arith::ExtUIOp,
            arith::ExtSIOp, arith::TruncIOp>([&](auto) { return same(); })
      .Case([&](arith::CmpIOp cmp) {
        return binary([&](int64_t a, int64_t b) -> std::optional<int64_t> {
          switch (cmp.getPredicate()) {
          case arith::CmpIPredicate::eq:
            return a == b;
          case arith::CmpIPredicate::ne:
            return a != b;
          case arith::CmpIPredicate::slt:
          case arith::CmpIPredicate::ult:
            return a < b;
          case arith::CmpIPredicate::sle:
          case arith::CmpIPredicate::ule:
            return a <= b;
          case arith::CmpIPredicate::sgt:
          case arith::CmpIPredicate::ugt:
            return a > b;
          case arith::CmpIPredicate::sge:
          case arith::CmpIPredicate::uge:
            return a >= b;
          }
          return std::nullopt;
        });
      })
      .Case([&](arith::SelectOp select) -> std::optional<int64_t> {
        std::optional<int64_t> condition = operand(0);
        if (!condition)
          return std::nullopt;
        return operand(*condition ? 1 : 2);
      })
      .Default([](Operation *) { return std::nullopt; });
}

/// An access of a thread to a shared buffer: where (indices into `memref`)
/// and how many bytes.
struct SharedAccess {
  Operation *op;
  Value memref;
  SmallVector<Value> indices;
  int64_t bytes;
  bool store;
};

/// The bytes of an element (an index as on the GPU, 8), 0 for a type of
/// no fixed size.
int64_t bytesOf(Type element) {
  if (element.isIndex())
    return 8;
  return element.isIntOrFloat() ? element.getIntOrFloatBitWidth() / 8 : 0;
}

std::optional<SharedAccess> sharedAccessOf(Operation *op) {
  auto elementBytes = [](Value memref) {
    return bytesOf(cast<MemRefType>(memref.getType()).getElementType());
  };
  auto vectorBytes = [](VectorType type) {
    return type.getNumElements() * bytesOf(type.getElementType());
  };
  return TypeSwitch<Operation *, std::optional<SharedAccess>>(op)
      .Case([&](memref::LoadOp load) {
        return SharedAccess{op, load.getMemRef(), load.getIndices(),
                            elementBytes(load.getMemRef()), false};
      })
      .Case([&](memref::StoreOp store) {
        return SharedAccess{op, store.getMemRef(), store.getIndices(),
                            elementBytes(store.getMemRef()), true};
      })
      .Case([&](vector::LoadOp load) {
        return SharedAccess{op, load.getBase(), load.getIndices(),
                            vectorBytes(load.getVectorType()), false};
      })
      .Case([&](vector::StoreOp store) {
        return SharedAccess{op, store.getBase(), store.getIndices(),
                            vectorBytes(store.getVectorType()), true};
      })
      .Case([&](AsyncCopyOp copy) {
        return SharedAccess{
            op, copy.getTarget(), copy.getTargetIndices(),
            int64_t(copy.getElements()) * elementBytes(copy.getTarget()), true};
      })
      .Default([](Operation *) { return std::nullopt; });
}

/// The shared buffer (`memref.alloca {attn.shared}`, of a static shape as
/// every block kernel's) that `memref` is or is a view of, or null.
memref::AllocaOp sharedBufferOf(Value memref) {
  while (auto view = memref.getDefiningOp<memref::SubViewOp>())
    memref = view.getSource();
  auto alloca = memref.getDefiningOp<memref::AllocaOp>();
  return alloca && alloca->hasAttr(kSharedBufferAttr) &&
                 alloca.getType().hasStaticShape()
             ? alloca
             : memref::AllocaOp();
}

/// The element offset in its shared buffer of element `indices` of
/// `memref` (the buffer or a subview of it), for the thread of `values`.
std::optional<int64_t> elementOffset(Value memref, ArrayRef<int64_t> indices,
                                     ThreadValues &values) {
  if (auto view = memref.getDefiningOp<memref::SubViewOp>()) {
    llvm::SmallBitVector dropped = view.getDroppedDims();
    SmallVector<int64_t> sourceIndices;
    auto mixed = [&](OpFoldResult r) -> std::optional<int64_t> {
      if (auto attr = dyn_cast<Attribute>(r))
        return cast<IntegerAttr>(attr).getInt();
      return values.get(cast<Value>(r), /*uniformAsZero=*/true);
    };
    unsigned next = 0;
    for (auto [d, offset, stride] :
         llvm::enumerate(view.getMixedOffsets(), view.getMixedStrides())) {
      std::optional<int64_t> start = mixed(offset), step = mixed(stride);
      if (!start || !step)
        return std::nullopt;
      int64_t index = dropped.test(d) ? 0 : indices[next++];
      sourceIndices.push_back(*start + index * *step);
    }
    return elementOffset(view.getSource(), sourceIndices, values);
  }
  auto type = cast<MemRefType>(memref.getType());
  int64_t offset = 0;
  for (auto [index, size] : llvm::zip(indices, type.getShape()))
    offset = offset * size + index;
  return offset;
}

/// Whether the thread of `values` runs `op` in its thread loop `loop` on
/// the loop's first pass, as far as the conditions and bounds it can
/// evaluate say (those it cannot are taken to let it).
bool threadRuns(Operation *op, scf::ParallelOp loop, ThreadValues &values) {
  for (Operation *child = op, *parent = op->getParentOp(); parent != loop;
       child = parent, parent = parent->getParentOp()) {
    if (auto ifOp = dyn_cast<scf::IfOp>(parent)) {
      std::optional<int64_t> condition =
          values.get(ifOp.getCondition(), /*uniformAsZero=*/false);
      bool inThen = ifOp.getThenRegion().isAncestor(child->getParentRegion());
      if (condition && (*condition != 0) != inThen)
        return false;
    } else if (auto forOp = dyn_cast<scf::ForOp>(parent)) {
      std::optional<int64_t> lower =
          values.get(forOp.getLowerBound(), /*uniformAsZero=*/false);
      std::optional<int64_t> upper =
          values.get(forOp.getUpperBound(), /*uniformAsZero=*/false);
      if (lower && upper && *lower >= *upper)
        return false;
    }
  }
  return true;
}

/// The iterations of the loops around `op` in its thread loop `loop`, as
/// thread 0 runs them (1 for a loop whose bounds it cannot evaluate).
int64_t tripsAround(Operation *op, scf::ParallelOp loop) {
  ThreadValues values(loop, 0);
  int64_t trips = 1;
  for (Operation *parent = op->getParentOp(); parent != loop;
       parent = parent->getParentOp()) {
    auto forOp = dyn_cast<scf::ForOp>(parent);
    if (!forOp)
      continue;
    std::optional<int64_t> lower = values.get(forOp.getLowerBound(), false),
                           upper = values.get(forOp.getUpperBound(), false),
                           step = values.get(forOp.getStep(), false);
    if (lower && upper && step && *step > 0 && *upper > *lower)
      trips *= llvm::divideCeil(*upper - *lower, *step);
  }
  return trips;
}

/// One thread's address for an access: its byte in the buffer, or nothing
/// when it does not run the access.
struct ThreadAddress {
  bool runs = false;
  bool known = false;
  int64_t byte = 0;
};

struct AttnReportBankConflicts final
    : mlir::attn::impl::AttnReportBankConflictsBase<AttnReportBankConflicts> {
  using Base::Base;

  void runOnOperation() override {
    getOperation()->walk([&](func::FuncOp kernel) {
      if (kernel->hasAttr(kBlockKernelAttr))
        report(kernel);
    });
  }

  struct Counts {
    int64_t evaluated = 0, conflicted = 0, unknown = 0;
    double worst = 1;
    /// Wavefronts taken and the fewest, each access's times the trips of
    /// the loops around it in its thread loop.
    int64_t taken = 0, fewest = 0;
  };

  void report(func::FuncOp kernel) {
    Counts counts;
    kernel.walk([&](scf::ParallelOp loop) {
      if (loop->hasAttr(kThreadLoopAttr))
        reportLoop(loop, counts);
    });
    const double overall =
        counts.fewest ? double(counts.taken) / counts.fewest : 1.0;
    InFlightDiagnostic remark = kernel.emitRemark();
    remark << kernel.getSymName() << ": " << counts.conflicted << " of "
           << counts.evaluated << " shared accesses take more wavefronts than "
           << "they need";
    if (counts.conflicted)
      remark << " (the worst " << llvm::formatv("{0:f1}", counts.worst) << "x)";
    remark << ", " << counts.unknown << " not evaluated; "
           << llvm::formatv("{0:f2}", overall)
           << "x the fewest wavefronts in all, weighted by trips";
  }

  void reportLoop(scf::ParallelOp loop, Counts &counts) {
    std::optional<int64_t> threads =
        getConstantIntValue(loop.getUpperBound().front());
    if (!threads)
      return;
    SmallVector<SharedAccess> accesses;
    loop.getBody()->walk([&](Operation *op) {
      if (std::optional<SharedAccess> access = sharedAccessOf(op))
        if (access->bytes > 0 && sharedBufferOf(access->memref))
          accesses.push_back(std::move(*access));
    });
    if (accesses.empty())
      return;
    // addresses[access][thread]
    std::vector<std::vector<ThreadAddress>> addresses(
        accesses.size(), std::vector<ThreadAddress>(*threads));
    for (int64_t thread = 0; thread < *threads; ++thread) {
      ThreadValues values(loop, thread);
      for (auto [access, perThread] : llvm::zip(accesses, addresses)) {
        ThreadAddress &address = perThread[thread];
        address.runs = threadRuns(access.op, loop, values);
        SmallVector<int64_t> indices;
        for (Value index : access.indices)
          if (std::optional<int64_t> i =
                  values.get(index, /*uniformAsZero=*/true))
            indices.push_back(*i);
        if (indices.size() != access.indices.size())
          continue;
        std::optional<int64_t> element =
            elementOffset(access.memref, indices, values);
        // An element outside the buffer is one the thread does not access
        // (a bound that is a value from outside the thread loop, taken as
        // 0, lets too many threads in).
        const int64_t elements =
            sharedBufferOf(access.memref).getType().getNumElements();
        if (element && (*element < 0 || *element >= elements))
          address.runs = false;
        else if (element) {
          address.known = true;
          address.byte =
              *element *
              bytesOf(
                  cast<MemRefType>(access.memref.getType()).getElementType());
        }
      }
    }
    for (auto [access, perThread] : llvm::zip(accesses, addresses)) {
      if (llvm::any_of(perThread, [](const ThreadAddress &a) {
            return a.runs && !a.known;
          })) {
        ++counts.unknown;
        continue;
      }
      int64_t taken = 0, fewest = 0;
      for (size_t warp = 0; warp < perThread.size(); warp += kWarpThreads) {
        SmallVector<std::optional<int64_t>> lanes;
        for (const ThreadAddress &lane : ArrayRef(perThread).slice(
                 warp, std::min<size_t>(kWarpThreads, perThread.size() - warp)))
          lanes.push_back(lane.runs ? std::optional(lane.byte) : std::nullopt);
        auto [warpTaken, warpFewest] = sharedWavefronts(lanes, access.bytes);
        taken += warpTaken;
        fewest += warpFewest;
      }
      if (fewest == 0)
        continue;
      ++counts.evaluated;
      const int64_t trips = tripsAround(access.op, loop);
      counts.taken += trips * taken;
      counts.fewest += trips * fewest;
      const bool conflicted = taken > fewest;
      if (conflicted) {
        ++counts.conflicted;
        counts.worst = std::max(counts.worst, double(taken) / fewest);
      }
      if (conflicted || all)
        access.op->emitRemark()
            << "shared " << (access.store ? "store" : "load") << " of "
            << access.bytes << " bytes a thread into "
            << sharedBufferOf(access.memref).getType() << ": " << taken
            << " wavefronts in the block's warps, " << fewest
            << " at the least, " << trips << " times a thread loop";
    }
  }
};

} // namespace
