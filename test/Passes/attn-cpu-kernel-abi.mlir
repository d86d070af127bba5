// RUN: attn-opt %s -attn-cpu-kernel-abi | FileCheck %s
// RUN: attn-opt %s -attn-cpu-lower-to-llvm | FileCheck %s --check-prefix=LLVM

// Every kernel gets `attn_kernel_<name>(buffers, dims, workgroup)`: one
// pointer per binding, every binding's sizes in order, row-major strides
// rebuilt from them. Host functions leave the module.

// CHECK-LABEL: func.func private @copy_rows
// CHECK-LABEL: func.func @attn_kernel_copy_rows(
// CHECK-SAME:    %[[BUFFERS:.+]]: !llvm.ptr, %[[DIMS:.+]]: !llvm.ptr, %[[WG:.+]]: i64)
// CHECK:         %[[P0:.+]] = llvm.load %{{.+}} : !llvm.ptr -> !llvm.ptr
// CHECK:         %[[D0:.+]] = llvm.load %{{.+}} : !llvm.ptr -> i64
// CHECK:         %[[D1:.+]] = llvm.load %{{.+}} : !llvm.ptr -> i64
// CHECK:         llvm.insertvalue %[[D1]], %{{.+}}[3, 1]
// CHECK:         llvm.insertvalue %{{.+}}, %{{.+}}[4, 1]
// CHECK:         %[[M0:.+]] = builtin.unrealized_conversion_cast %{{.+}} : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> to memref<?x4xf32>
// CHECK:         %[[M1:.+]] = builtin.unrealized_conversion_cast %{{.+}} : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> to memref<?x4xf32>
// CHECK:         %[[ID:.+]] = arith.index_cast %[[WG]] : i64 to index
// CHECK:         call @copy_rows(%[[M0]], %[[M1]], %[[ID]])
// CHECK-NOT:   @host

// After the whole lowering only LLVM-dialect functions remain, with the
// wrapper's C signature.
// LLVM:        llvm.func @attn_kernel_copy_rows(%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: i64)
// LLVM-NOT:    builtin.unrealized_conversion_cast
// LLVM-NOT:    func.func

func.func private @copy_rows(%in: memref<?x4xf32>, %out: memref<?x4xf32>,
                             %wg: index) attributes {attn.kernel = "copy"} {
  %c0 = arith.constant 0 : index
  %row = vector.load %in[%wg, %c0] : memref<?x4xf32>, vector<4xf32>
  %e = math.exp %row : vector<4xf32>
  vector.store %e, %out[%wg, %c0] : memref<?x4xf32>, vector<4xf32>
  return
}

func.func @host(%in: memref<?x4xf32>, %out: memref<?x4xf32>)
    attributes {attn.entry, attn.num_inputs = 1 : i64} {
  %c0 = arith.constant 0 : index
  %n = memref.dim %in, %c0 : memref<?x4xf32>
  attn_kernel.dispatch @copy_rows workgroups(%n) bindings(%in, %out)
      : memref<?x4xf32>, memref<?x4xf32>
  return
}
