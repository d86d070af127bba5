//===- AttnKernelOps.td - Ops below the dispatch boundary --*- tablegen -*-===//
//
// The ops that exist only after entry lowering: the host side of a lowered
// entry (dispatches and the worker count) and the primitives its kernels
// are built from (a warp's matrix product, asynchronous copies). They are
// kept apart from the user-facing attn ops, which state what to compute;
// these say how a target runs it.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_KERNEL_OPS_TD
#define ATTN_KERNEL_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "AttnKernelDialect.td"

//===----------------------------------------------------------------------===//
// Host side of a lowered entry
//===----------------------------------------------------------------------===//

def AttnKernel_WorkerCountOp : AttnKernel_Op<"worker_count", [Pure]> {
  let summary = "the number of workers that run a dispatch's workgroups";
  let description = [{
    Read by a host program to size its grids: how many workgroups can run
    at once (the CPU runtime's thread count; on a GPU, 4 blocks per
    multiprocessor: runtime/HostProgram.h's
    kCudaWorkersPerMultiprocessor). Work is split finer only when there are fewer natural
    workgroups than workers.

    ```mlir
    %workers = attn_kernel.worker_count : index
    ```
  }];
  let results = (outs Index:$count);
  let assemblyFormat = "attr-dict `:` type($count)";
}

def AttnKernel_DispatchOp : AttnKernel_Op<"dispatch", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "runs a kernel over a grid of workgroups";
  let description = [{
    The host side of a lowered entry is a sequence of dispatches. A dispatch
    runs the kernel function `kernel` once per workgroup id in
    `[0, workgroups)`, in any order and possibly in parallel, each call
    receiving every buffer of `bindings` and its workgroup id as the last
    argument. The CPU runtime runs the workgroups on its thread pool; a GPU
    launch uses them as the grid. Dispatches run one after the other.

    ```mlir
    attn_kernel.dispatch @layer__flash workgroups(%n) bindings(%q, %k, %v, %o)
        : memref<?x8x?x64xf32>, memref<?x2x?x64xf32>, memref<?x2x?x64xf32>,
          memref<?x8x?x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel, Index:$workgroups,
                       Variadic<AnyMemRef>:$bindings);
  let assemblyFormat = [{
    $kernel `workgroups` `(` $workgroups `)` `bindings` `(` $bindings `)`
    attr-dict `:` type($bindings)
  }];
}

def AttnKernel_IndexStatusOp : AttnKernel_Op<"index_status", [Pure]> {
  let summary = "the runtime's record of index errors found on the device";
  let description = [{
    Read by a host program whose kernels check index inputs on the device
    (-attn-gpu-index-checks): the buffer is not allocated by the call but
    bound by the runtime. It holds nothing (zeros) until a check kernel
    finds an index input that breaks its value contract; then the first
    such check writes the error, the entry, the input, the element and its
    value (`IndexError` in runtime/schemas/attnb.fbs), and every other
    kernel of the entry skips its work while the record is set, so no
    kernel reads or writes memory through a bad index. The runtime turns a
    set record into an error at the next synchronisation.

    ```mlir
    %status = attn_kernel.index_status : memref<8xi32>
    ```
  }];
  let results = (outs StaticShapeMemRefOf<[I32]>:$record);
  let hasVerifier = 1;
  let assemblyFormat = "attr-dict `:` type($record)";
  let extraClassDeclaration = [{
    /// The i32 fields of the record (IndexError's layout).
    static constexpr int64_t kFields = 8;
  }];
}

//===----------------------------------------------------------------------===//
// Inside kernels
//===----------------------------------------------------------------------===//

def AttnKernel_WarpMmaOp : AttnKernel_Op<"warp_mma"> {
  let summary = "one lane's share of a warp's 16-row matrix product";
  let description = [{
    Used by block kernels (passes/SimtKernels.h) for the matrix products of
    a tile that lives in shared buffers. The 32 lanes of a warp together
    compute, for `i` in [0, 16) and `j` in [0, n),

      acc[row + i, j] = (accumulate ? acc[row + i, j] : 0)
                        + sum_{l < k} lhs[row + i, l] * B[l, j]

    where `B` is `rhs` read as [k, n] (`B[l, j] = rhs[l, j]`), or as [n, k]
    when `rhs_transposed` is set (`B[l, j] = rhs[j, l]`). Buffers may be
    wider than the product (rows padded so that threads reading down a
    column hit different shared-memory banks); only the first `k` (`n`)
    columns are used. They may be views (`memref.subview`) of a part of
    one, e.g. a warp's range of columns: `ldmatrix` then needs each row of
    the view to start 16-byte aligned, which a static offset is checked
    for and a dynamic one must keep (a multiple of 8 16-bit elements).
    Lane `lane` (in [0, 32)) computes and writes exactly
    the elements that PTX's `mma.m16n8k16` gives it in each block of 8
    columns (the accumulator fragment): rows `lane / 4` and
    `lane / 4 + 8`, columns `2 * (lane % 4)` and `2 * (lane % 4) + 1`. It
    reads only its own elements of `acc`, so lanes never race on it.

    That per-lane meaning makes one op two things: on the GPU, when the 32
    lanes of a warp run it together, `-attn-warp-mma-to-nvvm` lowers it to
    tensor-core `mma.sync` instructions (f16 and bf16 on sm_80 and newer;
    f32 as three tf32 products of each operand's high and low parts, about
    f32's precision; older chips get the same products as fused
    multiply-adds); on
    the CPU, `-attn-warp-mma-to-loops` lowers each lane's share to loops,
    which is how the GPU kernels are tested without a GPU.

    With `row_tiles` = T > 1 the warp computes T such products, of rows
    `row + 16 t` to `row + 16 t + 15` for t in [0, T), each lane the same
    elements of each; on the tensor cores every fragment of B is then
    loaded once for the T products (FlashAttention-2's 32 rows per warp
    halve the shared-memory reads of k and v per mma).

    With `acc_fragment`, `acc` is not a shared tile but the lane's own
    fragment, held in its registers (a view of a `memref.alloca
    {attn.registers}` at the thread, SimtKernels.h): `acc` is [T n / 8, 4]
    and `acc[t n / 8 + b, 2 h + e]` stands for the element of row `row +
    16 t + lane / 4 + 8 h`, column `8 b + 2 (lane % 4) + e` above. The accumulators of a
    flash kernel stay in registers across its key tiles this way, as in
    FlashAttention-2.

    With `lhs_fragment`, `lhs` is not a shared tile either but the warp's
    accumulator fragments of an earlier product (FlashAttention-2 keeps P
    in registers this way, from the scores' fragments to P v): `lhs` is
    [32, T k / 8, 4], lane `l`'s fragment at `lhs[l]`, a view of a register
    buffer at the warp's first thread (SimtKernels.h), so that `lhs[row +
    16 t + i, j]` above is `lhs[4 (i % 8) + (j % 8) / 2, t k / 8 + j / 8,
    2 (i / 8) + j % 2]`. On the CPU each lane reads its quad's fragments
    from the buffer, so the enclosing thread loop must not write it (the
    lanes run one after another there); on the GPU, after the outliner has
    made the buffer per-thread, `lhs` is the lane's own [T k / 8, 4]: the
    tensor cores take their A operand from it directly (one conversion per
    pair of elements), the loops form through warp shuffles. Its elements
    are f32, rounded to `rhs`'s element type for the tensor cores (exact for
    values rounded so before).

    With `warpgroup`, the four warps of an aligned warpgroup (threads 128 g
    to 128 g + 127 of the block) run the op together, warp w of the group
    with `row` = R + 16 w for one R, so that on sm_90a the tensor cores
    compute the group's 64 rows [R, R + 64) as one warpgroup product
    (`wgmma.mma_async`, FlashAttention-3's instruction), reading its shared
    operands where they are instead of loading fragments into registers
    first. Each lane still computes exactly its elements above, so the CPU
    lowering is unchanged. The shared operands are then *core-matrix
    tiled*: a buffer [r / 8, c / 8, 8, 8] holds the [r, c] tile with
    element (i, j) at [i / 8, j / 8, i % 8, j % 8], so that each 8 x 8 core
    matrix is 128 contiguous bytes, the layout wgmma's descriptors name
    without swizzling (PTX ISA, "Shared Memory Matrix Layout"): rhs's K is
    then K-major when `rhs_transposed` (a k tile [keys, d]) and N-major
    otherwise (a v tile [keys, d] read as [k, n]). `acc` must be a fragment
    (`acc_fragment`) and `row_tiles` 1; lhs is a tiled buffer or the warp's
    fragments (wgmma takes A from registers with the same per-warp layout as
    mma.m16n8k16); f16 or bf16; `n` at most 256.

    With `async` (warpgroup products only), the op issues its products as
    the warpgroup's newest group and returns without waiting for them
    (FlashAttention-3 issues the next tile's scores and this tile's P V
    before the softmax that overlaps them): `acc` holds the products only
    after an `attn_kernel.warpgroup_wait` that lets the group complete, and
    until then the lane must not read or write `acc` nor write `lhs`'s
    fragments, and no thread may write the shared operands (on the GPU the
    tensor cores still read and write them). On the CPU the products are
    done when the op runs (`-attn-defer-warpgroup-products` hides their
    results until the wait and checks these rules in stressed runs).

    `lhs` and `rhs` have the same element type (f16, bf16 or f32; f32
    fragments with `lhs_fragment`), `acc` is f32; `k` is a multiple of 16
    and `n` of 8.

    ```mlir
    // S[r .. r + 16, 0 .. 64] = Q[r .., 0 .. 128] * K[0 .. 64, 0 .. 128]^T
    attn_kernel.warp_mma %qs, %ks, %scores rows(%r) lane(%lane) n(64) k(128)
        {rhs_transposed}
        : memref<64x136xbf16>, memref<64x136xbf16>, memref<64x65xf32>
    // The lane's share of O[r .. r + 16, 0 .. 128] += P V, in registers.
    attn_kernel.warp_mma %ps, %vs, %o rows(%r) lane(%lane) n(128) k(64)
        {acc_fragment, accumulate}
        : memref<64x66xbf16>, memref<64x136xbf16>,
          memref<16x4xf32, strided<[4, 1], offset: ?>>
    // The same with P in the warp's registers (its 32 lanes' fragments).
    attn_kernel.warp_mma %p, %vs, %o rows(%r) lane(%lane) n(128) k(64)
        {acc_fragment, accumulate, lhs_fragment}
        : memref<32x8x4xf32, strided<[32, 4, 1], offset: ?>>,
          memref<64x136xbf16>, memref<16x4xf32, strided<[4, 1], offset: ?>>
    ```
  }];
  let arguments = (ins AnyMemRef:$lhs, AnyMemRef:$rhs, AnyMemRef:$acc,
                       Index:$row, Index:$lane, I64Attr:$n, I64Attr:$k,
                       UnitAttr:$rhs_transposed, UnitAttr:$accumulate,
                       UnitAttr:$acc_fragment, UnitAttr:$lhs_fragment,
                       DefaultValuedAttr<I64Attr, "1">:$row_tiles,
                       UnitAttr:$warpgroup, UnitAttr:$async);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $acc `rows` `(` $row `)` `lane` `(` $lane `)`
    `n` `(` $n `)` `k` `(` $k `)` attr-dict
    `:` type($lhs) `,` type($rhs) `,` type($acc)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Rows of the product (the m of mma.m16n8k16).
    static constexpr int64_t kRows = 16;
    /// Columns of one accumulator fragment and the reduction step.
    static constexpr int64_t kFragmentColumns = 8, kReductionStep = 16;
    /// The lanes of a warp.
    static constexpr int64_t kWarpLanes = 32;
    /// The warps of a warpgroup, and the widest wgmma product.
    static constexpr int64_t kWarpgroupWarps = 4, kMaxWarpgroupColumns = 256;
    /// The side of a core matrix of a tiled shared operand.
    static constexpr int64_t kCoreMatrixSide = 8;
    /// The element type of the products: lhs's, or rhs's when lhs is a
    /// fragment (f32 values rounded to it for the tensor cores).
    Type getProductType() {
      return (getLhsFragment() ? getRhs() : getLhs())
          .getType().getElementType();
    }
  }];
}

def AttnKernel_AsyncCopyOp : AttnKernel_Op<"async_copy", [AttrSizedOperandSegments]> {
  let summary = "one thread's asynchronous copy of a few elements into a "
                "shared buffer";
  let description = [{
    Used by block kernels (passes/SimtKernels.h) to stage tiles in shared
    buffers. Copies the `elements` consecutive elements (4, 8 or 16 bytes in
    all) at `source[source_indices]` along its last dimension to
    `target[target_indices]`, or writes that many zeros there when `valid`
    is false (the source is then not read, so its indices may be out of
    bounds). Both addresses must be aligned to the copy's size, as
    `cp.async` requires (the flash kernels copy 16-byte pieces of rows that
    are whole 16-byte pieces). The copy may complete late: the thread sees the data after its
    next `attn_kernel.async_wait`, other threads after a barrier that follows it.

    A thread can so have all its copies of a tile in flight at once. On the
    GPU, `-attn-async-copy-to-nvvm` lowers the op to `cp.async` (through
    `nvgpu.device_async_copy`, with a source size of 0 for the zeros) and
    `attn_kernel.async_wait` to a commit and a wait of the thread's copies; on the
    CPU, `-attn-async-copy-to-loops` makes it a plain copy at once.

    ```mlir
    attn_kernel.async_copy %k[%b, %h, %key, %d], %ks[%j, %d] if(%inRange)
        elements(8) : memref<?x?x?x128xbf16>, memref<64x136xbf16>
    attn_kernel.async_wait
    ```
  }];
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$source_indices,
                       AnyMemRef:$target, Variadic<Index>:$target_indices,
                       I1:$valid, I64Attr:$elements);
  let assemblyFormat = [{
    $source `[` $source_indices `]` `,` $target `[` $target_indices `]`
    `if` `(` $valid `)` `elements` `(` $elements `)` attr-dict
    `:` type($source) `,` type($target)
  }];
  let hasVerifier = 1;
}

def AttnKernel_AsyncWaitOp : AttnKernel_Op<"async_wait"> {
  let summary = "waits for the calling thread's attn_kernel.async_copy ops";
  let description = [{
    After it, the data of every `attn_kernel.async_copy` the thread issued before
    is in the target buffers (see that op).

    With `pending = N`, the copies issued since the thread's previous wait
    form a group, and the wait lets the thread's newest N groups complete
    later (`cp.async.wait_group N`): a kernel that stages tile j + 1 before
    waiting with `pending = 1` has tile j's data while tile j + 1's copies
    stay in flight (a two-stage pipeline).

    With `async_proxy`, the thread's writes to shared memory before it (its
    copies and its plain stores) are also made visible to the tensor cores'
    warpgroup products (`attn_kernel.warp_mma {warpgroup}`) that run after a
    barrier that follows it: wgmma reads shared memory through the async
    proxy, which on the GPU takes `fence.proxy.async.shared::cta` after the
    writes.
  }];
  let arguments = (ins UnitAttr:$async_proxy,
                       DefaultValuedAttr<I64Attr, "0">:$pending);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def AttnKernel_WarpgroupWaitOp : AttnKernel_Op<"warpgroup_wait"> {
  let summary = "waits for the warpgroup's asynchronous products";
  let description = [{
    Run by the four warps of a warpgroup together: after it, every
    `attn_kernel.warp_mma {warpgroup, async}` the warpgroup issued before
    is complete but its newest `pending` ones (`wgmma.wait_group N` on
    sm_90a), so their accumulators may be read. On the CPU the products
    are complete when issued and the op is erased.

    ```mlir
    // The scores issued first are done; P V, issued after them, may not be.
    attn_kernel.warpgroup_wait {pending = 1}
    ```
  }];
  let arguments = (ins DefaultValuedAttr<I64Attr, "0">:$pending);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// mbarriers: point-to-point synchronization between a block's threads
//===----------------------------------------------------------------------===//

def AttnKernel_MbarrierInitOp : AttnKernel_Op<"mbarrier_init"> {
  let summary = "initializes an mbarrier for `arrivals` arrivals per phase";
  let description = [{
    mbarriers let the threads of a block wait for one another without
    stopping the whole block: a producer warp that stages tiles and
    consumer warps that read them (FlashAttention-3's warp specialisation)
    each wait only for the phase of the barrier guarding the tile they
    need. A barrier counts the arrivals of its current phase; the phase
    completes when `arrivals` threads have arrived
    (`attn_kernel.mbarrier_arrive`), and the next phase begins with the
    same count. Phases are numbered from 0; waits name a phase by its
    parity (`attn_kernel.mbarrier_wait`).

    `barriers` is a shared buffer of i64, one word per barrier (the GPU's
    layout). One thread initializes each barrier, before a block-wide
    barrier (the end of a thread loop) after which the others use it.
    `arrivals` is in [1, 2^20 - 1], the GPU's range.

    On the GPU this is `mbarrier.init.shared.b64`; on the CPU, where the
    CUDA kernels' bodies are tested, the word holds the emulated state
    (see `-attn-async-copy-to-loops`).

    ```mlir
    attn_kernel.mbarrier_init %full[%stage] arrivals(128) : memref<2xi64>
    ```
  }];
  let arguments = (ins AnyMemRef:$barriers, Index:$index, I64Attr:$arrivals);
  let assemblyFormat = [{
    $barriers `[` $index `]` `arrivals` `(` $arrivals `)` attr-dict
    `:` type($barriers)
  }];
  let extraClassDeclaration = [{
    /// The GPU's limit on arrivals per phase.
    static constexpr int64_t kMaxArrivals = (1 << 20) - 1;
  }];
  let hasVerifier = 1;
}

def AttnKernel_MbarrierArriveOp : AttnKernel_Op<"mbarrier_arrive"> {
  let summary = "the calling thread's arrival at an mbarrier's current phase";
  let description = [{
    Counts one arrival at the current phase of `barriers[index]` (see
    `attn_kernel.mbarrier_init`); the arrival that completes the count
    completes the phase. What the thread wrote before arriving is visible
    to the threads whose wait for that phase returns after it.

    With `after_copies`, the arrival happens when every
    `attn_kernel.async_copy` the thread issued before it has landed, not
    at once: a producer stages a tile and arrives without waiting for its
    copies, and the consumers' wait for the phase returns with the tile in
    place (`cp.async.mbarrier.arrive.noinc.shared.b64` on the GPU; the
    arrival counts towards `arrivals`).

    With `expect_bytes(%n)`, the phase also waits for `%n` more bytes of
    `attn_kernel.bulk_copy`s that complete on the barrier
    (`mbarrier.arrive.expect_tx.shared.b64`): it completes once its
    arrivals are all in and those bytes have landed, whichever comes last
    (a phase may wait for at most 2^20 - 1 bytes in flight).

    ```mlir
    attn_kernel.mbarrier_arrive %full[%stage] after_copies : memref<2xi64>
    attn_kernel.mbarrier_arrive %full[%stage] expect_bytes(%tileBytes)
        : memref<2xi64>
    attn_kernel.mbarrier_arrive %empty[%stage] : memref<2xi64>
    ```
  }];
  let arguments = (ins AnyMemRef:$barriers, Index:$index,
                       UnitAttr:$after_copies, Optional<Index>:$expect_bytes);
  let assemblyFormat = [{
    $barriers `[` $index `]` (`after_copies` $after_copies^)?
    (`expect_bytes` `(` $expect_bytes^ `)`)? attr-dict `:` type($barriers)
  }];
  let hasVerifier = 1;
}

def AttnKernel_BulkCopyOp : AttnKernel_Op<"bulk_copy", [AttrSizedOperandSegments]> {
  let summary = "one thread's bulk copy of a row into a shared buffer, "
                "completing on an mbarrier";
  let description = [{
    Copies the `elements` consecutive elements at `source[source_indices]`
    along its last dimension to `target[target_indices]` (a multiple of 16
    bytes, both addresses 16-byte aligned) by the copy engine, not the
    thread's loads and stores: one thread issues a whole row of a tile
    (a key row of 256 bytes, where `attn_kernel.async_copy` takes 16
    threads' 16 bytes). The bytes count towards the transaction bytes of
    the current phase of `barriers[index]`, which its arrivals announce
    (`attn_kernel.mbarrier_arrive expect_bytes`): the threads whose wait for
    that phase returns see the row in place.

    On the GPU this is `cp.async.bulk.shared::cluster.global.mbarrier::
    complete_tx::bytes` (sm_90 and newer); on the CPU a copy done at once,
    then its bytes counted on the barrier's emulated state
    (`-attn-async-copy-to-loops`).

    ```mlir
    attn_kernel.bulk_copy %k[%b, %h, %key, %c0], %ks[%row, %c0] elements(128)
        on(%full[%stage]) : memref<?x?x?x128xbf16>, memref<64x136xbf16>,
        memref<2xi64>
    ```
  }];
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$source_indices,
                       AnyMemRef:$target, Variadic<Index>:$target_indices,
                       I64Attr:$elements, AnyMemRef:$barriers, Index:$index);
  let assemblyFormat = [{
    $source `[` $source_indices `]` `,` $target `[` $target_indices `]`
    `elements` `(` $elements `)` `on` `(` $barriers `[` $index `]` `)`
    attr-dict `:` type($source) `,` type($target) `,` type($barriers)
  }];
  let extraClassDeclaration = [{
    /// The bytes the copy moves.
    int64_t getBytes() {
      return getElements() *
             getSource().getType().getElementType().getIntOrFloatBitWidth() / 8;
    }
  }];
  let hasVerifier = 1;
}

def AttnKernel_MbarrierWaitOp : AttnKernel_Op<"mbarrier_wait"> {
  let summary = "waits for the phase of an mbarrier of the given parity";
  let description = [{
    Returns once the phase of `barriers[index]` whose parity is the low
    bit of `parity` has completed (`mbarrier.try_wait.parity.shared.b64`,
    retried until it succeeds, on the GPU): the current phase if its parity
    is `parity`, else the phase before it, which is complete. A pipeline of
    S stages waits for tile j's stage `j % S` with parity `(j / S) % 2`.
    What the arriving threads wrote before their arrivals, and the copies
    they arrived after (`after_copies`), are then visible to the thread.

    On the CPU a block's thread loops run one after another, so a wait
    there can only see arrivals made before it: the CUDA kernels are
    written so that the arrivals a wait needs come in earlier thread loops
    (or earlier in its own thread), and the CPU lowering stops the program
    with a message naming the wait where its phase is not complete (on the
    GPU that thread would wait for a later loop's arrivals).

    ```mlir
    attn_kernel.mbarrier_wait %full[%stage] parity(%round) : memref<2xi64>
    ```
  }];
  let arguments = (ins AnyMemRef:$barriers, Index:$index, Index:$parity);
  let assemblyFormat = [{
    $barriers `[` $index `]` `parity` `(` $parity `)` attr-dict
    `:` type($barriers)
  }];
  let hasVerifier = 1;
}

def AttnKernel_DeviceFenceOp : AttnKernel_Op<"device_fence"> {
  let summary = "orders the thread's memory accesses for the whole device";
  let description = [{
    The calling thread's global memory accesses before the fence are
    performed, as seen by every thread of the device, before those after
    it (`membar.gl` on the GPU). Blocks that hand results to one another
    through global memory and a `memref.atomic_rmw` counter (the last block
    of a decode row's splits merges them) fence before the count and after
    reading it. On the CPU a block runs on one thread, whose atomics' own
    acquire-release order does the same, and the fence is dropped.

    ```mlir
    attn_kernel.device_fence
    ```
  }];
  let assemblyFormat = "attr-dict";
}

#endif // ATTN_KERNEL_OPS_TD
