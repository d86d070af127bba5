// RUN: attn-opt %s -attn-cpu-dispatches | FileCheck %s --check-prefix=L2
// RUN: attn-opt %s -attn-cpu-dispatches=prefetch-into-l1=true | FileCheck %s --check-prefix=L1

// Where split-KV decode requests its coming K and V rows: into L2
// (locality 2, prefetcht1) by default, into L1 (locality 3, prefetcht0)
// with prefetch-into-l1, the choice attnc makes for hosts on which it was
// measured faster (CpuTarget::host). The tiling records it; nothing else
// changes.
// L2-LABEL: func.func private @decode__split_kv1
// L2-SAME:    %[[K:[a-z0-9]+]]: memref<?x2x?x16xf32>
// L2-SAME:    %[[V:[a-z0-9]+]]: memref<?x2x?x16xf32>
// L2-NOT:     prefetch_into_l1
// L2:         memref.prefetch %[[V]]{{.+}}, read, locality<2>, data
// L2:         memref.prefetch %[[K]]{{.+}}, read, locality<2>, data
// L2-NOT:     locality<3>
// L1-LABEL: func.func private @decode__split_kv1
// L1-SAME:    %[[K:[a-z0-9]+]]: memref<?x2x?x16xf32>
// L1-SAME:    %[[V:[a-z0-9]+]]: memref<?x2x?x16xf32>
// L1-SAME:    attn.tiling = {{{.*}}prefetch_into_l1
// L1:         memref.prefetch %[[V]]{{.+}}, read, locality<3>, data
// L1:         memref.prefetch %[[K]]{{.+}}, read, locality<3>, data
// L1-NOT:     locality<2>
func.func @decode(%q: tensor<?x8x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                  %v: tensor<?x2x?x16xf32>) -> tensor<?x8x?x16xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
  return %o : tensor<?x8x?x16xf32>
}
