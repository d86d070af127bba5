// RUN: attn-opt %s -split-input-file -attn-gpu-outline-kernels -verify-diagnostics

// Kernels that break the contract of -attn-gpu-dispatches' kernels
// (SimtKernels.h) are refused, not miscompiled.

// expected-error @below {{not a kernel of -attn-gpu-dispatches (attn.tiling has no block_threads, or the body has several blocks)}}
func.func private @no_block_size(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.tiling = {}} {
  return
}

// -----

// A thread loop must cover exactly the block's threads.
func.func private @short_thread_loop(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  // expected-error @below {{a thread loop must run over [0, 32) with step 1}}
  scf.parallel (%t) = (%c0) to (%c16) step (%c1) {
    scf.reduce
  } {attn.threads}
  return
}

// -----

// A barrier inside a thread loop would not be reached by every thread.
func.func private @nested_thread_loops(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
    // expected-error @below {{thread loops do not nest}}
    scf.parallel (%u) = (%c0) to (%c32) step (%c1) {
      scf.reduce
    } {attn.threads}
    scf.reduce
  } {attn.threads}
  return
}

// -----

// Shared buffers become views into dynamic shared memory, which only loads
// and stores may use.
func.func private @shared_buffer_copied(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %s = memref.alloca() {attn.shared} : memref<4xf32>
  // expected-error @below {{a shared buffer may only be loaded and stored}}
  memref.copy %s, %a : memref<4xf32> to memref<4xf32>
  return
}
