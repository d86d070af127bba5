// RUN: attn-opt %s -split-input-file -attn-cpu-dispatches -verify-diagnostics | FileCheck %s
// RUN: attn-opt %s -split-input-file -attn-gpu-dispatches -verify-diagnostics | FileCheck %s --check-prefix=GPU

// A latent cache (DeepSeek's MLA, absorbed): the values are a view of the
// keys' leading features, so every kernel binds the one cache buffer as
// both its keys and its values, and no copy is made.
// CHECK-LABEL: func.func @latent(
// CHECK-SAME:    %[[Q:[^:]+]]: memref<?x4x?x40xf32> {attn.shape = ["B", 4, "Lq", 40]}, %[[KV:[^:]+]]: memref<?x1x?x40xf32> {attn.shape = ["B", 1, "Lk", 40]}
// CHECK-NOT:     memref.copy
// CHECK:         attn_kernel.dispatch @latent__flash0 workgroups(%{{.*}}) bindings(%[[Q]], %[[KV]], %[[KV]], %{{.*}})
// CHECK:         attn_kernel.dispatch @latent__split_kv1 workgroups(%{{.*}}) bindings(%[[Q]], %[[KV]], %[[KV]],
// GPU-LABEL: func.func @latent(
// GPU-SAME:    %[[Q:[^:]+]]: memref<?x4x?x40xf32> {{.*}}, %[[KV:[^:]+]]: memref<?x1x?x40xf32>
// GPU:         attn_kernel.dispatch @latent__flash{{[0-9]+}} workgroups(%{{.*}}) bindings(%[[Q]], %[[KV]], %[[KV]],
func.func @latent(%q: tensor<?x4x?x40xf32>, %kv: tensor<?x1x?x40xf32>) -> tensor<?x4x?x32xf32> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %b = tensor.dim %kv, %c0 : tensor<?x1x?x40xf32>
  %l = tensor.dim %kv, %c2 : tensor<?x1x?x40xf32>
  %v = tensor.extract_slice %kv[0, 0, 0, 0] [%b, 1, %l, 32] [1, 1, 1, 1] : tensor<?x1x?x40xf32> to tensor<?x1x?x32xf32>
  %o = attn.sdpa %q, %kv, %v {mask = #attn.mask<causal>} : tensor<?x4x?x40xf32>, tensor<?x1x?x40xf32>, tensor<?x1x?x32xf32>
  return %o : tensor<?x4x?x32xf32>
}

// -----

// A slice that starts past feature 0 is no view the kernels can read.
func.func @offset(%q: tensor<2x4x8x40xf32>, %kv: tensor<2x1x8x40xf32>) -> tensor<2x4x8x32xf32> {
  // expected-error @+1 {{lowering for this 'tensor.extract_slice': only offsets 0 and strides 1 are views}}
  %v = tensor.extract_slice %kv[0, 0, 0, 8] [2, 1, 8, 32] [1, 1, 1, 1] : tensor<2x1x8x40xf32> to tensor<2x1x8x32xf32>
  %o = attn.sdpa %q, %kv, %v {mask = #attn.mask<causal>} : tensor<2x4x8x40xf32>, tensor<2x1x8x40xf32>, tensor<2x1x8x32xf32>
  return %o : tensor<2x4x8x32xf32>
}

// -----

// Nor one that drops keys.
func.func @fewer_keys(%q: tensor<?x4x?x40xf32>, %kv: tensor<?x1x?x40xf32>, %n: index) -> tensor<?x4x?x32xf32> {
  %c0 = arith.constant 0 : index
  %b = tensor.dim %kv, %c0 : tensor<?x1x?x40xf32>
  // expected-error @+1 {{lowering for this 'tensor.extract_slice': it must keep dim 2 whole}}
  %v = tensor.extract_slice %kv[0, 0, 0, 0] [%b, 1, %n, 32] [1, 1, 1, 1] : tensor<?x1x?x40xf32> to tensor<?x1x?x32xf32>
  %o = attn.sdpa %q, %kv, %v {mask = #attn.mask<none>} : tensor<?x4x?x40xf32>, tensor<?x1x?x40xf32>, tensor<?x1x?x32xf32>
  return %o : tensor<?x4x?x32xf32>
}

// -----

// A view is read by attention only: the queries are no keys or values.
func.func @queries(%q: tensor<2x4x8x40xf32>, %kv: tensor<2x4x8x48xf32>) -> tensor<2x4x8x40xf32> {
  // expected-error @+1 {{lowering for this 'tensor.extract_slice': a view of leading features may only be the keys or values of softmax attention}}
  %qv = tensor.extract_slice %kv[0, 0, 0, 0] [2, 4, 8, 40] [1, 1, 1, 1] : tensor<2x4x8x48xf32> to tensor<2x4x8x40xf32>
  %o = attn.sdpa %qv, %q, %q {mask = #attn.mask<none>} : tensor<2x4x8x40xf32>, tensor<2x4x8x40xf32>, tensor<2x4x8x40xf32>
  return %o : tensor<2x4x8x40xf32>
}

// -----

// Nor the queries beside the values.
func.func @queries_and_values(%kv: tensor<2x4x8x40xf32>, %k: tensor<2x4x8x40xf32>) -> tensor<2x4x8x40xf32> {
  // expected-error @+1 {{lowering for this 'tensor.extract_slice': a view of leading features may only be the keys or values of softmax attention}}
  %v = tensor.extract_slice %kv[0, 0, 0, 0] [2, 4, 8, 40] [1, 1, 1, 1] : tensor<2x4x8x40xf32> to tensor<2x4x8x40xf32>
  %o = attn.sdpa %v, %k, %v {mask = #attn.mask<none>} : tensor<2x4x8x40xf32>, tensor<2x4x8x40xf32>, tensor<2x4x8x40xf32>
  return %o : tensor<2x4x8x40xf32>
}
