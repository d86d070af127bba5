// RUN: attn-opt %s -attn-gpu-dispatches -canonicalize -cse | FileCheck %s

// Decode steps beside the chunk's products (SimtRecurrenceColumns): with
// Dk = 64, each state column is split over 2 threads of a warp of 32 rows
// each, rows part, part + 2, ...; lanes [16 p, 16 p + 16) hold part p of
// the warp's 16 columns. Dv = 20 takes 2 warps (64 threads, 32 columns).
// CHECK-LABEL: func.func private @gdn__chunked0
// CHECK-SAME:    attn.tiling = {block_threads = 64 : i64
// The partial sums q . S and k . S of the 64 threads, a step's.
// CHECK:         %[[PARTIALS:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<1x128xf32>
// CHECK:         %[[S:.+]] = memref.alloca() {alignment = 16 : i64, attn.registers} : memref<64x32xf32>
// The initial state: thread t holds rows 2 k + (t mod 32) / 16 of column
// (t / 32) 16 + t mod 16.
// CHECK:         scf.parallel (%[[T:.+]]) = (%c0) to (%c64) step (%c1) {
// CHECK:           %[[LANE:.+]] = arith.remui %[[T]], %c32
// CHECK:           %[[PART:.+]] = arith.divui %[[LANE]], %c16
// CHECK:           %[[IN_WARP:.+]] = arith.remui %[[T]], %c16
// CHECK:           %[[WARP:.+]] = arith.divui %[[T]], %c32
// CHECK:           %[[FIRST:.+]] = arith.muli %[[WARP]], %c16
// CHECK:           %[[COLUMN:.+]] = arith.addi %[[FIRST]], %[[IN_WARP]]
// CHECK:           arith.cmpi ult, %[[COLUMN]], %c20
// CHECK:           memref.load %arg5[%{{.+}}, %{{.+}}, %[[PART]], %[[COLUMN]]]
// CHECK:           %[[ROW1:.+]] = arith.addi %[[PART]], %c2
// CHECK:           memref.load %arg5[%{{.+}}, %{{.+}}, %[[ROW1]], %[[COLUMN]]]
// CHECK:         } {attn.threads}
// Per step: stage and normalize k and q, then P; then each part's sums,
// exchanged within the warp (the thread, and at + 64 the second sum).
// CHECK:         scf.for
// CHECK-COUNT-3:   } {attn.threads}
// CHECK:           scf.parallel (%[[T2:.+]]) = (%c0) to (%c64) step (%c1) {
// CHECK:             memref.store %{{.+}}, %[[PARTIALS]][%c0, %[[T2]]]
// CHECK:             %[[SECOND:.+]] = arith.addi %[[T2]], %c64
// CHECK:             memref.store %{{.+}}, %[[PARTIALS]][%c0, %[[SECOND]]]
// CHECK:           } {attn.threads, attn.warp_sync}
// The column's first part adds its partner's sums (16 lanes on), then
// makes o and v'.
// CHECK:           scf.parallel (%[[T3:.+]]) = (%c0) to (%c64) step (%c1) {
// CHECK:             %[[LANE3:.+]] = arith.remui %[[T3]], %c32
// CHECK:             %[[PART3:.+]] = arith.divui %[[LANE3]], %c16
// CHECK:             arith.cmpi eq, %[[PART3]], %c0
// CHECK:             memref.load %[[PARTIALS]][%c0, %[[T3]]]
// CHECK:             %[[PARTNER:.+]] = arith.addi %[[T3]], %c16
// CHECK:             memref.load %[[PARTIALS]][%c0, %[[PARTNER]]]
// CHECK:             memref.store %{{.+}}, %arg6
// CHECK:           } {attn.threads, attn.warp_sync}
// Then every part updates its 32 rows, and the block waits.
// CHECK:           scf.parallel
// CHECK-COUNT-32:    memref.store %{{.+}}, %{{.+}}[%c{{[0-9]+}}] : memref<32xf32, strided<[1], offset: ?>>
// CHECK:           } {attn.threads}
// CHECK:         }
// CHECK:         scf.parallel
// CHECK-COUNT-32:  memref.store %{{.+}}, %arg7
// CHECK:         } {attn.threads}
// CHECK-NOT:     attn.threads
// CHECK:         return
func.func @gdn(%q: tensor<?x1x?x64xf32>, %k: tensor<?x1x?x64xf32>,
               %v: tensor<?x2x?x20xf32>, %g: tensor<?x2x?xf32>,
               %beta: tensor<?x2x?xf32>, %s0: tensor<?x2x64x20xf32>)
    -> (tensor<?x2x?x20xf32>, tensor<?x2x64x20xf32>) {
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x2x?xf32>) beta(%beta : tensor<?x2x?xf32>)
      state(%s0 : tensor<?x2x64x20xf32>)
      {chunk_size = 16, qk_l2norm}
      : tensor<?x1x?x64xf32>, tensor<?x1x?x64xf32>, tensor<?x2x?x20xf32>
  return %o, %s : tensor<?x2x?x20xf32>, tensor<?x2x64x20xf32>
}
