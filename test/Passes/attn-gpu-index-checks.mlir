// RUN: attn-opt %s -split-input-file -attn-gpu-index-checks -verify-diagnostics | FileCheck %s

// An entry whose pool slots index its state pool: a check kernel (a thread
// per slot) runs first, and the kernel that reads the pool through the
// slots takes the record and runs only while it is clear.

// CHECK-LABEL: func.func private @e__work0(
// CHECK-SAME:    %[[SLOTS:.*]]: memref<?xi32>, %[[POOL:.*]]: memref<?x4xf32>, %[[RECORD:.*]]: memref<8xi32>, %[[ID:.*]]: index)
// CHECK:         %[[FLAG:.*]] = memref.load %[[RECORD]]
// CHECK:         %[[CLEAR:.*]] = arith.cmpi eq, %[[FLAG]]
// CHECK:         scf.if %[[CLEAR]] {
// CHECK:           memref.load %[[SLOTS]][%[[ID]]]
// CHECK:           memref.store
// CHECK:         }
// CHECK-NEXT:    return
// The check: out of range (error 5) and repeated (error 6) slots, against
// the pool's dim 0; the first failure sets the flag atomically.
// CHECK-LABEL: func.func private @e__index_check0(
// CHECK-SAME:    attn.kernel = "index_check"
// CHECK:         memref.dim %{{.*}}, %c0 : memref<?x4xf32>
// CHECK:         memref.atomic_rmw maxs
// CHECK:         memref.store %c5_i32
// CHECK:         scf.for
// CHECK:         memref.atomic_rmw maxs
// CHECK:         memref.store %c6_i32
// CHECK-LABEL: func.func @e(
// CHECK:         %[[R:.*]] = attn_kernel.index_status : memref<8xi32>
// CHECK:         %[[N:.*]] = memref.dim %arg0, %c0
// CHECK:         attn_kernel.dispatch @e__index_check0 workgroups(%[[N]]) bindings(%arg0, %arg1, %[[R]])
// CHECK:         attn_kernel.dispatch @e__work0 workgroups(%{{.*}}) bindings(%arg0, %arg1, %[[R]])

func.func private @e__work0(%slots: memref<?xi32>, %pool: memref<?x4xf32>,
                            %id: index)
    attributes {attn.kernel = "work", attn.tiling = {block_threads = 128 : i64}} {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  %slot = memref.load %slots[%id] : memref<?xi32>
  %row = arith.index_cast %slot : i32 to index
  memref.store %one, %pool[%row, %c0] : memref<?x4xf32>
  return
}

func.func @e(%slots: memref<?xi32> {attn.contract = "pool_slots",
                                    attn.contract_input = 1 : i64},
             %pool: memref<?x4xf32>)
    attributes {attn.entry, attn.num_inputs = 2 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %slots, %c0 : memref<?xi32>
  attn_kernel.dispatch @e__work0 workgroups(%n) bindings(%slots, %pool)
      : memref<?xi32>, memref<?x4xf32>
  return
}

// -----

// Entries without index inputs are left alone.

// CHECK-LABEL: func.func @plain(
// CHECK-NOT:     index_status
// CHECK:         attn_kernel.dispatch @plain__work0 workgroups(%{{.*}}) bindings(%arg0) : memref<?xf32>

func.func private @plain__work0(%x: memref<?xf32>, %id: index)
    attributes {attn.kernel = "work", attn.tiling = {block_threads = 128 : i64}} {
  return
}

func.func @plain(%x: memref<?xf32>)
    attributes {attn.entry, attn.num_inputs = 1 : i64} {
  %c1 = arith.constant 1 : index
  attn_kernel.dispatch @plain__work0 workgroups(%c1) bindings(%x)
      : memref<?xf32>
  return
}

// -----

// A kernel that another entry dispatches too cannot take one entry's record.

func.func private @shared__work0(%slots: memref<?xi32>, %id: index)
    attributes {attn.kernel = "work", attn.tiling = {block_threads = 128 : i64}} {
  return
}

func.func @a(%slots: memref<?xi32> {attn.contract = "tree_parents"})
    attributes {attn.entry, attn.num_inputs = 1 : i64} {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{kernel @shared__work0 is dispatched by another entry too}}
  attn_kernel.dispatch @shared__work0 workgroups(%c1) bindings(%slots)
      : memref<?xi32>
  return
}

func.func @b(%slots: memref<?xi32>)
    attributes {attn.entry, attn.num_inputs = 1 : i64} {
  %c1 = arith.constant 1 : index
  attn_kernel.dispatch @shared__work0 workgroups(%c1) bindings(%slots)
      : memref<?xi32>
  return
}

// -----

// A contract this pass does not know is an error, not an unchecked input.

func.func private @u__work0(%x: memref<?xi32>, %id: index)
    attributes {attn.kernel = "work", attn.tiling = {block_threads = 128 : i64}} {
  return
}

// expected-error @+1 {{argument #0 has the unknown index contract 'sorted'}}
func.func @u(%x: memref<?xi32> {attn.contract = "sorted"})
    attributes {attn.entry, attn.num_inputs = 1 : i64} {
  %c1 = arith.constant 1 : index
  attn_kernel.dispatch @u__work0 workgroups(%c1) bindings(%x) : memref<?xi32>
  return
}

// -----

// Offsets are checked against the tokens of another input, which the
// contract must name.

func.func private @o__work0(%x: memref<?xi32>, %id: index)
    attributes {attn.kernel = "work", attn.tiling = {block_threads = 128 : i64}} {
  return
}

// expected-error @+1 {{the index contract 'sequence_offsets' of argument #0 names no input it is checked against}}
func.func @o(%x: memref<?xi32> {attn.contract = "sequence_offsets"})
    attributes {attn.entry, attn.num_inputs = 1 : i64} {
  %c1 = arith.constant 1 : index
  attn_kernel.dispatch @o__work0 workgroups(%c1) bindings(%x) : memref<?xi32>
  return
}
