// RUN: attn-opt %s -canonicalize -split-input-file | FileCheck %s

// An lse nobody reads is not computed.
// CHECK-LABEL: func @drop_unused_lse
// CHECK: %[[O:.+]] = attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} {mask = #attn.mask<causal>, softcap = 5.000000e+00 : f64}
// CHECK-NOT: return_lse
// CHECK: return %[[O]]
func.func @drop_unused_lse(%q: tensor<?x4x?x8xf32>, %k: tensor<?x4x?x8xf32>,
                           %v: tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32> {
  %o, %lse = attn.sdpa %q, %k, %v
      {mask = #attn.mask<causal>, softcap = 5.0, return_lse}
      : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>
  return %o : tensor<?x4x?x8xf32>
}

// -----

// CHECK-LABEL: func @keep_used_lse
// CHECK: %{{.+}}, %[[LSE:.+]] = attn.sdpa {{.+}}return_lse
// CHECK: return %[[LSE]]
func.func @keep_used_lse(%q: tensor<?x4x?x8xf32>, %k: tensor<?x4x?x8xf32>,
                         %v: tensor<?x4x?x8xf32>) -> tensor<?x4x?xf32> {
  %o, %lse = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>, return_lse}
      : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>
  return %lse : tensor<?x4x?xf32>
}

// -----

// CHECK-LABEL: func @drop_unused_tree_lse
// CHECK: attn.tree_sdpa
// CHECK-NOT: return_lse
func.func @drop_unused_tree_lse(%q: tensor<?x4x?x8xf32>, %k: tensor<?x4x?x8xf32>,
                                %v: tensor<?x4x?x8xf32>, %p: tensor<?x?xi32>)
    -> tensor<?x4x?x8xf32> {
  %o, %lse = attn.tree_sdpa %q, %k, %v, %p {return_lse}
      : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>,
        tensor<?x?xi32>
  return %o : tensor<?x4x?x8xf32>
}

// -----

// A window of at least Lk keys hides nothing causal does not.
// CHECK-LABEL: func @window_covering_keys_is_causal
// CHECK: attn.sdpa {{.+}} {mask = #attn.mask<causal>}
func.func @window_covering_keys_is_causal(%q: tensor<1x4x3x8xf32>,
    %k: tensor<1x4x7x8xf32>, %v: tensor<1x4x7x8xf32>) -> tensor<1x4x3x8xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<sliding_window = 7>}
      : tensor<1x4x3x8xf32>, tensor<1x4x7x8xf32>, tensor<1x4x7x8xf32>
  return %o : tensor<1x4x3x8xf32>
}

// -----

// CHECK-LABEL: func @window_hiding_keys_stays
// CHECK: attn.sdpa {{.+}} {mask = #attn.mask<sliding_window = 6>}
func.func @window_hiding_keys_stays(%q: tensor<1x4x3x8xf32>,
    %k: tensor<1x4x7x8xf32>, %v: tensor<1x4x7x8xf32>) -> tensor<1x4x3x8xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<sliding_window = 6>}
      : tensor<1x4x3x8xf32>, tensor<1x4x7x8xf32>, tensor<1x4x7x8xf32>
  return %o : tensor<1x4x3x8xf32>
}

// -----

// Lk unknown: the window may hide keys at run time.
// CHECK-LABEL: func @window_dynamic_length_stays
// CHECK: attn.sdpa {{.+}} {mask = #attn.mask<sliding_window = 4096>}
func.func @window_dynamic_length_stays(%q: tensor<1x4x?x8xf32>,
    %k: tensor<1x4x?x8xf32>, %v: tensor<1x4x?x8xf32>) -> tensor<1x4x?x8xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<sliding_window = 4096>}
      : tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>
  return %o : tensor<1x4x?x8xf32>
}

// -----

// A ragged batch: dim 2 of the packed [T, H, D] rows is the head dim, not a
// length, and each sequence has its own; the window stays.
// CHECK-LABEL: func @window_ragged_stays
// CHECK: attn.sdpa {{.+}} {mask = #attn.mask<sliding_window = 8>}
func.func @window_ragged_stays(%q: tensor<5x4x8xf32>, %k: tensor<9x2x8xf32>,
    %v: tensor<9x2x8xf32>, %cu_q: tensor<3xi32>, %cu_k: tensor<3xi32>)
    -> tensor<5x4x8xf32> {
  %o = attn.sdpa %q, %k, %v ragged(%cu_q, %cu_k : tensor<3xi32>, tensor<3xi32>)
      {mask = #attn.mask<sliding_window = 8>}
      : tensor<5x4x8xf32>, tensor<9x2x8xf32>, tensor<9x2x8xf32>
  return %o : tensor<5x4x8xf32>
}

// -----

// More queries than keys: causal would be invalid, the window stays.
// CHECK-LABEL: func @window_more_queries_than_keys_stays
// CHECK: attn.sdpa {{.+}} {mask = #attn.mask<sliding_window = 9>}
func.func @window_more_queries_than_keys_stays(%q: tensor<1x4x9x8xf32>,
    %k: tensor<1x4x7x8xf32>, %v: tensor<1x4x7x8xf32>) -> tensor<1x4x9x8xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<sliding_window = 9>}
      : tensor<1x4x9x8xf32>, tensor<1x4x7x8xf32>, tensor<1x4x7x8xf32>
  return %o : tensor<1x4x9x8xf32>
}

// -----

// top_k = 3 >= ceil(40 / 16) blocks keeps every candidate: dense attention.
// CHECK-LABEL: func @exhaustive_topk_is_dense
// CHECK-SAME: (%[[Q:.+]]: tensor<1x4x5x8xf32>, %[[K:.+]]: tensor<1x2x40x8xf32>, %[[V:.+]]: tensor<1x2x40x8xf32>, %[[G:.+]]: tensor<1x4x5x1xf32>)
// CHECK-NOT: attn.sparse_sdpa
// CHECK: %[[O:.+]] = attn.sdpa %[[Q]], %[[K]], %[[V]] gate(%[[G]]) {mask = #attn.mask<causal>, scale = 2.500000e-01 : f64}
// CHECK: return %[[O]]
func.func @exhaustive_topk_is_dense(%q: tensor<1x4x5x8xf32>,
    %k: tensor<1x2x40x8xf32>, %v: tensor<1x2x40x8xf32>,
    %g: tensor<1x4x5x1xf32>) -> tensor<1x4x5x8xf32> {
  %c2 = arith.constant 2 : index
  %lk = tensor.dim %k, %c2 : tensor<1x2x40x8xf32>
  %meta = attn.block_meta %k {block_size = 16} : tensor<1x2x40x8xf32>
  %blocks = attn.select_topk %q, %meta, %lk
      {block_size = 16, top_k = 3, sink_blocks = 1, mask = #attn.mask<causal>}
      : tensor<1x4x5x8xf32>, tensor<1x2x3x2x8xf32>
  %o = attn.sparse_sdpa %q, %k, %v, %blocks gate(%g)
      {block_size = 16, mask = #attn.mask<causal>, scale = 0.25}
      : tensor<1x4x5x8xf32>, tensor<1x2x40x8xf32>, tensor<1x2x40x8xf32>,
        tensor<1x4x5x3xi32>, tensor<1x4x5x1xf32>
  return %o : tensor<1x4x5x8xf32>
}

// -----

// top_k = 2 < 3 blocks may drop one: stays sparse.
// CHECK-LABEL: func @budgeted_topk_stays
// CHECK: attn.sparse_sdpa
func.func @budgeted_topk_stays(%q: tensor<1x4x5x8xf32>,
    %k: tensor<1x2x40x8xf32>, %v: tensor<1x2x40x8xf32>) -> tensor<1x4x5x8xf32> {
  %lk = arith.constant 40 : index
  %meta = attn.block_meta %k {block_size = 16} : tensor<1x2x40x8xf32>
  %blocks = attn.select_topk %q, %meta, %lk
      {block_size = 16, top_k = 2, mask = #attn.mask<causal>}
      : tensor<1x4x5x8xf32>, tensor<1x2x3x2x8xf32>
  %o = attn.sparse_sdpa %q, %k, %v, %blocks
      {block_size = 16, mask = #attn.mask<causal>}
      : tensor<1x4x5x8xf32>, tensor<1x2x40x8xf32>, tensor<1x2x40x8xf32>,
        tensor<1x4x5x2xi32>
  return %o : tensor<1x4x5x8xf32>
}

// -----

// The selection placed its rows against another key length: stays sparse.
// CHECK-LABEL: func @topk_other_key_length_stays
// CHECK: attn.sparse_sdpa
func.func @topk_other_key_length_stays(%q: tensor<1x4x5x8xf32>,
    %k: tensor<1x2x40x8xf32>, %v: tensor<1x2x40x8xf32>) -> tensor<1x4x5x8xf32> {
  %lk = arith.constant 33 : index
  %meta = attn.block_meta %k {block_size = 16} : tensor<1x2x40x8xf32>
  %blocks = attn.select_topk %q, %meta, %lk
      {block_size = 16, top_k = 3, mask = #attn.mask<causal>}
      : tensor<1x4x5x8xf32>, tensor<1x2x3x2x8xf32>
  %o = attn.sparse_sdpa %q, %k, %v, %blocks
      {block_size = 16, mask = #attn.mask<causal>}
      : tensor<1x4x5x8xf32>, tensor<1x2x40x8xf32>, tensor<1x2x40x8xf32>,
        tensor<1x4x5x3xi32>
  return %o : tensor<1x4x5x8xf32>
}

// -----

// top_p = 1 without a cap keeps every visible token: dense attention.
// CHECK-LABEL: func @full_topp_is_dense
// CHECK-NOT: attn.sparse_sdpa
// CHECK: %[[O:.+]], %[[LSE:.+]] = attn.sdpa {{.+}} {mask = #attn.mask<sliding_window = 8>, return_lse}
// CHECK: return %[[O]], %[[LSE]]
func.func @full_topp_is_dense(%q: tensor<?x4x?x8xf32>, %k: tensor<?x2x?x8xf32>,
    %v: tensor<?x2x?x8xf32>) -> (tensor<?x4x?x8xf32>, tensor<?x4x?xf32>) {
  %tokens = attn.select_topp %q, %k
      {top_p = 1.0, min_tokens = 4, mask = #attn.mask<sliding_window = 8>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>
  %o, %lse = attn.sparse_sdpa %q, %k, %v, %tokens
      {block_size = 1, mask = #attn.mask<sliding_window = 8>, return_lse}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>,
        tensor<?x4x?x?xi32>
  return %o, %lse : tensor<?x4x?x8xf32>, tensor<?x4x?xf32>
}

// -----

// Over top-k blocks, top_p = 1 keeps the blocks' visible tokens, whatever
// estimates the weights (int4 here).
// CHECK-LABEL: func @full_topp_over_blocks_is_block_sparse
// CHECK-SAME: %[[BLOCKS:[^:]+]]: tensor<?x4x?x6xi32>
// CHECK-NOT: attn.select_topp
// CHECK: attn.sparse_sdpa %{{.+}}, %{{.+}}, %{{.+}}, %[[BLOCKS]] {block_size = 32 : i64, mask = #attn.mask<causal>}
func.func @full_topp_over_blocks_is_block_sparse(%q: tensor<?x4x?x8xf32>,
    %k: tensor<?x2x?x8xf32>, %v: tensor<?x2x?x8xf32>,
    %blocks: tensor<?x4x?x6xi32>) -> tensor<?x4x?x8xf32> {
  %tokens = attn.select_topp %q, %k blocks(%blocks)
      {top_p = 1.0, block_size = 32, estimator = #attn.estimator<int4>,
       mask = #attn.mask<causal>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x4x?x6xi32>
  %o = attn.sparse_sdpa %q, %k, %v, %tokens
      {block_size = 1, mask = #attn.mask<causal>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>,
        tensor<?x4x?x?xi32>
  return %o : tensor<?x4x?x8xf32>
}

// -----

// top_p < 1 (whatever the estimator) or a token cap may drop keys.
// CHECK-LABEL: func @budgeted_topp_stays
// CHECK-COUNT-3: attn.sparse_sdpa
func.func @budgeted_topp_stays(%q: tensor<?x4x?x8xf32>, %k: tensor<?x2x?x8xf32>,
    %v: tensor<?x2x?x8xf32>)
    -> (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) {
  %t0 = attn.select_topp %q, %k {top_p = 0.9, mask = #attn.mask<causal>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>
  %t1 = attn.select_topp %q, %k
      {top_p = 1.0, max_tokens = 64, mask = #attn.mask<causal>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>
  %t2 = attn.select_topp %q, %k
      {top_p = 0.99, estimator = #attn.estimator<int4>, mask = #attn.mask<causal>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>
  %o0 = attn.sparse_sdpa %q, %k, %v, %t0 {block_size = 1, mask = #attn.mask<causal>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x4x?x?xi32>
  %o1 = attn.sparse_sdpa %q, %k, %v, %t1 {block_size = 1, mask = #attn.mask<causal>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x4x?x64xi32>
  %o2 = attn.sparse_sdpa %q, %k, %v, %t2 {block_size = 1, mask = #attn.mask<causal>}
      : tensor<?x4x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x4x?x?xi32>
  return %o0, %o1, %o2 : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>
}

// -----

// Recreating an op keeps its variant regions.
// CHECK-LABEL: func @drop_unused_lse_keeps_regions
// CHECK: attn.sdpa
// CHECK-NOT: return_lse
// CHECK-SAME: score_mod {
// CHECK: math.tanh
// CHECK: } mask_mod {
// CHECK: arith.cmpi
func.func @drop_unused_lse_keeps_regions(%q: tensor<?x4x?x8xf32>, %k: tensor<?x4x?x8xf32>,
                                         %v: tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32> {
  %o, %lse = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>, return_lse}
      : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %t = math.tanh %s : f32
        attn.yield %t : f32
      }
      mask_mod {
      ^bb0(%b: index, %h: index, %qp: index, %kp: index):
        %ne = arith.cmpi ne, %qp, %kp : index
        attn.yield %ne : i1
      }
  return %o : tensor<?x4x?x8xf32>
}
