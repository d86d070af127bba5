// RUN: attn-opt %s -attn-gpu-dispatches -canonicalize -cse | FileCheck %s

// The CUDA host program is the CPU one's shape (same signature, symbolic
// shapes, decode chosen from the run-time Lq) with one-thread kernels:
// one thread per (batch, head, query row) for prefill, one per (batch,
// head, row, key range) + a merge thread per row for decode.

// CHECK-LABEL: func.func private @layer__attention0
// CHECK-SAME:    attn.kernel = "attention"
// CHECK-SAME:    attn.tiling = {block_threads = 128 : i64, decode_max_queries = 8 : i64, split_keys = 256 : i64}
// The thread's row, head and batch come from its index.
// CHECK:         %[[ROW:.+]] = arith.remui %[[THREAD:arg5]], %{{.+}} : index
// CHECK:         arith.divui %[[THREAD]]
// The causal mask ends the key loop at the row's position.
// CHECK:         %[[END:.+]] = arith.maxsi %{{.+}}, %c0 : index
// Scalar online softmax: the state (m, l) is carried by the loop.
// CHECK:         scf.for %{{.+}} = %c0 to %[[END]] step %c1 iter_args(%{{.+}} = %cst{{.*}}, %{{.+}} = %cst{{.*}}) -> (f32, f32)
// CHECK:           math.fma
// CHECK:           arith.maximumf
// CHECK:           math.exp
// CHECK:           math.exp
// The gate runs in the epilogue.
// CHECK:         math.exp
// CHECK:         arith.divf
// CHECK-NOT:     vector.
// CHECK-LABEL: func.func private @layer__split_kv1
// CHECK-SAME:    attn.kernel = "split_kv"
// CHECK-LABEL: func.func private @layer__merge2
// CHECK-SAME:    attn.kernel = "merge"
// CHECK-LABEL: func.func @layer(
// CHECK-SAME:    %[[Q:[a-z0-9]+]]: memref<?x8x?x64xf32> {attn.name = "q", attn.shape = ["B", 8, "Lq", 64]}
// CHECK-SAME:    %[[K:[a-z0-9]+]]: memref<?x2x?x64xf32> {attn.shape = ["B", 2, "Lk", 64]}
// CHECK-SAME:    attributes {attn.entry, attn.num_inputs = 4 : i64}
// CHECK:         %[[LQ:.+]] = memref.dim %[[Q]], %c2
// CHECK:         %[[LK:.+]] = memref.dim %[[K]], %c2
// CHECK:         %[[DECODE:.+]] = arith.cmpi ule, %[[LQ]], %c8
// CHECK:         %[[SPLITS:.+]] = arith.ceildivui %[[LK]], %c256
// CHECK:         attn.dispatch @layer__attention0 workgroups(%{{.+}}) bindings(
// CHECK:         attn.dispatch @layer__split_kv1 workgroups(%{{.+}}) bindings(
// CHECK:         attn.dispatch @layer__merge2 workgroups(%{{.+}}) bindings(
func.func @layer(%q: tensor<?x8x?x64xf32> {attn.name = "q"},
                 %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>,
                 %g: tensor<?x8x?x64xf32>) -> (tensor<?x8x?x64xf32> {attn.name = "o"}) {
  %o = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}
