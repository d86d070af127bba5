// RUN: attn-opt %s -split-input-file -attn-gpu-outline-kernels -verify-diagnostics

// Kernels that break the contract of -attn-gpu-dispatches' kernels
// (SimtKernels.h) are refused, not miscompiled.

// expected-error @below {{not a kernel of -attn-gpu-dispatches (attn.tiling has no block_threads, or the body has several blocks)}}
func.func private @no_block_size(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.tiling = {}} {
  return
}

// -----

// A thread loop covers the block's threads, or whole warps of them.
func.func private @short_thread_loop(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  // expected-error @below {{a thread loop must run with step 1 over [0, 32) or over whole warps of it (constant bounds, multiples of 32)}}
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

// Shared buffers become views into dynamic shared memory, which only loads,
// stores, atomic updates and warp_mma may use.
func.func private @shared_buffer_copied(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %s = memref.alloca() {attn.shared} : memref<4xf32>
  // expected-error @below {{a shared buffer may only be loaded, stored (elements or vectors), updated atomically (memref.atomic_rmw) and used by attn_kernel.warp_mma (itself or through memref.subview), the copies (attn_kernel.async_copy, bulk_copy) and the attn_kernel.mbarrier ops}}
  memref.copy %s, %a : memref<4xf32> to memref<4xf32>
  return
}

// -----

// A view of a shared buffer is only a product's operand.
func.func private @shared_view_loaded(%n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %s = memref.alloca() {attn.shared} : memref<4x8xf32>
  // expected-error @below {{a shared buffer may only be loaded, stored (elements or vectors), updated atomically (memref.atomic_rmw) and used by attn_kernel.warp_mma (itself or through memref.subview), the copies (attn_kernel.async_copy, bulk_copy) and the attn_kernel.mbarrier ops}}
  %v = memref.subview %s[0, 4] [4, 4] [1, 1] : memref<4x8xf32> to memref<4x4xf32, strided<[8, 1], offset: 4>>
  %c0 = arith.constant 0 : index
  %x = memref.load %v[%c0, %c0] : memref<4x4xf32, strided<[8, 1], offset: 4>>
  return
}

// -----

// A warp_mma needs the warp's 32 lanes together: not under a condition of
// the thread...
func.func private @warp_mma_divergent(%n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %a = memref.alloca() {attn.shared} : memref<16x16xbf16>
  %b = memref.alloca() {attn.shared} : memref<8x16xbf16>
  %acc = memref.alloca() {attn.shared} : memref<16x8xf32>
  scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
    %low = arith.cmpi ult, %t, %c16 : index
    scf.if %low {
      // expected-error @below {{attn_kernel.warp_mma must be directly in a thread loop of a block kernel, where the 32 lanes of a warp run it together}}
      attn_kernel.warp_mma %a, %b, %acc rows(%c0) lane(%t) n(8) k(16) {rhs_transposed}
          : memref<16x16xbf16>, memref<8x16xbf16>, memref<16x8xf32>
    }
    scf.reduce
  } {attn.threads}
  return
}

// -----

// ... and not in a thread kernel, whose threads run different workgroups.
func.func private @warp_mma_in_thread_kernel(%lane: index)
    attributes {attn.kernel = "x", attn.tiling = {block_threads = 32 : i64}} {
  %c0 = arith.constant 0 : index
  %a = memref.alloca() : memref<16x16xf16>
  %b = memref.alloca() : memref<8x16xf16>
  %acc = memref.alloca() : memref<16x8xf32>
  // expected-error @below {{attn_kernel.warp_mma must be directly in a thread loop of a block kernel}}
  attn_kernel.warp_mma %a, %b, %acc rows(%c0) lane(%lane) n(8) k(16) {rhs_transposed}
      : memref<16x16xf16>, memref<8x16xf16>, memref<16x8xf32>
  return
}

// -----

// Shared buffers are laid out in bytes: their elements need a size.
func.func private @index_shared_buffer(%n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  // expected-error @below {{a shared buffer holds integers or floats (its size in bytes must be known), not 'index'}}
  %s = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<4xindex>
  return
}

// -----

// A thread reaches only its own slice of a register buffer (on the GPU it
// is an array of each thread's own)...
func.func private @registers_of_another_thread(%n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %r = memref.alloca() {attn.registers} : memref<32x2xf32>
  scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
    %next = arith.addi %t, %c1 : index
    // expected-error @below {{a register buffer may only be used through a thread's view of its own slice (memref.subview at the thread of the enclosing thread loop)}}
    %theirs = memref.subview %r[%next, 0] [1, 2] [1, 1]
        : memref<32x2xf32> to memref<2xf32, strided<[1], offset: ?>>
    scf.reduce
  } {attn.threads}
  return
}

// -----

// ... through a view, in a thread loop...
func.func private @registers_read_whole(%n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %c0 = arith.constant 0 : index
  %r = memref.alloca() {attn.registers} : memref<32x2xf32>
  // expected-error @below {{a register buffer may only be used through a thread's view of its own slice}}
  %x = memref.load %r[%c0, %c0] : memref<32x2xf32>
  return
}

// -----

// ... of a block kernel.
func.func private @registers_in_thread_kernel(%n: index)
    attributes {attn.kernel = "x", attn.tiling = {block_threads = 32 : i64}} {
  // expected-error @below {{register buffers are for block kernels (a thread kernel's values are its own already)}}
  %r = memref.alloca() {attn.registers} : memref<32x2xf32>
  return
}

// -----

// A warp's view of a register buffer, read by attn_kernel.warp_mma as lhs
// fragments, becomes each lane's own array on the GPU; the CPU reads the
// other lanes' from the buffer, so the loop must not write it.
func.func private @warp_fragments_written_in_loop(%v: memref<16x8xf32>)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 32 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  %p = memref.alloca() {attn.registers} : memref<32x2x4xf32>
  %o = memref.alloca() {attn.registers} : memref<32x1x4xf32>
  scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
    %lane = arith.remui %t, %c32 : index
    %w = arith.divui %t, %c32 : index
    %first = arith.muli %w, %c32 : index
    %warp = memref.subview %p[%first, 0, 0] [32, 2, 4] [1, 1, 1] : memref<32x2x4xf32> to memref<32x2x4xf32, strided<[8, 4, 1], offset: ?>>
    %own = memref.subview %o[%t, 0, 0] [1, 1, 4] [1, 1, 1] : memref<32x1x4xf32> to memref<1x4xf32, strided<[4, 1], offset: ?>>
    // expected-error @below {{'lhs' (the warp's fragments) is written in the same thread loop}}
    attn_kernel.warp_mma %warp, %v, %own rows(%c0) lane(%lane) n(8) k(16) {acc_fragment, lhs_fragment} : memref<32x2x4xf32, strided<[8, 4, 1], offset: ?>>, memref<16x8xf32>, memref<1x4xf32, strided<[4, 1], offset: ?>>
    %mine = memref.subview %p[%t, 0, 0] [1, 2, 4] [1, 1, 1] : memref<32x2x4xf32> to memref<2x4xf32, strided<[4, 1], offset: ?>>
    // expected-note @below {{written here}}
    memref.store %zero, %mine[%c0, %c0] : memref<2x4xf32, strided<[4, 1], offset: ?>>
    scf.reduce
  } {attn.threads}
  return
}

// -----

// A region split by roles: each role's loops hand on data through
// mbarriers alone; a block-wide barrier would wait for the threads of the
// other roles, which run another copy of the region.
func.func private @block_barrier_in_role(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 64 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  scf.execute_region no_inline {
    // expected-error @below {{a thread loop in a region split by roles must end with warp or mbarrier sync (a block-wide barrier would wait for the other roles' threads)}}
    scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
      scf.reduce
    } {attn.threads}
    scf.yield
  } {attn.by_roles}
  return
}

// -----

// Roles take disjoint threads.
func.func private @overlapping_roles(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 96 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  scf.execute_region no_inline {
    scf.parallel (%t) = (%c0) to (%c64) step (%c1) {
      scf.reduce
    } {attn.threads, attn.warp_sync}
    // expected-error @below {{the roles of a region split by roles take disjoint threads: [32, 64) overlaps [0, 64)}}
    scf.parallel (%t) = (%c32) to (%c64) step (%c1) {
      scf.reduce
    } {attn.threads, attn.mbarrier_sync}
    scf.yield
  } {attn.by_roles}
  return
}

// -----

// Each role runs what the region does outside thread loops: a store there
// would be made once per role.
func.func private @store_outside_roles(%a: memref<4xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 64 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %x = arith.constant 1.0 : f32
  scf.execute_region no_inline {
    // expected-error @below {{a region split by roles writes memory in thread loops alone (each role runs what is outside them), not in 'memref.store'}}
    memref.store %x, %a[%c0] : memref<4xf32>
    scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
      scf.reduce
    } {attn.threads, attn.warp_sync}
    scf.yield
  } {attn.by_roles}
  return
}

// -----

// A thread loop over part of the block takes whole warps.
func.func private @no_whole_warps(%a: memref<64xf32>, %n: index)
    attributes {attn.kernel = "x", attn.block_kernel,
                attn.tiling = {block_threads = 64 : i64}} {
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %c48 = arith.constant 48 : index
  // expected-error @below {{a thread loop must run with step 1 over [0, 64) or over whole warps of it (constant bounds, multiples of 32)}}
  scf.parallel (%t) = (%c32) to (%c48) step (%c1) {
    scf.reduce
  } {attn.threads}
  return
}
