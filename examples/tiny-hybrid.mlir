// The attn IR of examples/tiny-hybrid.json (SPEC §3's example model): one
// func per entry of SPEC §4, in entry-argument order. A gated, top-p-sparse
// softmax layer with tree verification, and a Gated DeltaNet layer.
//
//   attn-opt examples/tiny-hybrid.mlir --canonicalize

// full0: q, k, v, gate, kmeta -> o. Top-k blocks of 16 keys (sink 1,
// local 1), then top-p tokens inside them, then exact attention over the
// kept tokens with the elementwise sigmoid gate in the epilogue.
func.func @full0(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                 %v: tensor<?x2x?x64xf32>, %gate: tensor<?x8x?x64xf32>,
                 %kmeta: tensor<?x2x?x2x64xf32>) -> tensor<?x8x?x64xf32> {
  %c2 = arith.constant 2 : index
  %lk = tensor.dim %k, %c2 : tensor<?x2x?x64xf32>
  %blocks = attn.select_topk %q, %kmeta, %lk
      {block_size = 16, top_k = 64, sink_blocks = 1, local_blocks = 1,
       mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x2x64xf32>
  %tokens = attn.select_topp %q, %k blocks(%blocks)
      {top_p = 0.95, min_tokens = 16, max_tokens = 1024, block_size = 16,
       mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x8x?x?xi32>
  %o = attn.sparse_sdpa %q, %k, %v, %tokens gate(%gate)
      {block_size = 1, mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x8x?x1024xi32>, tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

// full0.meta: k -> kmeta, kept by the serving engine next to its KV cache.
func.func @"full0.meta"(%k: tensor<?x2x?x64xf32>) -> tensor<?x2x?x2x64xf32> {
  %kmeta = attn.block_meta %k {block_size = 16} : tensor<?x2x?x64xf32>
  return %kmeta : tensor<?x2x?x2x64xf32>
}

// full0.tree: q[B,H,T,D], k, v, parents, gate -> o.
func.func @"full0.tree"(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                        %v: tensor<?x2x?x64xf32>, %parents: tensor<?x?xi32>,
                        %gate: tensor<?x8x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = attn.tree_sdpa %q, %k, %v, %parents gate(%gate)
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x?xi32>, tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

// full0.compact: k, v, path, length -> k', v'.
func.func @"full0.compact"(%k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>,
                           %path: tensor<?x?xi32>, %length: tensor<?xi32>)
    -> (tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>) {
  %k2, %v2 = attn.kv_compact %k, %v, %path, %length
      : tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x?xi32>,
        tensor<?xi32>
  return %k2, %v2 : tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
}

// verify.accept: tokens, target, parents -> path, length, bonus.
func.func @"verify.accept"(%tokens: tensor<?x?xi32>, %target: tensor<?x?xi32>,
                           %parents: tensor<?x?xi32>)
    -> (tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) {
  %path, %length, %bonus = attn.tree_accept %tokens, %target, %parents
      : tensor<?x?xi32>, tensor<?x?xi32>, tensor<?x?xi32>
  return %path, %length, %bonus : tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>
}

// gdn0: q, k, v, g, beta, S_init, z, w -> o, S. Gated DeltaNet with
// l2-normalized q/k and the rmsnorm-silu output gate (Qwen3-Next).
func.func @gdn0(%q: tensor<?x4x?x64xf32>, %k: tensor<?x4x?x64xf32>,
                %v: tensor<?x8x?x64xf32>, %g: tensor<?x8x?xf32>,
                %beta: tensor<?x8x?xf32>, %s0: tensor<?x8x64x64xf32>,
                %z: tensor<?x8x?x64xf32>, %w: tensor<64xf32>)
    -> (tensor<?x8x?x64xf32>, tensor<?x8x64x64xf32>) {
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) beta(%beta : tensor<?x8x?xf32>)
      state(%s0 : tensor<?x8x64x64xf32>) {chunk_size = 64, qk_l2norm}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x64xf32>
  %gated = attn.rmsnorm_gate %o, %z, %w {eps = 1.0e-6}
      : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<64xf32>
  return %gated, %s : tensor<?x8x?x64xf32>, tensor<?x8x64x64xf32>
}
