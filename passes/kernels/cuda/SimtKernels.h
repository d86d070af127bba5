//===- SimtKernels.h - The CUDA kernels -------------------------*- C++ -*-===//
//
// The kernels of -attn-gpu-dispatches: functions `(bindings...,
// %workgroup: index)` like CPU kernels, written with scalar scf + memref +
// math only (no vector dialect). They come in two kinds:
//
//  * thread kernels: a workgroup is one CUDA thread (its global index),
//    with no cross-thread communication;
//  * block kernels (`attn.block_kernel`): a workgroup is one CUDA block of
//    `block_threads` threads. The body is uniform code around thread loops
//    (`scf.parallel {attn.threads}` over [0, block_threads)), each followed
//    by a barrier (only the warp's threads wait at a loop marked
//    `attn.warp_sync`, whose writes only its own warp reads before the next
//    block-wide barrier; none wait at a loop marked `attn.mbarrier_sync`,
//    whose writes other threads read only after an
//    `attn_kernel.mbarrier_wait` for them); threads share `memref.alloca
//    {attn.shared}` buffers, keep their own values across thread loops in
//    `memref.alloca {attn.registers}` buffers (a slice per thread), and pass
//    nothing else between thread loops.
//
// That makes the same body two things:
//
//  * a CUDA kernel: -attn-gpu-outline-kernels moves it into a gpu.module,
//    computing the workgroup from the block (and thread) ids, running each
//    thread loop's body once per thread with a barrier after it, and
//    placing the shared buffers in dynamic shared memory;
//  * a CPU kernel: the CPU lowering compiles it unchanged (thread loops run
//    in order, shared and register buffers live on the stack), so the CUDA
//    kernels'
//    arithmetic is tested against the float64 reference on machines without
//    a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_KERNELS_CUDA_SIMTKERNELS_H
#define ATTN_PASSES_KERNELS_CUDA_SIMTKERNELS_H

#include "passes/kernels/AttentionShapes.h"
#include "passes/kernels/KeySelection.h"
#include "passes/kernels/VariantRegions.h"

#include "AttnKernel/AttnKernelOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <optional>

namespace mlir::attn {

/// The launch shape and work split of the CUDA kernels, recorded on every
/// kernel as `attn.tiling`.
struct GpuTiling {
  /// Threads per CUDA block.
  int64_t blockThreads = 128;
  /// Keys per split of split-KV work: a flash decode block's, a sparse or
  /// tree split thread's.
  int64_t splitKeys = 256;
  /// Entries with at most this many query rows take the split-KV path.
  int64_t decodeMaxQueries = 8;
  /// Shared memory a block may use (the chip's limit); block kernels size
  /// their tiles to use at most half, so two blocks fit on an SM.
  int64_t maxSharedBytes = 227 * 1024;
  /// Row tiles of 16 per warp in the query tiles of the flash kernels
  /// (prefill and large trees' prefixes; SimtFlashTiling::choose says
  /// where more than 1 applies). 1 by default: on an H100 (session 16),
  /// bf16 D = 128 prefill ran 5-8% faster with 16 rows per warp than with
  /// 32, whose 246 registers leave room for 2 blocks per SM, not 3.
  int64_t flashRowTiles = 1;
  /// Prefill flash kernels of f16/bf16 take their products on the
  /// warpgroup tensor-core instructions of sm_90a (wgmma) with this many
  /// warpgroups of 4 warps (64 rows each) per block, 1 or 2; 0 keeps
  /// mma.sync (SimtFlashTiling::warpgroupMma).
  int64_t flashWarpgroups = 0;
  /// With flashWarpgroups, the prefill kernel's key loop is warp
  /// specialised (FlashAttention-3's producer and consumers): a producer
  /// warpgroup more stages the k and v tiles, handing them to the product
  /// warpgroups through mbarriers (SimtFlashTiling::producerWarpgroup).
  bool flashProducer = false;

  DictionaryAttr toAttr(MLIRContext *context) const;
};

/// The SM number of a chip name ("sm_90a" -> 90), 0 when unreadable.
inline int smVersionOf(llvm::StringRef chip) {
  int version = 0;
  if (chip.consume_front("sm_"))
    chip.take_while(llvm::isDigit).getAsInteger(10, version);
  return version;
}

/// The marks of block kernels (see above).
constexpr llvm::StringLiteral kBlockKernelAttr = "attn.block_kernel";
constexpr llvm::StringLiteral kThreadLoopAttr = "attn.threads";
constexpr llvm::StringLiteral kWarpSyncAttr = "attn.warp_sync";
constexpr llvm::StringLiteral kMbarrierSyncAttr = "attn.mbarrier_sync";
/// An `scf.execute_region` whose thread loops each run over one role's
/// threads (SimtEmitter::byRoles).
constexpr llvm::StringLiteral kByRolesAttr = "attn.by_roles";
constexpr llvm::StringLiteral kSharedBufferAttr = "attn.shared";
constexpr llvm::StringLiteral kRegisterBufferAttr = "attn.registers";

class WarpMmaOp;

/// Checks an attn_kernel.warp_mma whose lhs is the warp's fragments: lhs is
/// registersOfWarp of a register buffer at the thread of the thread loop
/// that holds the op, and no op of that loop writes the buffer (on the CPU
/// a lane reads other lanes' fragments from it, and lanes run one after
/// another there). Errors on the op otherwise.
LogicalResult verifyWarpFragmentRead(WarpMmaOp op);

/// How the runtime launches a kernel of -attn-gpu-dispatches.
struct SimtLaunch {
  int64_t blockThreads = 0;
  /// A workgroup is a block (grid = workgroups), not a thread (grid =
  /// ceil(workgroups / blockThreads)).
  bool perBlock = false;
  /// Bytes of dynamic shared memory per block: the `attn.shared` buffers,
  /// each 16-byte aligned, in order.
  int64_t sharedBytes = 0;

  /// Reads the launch of `kernel` (attn.tiling's block_threads, the block
  /// mark, the shared buffers); fails with an error on `kernel` when it is
  /// not a kernel of -attn-gpu-dispatches.
  static FailureOr<SimtLaunch> get(func::FuncOp kernel);
};

/// Threads [first, first + count) of a block: one role of a warp-specialised
/// kernel (its producer warps, or its consumers). A count of 0 means every
/// thread of the block.
struct ThreadRange {
  int64_t first = 0, count = 0;
};

/// KernelEmitter's scalar side for the CUDA kernels, and the structure of
/// block kernels.
struct SimtEmitter : KernelEmitter {
  /// `blockThreads`: the threads of a block kernel (0 for thread kernels).
  SimtEmitter(ImplicitLocOpBuilder &b, int64_t blockThreads = 0)
      : KernelEmitter(b, 1), blockThreads(blockThreads) {}

  Value fma(Value x, Value y, Value acc) {
    return math::FmaOp::create(b, x, y, acc);
  }
  Value sumOver(Value lower, Value upper, function_ref<Value(Value iv)> term) {
    return loop(lower, upper, index(1), {scalar(0.0)},
                [&](Value iv, ValueRange sum) {
                  return SmallVector<Value>{fadd(sum[0], term(iv))};
                })[0];
  }

  /// Block kernels: a buffer shared by the block's threads (f32 unless
  /// told), allocated at the kernel's entry.
  Value shared(ArrayRef<int64_t> shape, Type element = {});
  /// Block kernels: values each thread keeps for itself from one thread
  /// loop to the next (an accumulator fragment, its rows' running max), f32
  /// `shape` per thread. Allocated at the kernel's entry as
  /// `memref.alloca {attn.registers}` of [blockThreads, shape...], which
  /// the CPU runs as it is; the threads reach it only through
  /// registersOf, which the CUDA outliner turns into one per-thread array
  /// (registers where every index is a constant).
  Value registers(ArrayRef<int64_t> shape);
  /// Thread `thread`'s [shape...] of registers `buffer`; `thread` is the
  /// thread of the enclosing thread loop.
  Value registersOf(Value buffer, Value thread);
  /// The [32, shape...] registers of the warp of thread `thread` (of the
  /// enclosing thread loop), for attn_kernel.warp_mma's lhs fragments alone:
  /// the CUDA outliner makes them the thread's own, whose lanes exchange
  /// elements by shuffles.
  Value registersOfWarp(Value buffer, Value thread);
  /// The element at `indices` of `memref` (widened to f32) where
  /// `condition` holds, 0 elsewhere; nothing is read where it does not.
  Value loadOrZero(Value condition, Value memref, ValueRange indices);
  /// Who waits for whom at the end of a thread loop: the whole block, or
  /// each warp for its own threads, when what the loop writes is read, until
  /// the next block-wide wait, only by threads of the warp that wrote it
  /// (on the GPU bar.warp.sync instead of bar.sync: a warp runs on without
  /// waiting for the slowest warp of the block).
  /// How the threads wait for one another after a thread loop: the whole
  /// block, the warp, or none (they hand on what they wrote through
  /// mbarriers: warps in different roles, a producer staging tiles for
  /// consumers, run through their loops independently).
  enum class Sync { Block, Warp, Mbarriers };
  /// Runs `body(thread)` on every thread of the block, then waits as `sync`
  /// says (with Block and Warp, the results are visible to the next thread
  /// loop).
  void eachThread(function_ref<void(Value thread)> body,
                  Sync sync = Sync::Block) {
    eachThreadIn({}, body, sync);
  }
  /// eachThread over the threads of `range` alone (a role's: whole warps).
  /// Inside byRoles, a role's loops end with Warp or Mbarriers sync: a
  /// block-wide barrier would wait for threads that run other code.
  void eachThreadIn(ThreadRange range, function_ref<void(Value thread)> body,
                    Sync sync = Sync::Block);
  /// Runs `body`, whose thread loops each take one role's threads (disjoint
  /// ranges), the roles handing data to one another through mbarriers
  /// alone. On the CPU it is that code as it is, the roles' loops
  /// interleaved in program order; on the GPU (-attn-gpu-outline-kernels)
  /// each role runs its own copy of `body` holding its loops alone, so a
  /// producer warp runs through its loop of tiles ahead of the consumers'
  /// (FlashAttention-3's warp specialization).
  void byRoles(function_ref<void()> body);
  /// Runs `body(i)` for every i in [0, count), spread over the block's
  /// threads (thread t takes i = t, t + blockThreads, ...), then waits.
  void forAll(Value count, function_ref<void(Value i)> body);
  /// forAll over the [rows, cols] elements of a block that a body reads at
  /// [r, c] of the shared `from` and writes at [c, r] of the shared `to`
  /// (a transposition): each warp's 32 lanes take a tile of laneRows x (32
  /// / laneRows) elements that divides the block, the one of the fewest
  /// wavefronts between the read and the write at these buffers' widths,
  /// or forAll's lanes along rows where none takes fewer than those.
  void forAllTransposing(int64_t rows, int64_t cols, Value from, Value to,
                         function_ref<void(Value r, Value c)> body);
  /// forAll for a body that loads, then stores what it loaded: each thread
  /// takes `batch` of its indices a step (i, i + blockThreads, ...) and
  /// makes all their loads (`load(i, inRange)`; past `count` inRange is
  /// false and nothing may be read) before any of their stores
  /// (`store(i, loaded)`, for indices below `count` alone). A GPU issues
  /// in order: a body that stores what it has just loaded waits a memory
  /// latency per index, where a batch waits one for all.
  void
  forAllBatched(Value count, int64_t batch,
                function_ref<SmallVector<Value>(Value i, Value inRange)> load,
                function_ref<void(Value i, ValueRange loaded)> store);
  /// Thread `thread`'s share of copying `count` rows of `dim` elements
  /// into the shared tile `to` (of `from`'s element type), whose rows are
  /// `padded` long: row j from from[rowAt(j).first..., 0 .. dim) where
  /// rowAt(j).second holds, zeros elsewhere. 16 bytes a copy where a row is
  /// whole 16-byte pieces (every row then starts 16-byte aligned, in
  /// global memory as in the padded shared rows; else 8 or 4 bytes), all
  /// of a thread's copies in flight at once (attn_kernel.async_copy:
  /// cp.async on the GPU; they are complete after the thread's next
  /// attn_kernel.async_wait); rows of no whole 4-byte pieces an element a
  /// load. `to` may be core-matrix tiled (tileElement), and its rows'
  /// strides must be multiples of 16 bytes. With `firstColumn` (a multiple
  /// of `padded`), a row's `padded` elements from that column of rows of
  /// `dim`, zeros past them (a column tile of longer rows).
  void
  stageRows(Value thread, int64_t count, Value from, Value to, int64_t dim,
            int64_t padded,
            function_ref<std::pair<SmallVector<Value>, Value>(Value)> rowAt,
            Value firstColumn = {}) {
    stageRows(thread, count, {{from, to}}, dim, padded, rowAt, firstColumn);
  }
  /// stageRows for several (from, to) pairs of one element type whose rows
  /// are at the same indices (k and v of a key tile): each row's place is
  /// found once for all of them.
  /// With `sharing`, the threads of that range alone share the copies
  /// (`thread` one of them).
  void
  stageRows(Value thread, int64_t count,
            ArrayRef<std::pair<Value, Value>> fromTo, int64_t dim,
            int64_t padded,
            function_ref<std::pair<SmallVector<Value>, Value>(Value)> rowAt,
            Value firstColumn = {}, ThreadRange sharing = {});
  /// Thread `thread`'s share of copying `count` rows of `dim` elements
  /// from the shared tile `from` (padded rows whose strides are multiples
  /// of 16 bytes) to rows rowAt(j).first... of `to` (of `from`'s element
  /// type) where rowAt(j).second holds: 16-byte vector loads and stores
  /// where a row is whole 16-byte pieces, else an element at a time.
  void
  storeRows(Value thread, int64_t count, Value from, Value to, int64_t dim,
            function_ref<std::pair<SmallVector<Value>, Value>(Value)> rowAt);
  /// Runs body(i, i + 1, i % 2) for i in [0, count), two at a time, so
  /// that the stage (0 or 1) is a constant of each body: a loop over
  /// tiles in two stages, tile i using stage i % 2 while tile i + 1 is
  /// copied into the other.
  void inTwoStages(
      Value count,
      function_ref<void(Value index, Value next, int64_t stage)> body);
  /// Thread `t`'s contiguous share [first, end) of `total` entries, the
  /// shares in thread order (block kernels whose threads each take a run
  /// of entries, then combine the shares' counts in that order).
  std::pair<Value, Value> shareOf(Value t, Value total);
  /// The sum of the shared per-thread `buffer`[0, t), in thread order: an
  /// index for an integer buffer, f64 for an f64 one.
  Value sumOfShares(Value buffer, Value t);

  int64_t blockThreads;
};

/// The wavefronts one warp's access to shared memory of `bytes` a lane
/// takes at these byte addresses (lanes in order, none for a lane that does
/// not take part), and the fewest its distinct 4-byte words need: 32 banks
/// of 4 bytes, lanes of 8 bytes served in phases of 16 and of 16 bytes in
/// phases of 8, each phase a wavefront at best.
std::pair<int64_t, int64_t>
sharedWavefronts(ArrayRef<std::optional<int64_t>> laneBytes, int64_t bytes);

/// Where lane `lane`'s elements of an mma.m16n8k16 accumulator fragment
/// lie in a warp's 16-row tile from row `row` (attn_kernel.warp_mma): with
/// g = lane / 4 and t = lane % 4, rows row + g and row + g + 8, columns
/// 8 b + 2t and 8 b + 2t + 1 of each block b of 8 columns.
struct MmaFragmentLayout {
  /// g, and 2t (the lane's first column in a block of 8, or its first k in
  /// a step of 16).
  Value group, pairColumn;
  Value row;

  MmaFragmentLayout(SimtEmitter &e, Value row, Value lane)
      : group(e.div(lane, e.index(4))),
        pairColumn(e.mul(e.rem(lane, e.index(4)), e.index(2))), row(row) {}

  /// The accumulator rows of the lane: half 0 -> row + g, 1 -> row + g + 8.
  Value accRow(SimtEmitter &e, int64_t half) {
    return e.add(row, e.add(group, e.index(8 * half)));
  }
  /// Accumulator column `element` (0, 1) of the lane in column block `block`.
  Value accColumn(SimtEmitter &e, Value block, int64_t element) {
    return e.add(e.mul(block, e.index(8)), e.add(pairColumn, e.index(element)));
  }
};

/// Where element (row, column) of a shared tile lies in `buffer`: at [row,
/// column] of a row-major 2-D buffer, or at [row / 8, column / 8, row % 8,
/// column % 8] of a core-matrix tiled one (attn_kernel.warp_mma
/// {warpgroup}: each 8 x 8 core matrix 128 contiguous bytes for wgmma).
inline SmallVector<Value, 4> tileElement(SimtEmitter &e, Value buffer,
                                         Value row, Value column) {
  if (cast<MemRefType>(buffer.getType()).getRank() == 2)
    return {row, column};
  Value side = e.index(8);
  return {e.div(row, side), e.div(column, side), e.rem(row, side),
          e.rem(column, side)};
}

/// A CUDA kernel `name` with `bindingTypes` and the launch of `tiling`;
/// `kind` names what it computes (attn.kernel_kind).
inline func::FuncOp createSimtKernel(OpBuilder &builder, Location loc,
                                     StringRef name, TypeRange bindingTypes,
                                     const GpuTiling &tiling, StringRef kind) {
  return createKernel(builder, loc, name, bindingTypes,
                      tiling.toAttr(builder.getContext()), kind);
}

/// The visible keys [begin, end) of query row `row` (its position is
/// Lk - Lq + row), intersected with [from, to).
std::pair<Value, Value> visibleKeys(SimtEmitter &e,
                                    const SoftmaxAttentionShape &shape,
                                    Value row, Value lq, Value lk, Value from,
                                    Value to);

/// The output gate of one row, [B, H, Lq, Dv or 1] read at (batch, head,
/// row) = rowAt[0..3): a headwise gate is read once, an elementwise one per
/// feature.
class RowGate {
public:
  RowGate(SimtEmitter &e, const SoftmaxAttentionShape &shape, Value gate,
          ValueRange rowAt)
      : e(e), gate(gate), rowAt(rowAt.take_front(3)) {
    if (gate && shape.headwiseGate)
      headGate = e.load(gate, at(e.index(0)));
  }
  /// o of feature d, gated (o itself without a gate).
  Value apply(Value o, Value d) {
    if (!gate)
      return o;
    return e.sigmoidGate(o, headGate ? headGate : e.load(gate, at(d)));
  }

private:
  SmallVector<Value> at(Value d) {
    SmallVector<Value> indices(rowAt);
    indices.push_back(d);
    return indices;
  }
  SimtEmitter &e;
  Value gate, headGate;
  SmallVector<Value> rowAt;
};

/// The online softmax of one query row carried by one thread (decode,
/// sparse and tree attention): the scaled query row and the unnormalized
/// output in thread-local scratch, the running max and sum (m, l) as
/// values the caller carries through its loops over keys.
class SimtRowSoftmax {
public:
  /// Reads the query row `at` (of [B, H, Lq] or a ragged batch's packed
  /// [T, H]) and zeroes the output; keys are read through `keys`
  /// (contiguous or paged). The variant regions see the row at `queryPos`
  /// and read `variantBuffers`.
  SimtRowSoftmax(SimtEmitter &e, const SoftmaxAttentionShape &shape,
                 const SoftmaxBindings &inputs, const KeyRows &keys,
                 const QueryRowOfWorkgroup &at, Value queryPos,
                 ValueRange variantBuffers);
  /// (m, l) before any key.
  SmallVector<Value> initial();
  /// (m, l) after key row `key` of k and v (of the row's kv head), which
  /// the row's mask and selection leave visible (its mask_mod may still
  /// hide it); the variant regions see it at `keyPos` (default: `key`).
  SmallVector<Value> addKey(ValueRange state, Value key,
                            Value keyPos = Value());
  /// Writes the normalized output and its log-sum-exp (0 and -inf for a row
  /// that saw no key) to partial o [B, H, Lq, S, Dv] and partial lse
  /// [B, H, Lq, S] at [batch, head, row, split] (a ragged batch's [T, H,
  /// S, Dv] and [T, H, S] at [token, head, split]), for the merge kernel.
  void storePartial(ValueRange state, Value partialOut, Value partialLse,
                    Value split);

private:
  SimtEmitter &e;
  const SoftmaxAttentionShape &shape;
  const KeyRows &keys;
  Value k, v, batch, head, queryPos, kvHead, query, acc;
  /// The row's index prefix in q and the partials.
  SmallVector<Value> rowAt;
  VariantEmitter variants;
};

/// The tiles of the flash block kernel: a warp per 16 query rows, key
/// tiles of `keyTile` keys, head dims padded for attn_kernel.warp_mma.
struct SimtFlashTiling {
  int64_t warps = 4, keyTile = 64;
  /// Row tiles of 16 per warp: 2 shares each k and v fragment between two
  /// mma row tiles (FlashAttention-2's 32 rows per warp).
  int64_t rowTiles = 1;
  int64_t paddedHeadDim = 0, paddedValueDim = 0;
  /// Bytes of one stored element of q, k, v.
  int64_t elementBytes = 4;
  /// The warps are warpgroups of 4 whose products are wgmma's
  /// (attn_kernel.warp_mma {warpgroup}), the q, k and v tiles core-matrix
  /// tiled in shared memory.
  bool warpgroupMma = false;
  /// k and v tiles in flight: 1 stages each tile while the one before is
  /// used (k during P v, v during the softmax); 2 (decode, and prefill that
  /// overlaps its products) keeps a second k and v buffer, so that a later
  /// tile's copies are in flight while tile j is used.
  int64_t stages = 1;
  /// Warpgroup products with tile j + 1's scores and tile j's P v in
  /// flight during tile j + 1's softmax (two stages; value dims up to 128:
  /// at 256 the output fragment's 128 registers leave too few, and ptxas
  /// spilled 160 bytes).
  bool overlapsProducts = false;
  /// With overlapsProducts: a warpgroup more per block, the producer, stages
  /// the k and v tiles; the `warps` compute (GpuTiling::flashProducer).
  bool producerWarpgroup = false;

  /// Warps that share one warp's rows, each holding a part of the value
  /// columns of its output fragment (FlashMLA's split of the 512 latent
  /// value columns over warpgroups): values wider than 256 columns keep a
  /// warp's fragment at 128 columns (64 registers) instead of spilling it.
  /// Each such warp computes its rows' scores and softmax itself (the same
  /// values): more tensor-core work, which decode, bound by memory, affords.
  int64_t valueParts = 1;

  int64_t queryTile() const { return 16 * rowTiles * warps / valueParts; }
  int64_t threads() const {
    return 32 * (warps + (producerWarpgroup ? kProducerWarps : 0));
  }
  /// The threads whose warps compute (the block's first), and the
  /// producer's (after them).
  ThreadRange productThreads() const { return {0, 32 * warps}; }
  ThreadRange producerThreads() const {
    return {32 * warps, producerWarpgroup ? 32 * kProducerWarps : 0};
  }
  /// A warpgroup: the producer's role is one (setmaxnreg, which gives it
  /// fewer registers and the consumers more, takes whole warpgroups).
  static constexpr int64_t kProducerWarps = 4;
  /// The value columns of one warp's output fragment.
  int64_t valueColumnsPerWarp() const { return paddedValueDim / valueParts; }

  /// The lanes that hold one row of an mma accumulator fragment.
  static constexpr int64_t kLanesPerRow = 4;

  // Row lengths of the shared buffers: the q, k and v tiles get 16 bytes
  // more than they hold. Rows stay whole 16-byte pieces (ldmatrix reads
  // them), and start 4 banks apart, so the 8 rows of an 8 x 8 matrix
  // (ldmatrix, or an mma fragment read a pair at a time) spread over the 32
  // banks of shared memory. Core-matrix tiles need no padding: a core
  // matrix is 128 contiguous bytes, all 32 banks.
  int64_t headStride() const {
    return paddedHeadDim + (warpgroupMma ? 0 : 16 / elementBytes);
  }
  int64_t valueStride() const {
    return paddedValueDim + (warpgroupMma ? 0 : 16 / elementBytes);
  }

  /// The shared memory of a block (as SimtLaunch counts it).
  int64_t sharedBytes() const;
  /// The largest tiles of at most `maxWarps` warps (a power of 2) and
  /// `maxRowTiles` row tiles per warp (more than 1 only for f16/bf16 with
  /// value dims up to 128, whose output fragments then still fit in
  /// registers) whose shared memory fits in half of `tiling.maxSharedBytes`
  /// (else in all of it; else the smallest).
  static SimtFlashTiling choose(const SoftmaxAttentionShape &shape,
                                Type storage, const GpuTiling &tiling,
                                int64_t maxWarps = 4, int64_t maxRowTiles = 1);
  /// Decode's tiles (buildSimtFlashDecodeKernel): as few warps as hold a
  /// kv group's heads times `tiling.decodeMaxQueries` rows, at most 4; two
  /// stages of k and v.
  static SimtFlashTiling chooseForDecode(const SoftmaxAttentionShape &shape,
                                         Type storage, const GpuTiling &tiling);
};

/// Softmax attention as a block kernel, one block per (batch, head, tile of
/// 16 * rowTiles * warps query rows): the block stages its q tile and each
/// key tile's k and v in shared memory (asynchronous copies overlapping the
/// products before them); per key tile each warp computes its rows'
/// scores with attn_kernel.warp_mma (tensor cores for f16/bf16) into its lanes'
/// register fragments, each lane applies scale, softcap and mask and the
/// online-softmax update to its elements (the row max agreed by the row's
/// 4 lanes through shared memory), and each warp adds P V to its lanes'
/// output fragments with attn_kernel.warp_mma. Bindings: q, k, v, [gate], o,
/// [lse] (with a block mask then tile classes, tile list, tile counts); for
/// KeyPart::TreePrefix q, k, v, partial o, partial lse (split 0 of 2).
func::FuncOp
buildSimtFlashKernel(OpBuilder &builder, Location loc, StringRef name,
                     const SoftmaxAttentionShape &shape,
                     const SimtFlashTiling &flash, const GpuTiling &tiling,
                     TypeRange bindingTypes, KeyPart part = KeyPart::All);

/// Decode as the flash block kernel over key splits (FlashDecoding): one
/// block per (batch, kv head, tile of 16 * warps rows, split of
/// `tiling.splitKeys` keys), the split fastest. A tile's rows are the kv
/// group's (query head, query row) pairs, head-major, so its heads share
/// each staged k and v tile. Each row's normalized partial and log-sum-exp
/// (0 and -inf when the split holds none of its keys) go to split s.
/// Bindings: q, k, v, partial o [B, H, Lq, S, Dv], partial lse [B, H, Lq, S].
/// KeyPart::TreePrefix: the rows are a small tree's nodes, the keys its
/// prefix (from each node's window start, so [parents] follow v), split
/// over the first S - 1 splits (the last is the nodes' own keys').
/// Sparse attention (`shape.selection` Blocks; the selection follows v): a
/// block per (batch, head, row, split of max(1, splitKeys / block_size)
/// selection entries), whose keys are those of the split's listed blocks
/// that count (forEachListedBlock), visible to the row.
/// With `mergesSplits` (dense decode of a batch of equal rows), the block
/// that finishes a tile's last split merges its rows' partials as
/// buildSimtMergeKernel does (no merge kernel runs): each block counts its
/// split done on the tile's counter (attn_kernel.device_fence, then
/// memref.atomic_rmw), and the one that counts last merges. Bindings after
/// partial lse: [gate], o, [lse], counters [B * Hkv * tiles] i32 at zero.
func::FuncOp buildSimtFlashDecodeKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const SimtFlashTiling &flash,
    const GpuTiling &tiling, TypeRange bindingTypes,
    KeyPart part = KeyPart::All, bool mergesSplits = false);

/// Zeroes an i32 buffer of rank 1, a thread per element (the counters of
/// a decode kernel that merges its splits).
func::FuncOp buildSimtZeroKernel(OpBuilder &builder, Location loc,
                                 StringRef name, const GpuTiling &tiling,
                                 TypeRange bindingTypes);

/// The block mask of the flash kernel (SoftmaxAttentionKernels.h's
/// TileClass) for the prefill tiles of `flash`: a thread per (Bm, Hm, query
/// tile, key tile) classifies the tile under the mask_mod. Bindings: q, k,
/// tile classes [Bm, Hm, QT, KT] i8, variant tensors.
func::FuncOp buildSimtTileClassKernel(OpBuilder &builder, Location loc,
                                      StringRef name,
                                      const SoftmaxAttentionShape &shape,
                                      const SimtFlashTiling &flash,
                                      const GpuTiling &tiling,
                                      TypeRange bindingTypes);

/// A thread per (Bm, Hm, query tile) lists, ascending, the key tiles that
/// the flash kernel's query tile visits and the mask_mod does not hide
/// (FlexAttention's kv_indices and kv_num_blocks), so the flash kernel's
/// blocks walk only those. Bindings: q, k, tile classes, tile list
/// [Bm, Hm, QT, KT] i32, tile counts [Bm, Hm, QT] i32.
func::FuncOp buildSimtTileListKernel(OpBuilder &builder, Location loc,
                                     StringRef name,
                                     const SoftmaxAttentionShape &shape,
                                     const SimtFlashTiling &flash,
                                     const GpuTiling &tiling,
                                     TypeRange bindingTypes);

/// Merges feature `d` of `merge`'s row from its splits' partials through
/// their log-sum-exp, applies the gate and stores o (and lse, for d = 0).
void emitSplitKvMerge(SimtEmitter &e, const SoftmaxAttentionShape &shape,
                      const SplitKvMerge &merge, Value d);

/// One thread per (batch, head, query row): merges the partials through
/// their log-sum-exp and applies the gate. Bindings: partial o, partial
/// lse, [gate], o, [lse].
func::FuncOp buildSimtMergeKernel(OpBuilder &builder, Location loc,
                                  StringRef name,
                                  const SoftmaxAttentionShape &shape,
                                  const GpuTiling &tiling,
                                  TypeRange bindingTypes);

/// How the chunked recurrence kernel (buildSimtChunkedRecurrenceKernel)
/// spreads a state's columns over a block: each column over `parts`
/// threads of one warp, part p keeping rows p, p + parts, ... of it in
/// registers, whose partial sums (q . S, k . S) meet in shared memory.
/// With a thread per column, a thread keeps Dk floats of state: at Dk =
/// 128 that is 255 registers, spills and few warps per SM. The column's scalar
/// work (the UT solve and the intra-chunk outputs, O(C^2)) stays on one of its
/// threads, so the split is for short chunks (decode steps) alone.
struct SimtRecurrenceColumns {
  /// Threads per block: whole warps.
  int64_t threads = 128;
  /// Threads per state column: a power of two that divides Dk and 32.
  int64_t parts = 1;

  /// State columns per block.
  int64_t columns() const { return threads / parts; }
  /// Column tiles of a state.
  int64_t tiles(const LinearRecurrenceShape &shape) const {
    return (shape.valueDim + columns() - 1) / columns();
  }
  /// Partial sums a step of the chunk exchanges (q . S, then for the delta
  /// rules k . S, of every thread): 0 with whole columns.
  int64_t partialSumsPerStep(const LinearRecurrenceShape &shape) const {
    return parts == 1 ? 0 : (shape.isDelta() ? 2 : 1) * threads;
  }
  /// Blocks of whole warps, no wider than the state (a narrow state leaves
  /// no idle warps), and parts enough for at most kStateRowsPerThread rows
  /// a thread where chunks have at most kMaxSplitChunk steps.
  static SimtRecurrenceColumns choose(const LinearRecurrenceShape &shape,
                                      const GpuTiling &tiling);
  static constexpr int64_t kStateRowsPerThread = 32;
  static constexpr int64_t kMaxSplitChunk = 8;
};

/// The shapes of the chunked recurrence kernel's per-block buffers that
/// scale with the chunk (k and q rows, gla's decays, the score and UT
/// matrices, the values, the split columns' partial sums), in binding
/// order, when they do not fit in `tiling.maxSharedBytes` beside the rest;
/// empty when they fit in shared memory.
SmallVector<SmallVector<int64_t>>
recurrenceScratchShapes(const LinearRecurrenceShape &shape,
                        const SimtRecurrenceColumns &columns,
                        const GpuTiling &tiling);

/// Element [row, col] of a buffer stored as `parts` (an f32 value split
/// into bf16 or f16 parts for the tensor cores, or one part): their sum.
Value storedElement(SimtEmitter &e, ArrayRef<Value> parts, Value row,
                    Value col);
/// 1 / sqrt(sum(x^2) + 1e-6) of row `row` (of `dim` features) of the
/// shared buffers `parts`, x being the sum of its parts (SPEC §2's
/// qk_l2norm): one thread's row.
Value sharedRowNormInverse(SimtEmitter &e, ArrayRef<Value> parts, Value row,
                           int64_t dim);
/// Multiplies row `row` of the shared `rows` (of `dim` features) by
/// `factor`, first dividing it by its L2 norm (x / sqrt(sum(x^2) + 1e-6),
/// SPEC §2's qk_l2norm) when `normalize`: one thread's row.
void scaleSharedRow(SimtEmitter &e, Value rows, Value row, int64_t dim,
                    bool normalize, double factor);
/// A chunk's cumulative log-decay G: the sum of the scalar log-decays `g`
/// of steps [first, first + count) of `seq` at value head `hv`.
Value cumulativeLogDecay(SimtEmitter &e, Value g, const RecurrenceSequence &seq,
                         Value hv, Value first, Value count);

/// The chunked linear recurrence (SPEC §2) as a block kernel: one block
/// per (batch, value head, column tile of `columns.columns()` state
/// columns), the tile fastest. Per chunk of C steps the block stages k, q,
/// the decays and beta in shared memory and computes the chunk's score and
/// (delta rules) UT-transform matrices together; then each column's
/// threads carry it through the chunk. A one-step call is one chunk of
/// one step, i.e. the recurrent step. Bindings as the CPU kernels': q, k, v,
/// [g], [beta], S_init, [z, w], o, S; o is stored ungated. When the chunk's
/// buffers do not fit in `tiling.maxSharedBytes` (a large tree at Dk =
/// 128), the ones that scale with the chunk live in global memory instead:
/// then one [blocks, shape...] scratch binding per
/// recurrenceScratchShapes() entry follows, the block using its row.
func::FuncOp buildSimtChunkedRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const SimtRecurrenceColumns &columns,
    const GpuTiling &tiling, TypeRange bindingTypes);

/// The three kernels of the chunked recurrence on matrix products
/// (SimtMmaRecurrenceKernel.cpp), in the order they run.
enum class ChunkMmaKernel {
  /// What each chunk needs from its own steps, for every chunk at once:
  /// per step G and 1 / |k|, and for the delta rules W and U with (I + A)
  /// [W | U] = [beta exp(G) k^ | beta v], into ChunkTemporaries. One block
  /// per (batch, value head, chunk), the chunk fastest; in a ragged batch
  /// per (chunk slot, value head), slot j being the j-th chunk of the
  /// batch, sequence by sequence (ceil(T / C) + B slots hold them all; the
  /// others exit).
  Local,
  /// The chain of chunks: a block per (batch, value head, tile of
  /// `columns` state columns), the tile fastest, carries its tile of the
  /// state in the warps' registers from S_init to the final state, storing
  /// each chunk's starting state (and for the delta rules V' over U).
  States,
  /// The outputs, all chunks at once: a block per (chunk as the WY
  /// kernel's blocks, column tile), the tile fastest, from the chunk's
  /// starting state.
  Outputs,
};

/// The tiles of the chunked recurrence on matrix products
/// (buildSimtMmaRecurrenceKernel): a block per `columns` state columns, a
/// warp per 16 of them (the chain: `keyGroups` warps per 16 of them).
struct SimtMmaRecurrenceTiling {
  /// State columns per block (16, 32 or 64) and warps (columns / 16).
  int64_t columns = 64, warps = 4;
  /// The chain's warps per 16 state columns: each holds its columns' rows
  /// of one of `keyGroups` equal ranges of the padded Dk, and computes W S
  /// for one of as many ranges of the columns. The chain is a dependent
  /// sequence of small products on few blocks (a value head's tile at B =
  /// 1), so it takes more warps than the other two kernels: shorter chains
  /// of products per warp, and more warps to hide their latency.
  int64_t keyGroups = 2;
  /// Dk padded to the products' reduction step of 16.
  int64_t paddedKeyDim = 0;
  /// Row tiles of 16 per warp in the products over the chunk's C steps
  /// (ceil(C / 16 / warps); see chunkRowTile in the kernel).
  int64_t rowTiles = 1;
  /// The products' element type: bf16 for f16 / bf16 storage, f32 for f32.
  Type product;
  /// Operand parts (hi, then lo: see the kernel): q and k as stored (1, or
  /// 2 for f16 storage), v as stored for the rules without delta, and the
  /// values computed in f32 (1 in f32, else 2).
  int64_t rawParts = 1, computedParts = 1;
  /// Bytes of an element as stored.
  int64_t storageBytes = 4;

  /// Whether the local kernel keeps T diag(w) in A's buffer: where it is
  /// one f32 part, A is dead once T is made, and sharing keeps two f32
  /// blocks to an SM at Dk = Dv = 128. A is then a tf32 operand too, which
  /// decides its stores and row width (transformWidth in the kernel).
  bool weightedInTransform() const {
    return computedParts == 1 && product.isF32();
  }
  /// The threads of a block of `kernel`.
  int64_t threads(ChunkMmaKernel kernel) const {
    return 32 * warps * (kernel == ChunkMmaKernel::States ? keyGroups : 1);
  }
  /// Elements a shared row of the chain's staged values (f32 U, or v as
  /// stored) gets past its width: 16 bytes.
  int64_t valuePadding(const LinearRecurrenceShape &shape) const;
  /// Elements a shared row of the products' operands gets past its width:
  /// 16 bytes, as SimtFlashTiling's rows (ldmatrix, banks).
  int64_t rowPadding() const;
  /// The shared memory of a block of `kernel` (as SimtLaunch counts it).
  int64_t sharedBytes(const LinearRecurrenceShape &shape,
                      ChunkMmaKernel kernel) const;
  /// The widest tiles whose shared memory fits in
  /// `tiling.maxSharedBytes` in the three kernels, or none: trees with
  /// decays per feature and chunks that are not whole row tiles of 16 take
  /// the chunked SIMT kernel.
  static std::optional<SimtMmaRecurrenceTiling>
  choose(const LinearRecurrenceShape &shape, Type storage,
         const GpuTiling &tiling);
  /// The chain's tiling for calls whose blocks would leave multiprocessors
  /// idle (few sequences and heads): half the columns a block, so twice
  /// the blocks share the chain's work, and twice the warps per 16 columns
  /// where Dk allows (8 warps at 32 columns, Dk padded to a multiple of
  /// 32); none at 16 columns or past `tiling.maxSharedBytes`.
  std::optional<SimtMmaRecurrenceTiling>
  narrowChain(const LinearRecurrenceShape &shape,
              const GpuTiling &tiling) const;
};

/// The temporaries of the recurrence on matrix products, bound in this
/// order after the recurrence's own bindings (before the workgroup) of the
/// local kernel and of both ChunkMmaKernel kernels:
///  - the delta rules' W, U and V': W [parts, .., Dk] in the products'
///    type (SimtMmaRecurrenceTiling::product; bf16 hi and lo parts for f16
///    and bf16 storage), U [.., Dv] in f32 (the local kernel's), V' = U -
///    W S [parts, .., Dv] in the products' type (the chain's), each laid
///    out as v;
///  - the rules with a decay per key feature (gla, kda): G per step and
///    feature (the cumulative log-decay inside its chunk) [.., Dk] in f32,
///    and the keys decayed to their chunk's last step, k_s exp(G_last -
///    G_s) [parts, .., Dk] in the products' type (the chain's update
///    operand), each laid out as v;
///  - per step, G (the cumulative scalar log-decay inside its chunk, 0
///    without one) and 1 / |k| (1 without qk_l2norm): f32 [.., 2] laid out
///    as v;
///  - the state at each chunk's start, transposed, S^T [parts, slots, Hv,
///    Dv, Dk] in the products' type: sequence b's chunk j at slot b *
///    ceil(L / C) + j, B * ceil(L / C) slots; in a ragged batch at
///    floor(cu_seqlens[b] / C) + b + j, ceil(T / C) + B slots.
/// What the chain passes to the outputs (V', S^T) is stored as the very
/// parts the outputs' products take, so that the outputs kernel copies
/// them into shared memory as they are (cp.async), converting nothing.
struct ChunkTemporaries {
  Value w, u, projected, featureLogDecays, decayedKeys, scales, states;

  ChunkTemporaries(func::FuncOp kernel, const LinearRecurrenceShape &shape);
};

/// The chunked linear recurrence (SPEC §2) with its chunk's matrix products
/// on attn_kernel.warp_mma (tensor cores): the local kernel, the chain of
/// chunks or the outputs (`kind`). Same bindings as
/// buildSimtChunkedRecurrenceKernel (without scratch), then
/// ChunkTemporaries.
func::FuncOp buildSimtMmaRecurrenceKernel(OpBuilder &builder, Location loc,
                                          StringRef name,
                                          const LinearRecurrenceShape &shape,
                                          const SimtMmaRecurrenceTiling &mma,
                                          ChunkMmaKernel kind,
                                          const GpuTiling &tiling,
                                          TypeRange bindingTypes);

/// Rows per block of the rmsnorm gate kernel: 16 head vectors' worth.
inline int64_t gateRowsPerBlock(const RmsNormGateShape &shape) {
  return std::max<int64_t>(1, 16 / shape.headsPerRow());
}
/// attn.rmsnorm_gate (RmsNormGateShape), also a recurrence's gate after its
/// kernels (in place: o and result the same buffer). Bindings: o, z, w,
/// [x, d], result. A block per gateRowsPerBlock rows, coalesced.
func::FuncOp buildSimtRmsNormGateKernel(OpBuilder &builder, Location loc,
                                        StringRef name,
                                        const RmsNormGateShape &shape,
                                        const GpuTiling &tiling,
                                        TypeRange bindingTypes);

/// attn.gate on its own (OutputGateShape; SimtOutputGateKernel.cpp): a
/// thread kernel, a thread per element of the output. Bindings: o, gate,
/// [x, d], result.
func::FuncOp buildSimtOutputGateKernel(OpBuilder &builder, Location loc,
                                       StringRef name,
                                       const OutputGateShape &shape,
                                       const GpuTiling &tiling,
                                       TypeRange bindingTypes);

//===----------------------------------------------------------------------===//
// Sparsity and trees (SimtSelectionKernels.cpp): thread kernels.
//===----------------------------------------------------------------------===//

/// Runs `body(block, iters)` for every block listed in
/// selection[prefix..., from .. to) that lies in [0, numBlocks) and is not
/// listed earlier in the row (SPEC: -1 entries, repeats and blocks past the
/// keys are ignored); returns the final iters. Earlier entries are scanned
/// only for an entry that is not above all of them, so a sorted selection
/// costs one pass.
SmallVector<Value> forEachListedBlock(
    SimtEmitter &e, Value selection, ValueRange prefix, Value numBlocks,
    Value from, Value to, ValueRange inits,
    function_ref<SmallVector<Value>(Value block, ValueRange iters)> body);

/// One thread per (MetaBlock's index by `layout`, channel), the channel
/// fastest; MetaBlock's bindings.
func::FuncOp buildSimtBlockMetaKernel(OpBuilder &builder, Location loc,
                                      StringRef name, const MetaLayout &layout,
                                      const GpuTiling &tiling,
                                      TypeRange bindingTypes);

/// The blocks of metadata a block of buildSimtBlockBoundsKernel stages:
/// 32, or fewer where their min and max rows of `headDim` channels would
/// take more than half the shared memory.
int64_t boundsTileBlocks(int64_t headDim, const GpuTiling &tiling);

/// Quest's bound of every block for every decode row: a block per (batch,
/// kv head, tile of boundsTileBlocks blocks) stages the tile's metadata in
/// shared memory by coalesced loads, then a thread per (row of the kv
/// group, block of the tile) sums its bound, so the group's rows read the
/// metadata once. Decode's top-k computes them all in parallel before its
/// few selecting threads run. Bindings: q, meta, (key lengths or page
/// table), bounds [B, H, Lq, NB].
func::FuncOp buildSimtBlockBoundsKernel(OpBuilder &builder, Location loc,
                                        StringRef name, SelectTopKOp op,
                                        const GpuTiling &tiling,
                                        TypeRange bindingTypes);

/// One thread per (batch, head, row). Bindings: q, meta, keys [Lk, 0] (a
/// buffer that only carries the key length), blocks [B, H, Lq, top_k], heap
/// scores [B, H, Lq, max(fill, 1)] (a temporary; fill = top_k - sinks -
/// locals), and with `boundsGiven` the bounds of buildSimtBlockBoundsKernel
/// (read instead of computed).
func::FuncOp buildSimtSelectTopKKernel(OpBuilder &builder, Location loc,
                                       StringRef name, SelectTopKOp op,
                                       const GpuTiling &tiling,
                                       TypeRange bindingTypes,
                                       bool boundsGiven = false);

/// Decode's top-k after buildSimtBlockBoundsKernel, a block of
/// kRankedTopKThreads threads per (batch, head, row), so that a call's few
/// rows still spread over the GPU (a thread per row would walk all of its
/// blocks through a heap; a thread per (row, block) ranking its block
/// among all the row's would make as many compares as the square of the
/// blocks): the row's middle candidates (between the sinks and the locals) are
/// sorted in shared memory by SPEC §1.3's order (a higher bound, or an
/// equal one of an earlier block) by a bitonic network, the best `fill`
/// then by block; the sinks, those and the locals are written ascending,
/// as buildSimtSelectTopKKernel writes them, or every candidate and -1
/// padding when they fit. Bindings: q, keys [Lk, 0], bounds, blocks
/// [B, H, Lq, top_k]. The host program takes this path for rows of at most
/// rankedTopKCapacity(tiling) blocks, and the heap beyond.
constexpr int64_t kRankedTopKThreads = 1024;
/// The most blocks a row's top-k sort holds in shared memory (a bound and
/// an index each, in at most half of the chip's).
int64_t rankedTopKCapacity(const GpuTiling &tiling);
func::FuncOp buildSimtTopKRankKernel(OpBuilder &builder, Location loc,
                                     StringRef name, SelectTopKOp op,
                                     const GpuTiling &tiling,
                                     TypeRange bindingTypes);

/// Top-p in three kernels over [B, H, Lq, n] temporaries (n: the most
/// candidates of a row) of key indices (i32) and scores (f32), and a
/// [B, H, Lq, 1] count (i32).
///
/// Candidates, a block per (batch, head, row): counts the row's candidates
/// and, within a block selection, lists their keys (each thread a share of
/// the listed blocks, written after the shares before it). Bindings: q, k,
/// [blocks], keys, count.
func::FuncOp buildSimtTopPCandidatesKernel(OpBuilder &builder, Location loc,
                                           StringRef name, SelectTopPOp op,
                                           const GpuTiling &tiling,
                                           TypeRange bindingTypes);

/// Scores, a thread per (batch, head, row, slot): candidate `slot`'s score
/// (exact, or through the int4 levels), and its key where every visible
/// key is a candidate. Bindings: q, k, keys, count, scores.
func::FuncOp buildSimtTopPScoresKernel(OpBuilder &builder, Location loc,
                                       StringRef name, SelectTopPOp op,
                                       const GpuTiling &tiling,
                                       TypeRange bindingTypes);

/// Selection, a block per (batch, head, row): flagTopPKept's passes over
/// the scores, each spread over the block's threads, the kept keys written
/// ascending. Bindings: q, k, tokens, scores,
/// keys, count, then flagTopPKept's [B, H, Lq, min(n, kMaxTopPBuckets)]
/// bucket counts (i32) and weights (f64; empty when top_p = 1) and its
/// [B, H, Lq, n] sort space (i32) and flags (i8).
func::FuncOp buildSimtSelectTopPKernel(OpBuilder &builder, Location loc,
                                       StringRef name, SelectTopPOp op,
                                       const GpuTiling &tiling,
                                       TypeRange bindingTypes);

/// Sparse attention (KeyPart::All): one thread per (batch, head, row,
/// split), split s of S taking its share of the selection entries. Tree
/// attention (KeyPart::TreeNodes; a flash kernel takes the prefix): one
/// thread per (batch, head, row) walks the node's own and its ancestors'
/// keys into split S - 1. Both write split-KV partials for
/// buildSimtMergeKernel. Bindings: q, k, v, selection or parents, partial
/// o, partial lse.
func::FuncOp buildSimtGatheredSplitKernel(OpBuilder &builder, Location loc,
                                          StringRef name,
                                          const SoftmaxAttentionShape &shape,
                                          const GpuTiling &tiling,
                                          TypeRange bindingTypes,
                                          KeyPart part = KeyPart::All);

/// One thread per (batch, kv head, row, feature of k then v). Bindings: k,
/// v, path, length, k', v'.
func::FuncOp buildSimtKvCompactKernel(OpBuilder &builder, Location loc,
                                      StringRef name, const GpuTiling &tiling,
                                      TypeRange bindingTypes);

/// attn.page_meta_update's written pages (AppendedPages): one thread per
/// token, its reset step, or (`combine`, dispatched after the reset) its
/// combine step by atomic max and min. Bindings: k_cache, slots, fill,
/// leader.
func::FuncOp buildSimtAppendedPagesKernel(OpBuilder &builder, Location loc,
                                          StringRef name, bool combine,
                                          const GpuTiling &tiling,
                                          TypeRange bindingTypes);

/// attn.kv_append: one thread per (new token, kv head, feature of k then
/// v). Bindings: k_new, v_new, slots, k_cache, v_cache.
func::FuncOp buildSimtKvAppendKernel(OpBuilder &builder, Location loc,
                                     StringRef name, const GpuTiling &tiling,
                                     TypeRange bindingTypes);

/// The plan kernel of a ragged batch (RaggedPlan) on CUDA: one block of
/// `blockThreads` threads, each planning a share of the sequences through
/// RaggedPlanner after block-wide sums of what the shares need (all decode
/// keys, for the split size; the entries of the shares before it, for its
/// first entries), so that no thread walks the whole batch. Bindings as
/// buildRaggedPlanKernel's.
func::FuncOp
buildSimtRaggedPlanKernel(OpBuilder &builder, Location loc, StringRef name,
                          const SoftmaxAttentionShape &shape,
                          const RaggedPlan &plan, DictionaryAttr tiling,
                          int64_t blockThreads, TypeRange bindingTypes);

} // namespace mlir::attn

#endif // ATTN_PASSES_KERNELS_CUDA_SIMTKERNELS_H
