// RUN: attn-opt %s -split-input-file -attn-cpu-dispatches -verify-diagnostics | FileCheck %s

// Quest top-k then sparse attention: the metadata's block count is a dim
// derived from Lk, which the host program also asserts against the key
// length the selection is given; the kernel reads that length as the size
// of an empty buffer. A selection workgroup per (batch, kv head, row),
// which bounds its candidates and keeps its budget; fewer of them than
// threads bound theirs first, a workgroup per chunk of 128 candidates,
// into bounds [selections, 2 heads, NB], then keep their budgets from it.
// Sparse attention: a workgroup per (batch, head, row).

// CHECK-LABEL: func.func private @topk__select_topk0(
// CHECK-SAME:    memref<?x4x?x16xf32>, %{{.*}}: memref<?x2x?x2x16xf32>, %{{.*}}: memref<?x0xi32>, %{{.*}}: memref<?x4x?x?xi32>, %{{.*}}: memref<?x2x?xf32>, %{{.*}}: index)
// CHECK-SAME:    attn.kernel = "select_topk"
// A head's bound is sum(q+ max + q- min): the query split into its
// positive and negative parts once, then two FMAs per channel vector, while
// the metadata of the block 4 ahead (clamped to the last) is requested.
// CHECK:         %[[POS:.*]] = arith.maximumf %{{.*}}, %{{.*}} : f32
// CHECK:         memref.store %[[POS]], %[[QS:.*]][%{{.*}}, %c0, %{{.*}}] : memref<2x2x16xf32>
// CHECK:         %[[NEG:.*]] = arith.minimumf %{{.*}}, %{{.*}} : f32
// CHECK:         memref.store %[[NEG]], %[[QS]][%{{.*}}, %c1, %{{.*}}] : memref<2x2x16xf32>
// CHECK:         %[[TO_LAST:.*]] = arith.subi %{{.*}}, %c1 : index
// CHECK:         %[[LAST:.*]] = arith.addi %{{.*}}, %[[TO_LAST]] : index
// CHECK:         scf.for %{{.*}} = %c0 to %{{.*}} step %c1 {
// CHECK:           %[[BLOCK:.*]] = arith.addi
// CHECK:           %[[AHEAD:.*]] = arith.addi %[[BLOCK]], %c4
// CHECK:           %[[CLAMPED:.*]] = arith.minsi %[[AHEAD]], %[[LAST]]
// CHECK:           memref.prefetch %arg1[%{{.*}}, %{{.*}}, %[[CLAMPED]], %{{.*}}, %{{.*}}], read, locality<2>, data
// CHECK:           %[[LO:.*]] = vector.load %arg1[%{{.*}}, %{{.*}}, %[[BLOCK]], %c0, %{{.*}}]
// CHECK:           %[[HI:.*]] = vector.load %arg1[%{{.*}}, %{{.*}}, %[[BLOCK]], %c1, %{{.*}}]
// CHECK:           %[[QPOS:.*]] = vector.load %[[QS]]
// CHECK:           %[[PART:.*]] = vector.fma %[[QPOS]], %[[HI]], %{{.*}} : vector<8xf32>
// CHECK:           %[[QNEG:.*]] = vector.load %[[QS]]
// CHECK:           vector.fma %[[QNEG]], %[[LO]], %[[PART]] : vector<8xf32>
// CHECK-NOT:       arith.maximumf
// CHECK:           memref.prefetch %arg1[%{{.*}}, %{{.*}}, %[[CLAMPED]]
// The heap that keeps the budget sifts down in an scf.while.
// CHECK:         scf.while
// CHECK:         memref.dealloc
// The bounds of a chunk: workgroup = (selection, chunk), the chunk
// fastest; its candidates [128 c, min(128 c + 128, middle)), each kv
// head's bounds stored at [selection, head, candidate].
// CHECK-LABEL: func.func private @topk__block_bounds1(
// CHECK-SAME:    %[[BOUNDS_ARG:arg4]]: memref<?x2x?xf32>, %[[WG:arg5]]: index)
// CHECK-SAME:    attn.kernel = "block_bounds"
// CHECK:         %[[NB_DIM:.*]] = memref.dim %[[BOUNDS_ARG]], %c2
// CHECK:         %[[CHUNKS:.*]] = arith.ceildivui %[[NB_DIM]], %c128
// CHECK:         %[[SELECTION:.*]] = arith.divui %[[WG]], %[[CHUNKS]]
// CHECK:         %[[CHUNK:.*]] = arith.remui %[[WG]], %[[CHUNKS]]
// CHECK:         %[[FROM:.*]] = arith.muli %[[CHUNK]], %c128
// CHECK:         scf.if
// CHECK:           scf.for %[[N:.*]] = %[[FROM]] to %{{.*}} step %c1
// CHECK:             memref.prefetch %arg1
// CHECK:             vector.fma
// CHECK:             memref.store %{{.*}}, %[[BOUNDS_ARG]][%[[SELECTION]], %{{.*}}, %[[N]]] : memref<?x2x?xf32>
// CHECK-NOT:     scf.while
// The budget from the bounds: no metadata read, the heap ranks bounds[wg].
// CHECK-LABEL: func.func private @topk__select_topk2(
// CHECK-SAME:    %[[BOUNDS_IN:arg4]]: memref<?x2x?xf32>, %[[SEL_WG:arg5]]: index)
// CHECK-SAME:    attn.kernel = "select_topk"
// CHECK-NOT:     vector.load %arg1
// CHECK:         scf.while
// CHECK:           memref.load %[[BOUNDS_IN]][%[[SEL_WG]], %{{.*}}, %{{.*}}] : memref<?x2x?xf32>
// CHECK-LABEL: func.func private @topk__sparse3(
// CHECK-SAME:    attn.kernel = "sparse_attention"
// CHECK-LABEL: func.func @topk(
// CHECK-SAME:    %[[META:arg3]]: memref<?x2x?x2x16xf32> {attn.shape = ["B", 2, {ceil_div = 16 : i64, of = "Lk"}, 2, 16]}
// CHECK:         %[[LK:.*]] = memref.dim %arg1, %c2
// CHECK:         %[[NB:.*]] = arith.ceildivui %[[LK]], %c16
// CHECK:         %[[HAS:.*]] = memref.dim %[[META]], %{{.*}}
// CHECK:         %[[OK:.*]] = arith.cmpi eq, %[[HAS]], %[[NB]]
// CHECK:         cf.assert %[[OK]], "attn.select_topk: dim 2 of 'meta' must be ceil(key_length / 16), the blocks of the keys"
// CHECK:         %[[CARRIER:.*]] = memref.alloc(%[[LK]]) : memref<?x0xi32>
// CHECK:         %[[BLOCKS:.*]] = memref.alloc({{.*}}) : memref<?x4x?x?xi32>
// CHECK:         %[[BATCH_ROWS:.*]] = arith.muli
// CHECK:         %[[SELECTIONS:.*]] = arith.muli %[[BATCH_ROWS]], %c2
// CHECK:         %[[WORKERS:.*]] = attn_kernel.worker_count : index
// CHECK:         %[[CHUNKED:.*]] = arith.cmpi ult, %[[SELECTIONS]], %[[WORKERS]]
// CHECK:         %[[MAX_BLOCKS:.*]] = memref.dim %[[META]], %c2
// CHECK:         %[[BOUND_ROWS:.*]] = arith.select %[[CHUNKED]], %[[SELECTIONS]], %c0
// CHECK:         %[[BOUNDS:.*]] = memref.alloc(%[[BOUND_ROWS]], %[[MAX_BLOCKS]]) : memref<?x2x?xf32>
// CHECK:         %[[WHOLE:.*]] = arith.select %[[CHUNKED]], %c0{{.*}}, %[[SELECTIONS]]
// CHECK:         attn_kernel.dispatch @topk__select_topk0 workgroups(%[[WHOLE]]) bindings(%arg0, %[[META]], %[[CARRIER]], %[[BLOCKS]], %[[BOUNDS]])
// CHECK:         %[[CHUNKS:.*]] = arith.ceildivui %[[MAX_BLOCKS]], %c128
// CHECK:         %[[CHUNK_GROUPS:.*]] = arith.muli %[[SELECTIONS]], %[[CHUNKS]]
// CHECK:         %[[BOUND_GROUPS:.*]] = arith.select %[[CHUNKED]], %[[CHUNK_GROUPS]], %c0
// CHECK:         attn_kernel.dispatch @topk__block_bounds1 workgroups(%[[BOUND_GROUPS]]) bindings(%arg0, %[[META]], %[[CARRIER]], %[[BLOCKS]], %[[BOUNDS]])
// CHECK:         %[[SELECT_GROUPS:.*]] = arith.select %[[CHUNKED]], %[[SELECTIONS]], %c0
// CHECK:         attn_kernel.dispatch @topk__select_topk2 workgroups(%[[SELECT_GROUPS]]) bindings(%arg0, %[[META]], %[[CARRIER]], %[[BLOCKS]], %[[BOUNDS]])
// CHECK:         attn_kernel.dispatch @topk__sparse3 workgroups({{.*}}) bindings(%arg0, %arg1, %arg2, %[[BLOCKS]], %arg4)
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

// Block metadata: an output whose block count the runtime computes from Lk.

// CHECK-LABEL: func.func private @meta__block_meta0(
// CHECK-SAME:    attn.kernel = "block_meta"
// CHECK:         arith.minimumf
// CHECK:         arith.maximumf
// CHECK-LABEL: func.func @meta(
// CHECK-SAME:    {attn.shape = ["B", 2, "Lk", 24]}
// CHECK-SAME:    {attn.name = "kmeta", attn.shape = ["B", 2, {ceil_div = 5 : i64, of = "Lk"}, 2, 24]}
// A workgroup per (batch, kv head, block) of the output.
// CHECK:         %[[NB:.*]] = memref.dim %arg1, %c2
// CHECK:         %[[GROUPS:.*]] = arith.muli %{{.*}}, %[[NB]]
// CHECK:         attn_kernel.dispatch @meta__block_meta0 workgroups(%[[GROUPS]]) bindings(%arg0, %arg1)
func.func @meta(%k: tensor<?x2x?x24xf32>)
    -> (tensor<?x2x?x2x24xf32> {attn.name = "kmeta"}) {
  %m = attn.block_meta %k {block_size = 5} : tensor<?x2x?x24xf32>
  return %m : tensor<?x2x?x2x24xf32>
}

// -----

// Top-p without a block selection returns up to Lk tokens: its last dim is
// the keys' length. The kernel sorts no whole row: scores fall into at most
// 4096 buckets (a count and an f64 weight each) by their distance from the
// row's highest score, clamped to the buckets (a NaN score to bucket 0).

// CHECK-LABEL: func.func private @topp__select_topp0(
// CHECK-SAME:    attn.kernel = "select_topp"
// CHECK-NOT:     math.floor
// CHECK:         %[[MAXB:.*]] = arith.constant 4096 : index
// CHECK:         arith.minsi %{{.*}}, %[[MAXB]] : index
// CHECK:         memref.alloc(%[[NB:.*]]) : memref<?xi32>
// CHECK-NEXT:    memref.alloc(%[[NB]]) : memref<?xf64>
// CHECK:         arith.maxnumf
// CHECK-NEXT:    arith.minnumf
// CHECK-NEXT:    arith.fptosi
// CHECK-LABEL: func.func @topp(
// CHECK-SAME:    {attn.shape = ["B", 4, "Lq", "Lk"]}
func.func @topp(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>)
    -> tensor<?x4x?x?xi32> {
  %t = attn.select_topp %q, %k {top_p = 0.9, mask = #attn.mask<none>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>
  return %t : tensor<?x4x?x?xi32>
}

// -----

// The int4 estimator rounds each key channel to its level (a floor) while
// scoring the candidates; the exact estimator above has no floor.

// CHECK-LABEL: func.func private @topp_int4__select_topp0(
// CHECK-SAME:    attn.kernel = "select_topp"
// CHECK:         math.floor %{{.*}} : vector<8xf32>
// CHECK-LABEL: func.func @topp_int4(
func.func @topp_int4(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>)
    -> tensor<?x4x?x?xi32> {
  %t = attn.select_topp %q, %k {top_p = 0.9, estimator = #attn.estimator<int4>,
      mask = #attn.mask<none>} : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>
  return %t : tensor<?x4x?x?xi32>
}

// -----

// Trees: the parents carry the contract the runtime checks, and the host
// asserts that the keys hold the tree. With a window, a node's first prefix
// key depends on its depth, so the prefix kernels read the parents too.

// CHECK-LABEL: func.func private @tree__tree_prefix0(
// CHECK-SAME:    %{{.*}}: memref<?x?xi32>,
// CHECK-SAME:    attn.kernel = "flash_tree_prefix"
// CHECK-LABEL: func.func private @tree__tree_prefix_split1(
// CHECK-SAME:    %{{.*}}: memref<?x?xi32>,
// CHECK-SAME:    attn.kernel = "split_kv_tree_prefix"
// CHECK-LABEL: func.func private @tree__tree_nodes2(
// CHECK-SAME:    attn.kernel = "tree_nodes"
// CHECK-LABEL: func.func @tree(
// CHECK-SAME:    memref<?x4x?x16xf32> {attn.shape = ["B", 4, "T", 16]}
// CHECK-SAME:    memref<?x?xi32> {attn.contract = "tree_parents", attn.shape = ["B", "T"]}
// CHECK:         %[[ENOUGH:.*]] = arith.cmpi sge, %{{.*}}, %{{.*}} : index
// CHECK:         cf.assert %[[ENOUGH]], "attn.tree_sdpa: dim 2 of 'k' (P + T) must hold at least the T tree nodes of 'q'"
// CHECK:         attn_kernel.dispatch @tree__tree_prefix0 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2, %arg3,
// CHECK:         attn_kernel.dispatch @tree__tree_prefix_split1 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2, %arg3,
// CHECK:         attn_kernel.dispatch @tree__tree_nodes2 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2, %arg3,
// CHECK:         attn_kernel.dispatch @tree__merge3
func.func @tree(%q: tensor<?x4x?x16xf32>, %k: tensor<?x1x?x16xf32>,
                %v: tensor<?x1x?x16xf32>, %parents: tensor<?x?xi32>)
    -> tensor<?x4x?x16xf32> {
  %o = attn.tree_sdpa %q, %k, %v, %parents {window = 8}
      : tensor<?x4x?x16xf32>, tensor<?x1x?x16xf32>, tensor<?x1x?x16xf32>,
        tensor<?x?xi32>
  return %o : tensor<?x4x?x16xf32>
}

// -----

// Acceptance and compaction in one entry: the path comes from the
// acceptance, so only the parents are checked at run time.

// CHECK-LABEL: func.func private @accept__tree_accept0(
// CHECK-SAME:    attn.kernel = "tree_accept"
// CHECK-LABEL: func.func private @accept__kv_compact1(
// CHECK-SAME:    attn.kernel = "kv_compact"
// CHECK-LABEL: func.func @accept(
// CHECK-SAME:    %arg2: memref<?x?xi32> {attn.contract = "tree_parents", attn.shape = ["B", "T"]}
// CHECK-NOT:     attn.contract
// CHECK:         cf.assert %{{.*}}, "attn.tree_accept: a draft tree needs its root (T >= 1)"
// CHECK:         attn_kernel.dispatch @accept__tree_accept0 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2,
// CHECK:         cf.assert %{{.*}}, "attn.kv_compact: dim 2 of 'k' (P + T) must hold at least the T tree nodes of 'path'"
// CHECK:         attn_kernel.dispatch @accept__kv_compact1
func.func @accept(%tokens: tensor<?x?xi32>, %target: tensor<?x?xi32>,
                  %parents: tensor<?x?xi32>, %k: tensor<?x1x?x8xf32>,
                  %v: tensor<?x1x?x8xf32>)
    -> (tensor<?x1x?x8xf32>, tensor<?x1x?x8xf32>) {
  %path, %length, %bonus = attn.tree_accept %tokens, %target, %parents
      : tensor<?x?xi32>, tensor<?x?xi32>, tensor<?x?xi32>
  %k2, %v2 = attn.kv_compact %k, %v, %path, %length
      : tensor<?x1x?x8xf32>, tensor<?x1x?x8xf32>, tensor<?x?xi32>,
        tensor<?xi32>
  return %k2, %v2 : tensor<?x1x?x8xf32>, tensor<?x1x?x8xf32>
}

// -----

// A path given as an input needs its lengths as an input too: the runtime
// checks them together.

func.func @half_input(%k: tensor<?x1x?x8xf32>, %v: tensor<?x1x?x8xf32>,
                      %path: tensor<?x?xi32>, %tokens: tensor<?x?xi32>,
                      %parents: tensor<?x?xi32>)
    -> (tensor<?x1x?x8xf32>, tensor<?x1x?x8xf32>) {
  %p, %length, %bonus = attn.tree_accept %tokens, %tokens, %parents
      : tensor<?x?xi32>, tensor<?x?xi32>, tensor<?x?xi32>
  // expected-error @below {{'path' and 'length' must both be entry inputs (checked together at run time) or both results of attn.tree_accept}}
  %k2, %v2 = attn.kv_compact %k, %v, %path, %length
      : tensor<?x1x?x8xf32>, tensor<?x1x?x8xf32>, tensor<?x?xi32>,
        tensor<?xi32>
  return %k2, %v2 : tensor<?x1x?x8xf32>, tensor<?x1x?x8xf32>
}

// -----

// A tree without a window: every node sees the whole prefix, which is
// dense attention. The flash kernel tiles it for many nodes (split 0 of
// two), split-KV spreads it for at most 8 (splits [0, S - 1)); the nodes'
// own keys go to the last split and the merge kernel gates.

// CHECK-LABEL: func.func private @prefix_tree__tree_prefix0(
// CHECK-SAME:    attn.kernel = "flash_tree_prefix"
// CHECK-LABEL: func.func private @prefix_tree__tree_prefix_split1(
// CHECK-SAME:    attn.kernel = "split_kv_tree_prefix"
// CHECK-LABEL: func.func private @prefix_tree__tree_nodes2(
// CHECK-SAME:    attn.kernel = "tree_nodes"
// CHECK-LABEL: func.func private @prefix_tree__merge3(
// CHECK-LABEL: func.func @prefix_tree(
// CHECK:         %[[FEW:.*]] = arith.cmpi ule, %[[T:.*]], %c8
// CHECK:         %[[PREFIX_SPLITS:.*]] = arith.ceildivui %{{.*}}, %c512
// CHECK:         %[[PLUS_ONE:.*]] = arith.addi %[[PREFIX_SPLITS]], %c1
// CHECK:         %[[S:.*]] = arith.select %[[FEW]], %[[PLUS_ONE]], %c2
// CHECK:         %[[PO:.*]] = memref.alloc(%{{.*}}, %[[T]], %[[S]]) : memref<?x4x?x?x16xf32>
// CHECK:         %[[PL:.*]] = memref.alloc(%{{.*}}, %[[T]], %[[S]]) : memref<?x4x?x?xf32>
// CHECK:         attn_kernel.dispatch @prefix_tree__tree_prefix0 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2, %[[PO]], %[[PL]])
// CHECK:         attn_kernel.dispatch @prefix_tree__tree_prefix_split1 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2, %[[PO]], %[[PL]])
// CHECK:         attn_kernel.dispatch @prefix_tree__tree_nodes2 workgroups(%{{.*}}) bindings(%arg0, %arg1, %arg2, %arg3, %[[PO]], %[[PL]])
// CHECK:         attn_kernel.dispatch @prefix_tree__merge3 workgroups(%{{.*}}) bindings(%[[PO]], %[[PL]], %arg4)
func.func @prefix_tree(%q: tensor<?x4x?x16xf32>, %k: tensor<?x1x?x16xf32>,
                       %v: tensor<?x1x?x16xf32>, %parents: tensor<?x?xi32>)
    -> tensor<?x4x?x16xf32> {
  %o = attn.tree_sdpa %q, %k, %v, %parents
      : tensor<?x4x?x16xf32>, tensor<?x1x?x16xf32>, tensor<?x1x?x16xf32>,
        tensor<?x?xi32>
  return %o : tensor<?x4x?x16xf32>
}

// -----

// The bounds of the pages an append wrote (attn.page_meta_update), into the
// in-place metadata: one workgroup writes each written page's fill (its
// highest offset written + 1) and leader (the first token that writes it)
// into scratch [NP], setting and reading only the written pages' entries;
// then a workgroup per (token, kv head) bounds the token's page over its
// fill if it is the page's leader.
// CHECK-LABEL: func.func private @refresh__appended_pages1(
// CHECK-SAME:    %{{.*}}: memref<?xi32>, %[[FILL:.*]]: memref<?xi32>, %[[LEADER:.*]]: memref<?xi32>, %{{.*}}: index)
// CHECK-SAME:    attn.kernel = "appended_pages"
// CHECK:         scf.for
// CHECK:           scf.if
// CHECK:             memref.store %c0_i32{{.*}}, %[[FILL]][%{{.*}}]
// CHECK:             memref.store %{{.*}}, %[[LEADER]][%{{.*}}]
// CHECK:         scf.for
// CHECK:           scf.if
// CHECK:             %[[F:.*]] = memref.load %[[FILL]]
// CHECK:             arith.maxsi %[[F]]
// CHECK:             %[[L:.*]] = memref.load %[[LEADER]]
// CHECK:             arith.minsi %[[L]]
// CHECK-LABEL: func.func private @refresh__page_meta_update0(
// CHECK-SAME:    attn.kernel = "block_meta"
// CHECK:         %[[WRITES:.*]] = arith.cmpi sge
// CHECK:         %[[FOUND:.*]]:2 = scf.if %[[WRITES]] -> (i1, index) {
// CHECK:         scf.if %[[FOUND]]#0 {
// CHECK:           scf.for %{{.*}} = %c0 to %[[FOUND]]#1 step %c1 iter_args
// CHECK:             arith.minimumf
// CHECK:             arith.maximumf
// CHECK:           vector.store %{{.*}}, %arg4[
// CHECK-LABEL: func.func @refresh(
// CHECK-SAME:    %arg1: memref<?xi32> {attn.contract = "cache_slots", attn.contract_input = 0 : i64
// CHECK-SAME:    %arg2: memref<?x2x2x8xf32> {attn.in_place
// CHECK:         %[[FILLS:.*]] = memref.alloc(%{{.*}}) : memref<?xi32>
// CHECK:         %[[LEADERS:.*]] = memref.alloc(%{{.*}}) : memref<?xi32>
// CHECK:         attn_kernel.dispatch @refresh__appended_pages1 workgroups(%c1) bindings(%arg0, %arg1, %[[FILLS]], %[[LEADERS]])
// CHECK:         attn_kernel.dispatch @refresh__page_meta_update0 workgroups(%{{.*}}) bindings(%arg0, %arg1, %[[FILLS]], %[[LEADERS]], %arg2)
func.func @refresh(%kc: tensor<?x4x2x8xf32>, %slots: tensor<?xi32>,
                   %meta: tensor<?x2x2x8xf32> {attn.in_place})
    -> tensor<?x2x2x8xf32> {
  %meta2 = attn.page_meta_update %kc, %slots into %meta
      : tensor<?x4x2x8xf32>, tensor<?xi32>, tensor<?x2x2x8xf32>
  return %meta2 : tensor<?x2x2x8xf32>
}

// -----

// Top-k over a paged cache: a workgroup per (batch, row) serves every kv
// head, so a page's bounds record [2, Hkv, D] is read by one workgroup at
// one time; each block's kv heads are a loop, within which the metadata
// of the same kv head's block 4 ahead is requested. The bounds of chunked
// selections are [selections, 4 heads, MP] (the page table's pages).
// CHECK-LABEL: func.func private @paged_topk__select_topk0(
// CHECK-SAME:    attn.kernel = "select_topk"
// CHECK:         memref.alloca() {{.*}} : memref<4x2x24xf32>
// CHECK:         scf.for %{{.*}} = %c0 to %{{.*}} step %c1 {
// CHECK:           scf.for %[[SERVED:.*]] = %c0{{.*}} to %c2{{.*}} step %c1{{.*}} {
// CHECK:             %[[KVHEAD:.*]] = arith.addi %{{.*}}, %[[SERVED]]
// CHECK:             memref.prefetch %arg1[%{{.*}}, %c0{{.*}}, %[[KVHEAD]], %{{.*}}], read, locality<2>, data
// CHECK:             vector.load %arg1[%{{.*}}, %c0{{.*}}, %[[KVHEAD]], %{{.*}}]
// CHECK:             vector.load %arg1[%{{.*}}, %c1{{.*}}, %[[KVHEAD]], %{{.*}}]
// CHECK-LABEL: func.func @paged_topk(
// CHECK:         %[[TOKENS:.*]] = arith.muli %{{.*}}, %{{.*}} : index
// CHECK:         %[[SELECTIONS:.*]] = arith.muli %[[TOKENS]], %c1{{.*}} : index
// CHECK:         %[[CHUNKED:.*]] = arith.cmpi ult, %[[SELECTIONS]], %{{.*}}
// CHECK:         %[[PAGES:.*]] = memref.dim %arg4, %c1
// CHECK:         %[[BOUNDS:.*]] = memref.alloc(%{{.*}}, %[[PAGES]]) : memref<?x4x?xf32>
// CHECK:         %[[WHOLE:.*]] = arith.select %[[CHUNKED]], %c0{{.*}}, %[[SELECTIONS]]
// CHECK:         attn_kernel.dispatch @paged_topk__select_topk0 workgroups(%[[WHOLE]])
// CHECK:         attn_kernel.dispatch @paged_topk__block_bounds1
// CHECK:         attn_kernel.dispatch @paged_topk__select_topk2
func.func @paged_topk(%q: tensor<?x4x?x24xf32>, %kc: tensor<?x16x2x24xf32>,
                      %vc: tensor<?x16x2x24xf32>, %meta: tensor<?x2x2x24xf32>,
                      %pt: tensor<?x?xi32>, %lens: tensor<?xi32>)
    -> tensor<?x4x?x24xf32> {
  %b = attn.select_topk %q, %meta paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>)
      {block_size = 16, top_k = 4, mask = #attn.mask<causal>}
      : tensor<?x4x?x24xf32>, tensor<?x2x2x24xf32>
  %o = attn.sparse_sdpa %q, %kc, %vc, %b
      paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>)
      {block_size = 16, mask = #attn.mask<causal>}
      : tensor<?x4x?x24xf32>, tensor<?x16x2x24xf32>, tensor<?x16x2x24xf32>,
        tensor<?x4x?x?xi32>
  return %o : tensor<?x4x?x24xf32>
}
