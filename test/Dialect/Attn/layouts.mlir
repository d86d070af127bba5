// RUN: attn-opt %s -split-input-file | attn-opt -split-input-file | FileCheck %s
// RUN: attn-opt %s -split-input-file --mlir-print-op-generic | attn-opt -split-input-file | FileCheck %s
// RUN: attn-opt %s --emit-bytecode | attn-opt | FileCheck %s --check-prefix=BYTECODE
// RUN: attn-opt %s -split-input-file -test-attention-interface 2>&1 | FileCheck %s --check-prefix=INTERFACE

// A ragged batch (SPEC §8): attn.linear_recurrence over sequences packed
// token-major, its states in a pool; attn.sdpa over a paged KV cache.

// CHECK-LABEL: func.func @ragged_gated_delta
// CHECK: attn.linear_recurrence gated_delta %{{.*}}, %{{.*}}, %{{.*}} decay(%{{.*}} : tensor<?x8xf32>) beta(%{{.*}} : tensor<?x8xf32>) state(%{{.*}} : tensor<?x8x16x12xf32>) ragged(%{{.*}}, %{{.*}} : tensor<?xi32>, tensor<?xi32>) output_gate(%{{.*}}, %{{.*}} : tensor<?x8x12xf32>, tensor<12xf32>) {qk_l2norm} : tensor<?x4x16xf32>, tensor<?x4x16xf32>, tensor<?x8x12xf32>
// BYTECODE: ragged(
// Dk = 16 is the last dim of the packed q: scale 1/4.
// INTERFACE: remark: q/k/v = operands 0/1/2, mask = #attn.mask<causal>, selection = dense, scale = 2.500000e-01, softcap = 0.000000e+00, normalizer = recurrent_state, epilogue = rmsnorm_silu_gate 8 9, lse = no, ragged: offsets = operand 6, slots = operand 7
func.func @ragged_gated_delta(%q: tensor<?x4x16xf32>, %k: tensor<?x4x16xf32>,
                              %v: tensor<?x8x12xf32>, %g: tensor<?x8xf32>,
                              %b: tensor<?x8xf32>,
                              %pool: tensor<?x8x16x12xf32>,
                              %cu: tensor<?xi32>, %idx: tensor<?xi32>,
                              %z: tensor<?x8x12xf32>, %w: tensor<12xf32>)
    -> (tensor<?x8x12xf32>, tensor<?x8x16x12xf32>) {
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x8xf32>) beta(%b : tensor<?x8xf32>)
      state(%pool : tensor<?x8x16x12xf32>)
      ragged(%cu, %idx : tensor<?xi32>, tensor<?xi32>)
      output_gate(%z, %w : tensor<?x8x12xf32>, tensor<12xf32>) {qk_l2norm}
      : tensor<?x4x16xf32>, tensor<?x4x16xf32>, tensor<?x8x12xf32>
  return %o, %s : tensor<?x8x12xf32>, tensor<?x8x16x12xf32>
}

// -----

// gla's decay per key feature, [T, Hv, Dk]; static sizes.
// CHECK-LABEL: func.func @ragged_gla
// CHECK: attn.linear_recurrence gla {{.*}} decay(%{{.*}} : tensor<9x2x16xf32>) state(%{{.*}} : tensor<5x2x16x8xf32>) ragged(%{{.*}}, %{{.*}} : tensor<4xi32>, tensor<3xi32>)
// INTERFACE: remark: q/k/v = operands 0/0/2, {{.*}}, ragged: offsets = operand 5, slots = operand 6
func.func @ragged_gla(%q: tensor<9x2x16xf32>, %v: tensor<9x2x8xf32>,
                      %g: tensor<9x2x16xf32>, %pool: tensor<5x2x16x8xf32>,
                      %cu: tensor<4xi32>, %idx: tensor<3xi32>)
    -> tensor<9x2x8xf32> {
  %o, %s = attn.linear_recurrence gla %q, %q, %v
      decay(%g : tensor<9x2x16xf32>) state(%pool : tensor<5x2x16x8xf32>)
      ragged(%cu, %idx : tensor<4xi32>, tensor<3xi32>)
      : tensor<9x2x16xf32>, tensor<9x2x16xf32>, tensor<9x2x8xf32>
  return %o : tensor<9x2x8xf32>
}

// -----

// The rmsnorm-silu gate on packed rows [T, H, Dv].
// CHECK-LABEL: func.func @packed_gate
// CHECK: attn.rmsnorm_gate
func.func @packed_gate(%o: tensor<?x8x12xf32>, %z: tensor<?x8x12xf32>,
                       %w: tensor<12xf32>) -> tensor<?x8x12xf32> {
  %r = attn.rmsnorm_gate %o, %z, %w {eps = 1.0e-6}
      : tensor<?x8x12xf32>, tensor<?x8x12xf32>, tensor<12xf32>
  return %r : tensor<?x8x12xf32>
}

// -----

// A paged KV cache (SPEC §8): attn.sdpa reads keys and values [NP, P, Hkv,
// F] through the page table.
// CHECK-LABEL: func.func @paged_sdpa
// CHECK: attn.sdpa %{{.*}}, %{{.*}}, %{{.*}} gate(%{{.*}}) paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) {mask = #attn.mask<causal>, return_lse} : tensor<?x8x?x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>, tensor<?x8x?x1xf32>
// BYTECODE: paged(
func.func @paged_sdpa(%q: tensor<?x8x?x64xf32>, %k: tensor<?x16x2x64xf32>,
                      %v: tensor<?x16x2x32xf32>, %g: tensor<?x8x?x1xf32>,
                      %table: tensor<?x?xi32>, %lens: tensor<?xi32>)
    -> (tensor<?x8x?x32xf32>, tensor<?x8x?xf32>) {
  %o, %lse = attn.sdpa %q, %k, %v gate(%g)
      paged(%table, %lens : tensor<?x?xi32>, tensor<?xi32>)
      {mask = #attn.mask<causal>, return_lse}
      : tensor<?x8x?x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>,
        tensor<?x8x?x1xf32>
  return %o, %lse : tensor<?x8x?x32xf32>, tensor<?x8x?xf32>
}

// -----

// A ragged softmax batch (SPEC §8): queries, gate, output and lse packed
// token-major [T, H, F] with their offsets, keys packed [Tk, Hkv, F] with
// theirs; D = 64 is the last dim of the packed q: scale 1/8.
// CHECK-LABEL: func.func @ragged_sdpa
// CHECK: attn.sdpa %{{.*}}, %{{.*}}, %{{.*}} gate(%{{.*}}) ragged(%{{.*}}, %{{.*}} : tensor<?xi32>, tensor<?xi32>) {mask = #attn.mask<causal>, return_lse} : tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x32xf32>, tensor<?x8x32xf32>
// BYTECODE: ragged(
// INTERFACE: remark: q/k/v = operands 0/1/2, mask = #attn.mask<causal>, selection = dense, scale = 1.250000e-01, softcap = 0.000000e+00, normalizer = softmax, epilogue = sigmoid_gate 3, lse = yes, ragged: offsets = operand 4, key offsets = operand 5
func.func @ragged_sdpa(%q: tensor<?x8x64xf32>, %k: tensor<?x2x64xf32>,
                       %v: tensor<?x2x32xf32>, %g: tensor<?x8x32xf32>,
                       %cu_q: tensor<?xi32>, %cu_k: tensor<?xi32>)
    -> (tensor<?x8x32xf32>, tensor<?x8xf32>) {
  %o, %lse = attn.sdpa %q, %k, %v gate(%g)
      ragged(%cu_q, %cu_k : tensor<?xi32>, tensor<?xi32>)
      {mask = #attn.mask<causal>, return_lse}
      : tensor<?x8x64xf32>, tensor<?x2x64xf32>, tensor<?x2x32xf32>,
        tensor<?x8x32xf32>
  return %o, %lse : tensor<?x8x32xf32>, tensor<?x8xf32>
}

// -----

// A ragged batch over a paged cache: the queries' offsets alone.
// CHECK-LABEL: func.func @ragged_paged_sdpa
// CHECK: attn.sdpa %{{.*}}, %{{.*}}, %{{.*}} paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) ragged(%{{.*}} : tensor<?xi32>) {mask = #attn.mask<causal>} : tensor<?x8x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>
// INTERFACE: remark: q/k/v = operands 0/1/2, mask = #attn.mask<causal>, selection = dense, scale = 1.250000e-01, softcap = 0.000000e+00, normalizer = softmax, epilogue = none, lse = no, ragged: offsets = operand 5
func.func @ragged_paged_sdpa(%q: tensor<?x8x64xf32>, %k: tensor<?x16x2x64xf32>,
                             %v: tensor<?x16x2x32xf32>, %table: tensor<?x?xi32>,
                             %lens: tensor<?xi32>, %cu_q: tensor<?xi32>)
    -> tensor<?x8x32xf32> {
  %o = attn.sdpa %q, %k, %v
      paged(%table, %lens : tensor<?x?xi32>, tensor<?xi32>)
      ragged(%cu_q : tensor<?xi32>) {mask = #attn.mask<causal>}
      : tensor<?x8x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>
  return %o : tensor<?x8x32xf32>
}

// -----

// A draft tree over a paged cache: each sequence's last T keys are its
// tree's.
// CHECK-LABEL: func.func @paged_tree
// CHECK: attn.tree_sdpa %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) {window = 8 : i64} : tensor<?x8x?x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>, tensor<?x?xi32>
func.func @paged_tree(%q: tensor<?x8x?x64xf32>, %k: tensor<?x16x2x64xf32>,
                      %v: tensor<?x16x2x32xf32>, %parents: tensor<?x?xi32>,
                      %table: tensor<?x?xi32>, %lens: tensor<?xi32>)
    -> tensor<?x8x?x32xf32> {
  %o = attn.tree_sdpa %q, %k, %v, %parents
      paged(%table, %lens : tensor<?x?xi32>, tensor<?xi32>) {window = 8}
      : tensor<?x8x?x64xf32>, tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>,
        tensor<?x?xi32>
  return %o : tensor<?x8x?x32xf32>
}

// -----

// A draft tree over a ragged batch's packed keys: T nodes per sequence
// (queries [B, H, T, D]), each sequence's last T keys its tree's; the
// accepted rows compacted within each sequence.
// CHECK-LABEL: func.func @packed_tree
// CHECK: attn.tree_sdpa %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} packed(%{{.*}} : tensor<?xi32>) {chunk = 16 : i64} : tensor<?x8x?x64xf32>, tensor<?x2x64xf32>, tensor<?x2x32xf32>, tensor<?x?xi32>
// CHECK: attn.kv_compact %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} packed(%{{.*}} : tensor<?xi32>) : tensor<?x2x64xf32>, tensor<?x2x32xf32>, tensor<?x?xi32>, tensor<?xi32>
// CHECK: attn.kv_compact %{{.*}}, %{{.*}}, %{{.*}} packed(%{{.*}} : tensor<?xi32>) : tensor<?x2x64xf32>, tensor<?x?xi32>, tensor<?xi32>
// BYTECODE: packed
// INTERFACE: remark: q/k/v = operands 0/1/2, mask = {{.*}}, selection = tree (operand 3{{.*}}, packed keys: offsets = operand 4
func.func @packed_tree(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x64xf32>,
                       %v: tensor<?x2x32xf32>, %parents: tensor<?x?xi32>,
                       %cu: tensor<?xi32>, %path: tensor<?x?xi32>,
                       %length: tensor<?xi32>)
    -> (tensor<?x8x?x32xf32>, tensor<?x2x64xf32>, tensor<?x2x32xf32>,
        tensor<?x2x64xf32>) {
  %o = attn.tree_sdpa %q, %k, %v, %parents packed(%cu : tensor<?xi32>)
      {chunk = 16}
      : tensor<?x8x?x64xf32>, tensor<?x2x64xf32>, tensor<?x2x32xf32>,
        tensor<?x?xi32>
  %k2, %v2 = attn.kv_compact %k, %v, %path, %length
      packed(%cu : tensor<?xi32>)
      : tensor<?x2x64xf32>, tensor<?x2x32xf32>, tensor<?x?xi32>,
        tensor<?xi32>
  %kv2 = attn.kv_compact %k, %path, %length packed(%cu : tensor<?xi32>)
      : tensor<?x2x64xf32>, tensor<?x?xi32>, tensor<?xi32>
  return %o, %k2, %v2, %kv2
      : tensor<?x8x?x32xf32>, tensor<?x2x64xf32>, tensor<?x2x32xf32>,
        tensor<?x2x64xf32>
}

// -----

// New rows written to their slots of a paged cache (SPEC §8 .append).
// CHECK-LABEL: func.func @append
// CHECK: attn.kv_append %{{.*}}, %{{.*}}, %{{.*}} into %{{.*}}, %{{.*}} : tensor<?x2x64xf32>, tensor<?x2x32xf32>, tensor<?xi32>, tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>
// BYTECODE: kv_append
func.func @append(%k: tensor<?x2x64xf32>, %v: tensor<?x2x32xf32>,
                  %slots: tensor<?xi32>, %kc: tensor<?x16x2x64xf32>,
                  %vc: tensor<?x16x2x32xf32>)
    -> (tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>) {
  %kc2, %vc2 = attn.kv_append %k, %v, %slots into %kc, %vc
      : tensor<?x2x64xf32>, tensor<?x2x32xf32>, tensor<?xi32>,
        tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>
  return %kc2, %vc2 : tensor<?x16x2x64xf32>, tensor<?x16x2x32xf32>
}

// -----

// The bounds of the pages an append wrote, refreshed in place.
// CHECK-LABEL: func.func @page_meta_update
// CHECK: attn.page_meta_update %{{.*}}, %{{.*}} into %{{.*}} : tensor<?x16x2x64xf32>, tensor<?xi32>, tensor<?x2x2x64xf32>
// BYTECODE: page_meta_update
func.func @page_meta_update(%kc: tensor<?x16x2x64xf32>, %slots: tensor<?xi32>,
                            %meta: tensor<?x2x2x64xf32>)
    -> tensor<?x2x2x64xf32> {
  %meta2 = attn.page_meta_update %kc, %slots into %meta
      : tensor<?x16x2x64xf32>, tensor<?xi32>, tensor<?x2x2x64xf32>
  return %meta2 : tensor<?x2x2x64xf32>
}

// -----

// Sparsity over a paged cache: each page's bounds [NP, 2, Hkv, D], top-k
// pages and top-p tokens through the page table, and attention over them.
// CHECK-LABEL: func.func @paged_sparsity
// CHECK: attn.block_meta %{{.*}} paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) {block_size = 16 : i64} : tensor<?x16x2x24xf32>
// CHECK: attn.select_topk %{{.*}}, %{{.*}} paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) {{.*}}top_k = 4 : i64} : tensor<?x4x?x24xf32>, tensor<?x2x2x24xf32>
// CHECK: attn.select_topp %{{.*}}, %{{.*}} paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) blocks(%{{.*}})
// CHECK: attn.sparse_sdpa %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} gate(%{{.*}}) paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) {block_size = 1 : i64
// INTERFACE: remark: q/k/v = operands 0/1/2, mask = #attn.mask<causal>, selection = blocks (operand 3, block 1), {{.*}}, epilogue = sigmoid_gate 4
func.func @paged_sparsity(%q: tensor<?x4x?x24xf32>,
                          %kc: tensor<?x16x2x24xf32>,
                          %vc: tensor<?x16x2x20xf32>,
                          %pt: tensor<?x?xi32>, %lens: tensor<?xi32>,
                          %g: tensor<?x4x?x1xf32>)
    -> tensor<?x4x?x20xf32> {
  %meta = attn.block_meta %kc paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>)
      {block_size = 16} : tensor<?x16x2x24xf32>
  %blocks = attn.select_topk %q, %meta
      paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>)
      {block_size = 16, top_k = 4, sink_blocks = 1, local_blocks = 1,
       mask = #attn.mask<causal>}
      : tensor<?x4x?x24xf32>, tensor<?x2x2x24xf32>
  %tokens = attn.select_topp %q, %kc
      paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>) blocks(%blocks)
      {top_p = 0.9, block_size = 16, mask = #attn.mask<causal>}
      : tensor<?x4x?x24xf32>, tensor<?x16x2x24xf32>, tensor<?x4x?x?xi32>
  %o = attn.sparse_sdpa %q, %kc, %vc, %tokens gate(%g)
      paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>)
      {block_size = 1, mask = #attn.mask<causal>}
      : tensor<?x4x?x24xf32>, tensor<?x16x2x24xf32>, tensor<?x16x2x20xf32>,
        tensor<?x4x?x?xi32>, tensor<?x4x?x1xf32>
  return %o : tensor<?x4x?x20xf32>
}

// -----

// A static table bounds the selections: min(top_k, MP) blocks, MP * P
// tokens.
// CHECK-LABEL: func.func @paged_selection_sizes
// CHECK: attn.select_topk {{.*}} : tensor<2x4x3x24xf32>, tensor<9x2x2x24xf32>
// CHECK: attn.select_topp {{.*}} : tensor<2x4x3x24xf32>, tensor<9x4x2x24xf32>
func.func @paged_selection_sizes(%q: tensor<2x4x3x24xf32>,
                                 %meta: tensor<9x2x2x24xf32>,
                                 %kc: tensor<9x4x2x24xf32>,
                                 %pt: tensor<2x5xi32>, %lens: tensor<2xi32>)
    -> (tensor<2x4x3x5xi32>, tensor<2x4x3x20xi32>) {
  %blocks = attn.select_topk %q, %meta
      paged(%pt, %lens : tensor<2x5xi32>, tensor<2xi32>)
      {block_size = 4, top_k = 8, mask = #attn.mask<causal>}
      : tensor<2x4x3x24xf32>, tensor<9x2x2x24xf32>
  %tokens = attn.select_topp %q, %kc
      paged(%pt, %lens : tensor<2x5xi32>, tensor<2xi32>)
      {top_p = 0.5, mask = #attn.mask<causal>}
      : tensor<2x4x3x24xf32>, tensor<9x4x2x24xf32>
  return %blocks, %tokens : tensor<2x4x3x5xi32>, tensor<2x4x3x20xi32>
}

// -----

// The same over a ragged batch: rows packed token-major, selections
// [T, H, N].
// CHECK-LABEL: func.func @ragged_paged_sparsity
// CHECK: attn.select_topk %{{.*}}, %{{.*}} paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) ragged(%{{.*}} : tensor<?xi32>)
// CHECK: attn.select_topp %{{.*}}, %{{.*}} paged(%{{.*}}, %{{.*}} : tensor<?x?xi32>, tensor<?xi32>) ragged(%{{.*}} : tensor<?xi32>) blocks(%{{.*}})
// CHECK: attn.sparse_sdpa {{.*}} ragged(%{{.*}} : tensor<?xi32>) {block_size = 1 : i64, mask = #attn.mask<causal>, return_lse} : tensor<?x4x24xf32>, tensor<?x16x2x24xf32>, tensor<?x16x2x20xf32>, tensor<?x4x?xi32>
func.func @ragged_paged_sparsity(%q: tensor<?x4x24xf32>,
                                 %kc: tensor<?x16x2x24xf32>,
                                 %vc: tensor<?x16x2x20xf32>,
                                 %meta: tensor<?x2x2x24xf32>,
                                 %pt: tensor<?x?xi32>, %lens: tensor<?xi32>,
                                 %cu: tensor<?xi32>)
    -> (tensor<?x4x20xf32>, tensor<?x4xf32>) {
  %blocks = attn.select_topk %q, %meta
      paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>)
      ragged(%cu : tensor<?xi32>)
      {block_size = 16, top_k = 4, mask = #attn.mask<causal>}
      : tensor<?x4x24xf32>, tensor<?x2x2x24xf32>
  %tokens = attn.select_topp %q, %kc
      paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>)
      ragged(%cu : tensor<?xi32>) blocks(%blocks)
      {top_p = 0.9, block_size = 16, mask = #attn.mask<causal>}
      : tensor<?x4x24xf32>, tensor<?x16x2x24xf32>, tensor<?x4x?xi32>
  %o, %lse = attn.sparse_sdpa %q, %kc, %vc, %tokens
      paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>)
      ragged(%cu : tensor<?xi32>)
      {block_size = 1, mask = #attn.mask<causal>, return_lse}
      : tensor<?x4x24xf32>, tensor<?x16x2x24xf32>, tensor<?x16x2x20xf32>,
        tensor<?x4x?xi32>
  return %o, %lse : tensor<?x4x20xf32>, tensor<?x4xf32>
}

// -----

// A ragged layer's draft tree over its state pool (SPEC §8 over §10): the
// steps stay [B, H, T, ...], batch row b's state is pool slot idx[b]; the
// tree reads it, the commit's recurrence advances it.
// CHECK-LABEL: func.func @pooled_tree_commit
// CHECK: attn.tree_recurrence gated_delta {{.*}} parents(%{{.*}} : tensor<?x?xi32>) state(%{{.*}} : tensor<?x8x16x12xf32>) pool(%{{.*}} : tensor<?xi32>)
// CHECK: attn.linear_recurrence gated_delta {{.*}} state(%{{.*}} : tensor<?x8x16x12xf32>) pool(%{{.*}} : tensor<?xi32>)
// BYTECODE: pool(
// INTERFACE: remark: q/k/v = operands 0/1/2, {{.*}}selection = tree{{.*}}, pool: slots = operand 7
// INTERFACE: remark: q/k/v = operands 0/1/2, {{.*}}, pool: slots = operand 6
func.func @pooled_tree_commit(%q: tensor<?x4x?x16xf32>, %k: tensor<?x4x?x16xf32>,
                              %v: tensor<?x8x?x12xf32>, %g: tensor<?x8x?xf32>,
                              %b: tensor<?x8x?xf32>, %parents: tensor<?x?xi32>,
                              %pool: tensor<?x8x16x12xf32>, %idx: tensor<?xi32>)
    -> (tensor<?x8x?x12xf32>, tensor<?x8x16x12xf32>) {
  %o = attn.tree_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) beta(%b : tensor<?x8x?xf32>)
      parents(%parents : tensor<?x?xi32>)
      state(%pool : tensor<?x8x16x12xf32>) pool(%idx : tensor<?xi32>)
      : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x8x?x12xf32>
  %o2, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) beta(%b : tensor<?x8x?xf32>)
      state(%pool : tensor<?x8x16x12xf32>) pool(%idx : tensor<?xi32>)
      : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x8x?x12xf32>
  return %o, %s : tensor<?x8x?x12xf32>, tensor<?x8x16x12xf32>
}
