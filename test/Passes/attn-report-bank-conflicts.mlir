// RUN: attn-opt %s -split-input-file -attn-report-bank-conflicts -verify-diagnostics -o /dev/null

// A warp reading a column of a [32, 32] f32 tile: every lane's word in
// the same bank (32 wavefronts); the rows padded to 33 words, one each.
// Lanes reading the same word share it; 16-byte pieces of one row are
// served 8 lanes a phase, 4 wavefronts.
// expected-remark @below {{columns: 2 of 5 shared accesses take more wavefronts than they need (the worst 32.0x), 0 not evaluated; 6.36x the fewest wavefronts in all, weighted by trips}}
func.func @columns(%x: f32, %v: vector<4xf32>, %block: index) attributes {attn.block_kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %tile = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x32xf32>
  %padded = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x33xf32>
  %rows = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x128xf32>
  scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
    // expected-remark @below {{shared store of 4 bytes a thread into 'memref<32x32xf32>': 32 wavefronts in the block's warps, 1 at the least}}
    memref.store %x, %tile[%t, %c0] : memref<32x32xf32>
    memref.store %x, %padded[%t, %c0] : memref<32x33xf32>
    %same = memref.load %tile[%c0, %c0] : memref<32x32xf32>
    %piece = arith.muli %t, %c4 : index
    vector.store %v, %rows[%c0, %piece] : memref<32x128xf32>, vector<4xf32>
    // 16-byte pieces 128 floats apart: 8 a phase in one bank group.
    // expected-remark @below {{shared load of 16 bytes a thread into 'memref<32x128xf32>': 32 wavefronts in the block's warps, 4 at the least}}
    %w = vector.load %rows[%t, %c0] : memref<32x128xf32>, vector<4xf32>
    scf.reduce
  } {attn.threads}
  return
}

// -----

// Threads that an scf.if or a loop's bounds leave out take no part, nor do
// those whose address would fall outside the buffer (a bound from outside
// the thread loop); an address from a value the thread loads cannot be
// evaluated (the load of that value is one, every thread the same word).
// expected-remark @below {{guarded: 0 of 3 shared accesses take more wavefronts than they need, 1 not evaluated; 1.00x the fewest wavefronts in all, weighted by trips}}
func.func @guarded(%x: f32, %n: index, %block: index) attributes {attn.block_kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %c1024 = arith.constant 1024 : index
  %tile = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x32xf32>
  %where = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<64xindex>
  scf.parallel (%t) = (%c0) to (%c64) step (%c1) {
    // One lane of each warp: no conflict.
    %first = arith.remui %t, %c64 : index
    %isFirst = arith.cmpi eq, %first, %c0 : index
    scf.if %isFirst {
      memref.store %x, %tile[%c1, %c0] : memref<32x32xf32>
    }
    // Threads below %n, taken as 0: those past the 32 rows are out.
    scf.for %i = %t to %n step %c1024 {
      memref.store %x, %tile[%i, %i] : memref<32x32xf32>
    }
    %at = memref.load %where[%c0] : memref<64xindex>
    memref.store %x, %tile[%at, %t] : memref<32x32xf32>
    scf.reduce
  } {attn.threads}
  return
}

// -----

// Each access counts as often as the loops around it in its thread loop
// run: a column store 4 times in a loop (32 wavefronts of 1 each time)
// weighs 4 times a row store outside it.
// expected-remark @below {{looped: 1 of 2 shared accesses take more wavefronts than they need (the worst 32.0x), 0 not evaluated; 25.80x the fewest wavefronts in all, weighted by trips}}
func.func @looped(%x: f32, %block: index) attributes {attn.block_kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %tile = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x32xf32>
  scf.parallel (%t) = (%c0) to (%c32) step (%c1) {
    scf.for %i = %c0 to %c4 step %c1 {
      // expected-remark @below {{shared store of 4 bytes a thread into 'memref<32x32xf32>': 32 wavefronts in the block's warps, 1 at the least, 4 times a thread loop}}
      memref.store %x, %tile[%t, %i] : memref<32x32xf32>
    }
    memref.store %x, %tile[%c0, %t] : memref<32x32xf32>
    scf.reduce
  } {attn.threads}
  return
}
