// RUN: attn-opt %s -attn-cpu-dispatches -canonicalize -cse -attn-merge-identical-kernels | FileCheck %s
// RUN: attn-opt %s -attn-gpu-dispatches -canonicalize -cse -attn-merge-identical-kernels | FileCheck %s --check-prefix=GPU
// The dispatch pipelines merge the kernels as built, before the cleanup:
// RUN: attn-opt %s -attn-cpu-dispatch | FileCheck %s
// RUN: attn-opt %s -attn-gpu-dispatch | FileCheck %s --check-prefix=GPU

// Two equal layers and one with another mask: the second layer's kernels
// are the first's; the windowed one keeps its own flash kernels and shares
// the merge, which no mask changes.

// CHECK-LABEL: func.func private @first__flash0(
// CHECK-LABEL: func.func private @first__split_kv1(
// CHECK-LABEL: func.func private @first__merge2(
// CHECK-NOT:   func.func private @second__
// CHECK-LABEL: func.func @first(
// CHECK:         attn_kernel.dispatch @first__flash0
// CHECK:         attn_kernel.dispatch @first__split_kv1
// CHECK:         attn_kernel.dispatch @first__merge2
// CHECK-NOT:   func.func private @second__
// CHECK-LABEL: func.func private @windowed__flash0(
// CHECK-LABEL: func.func @windowed(
// CHECK:         attn_kernel.dispatch @windowed__flash0
// CHECK:         attn_kernel.dispatch @windowed__split_kv1
// CHECK:         attn_kernel.dispatch @first__merge2
// CHECK-LABEL: func.func @second(
// CHECK:         attn_kernel.dispatch @first__flash0
// CHECK:         attn_kernel.dispatch @first__split_kv1
// CHECK:         attn_kernel.dispatch @first__merge2

// GPU-NOT:     func.func private @second__
// GPU-LABEL:   func.func @windowed(
// GPU:           attn_kernel.dispatch @windowed__
// GPU-LABEL:   func.func @second(
// GPU-NOT:       attn_kernel.dispatch @second__
// GPU:           attn_kernel.dispatch @first__
// GPU-NOT:       attn_kernel.dispatch @second__
// GPU:         return

func.func @first(%q: tensor<?x4x?x32xf32>, %k: tensor<?x2x?x32xf32>,
                 %v: tensor<?x2x?x32xf32>) -> tensor<?x4x?x32xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x4x?x32xf32>, tensor<?x2x?x32xf32>, tensor<?x2x?x32xf32>
  return %o : tensor<?x4x?x32xf32>
}

func.func @windowed(%q: tensor<?x4x?x32xf32>, %k: tensor<?x2x?x32xf32>,
                    %v: tensor<?x2x?x32xf32>) -> tensor<?x4x?x32xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<sliding_window = 64>}
      : tensor<?x4x?x32xf32>, tensor<?x2x?x32xf32>, tensor<?x2x?x32xf32>
  return %o : tensor<?x4x?x32xf32>
}

func.func @second(%q: tensor<?x4x?x32xf32>, %k: tensor<?x2x?x32xf32>,
                  %v: tensor<?x2x?x32xf32>) -> tensor<?x4x?x32xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x4x?x32xf32>, tensor<?x2x?x32xf32>, tensor<?x2x?x32xf32>
  return %o : tensor<?x4x?x32xf32>
}
