// RUN: attn-opt %s -split-input-file -attn-cpu-dispatches -verify-diagnostics | FileCheck %s

// An entry becomes a host function on memrefs (inputs, then one buffer per
// result, each with its symbolic shape) that dispatches the flash kernel for
// prefill calls and split-KV + merge for decode calls (Lq <= 8), chosen
// from the run-time Lq.

// CHECK-LABEL: func.func private @layer__flash0
// CHECK-SAME:    attn.kernel = "flash"
// CHECK-SAME:    attn.tiling = {decode_max_queries = 8 : i64, key_tile = 32 : i64, query_tile = 32 : i64, recurrent_max_steps = 1 : i64, split_keys = 512 : i64, state_columns = 32 : i64, vector_width = 8 : i64}
// The key loop stops at the tile's last visible key (causal).
// CHECK:         %[[END:.+]] = arith.maxsi %{{.+}}, %{{.+}} : index
// CHECK:         scf.for %{{.+}} = %{{.+}} to %[[END]] step %{{.+}} {
// The online-softmax state is rescaled by exp(m_old - m_new).
// CHECK:           math.exp
// CHECK:           vector.fma
// CHECK-LABEL: func.func private @layer__split_kv1
// CHECK-SAME:    attn.kernel = "split_kv"
// CHECK-LABEL: func.func private @layer__merge2
// CHECK-SAME:    attn.kernel = "merge"
// CHECK-LABEL: func.func @layer(
// CHECK-SAME:    %[[Q:[a-z0-9]+]]: memref<?x8x?x64xf32> {attn.name = "q", attn.shape = ["B", 8, "Lq", 64]}
// CHECK-SAME:    %[[K:[a-z0-9]+]]: memref<?x2x?x64xf32> {attn.shape = ["B", 2, "Lk", 64]}
// CHECK-SAME:    %[[V:[a-z0-9]+]]: memref<?x2x?x64xf32> {attn.shape = ["B", 2, "Lk", 64]}
// CHECK-SAME:    %[[G:[a-z0-9]+]]: memref<?x8x?x64xf32> {attn.shape = ["B", 8, "Lq", 64]}
// CHECK-SAME:    %[[O:[a-z0-9]+]]: memref<?x8x?x64xf32> {attn.name = "o", attn.shape = ["B", 8, "Lq", 64]}
// CHECK-SAME:    attributes {attn.entry, attn.num_inputs = 4 : i64}
// CHECK:         %[[LQ:.+]] = memref.dim %[[Q]], %c2
// CHECK:         %[[DECODE:.+]] = arith.cmpi ule, %[[LQ]], %c8
// CHECK:         %[[FLASH:.+]] = arith.select %[[DECODE]], %c0
// CHECK:         %[[PO:.+]] = memref.alloc({{.+}}) : memref<?x8x?x?x64xf32>
// CHECK:         %[[PL:.+]] = memref.alloc({{.+}}) : memref<?x8x?x?xf32>
// CHECK:         attn_kernel.dispatch @layer__flash0 workgroups(%[[FLASH]]) bindings(%[[Q]], %[[K]], %[[V]], %[[G]], %[[O]])
// CHECK:         attn_kernel.dispatch @layer__split_kv1 workgroups(%{{.+}}) bindings(%[[Q]], %[[K]], %[[V]], %[[PO]], %[[PL]])
// CHECK:         attn_kernel.dispatch @layer__merge2 workgroups(%{{.+}}) bindings(%[[PO]], %[[PL]], %[[G]], %[[O]])
// CHECK-NEXT:    return
func.func @layer(%q: tensor<?x8x?x64xf32> {attn.name = "q"},
                 %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>,
                 %g: tensor<?x8x?x64xf32>) -> (tensor<?x8x?x64xf32> {attn.name = "o"}) {
  %o = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

// -----

// A sliding window also starts the key loop late; lse is a second output.

// CHECK-LABEL: func.func private @window__flash0
// CHECK-SAME:    %{{.+}}: memref<?x4x?x1xf32>, %{{.+}}: memref<?x4x?x16xf32>, %[[LSE:[a-z0-9]+]]: memref<?x4x?xf32>, %{{.+}}: index
// CHECK:         %[[END:.+]] = arith.maxsi %c0
// CHECK:         %[[BEGIN:.+]] = arith.minsi %[[END]], %
// CHECK:         scf.for %{{.+}} = %[[BEGIN]] to %[[END]] step %c32
// CHECK:         math.log
// CHECK:         memref.store %{{.+}}, %[[LSE]]
// CHECK-LABEL: func.func @window(
// CHECK-SAME:    memref<?x4x?x16xf32> {attn.shape = ["B", 4, "Lq", 16]}, %{{.+}}: memref<?x4x?xf32> {attn.shape = ["B", 4, "Lq"]})
func.func @window(%q: tensor<?x4x?x32xf32>, %k: tensor<?x4x?x32xf32>,
                  %v: tensor<?x4x?x16xf32>, %g: tensor<?x4x?x1xf32>)
    -> (tensor<?x4x?x16xf32>, tensor<?x4x?xf32>) {
  %o, %lse = attn.sdpa %q, %k, %v gate(%g)
      {mask = #attn.mask<sliding_window = 64>, return_lse}
      : tensor<?x4x?x32xf32>, tensor<?x4x?x32xf32>, tensor<?x4x?x16xf32>,
        tensor<?x4x?x1xf32>
  return %o, %lse : tensor<?x4x?x16xf32>, tensor<?x4x?xf32>
}

// -----

// An attention output that is not returned gets a host allocation.

// CHECK-LABEL: func.func @chained(
// CHECK:         %[[TMP:.+]] = memref.alloc(%{{.+}}, %{{.+}}) : memref<?x2x?x16xf32>
// CHECK:         attn_kernel.dispatch @chained__flash0 {{.+}} bindings({{.+}}, %[[TMP]])
// CHECK:         attn_kernel.dispatch @chained__flash3 {{.+}} bindings(%[[TMP]],
func.func @chained(%q: tensor<?x2x?x16xf32>, %k: tensor<?x2x?x16xf32>)
    -> tensor<?x2x?x16xf32> {
  %o = attn.sdpa %q, %k, %k {mask = #attn.mask<none>}
      : tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
  %o2 = attn.sdpa %o, %k, %k {mask = #attn.mask<none>}
      : tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
  return %o2 : tensor<?x2x?x16xf32>
}

// -----

// f16 storage: every load widens to f32 (q and k elements, v rows), the
// output rows are rounded back; the split-KV partials stay f32.
// CHECK-LABEL: func.func private @half__flash0
// CHECK:         %[[Q:.+]] = memref.load %arg0[{{.+}}] : memref<?x2x?x16xf16>
// CHECK-NEXT:    arith.extf %[[Q]] : f16 to f32
// CHECK:         %[[V:.+]] = vector.load %arg2[{{.+}}] : memref<?x2x?x16xf16>, vector<8xf16>
// CHECK-NEXT:    arith.extf %[[V]] : vector<8xf16> to vector<8xf32>
// CHECK:         %[[O:.+]] = arith.truncf %{{.+}} : vector<8xf32> to vector<8xf16>
// CHECK-NEXT:    vector.store %[[O]], %arg3[{{.+}}] : memref<?x2x?x16xf16>, vector<8xf16>
// CHECK-LABEL: func.func private @half__split_kv1
// CHECK-SAME:    memref<?x2x?x?x16xf32>
func.func @half(%q: tensor<?x2x?x16xf16>) -> tensor<?x2x?x16xf16> {
  %o = attn.sdpa %q, %q, %q {mask = #attn.mask<causal>}
      : tensor<?x2x?x16xf16>, tensor<?x2x?x16xf16>, tensor<?x2x?x16xf16>
  return %o : tensor<?x2x?x16xf16>
}

// -----

func.func @sum(%o: tensor<?x2x?x16xf32>, %g: tensor<?x2x?x16xf32>)
    -> tensor<?x2x?x16xf32> {
  // expected-error @below {{no CPU lowering for 'arith.addf' yet}}
  %r = arith.addf %o, %g : tensor<?x2x?x16xf32>
  return %r : tensor<?x2x?x16xf32>
}

// -----

// A key length read from a dim the keys do not have (upstream leaves such
// a tensor.dim undefined, not invalid).
func.func @dim_past_rank(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                         %meta: tensor<?x2x?x2x64xf32>)
    -> tensor<?x8x?x?xi32> {
  %c4 = arith.constant 4 : index
  // expected-error @below {{index 4 is out of range for a tensor of rank 4}}
  %lk = tensor.dim %k, %c4 : tensor<?x2x?x64xf32>
  %blocks = attn.select_topk %q, %meta, %lk {block_size = 16 : i64,
      mask = #attn.mask<causal>, top_k = 4 : i64}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x2x64xf32>
  return %blocks : tensor<?x8x?x?xi32>
}

// -----

func.func @dim_at_run_time(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                           %meta: tensor<?x2x?x2x64xf32>, %d: index)
    -> tensor<?x8x?x?xi32> {
  // expected-error @below {{an entry's tensor.dim needs a constant index}}
  %lk = tensor.dim %k, %d : tensor<?x2x?x64xf32>
  %blocks = attn.select_topk %q, %meta, %lk {block_size = 16 : i64,
      mask = #attn.mask<causal>, top_k = 4 : i64}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x2x64xf32>
  return %blocks : tensor<?x8x?x?xi32>
}

// -----

// Feature sizes past docs/limits.md's 576 (the kernels unroll over them).
func.func @wide_keys(%k: tensor<?x2x?x1024xf32>) -> tensor<?x2x?x2x1024xf32> {
  // expected-error @below {{feature size 1024 (the last dim of operand #0) is past attn's limit of 576}}
  %m = attn.block_meta %k {block_size = 16 : i64} : tensor<?x2x?x1024xf32>
  return %m : tensor<?x2x?x2x1024xf32>
}

// -----

// Head counts past docs/limits.md's 1024.
func.func @many_heads(%q: tensor<?x2048x?x16xf32>, %k: tensor<?x2x?x16xf32>)
    -> tensor<?x2048x?x16xf32> {
  // expected-error @below {{2048 heads are past attn's limit of 1024}}
  %o = attn.sdpa %q, %k, %k {mask = #attn.mask<causal>}
      : tensor<?x2048x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
  return %o : tensor<?x2048x?x16xf32>
}

// -----

// attn.gate's kernels are built for its heads, features and kind of gate.
func.func @dynamic_gate(%o: tensor<?x2x?x?xf32>, %g: tensor<?x2x?x?xf32>)
    -> tensor<?x2x?x?xf32> {
  // expected-error @below {{no CPU lowering for an 'attn.gate' with a dynamic head count or feature size (dims 1 and 3 of the output and dim 3 of the gate must be static)}}
  %r = attn.gate %o, %g : tensor<?x2x?x?xf32>, tensor<?x2x?x?xf32>
  return %r : tensor<?x2x?x?xf32>
}

// -----

func.func @passthrough(%q: tensor<?x2x?x16xf32>) -> tensor<?x2x?x16xf32> {
  // expected-error @below {{result #0 returns an argument; an entry's results must be computed}}
  return %q : tensor<?x2x?x16xf32>
}

// -----

// A gated-delta recurrence with its output gate fused: one chunked and one
// recurrent-step kernel over (batch, value head), picked by the run-time L.
func.func @gdn(%q: tensor<?x2x?x32xf32> {attn.name = "q"}, %k: tensor<?x2x?x32xf32>,
               %v: tensor<?x4x?x24xf32>, %g: tensor<?x4x?xf32>, %beta: tensor<?x4x?xf32>,
               %s0: tensor<?x4x32x24xf32>, %z: tensor<?x4x?x24xf32>, %w: tensor<24xf32>)
    -> (tensor<?x4x?x24xf32> {attn.name = "o"}, tensor<?x4x32x24xf32> {attn.name = "S"}) {
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x4x?xf32>) beta(%beta : tensor<?x4x?xf32>)
      state(%s0 : tensor<?x4x32x24xf32>)
      output_gate(%z, %w : tensor<?x4x?x24xf32>, tensor<24xf32>)
      {chunk_size = 16, qk_l2norm}
      : tensor<?x2x?x32xf32>, tensor<?x2x?x32xf32>, tensor<?x4x?x24xf32>
  return %o, %s : tensor<?x4x?x24xf32>, tensor<?x4x32x24xf32>
}
// The chunked kernel: the UT transform's forward substitution (a loop
// bounded by the row), the state products, the rmsnorm of the gate.
// CHECK-LABEL: func.func private @gdn__chunked0
// CHECK-SAME:    attn.kernel = "chunked"
// CHECK-SAME:    recurrent_max_steps = 1
// CHECK:         %[[STATE:.+]] = memref.alloca() {alignment = 64 : i64} : memref<32x24xf32>
// CHECK:         scf.for %[[CHUNK:.+]] = %c0{{.*}} to %{{.+}} step %c1
// CHECK:           scf.for %[[T:.+]] = %c0{{.*}} to %c16{{.*}} step %c1
// CHECK:             scf.for %{{.+}} = %c0{{.*}} to %[[T]] step %c1{{.*}} iter_args(
// CHECK:           math.sqrt
// CHECK-LABEL: func.func private @gdn__recurrent1
// CHECK-SAME:    attn.kernel = "recurrent"
// CHECK:         arith.select %{{.+}}, %{{.+}}, %{{.+}} : memref<?x4x32x24xf32>
// CHECK-LABEL: func.func @gdn(
// CHECK-SAME:    %[[Q:[a-z0-9]+]]: memref<?x2x?x32xf32> {attn.name = "q", attn.shape = ["B", 2, "L", 32]}
// CHECK-SAME:    memref<?x4x?xf32> {attn.shape = ["B", 4, "L"]}
// CHECK-SAME:    memref<?x4x32x24xf32> {attn.shape = ["B", 4, 32, 24]}
// CHECK-SAME:    memref<24xf32> {attn.shape = [24]}
// CHECK-SAME:    %[[O:[a-z0-9]+]]: memref<?x4x?x24xf32> {attn.name = "o", attn.shape = ["B", 4, "L", 24]}
// CHECK-SAME:    %[[S:[a-z0-9]+]]: memref<?x4x32x24xf32> {attn.name = "S", attn.shape = ["B", 4, 32, 24]}
// CHECK:         %[[L:.+]] = memref.dim %[[Q]], %c2
// CHECK:         %[[LM1:.+]] = arith.subi %[[L]], %c1
// CHECK:         %[[STEPWISE:.+]] = arith.cmpi ule, %[[LM1]], %c0
// CHECK:         %[[GROUPS:.+]] = arith.muli %{{.+}}, %c4
// CHECK:         %[[CHUNKED:.+]] = arith.select %[[STEPWISE]], %c0{{.*}}, %[[GROUPS]] : index
// CHECK:         %[[STEPS:.+]] = arith.select %[[STEPWISE]], %[[GROUPS]], %c0{{.*}} : index
// CHECK:         attn_kernel.dispatch @gdn__chunked0 workgroups(%[[CHUNKED]]) bindings(%[[Q]], {{.+}}, %[[O]], %[[S]])
// CHECK:         attn_kernel.dispatch @gdn__recurrent1 workgroups(%[[STEPS]]) bindings(%[[Q]], {{.+}}, %[[O]], %[[S]])
// CHECK-NEXT:    return

// -----

// Dv = 80 (10 vectors): besides whole-row workgroups, column tiles of
// the state (2 tiles of 40 columns, the tile fastest; narrower tiles would
// be under state-columns = 32) for calls where batch x value heads leaves
// workers idle. The host picks the width whose critical path, in
// multiply-adds per chunk, is the shortest for the run-time batch and
// worker count. After column tiles, the rmsnorm-silu gate runs as a kernel
// of its own over blocks of C rows.
func.func @wide(%q: tensor<?x1x?x64xf32> {attn.name = "q"}, %k: tensor<?x1x?x64xf32>,
                %v: tensor<?x1x?x80xf32>, %g: tensor<?x1x?xf32>, %beta: tensor<?x1x?xf32>,
                %s0: tensor<?x1x64x80xf32>, %z: tensor<?x1x?x80xf32>, %w: tensor<80xf32>)
    -> (tensor<?x1x?x80xf32> {attn.name = "o"}, tensor<?x1x64x80xf32> {attn.name = "S"}) {
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x1x?xf32>) beta(%beta : tensor<?x1x?xf32>)
      state(%s0 : tensor<?x1x64x80xf32>)
      output_gate(%z, %w : tensor<?x1x?x80xf32>, tensor<80xf32>)
      {chunk_size = 16, qk_l2norm}
      : tensor<?x1x?x64xf32>, tensor<?x1x?x64xf32>, tensor<?x1x?x80xf32>
  return %o, %s : tensor<?x1x?x80xf32>, tensor<?x1x64x80xf32>
}
// CHECK-LABEL: func.func private @wide__chunked0
// CHECK-SAME:    attn.kernel = "chunked"
// CHECK:         memref.alloca() {alignment = 64 : i64} : memref<64x80xf32>
// CHECK:         math.sqrt
// CHECK-LABEL: func.func private @wide__chunked_columns40_2
// CHECK-SAME:    attn.kernel = "chunked_columns"
// CHECK-SAME:    state_columns = 32
// CHECK:         arith.remui %{{.+}}, %c2
// CHECK:         memref.alloca() {alignment = 64 : i64} : memref<64x40xf32>
// CHECK:         vector.create_mask
// The column tiles store o ungated: attn.rmsnorm_gate's kernel follows,
// in place (o, z, w, o), over runs of 16384 / 80 = 204 tokens of a head.
// CHECK-LABEL: func.func private @wide__gate3
// CHECK-SAME:    attn.kernel = "rmsnorm_gate"
// CHECK:         math.sqrt
// CHECK-LABEL: func.func @wide(
// CHECK:         %[[STEPWISE:.+]] = arith.cmpi ule
// CHECK:         %[[GROUPS:.+]] = arith.muli %{{.+}}, %c1
// CHECK:         %[[WHOLE:.+]] = arith.select %[[STEPWISE]], %c0{{.*}}, %[[GROUPS]] : index
// CHECK:         %[[WORKERS:.+]] = attn_kernel.worker_count : index
// CHECK:         %[[ROUNDS:.+]] = arith.ceildivui %[[GROUPS]], %[[WORKERS]]
// CHECK:         %[[PATH:.+]] = arith.muli %[[ROUNDS]], %c291498
// CHECK:         %[[TILES:.+]] = arith.muli %[[GROUPS]], %c2
// CHECK:         %[[TILEROUNDS:.+]] = arith.ceildivui %[[TILES]], %[[WORKERS]]
// CHECK:         %[[TILEPATH:.+]] = arith.muli %[[TILEROUNDS]], %c158378
// CHECK:         %[[SHORTER:.+]] = arith.cmpi ult, %[[TILEPATH]], %[[PATH]]
// CHECK:         %[[WIDTH:.+]] = arith.select %[[SHORTER]], %c40, %c80
// CHECK:         %[[ISROWS:.+]] = arith.cmpi eq, %[[WIDTH]], %c80
// CHECK:         %[[CHUNKED:.+]] = arith.select %[[ISROWS]], %[[WHOLE]], %c0
// CHECK:         %[[IS40:.+]] = arith.cmpi eq, %[[WIDTH]], %c40
// CHECK:         %[[COLUMNS:.+]] = arith.select %[[IS40]], %{{.+}}, %c0
// CHECK:         %[[RUNS:.+]] = arith.ceildivui %{{.+}}, %c204
// CHECK:         %[[GATED:.+]] = arith.muli %{{.+}}, %[[RUNS]]
// CHECK:         %[[GATE:.+]] = arith.select %{{.+}}, %c0{{.*}}, %[[GATED]]
// CHECK:         attn_kernel.dispatch @wide__chunked0 workgroups(%[[CHUNKED]])
// CHECK:         attn_kernel.dispatch @wide__chunked_columns40_2 workgroups(%[[COLUMNS]])
// CHECK:         attn_kernel.dispatch @wide__gate3 workgroups(%[[GATE]]) bindings(%[[O:[^,]+]], %arg6, %arg7, %[[O]])
// CHECK:         attn_kernel.dispatch @wide__recurrent1 workgroups(%{{.+}})

// -----

// Decode with 6 query heads per kv head: the split-KV kernel works on
// register tiles of 4 heads (then the other 2), so each K or V vector is
// loaded once per tile, not once per head. A step is 16 keys; its V rows
// are prefetched into L2 (locality 2: prefetcht1) as the scores are
// computed, spread over the 16 iterations of the dot products (2 head
// tiles x 8 pairs of keys): a row of 20 features (2 lines) each; and the
// K rows of the next step during P V, 4 rows in each of its 4 iterations
// (2 head tiles x 2 value tiles).
// CHECK-LABEL: func.func private @gqa6__split_kv1
// CHECK-SAME:    %[[K:[a-z0-9]+]]: memref<?x1x?x16xf32>
// CHECK-SAME:    %[[V:[a-z0-9]+]]: memref<?x1x?x20xf32>
// CHECK:         memref.alloca() {{.+}} : memref<6x16x8xf32>
// CHECK:         scf.for %[[J0:.+]] = %{{.+}} to %{{.+}} step %c16 {
// Dot products of 4 heads x 2 keys, over 2 vectors of head_dim 16.
// CHECK:           scf.for %{{.+}} = %c0 to %c16{{.*}} step %c2
// CHECK-COUNT-2:     memref.prefetch %[[V]]{{.+}}, read, locality<2>, data
// CHECK-NOT:         memref.prefetch
// CHECK-COUNT-16:    vector.fma
// CHECK-COUNT-8:     vector.store {{.+}} : memref<6x16x8xf32>, vector<8xf32>
// The other 2 heads.
// CHECK:           scf.for %{{.+}} = %c0 to %c16{{.*}} step %c2
// CHECK-COUNT-2:     memref.prefetch %[[V]]{{.+}}, read, locality<2>, data
// CHECK-NOT:         memref.prefetch
// CHECK-COUNT-8:     vector.fma
// CHECK-COUNT-4:     vector.store {{.+}} : memref<6x16x8xf32>, vector<8xf32>
// CHECK-NOT:         vector.fma
// One online-softmax step per head.
// CHECK:           scf.for %{{.+}} = %c0 to %c6{{.*}} step %c1
// CHECK:             math.exp
// P V: the whole value vectors, then the last 4 features (value_dim 20)
// in a tile of their own with masked loads; each tile requests 4 K rows
// of the next step.
// CHECK-COUNT-4:   memref.prefetch %[[K]]{{.+}}, read, locality<2>, data
// CHECK-NOT:       memref.prefetch
// CHECK:           vector.load %[[V]]
// CHECK-COUNT-4:   memref.prefetch %[[K]]{{.+}}, read, locality<2>, data
// CHECK-NOT:       memref.prefetch
// CHECK:           vector.maskedload %[[V]]
func.func @gqa6(%q: tensor<?x6x?x16xf32>, %k: tensor<?x1x?x16xf32>,
                %v: tensor<?x1x?x20xf32>) -> tensor<?x6x?x20xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x6x?x16xf32>, tensor<?x1x?x16xf32>, tensor<?x1x?x20xf32>
  return %o : tensor<?x6x?x20xf32>
}

// -----

// The same kv group over a paged cache of 2 kv heads: a workgroup serves
// both (a page's [P, Hkv, D] rows are read front to back), and since a kv
// head's rows alternate with the other's, its head tiles are the inner
// loop, inside each pair of keys and each value tile, so the rows serve
// every head tile of their kv head while they are in L1. A step is 8
// keys (a paged step holds every kv head's rows). The requests cover both
// kv heads' rows of 32 features (2 lines): the step's 16 V rows one per
// iteration of the dot products (2 kv heads x 4 pairs of keys x 2 head
// tiles), the next step's 16 K rows 2 per P V iteration (2 kv heads x 2
// value tiles x 2 head tiles).
// The flash kernel (prefill and extend rows) copies each key tile's k and
// v rows from their pages into scratch once, and its products read the
// scratch: no page lookup in their inner loops. It copies the tile's keys
// rounded up to 4, the most the products read (a partial last tile is no
// full tile's copy).
// CHECK-LABEL: func.func private @paged6__flash0
// CHECK-SAME:    %[[FK:[a-z0-9]+]]: memref<?x16x2x32xf32>
// CHECK-SAME:    %[[FV:[a-z0-9]+]]: memref<?x16x2x32xf32>
// CHECK-COUNT-3: memref.alloca() {{.+}} : memref<32x32xf32>
// CHECK:         %[[KTILE:.+]] = memref.alloca() {{.+}} : memref<32x32xf32>
// CHECK:         %[[VTILE:.+]] = memref.alloca() {{.+}} : memref<32x32xf32>
// CHECK:         scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c32
// CHECK:           %[[COLS:.+]] = arith.minsi %c32{{.*}}, %{{.+}} : index
// CHECK:           %[[QUADS:.+]] = arith.ceildivui %[[COLS]], %c4 : index
// CHECK:           %[[STAGED:.+]] = arith.muli %[[QUADS]], %c4 : index
// CHECK:           scf.for %[[ROW:.+]] = %c0 to %[[STAGED]] step %c1
// CHECK-COUNT-4:     vector.load %[[FK]]
// CHECK:             vector.store %{{.+}}, %[[KTILE]][%[[ROW]], %c24{{.*}}]
// CHECK-COUNT-4:     vector.load %[[FV]]
// CHECK:             vector.store %{{.+}}, %[[VTILE]][%[[ROW]], %c24{{.*}}]
// CHECK-NOT:       %[[FK]][
// CHECK:           memref.load %[[KTILE]]
// CHECK-NOT:       %[[FV]][
// CHECK:           vector.load %[[VTILE]]
// CHECK-NOT:       %[[FK]][
// CHECK-NOT:       %[[FV]][
// CHECK-LABEL: func.func private @paged6__split_kv1
// CHECK-SAME:    %[[K:[a-z0-9]+]]: memref<?x16x2x32xf32>
// CHECK-SAME:    %[[V:[a-z0-9]+]]: memref<?x16x2x32xf32>
// CHECK:         memref.alloca() {{.+}} : memref<12x8x8xf32>
// CHECK:         scf.for %[[J0:.+]] = %{{.+}} to %{{.+}} step %c8 {
// The scores, a loop over the two kv heads (its code once): 4 heads, then
// 2, for each pair of keys.
// CHECK:           scf.for %{{.+}} = %c0 to %c2{{.*}} step %c1
// CHECK:             scf.for %{{.+}} = %c0 to %c8{{.*}} step %c2
// CHECK-COUNT-2:       memref.prefetch %[[V]]{{.+}}, read, locality<2>, data
// CHECK-NOT:           memref.prefetch
// CHECK-COUNT-32:      vector.fma
// CHECK-NOT:           scf.for
// CHECK-COUNT-2:       memref.prefetch %[[V]]{{.+}}, read, locality<2>, data
// CHECK-NOT:           memref.prefetch
// CHECK-COUNT-16:      vector.fma
// CHECK-NOT:           vector.fma
// CHECK:             }
// CHECK-NEXT:      }
// CHECK:           scf.for %{{.+}} = %c0 to %c12{{.*}} step %c1
// CHECK:             math.exp
// P V, a kv head at a time: for each value tile, its 4-head tile, then
// its 2-head tile.
// CHECK:           scf.for %{{.+}} = %c0 to %c2{{.*}} step %c1
// CHECK:             scf.for %{{.+}} = %c0{{.*}} to %c4{{.*}} step %c2
// CHECK-COUNT-4:       memref.prefetch %[[K]]{{.+}}, read, locality<2>, data
// CHECK-COUNT-64:      vector.fma
// CHECK-NOT:           scf.for
// CHECK-COUNT-4:       memref.prefetch %[[K]]{{.+}}, read, locality<2>, data
// CHECK-COUNT-32:      vector.fma
// CHECK-NOT:           vector.fma
// CHECK:             }
// CHECK-NOT:         memref.prefetch
func.func @paged6(%q: tensor<?x12x?x32xf32>, %k: tensor<?x16x2x32xf32>,
                  %v: tensor<?x16x2x32xf32>, %t: tensor<?x?xi32>,
                  %l: tensor<?xi32>) -> tensor<?x12x?x32xf32> {
  %o = attn.sdpa %q, %k, %v paged(%t, %l : tensor<?x?xi32>, tensor<?xi32>)
      {mask = #attn.mask<causal>}
      : tensor<?x12x?x32xf32>, tensor<?x16x2x32xf32>, tensor<?x16x2x32xf32>
  return %o : tensor<?x12x?x32xf32>
}

// -----

// An rmsnorm gate no recurrence took (Mamba2's: groups of two heads, the
// gate first) is a kernel of its own, a workgroup per run of 16384 / 16 =
// 1024 tokens of a row (the two head vectors of a group): B x 6 / 2 = 3
// rows x ceil(L / 1024).
// CHECK-LABEL: func.func private @gate__rmsnorm_gate0(
// CHECK-SAME:    attributes {attn.kernel = "rmsnorm_gate"
// CHECK-LABEL: func.func @gate(
// CHECK-SAME:    %[[O:[^:]+]]: memref<?x6x?x8xf32> {attn.name = "o", attn.shape = ["N0", 6, "N1", 8]}
// CHECK-SAME:    %[[R:[^:]+]]: memref<?x6x?x8xf32> {attn.name = "r", attn.shape = ["N0", 6, "N1", 8]}
// CHECK:         %[[ROWS:.+]] = arith.muli %{{.+}}, %c3 : index
// CHECK:         %[[RUNS:.+]] = arith.ceildivui %{{.+}}, %c1024 : index
// CHECK-NEXT:    %[[GROUPS:.+]] = arith.muli %[[ROWS]], %[[RUNS]] : index
// CHECK-NEXT:    attn_kernel.dispatch @gate__rmsnorm_gate0 workgroups(%[[GROUPS]]) bindings(%[[O]], %{{.+}}, %{{.+}}, %[[R]])
func.func @gate(%o: tensor<?x6x?x8xf32> {attn.name = "o"},
                %z: tensor<?x6x?x8xf32> {attn.name = "z"},
                %w: tensor<48xf32> {attn.name = "w"})
    -> (tensor<?x6x?x8xf32> {attn.name = "r"}) {
  %r = attn.rmsnorm_gate %o, %z, %w
      {eps = 1.0e-5, group_size = 16, norm_before_gate = false}
      : tensor<?x6x?x8xf32>, tensor<?x6x?x8xf32>, tensor<48xf32>
  return %r : tensor<?x6x?x8xf32>
}

// -----

// A gate no attention took (Falcon-H1's mixer without its norm: silu, the
// skip first) is a kernel of its own, a workgroup per run of 4096 / 20 =
// 204 tokens of one head: B x 3 x ceil(L / 204).
// CHECK-LABEL: func.func private @mixer__gate0(
// CHECK-SAME:    attributes {attn.kernel = "gate"
// CHECK-LABEL: func.func @mixer(
// CHECK-SAME:    %[[O:[^:]+]]: memref<?x3x?x20xf32> {attn.name = "o", attn.shape = ["N0", 3, "N1", 20]}
// CHECK-SAME:    %[[R:[^:]+]]: memref<?x3x?x20xf32> {attn.name = "r", attn.shape = ["N0", 3, "N1", 20]}
// CHECK:         %[[HEADS:.+]] = arith.muli %{{.+}}, %c3 : index
// CHECK:         %[[RUNS:.+]] = arith.ceildivui %{{.+}}, %c204 : index
// CHECK-NEXT:    %[[GROUPS:.+]] = arith.muli %[[HEADS]], %[[RUNS]] : index
// CHECK-NEXT:    attn_kernel.dispatch @mixer__gate0 workgroups(%[[GROUPS]]) bindings(%[[O]], %{{.+}}, %{{.+}}, %{{.+}}, %[[R]])
func.func @mixer(%o: tensor<?x3x?x20xf32> {attn.name = "o"},
                 %z: tensor<?x3x?x20xf32> {attn.name = "z"},
                 %x: tensor<?x3x?x20xf32> {attn.name = "x"},
                 %d: tensor<3xf32> {attn.name = "D"})
    -> (tensor<?x3x?x20xf32> {attn.name = "r"}) {
  %r = attn.gate %o, %z skip(%x, %d : tensor<?x3x?x20xf32>, tensor<3xf32>)
      {activation = #attn.gate_activation<silu>}
      : tensor<?x3x?x20xf32>, tensor<?x3x?x20xf32>
  return %r : tensor<?x3x?x20xf32>
}
