// RUN: attn-opt %s -test-attention-interface -verify-diagnostics -split-input-file

// What AttentionOpInterface reports for each attention-like op: the operands
// tiling and fusion will treat as q/k/v, the position mask, what narrows it,
// the resolved score modifier, the normalizer and the epilogue operands.

func.func @sdpa(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                %v: tensor<?x2x?x32xf32>, %g: tensor<?x8x?x32xf32>) {
  // expected-remark @+1 {{q/k/v = operands 0/1/2, mask = #attn.mask<causal>, selection = dense, scale = 1.250000e-01, softcap = 3.000000e+01, normalizer = softmax, epilogue = sigmoid_gate 3, lse = yes}}
  %o, %lse = attn.sdpa %q, %k, %v gate(%g)
      {mask = #attn.mask<causal>, softcap = 30.0, return_lse}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x32xf32>,
        tensor<?x8x?x32xf32>
  return
}

// -----

func.func @sparse_sdpa(%q: tensor<?x8x?x80xf32>, %k: tensor<?x2x?x80xf32>,
                       %v: tensor<?x2x?x80xf32>, %sel: tensor<?x8x?x4xi32>) {
  // expected-remark @+1 {{q/k/v = operands 0/1/2, mask = #attn.mask<sliding_window = 64>, selection = blocks (operand 3, block 16), scale = 5.000000e-01, softcap = 0.000000e+00, normalizer = softmax, epilogue = none, lse = no}}
  %o = attn.sparse_sdpa %q, %k, %v, %sel
      {block_size = 16, mask = #attn.mask<sliding_window = 64>, scale = 0.5}
      : tensor<?x8x?x80xf32>, tensor<?x2x?x80xf32>, tensor<?x2x?x80xf32>,
        tensor<?x8x?x4xi32>
  return
}

// -----

func.func @tree_sdpa(%q: tensor<?x4x?x16xf32>, %k: tensor<?x4x?x16xf32>,
                     %v: tensor<?x4x?x16xf32>, %p: tensor<?x?xi32>,
                     %g: tensor<?x4x?x1xf32>) {
  // expected-remark @+1 {{q/k/v = operands 0/1/2, mask = #attn.mask<causal>, selection = tree (operand 3, block 1), scale = 2.500000e-01, softcap = 0.000000e+00, normalizer = softmax, epilogue = sigmoid_gate 4, lse = no}}
  %o = attn.tree_sdpa %q, %k, %v, %p gate(%g)
      : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>,
        tensor<?x?xi32>, tensor<?x4x?x1xf32>
  // expected-remark @+1 {{mask = #attn.mask<sliding_window = 32>, selection = tree}}
  %w = attn.tree_sdpa %q, %k, %v, %p {window = 32}
      : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>,
        tensor<?x?xi32>
  // expected-remark @+1 {{mask = #attn.mask<chunked = 16>, selection = tree}}
  %c = attn.tree_sdpa %q, %k, %v, %p {chunk = 16}
      : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>,
        tensor<?x?xi32>
  return
}

// -----

// Attention sinks: one f32 logit per query head, after the gate.
func.func @sinks(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                 %v: tensor<?x2x?x16xf32>, %p: tensor<?x?xi32>,
                 %sel: tensor<?x4x?x3xi32>, %g: tensor<?x4x?x1xf32>,
                 %s: tensor<4xf32>) {
  // expected-remark @+1 {{epilogue = sigmoid_gate 3, lse = no, sinks = operand 4}}
  %o = attn.sdpa %q, %k, %v gate(%g) sinks(%s : tensor<4xf32>)
      {mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
        tensor<?x4x?x1xf32>
  // expected-remark @+1 {{selection = blocks (operand 3, block 8), scale = 2.500000e-01, softcap = 0.000000e+00, normalizer = softmax, epilogue = none, lse = yes, sinks = operand 4}}
  %o2, %lse = attn.sparse_sdpa %q, %k, %v, %sel sinks(%s : tensor<4xf32>)
      {block_size = 8, mask = #attn.mask<causal>, return_lse}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
        tensor<?x4x?x3xi32>
  // expected-remark @+1 {{selection = tree (operand 3, block 1), scale = 2.500000e-01, softcap = 0.000000e+00, normalizer = softmax, epilogue = none, lse = no, sinks = operand 4}}
  %t = attn.tree_sdpa %q, %k, %v, %p sinks(%s : tensor<4xf32>)
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
        tensor<?x?xi32>
  return
}

// -----

func.func @linear_recurrence(%q: tensor<?x2x?x64xf32>, %k: tensor<?x2x?x64xf32>,
    %v: tensor<?x4x?x32xf32>, %g: tensor<?x4x?xf32>, %beta: tensor<?x4x?xf32>,
    %s0: tensor<?x4x64x32xf32>, %z: tensor<?x4x?x32xf32>, %w: tensor<32xf32>) {
  // expected-remark @+1 {{q/k/v = operands 0/1/2, mask = #attn.mask<causal>, selection = dense, scale = 1.250000e-01, softcap = 0.000000e+00, normalizer = recurrent_state, epilogue = rmsnorm_silu_gate 6 7, lse = no}}
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x4x?xf32>) beta(%beta : tensor<?x4x?xf32>)
      state(%s0 : tensor<?x4x64x32xf32>)
      output_gate(%z, %w : tensor<?x4x?x32xf32>, tensor<32xf32>)
      : tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x4x?x32xf32>
  return
}

// -----

// Selections and metadata are not attention: no remark.
func.func @not_attention(%k: tensor<?x2x?x64xf32>) {
  %m = attn.block_meta %k {block_size = 16} : tensor<?x2x?x64xf32>
  return
}
