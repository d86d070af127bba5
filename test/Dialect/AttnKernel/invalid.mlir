// RUN: attn-opt %s -split-input-file -verify-diagnostics

func.func @dispatch_unknown_kernel(%b: memref<?xf32>, %n: index) {
  // expected-error @+1 {{'attn_kernel.dispatch' op kernel @missing is not a function in this module}}
  attn_kernel.dispatch @missing workgroups(%n) bindings(%b) : memref<?xf32>
  return
}

// -----

func.func private @two_buffers(%a: memref<?xf32>, %b: memref<?xf32>, %wg: index)

func.func @dispatch_arity(%b: memref<?xf32>, %n: index) {
  // expected-error @+1 {{'attn_kernel.dispatch' op kernel @two_buffers takes 3 arguments, expected one per binding (1) plus the workgroup id}}
  attn_kernel.dispatch @two_buffers workgroups(%n) bindings(%b) : memref<?xf32>
  return
}

// -----

func.func private @f32_buffer(%a: memref<?xf32>, %wg: index)

func.func @dispatch_binding_type(%b: memref<?xi32>, %n: index) {
  // expected-error @+1 {{'attn_kernel.dispatch' op binding #0 has type 'memref<?xi32>' but kernel @f32_buffer takes 'memref<?xf32>'}}
  attn_kernel.dispatch @f32_buffer workgroups(%n) bindings(%b) : memref<?xi32>
  return
}

// -----

func.func private @no_workgroup(%a: memref<?xf32>, %wg: i32)

func.func @dispatch_workgroup_type(%b: memref<?xf32>, %n: index) {
  // expected-error @+1 {{'attn_kernel.dispatch' op kernel @no_workgroup must take the workgroup id (index) last, got 'i32'}}
  attn_kernel.dispatch @no_workgroup workgroups(%n) bindings(%b) : memref<?xf32>
  return
}

// -----

func.func @warp_mma_dynamic(%a: memref<?x16xbf16>, %b: memref<8x16xbf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'attn_kernel.warp_mma' op 'lhs' must be a row-major memref of static shape (or a view of its rows), got 'memref<?x16xbf16>'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed} : memref<?x16xbf16>, memref<8x16xbf16>, memref<16x8xf32>
  return
}

// -----

// A view's rows must be contiguous: every second column is not an operand.
func.func @warp_mma_strided_columns(%a: memref<16x16xbf16>, %b: memref<8x32xbf16>, %c: memref<16x8xf32>, %i: index) {
  %v = memref.subview %b[0, 0] [8, 16] [1, 2] : memref<8x32xbf16> to memref<8x16xbf16, strided<[32, 2]>>
  // expected-error @+1 {{'rhs' must be a row-major memref of static shape (or a view of its rows), got 'memref<8x16xbf16, strided<[32, 2]>>'}}
  attn_kernel.warp_mma %a, %v, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed} : memref<16x16xbf16>, memref<8x16xbf16, strided<[32, 2]>>, memref<16x8xf32>
  return
}

// -----

func.func @warp_mma_mixed(%a: memref<16x16xbf16>, %b: memref<8x16xf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'rhs' elements must match 'lhs' ('bf16'), got 'f16'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed} : memref<16x16xbf16>, memref<8x16xf16>, memref<16x8xf32>
  return
}

// -----

func.func @warp_mma_int(%a: memref<16x16xi8>, %b: memref<8x16xi8>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'lhs' elements must be f16, bf16 or f32, got 'i8'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed} : memref<16x16xi8>, memref<8x16xi8>, memref<16x8xf32>
  return
}

// -----

func.func @warp_mma_acc(%a: memref<16x16xf16>, %b: memref<8x16xf16>, %c: memref<16x8xf16>, %i: index) {
  // expected-error @+1 {{'acc' elements must be f32, got 'f16'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed} : memref<16x16xf16>, memref<8x16xf16>, memref<16x8xf16>
  return
}

// -----

func.func @warp_mma_reduction(%a: memref<16x24xf16>, %b: memref<8x24xf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{k must be a positive multiple of 16, got 24}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(24) {rhs_transposed} : memref<16x24xf16>, memref<8x24xf16>, memref<16x8xf32>
  return
}

// -----

func.func @warp_mma_columns(%a: memref<16x16xf16>, %b: memref<12x16xf16>, %c: memref<16x12xf32>, %i: index) {
  // expected-error @+1 {{n must be a positive multiple of 8, got 12}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(12) k(16) {rhs_transposed} : memref<16x16xf16>, memref<12x16xf16>, memref<16x12xf32>
  return
}

// -----

func.func @warp_mma_rhs_shape(%a: memref<16x16xf16>, %b: memref<8x16xf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'rhs ([k, n])' [8, 16] is smaller than the [16, 8] it must hold}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) : memref<16x16xf16>, memref<8x16xf16>, memref<16x8xf32>
  return
}

// -----

func.func @warp_mma_rows(%a: memref<8x16xf16>, %b: memref<8x16xf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'lhs' [8, 16] is smaller than the [16, 16] it must hold}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed} : memref<8x16xf16>, memref<8x16xf16>, memref<16x8xf32>
  return
}

// -----

func.func @warp_mma_acc_narrow(%a: memref<16x16xf16>, %b: memref<16x16xf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'acc' [16, 8] is smaller than the [16, 16] it must hold}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(16) k(16) {rhs_transposed} : memref<16x16xf16>, memref<16x16xf16>, memref<16x8xf32>
  return
}

// -----

// P as fragments: the warp's 32 lanes', each 4 elements per block of 8 of
// the k columns, per row tile.
func.func @warp_mma_lhs_fragments_shape(%p: memref<32x4x4xf32>, %b: memref<16x8xf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'lhs' (fragments) must be f32 [32, 2, 4] (each lane's 4 elements per 8 of the 16 columns, per row tile) or a lane's own [2, 4], got 'memref<32x4x4xf32>'}}
  attn_kernel.warp_mma %p, %b, %c rows(%i) lane(%i) n(8) k(16) {lhs_fragment} : memref<32x4x4xf32>, memref<16x8xf16>, memref<16x8xf32>
  return
}

// -----

// Fragments are f32 (the tensor cores round them to rhs's type).
func.func @warp_mma_lhs_fragments_type(%p: memref<2x4xf16>, %b: memref<16x8xf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'lhs' (fragments) must be f32 [32, 2, 4]}}
  attn_kernel.warp_mma %p, %b, %c rows(%i) lane(%i) n(8) k(16) {lhs_fragment} : memref<2x4xf16>, memref<16x8xf16>, memref<16x8xf32>
  return
}

// -----

// With fragments, rhs sets the product's type.
func.func @warp_mma_lhs_fragments_rhs(%p: memref<2x4xf32>, %b: memref<16x8xi8>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'rhs' elements must be f16, bf16 or f32, got 'i8'}}
  attn_kernel.warp_mma %p, %b, %c rows(%i) lane(%i) n(8) k(16) {lhs_fragment} : memref<2x4xf32>, memref<16x8xi8>, memref<16x8xf32>
  return
}

// -----

// A lane's fragment holds 4 elements per block of 8 columns, no more.
func.func @warp_mma_fragment_shape(%a: memref<16x16xf16>, %b: memref<16x16xf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'acc' (a fragment) must be [2, 4] (4 elements per 8 of the 16 columns, per row tile), got 'memref<16x8xf32>'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(16) k(16) {rhs_transposed, acc_fragment} : memref<16x16xf16>, memref<16x16xf16>, memref<16x8xf32>
  return
}

// -----

func.func @warp_mma_fragment_type(%a: memref<16x16xf16>, %b: memref<16x16xf16>, %c: memref<2x4xf16>, %i: index) {
  // expected-error @+1 {{'acc' elements must be f32, got 'f16'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(16) k(16) {rhs_transposed, acc_fragment} : memref<16x16xf16>, memref<16x16xf16>, memref<2x4xf16>
  return
}

// -----

func.func @async_copy_bytes(%a: memref<?x128xbf16>, %s: memref<64x136xbf16>, %i: index, %v: i1) {
  // expected-error @+1 {{'attn_kernel.async_copy' op copies 4, 8 or 16 bytes, got 3 elements of 'bf16'}}
  attn_kernel.async_copy %a[%i, %i], %s[%i, %i] if(%v) elements(3) : memref<?x128xbf16>, memref<64x136xbf16>
  return
}

// -----

func.func @async_copy_mixed(%a: memref<?x128xbf16>, %s: memref<64x136xf16>, %i: index, %v: i1) {
  // expected-error @+1 {{'target' elements must match 'source' ('bf16'), got 'f16'}}
  attn_kernel.async_copy %a[%i, %i], %s[%i, %i] if(%v) elements(8) : memref<?x128xbf16>, memref<64x136xf16>
  return
}

// -----

func.func @async_copy_rank(%a: memref<?x128xbf16>, %s: memref<64x136xbf16>, %i: index, %v: i1) {
  // expected-error @+1 {{'source' has rank 2 but 1 indices}}
  attn_kernel.async_copy %a[%i], %s[%i, %i] if(%v) elements(8) : memref<?x128xbf16>, memref<64x136xbf16>
  return
}

// -----

func.func @async_copy_strided(%a: memref<?x128xbf16>, %s: memref<64x136xbf16, strided<[1, 64]>>, %i: index, %v: i1) {
  // expected-error @+1 {{'target' must be contiguous along its last dimension, got 'memref<64x136xbf16, strided<[1, 64]>>'}}
  attn_kernel.async_copy %a[%i, %i], %s[%i, %i] if(%v) elements(8) : memref<?x128xbf16>, memref<64x136xbf16, strided<[1, 64]>>
  return
}

// -----

func.func @async_copy_short_rows(%a: memref<?x128xbf16>, %s: memref<64x4xbf16>, %i: index, %v: i1) {
  // expected-error @+1 {{'target' rows of 4 elements cannot hold 8}}
  attn_kernel.async_copy %a[%i, %i], %s[%i, %i] if(%v) elements(8) : memref<?x128xbf16>, memref<64x4xbf16>
  return
}

// -----

func.func @warp_mma_row_tiles_fragment(%a: memref<32x16xbf16>, %b: memref<16x16xbf16>, %c: memref<2x4xf32>, %i: index) {
  // expected-error @+1 {{'acc' (a fragment) must be [4, 4] (4 elements per 8 of the 16 columns, per row tile), got 'memref<2x4xf32>'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(16) k(16) {rhs_transposed, acc_fragment, row_tiles = 2 : i64} : memref<32x16xbf16>, memref<16x16xbf16>, memref<2x4xf32>
  return
}

// -----

func.func @warp_mma_row_tiles_lhs(%a: memref<16x16xbf16>, %b: memref<16x16xbf16>, %c: memref<4x4xf32>, %i: index) {
  // expected-error @+1 {{'lhs' [16, 16] is smaller than the [32, 16] it must hold}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(16) k(16) {rhs_transposed, acc_fragment, row_tiles = 2 : i64} : memref<16x16xbf16>, memref<16x16xbf16>, memref<4x4xf32>
  return
}

// -----

func.func @warp_mma_row_tiles_zero(%a: memref<16x16xbf16>, %b: memref<16x16xbf16>, %c: memref<16x16xf32>, %i: index) {
  // expected-error @+1 {{row_tiles must be positive, got 0}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(16) k(16) {rhs_transposed, row_tiles = 0 : i64} : memref<16x16xbf16>, memref<16x16xbf16>, memref<16x16xf32>
  return
}

// -----

func.func @warp_mma_3d(%a: memref<2x8x16xbf16>, %b: memref<8x16xbf16>, %c: memref<16x8xf32>, %i: index) {
  // expected-error @+1 {{'lhs' must be 2-D, got 'memref<2x8x16xbf16>'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed} : memref<2x8x16xbf16>, memref<8x16xbf16>, memref<16x8xf32>
  return
}

// -----

// A warpgroup product's shared operands are core-matrix tiled.
func.func @warpgroup_untiled(%a: memref<64x16xbf16>, %b: memref<1x2x8x8xbf16>, %c: memref<1x4xf32>, %i: index) {
  // expected-error @+1 {{'lhs' of a warpgroup product must be core-matrix tiled, [r / 8, c / 8, 8, 8], got 'memref<64x16xbf16>'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed, acc_fragment, warpgroup} : memref<64x16xbf16>, memref<1x2x8x8xbf16>, memref<1x4xf32>
  return
}

// -----

func.func @warpgroup_f32(%a: memref<8x2x8x8xf32>, %b: memref<1x2x8x8xf32>, %c: memref<1x4xf32>, %i: index) {
  // expected-error @+1 {{a warpgroup product takes f16 or bf16 operands, got 'f32'}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed, acc_fragment, warpgroup} : memref<8x2x8x8xf32>, memref<1x2x8x8xf32>, memref<1x4xf32>
  return
}

// -----

func.func @warpgroup_shared_acc(%a: memref<8x2x8x8xbf16>, %b: memref<1x2x8x8xbf16>, %c: memref<1x1x8x8xf32>, %i: index) {
  // expected-error @+1 {{a warpgroup product accumulates into the lane's fragment (acc_fragment) of one row tile}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed, warpgroup} : memref<8x2x8x8xbf16>, memref<1x2x8x8xbf16>, memref<1x1x8x8xf32>
  return
}

// -----

func.func @warpgroup_wide(%a: memref<8x2x8x8xbf16>, %b: memref<33x2x8x8xbf16>, %c: memref<33x4xf32>, %i: index) {
  // expected-error @+1 {{a warpgroup product has at most 256 columns, got 264}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(264) k(16) {rhs_transposed, acc_fragment, warpgroup} : memref<8x2x8x8xbf16>, memref<33x2x8x8xbf16>, memref<33x4xf32>
  return
}

// -----

func.func @warpgroup_small_rhs(%a: memref<8x2x8x8xbf16>, %b: memref<2x1x8x8xbf16>, %c: memref<2x4xf32>, %i: index) {
  // expected-error @+1 {{'rhs ([k, n])' [16, 8] is smaller than the [16, 16] it must hold}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(16) k(16) {acc_fragment, warpgroup} : memref<8x2x8x8xbf16>, memref<2x1x8x8xbf16>, memref<2x4xf32>
  return
}

// -----

func.func @async_wait_negative() {
  // expected-error @+1 {{'attn_kernel.async_wait' op pending must not be negative, got -1}}
  attn_kernel.async_wait {pending = -1 : i64}
  return
}

// -----

// Only warpgroup products (wgmma) complete asynchronously.
func.func @async_warp(%a: memref<16x16xbf16>, %b: memref<8x16xbf16>, %c: memref<1x4xf32>, %i: index) {
  // expected-error @+1 {{only a warpgroup product may be async}}
  attn_kernel.warp_mma %a, %b, %c rows(%i) lane(%i) n(8) k(16) {rhs_transposed, acc_fragment, async} : memref<16x16xbf16>, memref<8x16xbf16>, memref<1x4xf32>
  return
}

// -----

func.func @negative_warpgroup_pending() {
  // expected-error @+1 {{'attn_kernel.warpgroup_wait' op pending must not be negative, got -2}}
  attn_kernel.warpgroup_wait {pending = -2 : i64}
  return
}

// -----

// An mbarrier is a 64-bit word of a 1-D buffer of them.
func.func @mbarrier_words(%bars: memref<2xi32>, %i: index) {
  // expected-error @+1 {{'attn_kernel.mbarrier_arrive' op 'barriers' must be a 1-D buffer of i64 (a word per barrier), got 'memref<2xi32>'}}
  attn_kernel.mbarrier_arrive %bars[%i] : memref<2xi32>
  return
}

// -----

func.func @mbarrier_rank(%bars: memref<2x2xi64>, %i: index) {
  // expected-error @+1 {{'attn_kernel.mbarrier_wait' op 'barriers' must be a 1-D buffer of i64 (a word per barrier), got 'memref<2x2xi64>'}}
  attn_kernel.mbarrier_wait %bars[%i] parity(%i) : memref<2x2xi64>
  return
}

// -----

// The GPU counts at most 2^20 - 1 arrivals a phase, and a phase needs one.
func.func @mbarrier_no_arrivals(%bars: memref<2xi64>, %i: index) {
  // expected-error @+1 {{'attn_kernel.mbarrier_init' op arrivals must be in [1, 1048575], got 0}}
  attn_kernel.mbarrier_init %bars[%i] arrivals(0) : memref<2xi64>
  return
}

// -----

func.func @mbarrier_too_many_arrivals(%bars: memref<2xi64>, %i: index) {
  // expected-error @+1 {{'attn_kernel.mbarrier_init' op arrivals must be in [1, 1048575], got 1048576}}
  attn_kernel.mbarrier_init %bars[%i] arrivals(1048576) : memref<2xi64>
  return
}

// -----

// cp.async.mbarrier.arrive announces no transaction bytes.
func.func @mbarrier_copies_and_bytes(%bars: memref<2xi64>, %i: index) {
  // expected-error @+1 {{'attn_kernel.mbarrier_arrive' op an arrival after copies cannot expect bytes as well}}
  attn_kernel.mbarrier_arrive %bars[%i] after_copies expect_bytes(%i) : memref<2xi64>
  return
}

// -----

// A bulk copy moves whole 16-byte pieces.
func.func @bulk_copy_bytes(%k: memref<?x128xbf16>, %ks: memref<64x136xbf16>, %bars: memref<2xi64>, %i: index) {
  // expected-error @+1 {{'attn_kernel.bulk_copy' op copies a positive multiple of 16 bytes, got 12 elements of 'bf16'}}
  attn_kernel.bulk_copy %k[%i, %i], %ks[%i, %i] elements(12) on(%bars[%i]) : memref<?x128xbf16>, memref<64x136xbf16>, memref<2xi64>
  return
}

// -----

func.func @bulk_copy_row(%k: memref<?x128xbf16>, %ks: memref<64x64xbf16>, %bars: memref<2xi64>, %i: index) {
  // expected-error @+1 {{'attn_kernel.bulk_copy' op 'target' rows of 64 elements cannot hold 128}}
  attn_kernel.bulk_copy %k[%i, %i], %ks[%i, %i] elements(128) on(%bars[%i]) : memref<?x128xbf16>, memref<64x64xbf16>, memref<2xi64>
  return
}

// -----

func.func @bulk_copy_barriers(%k: memref<?x128xbf16>, %ks: memref<64x136xbf16>, %bars: memref<2xi32>, %i: index) {
  // expected-error @+1 {{'attn_kernel.bulk_copy' op 'barriers' must be a 1-D buffer of i64 (a word per barrier), got 'memref<2xi32>'}}
  attn_kernel.bulk_copy %k[%i, %i], %ks[%i, %i] elements(128) on(%bars[%i]) : memref<?x128xbf16>, memref<64x136xbf16>, memref<2xi32>
  return
}
