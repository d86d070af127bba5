//===- Passes.td - Passes of attn --------------------------*- tablegen -*-===//

#ifndef ATTN_PASSES_TD
#define ATTN_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttnFuseEpilogues : Pass<"attn-fuse-epilogues"> {
  let summary = "Fold output gates into the attention that produces their input";
  let description = [{
    Folds every epilogue op (`attn.gate`, `attn.rmsnorm_gate`: ops
    implementing EpilogueOpInterface) into the attention-like op that
    produces its input, when that op accepts the epilogue's kind
    (AttentionOpInterface::fuseEpilogue) and nothing else reads the
    un-transformed output. The fused op applies the transform to each output
    row before storing it, so no second pass reads the output.

    ```mlir
    %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : ...
    %r = attn.gate %o, %g : ...
    // becomes
    %r = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>} : ...
    ```
  }];
}

def AttnCpuDispatches : Pass<"attn-cpu-dispatches", "ModuleOp"> {
  let summary = "Split each entry into a host dispatch program and CPU kernels";
  let description = [{
    Lowers every entry function (attn ops on tensors) to

    - a host function on memrefs in destination-passing style (inputs, then
      one buffer per result; `attn.entry`, with each argument's symbolic
      shape in `attn.shape`), whose body is index arithmetic on the
      argument dims, `memref.alloc` of temporaries and `attn_kernel.dispatch` ops;
    - one kernel function per dispatch (`attn.kernel`, with the tile sizes
      in `attn.tiling`): the body of one workgroup in scf + vector + memref
      + math.

    Softmax attention (any AttentionOpInterface op with dense keys) becomes
    a flash kernel over (batch, head, query tile) that walks only the key
    tiles its mask leaves visible with the online-softmax state carried
    explicitly, and, for entries run with at most `decode-max-queries`
    query rows, split-KV partials over key ranges of `split-keys` keys
    merged through their log-sum-exp. The host picks one path per call from
    the run-time `Lq`.

    A linear recurrence (the recurrent-state normalizer) becomes one
    workgroup per (batch, value head) carrying the state: the chunked form
    (UT transform for the delta rules, masked intra-chunk products, the
    state passed from chunk to chunk) for prefill, and the step-by-step
    recurrence for calls of at most `recurrent-max-steps` steps (decode).
    When batch x value heads is smaller than the runtime's worker count
    (`attn_kernel.worker_count`), the chunked form can instead run over column
    tiles of the state (at most `state-columns` value features each), the
    host choosing whichever has the shorter critical path. Output gates
    fused into the op run in the kernels' epilogues (the rmsnorm-silu gate
    as a kernel of its own after column tiles, which hold partial rows).

    Sparse and tree attention (`attn.sparse_sdpa`, `attn.tree_sdpa`) run
    one workgroup per (batch, head, query row): the row gathers the keys
    it sees (the visible keys of its selected blocks; the prefix and its
    ancestors in the tree) and attends to them in vectors of keys with the
    online softmax. `attn.block_meta` runs per (batch, kv head, block),
    `attn.select_topk` and `attn.select_topp` per (batch, head, query row)
    (score the candidates, then a heap selects the budget),
    `attn.tree_accept` per batch row and `attn.kv_compact` per (batch, kv
    head, tile of rows). Relations between dims that signatures cannot
    state (a tree's `P + T` keys hold at least `T`) become `cf.assert`s of
    the host program; inputs that kernels index with carry a value contract
    (`attn.contract`) that the runtime checks.
  }];
  let options = [
    Option<"vectorWidth", "vector-width", "int64_t", "8",
           "f32 lanes of a vector register (8: AVX2, 16: AVX-512)">,
    Option<"queryTile", "query-tile", "int64_t", "32",
           "query rows per flash workgroup (a multiple of vector-width)">,
    Option<"keyTile", "key-tile", "int64_t", "32",
           "keys per flash step (a multiple of 4)">,
    Option<"splitKeys", "split-keys", "int64_t", "512",
           "keys per split-KV workgroup">,
    Option<"decodeMaxQueries", "decode-max-queries", "int64_t", "8",
           "calls with at most this many query rows take the split-KV path">,
    Option<"recurrentMaxSteps", "recurrent-max-steps", "int64_t", "1",
           "recurrences of at most this many steps run step by step">,
    Option<"stateColumns", "state-columns", "int64_t", "32",
           "value features of the state per column-tiled chunked workgroup">,
    Option<"bf16Dot", "bf16-dot", "bool", "false",
           "the target has AVX512-BF16: products of bf16 operands take "
           "x86vector.avx512.dot (vector-width 16 only)">,
    Option<"amxTiles", "amx-tiles", "bool", "false",
           "the target has AMX-BF16: flash attention over bf16 q, k, v "
           "takes its products on amx.tile_mulf (with bf16-dot; query-tile "
           "a multiple of 32, key-tile of 32)">,
    Option<"prefetchIntoL1", "prefetch-into-l1", "bool", "false",
           "split-KV decode requests its coming K and V rows into L1 "
           "(prefetcht0) instead of L2 (prefetcht1)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect",
    "::mlir::cf::ControlFlowDialect", "::mlir::attn::AttnKernelDialect",
    "::mlir::x86vector::X86VectorDialect", "::mlir::amx::AMXDialect"
  ];
}

def AttnMergeIdenticalKernels
    : Pass<"attn-merge-identical-kernels", "ModuleOp"> {
  let summary = "Keep one copy of kernels that differ only in their names";
  let description = [{
    Equal layers of a model lower to entries whose kernels (`attn.kernel`
    functions) are the same but for their symbol names. This pass keeps the
    first of each set of equal kernels, points every `attn_kernel.dispatch` of the
    others at it and erases them, so code generation, which costs time per
    kernel, runs once per distinct kernel (a 48-layer model of two layer
    kinds compiles the kernels of two layers). Runs after the dispatch
    passes' canonicalization, on either target's kernels.

    ```mlir
    func.func private @a__flash0(...) attributes {attn.kernel = "flash"}
    func.func private @b__flash0(...) attributes {attn.kernel = "flash"}
    attn_kernel.dispatch @b__flash0 ...
    // becomes (when the two bodies are equal)
    func.func private @a__flash0(...) attributes {attn.kernel = "flash"}
    attn_kernel.dispatch @a__flash0 ...
    ```
  }];
}

def AttnCpuKernelAbi : Pass<"attn-cpu-kernel-abi", "ModuleOp"> {
  let summary = "Give every CPU kernel the runtime's calling convention";
  let description = [{
    For every kernel function (`attn.kernel`) adds the exported function

    ```c
    void attn_kernel_<name>(void *const *buffers, const int64_t *dims,
                            int64_t workgroup);
    ```

    that the runtime calls once per workgroup: `buffers` holds one pointer
    per binding, `dims` every binding's sizes one after the other
    (row-major, contiguous buffers). It builds the memref descriptors and
    calls the kernel, which becomes private so LLVM inlines it. The host
    functions (`attn.entry`) are removed: their dispatch programs live in
    the binary, not in the CPU code.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::LLVM::LLVMDialect"
  ];
}

def AttnExpandMath : Pass<"attn-expand-math"> {
  let summary = "The math ops no LLVM lowering of a target takes, expanded";
  let description = [{
    A variant region may hold any `math` op (SPEC §7), and both targets must
    compile it. Upstream's expansions rewrite `acosh`, `asinh`, `atanh`
    and `fpowi` (which the CPU's vector lowering does not take) into ops
    every target lowers; this pass adds `clampf` (a clamp: `max(min(x,
    hi), lo)`, the definition upstream adopted after LLVM 22), `isinf`,
    `isnormal` (as comparisons of the magnitude) and `ipowi` (by squaring,
    over the exponent's bits; a negative exponent gives the integer
    1 / x^-n: 1 for x = 1, +-1 for x = -1, else 0). Scalars and vectors
    alike.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect"
  ];
}

def AttnCpuApproximateMath : Pass<"attn-cpu-approximate-math"> {
  let summary = "Polynomial approximations of exp, exp2, log and tanh";
  let description = [{
    Rewrites f32 `math` ops (scalar and vector) into the polynomial
    approximations of the upstream math dialect, so vectorized kernels do not
    call into libm one lane at a time, and `math.exp2`, which upstream does not
    approximate, into ours (2^floor(x) times a degree-5 polynomial).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def AttnGpuDispatches : Pass<"attn-gpu-dispatches", "ModuleOp"> {
  let summary = "Split each entry into a host dispatch program and CUDA kernels";
  let description = [{
    The same host functions as -attn-cpu-dispatches (destination passing,
    `attn.shape`, index arithmetic, temporaries, `attn_kernel.dispatch`), with
    CUDA kernels (`attn.kernel`, the launch shape in `attn.tiling`): a
    function `(bindings..., %workgroup: index)` in scalar scf + memref +
    math. In a thread kernel a workgroup is one CUDA thread; in a block
    kernel (`attn.block_kernel`) it is one CUDA block, whose threads run
    the thread loops (`scf.parallel {attn.threads}`, a barrier after each)
    and share the `memref.alloca {attn.shared}` buffers.

    Softmax attention runs as a flash block kernel: a block per (batch,
    head, tile of 16 query rows per warp) stages q and each key tile's k
    and v in shared memory and computes both products with `attn_kernel.warp_mma`
    (tensor cores for f16/bf16), a thread per row doing the masked online
    softmax; the tiles are the largest that fit in half of
    `max-shared-bytes`. Calls with at most `decode-max-queries` query rows
    split the keys into ranges of `split-keys` keys, one thread each, and
    merge the partials through their log-sum-exp. The gate runs in the epilogue. Linear recurrences
    run the chunked form as a block kernel, one block per (batch, value
    head, column tile), a thread per state column; the rmsnorm-silu gate
    follows as a thread kernel.

    The kernels are also valid CPU kernels (thread loops run in order,
    shared buffers on the stack), which is how their arithmetic is tested
    without a GPU; -attn-gpu-outline-kernels makes them CUDA kernels.
  }];
  let options = [
    Option<"blockThreads", "block-threads", "int64_t", "128",
           "threads per CUDA block">,
    Option<"splitKeys", "split-keys", "int64_t", "256",
           "keys per split of split-KV work">,
    Option<"decodeMaxQueries", "decode-max-queries", "int64_t", "8",
           "calls with at most this many query rows take the split-KV path">,
    Option<"maxSharedBytes", "max-shared-bytes", "int64_t", "232448",
           "shared memory a block may use (the chip's limit)">,
    Option<"flashRowTiles", "flash-row-tiles", "int64_t", "1",
           "row tiles of 16 per warp in prefill flash kernels (f16/bf16, "
           "value dims up to 128)">,
    Option<"flashWarpgroups", "flash-warpgroups", "int64_t", "0",
           "prefill flash kernels of f16/bf16 compute their products as "
           "this many warpgroups of 4 warps per block (wgmma, sm_90a): 1 or "
           "2; 0 keeps mma.sync">,
    Option<"flashProducer", "flash-producer", "bool", "false",
           "with flash-warpgroups, a producer warpgroup stages the k and v "
           "tiles for the product warpgroups through mbarriers "
           "(FlashAttention-3's warp specialization)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::math::MathDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::attn::AttnDialect",
    "::mlir::attn::AttnKernelDialect", "::mlir::cf::ControlFlowDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def AttnGpuIndexChecks : Pass<"attn-gpu-index-checks", "ModuleOp"> {
  let summary = "CUDA entries check their index inputs on the device";
  let description = [{
    For tensors in device memory, which the runtime cannot read before a
    call. Each entry with index inputs (arguments with `attn.contract`:
    page tables, offsets, slots, tree parents and paths) gets the runtime's
    record of index errors (`attn_kernel.index_status`) and, first in its
    host program, one check kernel per index input: a thread per element
    checks it against its value contract, as the runtime does on the host,
    and the first that fails records the error, the input and the element.
    Every other kernel of the entry takes the record as its last binding
    and runs its body only while the record is clear, so no kernel indexes
    memory with a value that breaks its contract.

    ```mlir
    %record = attn_kernel.index_status : memref<8xi32>
    attn_kernel.dispatch @e__check_4 workgroups(%n)
        bindings(%cu_seqlens, %q, %record) : ...
    attn_kernel.dispatch @e__flash1 workgroups(%w)
        bindings(%q, %k, %v, %cu_seqlens, %o, %record) : ...
    ```

    Runs after -attn-gpu-dispatches, before kernels are merged (each
    kernel is still dispatched by one entry).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::attn::AttnKernelDialect"
  ];
}

def AttnGpuOutlineKernels : Pass<"attn-gpu-outline-kernels", "ModuleOp"> {
  let summary = "Move the CUDA kernels into a gpu.module for NVVM";
  let description = [{
    Moves every kernel of -attn-gpu-dispatches into
    `gpu.module @attn_kernels` with an `#nvvm.target` of `chip` and
    `features`, as a `gpu.func` kernel with the same arguments where the
    last one is the dispatch's workgroup count (`gpu.known_block_size` from
    the kernel's `block_threads`). A thread kernel's body runs for the
    global thread index `blockIdx.x * blockDim.x + threadIdx.x` when it is
    below the count. A block kernel's body runs for workgroup `blockIdx.x`;
    each thread loop becomes its body for `threadIdx.x` followed by
    `gpu.barrier`, and the shared buffers become views into
    `gpu.dynamic_shared_memory` (16-byte aligned, in order).
    Host functions are removed: their dispatch programs are in the binary.

    ```mlir
    gpu.func @layer__attention0(%q: memref<?x8x?x64xf32>, ...,
                                %count: index) kernel {
      %thread = ...   // blockIdx.x * blockDim.x + threadIdx.x
      scf.if %thread < %count { ... }
      gpu.return
    }
    ```
  }];
  let options = [
    Option<"chip", "chip", "std::string", "\"sm_90a\"",
           "the SM the PTX is for">,
    Option<"features", "features", "std::string", "\"+ptx80\"",
           "PTX ISA version (LLVM NVPTX feature string)">,
  ];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect"
  ];
}

def AttnNvvmExternDynamicShared
    : Pass<"attn-nvvm-extern-dynamic-shared", "ModuleOp"> {
  let summary = "Make the dynamic shared memory symbol an external array";
  let description = [{
    convert-gpu-to-nvvm gives `gpu.dynamic_shared_memory` an internal
    zero-length global in address space 3, which the NVPTX backend prints
    as a 1-byte static shared variable placed before the dynamic part. This
    pass makes such globals external, so the PTX declares them the way CUDA
    C++ does (`.extern .shared .align 16 .b8 __dynamic_shmem__0[];`) and a
    block's shared memory is exactly its dynamic shared memory.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def AttnWarpMmaToLoops : Pass<"attn-warp-mma-to-loops"> {
  let summary = "Each lane's share of attn_kernel.warp_mma as loops";
  let description = [{
    Replaces every `attn_kernel.warp_mma` by loops that compute the calling lane's
    accumulator elements (see the op): per block of 8 columns, its 2 rows x
    2 columns, each a fused multiply-add chain over K in f32. This is the
    op's CPU lowering, and on the GPU the one for f32 and for chips without
    bf16/f16 `mma.sync` (below sm_80). An A operand of the warp's fragments
    (`lhs_fragment`) is read from the warp's register buffer, each element
    from the lane that holds it; the pass fails unless that buffer is the
    warp's view in the op's thread loop and no op of the loop writes it.
    Products are done when they run, so `attn_kernel.warpgroup_wait` is
    erased.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect"
  ];
}

def AttnWarpMmaToNvvm : Pass<"attn-warp-mma-to-nvvm"> {
  let summary = "attn_kernel.warp_mma on f16/bf16 as tensor-core mma.sync";
  let description = [{
    Lowers every f16 or bf16 `attn_kernel.warp_mma` to `nvvm.mma.sync` with shape
    m16n8k16 (row-major A, column-major B, f32 accumulators) when `chip` is
    sm_80 or newer: per 16-wide step of K the lane loads its A fragment
    once (4 pairs of elements), then per block of 8 columns its B fragment
    (2 pairs) and issues one `mma.sync` on that block's 4 accumulators,
    which stay in registers across K. Operands in shared memory whose rows
    are whole 16-byte pieces are loaded with `ldmatrix` (`nvgpu.ldmatrix`,
    four 8 x 8 matrices a warp instruction; transposed for B read down
    its columns), others a pair (or, down a column, an element) at a time.
    The code is fully unrolled. An A operand of fragments (`lhs_fragment`,
    P in registers) comes from the lane's own registers, a pair a
    register. Other ops (f32, or an older chip) get the loops of
    -attn-warp-mma-to-loops, which take A of fragments from the lanes that
    hold it with warp shuffles (`gpu.shuffle idx`).
    -attn-gpu-outline-kernels has checked that every op is directly in a
    thread loop, so the 32 lanes of a warp run it together. On sm_90a,
    `warpgroup` ops are `wgmma.mma_async` (one per 16 of K), waited for at
    once unless `async`, and `attn_kernel.warpgroup_wait` is
    `wgmma.wait_group`; both are errors on other chips.
  }];
  let options = [
    Option<"chip", "chip", "std::string", "\"sm_90a\"",
           "the SM the code is for">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect", "::mlir::LLVM::LLVMDialect",
    "::mlir::NVVM::NVVMDialect", "::mlir::nvgpu::NVGPUDialect",
    "::mlir::gpu::GPUDialect"
  ];
}

def AttnAsyncCopyToLoops : Pass<"attn-async-copy-to-loops"> {
  let summary = "attn_kernel.async_copy as a copy done at once";
  let description = [{
    Replaces every `attn_kernel.async_copy` by a vector load and store of its
    elements (or stores of zeros where it is not valid) and erases
    `attn_kernel.async_wait`: each copy is complete when the thread moves on. This
    is the CPU lowering, which runs a block's threads one after another (on
    one CPU thread, so `attn_kernel.device_fence` is erased too).

    An mbarrier's word holds its state as the GPU counts it (the arrivals
    its current phase waits for, the arrivals of a phase, the phase's
    parity, the transaction bytes it waits for, a mark that it was
    initialized): `attn_kernel.mbarrier_init` sets it,
    `attn_kernel.mbarrier_arrive` counts an arrival (and the bytes it
    announces), `attn_kernel.bulk_copy` copies at once and counts its bytes
    as landed, the phase completing when neither arrivals nor bytes are
    left, and `attn_kernel.mbarrier_wait` checks that the phase it waits
    for is complete. The CPU cannot wait for an arrival that comes later in the
    program: a wait for a phase not complete, a barrier used before it
    was initialized, an arrival beyond a phase's count and more than
    2^20 - 1 bytes in flight stop the program with a message naming the op
    on standard error (`write` and `abort` from the C library).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::LLVM::LLVMDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"
  ];
}

def AttnDeferAsyncCopies : Pass<"attn-defer-async-copies", "ModuleOp"> {
  let summary = "Test aid: the asynchronous copies of block kernels run on "
                "the CPU land as late as their waits allow";
  let description = [{
    `attn_kernel.async_copy` may complete as late as the issuing thread's
    next `attn_kernel.async_wait` that does not leave its group pending
    (`cp.async` on the GPU); on the CPU, `-attn-async-copy-to-loops` does it
    at once, so a kernel that reads a staged tile before the wait that
    completes it (a wait missing, or a `pending` count one too high, or a
    tile's copies issued into the buffer that a product still reads) finds
    the data there by chance. This pass, run before that lowering, makes
    each copy land as late as allowed: in every block kernel whose copies
    and waits are in thread loops from thread 0 to a constant, each thread
    queues its copies (their site, validity, group and indices, up to 64
    in flight: one more completes the oldest first, which the op allows),
    and each wait closes the thread's group and completes the queued copies
    of every group but the newest `pending` (an
    `attn_kernel.mbarrier_arrive after_copies` completes them all, as the
    arrival waits for them), through a function of the
    kernel's, `<kernel>__complete_copies`, that does a queued copy as the op
    at its site with the recorded indices. Until then the copy's target
    holds poison (NaN, or -1 for integers), as its contents are undefined
    on the GPU while the copy is in flight: a read before the wait gets it,
    and so does a warpgroup product still in flight that reads the target
    (which -attn-defer-warpgroup-products then reports by its result).
    Copies still queued at the kernel's end are dropped (nothing may read
    them). Bulk copies (`attn_kernel.bulk_copy`) land when issued: their
    readers wait for the barrier phase they complete, which the CPU checks
    is complete. A kernel whose
    buffers are not defined before all its copies and waits is left as it
    is.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect"
  ];
}

def AttnDeferWarpgroupProducts
    : Pass<"attn-defer-warpgroup-products", "ModuleOp"> {
  let summary = "Test aid: the results of asynchronous warpgroup products of "
                "block kernels run on the CPU appear only at their waits";
  let description = [{
    An `attn_kernel.warp_mma {warpgroup, async}` product's accumulator
    holds its result only after an `attn_kernel.warpgroup_wait` that lets
    its group complete (`wgmma.wait_group` on the GPU); on the CPU the
    product is done when it runs, so a kernel that reads an accumulator
    before that wait (a wait missing, or a `pending` count one too high)
    finds the result there by chance. This pass, run before
    `-attn-warp-mma-to-loops`, hides it: in every block kernel whose
    warpgroup products and waits are in thread loops from thread 0 to a
    constant, after each asynchronous product the thread moves its
    accumulator fragment (a contiguous part of a register buffer) to a slot
    of its queue and leaves NaN in its place; each wait, and each
    synchronous warpgroup product (which on the GPU waits for every
    product before it), moves back the fragments of every product but the
    newest `pending`, through a function of the kernel's,
    `<kernel>__complete_products`. Up to 8 products a thread are in flight;
    one more completes the oldest first.

    The CPU reads a product's operands when it issues it, the GPU at any
    time until the wait, so a kernel that writes them in flight (a stage's
    copies into a tile the product still reads, P overwritten before the
    wait for P v) also passes on the CPU by chance. The pass checks what
    the op forbids in flight and leaves NaN in the result of a product
    that broke it: the lane's own fragments of lhs (`lhs_fragment`)
    fingerprinted at the issue and at the completion; its accumulator still
    holding the NaN it was left with; and its shared operands (rhs, a
    tiled lhs), which any thread of the block may write, fingerprinted at
    the first issue by a thread of the warpgroup and again at the first
    completion after every thread of the warpgroup has issued it: a write
    in between overlaps the product on the GPU, where all its issues come
    before any completion (-attn-defer-async-copies' poison in a copy's
    target counts as a write). An operand that is not a view with static
    sizes and strides of a buffer defined before every product and wait is
    not checked.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect"
  ];
}

def AttnReorderThreadLoops : Pass<"attn-reorder-thread-loops"> {
  let summary = "Test aid: the threads of block kernels run on the CPU in "
                "another order a GPU may take";
  let description = [{
    The CPU runs a block kernel's thread loops (`scf.parallel {attn.threads}`)
    one after another, each one thread after another, first to last; a GPU
    runs the threads at once, and a warp runs on past a loop that only
    waits for its own warp (`attn.warp_sync`) while other warps are still
    in it. A kernel whose threads race (a thread reads what another thread
    writes before the barrier that orders them) reads the written value or
    not depending on that order. This pass runs them in another order a GPU
    may take, so that such a kernel computes something else than without
    it, and its tests fail one way or the other:

     * a run of thread loops that only wait for their warps, up to and
       with the next thread loop, goes warp by warp, last warp first:
       each warp through all of the run's loops before the next warp
       begins;
     * each thread loop takes its threads last to first.

    In a block kernel (`attn.block_kernel`, its last argument the block),
    only the even blocks reverse; the odd blocks go warp by warp, first warp
    first, each loop's threads first to last. In a kernel of two blocks or
    more, a race then reads what the other thread has not written yet in
    one block or the other, whichever thread it is the reader (poison, with
    `-attn-poison-kernel-buffers`).

    Run after `-attn-warp-mma-to-loops` (which needs the loops' own thread
    index).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect"
  ];
}

def AttnPoisonKernelBuffers : Pass<"attn-poison-kernel-buffers"> {
  let summary = "Test aid: block kernels run on the CPU start with NaN in "
                "their shared and register buffers";
  let description = [{
    A GPU block starts with whatever its shared memory and registers held
    before; on the CPU, a block kernel's buffers (`memref.alloca
    {attn.shared}`, `{attn.registers}`) are stack memory that often holds
    the previous block's values, the very ones a kernel that reads an
    element it never wrote would want. This pass fills each such buffer,
    where the kernel allocates it, with NaN (floats) or -1 (integers), so
    that such a kernel computes NaN or reads out of bounds instead.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect"
  ];
}

def AttnReportBankConflicts : Pass<"attn-report-bank-conflicts"> {
  let summary = "Test aid: the shared-memory wavefronts of the CUDA block "
                "kernels' accesses, where they take more than they need";
  let description = [{
    Shared memory serves a warp's access in wavefronts of at most one 4-byte
    word per bank of 32 (accesses of 8 or 16 bytes a lane in phases of 16
    or 8 lanes); lanes that touch different words of one bank take a
    wavefront each (a bank conflict), lanes that touch the same word share
    it. A kernel with such conflicts computes the right answer, so no test
    of results sees them, and no GPU is needed to find them: this pass
    finds them in the block kernels of -attn-gpu-dispatches, before
    outlining.

    For each access to an `attn.shared` buffer in a thread loop
    (`memref.load` / `store`, `vector.load` / `store`, the target of
    `attn_kernel.async_copy`) it evaluates the byte each thread of the block
    addresses on the access's first execution (the thread loop's index as
    the thread, the first iteration of loops inside it, values from outside
    the thread loop that are not constants as 0: a uniform shift changes no
    conflict), leaves out the threads whose `scf.if` conditions or loop
    bounds say they skip it, and counts each warp's wavefronts. It emits a
    remark on each access that takes more than the fewest its bytes need
    (with `all`, on every access it can evaluate), with the times the loops
    around it in its thread loop run it, and on each kernel a
    summary: how many accesses were evaluated, how many take more, and
    how many could not be evaluated (an address from a value the thread
    loads). The operands of `attn_kernel.warp_mma` (`ldmatrix`, or wgmma's
    descriptors) are not counted.
  }];
  let options = [
    Option<"all", "all", "bool", /*default=*/"false",
           "a remark on every evaluated access, not only the conflicted">
  ];
}

def AttnAsyncCopyToNvvm : Pass<"attn-async-copy-to-nvvm"> {
  let summary = "attn_kernel.async_copy as cp.async";
  let description = [{
    On sm_80 and newer, lowers every `attn_kernel.async_copy` to
    `nvgpu.device_async_copy` (PTX `cp.async`, `.cg` for 16 bytes), whose
    source size is 0 where the copy is not valid so that the target gets
    zeros, and every `attn_kernel.async_wait` to `cp.async.commit_group` and
    `cp.async.wait_group 0`, and every `attn_kernel.device_fence` to
    `membar.gl`. Runs after -attn-gpu-outline-kernels, which
    puts the shared buffers in workgroup memory. Older chips get the plain
    copies of -attn-async-copy-to-loops.

    The mbarrier ops and bulk copies (sm_90 and newer, which have
    `mbarrier.try_wait` and `cp.async.bulk`; an error on the op below)
    become `mbarrier.init.shared.b64`, `mbarrier.arrive.shared.b64` (or
    `cp.async.mbarrier.arrive.noinc.shared.b64` for an arrival after the
    thread's copies, `mbarrier.arrive.expect_tx.shared.b64` for one that
    announces bytes), `mbarrier.try_wait.parity.shared.b64`, retried until
    the phase is complete, on the barrier's word in shared memory, and
    `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`
    into the cluster's window of the block's shared memory (the
    `shared::cta` form needs PTX 8.6).
  }];
  let options = [
    Option<"chip", "chip", "std::string", "\"sm_90a\"",
           "the SM the code is for">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect"
  ];
}

#endif // ATTN_PASSES_TD
