// RUN: attn-opt %s -split-input-file -verify-diagnostics

// The diagnostics of SPEC §8 layouts: a ragged attn.linear_recurrence (per-step
// operands packed token-major [T, H, F], the state a pool [N, Hv, Dk, Dv]) and
// attn.sdpa over a paged cache.

func.func @rank(%q: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %pool: tensor<5x8x16x12xf32>, %cu: tensor<3xi32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{'query' must be a rank-3 tensor [T, Hk, Dk], got 'tensor<2x4x7x16xf32>'}}
  %o, %s = attn.linear_recurrence linear %q, %q, %v state(%pool : tensor<5x8x16x12xf32>) ragged(%cu, %idx : tensor<3xi32>, tensor<2xi32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @count(%q: tensor<9x4x16xf32>, %v: tensor<9x8x12xf32>, %pool: tensor<5x8x16x12xf32>, %cu: tensor<3xi32>, %idx: tensor<3xi32>) {
  // expected-error @+1 {{'cu_seqlens' must have one more element than 'state_indices' (B + 1 offsets of B sequences), got 3 and 3}}
  %o, %s = attn.linear_recurrence linear %q, %q, %v state(%pool : tensor<5x8x16x12xf32>) ragged(%cu, %idx : tensor<3xi32>, tensor<3xi32>) : tensor<9x4x16xf32>, tensor<9x4x16xf32>, tensor<9x8x12xf32>
  return
}

// -----

func.func @tokens(%q: tensor<9x4x16xf32>, %v: tensor<8x8x12xf32>, %pool: tensor<5x8x16x12xf32>, %cu: tensor<3xi32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{'value' dim 0 (T) must match 'query' dim 0 (T): expected 9, got 8}}
  %o, %s = attn.linear_recurrence linear %q, %q, %v state(%pool : tensor<5x8x16x12xf32>) ragged(%cu, %idx : tensor<3xi32>, tensor<2xi32>) : tensor<9x4x16xf32>, tensor<9x4x16xf32>, tensor<8x8x12xf32>
  return
}

// -----

func.func @gate(%q: tensor<9x4x16xf32>, %v: tensor<9x8x12xf32>, %g: tensor<9x8x1xf32>, %pool: tensor<5x8x16x12xf32>, %cu: tensor<3xi32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{'decay' must be a rank-2 tensor [T, Hv], got 'tensor<9x8x1xf32>'}}
  %o, %s = attn.linear_recurrence decay %q, %q, %v decay(%g : tensor<9x8x1xf32>) state(%pool : tensor<5x8x16x12xf32>) ragged(%cu, %idx : tensor<3xi32>, tensor<2xi32>) : tensor<9x4x16xf32>, tensor<9x4x16xf32>, tensor<9x8x12xf32>
  return
}

// -----

func.func @pool(%q: tensor<9x4x16xf32>, %v: tensor<9x8x12xf32>, %pool: tensor<5x4x16x12xf32>, %cu: tensor<3xi32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{'initial_state' dim 1 (Hv) must match 'value' dim 1 (Hv): expected 8, got 4}}
  %o, %s = attn.linear_recurrence linear %q, %q, %v state(%pool : tensor<5x4x16x12xf32>) ragged(%cu, %idx : tensor<3xi32>, tensor<2xi32>) : tensor<9x4x16xf32>, tensor<9x4x16xf32>, tensor<9x8x12xf32>
  return
}

// -----

func.func @offsets(%q: tensor<9x4x16xf32>, %v: tensor<9x8x12xf32>, %pool: tensor<5x8x16x12xf32>, %cu: tensor<3x1xi32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{'cu_seqlens' must be a rank-1 tensor [B+1], got 'tensor<3x1xi32>'}}
  %o, %s = attn.linear_recurrence linear %q, %q, %v state(%pool : tensor<5x8x16x12xf32>) ragged(%cu, %idx : tensor<3x1xi32>, tensor<2xi32>) : tensor<9x4x16xf32>, tensor<9x4x16xf32>, tensor<9x8x12xf32>
  return
}

// -----

func.func @half(%q: tensor<9x4x16xf32>, %v: tensor<9x8x12xf32>, %pool: tensor<5x8x16x12xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{a ragged batch needs both 'cu_seqlens' and 'state_indices'}}
  %o:2 = "attn.linear_recurrence"(%q, %q, %v, %pool, %cu) <{chunk_size = 64 : i64, gate_eps = 1.0e-6 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0>, rule = #attn.rule<linear>}> : (tensor<9x4x16xf32>, tensor<9x4x16xf32>, tensor<9x8x12xf32>, tensor<5x8x16x12xf32>, tensor<3xi32>) -> (tensor<9x8x12xf32>, tensor<5x8x16x12xf32>)
  return
}

// -----

func.func @paged_heads(%q: tensor<2x6x1x64xf32>, %k: tensor<9x16x4x64xf32>, %v: tensor<9x16x4x32xf32>, %t: tensor<2x4xi32>, %l: tensor<2xi32>) {
  // expected-error @+1 {{'query' dim 1 (H) must be a multiple of 'key' dim 2 (Hkv), got 6 and 4}}
  %o = attn.sdpa %q, %k, %v paged(%t, %l : tensor<2x4xi32>, tensor<2xi32>) {mask = #attn.mask<causal>} : tensor<2x6x1x64xf32>, tensor<9x16x4x64xf32>, tensor<9x16x4x32xf32>
  return
}

// -----

func.func @paged_pages(%q: tensor<2x8x1x64xf32>, %k: tensor<9x16x2x64xf32>, %v: tensor<8x16x2x32xf32>, %t: tensor<2x4xi32>, %l: tensor<2xi32>) {
  // expected-error @+1 {{'value' dim 0 (NP) must match 'key' dim 0 (NP): expected 9, got 8}}
  %o = attn.sdpa %q, %k, %v paged(%t, %l : tensor<2x4xi32>, tensor<2xi32>) {mask = #attn.mask<causal>} : tensor<2x8x1x64xf32>, tensor<9x16x2x64xf32>, tensor<8x16x2x32xf32>
  return
}

// -----

func.func @paged_table(%q: tensor<2x8x1x64xf32>, %k: tensor<9x16x2x64xf32>, %v: tensor<9x16x2x32xf32>, %t: tensor<3x4xi32>, %l: tensor<2xi32>) {
  // expected-error @+1 {{'page_table' dim 0 (B) must match 'query' dim 0 (B): expected 2, got 3}}
  %o = attn.sdpa %q, %k, %v paged(%t, %l : tensor<3x4xi32>, tensor<2xi32>) {mask = #attn.mask<causal>} : tensor<2x8x1x64xf32>, tensor<9x16x2x64xf32>, tensor<9x16x2x32xf32>
  return
}

// -----

func.func @paged_half(%q: tensor<2x8x1x64xf32>, %k: tensor<9x16x2x64xf32>, %v: tensor<9x16x2x32xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{a paged cache needs both 'page_table' and 'seq_lens'}}
  %o = "attn.sdpa"(%q, %k, %v, %t) <{mask = #attn.mask<causal>, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 1, 0, 0, 0>}> ({}, {}) : (tensor<2x8x1x64xf32>, tensor<9x16x2x64xf32>, tensor<9x16x2x32xf32>, tensor<2x4xi32>) -> tensor<2x8x1x32xf32>
  return
}

// -----

func.func @append_heads(%k: tensor<5x4x64xf32>, %v: tensor<5x4x32xf32>, %s: tensor<5xi32>, %kc: tensor<9x16x2x64xf32>, %vc: tensor<9x16x2x32xf32>) {
  // expected-error @+1 {{'key' dim 1 (Hkv) must match 'key_cache' dim 2 (Hkv): expected 2, got 4}}
  %a, %b = attn.kv_append %k, %v, %s into %kc, %vc : tensor<5x4x64xf32>, tensor<5x4x32xf32>, tensor<5xi32>, tensor<9x16x2x64xf32>, tensor<9x16x2x32xf32>
  return
}

// -----

func.func @append_values_without_their_cache(%k: tensor<5x2x64xf32>, %v: tensor<5x2x32xf32>, %s: tensor<5xi32>, %kc: tensor<9x16x2x64xf32>) {
  // The custom form cannot say this; the generic one can.
  // expected-error @+1 {{takes 'value' and 'value_cache' together (a latent cache has neither)}}
  %a = "attn.kv_append"(%k, %v, %s, %kc) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 0>}> : (tensor<5x2x64xf32>, tensor<5x2x32xf32>, tensor<5xi32>, tensor<9x16x2x64xf32>) -> tensor<9x16x2x64xf32>
  return
}

// -----

func.func @append_slots(%k: tensor<5x2x64xf32>, %v: tensor<5x2x32xf32>, %s: tensor<4xi32>, %kc: tensor<9x16x2x64xf32>, %vc: tensor<9x16x2x32xf32>) {
  // expected-error @+1 {{'slots' dim 0 (T) must match 'key' dim 0 (T): expected 5, got 4}}
  %a, %b = attn.kv_append %k, %v, %s into %kc, %vc : tensor<5x2x64xf32>, tensor<5x2x32xf32>, tensor<4xi32>, tensor<9x16x2x64xf32>, tensor<9x16x2x32xf32>
  return
}

// -----

func.func @ragged_keys_missing(%q: tensor<9x8x64xf32>, %k: tensor<12x2x64xf32>, %v: tensor<12x2x32xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{a ragged batch needs the keys' offsets 'cu_seqlens_k' (or a paged cache)}}
  %o = attn.sdpa %q, %k, %v ragged(%cu : tensor<3xi32>) {mask = #attn.mask<causal>} : tensor<9x8x64xf32>, tensor<12x2x64xf32>, tensor<12x2x32xf32>
  return
}

// -----

func.func @ragged_paged_key_offsets(%q: tensor<9x8x64xf32>, %k: tensor<5x16x2x64xf32>, %v: tensor<5x16x2x32xf32>, %t: tensor<2x4xi32>, %l: tensor<2xi32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{a ragged batch over a paged cache takes the queries' offsets alone: the cache's 'seq_lens' place the keys}}
  %o = attn.sdpa %q, %k, %v paged(%t, %l : tensor<2x4xi32>, tensor<2xi32>) ragged(%cu, %cu : tensor<3xi32>, tensor<3xi32>) {mask = #attn.mask<causal>} : tensor<9x8x64xf32>, tensor<5x16x2x64xf32>, tensor<5x16x2x32xf32>
  return
}

// -----

func.func @ragged_query_rank(%q: tensor<1x8x9x64xf32>, %k: tensor<12x2x64xf32>, %v: tensor<12x2x32xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{'query' must be a rank-3 tensor [T, H, D]}}
  %o = attn.sdpa %q, %k, %v ragged(%cu, %cu : tensor<3xi32>, tensor<3xi32>) {mask = #attn.mask<causal>} : tensor<1x8x9x64xf32>, tensor<12x2x64xf32>, tensor<12x2x32xf32>
  return
}

// -----

func.func @ragged_offsets_count(%q: tensor<9x8x64xf32>, %k: tensor<12x2x64xf32>, %v: tensor<12x2x32xf32>, %cu_q: tensor<3xi32>, %cu_k: tensor<4xi32>) {
  // expected-error @+1 {{'cu_seqlens_k' dim 0 (B+1) must match 'cu_seqlens_q' dim 0 (B+1): expected 3, got 4}}
  %o = attn.sdpa %q, %k, %v ragged(%cu_q, %cu_k : tensor<3xi32>, tensor<4xi32>) {mask = #attn.mask<causal>} : tensor<9x8x64xf32>, tensor<12x2x64xf32>, tensor<12x2x32xf32>
  return
}

// -----

func.func @ragged_paged_batch(%q: tensor<9x8x64xf32>, %k: tensor<5x16x2x64xf32>, %v: tensor<5x16x2x32xf32>, %t: tensor<2x4xi32>, %l: tensor<2xi32>, %cu: tensor<4xi32>) {
  // expected-error @+1 {{'cu_seqlens_q' must have one more element than 'seq_lens' (B + 1 offsets of B sequences), got 4 and 2}}
  %o = attn.sdpa %q, %k, %v paged(%t, %l : tensor<2x4xi32>, tensor<2xi32>) ragged(%cu : tensor<4xi32>) {mask = #attn.mask<causal>} : tensor<9x8x64xf32>, tensor<5x16x2x64xf32>, tensor<5x16x2x32xf32>
  return
}

// -----

func.func @ragged_gate(%q: tensor<9x8x64xf32>, %k: tensor<12x2x64xf32>, %v: tensor<12x2x32xf32>, %g: tensor<9x8x7xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{'gate' dim 2 must be 1 (headwise gate) or match 'value' dim 2 (Dv, elementwise gate): expected 1 or 32, got 7}}
  %o = attn.sdpa %q, %k, %v gate(%g) ragged(%cu, %cu : tensor<3xi32>, tensor<3xi32>) {mask = #attn.mask<causal>} : tensor<9x8x64xf32>, tensor<12x2x64xf32>, tensor<12x2x32xf32>, tensor<9x8x7xf32>
  return
}

// -----

func.func @paged_tree_parents(%q: tensor<2x8x4x64xf32>, %k: tensor<5x16x2x64xf32>, %v: tensor<5x16x2x32xf32>, %p: tensor<2x5xi32>, %t: tensor<2x4xi32>, %l: tensor<2xi32>) {
  // expected-error @+1 {{'parents' dim 1 (T) must match 'query' dim 2 (T): expected 4, got 5}}
  %o = attn.tree_sdpa %q, %k, %v, %p paged(%t, %l : tensor<2x4xi32>, tensor<2xi32>) : tensor<2x8x4x64xf32>, tensor<5x16x2x64xf32>, tensor<5x16x2x32xf32>, tensor<2x5xi32>
  return
}

// -----

func.func @packed_tree_offsets(%q: tensor<2x8x4x64xf32>, %k: tensor<20x2x64xf32>, %v: tensor<20x2x32xf32>, %p: tensor<2x4xi32>, %cu: tensor<4xi32>) {
  // expected-error @+1 {{'cu_seqlens_k' must hold B + 1 offsets for the B = 2 trees of 'query', got 4}}
  %o = attn.tree_sdpa %q, %k, %v, %p packed(%cu : tensor<4xi32>) : tensor<2x8x4x64xf32>, tensor<20x2x64xf32>, tensor<20x2x32xf32>, tensor<2x4xi32>
  return
}

// -----

func.func @packed_tree_key_rank(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x20x64xf32>, %v: tensor<20x2x32xf32>, %p: tensor<2x4xi32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{'key' must be a rank-3 tensor [Tk, Hkv, D]}}
  %o = attn.tree_sdpa %q, %k, %v, %p packed(%cu : tensor<3xi32>) : tensor<2x8x4x64xf32>, tensor<2x2x20x64xf32>, tensor<20x2x32xf32>, tensor<2x4xi32>
  return
}

// -----

func.func @packed_tree_and_pages(%q: tensor<2x8x4x64xf32>, %k: tensor<5x16x2x64xf32>, %v: tensor<5x16x2x32xf32>, %p: tensor<2x4xi32>, %t: tensor<2x4xi32>, %l: tensor<2xi32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{takes a paged cache or packed keys, not both}}
  %o = attn.tree_sdpa %q, %k, %v, %p paged(%t, %l : tensor<2x4xi32>, tensor<2xi32>) packed(%cu : tensor<3xi32>) : tensor<2x8x4x64xf32>, tensor<5x16x2x64xf32>, tensor<5x16x2x32xf32>, tensor<2x4xi32>
  return
}

// -----

func.func @packed_compact_offsets(%k: tensor<20x2x64xf32>, %v: tensor<20x2x32xf32>, %path: tensor<2x4xi32>, %length: tensor<2xi32>, %cu: tensor<2xi32>) {
  // expected-error @+1 {{'cu_seqlens_k' must hold B + 1 offsets for the B = 2 paths of 'path', got 2}}
  %k2, %v2 = attn.kv_compact %k, %v, %path, %length packed(%cu : tensor<2xi32>) : tensor<20x2x64xf32>, tensor<20x2x32xf32>, tensor<2x4xi32>, tensor<2xi32>
  return
}

// -----

func.func @packed_compact_value_heads(%k: tensor<20x2x64xf32>, %v: tensor<20x1x32xf32>, %path: tensor<2x4xi32>, %length: tensor<2xi32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{'value' dim 1 (Hkv) must match 'key' dim 1 (Hkv): expected 2, got 1}}
  %k2, %v2 = attn.kv_compact %k, %v, %path, %length packed(%cu : tensor<3xi32>) : tensor<20x2x64xf32>, tensor<20x1x32xf32>, tensor<2x4xi32>, tensor<2xi32>
  return
}

// -----

func.func @meta_block_is_page(%kc: tensor<?x16x2x24xf32>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{over a paged cache the blocks are its pages: 'block_size' (8) must be the page size P = 16}}
  %meta = attn.block_meta %kc paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>) {block_size = 8} : tensor<?x16x2x24xf32>
  return
}

// -----

func.func @topk_length_and_pages(%q: tensor<?x4x?x24xf32>, %meta: tensor<?x2x2x24xf32>, %lk: index, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{needs either 'key_length' or a paged cache's 'page_table' and 'seq_lens', not both}}
  %b = attn.select_topk %q, %meta, %lk paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>) {block_size = 16, top_k = 4, mask = #attn.mask<causal>} : tensor<?x4x?x24xf32>, tensor<?x2x2x24xf32>
  return
}

// -----

func.func @topk_page_meta_rank(%q: tensor<?x4x?x24xf32>, %meta: tensor<?x2x?x2x24xf32>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'meta' must be a rank-4 tensor [NP, 2, Hkv, D]}}
  %b = attn.select_topk %q, %meta paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>) {block_size = 16, top_k = 4, mask = #attn.mask<causal>} : tensor<?x4x?x24xf32>, tensor<?x2x?x2x24xf32>
  return
}

// -----

func.func @topk_page_table_batch(%q: tensor<2x4x?x24xf32>, %meta: tensor<?x2x2x24xf32>, %pt: tensor<3x?xi32>, %lens: tensor<3xi32>) {
  // expected-error @+1 {{'page_table' dim 0 (B) must match 'query' dim 0 (B): expected 2, got 3}}
  %b = attn.select_topk %q, %meta paged(%pt, %lens : tensor<3x?xi32>, tensor<3xi32>) {block_size = 16, top_k = 4, mask = #attn.mask<causal>} : tensor<2x4x?x24xf32>, tensor<?x2x2x24xf32>
  return
}

// -----

func.func @topp_cache_heads(%q: tensor<?x3x?x24xf32>, %kc: tensor<?x16x2x24xf32>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'query' dim 1 (H) must be a multiple of 'key' dim 2 (Hkv), got 3 and 2}}
  %t = attn.select_topp %q, %kc paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>) {top_p = 0.9, mask = #attn.mask<causal>} : tensor<?x3x?x24xf32>, tensor<?x16x2x24xf32>
  return
}

// -----

func.func @sparse_cache_feature(%q: tensor<?x4x?x24xf32>, %kc: tensor<?x16x2x32xf32>, %vc: tensor<?x16x2x20xf32>, %s: tensor<?x4x?x4xi32>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>) {
  // expected-error @+1 {{'key' dim 3 (D) must match 'query' dim 3 (D)}}
  %o = attn.sparse_sdpa %q, %kc, %vc, %s paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>) {block_size = 16, mask = #attn.mask<causal>} : tensor<?x4x?x24xf32>, tensor<?x16x2x32xf32>, tensor<?x16x2x20xf32>, tensor<?x4x?x4xi32>
  return
}

// -----

func.func @ragged_selection_needs_pages(%q: tensor<?x4x24xf32>, %k: tensor<?x2x?x24xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{a ragged batch's selections read their keys from a paged cache: 'ragged' needs 'paged'}}
  %t = attn.select_topp %q, %k ragged(%cu : tensor<?xi32>) {top_p = 0.9, mask = #attn.mask<causal>} : tensor<?x4x24xf32>, tensor<?x2x?x24xf32>
  return
}

// -----

func.func @ragged_selection_rows(%q: tensor<?x4x24xf32>, %kc: tensor<?x16x2x24xf32>, %vc: tensor<?x16x2x20xf32>, %s: tensor<?x4x3x8xi32>, %pt: tensor<?x?xi32>, %lens: tensor<?xi32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'selection' must be a rank-3 tensor [T, H, N]}}
  %o = attn.sparse_sdpa %q, %kc, %vc, %s paged(%pt, %lens : tensor<?x?xi32>, tensor<?xi32>) ragged(%cu : tensor<?xi32>) {block_size = 16, mask = #attn.mask<causal>} : tensor<?x4x24xf32>, tensor<?x16x2x24xf32>, tensor<?x16x2x20xf32>, tensor<?x4x3x8xi32>
  return
}

// -----

func.func @page_meta_update_heads(%kc: tensor<9x16x2x64xf32>, %s: tensor<5xi32>, %m: tensor<9x2x4x64xf32>) {
  // expected-error @+1 {{'meta' dim 2 (Hkv) must match 'key_cache' dim 2 (Hkv): expected 2, got 4}}
  %a = attn.page_meta_update %kc, %s into %m : tensor<9x16x2x64xf32>, tensor<5xi32>, tensor<9x2x4x64xf32>
  return
}

// -----

func.func @page_meta_update_pages(%kc: tensor<9x16x2x64xf32>, %s: tensor<5xi32>, %m: tensor<8x2x2x64xf32>) {
  // expected-error @+1 {{'meta' dim 0 (NP) must match 'key_cache' dim 0 (NP): expected 9, got 8}}
  %a = attn.page_meta_update %kc, %s into %m : tensor<9x16x2x64xf32>, tensor<5xi32>, tensor<8x2x2x64xf32>
  return
}

// -----

func.func @page_meta_update_bounds(%kc: tensor<9x16x2x64xf32>, %s: tensor<5xi32>, %m: tensor<9x3x2x64xf32>) {
  // expected-error @+1 {{'meta' holds a page's min and max: its dim 1 must be 2, got 3}}
  %a = attn.page_meta_update %kc, %s into %m : tensor<9x16x2x64xf32>, tensor<5xi32>, tensor<9x3x2x64xf32>
  return
}

// -----

// The operand lists say which form an append is: 3 and 2, or 2 and 1.
func.func @append_operand_lists(%k: tensor<5x2x64xf32>, %s: tensor<5xi32>, %kc: tensor<9x16x2x64xf32>) {
  // expected-error @+1 {{expected key, [value,] slots into key_cache[, value_cache], got 2 operands before 'into' and 2 after}}
  %a, %b = attn.kv_append %k, %s into %kc, %kc : tensor<5x2x64xf32>, tensor<5xi32>, tensor<9x16x2x64xf32>, tensor<9x16x2x64xf32>
  return
}

// -----

func.func @compact_operands(%k: tensor<2x2x9x64xf32>, %path: tensor<2x4xi32>) {
  // expected-error @+1 {{expected key, [value,] path and length, got 2 operands}}
  %a = attn.kv_compact %k, %path : tensor<2x2x9x64xf32>, tensor<2x4xi32>
  return
}

// -----

func.func @compact_types(%k: tensor<2x2x9x64xf32>, %path: tensor<2x4xi32>, %len: tensor<2xi32>) {
  // expected-error @+1 {{expected 3 types, one per operand, got 2}}
  %a = attn.kv_compact %k, %path, %len : tensor<2x2x9x64xf32>, tensor<2x4xi32>
  return
}

// -----

func.func @pool_and_ragged(%q: tensor<9x2x16xf32>, %v: tensor<9x2x8xf32>, %pool: tensor<5x2x16x8xf32>, %cu: tensor<3xi32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{a ragged batch names its pool slots with its offsets: 'pool_indices' is for [B, H, L, ...] steps}}
  %o, %s = attn.linear_recurrence linear %q, %q, %v state(%pool : tensor<5x2x16x8xf32>) ragged(%cu, %idx : tensor<3xi32>, tensor<2xi32>) pool(%idx : tensor<2xi32>) : tensor<9x2x16xf32>, tensor<9x2x16xf32>, tensor<9x2x8xf32>
  return
}

// -----

func.func @pool_slot_per_row(%q: tensor<2x2x7x16xf32>, %v: tensor<2x2x7x8xf32>, %p: tensor<2x7xi32>, %pool: tensor<5x2x16x8xf32>, %idx: tensor<3xi32>) {
  // expected-error @+1 {{'pool_indices' dim 0 (B) must match 'query' dim 0 (B): expected 2, got 3}}
  %o = attn.tree_recurrence linear %q, %q, %v parents(%p : tensor<2x7xi32>) state(%pool : tensor<5x2x16x8xf32>) pool(%idx : tensor<3xi32>) : tensor<2x2x7x16xf32>, tensor<2x2x7x16xf32>, tensor<2x2x7x8xf32>
  return
}

// -----

func.func @pool_state_rank(%q: tensor<2x2x7x16xf32>, %v: tensor<2x2x7x8xf32>, %pool: tensor<2x16x8xf32>, %idx: tensor<2xi32>) {
  // expected-error @+1 {{'initial_state' must be a rank-4 tensor [N, Hv, Dk, Dv]}}
  %o, %s = attn.linear_recurrence linear %q, %q, %v state(%pool : tensor<2x16x8xf32>) pool(%idx : tensor<2xi32>) : tensor<2x2x7x16xf32>, tensor<2x2x7x16xf32>, tensor<2x2x7x8xf32>
  return
}
