// RUN: attn-opt %s -split-input-file -attn-gpu-dispatches -canonicalize -cse | FileCheck %s

// Sparsity and trees on CUDA: thread kernels whose per-row buffers are
// temporaries of the host program (no device-side heap); sparse attention
// split like decode and tree attention in parts (the prefix by a flash
// kernel, each node's tree keys by a thread), then merged by the decode
// merge kernel.

// Top-k keeps its heap's scores in a [B, H, Lq, fill] temporary (fill =
// top_k - sinks - locals = 2); its block indices live in the output row.
// Prefill: a thread per row scores its blocks and selects. Decode (Lq <= 8):
// a thread per (row, block) writes Quest's bounds to a [B, H, Lq, NB]
// temporary; then, up to 8192 blocks (as many bounds and indices as fit in
// half of the shared memory), a block of 1024 threads per row sorts them
// in shared memory and writes the kept ones, else the selecting threads
// read the bounds into their heaps. A row's
// min(top_k, NB) slots are split 16 blocks (256 keys' worth of entries) a
// split in decode.
// CHECK-LABEL: func.func private @topk__select_topk0(
// CHECK-SAME:    memref<?x4x?x16xf32>, %{{.*}}: memref<?x2x?x2x16xf32>, %{{.*}}: memref<?x0xi32>, %{{.*}}: memref<?x4x?x?xi32>, %{{.*}}: memref<?x4x?x?xf32>, %{{.*}}: index)
// CHECK-SAME:    attn.kernel = "select_topk"
// CHECK-SAME:    attn.tiling = {block_threads = 128 : i64
// CHECK:         memref.load %arg1
// CHECK:         scf.while
// The bounds: the tile's min and max rows of metadata staged in shared
// memory (rows padded to D + 1), then a bound per (row, block).
// CHECK-LABEL: func.func private @topk__block_bounds1(
// CHECK-SAME:    %{{.*}}: memref<?x4x?x16xf32>, %{{.*}}: memref<?x2x?x2x16xf32>, %{{.*}}: memref<?x0xi32>, %{{.*}}: memref<?x4x?x?xf32>, %{{.*}}: index)
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "block_bounds"
// CHECK:         %[[STAGED:.*]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<2x32x17xf32>
// CHECK:         scf.parallel
// CHECK:           memref.load %arg1
// CHECK:           memref.store %{{.*}}, %[[STAGED]]
// CHECK:         scf.parallel
// CHECK:           memref.load %[[STAGED]]
// CHECK:           arith.maximumf
// CHECK:           memref.store %{{.*}}, %arg3
// CHECK-LABEL: func.func private @topk__select_topk2(
// CHECK-SAME:    %{{.*}}: memref<?x4x?x?xf32>, %{{.*}}: memref<?x4x?x?xf32>, %{{.*}}: index)
// CHECK-SAME:    attn.kernel = "select_topk"
// The bounds are read, not computed: the metadata is never loaded.
// CHECK-NOT:     memref.load %arg1
// CHECK:         memref.load %arg5
// CHECK-NOT:     memref.load %arg1
// The rank: the row's middle candidates (bound, index) in shared memory,
// padded to a power of 2 (the first above the candidates, up to 8192),
// sorted by a bitonic network whose stages are loops of log2 of that many
// stages, each an exchange of the pairs i, i ^ stride over the block's
// threads; then the best fill = 2 sorted by block and written after the
// sinks.
// CHECK-LABEL: func.func private @topk__topk_rank3(
// CHECK-SAME:    %{{.*}}: memref<?x4x?x16xf32>, %{{.*}}: memref<?x0xi32>, %{{.*}}: memref<?x4x?x?xf32>, %{{.*}}: memref<?x4x?x?xi32>, %{{.*}}: index)
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "topk_rank"
// CHECK-SAME:    block_threads = 1024
// CHECK-DAG:     %[[SCORES:.*]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<8192xf32>
// CHECK-DAG:     %[[ORDER:.*]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<8192xi32>
// CHECK:         arith.cmpi ugt, %{{.*}}, %c4096 : index
// CHECK:         %[[COUNT:.*]] = arith.shli %c1, %{{.*}} : index
// CHECK:         scf.parallel
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[COUNT]] step %c1024
// CHECK:             memref.load %arg2
// CHECK:             memref.store %{{.*}}, %[[SCORES]]
// CHECK:             memref.store %{{.*}}, %[[ORDER]]
// CHECK:         scf.for %[[SPAN:.*]] = %c1 to
// CHECK:           scf.for %{{.*}} = %c0 to %[[SPAN]] step %c1
// CHECK:             scf.parallel
// CHECK:               arith.xori
// CHECK:               memref.load %[[SCORES]]
// CHECK:               memref.load %[[ORDER]]
// CHECK:               memref.store %{{.*}}, %[[ORDER]]
// CHECK:         memref.load %[[ORDER]]
// CHECK:         memref.store %{{.*}}, %arg3
// Sparse attention: decode calls (Lq <= 8) run decode's flash kernel, a
// block per (row, split); longer calls a thread per row.
// CHECK-LABEL: func.func private @topk__sparse_decode4(
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "flash_decode"
// CHECK-SAME:    block_threads = 32
// The split's blocks, each counted once in its row, are listed by one
// thread in shared memory (256 keys' worth: 16 entries of 16 keys at
// most); their keys are staged by the whole block.
// CHECK:         %[[LISTED:.*]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16xi32>
// CHECK:         scf.parallel
// CHECK:           scf.if
// CHECK:             memref.load %arg3
// CHECK:             memref.store %{{.*}}, %[[LISTED]]
// CHECK:         } {attn.threads}
// CHECK:         scf.for
// CHECK:             memref.load %[[LISTED]]
// CHECK:             attn_kernel.async_copy %arg1
// CHECK:           attn_kernel.warp_mma
// CHECK-LABEL: func.func private @topk__sparse_split5(
// CHECK-SAME:    attn.kernel = "sparse_split"
// CHECK-LABEL: func.func private @topk__merge6(
// CHECK-LABEL: func.func @topk(
// CHECK:         %[[LK:.*]] = memref.dim %arg1, %c2
// CHECK:         %[[LQ:.*]] = memref.dim %arg0, %c2
// CHECK:         %[[ROWS_FIT:.*]] = arith.cmpi ule, %[[LQ]], %[[LK]]
// CHECK:         cf.assert %[[ROWS_FIT]], "attn.select_topk: a causal mask needs at most as many query rows as keys (Lq <= Lk: query i sits at position Lk - Lq + i)"
// CHECK:         %[[NB:.*]] = memref.dim %arg3, %c2
// CHECK:         cf.assert %{{.*}}, "attn.select_topk: dim 2 of 'meta' must be ceil(key_length / 16), the blocks of the keys"
// CHECK:         %[[B:.*]] = memref.dim %arg0, %c0
// A row's slots, and its heap of the fill = 2 best middle blocks, are
// capped by the blocks the keys have.
// CHECK:         %[[SLOTS:.*]] = arith.minsi %[[NB]], %c4
// CHECK:         %[[BLOCKS:.*]] = memref.alloc(%[[B]], %[[LQ]], %[[SLOTS]]) : memref<?x4x?x?xi32>
// CHECK:         %[[BH:.*]] = arith.muli %[[B]], %c4
// CHECK:         %[[ROWS:.*]] = arith.muli %[[BH]], %[[LQ]]
// CHECK:         %[[FILL:.*]] = arith.minsi %[[NB]], %c2
// CHECK:         %[[HEAP_SIZE:.*]] = arith.maxsi %[[FILL]], %c1
// CHECK:         %[[HEAP:.*]] = memref.alloc(%[[B]], %[[LQ]], %[[HEAP_SIZE]]) : memref<?x4x?x?xf32>
// CHECK:         %[[DECODE:.*]] = arith.cmpi ule, %[[LQ]], %c8
// CHECK:         %[[RANKABLE:.*]] = arith.cmpi ule, %[[NB]], %c8192
// CHECK:         %[[BOUND_ROWS:.*]] = arith.select %[[DECODE]], %[[LQ]], %c0
// CHECK:         %[[BOUNDS:.*]] = memref.alloc(%[[B]], %[[BOUND_ROWS]], %[[NB]]) : memref<?x4x?x?xf32>
// CHECK:         %[[PREFILL_ROWS:.*]] = arith.select %[[DECODE]], %c0, %[[ROWS]]
// CHECK:         attn_kernel.dispatch @topk__select_topk0 workgroups(%[[PREFILL_ROWS]]) bindings(%arg0, %arg3, %{{.*}}, %[[BLOCKS]], %[[HEAP]])
// The bounds: a block per (batch, kv head, tile of 32 blocks) in decode.
// CHECK:         %[[TILES:.*]] = arith.ceildivui %[[NB]], %c32
// CHECK:         %[[BKV:.*]] = arith.muli %[[B]], %c2
// CHECK:         %[[BOUND_BLOCKS:.*]] = arith.muli %[[BKV]], %[[TILES]]
// CHECK:         %[[DECODE_BOUND_BLOCKS:.*]] = arith.select %[[DECODE]], %[[BOUND_BLOCKS]], %c0
// CHECK:         attn_kernel.dispatch @topk__block_bounds1 workgroups(%[[DECODE_BOUND_BLOCKS]]) bindings(%arg0, %arg3, %{{.*}}, %[[BOUNDS]])
// CHECK:         %[[LONG_ROWS:.*]] = arith.select %[[RANKABLE]], %c0, %[[ROWS]]
// CHECK:         %[[HEAP_ROWS:.*]] = arith.select %[[DECODE]], %[[LONG_ROWS]], %c0
// CHECK:         attn_kernel.dispatch @topk__select_topk2 workgroups(%[[HEAP_ROWS]]) bindings(%arg0, %arg3, %{{.*}}, %[[BLOCKS]], %[[HEAP]], %[[BOUNDS]])
// Ranking: a block per decode row of at most 8192 blocks.
// CHECK:         %[[SHORT_ROWS:.*]] = arith.select %[[RANKABLE]], %[[ROWS]], %c0
// CHECK:         %[[RANK_BLOCKS:.*]] = arith.select %[[DECODE]], %[[SHORT_ROWS]], %c0
// CHECK:         attn_kernel.dispatch @topk__topk_rank3 workgroups(%[[RANK_BLOCKS]]) bindings(%arg0, %{{.*}}, %[[BOUNDS]], %[[BLOCKS]])
// Decode splits: at most 16 entries (256 keys) each, more (down to a
// 64-key tile's 4 entries each) while the rows' splits are fewer than the
// workers (on a GPU, 4 blocks per multiprocessor).
// CHECK:         %[[MOST:.*]] = arith.ceildivui %[[SLOTS]], %c4
// CHECK:         %[[SLOT_SPLITS:.*]] = arith.ceildivui %[[SLOTS]], %c16
// CHECK:         %[[UNSPLIT:.*]] = arith.maxsi %[[ROWS]], %c1
// CHECK-NEXT:    %[[WORKERS:.*]] = attn_kernel.worker_count
// CHECK-NEXT:    %[[FILLING:.*]] = arith.ceildivui %[[WORKERS]], %[[UNSPLIT]]
// CHECK-NEXT:    %[[FILL:.*]] = arith.minsi %[[FILLING]], %[[MOST]]
// CHECK-NEXT:    %[[LEAST:.*]] = arith.maxsi %[[SLOT_SPLITS]], %c1
// CHECK-NEXT:    %[[SPLITS:.*]] = arith.maxsi %[[LEAST]], %[[FILL]]
// CHECK-NEXT:    %[[DECODE_SPLITS:.*]] = arith.select %[[DECODE]], %[[SPLITS]], %c1
// CHECK:         memref.alloc(%[[B]], %[[LQ]], %[[DECODE_SPLITS]]) : memref<?x4x?x?x16xf32>
// CHECK:         %[[SPLIT_ROWS:.*]] = arith.muli %[[ROWS]], %[[DECODE_SPLITS]]
// CHECK:         %[[DECODE_ROWS:.*]] = arith.select %[[DECODE]], %[[SPLIT_ROWS]], %c0
// CHECK:         attn_kernel.dispatch @topk__sparse_decode4 workgroups(%[[DECODE_ROWS]]) bindings(%arg0, %arg1, %arg2, %[[BLOCKS]], %{{.*}}, %{{.*}})
// CHECK:         %[[PREFILL_SPLIT_ROWS:.*]] = arith.select %[[DECODE]], %c0, %[[SPLIT_ROWS]]
// CHECK:         attn_kernel.dispatch @topk__sparse_split5 workgroups(%[[PREFILL_SPLIT_ROWS]]) bindings(%arg0, %arg1, %arg2, %[[BLOCKS]], %{{.*}}, %{{.*}})
// The merge: a thread per (row, feature).
// CHECK:         %[[MERGE:.*]] = arith.muli %[[ROWS]], %c16
// CHECK:         attn_kernel.dispatch @topk__merge6 workgroups(%[[MERGE]]) bindings(%{{.*}}, %{{.*}}, %arg4)
func.func @topk(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                %v: tensor<?x2x?x16xf32>, %meta: tensor<?x2x?x2x16xf32>)
    -> tensor<?x4x?x16xf32> {
  %c2 = arith.constant 2 : index
  %lk = tensor.dim %k, %c2 : tensor<?x2x?x16xf32>
  %blocks = attn.select_topk %q, %meta, %lk {block_size = 16, top_k = 4,
      sink_blocks = 1, local_blocks = 1, mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x2x16xf32>
  %o = attn.sparse_sdpa %q, %k, %v, %blocks
      {block_size = 16, mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
        tensor<?x4x?x?xi32>
  return %o : tensor<?x4x?x16xf32>
}

// -----

// Token selections of up to 600 tokens: decode calls (Lq <= 8) split them
// at most 256 entries a block of decode's flash kernel (3 splits), more
// (down to 64 entries, 10 splits) while the rows would not fill the
// workers; longer calls take one split per row, a thread each.
// CHECK-LABEL: func.func private @tokens__sparse_decode0(
// CHECK-SAME:    attn.kernel = "flash_decode"
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<256xi32>
// CHECK-LABEL: func.func @tokens(
// CHECK:         %[[LQ:.*]] = memref.dim %arg0, %c2
// CHECK:         %[[ROWS:.*]] = arith.muli %{{.*}}, %[[LQ]]
// CHECK:         %[[DECODE:.*]] = arith.cmpi ule, %[[LQ]], %c8
// CHECK:         %[[UNSPLIT:.*]] = arith.maxsi %[[ROWS]], %c1
// CHECK:         %[[WORKERS:.*]] = attn_kernel.worker_count
// CHECK:         %[[FILLING:.*]] = arith.ceildivui %[[WORKERS]], %[[UNSPLIT]]
// CHECK:         %[[FILL:.*]] = arith.minsi %[[FILLING]], %c10
// CHECK:         %[[FILLED:.*]] = arith.maxsi %[[FILL]], %c3
// CHECK:         %[[SPLITS:.*]] = arith.select %[[DECODE]], %[[FILLED]], %c1
// CHECK:         memref.alloc(%{{.*}}, %[[LQ]], %[[SPLITS]]) : memref<?x4x?x?x16xf32>
// CHECK:         %[[WORK:.*]] = arith.muli %[[ROWS]], %[[SPLITS]]
// CHECK:         %[[BLOCKS:.*]] = arith.select %[[DECODE]], %[[WORK]], %c0
// CHECK:         attn_kernel.dispatch @tokens__sparse_decode0 workgroups(%[[BLOCKS]])
// CHECK:         %[[THREADS:.*]] = arith.select %[[DECODE]], %c0, %[[WORK]]
// CHECK:         attn_kernel.dispatch @tokens__sparse_split1 workgroups(%[[THREADS]])
func.func @tokens(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                  %v: tensor<?x2x?x16xf32>, %tokens: tensor<?x4x?x600xi32>)
    -> tensor<?x4x?x16xf32> {
  %o = attn.sparse_sdpa %q, %k, %v, %tokens
      {block_size = 1, mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
        tensor<?x4x?x600xi32>
  return %o : tensor<?x4x?x16xf32>
}

// -----

// Top-p runs in three kernels over [B, H, Lq, n] temporaries, n =
// max(Lk, 1) here: a block per row counts (and within a block selection
// lists) its candidates; a thread per (row, candidate) scores one; a block
// per row selects among them with min(n, 4096) buckets' counts and f64
// weights, the sort space of one bucket and i8 flags, sorting one bucket
// (a heap sort), not the row.
// CHECK-LABEL: func.func private @topp__topp_candidates0(
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "topp_candidates"
// CHECK:         memref.store %{{.*}}, %arg3[%{{.*}}, %{{.*}}, %{{.*}}, %c0] : memref<?x4x?x1xi32>
// CHECK-LABEL: func.func private @topp__topp_scores1(
// CHECK-SAME:    attn.kernel = "topp_scores"
// The slot is the thread's fastest part; slots past the count do nothing.
// CHECK:         %[[SLOTS:.*]] = memref.dim %arg2, %c3
// CHECK:         %[[SLOT:.*]] = arith.remui %arg5, %[[SLOTS]]
// CHECK:         %[[COUNT:.*]] = arith.index_cast %{{.*}} : i32 to index
// CHECK:         %[[IN:.*]] = arith.cmpi ult, %[[SLOT]], %[[COUNT]]
// CHECK:         scf.if %[[IN]] {
// CHECK:           memref.load %arg1
// CHECK:           memref.store %{{.*}}, %arg4
// The selection is a block per row: each thread takes a share of the
// candidates and of the buckets, counts and weighs its candidates into
// their buckets by atomic adds, and walks its buckets from the sums of the
// shares before it; one thread sorts a cut bucket.
// CHECK-LABEL: func.func private @topp__select_topp2(
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "select_topp"
// CHECK-NOT:     memref.load %arg1
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<128xf64>
// CHECK:         scf.parallel
// CHECK:         memref.atomic_rmw addi %{{.*}}, %arg6[{{.*}}] : (i32, memref<?x4x?x?xi32>) -> i32
// CHECK:         memref.atomic_rmw addf %{{.*}}, %arg7[{{.*}}] : (f64, memref<?x4x?x?xf64>) -> f64
// CHECK:         scf.parallel
// CHECK:         memref.load %{{.*}} : memref<?x4x?x?xf64>
// CHECK:         scf.while
// CHECK-LABEL: func.func @topp(
// CHECK-SAME:    %arg2: memref<?x4x?x?xi32> {attn.shape = ["B", 4, "Lq", "Lk"]}
// CHECK:         %[[LK:.*]] = memref.dim %arg1, %c2
// CHECK:         %[[LQ:.*]] = memref.dim %arg0, %c2
// CHECK:         %[[ROWS_FIT:.*]] = arith.cmpi ule, %[[LQ]], %[[LK]]
// CHECK:         cf.assert %[[ROWS_FIT]], "attn.select_topp: a causal mask needs
// CHECK:         %[[BH:.*]] = arith.muli %{{.*}}, %c4
// CHECK:         %[[ROWS:.*]] = arith.muli %[[BH]], %{{.*}}
// CHECK:         %[[N:.*]] = arith.maxsi %[[LK]], %c1
// CHECK:         %[[NB:.*]] = arith.minsi %[[N]], %c4096
// CHECK:         %[[SCORES:.*]] = memref.alloc(%{{.*}}, %{{.*}}, %[[N]]) : memref<?x4x?x?xf32>
// CHECK:         %[[KEYS:.*]] = memref.alloc(%{{.*}}, %{{.*}}, %[[N]]) : memref<?x4x?x?xi32>
// CHECK:         %[[COUNT:.*]] = memref.alloc(%{{.*}}, %{{.*}}) : memref<?x4x?x1xi32>
// CHECK:         %[[SIZES:.*]] = memref.alloc(%{{.*}}, %{{.*}}, %[[NB]]) : memref<?x4x?x?xi32>
// CHECK:         %[[WEIGHTS:.*]] = memref.alloc(%{{.*}}, %{{.*}}, %[[NB]]) : memref<?x4x?x?xf64>
// CHECK:         %[[ORDER:.*]] = memref.alloc(%{{.*}}, %{{.*}}, %[[N]]) : memref<?x4x?x?xi32>
// CHECK:         %[[KEPT:.*]] = memref.alloc(%{{.*}}, %{{.*}}, %[[N]]) : memref<?x4x?x?xi8>
// CHECK:         attn_kernel.dispatch @topp__topp_candidates0 workgroups(%[[ROWS]]) bindings(%arg0, %arg1, %[[KEYS]], %[[COUNT]])
// CHECK:         %[[PAIRS:.*]] = arith.muli %[[ROWS]], %[[N]]
// CHECK:         attn_kernel.dispatch @topp__topp_scores1 workgroups(%[[PAIRS]]) bindings(%arg0, %arg1, %[[KEYS]], %[[COUNT]], %[[SCORES]])
// CHECK:         attn_kernel.dispatch @topp__select_topp2 workgroups(%[[ROWS]]) bindings(%arg0, %arg1, %arg2, %[[SCORES]], %[[KEYS]], %[[COUNT]], %[[SIZES]], %[[WEIGHTS]], %[[ORDER]], %[[KEPT]])
func.func @topp(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>)
    -> tensor<?x4x?x?xi32> {
  %t = attn.select_topp %q, %k {top_p = 0.9, mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>
  return %t : tensor<?x4x?x?xi32>
}

// -----

// Within a top-k selection of 6 blocks of 32 keys a row has at most 192
// candidates: the temporaries are [B, H, Lq, max(min(Lk, 192), 1)], not Lk
// wide (a prefill row after top-k would otherwise need Lq x Lk of them).
// CHECK-LABEL: func.func @topp_in_blocks(
// CHECK:         %[[LK:.*]] = memref.dim %arg1, %c2
// CHECK:         %[[CAP:.*]] = arith.minsi %[[LK]], %c192
// CHECK:         %[[N:.*]] = arith.maxsi %[[CAP]], %c1
// CHECK:         memref.alloc(%{{.*}}, %{{.*}}, %[[N]]) : memref<?x4x?x?xf32>
// CHECK:         memref.alloc(%{{.*}}, %{{.*}}, %[[N]]) : memref<?x4x?x?xi32>
func.func @topp_in_blocks(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
    %blocks: tensor<?x4x?x6xi32>) -> tensor<?x4x?x?xi32> {
  %t = attn.select_topp %q, %k blocks(%blocks)
      {top_p = 0.9, block_size = 32, mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x4x?x6xi32>
  return %t : tensor<?x4x?x?xi32>
}

// -----

// top_p = 1 with a cap keeps the best max_tokens by score alone: the
// bucket weights are never read, and their temporary is empty.
// CHECK-LABEL: func.func @topp_capped(
// CHECK:         memref.alloc(%{{.*}}, %{{.*}}) : memref<?x4x?x0xf64>
func.func @topp_capped(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>)
    -> tensor<?x4x?x8xi32> {
  %t = attn.select_topp %q, %k {top_p = 1.0, max_tokens = 8,
      mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>
  return %t : tensor<?x4x?x8xi32>
}

// -----

// Tree attention: the prefix, which every node sees, goes through a flash
// kernel into the first S - 1 splits, and a thread per node walks its tree
// keys into split S - 1. More than 8 nodes: query tiles of 64 nodes per
// head, S = 2. At most 8: decode's flash kernel over ceil(P / 256) (at
// least 1) prefix splits, a block per (batch, kv head, tile of the group's
// 2 heads x T nodes, 16 rows, split).
// CHECK-LABEL: func.func private @tree__tree_prefix0(
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "flash_tree_prefix"
// CHECK-LABEL: func.func private @tree__small_tree_prefix1(
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "flash_decode_tree_prefix"
// CHECK-SAME:    query_tile = 16
// The prefix splits are the partials' S - 1.
// CHECK:         %[[S:.*]] = memref.dim %arg4, %c3
// CHECK:         arith.subi %[[S]], %c1
// CHECK-LABEL: func.func private @tree__tree_nodes2(
// CHECK-SAME:    attn.kernel = "tree_nodes"
// CHECK:         scf.while
// CHECK-LABEL: func.func @tree(
// CHECK-SAME:    %arg3: memref<?x?xi32> {attn.contract = "tree_parents", attn.shape = ["B", "T"]}
// CHECK:         %[[B:.*]] = memref.dim %arg0, %c0
// CHECK:         %[[T:.*]] = memref.dim %arg0, %c2
// CHECK:         %[[LK:.*]] = memref.dim %arg1, %c2
// CHECK:         cf.assert
// CHECK:         %[[ROWS:.*]] = arith.muli %{{.*}}, %[[T]]
// CHECK:         %[[LESS:.*]] = arith.subi %[[LK]], %[[T]]
// CHECK:         %[[P:.*]] = arith.maxsi %[[LESS]], %c0
// CHECK:         %[[MANY:.*]] = arith.cmpi ugt, %[[T]], %c8
// CHECK:         %[[C:.*]] = arith.ceildivui %[[P]], %c256
// CHECK:         %[[SMALL_PS:.*]] = arith.maxsi %[[C]], %c1
// CHECK:         %[[PS:.*]] = arith.select %[[MANY]], %c1, %[[SMALL_PS]]
// CHECK:         %[[S:.*]] = arith.addi %[[PS]], %c1
// CHECK:         memref.alloc(%{{.*}}, %[[T]], %[[S]]) : memref<?x4x?x?x8xf32>
// CHECK:         %[[TILES:.*]] = arith.ceildivui %[[T]], %c64
// CHECK:         %[[BLOCKS:.*]] = arith.muli %{{.*}}, %[[TILES]]
// CHECK:         %[[FLASH:.*]] = arith.select %[[MANY]], %[[BLOCKS]], %c0
// CHECK:         attn_kernel.dispatch @tree__tree_prefix0 workgroups(%[[FLASH]])
// CHECK:         %[[PACKED:.*]] = arith.muli %[[T]], %c2
// CHECK:         %[[ROW_TILES:.*]] = arith.ceildivui %[[PACKED]], %c16
// CHECK:         %[[BKV:.*]] = arith.muli %[[B]], %c2
// CHECK:         %[[PER_SPLIT:.*]] = arith.muli %[[BKV]], %[[ROW_TILES]]
// CHECK:         %[[SMALL:.*]] = arith.muli %[[PER_SPLIT]], %[[PS]]
// CHECK:         %[[SMALL_BLOCKS:.*]] = arith.select %[[MANY]], %c0, %[[SMALL]]
// CHECK:         attn_kernel.dispatch @tree__small_tree_prefix1 workgroups(%[[SMALL_BLOCKS]])
// CHECK:         attn_kernel.dispatch @tree__tree_nodes2 workgroups(%[[ROWS]])
// CHECK:         %[[MERGE:.*]] = arith.muli %[[ROWS]], %c8
// CHECK:         attn_kernel.dispatch @tree__merge3 workgroups(%[[MERGE]])
func.func @tree(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                %v: tensor<?x2x?x8xf32>, %parents: tensor<?x?xi32>)
    -> tensor<?x4x?x8xf32> {
  %o = attn.tree_sdpa %q, %k, %v, %parents
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x8xf32>,
        tensor<?x?xi32>
  return %o : tensor<?x4x?x8xf32>
}

// -----

// With a window a node's first prefix key depends on its depth: both
// flash kernels of the prefix also bind the parents.
// CHECK-LABEL: func.func private @window_tree__tree_prefix0(
// CHECK-SAME:    %{{.*}}: memref<?x?xi32>,
// CHECK-SAME:    attn.kernel = "flash_tree_prefix"
// CHECK-LABEL: func.func private @window_tree__small_tree_prefix1(
// CHECK-SAME:    %{{.*}}: memref<?x?xi32>,
// CHECK-SAME:    attn.kernel = "flash_decode_tree_prefix"
// CHECK-LABEL: func.func @window_tree(
// CHECK:         attn_kernel.dispatch @window_tree__tree_prefix0 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2, %arg3,
// CHECK:         attn_kernel.dispatch @window_tree__small_tree_prefix1 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2, %arg3,
func.func @window_tree(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                       %v: tensor<?x2x?x8xf32>, %parents: tensor<?x?xi32>)
    -> tensor<?x4x?x8xf32> {
  %o = attn.tree_sdpa %q, %k, %v, %parents {window = 100}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x8xf32>,
        tensor<?x?xi32>
  return %o : tensor<?x4x?x8xf32>
}

// -----

// Metadata: a thread per (batch, kv head, block, channel), channels
// fastest. Compaction: a thread per (batch, kv head, row, feature of k
// then v: 16 + 8). Acceptance: the CPU's scalar kernel, a thread per row.
// CHECK-LABEL: func.func private @meta__block_meta0(
// CHECK:         arith.remui %arg2, %c16
// CHECK-LABEL: func.func @meta(
// CHECK:         %[[NB:.*]] = memref.dim %arg1, %c2
// CHECK:         %[[B:.*]] = memref.dim %arg1, %c0
// CHECK:         %[[BH:.*]] = arith.muli %[[B]], %c2
// CHECK:         %[[BLOCKS:.*]] = arith.muli %[[BH]], %[[NB]]
// CHECK:         %[[THREADS:.*]] = arith.muli %[[BLOCKS]], %c16
// CHECK:         attn_kernel.dispatch @meta__block_meta0 workgroups(%[[THREADS]])
func.func @meta(%k: tensor<?x2x?x16xf32>) -> tensor<?x2x?x2x16xf32> {
  %m = attn.block_meta %k {block_size = 16} : tensor<?x2x?x16xf32>
  return %m : tensor<?x2x?x2x16xf32>
}

// CHECK-LABEL: func.func private @compact__kv_compact0(
// CHECK:         arith.remui %arg6, %c24
// CHECK-LABEL: func.func @compact(
// CHECK:         %[[BH:.*]] = arith.muli %{{.*}}, %c2
// CHECK:         %[[ROWS:.*]] = arith.muli %[[BH]], %{{.*}}
// CHECK:         %[[THREADS:.*]] = arith.muli %[[ROWS]], %c24
// CHECK:         attn_kernel.dispatch @compact__kv_compact0 workgroups(%[[THREADS]])
func.func @compact(%k: tensor<?x2x?x16xf32>, %v: tensor<?x2x?x8xf32>,
                   %path: tensor<?x?xi32>, %length: tensor<?xi32>)
    -> (tensor<?x2x?x16xf32>, tensor<?x2x?x8xf32>) {
  %k2, %v2 = attn.kv_compact %k, %v, %path, %length
      : tensor<?x2x?x16xf32>, tensor<?x2x?x8xf32>, tensor<?x?xi32>,
        tensor<?xi32>
  return %k2, %v2 : tensor<?x2x?x16xf32>, tensor<?x2x?x8xf32>
}

// CHECK-LABEL: func.func private @accept__tree_accept0(
// CHECK-SAME:    attn.kernel = "tree_accept"
// CHECK-SAME:    attn.tiling = {block_threads = 128 : i64
// CHECK-LABEL: func.func @accept(
// CHECK:         %[[B:.*]] = memref.dim %arg0, %c0
// CHECK:         attn_kernel.dispatch @accept__tree_accept0 workgroups(%[[B]])
func.func @accept(%tokens: tensor<?x?xi32>, %target: tensor<?x?xi32>,
                  %parents: tensor<?x?xi32>)
    -> (tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) {
  %path, %length, %bonus = attn.tree_accept %tokens, %target, %parents
      : tensor<?x?xi32>, tensor<?x?xi32>, tensor<?x?xi32>
  return %path, %length, %bonus : tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>
}

// -----

// attn.page_meta_update on CUDA: a thread per token resets its page's fill
// and leader, then (the next dispatch) combines its offset and index into
// them by atomics; then a thread per (token, kv head, channel), idle
// unless its token leads its page.
// CHECK-LABEL: func.func private @refresh__appended_pages_reset1(
// CHECK-SAME:    attn.kernel = "appended_pages_reset"
// CHECK-NOT:     memref.atomic_rmw
// CHECK-LABEL: func.func private @refresh__appended_pages2(
// CHECK-SAME:    attn.kernel = "appended_pages"
// CHECK:         memref.atomic_rmw maxs
// CHECK:         memref.atomic_rmw mins
// CHECK-LABEL: func.func private @refresh__page_meta_update0(
// CHECK-SAME:    attn.kernel = "block_meta"
// CHECK:         scf.if
// CHECK:           scf.for
// CHECK:             arith.minimumf
// CHECK-LABEL: func.func @refresh(
// CHECK:         %[[TOKENS:.*]] = memref.dim %arg1, %c0
// CHECK:         attn_kernel.dispatch @refresh__appended_pages_reset1 workgroups(%[[TOKENS]])
// CHECK:         attn_kernel.dispatch @refresh__appended_pages2 workgroups(%[[TOKENS]])
// CHECK:         %[[THREADS:.*]] = arith.muli %{{.*}}, %c16 : index
// CHECK:         attn_kernel.dispatch @refresh__page_meta_update0 workgroups(%[[THREADS]])
func.func @refresh(%kc: tensor<?x4x2x8xf32>, %slots: tensor<?xi32>,
                   %meta: tensor<?x2x2x8xf32> {attn.in_place})
    -> tensor<?x2x2x8xf32> {
  %meta2 = attn.page_meta_update %kc, %slots into %meta
      : tensor<?x4x2x8xf32>, tensor<?xi32>, tensor<?x2x2x8xf32>
  return %meta2 : tensor<?x2x2x8xf32>
}
