// RUN: attn-opt %s -attn-fuse-epilogues -split-input-file | FileCheck %s

// CHECK-LABEL: func @sdpa_elementwise_gate
// CHECK-SAME: (%[[Q:[^:]+]]: {{[^,]+}}, %[[K:[^:]+]]: {{[^,]+}}, %[[V:[^:]+]]: {{[^,]+}}, %[[G:[^:]+]]: tensor<?x8x?x64xf32>)
// CHECK-NEXT: %[[O:.+]] = attn.sdpa %[[Q]], %[[K]], %[[V]] gate(%[[G]]) {mask = #attn.mask<causal>}
// CHECK-NOT: attn.gate
// CHECK: return %[[O]]
func.func @sdpa_elementwise_gate(%q: tensor<?x8x?x64xf32>,
    %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>,
    %g: tensor<?x8x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
  %r = attn.gate %o, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
  return %r : tensor<?x8x?x64xf32>
}

// -----

// The lse is unchanged by the gate and keeps its users.
// CHECK-LABEL: func @sdpa_headwise_gate_keeps_lse
// CHECK: %[[O:.+]], %[[LSE:.+]] = attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} gate(%{{.+}}) {mask = #attn.mask<none>, return_lse}
// CHECK-NOT: attn.gate
// CHECK: return %[[O]], %[[LSE]]
func.func @sdpa_headwise_gate_keeps_lse(%q: tensor<?x8x?x64xf32>,
    %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>,
    %g: tensor<?x8x?x1xf32>) -> (tensor<?x8x?x64xf32>, tensor<?x8x?xf32>) {
  %o, %lse = attn.sdpa %q, %k, %v {mask = #attn.mask<none>, return_lse}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
  %r = attn.gate %o, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x1xf32>
  return %r, %lse : tensor<?x8x?x64xf32>, tensor<?x8x?xf32>
}

// -----

// CHECK-LABEL: func @sparse_and_tree
// CHECK: attn.sparse_sdpa %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} gate(%{{.+}}) {block_size = 16 : i64, mask = #attn.mask<causal>}
// CHECK: attn.tree_sdpa %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} gate(%{{.+}}) :
// CHECK-NOT: attn.gate
func.func @sparse_and_tree(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
    %v: tensor<?x2x?x64xf32>, %sel: tensor<?x8x?x4xi32>,
    %p: tensor<?x?xi32>, %g: tensor<?x8x?x64xf32>)
    -> (tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>) {
  %s = attn.sparse_sdpa %q, %k, %v, %sel
      {block_size = 16, mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x8x?x4xi32>
  %sg = attn.gate %s, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
  %t = attn.tree_sdpa %q, %k, %v, %p
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x?xi32>
  %tg = attn.gate %t, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
  return %sg, %tg : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
}

// -----

// The rmsnorm-silu gate folds into the recurrence; its eps travels along.
// CHECK-LABEL: func @recurrence_rmsnorm_gate
// CHECK-SAME: %[[Z:[^:]+]]: tensor<?x8x?x32xf32>, %[[W:[^:]+]]: tensor<32xf32>)
// CHECK: %[[O:.+]], %[[S:.+]] = attn.linear_recurrence gated_delta {{.+}} output_gate(%[[Z]], %[[W]] : tensor<?x8x?x32xf32>, tensor<32xf32>) {gate_eps = 1.000000e-05 : f64, qk_l2norm}
// CHECK-NOT: attn.rmsnorm_gate
// CHECK: return %[[O]], %[[S]]
func.func @recurrence_rmsnorm_gate(%q: tensor<?x4x?x64xf32>,
    %k: tensor<?x4x?x64xf32>, %v: tensor<?x8x?x32xf32>,
    %g: tensor<?x8x?xf32>, %beta: tensor<?x8x?xf32>,
    %s0: tensor<?x8x64x32xf32>, %z: tensor<?x8x?x32xf32>, %w: tensor<32xf32>)
    -> (tensor<?x8x?x32xf32>, tensor<?x8x64x32xf32>) {
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) beta(%beta : tensor<?x8x?xf32>)
      state(%s0 : tensor<?x8x64x32xf32>) {qk_l2norm}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
  %r = attn.rmsnorm_gate %o, %z, %w {eps = 1.0e-5}
      : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>, tensor<32xf32>
  return %r, %s : tensor<?x8x?x32xf32>, tensor<?x8x64x32xf32>
}

// -----

// Mamba2's gated RMSNorm stays an op of its own (its kernel runs after the
// recurrence's): groups spanning heads, the gate first, a weight per
// feature of the token. So does the per-head form with a weight per head.
// CHECK-LABEL: func @grouped_rmsnorm_gate_not_fused
// CHECK: %[[O:.+]], %{{.+}} = attn.linear_recurrence decay
// CHECK-NOT: output_gate
// CHECK: attn.rmsnorm_gate %[[O]], %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64, group_size = 64 : i64, norm_before_gate = false}
// CHECK: %[[P:.+]], %{{.+}} = attn.linear_recurrence decay
// CHECK-NOT: output_gate
// CHECK: attn.rmsnorm_gate %[[P]], %{{.+}}, %{{.+}} : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>, tensor<256xf32>
func.func @grouped_rmsnorm_gate_not_fused(%q: tensor<?x1x?x64xf32>,
    %k: tensor<?x1x?x64xf32>, %v: tensor<?x8x?x32xf32>,
    %g: tensor<?x8x?xf32>, %s0: tensor<?x8x64x32xf32>,
    %z: tensor<?x8x?x32xf32>, %w: tensor<256xf32>)
    -> (tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>) {
  %o, %s = attn.linear_recurrence decay %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) state(%s0 : tensor<?x8x64x32xf32>)
      : tensor<?x1x?x64xf32>, tensor<?x1x?x64xf32>, tensor<?x8x?x32xf32>
  %r = attn.rmsnorm_gate %o, %z, %w
      {eps = 1.0e-5, group_size = 64, norm_before_gate = false}
      : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>, tensor<256xf32>
  %p, %t = attn.linear_recurrence decay %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) state(%s0 : tensor<?x8x64x32xf32>)
      : tensor<?x1x?x64xf32>, tensor<?x1x?x64xf32>, tensor<?x8x?x32xf32>
  %u = attn.rmsnorm_gate %p, %z, %w
      : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>, tensor<256xf32>
  return %r, %u : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>
}

// -----

// Kimi Linear's sigmoid gate on a kda recurrence: its activation travels
// along with its eps.
// CHECK-LABEL: func @kda_rmsnorm_sigmoid_gate
// CHECK: attn.linear_recurrence kda {{.+}} output_gate(%{{.+}}, %{{.+}} : tensor<?x8x?x32xf32>, tensor<32xf32>) {gate_activation = #attn.gate_activation<sigmoid>, gate_eps = 1.000000e-05 : f64, qk_l2norm}
// CHECK-NOT: attn.rmsnorm_gate
func.func @kda_rmsnorm_sigmoid_gate(%q: tensor<?x4x?x64xf32>,
    %k: tensor<?x4x?x64xf32>, %v: tensor<?x8x?x32xf32>,
    %g: tensor<?x8x?x64xf32>, %beta: tensor<?x8x?xf32>,
    %s0: tensor<?x8x64x32xf32>, %z: tensor<?x8x?x32xf32>, %w: tensor<32xf32>)
    -> (tensor<?x8x?x32xf32>, tensor<?x8x64x32xf32>) {
  %o, %s = attn.linear_recurrence kda %q, %k, %v
      decay(%g : tensor<?x8x?x64xf32>) beta(%beta : tensor<?x8x?xf32>)
      state(%s0 : tensor<?x8x64x32xf32>) {qk_l2norm}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
  %r = attn.rmsnorm_gate %o, %z, %w
      {activation = #attn.gate_activation<sigmoid>, eps = 1.0e-5}
      : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>, tensor<32xf32>
  return %r, %s : tensor<?x8x?x32xf32>, tensor<?x8x64x32xf32>
}

// -----

// Gate logits computed after the attention: the fused op goes where they
// exist.
// CHECK-LABEL: func @gate_defined_later
// CHECK: %[[G:.+]] = arith.negf
// CHECK-NEXT: attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} gate(%[[G]])
func.func @gate_defined_later(%q: tensor<1x8x4x64xf32>, %k: tensor<1x2x4x64xf32>,
    %v: tensor<1x2x4x64xf32>, %x: tensor<1x8x4x64xf32>) -> tensor<1x8x4x64xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<1x8x4x64xf32>, tensor<1x2x4x64xf32>, tensor<1x2x4x64xf32>
  %g = arith.negf %x : tensor<1x8x4x64xf32>
  %r = attn.gate %o, %g : tensor<1x8x4x64xf32>, tensor<1x8x4x64xf32>
  return %r : tensor<1x8x4x64xf32>
}

// -----

// The lse is read before the gate logits exist: moving the attention down
// would break that use, so nothing is fused.
// CHECK-LABEL: func @lse_used_before_gate_exists
// CHECK: attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} {mask = #attn.mask<causal>, return_lse}
// CHECK: attn.gate
func.func @lse_used_before_gate_exists(%q: tensor<1x8x4x64xf32>,
    %k: tensor<1x2x4x64xf32>, %v: tensor<1x2x4x64xf32>)
    -> (tensor<1x8x4x64xf32>, tensor<1x8x4xf32>) {
  %o, %lse = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>, return_lse}
      : tensor<1x8x4x64xf32>, tensor<1x2x4x64xf32>, tensor<1x2x4x64xf32>
  %neg = arith.negf %lse : tensor<1x8x4xf32>
  %g = tensor.expand_shape %neg [[0], [1], [2, 3]] output_shape [1, 8, 4, 1]
      : tensor<1x8x4xf32> into tensor<1x8x4x1xf32>
  %r = attn.gate %o, %g : tensor<1x8x4x64xf32>, tensor<1x8x4x1xf32>
  return %r, %neg : tensor<1x8x4x64xf32>, tensor<1x8x4xf32>
}

// -----

// CHECK-LABEL: func @not_fused
func.func @not_fused(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
    %v: tensor<?x2x?x64xf32>, %g: tensor<?x8x?x64xf32>,
    %w: tensor<64xf32>, %x: tensor<?x8x?x64xf32>)
    -> (tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>,
        tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>) {
  // The un-gated output is also returned.
  // CHECK: %[[O1:.+]] = attn.sdpa %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} {
  // CHECK: attn.gate %[[O1]]
  %o1 = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
  %r1 = attn.gate %o1, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
  // Already gated: the second gate stays.
  // CHECK: %[[O2:.+]] = attn.sdpa {{.+}} gate(
  // CHECK: attn.gate %[[O2]]
  %o2 = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x8x?x64xf32>
  %r2 = attn.gate %o2, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
  // Softmax attention has no rmsnorm epilogue.
  // CHECK: %[[O3:.+]] = attn.sdpa
  // CHECK: attn.rmsnorm_gate %[[O3]]
  %o3 = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
  %r3 = attn.rmsnorm_gate %o3, %g, %w
      : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<64xf32>
  // Not an attention output.
  // CHECK: attn.gate %{{.+}}, %{{.+}} :
  %r4 = attn.gate %x, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
  return %o1, %r1, %r2, %r3, %r4 : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>,
      tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
}

// -----

// The gates beyond SPEC (silu, Mamba2's skip) have no attention epilogue:
// they stay kernels of their own.
// CHECK-LABEL: func @silu_and_skip_not_fused
// CHECK: %[[O1:.+]] = attn.sdpa %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} {
// CHECK: attn.gate %[[O1]], %{{.+}} {activation = #attn.gate_activation<silu>}
// CHECK: %[[O2:.+]] = attn.sdpa %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}} {
// CHECK: attn.gate %[[O2]], %{{.+}} skip(
func.func @silu_and_skip_not_fused(%q: tensor<?x8x?x64xf32>,
    %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>,
    %g: tensor<?x8x?x64xf32>, %x: tensor<?x8x?x64xf32>, %d: tensor<8xf32>)
    -> (tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>) {
  %o1 = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
  %r1 = attn.gate %o1, %g {activation = #attn.gate_activation<silu>}
      : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
  %o2 = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
  %r2 = attn.gate %o2, %g skip(%x, %d : tensor<?x8x?x64xf32>, tensor<8xf32>)
      : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
  return %r1, %r2 : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
}
