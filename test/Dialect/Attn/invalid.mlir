// RUN: attn-opt %s -split-input-file -verify-diagnostics

// Every verifier diagnostic of the attn dialect, one case each. Messages name
// the operand, the dimension (index and layout name) and the expected and
// actual value.

func.func @sdpa_query_rank(%q: tensor<8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'attn.sdpa' op 'query' must be a rank-4 tensor [B, H, Lq, D], got 'tensor<8x5x64xf32>'}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_key_rank(%q: tensor<2x8x5x64xf32>, %k: tensor<2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'key' must be a rank-4 tensor [B, Hkv, Lk, D], got 'tensor<2x9x64xf32>'}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_dynamic_heads(%q: tensor<2x?x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'query' dim 1 (H) must be static: head counts and feature sizes are fixed by the model, got 'tensor<2x?x5x64xf32>'}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x?x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_head_dim(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x80xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'key' dim 3 (D) must match 'query' dim 3 (D): expected 64, got 80}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x80xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_batch(%q: tensor<2x8x5x64xf32>, %k: tensor<3x2x9x64xf32>, %v: tensor<3x2x9x32xf32>) {
  // expected-error @+1 {{'key' dim 0 (B) must match 'query' dim 0 (B): expected 2, got 3}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<none>} : tensor<2x8x5x64xf32>, tensor<3x2x9x64xf32>, tensor<3x2x9x32xf32>
  return
}

// -----

func.func @sdpa_value_length(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x7x32xf32>) {
  // expected-error @+1 {{'value' dim 2 (Lk) must match 'key' dim 2 (Lk): expected 9, got 7}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<none>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x7x32xf32>
  return
}

// -----

func.func @sdpa_value_heads(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x4x9x32xf32>) {
  // expected-error @+1 {{'value' dim 1 (Hkv) must match 'key' dim 1 (Hkv): expected 2, got 4}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<none>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x4x9x32xf32>
  return
}

// -----

func.func @sdpa_gqa_ratio(%q: tensor<2x6x5x64xf32>, %k: tensor<2x4x9x64xf32>, %v: tensor<2x4x9x32xf32>) {
  // expected-error @+1 {{'query' dim 1 (H = 6) must be a multiple of 'key' dim 1 (Hkv = 4)}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<none>} : tensor<2x6x5x64xf32>, tensor<2x4x9x64xf32>, tensor<2x4x9x32xf32>
  return
}

// -----

func.func @sdpa_element_type(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf16>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'key' must have the element type of 'query': expected 'f32', got 'f16'}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<none>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf16>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_integer_query(%q: tensor<2x8x5x64xi32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or 16-bit float or bfloat16 type values}}
  %o = "attn.sdpa"(%q, %k, %v) <{mask = #attn.mask<none>, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>}> ({}, {}) : (tensor<2x8x5x64xi32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>) -> tensor<2x8x5x32xi32>
  return
}

// -----

func.func @sdpa_causal_too_many_queries(%q: tensor<2x8x10x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{a causal mask needs 'query' dim 2 (Lq) <= 'key' dim 2 (Lk), got Lq = 10 and Lk = 9}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x10x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_scale(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'scale' must be finite and > 0, got -1}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>, scale = -1.0} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_softcap(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'softcap' must be finite and >= 0 (0 disables it), got -5}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>, softcap = -5.0} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_gate_width(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %g: tensor<2x8x5x7xf32>) {
  // expected-error @+1 {{'gate' dim 3 must be 1 (headwise gate) or match 'value' dim 3 (Dv, elementwise gate): expected 1 or 32, got 7}}
  %o = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x8x5x7xf32>
  return
}

// -----

func.func @sdpa_gate_rows(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %g: tensor<2x8x4x1xf32>) {
  // expected-error @+1 {{'gate' dim 2 (Lq) must match 'query' dim 2 (Lq): expected 5, got 4}}
  %o = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x8x4x1xf32>
  return
}

// -----

func.func @sdpa_sinks_per_kv_head(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %s: tensor<2xf32>) {
  // expected-error @+1 {{'sinks' must hold one logit per query head, [8], got 'tensor<2xf32>'}}
  %o = attn.sdpa %q, %k, %v sinks(%s : tensor<2xf32>) {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @tree_sdpa_window_and_chunk(%q: tensor<?x4x?x16xf32>, %k: tensor<?x4x?x16xf32>, %v: tensor<?x4x?x16xf32>, %p: tensor<?x?xi32>) {
  // expected-error @+1 {{takes a 'window' or a 'chunk', not both}}
  %o = attn.tree_sdpa %q, %k, %v, %p {chunk = 8, window = 4} : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x?xi32>
  return
}

// -----

func.func @tree_sdpa_sinks_rank(%q: tensor<?x4x?x16xf32>, %k: tensor<?x4x?x16xf32>, %v: tensor<?x4x?x16xf32>, %p: tensor<?x?xi32>, %s: tensor<1x4xf32>) {
  // expected-error @+1 {{'sinks' must hold one logit per query head, [4], got 'tensor<1x4xf32>'}}
  %o = attn.tree_sdpa %q, %k, %v, %p sinks(%s : tensor<1x4xf32>) : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x?xi32>
  return
}

// -----

func.func @sdpa_lse_type(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+2 {{'attn.sdpa' op failed to infer returned types}}
  // expected-error @+1 {{'attn.sdpa' op inferred type(s) 'tensor<2x8x5x32xf32>', 'tensor<2x8x5xf32>' are incompatible with return type(s) of operation 'tensor<2x8x5x32xf32>', 'tensor<2x8x6xf32>'}}
  %o:2 = "attn.sdpa"(%q, %k, %v) <{mask = #attn.mask<causal>, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0, 0>, return_lse}> ({}, {}) : (tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>) -> (tensor<2x8x5x32xf32>, tensor<2x8x6xf32>)
  return
}

// -----

func.func @mask_window_zero(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{sliding_window mask needs a window > 0, got 0}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<sliding_window = 0>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @mask_chunk_zero(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{chunked mask needs a chunk size > 0, got 0}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<chunked = 0>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @sdpa_chunked_too_many_queries(%q: tensor<2x8x10x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{a chunked mask needs 'query' dim 2 (Lq) <= 'key' dim 2 (Lk), got Lq = 10 and Lk = 9}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<chunked = 4>} : tensor<2x8x10x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @mask_window_missing(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{sliding_window mask needs a window > 0, got 0}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<sliding_window>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @mask_causal_with_window(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{a 'causal' mask takes no window, got window = 4}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal = 4>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @mask_unknown_kind(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+2 {{failed to parse Attn_MaskAttr parameter 'kind' which is to be a `::mlir::attn::MaskKind`}}
  // expected-error @+1 {{expected ::mlir::attn::MaskKind to be one of: none, causal, sliding_window}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<diagonal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
  return
}

// -----

func.func @gate_rank(%o: tensor<8x5xf32>, %g: tensor<8x5xf32>) {
  // expected-error @+1 {{'output' must be a rank-4 tensor [B, H, L, Dv], got 'tensor<8x5xf32>'}}
  %r = attn.gate %o, %g : tensor<8x5xf32>, tensor<8x5xf32>
  return
}

// -----

// A ragged batch's rows are packed [T, H, Dv]: the gate follows them.
func.func @gate_packed_rank(%o: tensor<8x5x32xf32>, %g: tensor<8x5x32x1xf32>) {
  // expected-error @+1 {{'gate' must be a rank-3 tensor [T, H, Dv or 1], got 'tensor<8x5x32x1xf32>'}}
  %r = attn.gate %o, %g : tensor<8x5x32xf32>, tensor<8x5x32x1xf32>
  return
}

// -----

func.func @gate_width(%o: tensor<2x8x5x32xf32>, %g: tensor<2x8x5x16xf32>) {
  // expected-error @+1 {{'gate' dim 3 must be 1 (headwise gate) or match 'output' dim 3 (Dv, elementwise gate): expected 1 or 32, got 16}}
  %r = attn.gate %o, %g : tensor<2x8x5x32xf32>, tensor<2x8x5x16xf32>
  return
}

// -----

func.func @gate_heads(%o: tensor<2x8x5x32xf32>, %g: tensor<2x4x5x32xf32>) {
  // expected-error @+1 {{'gate' dim 1 (H) must match 'output' dim 1 (H): expected 8, got 4}}
  %r = attn.gate %o, %g : tensor<2x8x5x32xf32>, tensor<2x4x5x32xf32>
  return
}

// -----

func.func @gate_skip_scale(%o: tensor<2x8x5x32xf32>, %x: tensor<2x8x5x32xf32>, %d: tensor<4xf32>) {
  // expected-error @+1 {{'skip scale' dim 0 (H) must match 'output' dim 1 (H): expected 8, got 4}}
  %r = attn.gate %o, %o skip(%x, %d : tensor<2x8x5x32xf32>, tensor<4xf32>) : tensor<2x8x5x32xf32>, tensor<2x8x5x32xf32>
  return
}

// -----

func.func @gate_skip_input(%o: tensor<9x8x32xf32>, %x: tensor<9x8x16xf32>, %d: tensor<8xf32>) {
  // expected-error @+1 {{'skip input' dim 2 (Dv) must match 'output' dim 2 (Dv): expected 32, got 16}}
  %r = attn.gate %o, %o skip(%x, %d : tensor<9x8x16xf32>, tensor<8xf32>) : tensor<9x8x32xf32>, tensor<9x8x32xf32>
  return
}

// -----

func.func @gate_skip_dtype(%o: tensor<2x8x5x32xf32>, %x: tensor<2x8x5x32xbf16>, %d: tensor<8xf32>) {
  // expected-error @+1 {{'attn.gate' op requires the same element type for all operands}}
  %r = attn.gate %o, %o skip(%x, %d : tensor<2x8x5x32xbf16>, tensor<8xf32>) : tensor<2x8x5x32xf32>, tensor<2x8x5x32xf32>
  return
}

// -----

func.func @block_meta_block_size(%k: tensor<2x2x9x64xf32>) {
  // expected-error @+1 {{'block_size' must be > 0, got 0}}
  %m = attn.block_meta %k {block_size = 0} : tensor<2x2x9x64xf32>
  return
}

// -----

func.func @block_meta_missing_block_size(%k: tensor<2x2x9x64xf32>) {
  // expected-error @+1 {{'attn.block_meta' op needs a 'block_size' attribute}}
  %m = attn.block_meta %k : tensor<2x2x9x64xf32>
  return
}

// -----

func.func @block_meta_dynamic_dim(%k: tensor<2x2x9x?xf32>) {
  // expected-error @+1 {{'key' dim 3 (D) must be static: head counts and feature sizes are fixed by the model, got 'tensor<2x2x9x?xf32>'}}
  %m = attn.block_meta %k {block_size = 4} : tensor<2x2x9x?xf32>
  return
}

// -----

func.func @topk_top_k(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x2x64xf32>, %lk: index) {
  // expected-error @+1 {{'top_k' must be > 0, got 0}}
  %b = attn.select_topk %q, %m, %lk {block_size = 4, top_k = 0, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x2x64xf32>
  return
}

// -----

func.func @topk_sink_local(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x2x64xf32>, %lk: index) {
  // expected-error @+1 {{'sink_blocks' + 'local_blocks' (2 + 2) must not exceed 'top_k' (3)}}
  %b = attn.select_topk %q, %m, %lk {block_size = 4, top_k = 3, sink_blocks = 2, local_blocks = 2, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x2x64xf32>
  return
}

// -----

// Budgets whose sum wraps 64 bits are compared without summing them.
func.func @topk_sink_local_wrap(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x2x64xf32>, %lk: index) {
  // expected-error @+1 {{'sink_blocks' + 'local_blocks' (9223372036854775807 + 2) must not exceed 'top_k' (3)}}
  %b = attn.select_topk %q, %m, %lk {block_size = 4, top_k = 3, sink_blocks = 9223372036854775807, local_blocks = 2, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x2x64xf32>
  return
}

// -----

func.func @topk_negative_sink(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x2x64xf32>, %lk: index) {
  // expected-error @+1 {{'sink_blocks' and 'local_blocks' must be >= 0, got -1 and 0}}
  %b = attn.select_topk %q, %m, %lk {block_size = 4, top_k = 3, sink_blocks = -1, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x2x64xf32>
  return
}

// -----

func.func @topk_meta_pair(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x3x64xf32>, %lk: index) {
  // expected-error @+1 {{'meta' dim 3 (2) must be 2, got 3}}
  %b = attn.select_topk %q, %m, %lk {block_size = 4, top_k = 2, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x3x64xf32>
  return
}

// -----

func.func @topk_meta_rank(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x64xf32>, %lk: index) {
  // expected-error @+1 {{'meta' must be a rank-5 tensor [B, Hkv, NB, 2, D], got 'tensor<2x2x3x64xf32>'}}
  %b = attn.select_topk %q, %m, %lk {block_size = 4, top_k = 2, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x64xf32>
  return
}

// -----

func.func @topk_meta_features(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x2x32xf32>, %lk: index) {
  // expected-error @+1 {{'meta' dim 4 (D) must match 'query' dim 3 (D): expected 64, got 32}}
  %b = attn.select_topk %q, %m, %lk {block_size = 4, top_k = 2, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x2x32xf32>
  return
}

// -----

func.func @topk_block_size(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x2x64xf32>, %lk: index) {
  // expected-error @+1 {{'block_size' must be > 0, got -4}}
  %b = attn.select_topk %q, %m, %lk {block_size = -4, top_k = 2, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x2x64xf32>
  return
}

// -----

func.func @topp_range(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>) {
  // expected-error @+1 {{'top_p' must be in (0, 1], got 1.5}}
  %t = attn.select_topp %q, %k {top_p = 1.5, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>
  return
}

// -----

func.func @topp_zero(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>) {
  // expected-error @+1 {{'top_p' must be in (0, 1], got 0}}
  %t = attn.select_topp %q, %k {top_p = 0.0, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>
  return
}

// -----

func.func @topp_min_max(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>) {
  // expected-error @+1 {{'min_tokens' (64) must not exceed 'max_tokens' (16)}}
  %t = attn.select_topp %q, %k {top_p = 0.9, min_tokens = 64, max_tokens = 16, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>
  return
}

// -----

func.func @topp_negative_min(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>) {
  // expected-error @+1 {{'min_tokens' must be >= 0, got -1}}
  %t = attn.select_topp %q, %k {top_p = 0.9, min_tokens = -1, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>
  return
}

// -----

func.func @topp_max_tokens(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>) {
  // expected-error @+1 {{'max_tokens' must be > 0, got 0}}
  %t = attn.select_topp %q, %k {top_p = 0.9, max_tokens = 0, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>
  return
}

// -----

func.func @topp_blocks_need_block_size(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %b: tensor<2x8x5x4xi32>) {
  // expected-error @+1 {{a 'blocks' operand needs the 'block_size' attribute that its entries count in}}
  %t = attn.select_topp %q, %k blocks(%b) {top_p = 0.9, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x8x5x4xi32>
  return
}

// -----

func.func @topp_block_size_without_blocks(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>) {
  // expected-error @+1 {{'block_size' is only meaningful with a 'blocks' operand}}
  %t = attn.select_topp %q, %k {top_p = 0.9, block_size = 16, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>
  return
}

// -----

func.func @topp_blocks_rows(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %b: tensor<2x8x3x4xi32>) {
  // expected-error @+1 {{'blocks' dim 2 (Lq) must match 'query' dim 2 (Lq): expected 5, got 3}}
  %t = attn.select_topp %q, %k blocks(%b) {top_p = 0.9, block_size = 4, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x8x3x4xi32>
  return
}

// -----

func.func @sparse_selection_rank(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %s: tensor<2x8x5xi32>) {
  // expected-error @+1 {{'selection' must be a rank-4 tensor [B, H, Lq, N], got 'tensor<2x8x5xi32>'}}
  %o = attn.sparse_sdpa %q, %k, %v, %s {block_size = 4, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x8x5xi32>
  return
}

// -----

func.func @sparse_selection_heads(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %s: tensor<2x2x5x3xi32>) {
  // expected-error @+1 {{'selection' dim 1 (H) must match 'query' dim 1 (H): expected 8, got 2}}
  %o = attn.sparse_sdpa %q, %k, %v, %s {block_size = 4, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x2x5x3xi32>
  return
}

// -----

func.func @sparse_block_size(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %s: tensor<2x8x5x3xi32>) {
  // expected-error @+1 {{'block_size' must be > 0, got 0}}
  %o = attn.sparse_sdpa %q, %k, %v, %s {block_size = 0, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x8x5x3xi32>
  return
}

// -----

func.func @sparse_selection_type(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %s: tensor<2x8x5x3xf32>) {
  // expected-error @+1 {{operand #3 must be ranked tensor of 32-bit signless integer values, but got 'tensor<2x8x5x3xf32>'}}
  %o = "attn.sparse_sdpa"(%q, %k, %v, %s) <{block_size = 4 : i64, mask = #attn.mask<causal>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 0>}> ({}, {}) : (tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x8x5x3xf32>) -> tensor<2x8x5x32xf32>
  return
}

// -----

func.func @tree_parents_rank(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %p: tensor<8xi32>) {
  // expected-error @+1 {{'parents' must be a rank-2 tensor [B, T], got 'tensor<8xi32>'}}
  %o = attn.tree_sdpa %q, %k, %v, %p : tensor<2x8x4x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<8xi32>
  return
}

// -----

func.func @tree_parents_nodes(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %p: tensor<2x5xi32>) {
  // expected-error @+1 {{'parents' dim 1 (T) must match 'query' dim 2 (T): expected 4, got 5}}
  %o = attn.tree_sdpa %q, %k, %v, %p : tensor<2x8x4x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x5xi32>
  return
}

// -----

func.func @tree_keys_too_few(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x3x64xf32>, %v: tensor<2x2x3x32xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{'key' dim 2 (P+T) must hold at least the T = 4 tree tokens, got 3}}
  %o = attn.tree_sdpa %q, %k, %v, %p : tensor<2x8x4x64xf32>, tensor<2x2x3x64xf32>, tensor<2x2x3x32xf32>, tensor<2x4xi32>
  return
}

// -----

func.func @tree_window(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{'window' must be > 0, got 0}}
  %o = attn.tree_sdpa %q, %k, %v, %p {window = 0} : tensor<2x8x4x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x4xi32>
  return
}

// -----

func.func @tree_gate(%q: tensor<2x8x4x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %p: tensor<2x4xi32>, %g: tensor<2x8x5x1xf32>) {
  // expected-error @+1 {{'gate' dim 2 (Lq) must match 'query' dim 2 (T): expected 4, got 5}}
  %o = attn.tree_sdpa %q, %k, %v, %p gate(%g) : tensor<2x8x4x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x4xi32>, tensor<2x8x5x1xf32>
  return
}

// -----

func.func @accept_rank(%t: tensor<16xi32>, %u: tensor<16xi32>, %p: tensor<16xi32>) {
  // expected-error @+1 {{'tokens' must be a rank-2 tensor [B, T], got 'tensor<16xi32>'}}
  %path, %len, %bonus = attn.tree_accept %t, %u, %p : tensor<16xi32>, tensor<16xi32>, tensor<16xi32>
  return
}

// -----

func.func @accept_target_shape(%t: tensor<2x16xi32>, %u: tensor<2x15xi32>, %p: tensor<2x16xi32>) {
  // expected-error @+1 {{'target' dim 1 (T) must match 'tokens' dim 1 (T): expected 16, got 15}}
  %path, %len, %bonus = attn.tree_accept %t, %u, %p : tensor<2x16xi32>, tensor<2x15xi32>, tensor<2x16xi32>
  return
}

// -----

func.func @accept_parents_batch(%t: tensor<2x16xi32>, %u: tensor<2x16xi32>, %p: tensor<3x16xi32>) {
  // expected-error @+1 {{'parents' dim 0 (B) must match 'tokens' dim 0 (B): expected 2, got 3}}
  %path, %len, %bonus = attn.tree_accept %t, %u, %p : tensor<2x16xi32>, tensor<2x16xi32>, tensor<3x16xi32>
  return
}

// -----

func.func @compact_path_batch(%k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %path: tensor<3x4xi32>, %len: tensor<2xi32>) {
  // expected-error @+1 {{'path' dim 0 (B) must match 'key' dim 0 (B): expected 2, got 3}}
  %k2, %v2 = attn.kv_compact %k, %v, %path, %len : tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<3x4xi32>, tensor<2xi32>
  return
}

// -----

func.func @compact_length_rank(%k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %path: tensor<2x4xi32>, %len: tensor<2x1xi32>) {
  // expected-error @+1 {{'length' must be a rank-1 tensor [B], got 'tensor<2x1xi32>'}}
  %k2, %v2 = attn.kv_compact %k, %v, %path, %len : tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x4xi32>, tensor<2x1xi32>
  return
}

// -----

func.func @compact_too_few_rows(%k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %path: tensor<2x12xi32>, %len: tensor<2xi32>) {
  // expected-error @+1 {{'key' dim 2 (P+T) must hold at least the T = 12 tree tokens of 'path', got 9}}
  %k2, %v2 = attn.kv_compact %k, %v, %path, %len : tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x12xi32>, tensor<2xi32>
  return
}

// -----

func.func @compact_value_rows(%k: tensor<2x2x9x64xf32>, %v: tensor<2x2x8x32xf32>, %path: tensor<2x4xi32>, %len: tensor<2xi32>) {
  // expected-error @+1 {{'value' dim 2 (P+T) must match 'key' dim 2 (P+T): expected 9, got 8}}
  %k2, %v2 = attn.kv_compact %k, %v, %path, %len : tensor<2x2x9x64xf32>, tensor<2x2x8x32xf32>, tensor<2x4xi32>, tensor<2xi32>
  return
}

// -----

func.func @rec_needs_decay(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %b: tensor<2x8x7xf32>) {
  // expected-error @+1 {{rule 'gated_delta' needs a 'decay' operand [B, Hv, L]}}
  %o, %so = attn.linear_recurrence gated_delta %q, %k, %v beta(%b : tensor<2x8x7xf32>) state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_takes_no_decay(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %g: tensor<2x8x7xf32>) {
  // expected-error @+1 {{rule 'linear' takes no 'decay' operand}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v decay(%g : tensor<2x8x7xf32>) state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_needs_beta(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>) {
  // expected-error @+1 {{rule 'delta' needs a 'beta' operand [B, Hv, L]}}
  %o, %so = attn.linear_recurrence delta %q, %k, %v state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_takes_no_beta(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %g: tensor<2x8x7xf32>, %b: tensor<2x8x7xf32>) {
  // expected-error @+1 {{rule 'decay' takes no 'beta' operand}}
  %o, %so = attn.linear_recurrence decay %q, %k, %v decay(%g : tensor<2x8x7xf32>) beta(%b : tensor<2x8x7xf32>) state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_gla_vector_decay(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %g: tensor<2x8x7xf32>) {
  // expected-error @+1 {{'decay' must be a rank-4 tensor [B, Hv, L, Dk], got 'tensor<2x8x7xf32>'}}
  %o, %so = attn.linear_recurrence gla %q, %k, %v decay(%g : tensor<2x8x7xf32>) state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_kda_vector_decay(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %g: tensor<2x8x7xf32>, %b: tensor<2x8x7xf32>) {
  // expected-error @+1 {{'decay' must be a rank-4 tensor [B, Hv, L, Dk], got 'tensor<2x8x7xf32>'}}
  %o, %so = attn.linear_recurrence kda %q, %k, %v decay(%g : tensor<2x8x7xf32>) beta(%b : tensor<2x8x7xf32>) state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_gate_activation_without_gate(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>) {
  // expected-error @+1 {{'gate_activation' needs an output gate}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x16x12xf32>) {gate_activation = #attn.gate_activation<sigmoid>} : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rmsnorm_gate_unknown_activation(%o: tensor<2x8x7x12xf32>, %w: tensor<12xf32>) {
  // expected-error @+2 {{expected ::mlir::attn::GateActivation to be one of: silu, sigmoid}}
  // expected-error @+1 {{failed to parse Attn_GateActivationAttr parameter 'value'}}
  %r = attn.rmsnorm_gate %o, %o, %w {activation = #attn.gate_activation<gelu>} : tensor<2x8x7x12xf32>, tensor<2x8x7x12xf32>, tensor<12xf32>
  return
}

// -----

func.func @rec_kda_needs_beta(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %g: tensor<2x8x7x16xf32>) {
  // expected-error @+1 {{rule 'kda' needs a 'beta' operand [B, Hv, L]}}
  %o, %so = attn.linear_recurrence kda %q, %k, %v decay(%g : tensor<2x8x7x16xf32>) state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_gla_decay_width(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %g: tensor<2x8x7x12xf32>) {
  // expected-error @+1 {{'decay' dim 3 (Dk) must match 'query' dim 3 (Dk): expected 16, got 12}}
  %o, %so = attn.linear_recurrence gla %q, %k, %v decay(%g : tensor<2x8x7x12xf32>) state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_decay_steps(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %g: tensor<2x8x6xf32>) {
  // expected-error @+1 {{'decay' dim 2 (L) must match 'value' dim 2 (L): expected 7, got 6}}
  %o, %so = attn.linear_recurrence decay %q, %k, %v decay(%g : tensor<2x8x6xf32>) state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_head_ratio(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x6x7x12xf32>, %s: tensor<2x6x16x12xf32>) {
  // expected-error @+1 {{'value' dim 1 (Hv = 6) must be a multiple of 'query' dim 1 (Hk = 4)}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x6x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x6x7x12xf32>
  return
}

// -----

func.func @rec_key_shape(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x5x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>) {
  // expected-error @+1 {{'key' dim 2 (L) must match 'query' dim 2 (L): expected 7, got 5}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x5x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_state_shape(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x12x16xf32>) {
  // expected-error @+1 {{'initial_state' dim 2 (Dk) must match 'query' dim 3 (Dk): expected 16, got 12}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x12x16xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_state_type(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf16>) {
  // expected-error @+1 {{operand #3 must be ranked tensor of 32-bit float values, but got 'tensor<2x8x16x12xf16>'}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x16x12xf16>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_chunk_size(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>) {
  // expected-error @+1 {{'chunk_size' must be 16, 32, 64 or 128, got 48}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x16x12xf32>) {chunk_size = 48} : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_scale(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>) {
  // expected-error @+1 {{'scale' must be finite and > 0, got 0}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x16x12xf32>) {scale = 0.0} : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_gate_width(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %z: tensor<2x8x7x12xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'gate_weight' dim 0 (Dv) must match 'value' dim 3 (Dv): expected 12, got 16}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x16x12xf32>) output_gate(%z, %w : tensor<2x8x7x12xf32>, tensor<16xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_gate_z(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %z: tensor<2x8x7x16xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{'gate_z' dim 3 (Dv) must match 'value' dim 3 (Dv): expected 12, got 16}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x16x12xf32>) output_gate(%z, %w : tensor<2x8x7x16xf32>, tensor<12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_gate_eps(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %z: tensor<2x8x7x12xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{'gate_eps' must be > 0, got 0}}
  %o, %so = attn.linear_recurrence linear %q, %k, %v state(%s : tensor<2x8x16x12xf32>) output_gate(%z, %w : tensor<2x8x7x12xf32>, tensor<12xf32>) {gate_eps = 0.0} : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rec_gate_half(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>, %z: tensor<2x8x7x12xf32>) {
  // expected-error @+1 {{the output gate needs both 'gate_z' and 'gate_weight'}}
  %o:2 = "attn.linear_recurrence"(%q, %k, %v, %s, %z) <{rule = #attn.rule<linear>, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 1, 0, 0, 0, 1, 0>}> : (tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>, tensor<2x8x16x12xf32>, tensor<2x8x7x12xf32>) -> (tensor<2x8x7x12xf32>, tensor<2x8x16x12xf32>)
  return
}

// -----

func.func @rec_unknown_rule(%q: tensor<2x4x7x16xf32>, %k: tensor<2x4x7x16xf32>, %v: tensor<2x8x7x12xf32>, %s: tensor<2x8x16x12xf32>) {
  // expected-error @+1 {{unknown recurrence rule 'mamba'; expected linear, decay, gla, delta, gated_delta or kda}}
  %o, %so = attn.linear_recurrence mamba %q, %k, %v state(%s : tensor<2x8x16x12xf32>) : tensor<2x4x7x16xf32>, tensor<2x4x7x16xf32>, tensor<2x8x7x12xf32>
  return
}

// -----

func.func @rmsnorm_z_shape(%o: tensor<2x8x7x12xf32>, %z: tensor<2x8x6x12xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{'z' dim 2 (L) must match 'output' dim 2 (L): expected 7, got 6}}
  %r = attn.rmsnorm_gate %o, %z, %w : tensor<2x8x7x12xf32>, tensor<2x8x6x12xf32>, tensor<12xf32>
  return
}

// -----

func.func @rmsnorm_weight(%o: tensor<2x8x7x12xf32>, %z: tensor<2x8x7x12xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'weight' must hold a head's 12 features (Dv) or a token's 96 (H * Dv), got 16}}
  %r = attn.rmsnorm_gate %o, %z, %w : tensor<2x8x7x12xf32>, tensor<2x8x7x12xf32>, tensor<16xf32>
  return
}

// -----

func.func @rmsnorm_group_straddles_heads(%o: tensor<2x8x7x12xf32>, %z: tensor<2x8x7x12xf32>, %w: tensor<96xf32>) {
  // expected-error @+1 {{'group_size' must divide a token's 96 features (H * Dv) and be a divisor or a multiple of a head's 12 (Dv), got 8}}
  %r = attn.rmsnorm_gate %o, %z, %w {group_size = 8} : tensor<2x8x7x12xf32>, tensor<2x8x7x12xf32>, tensor<96xf32>
  return
}

// -----

func.func @rmsnorm_group_not_dividing_token(%o: tensor<2x8x7x12xf32>, %z: tensor<2x8x7x12xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{'group_size' must divide a token's 96 features (H * Dv) and be a divisor or a multiple of a head's 12 (Dv), got 36}}
  %r = attn.rmsnorm_gate %o, %z, %w {group_size = 36} : tensor<2x8x7x12xf32>, tensor<2x8x7x12xf32>, tensor<12xf32>
  return
}

// -----

func.func @rmsnorm_dynamic_heads(%o: tensor<2x?x7x12xf32>, %z: tensor<2x?x7x12xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{needs static head counts and feature sizes (H, Dv and the weight's size)}}
  %r = attn.rmsnorm_gate %o, %z, %w : tensor<2x?x7x12xf32>, tensor<2x?x7x12xf32>, tensor<12xf32>
  return
}

// -----

func.func @rmsnorm_eps(%o: tensor<2x8x7x12xf32>, %z: tensor<2x8x7x12xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{'eps' must be > 0, got -1}}
  %r = attn.rmsnorm_gate %o, %z, %w {eps = -1.0} : tensor<2x8x7x12xf32>, tensor<2x8x7x12xf32>, tensor<12xf32>
  return
}

// -----

func.func @rmsnorm_element_type(%o: tensor<2x8x7x12xf32>, %z: tensor<2x8x7x12xbf16>, %w: tensor<12xf32>) {
  // expected-error @+1 {{'attn.rmsnorm_gate' op requires the same element type for all operands}}
  %r = attn.rmsnorm_gate %o, %z, %w : tensor<2x8x7x12xf32>, tensor<2x8x7x12xbf16>, tensor<12xf32>
  return
}

// -----

func.func @topk_missing_top_k(%q: tensor<2x8x5x64xf32>, %m: tensor<2x2x3x2x64xf32>, %lk: index) {
  // expected-error @+1 {{'attn.select_topk' op needs a 'top_k' attribute}}
  %b = attn.select_topk %q, %m, %lk {block_size = 4, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x3x2x64xf32>
  return
}

// -----

// The variant regions (SPEC §7).

func.func @score_mod_arguments(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'score_mod' must take (f32, index, index, index, index) (s, b, h, qp, kp), got (f32, index, index, index)}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index):
        attn.yield %s : f32
      }
  return
}

// -----

func.func @mask_mod_arguments(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'mask_mod' must take (index, index, index, index) (b, h, qp, kp), got (i32, index, index, index)}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
      mask_mod {
      ^bb0(%b: i32, %h: index, %qp: index, %kp: index):
        %t = arith.constant true
        attn.yield %t : i1
      }
  return
}

// -----

func.func @score_mod_yields_i1(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'score_mod' must end in attn.yield of an 'f32' (the modified score)}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %t = arith.constant true
        attn.yield %t : i1
      }
  return
}

// -----

func.func @mask_mod_yields_f32(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %parents: tensor<2x5xi32>) {
  // expected-error @+1 {{'mask_mod' must end in attn.yield of an 'i1' (whether the key is visible)}}
  %o = attn.tree_sdpa %q, %k, %v, %parents : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x5xi32>
      mask_mod {
      ^bb0(%b: index, %h: index, %qp: index, %kp: index):
        %c = arith.constant 1.0 : f32
        attn.yield %c : f32
      }
  return
}

// -----

func.func @region_op_not_scalar_code(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %sel: tensor<2x8x5x1xi32>) {
  // expected-error @+1 {{'score_mod' may hold only arith, math and tensor.extract ops and attn.yield, got 'tensor.empty'}}
  %o = attn.sparse_sdpa %q, %k, %v, %sel {block_size = 4, mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>, tensor<2x8x5x1xi32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %e = tensor.empty() : tensor<4xf32>
        attn.yield %s : f32
      }
  return
}

// -----

func.func @region_op_on_tensors(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>) {
  // expected-error @+1 {{'score_mod' computes on scalars only: 'arith.constant' has a value of type 'tensor<4xf32>'}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %t = arith.constant dense<1.0> : tensor<4xf32>
        attn.yield %s : f32
      }
  return
}

// -----

func.func @region_reads_scalar_from_above(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %bias: f32) {
  // expected-error @+1 {{'score_mod' reads only tensors defined above it, with tensor.extract, and scalar constants; operand #1 of 'arith.addf' is a value of type 'f32' defined outside it}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %r = arith.addf %s, %bias : f32
        attn.yield %r : f32
      }
  return
}

// -----

func.func @region_reads_i8_tensor(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %t: tensor<8xi8>) {
  // expected-error @+1 {{'score_mod' reads a 'tensor<8xi8>'; region tensors hold f32, f16, bf16 or i32}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %x = tensor.extract %t[%h] : tensor<8xi8>
        attn.yield %s : f32
      }
  return
}

// -----

func.func @region_head_table_too_short(%q: tensor<2x8x5x64xf32>, %k: tensor<2x2x9x64xf32>, %v: tensor<2x2x9x32xf32>, %t: tensor<4xf32>) {
  // expected-error @+1 {{'score_mod' reads dim 0 of a 'tensor<4xf32>' at the head index h, which reaches 7 (H = 8)}}
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : tensor<2x8x5x64xf32>, tensor<2x2x9x64xf32>, tensor<2x2x9x32xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %x = tensor.extract %t[%h] : tensor<4xf32>
        %r = arith.addf %s, %x : f32
        attn.yield %r : f32
      }
  return
}

// -----

func.func @yield_outside_variant_region() {
  // expected-error @+2 {{'attn.yield' op expects parent op to be one of 'attn.sdpa, attn.sparse_sdpa, attn.tree_sdpa'}}
  %c = arith.constant 1.0 : f32
  attn.yield %c : f32
}

// -----

func.func @tree_recurrence_max_nodes(%q: tensor<?x4x?x64xf32>, %v: tensor<?x4x?x64xf32>, %p: tensor<?x?xi32>, %s: tensor<?x4x64x64xf32>) {
  // expected-error @+1 {{'attn.tree_recurrence' op 'max_nodes' must be in [1, 256], got 300}}
  %o = attn.tree_recurrence linear %q, %q, %v parents(%p : tensor<?x?xi32>) state(%s : tensor<?x4x64x64xf32>) {max_nodes = 300}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>
  return
}

// -----

func.func @tree_recurrence_too_many_nodes(%q: tensor<1x4x80x64xf32>, %v: tensor<1x4x80x64xf32>, %p: tensor<1x80xi32>, %s: tensor<1x4x64x64xf32>) {
  // expected-error @+1 {{'attn.tree_recurrence' op a tree of 80 nodes exceeds 'max_nodes' = 64}}
  %o = attn.tree_recurrence linear %q, %q, %v parents(%p : tensor<1x80xi32>) state(%s : tensor<1x4x64x64xf32>)
      : tensor<1x4x80x64xf32>, tensor<1x4x80x64xf32>, tensor<1x4x80x64xf32>
  return
}

// -----

func.func @tree_recurrence_parents(%q: tensor<1x4x8x64xf32>, %v: tensor<1x4x8x64xf32>, %p: tensor<1x7xi32>, %s: tensor<1x4x64x64xf32>) {
  // expected-error @+1 {{'attn.tree_recurrence' op 'parents' dim 1 (L) must match 'query' dim 2 (L): expected 8, got 7}}
  %o = attn.tree_recurrence linear %q, %q, %v parents(%p : tensor<1x7xi32>) state(%s : tensor<1x4x64x64xf32>)
      : tensor<1x4x8x64xf32>, tensor<1x4x8x64xf32>, tensor<1x4x8x64xf32>
  return
}

// -----

func.func @tree_recurrence_rule_operands(%q: tensor<?x4x?x64xf32>, %v: tensor<?x4x?x64xf32>, %p: tensor<?x?xi32>, %s: tensor<?x4x64x64xf32>) {
  // expected-error @+1 {{'attn.tree_recurrence' op rule 'gated_delta' needs a 'decay' operand}}
  %o = attn.tree_recurrence gated_delta %q, %q, %v parents(%p : tensor<?x?xi32>) state(%s : tensor<?x4x64x64xf32>)
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>
  return
}

// -----

func.func @path_steps_rank(%x: tensor<?x?xf32>, %path: tensor<?x?xi32>, %length: tensor<?xi32>) {
  // expected-error @+1 {{'attn.path_steps' op 'input' must be [B, H, T] or [B, H, T, F], got rank 2}}
  %r = attn.path_steps %x, %path, %length : tensor<?x?xf32>, tensor<?x?xi32>, tensor<?xi32>
  return
}

// -----

func.func @path_steps_nodes(%x: tensor<1x4x8xf32>, %path: tensor<1x6xi32>, %length: tensor<1xi32>) {
  // expected-error @+1 {{'attn.path_steps' op 'path' dim 1 (L) must match 'input' dim 2 (T): expected 8, got 6}}
  %r = attn.path_steps %x, %path, %length : tensor<1x4x8xf32>, tensor<1x6xi32>, tensor<1xi32>
  return
}

// -----

func.func @rmsnorm_skip_scale(%o: tensor<2x8x7x12xf32>, %x: tensor<2x8x7x12xf32>, %d: tensor<4xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{'skip scale' dim 0 (H) must match 'output' dim 1 (H): expected 8, got 4}}
  %r = attn.rmsnorm_gate %o, %o, %w skip(%x, %d : tensor<2x8x7x12xf32>, tensor<4xf32>) : tensor<2x8x7x12xf32>, tensor<2x8x7x12xf32>, tensor<12xf32>
  return
}

// -----

func.func @rmsnorm_skip_input(%o: tensor<2x8x7x12xf32>, %x: tensor<2x8x6x12xf32>, %d: tensor<8xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{'skip input' dim 2 (L) must match 'output' dim 2 (L): expected 7, got 6}}
  %r = attn.rmsnorm_gate %o, %o, %w skip(%x, %d : tensor<2x8x6x12xf32>, tensor<8xf32>) : tensor<2x8x7x12xf32>, tensor<2x8x7x12xf32>, tensor<12xf32>
  return
}
