//===- AsyncCopy.cpp - Lowerings of attn_kernel.async_copy ------------===//
//
// attn_kernel.async_copy is one thread's copy of 4, 8 or 16 bytes into a shared
// buffer that may complete as late as the thread's next attn_kernel.async_wait
// (see the op). Block kernels stage their tiles with it so that a thread
// has all its copies of a tile in flight at once, instead of one load and
// its store at a time. The mbarrier ops let threads wait for the copies
// and writes of others without stopping the block. Two lowerings (which
// also lower attn_kernel.device_fence: dropped on the CPU, membar.gl on
// the GPU):
//
//  * a copy done at once (-attn-async-copy-to-loops): the CPU runs a
//    block's threads one after another, so there is nothing to overlap;
//    an mbarrier's word holds its emulated state, and a wait for a phase
//    that is not complete stops the program with a message;
//  * cp.async (-attn-async-copy-to-nvvm): global memory to shared memory
//    without passing through registers, zero-filled where the copy is not
//    valid, committed and waited for at attn_kernel.async_wait; the
//    mbarrier ops as PTX's mbarrier instructions.
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"
#include "passes/Passes.h"
#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/FunctionCallUtils.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
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

/// `elements` elements copied at once from `source[sourceIndices]` to
/// `target[targetIndices]`: a vector load and store.
void copyAtOnce(OpBuilder &b, Location loc, Value source,
                ValueRange sourceIndices, Value target,
                ValueRange targetIndices, int64_t elements) {
  Type element = cast<MemRefType>(source.getType()).getElementType();
  auto vectorType = VectorType::get({elements}, element);
  // The largest power of two up to 16 that divides the bytes (the
  // addresses' alignment the ops require).
  const int64_t bytes = elements * element.getIntOrFloatBitWidth() / 8;
  llvm::MaybeAlign align(std::min<int64_t>(16, bytes & -bytes));
  Value piece =
      vector::LoadOp::create(b, loc, vectorType, source, sourceIndices,
                             /*nontemporal=*/false, align);
  vector::StoreOp::create(b, loc, piece, target, targetIndices,
                          /*nontemporal=*/false, align);
}

/// The copy, done at once: a vector load and store where it is valid, else
/// zeros an element at a time (one vector store of a select would make x86
/// widen bf16 vectors to f32 and back through library calls).
void lowerToCopy(AsyncCopyOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Type element = op.getSource().getType().getElementType();
  const int64_t elements = op.getElements();
  scf::IfOp::create(
      b, loc, op.getValid(),
      [&](OpBuilder &then, Location loc) {
        copyAtOnce(then, loc, op.getSource(), op.getSourceIndices(),
                   op.getTarget(), op.getTargetIndices(), elements);
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

//===-- mbarriers on the CPU ---------------------------------------------===//
//
// A barrier's word holds its state as the GPU counts it: the arrivals the
// current phase still waits for (bits 0-19), the arrivals of a phase
// (bits 20-39, the init count), the current phase's parity (bit 40), the
// transaction bytes it still waits for (bits 41-61, signed: a bulk copy
// may land before the arrival that announces it), and a mark that it was
// initialized (bits 62-63 = 01; neither the zeros nor the poison of
// uninitialized shared memory has it).

constexpr int64_t kArrivalBits = 20;
constexpr int64_t kArrivalMask = (int64_t(1) << kArrivalBits) - 1;
constexpr int64_t kExpectedShift = kArrivalBits;
constexpr int64_t kParityShift = 2 * kArrivalBits;
constexpr int64_t kBytesShift = kParityShift + 1;
constexpr int64_t kBytesBits = 21;
constexpr int64_t kMarkShift = kBytesShift + kBytesBits;
constexpr int64_t kInitializedMark = 1;
/// The GPU's bound on a phase's transaction bytes in flight.
constexpr int64_t kMaxBytes = (int64_t(1) << 20) - 1;

/// Emits the arithmetic of the emulated state on i64 words.
struct BarrierWords {
  OpBuilder &b;
  Location loc;

  /// A barrier's state, its fields as i64 values.
  struct State {
    Value pending, expected, parity, bytes;
  };

  Value constant(int64_t value) {
    return arith::ConstantIntOp::create(b, loc, b.getI64Type(), value);
  }
  Value field(Value word, int64_t shift, int64_t mask) {
    return arith::AndIOp::create(
        b, loc, arith::ShRUIOp::create(b, loc, word, constant(shift)),
        constant(mask));
  }

  /// The state of `barriers[index]`, checked to be initialized (`op` the
  /// op that uses it).
  State load(Operation *op, Value barriers, Value index) {
    Value word = memref::LoadOp::create(b, loc, barriers, index);
    check(op,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                field(word, kMarkShift, 3),
                                constant(kInitializedMark)),
          "the barrier is used before attn_kernel.mbarrier_init");
    // The bytes' field sign-extended: up to bit 63, then back.
    Value bytes = arith::ShRSIOp::create(
        b, loc,
        arith::ShLIOp::create(b, loc, word,
                              constant(64 - kBytesShift - kBytesBits)),
        constant(64 - kBytesBits));
    return {field(word, 0, kArrivalMask),
            field(word, kExpectedShift, kArrivalMask),
            field(word, kParityShift, 1), bytes};
  }

  /// Stores `state` into `barriers[index]`, completing its phase first if
  /// it waits for no arrival and no byte: the parity flips and the next
  /// phase waits for as many arrivals.
  void storeCompleting(State state, Value barriers, Value index) {
    Value done = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, state.pending,
                              constant(0)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, state.bytes,
                              constant(0)));
    state.pending =
        arith::SelectOp::create(b, loc, done, state.expected, state.pending);
    state.parity = arith::SelectOp::create(
        b, loc, done, arith::XOrIOp::create(b, loc, state.parity, constant(1)),
        state.parity);
    memref::StoreOp::create(b, loc, encode(state), barriers, index);
  }

  Value encode(State state) {
    auto at = [&](Value value, int64_t shift) -> Value {
      return arith::ShLIOp::create(b, loc, value, constant(shift));
    };
    Value bytes = arith::AndIOp::create(
        b, loc, state.bytes, constant((int64_t(1) << kBytesBits) - 1));
    Value word = constant(kInitializedMark << kMarkShift);
    for (Value part : {state.pending, at(state.expected, kExpectedShift),
                       at(state.parity, kParityShift), at(bytes, kBytesShift)})
      word = arith::OrIOp::create(b, loc, word, part);
    return word;
  }

  /// Adds `change` to the bytes the phase waits for, checked to stay in
  /// the GPU's range.
  Value addBytes(Operation *op, Value bytes, Value change) {
    Value sum = arith::AddIOp::create(b, loc, bytes, change);
    Value inRange = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, sum,
                              constant(kMaxBytes)),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, sum,
                              constant(-kMaxBytes)));
    check(op, inRange,
          "a phase waits for more than 2^20 - 1 transaction bytes");
    return sum;
  }

  /// Stops the program with `what` (and where the op came from) on
  /// standard error unless `condition` holds (cf.assert would print to
  /// standard output, whose buffer abort() drops when it is a pipe).
  void check(Operation *op, Value condition, StringRef what) {
    std::string message;
    llvm::raw_string_ostream os(message);
    os << op->getName() << ": " << what;
    if (auto at = op->getLoc()->findInstanceOf<FileLineColLoc>())
      os << " (at " << at.getFilename().getValue() << ":" << at.getLine() << ":"
         << at.getColumn() << ")";
    os << "\n";
    Value failed = arith::XOrIOp::create(
        b, loc, condition,
        arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1));
    scf::IfOp::create(b, loc, failed, [&](OpBuilder &then, Location loc) {
      stop(then, loc, op->getParentOfType<ModuleOp>(), message);
      scf::YieldOp::create(then, loc);
    });
  }
  /// write(2, message) and abort(), the message a constant of the module.
  static void stop(OpBuilder &b, Location loc, ModuleOp module,
                   StringRef message) {
    MLIRContext *context = b.getContext();
    Type i32 = b.getI32Type(), i64 = b.getI64Type();
    auto pointer = LLVM::LLVMPointerType::get(context);
    // Made outside the module, then named apart from its symbols.
    OpBuilder detached(context);
    auto text = LLVM::GlobalOp::create(
        detached, loc, LLVM::LLVMArrayType::get(b.getI8Type(), message.size()),
        /*isConstant=*/true, LLVM::Linkage::Internal, "attn_mbarrier_error",
        b.getStringAttr(message));
    SymbolTable(module).insert(text, module.getBody()->begin());
    FailureOr<LLVM::LLVMFuncOp> write =
        LLVM::lookupOrCreateFn(b, module, "write", {i32, pointer, i64}, i64);
    FailureOr<LLVM::LLVMFuncOp> abort = LLVM::lookupOrCreateFn(
        b, module, "abort", {}, LLVM::LLVMVoidType::get(context));
    assert(succeeded(write) && succeeded(abort) &&
           "the module declares write and abort as libc does");
    Value address = LLVM::AddressOfOp::create(b, loc, text);
    LLVM::CallOp::create(
        b, loc, *write,
        ValueRange{arith::ConstantIntOp::create(b, loc, i32, 2), address,
                   arith::ConstantIntOp::create(b, loc, i64, message.size())});
    LLVM::CallOp::create(b, loc, *abort, ValueRange{});
  }
};

void lowerToWord(MbarrierInitOp op) {
  OpBuilder b(op);
  BarrierWords w{b, op.getLoc()};
  const int64_t arrivals = op.getArrivals();
  Value word = w.constant((kInitializedMark << kMarkShift) |
                          (arrivals << kExpectedShift) | arrivals);
  memref::StoreOp::create(b, op.getLoc(), word, op.getBarriers(),
                          op.getIndex());
  op.erase();
}

/// One arrival (announcing its bytes): the last one completes the phase,
/// unless bytes are still to land.
void lowerToWord(MbarrierArriveOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  BarrierWords w{b, loc};
  BarrierWords::State state = w.load(op, op.getBarriers(), op.getIndex());
  // A phase that still waits for bytes has all its arrivals already.
  w.check(op,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt,
                                state.pending, w.constant(0)),
          "more arrivals than the phase expects (it waits for bytes alone)");
  state.pending = arith::SubIOp::create(b, loc, state.pending, w.constant(1));
  if (Value expected = op.getExpectBytes())
    state.bytes = w.addBytes(
        op, state.bytes,
        arith::IndexCastUIOp::create(b, loc, b.getI64Type(), expected));
  w.storeCompleting(state, op.getBarriers(), op.getIndex());
  op.erase();
}

/// The copy at once, then its bytes land on the barrier: they may
/// complete the phase.
void lowerToWord(BulkCopyOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  copyAtOnce(b, loc, op.getSource(), op.getSourceIndices(), op.getTarget(),
             op.getTargetIndices(), op.getElements());
  BarrierWords w{b, loc};
  BarrierWords::State state = w.load(op, op.getBarriers(), op.getIndex());
  state.bytes = w.addBytes(op, state.bytes, w.constant(-op.getBytes()));
  w.storeCompleting(state, op.getBarriers(), op.getIndex());
  op.erase();
}

/// The phase of the waited parity is complete when the current phase has
/// the other parity. The CPU cannot wait: what would complete it comes
/// later in the program.
void lowerToWord(MbarrierWaitOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  BarrierWords w{b, loc};
  BarrierWords::State state = w.load(op, op.getBarriers(), op.getIndex());
  Value waited = arith::AndIOp::create(
      b, loc,
      arith::IndexCastUIOp::create(b, loc, b.getI64Type(), op.getParity()),
      w.constant(1));
  w.check(op,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, state.parity,
                                waited),
          "the phase waited for is not complete: on the CPU, where a "
          "block's thread loops run one after another, its arrivals must "
          "come before the wait");
  op.erase();
}

//===-- mbarriers on the GPU ---------------------------------------------===//

/// The shared-memory address of `barriers[index]`.
Value barrierPointer(OpBuilder &b, Location loc, Value barriers, Value index) {
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, barriers);
  Value bytes = arith::MulIOp::create(
      b, loc, index, arith::ConstantIndexOp::create(b, loc, sizeof(int64_t)));
  Value address = arith::IndexCastUIOp::create(
      b, loc, b.getI64Type(), arith::AddIOp::create(b, loc, base, bytes));
  return LLVM::IntToPtrOp::create(
      b, loc,
      LLVM::LLVMPointerType::get(
          b.getContext(), static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared)),
      address);
}

/// The address of `memref[indices]` (its aligned pointer plus the
/// element's offset in bytes), as a pointer into address space `space`:
/// cast from shared (3) or generic (0) memory, where the memref lives.
Value elementPointer(OpBuilder &b, Location loc, Value memref,
                     ValueRange indices, unsigned space) {
  auto type = cast<MemRefType>(memref.getType());
  auto metadata = memref::ExtractStridedMetadataOp::create(b, loc, memref);
  Value element = metadata.getOffset();
  for (auto [index, stride] : llvm::zip(indices, metadata.getStrides()))
    element = arith::AddIOp::create(
        b, loc, element, arith::MulIOp::create(b, loc, index, stride));
  Value bytes = arith::MulIOp::create(
      b, loc, element,
      arith::ConstantIndexOp::create(
          b, loc, type.getElementType().getIntOrFloatBitWidth() / 8));
  Value address = arith::IndexCastUIOp::create(
      b, loc, b.getI64Type(),
      arith::AddIOp::create(
          b, loc,
          memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref),
          bytes));
  const unsigned home =
      nvgpu::NVGPUDialect::hasSharedMemoryAddressSpace(type)
          ? static_cast<unsigned>(NVVM::NVVMMemorySpace::Shared)
          : 0;
  Value pointer = LLVM::IntToPtrOp::create(
      b, loc, LLVM::LLVMPointerType::get(b.getContext(), home), address);
  if (home == space)
    return pointer;
  return LLVM::AddrSpaceCastOp::create(
      b, loc, LLVM::LLVMPointerType::get(b.getContext(), space), pointer);
}

/// mbarrier.try_wait.parity, which NVVM's op retries until the phase is
/// complete.
void waitForPhase(OpBuilder &b, Location loc, Value pointer, Value parity) {
  Value phase = arith::AndIOp::create(
      b, loc, arith::IndexCastUIOp::create(b, loc, b.getI32Type(), parity),
      arith::ConstantIntOp::create(b, loc, b.getI32Type(), 1));
  // The suspend-time hint CUTLASS gives (ns): the thread sleeps in the
  // instruction instead of spinning through the loop.
  Value ticks = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 10000000);
  NVVM::MBarrierTryWaitParityOp::create(b, loc, pointer, phase, ticks);
}

/// The mbarrier op (or bulk copy) as PTX's instruction; fails with an
/// error on the op below sm_90, where mbarrier.try_wait and bulk copies
/// are missing (sm_80's test_wait, LLVM's NVPTX back end selects only from
/// sm_90 on).
LogicalResult lowerToNvvm(Operation *op, int sm) {
  if (sm < 90)
    return op->emitOpError()
           << "needs sm_90's mbarrier.try_wait and bulk copies (got sm_" << sm
           << ")";
  OpBuilder b(op);
  Location loc = op->getLoc();
  if (auto init = dyn_cast<MbarrierInitOp>(op)) {
    Value pointer = barrierPointer(b, loc, init.getBarriers(), init.getIndex());
    NVVM::MBarrierInitOp::create(
        b, loc, pointer,
        arith::ConstantIntOp::create(b, loc, b.getI32Type(),
                                     init.getArrivals()),
        /*predicate=*/Value());
  } else if (auto arrive = dyn_cast<MbarrierArriveOp>(op)) {
    Value pointer =
        barrierPointer(b, loc, arrive.getBarriers(), arrive.getIndex());
    if (arrive.getAfterCopies())
      NVVM::CpAsyncMBarrierArriveOp::create(b, loc, pointer, /*noinc=*/true);
    else if (Value expected = arrive.getExpectBytes())
      NVVM::MBarrierArriveExpectTxOp::create(
          b, loc, b.getI64Type(), pointer,
          arith::IndexCastUIOp::create(b, loc, b.getI32Type(), expected),
          NVVM::MemScopeKind::CTA, /*relaxed=*/false, /*predicate=*/Value());
    else
      NVVM::MBarrierArriveOp::create(b, loc, b.getI64Type(), pointer,
                                     /*count=*/Value(), NVVM::MemScopeKind::CTA,
                                     /*relaxed=*/false);
  } else if (auto copy = dyn_cast<BulkCopyOp>(op)) {
    // The shared::cluster form: the shared::cta one needs PTX 8.6. A
    // block's own shared memory is part of its cluster's window.
    if (!nvgpu::NVGPUDialect::hasSharedMemoryAddressSpace(
            copy.getTarget().getType()))
      return copy.emitOpError()
             << "target must be in shared (workgroup) memory on the GPU, got "
             << copy.getTarget().getType()
             << " (run -attn-gpu-outline-kernels first)";
    const auto sharedCluster =
        static_cast<unsigned>(NVVM::NVVMMemorySpace::SharedCluster);
    const auto global = static_cast<unsigned>(NVVM::NVVMMemorySpace::Global);
    Value target = elementPointer(b, loc, copy.getTarget(),
                                  copy.getTargetIndices(), sharedCluster);
    Value source = elementPointer(b, loc, copy.getSource(),
                                  copy.getSourceIndices(), global);
    Value barrier = barrierPointer(b, loc, copy.getBarriers(), copy.getIndex());
    NVVM::CpAsyncBulkGlobalToSharedClusterOp::create(
        b, loc, target, source, barrier,
        arith::ConstantIntOp::create(b, loc, b.getI32Type(), copy.getBytes()),
        /*multicastMask=*/Value(), /*l2CacheHint=*/Value());
  } else {
    auto wait = cast<MbarrierWaitOp>(op);
    waitForPhase(b, loc,
                 barrierPointer(b, loc, wait.getBarriers(), wait.getIndex()),
                 wait.getParity());
  }
  op->erase();
  return success();
}

struct AttnAsyncCopyToLoops final
    : mlir::attn::impl::AttnAsyncCopyToLoopsBase<AttnAsyncCopyToLoops> {
  void runOnOperation() override {
    getOperation()->walk([](Operation *op) {
      if (auto copy = dyn_cast<AsyncCopyOp>(op))
        lowerToCopy(copy);
      else if (auto init = dyn_cast<MbarrierInitOp>(op))
        lowerToWord(init);
      else if (auto arrive = dyn_cast<MbarrierArriveOp>(op))
        lowerToWord(arrive);
      else if (auto wait = dyn_cast<MbarrierWaitOp>(op))
        lowerToWord(wait);
      else if (auto copy = dyn_cast<BulkCopyOp>(op))
        lowerToWord(copy);
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
      } else if (isa<MbarrierInitOp, MbarrierArriveOp, MbarrierWaitOp,
                     BulkCopyOp>(op)) {
        if (failed(lowerToNvvm(op, smVersionOf(chip))))
          return WalkResult::interrupt();
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
