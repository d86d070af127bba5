// RUN: attn-opt %s -attn-merge-identical-kernels | FileCheck %s

// Kernels merge when they are equal but for their names, and only then: a
// constant, an attribute of the kernel or an argument type apart keeps
// them apart. Public functions (entries) never merge.

// CHECK-LABEL: func.func private @scale2(
// CHECK-NOT:   func.func private @scale2_again(
// CHECK-LABEL: func.func private @scale3(
// CHECK-LABEL: func.func private @scale2_other_tiling(
// CHECK-LABEL: func.func private @scale2_f16(
// CHECK-LABEL: func.func @entry(
// CHECK:         attn_kernel.dispatch @scale2 workgroups
// CHECK:         attn_kernel.dispatch @scale2 workgroups
// CHECK:         attn_kernel.dispatch @scale3 workgroups
// CHECK:         attn_kernel.dispatch @scale2_other_tiling workgroups
// CHECK:         attn_kernel.dispatch @scale2_f16 workgroups
// CHECK-LABEL: func.func @entry_again(
// CHECK:         attn_kernel.dispatch @scale2 workgroups
// CHECK-NEXT:    attn_kernel.dispatch @scale2 workgroups

func.func private @scale2(%x: memref<?xf32>, %wg: index)
    attributes {attn.kernel = "scale", attn.tiling = {block_threads = 1 : i64}} {
  %c2 = arith.constant 2.0 : f32
  %e = memref.load %x[%wg] : memref<?xf32>
  %m = arith.mulf %e, %c2 : f32
  memref.store %m, %x[%wg] : memref<?xf32>
  return
}

func.func private @scale2_again(%x: memref<?xf32>, %wg: index)
    attributes {attn.kernel = "scale", attn.tiling = {block_threads = 1 : i64}} {
  %c2 = arith.constant 2.0 : f32
  %e = memref.load %x[%wg] : memref<?xf32>
  %m = arith.mulf %e, %c2 : f32
  memref.store %m, %x[%wg] : memref<?xf32>
  return
}

func.func private @scale3(%x: memref<?xf32>, %wg: index)
    attributes {attn.kernel = "scale", attn.tiling = {block_threads = 1 : i64}} {
  %c3 = arith.constant 3.0 : f32
  %e = memref.load %x[%wg] : memref<?xf32>
  %m = arith.mulf %e, %c3 : f32
  memref.store %m, %x[%wg] : memref<?xf32>
  return
}

func.func private @scale2_other_tiling(%x: memref<?xf32>, %wg: index)
    attributes {attn.kernel = "scale", attn.tiling = {block_threads = 2 : i64}} {
  %c2 = arith.constant 2.0 : f32
  %e = memref.load %x[%wg] : memref<?xf32>
  %m = arith.mulf %e, %c2 : f32
  memref.store %m, %x[%wg] : memref<?xf32>
  return
}

func.func private @scale2_f16(%x: memref<?xf16>, %wg: index)
    attributes {attn.kernel = "scale", attn.tiling = {block_threads = 1 : i64}} {
  %c2 = arith.constant 2.0 : f16
  %e = memref.load %x[%wg] : memref<?xf16>
  %m = arith.mulf %e, %c2 : f16
  memref.store %m, %x[%wg] : memref<?xf16>
  return
}

func.func @entry(%x: memref<?xf32>, %h: memref<?xf16>, %n: index) {
  attn_kernel.dispatch @scale2 workgroups(%n) bindings(%x) : memref<?xf32>
  attn_kernel.dispatch @scale2_again workgroups(%n) bindings(%x) : memref<?xf32>
  attn_kernel.dispatch @scale3 workgroups(%n) bindings(%x) : memref<?xf32>
  attn_kernel.dispatch @scale2_other_tiling workgroups(%n) bindings(%x) : memref<?xf32>
  attn_kernel.dispatch @scale2_f16 workgroups(%n) bindings(%h) : memref<?xf16>
  return
}

func.func @entry_again(%x: memref<?xf32>, %h: memref<?xf16>, %n: index) {
  attn_kernel.dispatch @scale2 workgroups(%n) bindings(%x) : memref<?xf32>
  attn_kernel.dispatch @scale2_again workgroups(%n) bindings(%x) : memref<?xf32>
  attn_kernel.dispatch @scale3 workgroups(%n) bindings(%x) : memref<?xf32>
  attn_kernel.dispatch @scale2_other_tiling workgroups(%n) bindings(%x) : memref<?xf32>
  attn_kernel.dispatch @scale2_f16 workgroups(%n) bindings(%h) : memref<?xf16>
  return
}
