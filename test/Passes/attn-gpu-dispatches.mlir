// RUN: attn-opt %s -attn-gpu-dispatches -canonicalize -cse | FileCheck %s

// The CUDA host program is the CPU one's shape (same signature, symbolic
// shapes, decode chosen from the run-time Lq). Prefill is the flash block
// kernel: a block per (batch, head, 64 query rows), 4 warps. Decode is the
// same kernel over key splits (FlashDecoding): a block per (batch, kv head,
// tile of the group's 4 heads x up to 8 rows = 32 rows, 2 warps, split of
// 256 keys) writing partials, its k and v in two stages of 32-key tiles;
// the block that finishes a tile's last split merges the tile's rows.

// CHECK-LABEL: func.func private @layer__flash0
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "flash"
// CHECK-SAME:    attn.tiling = {block_threads = 128 : i64, decode_max_queries = 8 : i64, key_tile = 64 : i64, query_tile = 64 : i64, split_keys = 256 : i64}
// CHECK:         %[[C:cst[_0-9]*]] = arith.constant 0.180336878 : f32
// Shared: the q, k and v tiles (rows padded by 16 bytes) and the exchange
// of a row's 4 lanes. Registers, [threads, ...] (a thread's own slice on
// the GPU): each lane's fragments of the scores (64 keys; then P) and the
// output (Dv = 64), and its two rows' max and sum.
// CHECK-COUNT-3: memref.alloca() {alignment = 16 : i64, attn.shared} : memref<64x68xf32>
// CHECK-NOT:     memref.alloca() {alignment = 16 : i64, attn.shared} : memref<64x68xf32>
// CHECK:         %[[QUAD:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<64x4xf32>
// CHECK:         %[[S:.+]] = memref.alloca() {alignment = 16 : i64, attn.registers} : memref<128x8x4xf32>
// CHECK:         %[[O:.+]] = memref.alloca() {alignment = 16 : i64, attn.registers} : memref<128x8x4xf32>
// CHECK:         %[[M:.+]] = memref.alloca() {alignment = 16 : i64, attn.registers} : memref<128x2xf32>
// CHECK:         %[[L:.+]] = memref.alloca() {alignment = 16 : i64, attn.registers} : memref<128x2xf32>
// The block's query tile is the workgroup's fastest part, the last tile
// first (under a causal mask, the blocks that see the most keys start
// first).
// CHECK:         %[[TILES:.+]] = arith.ceildivui %{{.+}}, %c64 : index
// CHECK:         %[[NTH:.+]] = arith.remui %arg5, %[[TILES]] : index
// CHECK:         %[[LAST:.+]] = arith.subi %[[TILES]], %c1 : index
// CHECK:         %[[TILE:.+]] = arith.subi %[[LAST]], %[[NTH]] : index
// CHECK:         arith.muli %[[TILE]], %c64 : index
// The q tile is staged once, 16 bytes a copy (4 f32 of a 64-channel row),
// zero past Lq: 64 rows x 16 copies are 8 of each thread's, unrolled, its
// column fixed (thread % 16) and its row stepping by 128 / 16 = 8. Each
// thread clears its registers, through its own slice.
// CHECK:         scf.parallel (%[[T0:.+]]) = (%c0) to (%c128) step (%c1) {
// CHECK-NOT:       scf.for
// CHECK:           %[[QROW:.+]] = arith.divui %[[T0]], %c16 : index
// CHECK:           %[[QPIECE:.+]] = arith.remui %[[T0]], %c16 : index
// CHECK:           %[[QCOL:.+]] = arith.muli %[[QPIECE]], %c4 : index
// CHECK:           attn_kernel.async_copy %arg0[{{.*}}, %[[QCOL]]], %{{.*}}[%[[QROW]], %[[QCOL]]] if(%{{.*}}) elements(4) : memref<?x8x?x64xf32>, memref<64x68xf32>
// CHECK:           %[[QROW1:.+]] = arith.addi %[[QROW]], %c8 : index
// CHECK:           attn_kernel.async_copy %arg0[{{.*}}, %[[QCOL]]], %{{.*}}[%[[QROW1]], %[[QCOL]]] if(%{{.*}}) elements(4)
// CHECK-COUNT-6:   attn_kernel.async_copy %arg0
// CHECK-NOT:       attn_kernel.async_copy
// CHECK:           %[[O0:.+]] = memref.subview %[[O]][%[[T0]], 0, 0] [1, 8, 4] [1, 1, 1] : memref<128x8x4xf32> to memref<8x4xf32, strided<[4, 1], offset: ?>>
// CHECK-COUNT-32:  memref.store %cst{{.*}}, %[[O0]][%c{{[0-7]}}, %c{{[0-3]}}]
// CHECK:           memref.subview %[[M]][%[[T0]], 0] [1, 2] [1, 1] : memref<128x2xf32> to memref<2xf32, strided<[1], offset: ?>>
// CHECK:         } {attn.threads}
// The causal mask ends the key tiles at the last row's position.
// CHECK:         arith.minsi %[[LK:dim_[0-9]+]], %{{.+}} : index
// CHECK:         %[[KEY_TILES:.+]] = arith.ceildivui %{{.+}}, %c64 : index
// The first key tile's k (16 bytes a copy, all of a thread's in flight
// before its wait; q's too): a tile whose keys all precede the range's end
// copies unpredicated, else each row checks its key; only a tile the
// block walks (there may be none) counts.
// CHECK:         scf.parallel
// CHECK-NOT:       scf.for
// CHECK:           %[[FULL:.+]] = arith.cmpi uge, %{{.+}}, %c64 : index
// CHECK-NEXT:      %[[WALKED:.+]] = arith.cmpi ugt, %[[KEY_TILES]], %c0 : index
// CHECK-NEXT:      %[[WHOLE:.+]] = arith.andi %[[WALKED]], %[[FULL]] : i1
// CHECK-NEXT:      scf.if %[[WHOLE]] {
// CHECK-COUNT-8:     attn_kernel.async_copy %arg1[{{.*}}], %{{.*}}[{{.*}}] if(%true) elements(4) : memref<?x2x?x64xf32>, memref<64x68xf32>
// CHECK-NEXT:      } else {
// CHECK-COUNT-8:     attn_kernel.async_copy %arg1[{{.*}}], %{{.*}}[{{.*}}] if(%{{[0-9]+}}) elements(4) : memref<?x2x?x64xf32>, memref<64x68xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      attn_kernel.async_wait
// CHECK:         } {attn.threads}
// CHECK:         scf.for %{{.+}} = %c0 to %[[KEY_TILES]] step %c1 {
// A key tile inside the keys of every row of the block (here: ending by
// the first row's position) needs no mask: the whole block takes one
// branch or the other.
// CHECK:           %[[TILE_END:.+]] = arith.addi %{{.+}}, %c64 : index
// CHECK:           %[[BEFORE_END:.+]] = arith.cmpi sle, %[[TILE_END]], %{{.+}} : index
// CHECK:           %[[INTERIOR:.+]] = arith.andi %{{.+}}, %[[BEFORE_END]] : i1
// Scores into the lanes' fragments, left as they are inside the mask,
// masked on its edge (16 per row half: 8 blocks x 2 columns); the lane's
// part of each row's max to the exchange, whose rows only the warp's own
// lanes read: the loop ends with a wait of the warp alone
// (attn.warp_sync).
// CHECK:           scf.parallel (%[[T1:.+]]) = (%c0) to (%c128) step (%c1) {
// CHECK:             %[[S1:.+]] = memref.subview %[[S]][%[[T1]], 0, 0]
// CHECK:             attn_kernel.warp_mma %{{.+}}, %{{.+}}, %[[S1]] rows(%{{.+}}) lane(%{{.+}}) n(64) k(64) {acc_fragment, rhs_transposed}
// CHECK:             %[[MAXES:.+]]:2 = scf.if %[[INTERIOR]] -> (f32, f32) {
// CHECK-NOT:           memref.store
// CHECK-NOT:           arith.select
// CHECK:               scf.yield
// CHECK-NEXT:        } else {
// CHECK-COUNT-16:      arith.select %{{.+}}, %{{.+}}, %cst{{.*}} : f32
// CHECK-COUNT-16:      arith.select %{{.+}}, %{{.+}}, %cst{{.*}} : f32
// CHECK:               scf.yield
// CHECK-NEXT:        }
// CHECK:             memref.store %[[MAXES]]#0, %[[QUAD]]
// CHECK:             memref.store %[[MAXES]]#1, %[[QUAD]]
// CHECK:           } {attn.threads, attn.warp_sync}
// The update, with the tile's v on its way: a row's max from its 4 lanes,
// then P = 2^(c s - c m), c = scale log2(e) = log2(e) / 8, one fma and one
// exp2 an element, and the rescaling; then the wait for v.
// CHECK:           scf.parallel
// CHECK:             attn_kernel.async_copy %arg2[{{.*}}], %{{.*}}[{{.*}}] if(%{{.*}}) elements(4) : memref<?x2x?x64xf32>, memref<64x68xf32>
// The output fragment (2 rows x 16 elements) is rescaled only when the max
// of one of the lane's 2 rows changed.
// CHECK-COUNT-4:     memref.load %[[QUAD]]
// CHECK:             %[[CHANGED0:.+]] = arith.cmpf une
// CHECK:             math.exp2
// CHECK:             %[[P_EXPONENT:.+]] = math.fma %{{.+}}, %[[C]], %{{.+}} : f32
// CHECK-NEXT:        math.exp2 %[[P_EXPONENT]] : f32
// CHECK:             %[[CHANGED1:.+]] = arith.cmpf une
// CHECK:             %[[ANY:.+]] = arith.ori %[[CHANGED0]], %[[CHANGED1]] : i1
// CHECK-NEXT:        scf.if %[[ANY]] {
// CHECK-COUNT-32:      arith.mulf
// CHECK-NEXT:          memref.store
// CHECK-NEXT:        }
// CHECK-NEXT:        attn_kernel.async_wait
// CHECK:           } {attn.threads}
// P v, P from the warp's fragments (those of the lane's warp, [(thread /
// 32) 32, + 32)), the next tile's k (if there is one) on its way meanwhile.
// CHECK:           scf.parallel (%[[T3:.+]]) = (%c0) to (%c128) step (%c1) {
// CHECK:             %[[WARP3:.+]] = arith.divui %[[T3]], %c32 : index
// CHECK:             %[[MORE:.+]] = arith.cmpi ult, %{{.+}}, %[[KEY_TILES]] : index
// CHECK:             scf.if %[[MORE]] {
// CHECK:               attn_kernel.async_copy %arg1
// CHECK:             %[[O3:.+]] = memref.subview %[[O]][%[[T3]], 0, 0]
// CHECK:             %[[FIRST3:.+]] = arith.muli %[[WARP3]], %c32 : index
// CHECK:             %[[P3:.+]] = memref.subview %[[S]][%[[FIRST3]], 0, 0] [32, 8, 4] [1, 1, 1]
// CHECK:             attn_kernel.warp_mma %[[P3]], %{{.+}}, %[[O3]] rows(%{{.+}}) lane(%{{.+}}) n(64) k(64) {acc_fragment, accumulate, lhs_fragment}
// CHECK-NEXT:        attn_kernel.async_wait
// CHECK:           } {attn.threads}
// CHECK:         }
// The lanes' parts of each row's sum, exchanged (within the warp); then
// o = acc / l.
// CHECK:         memref.store %{{.+}}, %[[QUAD]]
// CHECK:         } {attn.threads, attn.warp_sync}
// CHECK:         scf.parallel
// CHECK-COUNT-4:   memref.load %[[QUAD]]
// The gate runs in the epilogue.
// CHECK:         math.exp
// CHECK:         arith.divf
// CHECK:         } {attn.threads}
// CHECK-NOT:     vector.
// CHECK-LABEL: func.func private @layer__flash_decode1
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "flash_decode"
// CHECK-SAME:    attn.tiling = {block_threads = 64 : i64, decode_max_queries = 8 : i64, key_tile = 32 : i64, query_tile = 32 : i64, split_keys = 256 : i64}
// The q tile, then k and v of stage 0 and of stage 1 (32 keys each).
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x68xf32>
// CHECK-COUNT-4: memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x68xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.registers} : memref<64x4x4xf32>
// Workgroup order (batch, kv head, row tile, split), the split fastest; the
// rows are the group's (head, query row) pairs: ceil(4 Lq / 32) tiles.
// CHECK:         %[[PACKED:.+]] = arith.muli %[[LQ:dim]], %c4 : index
// CHECK:         %[[ROW_TILES:.+]] = arith.ceildivui %[[PACKED]], %c32 : index
// CHECK:         %[[SPLIT:.+]] = arith.remui %arg8, %[[SPLITS:.+]] : index
// CHECK:         %[[REST:.+]] = arith.divui %arg8, %[[SPLITS]] : index
// CHECK:         arith.remui %[[REST]], %[[ROW_TILES]] : index
// The splits share the keys in whole 32-key tiles: split s takes
// [s L, min(Lk, (s + 1) L)) for L = ceil(ceil(Lk / S) / 32) * 32.
// CHECK:         %[[PER_SPLIT:.+]] = arith.ceildivui %[[LK:dim_[0-9]+]], %[[SPLITS]] : index
// CHECK:         %[[TILES_PER_SPLIT:.+]] = arith.ceildivui %[[PER_SPLIT]], %c32 : index
// CHECK:         %[[LENGTH:.+]] = arith.muli %[[TILES_PER_SPLIT]], %c32 : index
// CHECK:         %[[START:.+]] = arith.muli %[[SPLIT]], %[[LENGTH]] : index
// CHECK:         arith.minsi %[[LK]], %[[START]] : index
// A row's head and query row: kv head * 4 + packed / Lq, packed % Lq.
// CHECK:         scf.parallel
// CHECK:           arith.divui %{{.+}}, %[[LQ]] : index
// CHECK:           arith.muli %{{.+}}, %c4 : index
// CHECK:           arith.remui %{{.+}}, %[[LQ]] : index
// CHECK:             attn_kernel.async_copy %arg0
// CHECK:         } {attn.threads}
// The split's first tile, k and v, as a group of copies of its own (a
// wait with one group pending); then the tiles two at a time, one per
// stage: tile j + 1's k and v copied into the other stage's buffers, a
// wait for all but that group (tile j's), then tile j's products from
// its stage's buffers (P from the warp's fragments).
// CHECK:         attn_kernel.async_copy %arg1{{.+}}, %[[K0:alloca_[0-9]+]]
// CHECK:         attn_kernel.async_copy %arg2{{.+}}, %[[V0:alloca_[0-9]+]]
// CHECK:         attn_kernel.async_wait {pending = 1 : i64}
// CHECK:         scf.for
// CHECK:           attn_kernel.async_copy %arg1{{.+}}, %[[K1:alloca_[0-9]+]]
// CHECK:           attn_kernel.async_copy %arg2{{.+}}, %[[V1:alloca_[0-9]+]]
// CHECK:           attn_kernel.async_wait {pending = 1 : i64}
// CHECK:           attn_kernel.warp_mma %{{.+}}, %[[K0]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(32) k(64) {acc_fragment, rhs_transposed}
// CHECK:           attn_kernel.warp_mma %{{.+}}, %[[V0]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(64) k(32) {acc_fragment, accumulate, lhs_fragment}
// CHECK:           attn_kernel.async_copy %arg1{{.+}}, %[[K0]]
// CHECK:           attn_kernel.async_copy %arg2{{.+}}, %[[V0]]
// CHECK:           attn_kernel.async_wait {pending = 1 : i64}
// CHECK:           attn_kernel.warp_mma %{{.+}}, %[[K1]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(32) k(64) {acc_fragment, rhs_transposed}
// CHECK:           attn_kernel.warp_mma %{{.+}}, %[[V1]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(64) k(32) {acc_fragment, accumulate, lhs_fragment}
// The partials, ungated: o at [batch, head, row, split], and lse.
// CHECK-NOT:     math.exp
// CHECK:         memref.store %{{.+}}, %arg3[%{{.+}}, %{{.+}}, %{{.+}}, %[[SPLIT]], %{{.+}}]
// CHECK:         memref.store %{{.+}}, %arg4[%{{.+}}, %{{.+}}, %{{.+}}, %[[SPLIT]]]
// Every thread fences its partials; after the barrier one thread counts
// the split done on its tile's counter (%arg7, at workgroup / splits);
// the block whose count is the tile's last fences again and merges each
// (row, feature) of the tile into o (%arg6), gated.
// CHECK:         } {attn.threads}
// CHECK:         attn_kernel.device_fence
// CHECK:         } {attn.threads}
// CHECK:         %[[DONE:.+]] = memref.atomic_rmw addi %c1_i32, %arg7[%[[REST]]] : (i32, memref<?xi32>) -> i32
// CHECK:         memref.store %{{.+}}, %[[LAST:alloca_[0-9]+]][%c0] : memref<1xi32>
// CHECK:         } {attn.threads}
// CHECK:         %[[IS_LAST:.+]] = memref.load %[[LAST]][%c0] : memref<1xi32>
// CHECK:         %[[MERGES:.+]] = arith.cmpi ne, %[[IS_LAST]], %c0_i32 : i32
// CHECK:         scf.if %[[MERGES]] {
// CHECK:           attn_kernel.device_fence
// CHECK:           } {attn.threads}
// CHECK:           memref.load %arg4
// CHECK:           memref.load %arg3
// CHECK:           math.exp
// CHECK:           memref.store %{{.+}}, %arg6
// CHECK:           } {attn.threads}
// CHECK:         }
// CHECK-NOT:     attn.threads
// CHECK:         return
// The counters' zeroing, a thread per tile.
// CHECK-LABEL: func.func private @layer__zero2
// CHECK-SAME:    attn.kernel = "zero"
// CHECK:         memref.store %c0_i32, %arg0[%arg1] : memref<?xi32>
// CHECK-LABEL: func.func @layer(
// CHECK-SAME:    %[[Q:[a-z0-9]+]]: memref<?x8x?x64xf32> {attn.name = "q", attn.shape = ["B", 8, "Lq", 64]}
// CHECK-SAME:    %[[K:[a-z0-9]+]]: memref<?x2x?x64xf32> {attn.shape = ["B", 2, "Lk", 64]}
// CHECK-SAME:    attributes {attn.entry, attn.num_inputs = 4 : i64}
// CHECK:         %[[LQ:.+]] = memref.dim %[[Q]], %c2
// CHECK:         %[[LK:.+]] = memref.dim %[[K]], %c2
// CHECK:         %[[DECODE:.+]] = arith.cmpi ule, %[[LQ]], %c8
// Decode splits: one per 256 keys and at least one (without keys, its
// merge writes o's rows), more (down to one 32-key tile each) while the
// B x Hkv x row tiles blocks are fewer than the workers (on a GPU, 4
// blocks per multiprocessor).
// CHECK:         %[[MOST:.+]] = arith.ceildivui %[[LK]], %c32 : index
// CHECK:         %[[PER256:.+]] = arith.ceildivui %[[LK]], %c256
// CHECK:         %[[UNSPLIT:.+]] = arith.maxsi %{{.+}}, %c1 : index
// CHECK-NEXT:    %[[WORKERS:.+]] = attn_kernel.worker_count : index
// CHECK-NEXT:    %[[FILLING:.+]] = arith.ceildivui %[[WORKERS]], %[[UNSPLIT]] : index
// CHECK-NEXT:    %[[FILL:.+]] = arith.minsi %[[FILLING]], %[[MOST]] : index
// CHECK-NEXT:    %[[LEAST:.+]] = arith.maxsi %[[PER256]], %c1 : index
// CHECK-NEXT:    %[[SPLITS:.+]] = arith.maxsi %[[LEAST]], %[[FILL]] : index
// CHECK-NEXT:    arith.select %[[DECODE]], %[[SPLITS]], %c0 : index
// Then B x Hkv x row tiles counters, zeroed before the split kernel, which
// takes them after o.
// CHECK:         %[[COUNTERS:.+]] = memref.alloc(%[[TILES:.+]]) : memref<?xi32>
// CHECK:         attn_kernel.dispatch @layer__flash0 workgroups(%{{.+}}) bindings(
// CHECK:         attn_kernel.dispatch @layer__zero2 workgroups(%[[TILES]]) bindings(%[[COUNTERS]])
// CHECK:         attn_kernel.dispatch @layer__flash_decode1 workgroups(%{{.+}}) bindings(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %[[COUNTERS]])
// CHECK-NOT:     attn_kernel.dispatch
func.func @layer(%q: tensor<?x8x?x64xf32> {attn.name = "q"},
                 %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>,
                 %g: tensor<?x8x?x64xf32>) -> (tensor<?x8x?x64xf32> {attn.name = "o"}) {
  %o = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x8x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

// A gated-delta recurrence: the chunked form as a block kernel, one block
// per (batch, value head) with a thread per state column (Dv = 24: one
// warp; Dk = 32 rows need no split), then the rmsnorm-silu gate, one
// thread per output row. Beside the chunk's products on warp_mma (below)
// it runs decode steps alone, so it is built for chunks of one step.
// CHECK-LABEL: func.func private @gdn__chunked0
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "chunked"
// CHECK-SAME:    attn.tiling = {block_threads = 32 : i64
// The step's k and q rows (padded to Dk + 1), G, beta, P and the columns'
// new values, shared by the block (a step has no UT solve: A is never read
// and folds away with the loops over the step's one step).
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<1x33xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<1x33xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<1xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<1xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<1x1xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<1x32xf32>
// CHECK-NOT:     attn.shared
// Each thread's state column (Dk = 32) stays in registers for the whole
// call: read from S_init first, then per chunk: stage rows, normalize, P
// and A, then each thread's column (four thread loops per chunk), and the
// final state written last, at constant places of the registers.
// CHECK:         %[[S:.+]] = memref.alloca() {alignment = 16 : i64, attn.registers} : memref<32x32xf32>
// CHECK:         scf.parallel (%{{.+}}) = (%c0) to (%c32) step (%c1) {
// CHECK:           %[[S0:.+]] = memref.subview %[[S]]
// CHECK-COUNT-32:    memref.store %{{.+}}, %[[S0]][%c{{[0-9]+}}] : memref<32xf32, strided<[1], offset: ?>>
// CHECK:         } {attn.threads}
// CHECK:         scf.for %{{.+}} = %c0 to %{{.+}} step %c1 {
// CHECK-COUNT-4:   } {attn.threads}
// CHECK:         }
// CHECK:         scf.parallel (%{{.+}}) = (%c0) to (%c32) step (%c1) {
// CHECK-COUNT-32:  memref.store %{{.+}}, %arg9
// CHECK:         } {attn.threads}
// CHECK-NOT:     attn.threads
// CHECK:         return
// Calls of more than a step, first what each chunk needs from its own
// steps, for every chunk at once: a block per (batch, value head, chunk)
// copies the chunk's k rows as the products' operand (cp.async; zeros past
// its steps and past Dk) while it loads g and beta, then waits; stores G
// and 1 / |k| per step; copies v's rows without waiting; makes A = K K^T
// on warp_mma, scaled and kept below the diagonal; inverts I + A in blocks
// of 16 steps (here one: forward substitution, a thread per column); then
// W = T diag(beta exp(G) / |k|) K and, once v is in, U = T diag(beta) V,
// each a product whose elements are stored for the chunk's steps. The
// block has the chain's 2 warps.
// CHECK-LABEL: func.func private @gdn__chunk_local1
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "chunk_local"
// CHECK-SAME:    attn.tiling = {block_threads = 64 : i64
// CHECK:         %[[KEYS:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK:         %[[VALUES:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK-COUNT-4: memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16xf32>
// CHECK:         %[[A:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x20xf32>
// CHECK:         %[[T:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x48xf32>
// CHECK-NOT:     attn.shared
// CHECK:         attn_kernel.async_copy %arg1[{{.+}}], %[[KEYS]][{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         memref.load %arg3
// CHECK:         memref.load %arg4
// CHECK:         attn_kernel.async_wait
// CHECK-NEXT:    scf.reduce
// CHECK-NEXT:    } {attn.threads}
// CHECK:         memref.store %{{.+}}, %arg13[%{{.+}}, %{{.+}}, %{{.+}}, %c0] : memref<?x4x?x2xf32>
// CHECK:         memref.store %{{.+}}, %arg13[%{{.+}}, %{{.+}}, %{{.+}}, %c1] : memref<?x4x?x2xf32>
// CHECK:         } {attn.threads}
// CHECK:         attn_kernel.async_copy %arg2[{{.+}}], %[[VALUES]][{{.+}}] if(%{{.+}}) elements(4)
// CHECK-NOT:     attn_kernel.async_wait
// CHECK:         } {attn.threads}
// CHECK:         attn_kernel.warp_mma %[[KEYS]], %[[KEYS]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(16) k(32) {acc_fragment, rhs_transposed}
// CHECK:         memref.store %{{.+}}, %[[A]]
// CHECK:         } {attn.threads}
// CHECK-COUNT-16: memref.store %{{.+}}, %[[T]]
// CHECK:         } {attn.threads}
// In f32, T diag(w) is one part, and takes A's buffer.
// CHECK:         memref.store %{{.+}}, %[[A]]
// CHECK:         } {attn.threads}
// CHECK:         attn_kernel.warp_mma %[[A]], %[[KEYS]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(32) k(16) {acc_fragment}
// CHECK-COUNT-16: memref.store %{{.+}}, %arg10[%c0, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}] : memref<1x?x4x?x32xf32>
// CHECK:         } {attn.threads}
// CHECK:         attn_kernel.async_wait
// CHECK:         } {attn.threads}
// CHECK:         memref.store %{{.+}}, %[[A]]
// CHECK:         } {attn.threads}
// CHECK:         attn_kernel.warp_mma %[[A]], %[[VALUES]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(32) k(16) {acc_fragment}
// CHECK-COUNT-16: memref.store %{{.+}}, %arg11[%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}] : memref<?x4x?x24xf32>
// CHECK:         } {attn.threads}
// CHECK-NOT:     attn.threads
// CHECK:         return
// Then the chain of chunks, the products on warp_mma: a block per (batch,
// value head, 32 state columns: Dv = 24 padded to a power of 2), two warps
// per 16 columns, each with half of Dk. Shared, in two stages: k and W rows (Dk = 32, and 16
// bytes), G and 1 / |k|, U's columns (and 16 bytes); then the state's
// transposed copy and U'^T (the products' operands, one f32 part each).
// CHECK-LABEL: func.func private @gdn__chunk_states2
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "chunk_states"
// CHECK-SAME:    attn.tiling = {block_threads = 128 : i64
// CHECK:         %[[K0:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK:         %[[W0:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK:         %[[G0:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x2xf32>
// CHECK:         %[[U0:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x40xf32>
// CHECK:         %[[K1:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK:         %[[W1:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x2xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x40xf32>
// CHECK:         %[[ST:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x36xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x20xf32>
// The lanes' fragments of S^T (16 columns, 16 of Dk = 32 per warp) and of
// W S (16 columns per warp).
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.registers} : memref<128x2x4xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.registers} : memref<128x2x4xf32>
// S_init is the first chunk's starting state, in the shared copy; the
// chunk's inputs are copied into stage 0 meanwhile: k, W, G and 1 / |k|
// (8 bytes a step), U; a group left in flight.
// CHECK:         attn_kernel.async_copy %arg1[{{.+}}], %[[K0]][{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_copy %arg10[%c0, {{.+}}], %[[W0]][{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_copy %arg13[{{.+}}], %[[G0]][{{.+}}] if(%{{.+}}) elements(2)
// CHECK:         attn_kernel.async_copy %arg11[{{.+}}], %[[U0]][{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_wait {pending = 1 : i64}
// CHECK:         } {attn.threads}
// The chunks two at a time, chunk j in stage j % 2: chunk j + 1's copies
// into the other stage, chunk j's starting state from the shared copy to
// the temporary (16 bytes a store), a wait for all but the copies; W S,
// V' stored (as its parts) and U'^T; U'^T K and the state's shared copy.
// No solve, no norms, no outputs.
// CHECK:         scf.for
// CHECK:           attn_kernel.async_copy %arg1[{{.+}}], %[[K1]][{{.+}}]
// CHECK:           attn_kernel.async_copy %arg10[%c0, {{.+}}], %[[W1]][{{.+}}]
// CHECK:           %[[PIECE:.+]] = vector.load %[[ST]][{{.+}}] {alignment = 16 : i64} : memref<32x36xf32>, vector<4xf32>
// CHECK-NEXT:      vector.store %[[PIECE]], %arg14[%c0, {{.+}}] {alignment = 16 : i64} : memref<1x?x4x24x32xf32>, vector<4xf32>
// CHECK:           attn_kernel.async_wait {pending = 1 : i64}
// CHECK:           } {attn.threads}
// CHECK:           %[[COLUMNS0:.+]] = memref.subview %[[ST]][%{{.+}}, 0] [16, 36] [1, 1]
// CHECK:           attn_kernel.warp_mma %[[W0]], %[[COLUMNS0]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(16) k(32) {acc_fragment, rhs_transposed}
// CHECK:           vector.load %[[U0]][{{.+}}] {alignment = 8 : i64} : memref<16x40xf32>, vector<2xf32>
// CHECK:           memref.store %{{.+}}, %arg12[%c0,
// CHECK:           } {attn.threads}
// CHECK:           %[[KEYS0:.+]] = memref.subview %[[K0]][0, %{{.+}}] [16, 16] [1, 1]
// CHECK:           attn_kernel.warp_mma %{{.+}}, %[[KEYS0]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(16) k(16) {acc_fragment, accumulate}
// CHECK-NOT:       %arg14
// CHECK:           } {attn.threads}
// CHECK:           attn_kernel.async_copy %arg1[{{.+}}], %[[K0]][{{.+}}]
// CHECK:           attn_kernel.async_wait {pending = 1 : i64}
// CHECK:           } {attn.threads}
// CHECK:           %[[COLUMNS1:.+]] = memref.subview %[[ST]][%{{.+}}, 0] [16, 36] [1, 1]
// CHECK:           attn_kernel.warp_mma %[[W1]], %[[COLUMNS1]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(16) k(32) {acc_fragment, rhs_transposed}
// CHECK:           } {attn.threads}
// CHECK:           %[[KEYS1:.+]] = memref.subview %[[K1]][0, %{{.+}}] [16, 16] [1, 1]
// CHECK:           attn_kernel.warp_mma %{{.+}}, %[[KEYS1]], %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(16) k(16) {acc_fragment, accumulate}
// CHECK:           } {attn.threads}
// CHECK:         }
// CHECK:         } {attn.threads}
// CHECK-NOT:     attn.threads
// CHECK:         return
// The chain's narrow form (for few blocks): 16 columns a block, two warps
// holding their state for half of Dk each and computing W S for 8 of the
// columns each.
// CHECK-LABEL: func.func private @gdn__chunk_states_narrow3
// CHECK-SAME:    attn.kernel = "chunk_states"
// CHECK-SAME:    attn.tiling = {block_threads = 64 : i64
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x20xf32>
// CHECK:         attn.registers} : memref<64x2x4xf32>
// CHECK:         attn.registers} : memref<64x1x4xf32>
// CHECK:         scf.for
// CHECK:           attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(8) k(32) {acc_fragment, rhs_transposed}
// CHECK:           attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(16) k(16) {acc_fragment, accumulate}
// CHECK:         return
// Then the outputs of every chunk at once, a block per (batch, value
// head, chunk, column tile): q and k rows, the chunk's starting state and
// V' (the chain's parts) copied as stored, all in flight before one wait;
// then G and 1 / |k|; Q S and Q K^T (waited for by its warp alone), then
// P V'.
// CHECK-LABEL: func.func private @gdn__chunk_outputs4
// CHECK-SAME:    attn.kernel = "chunk_outputs"
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x2xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<32x36xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x36xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.registers} : memref<64x4x4xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.registers} : memref<64x2x4xf32>
// CHECK:         attn_kernel.async_copy %arg0[{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_copy %arg1[{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_copy %arg14[%c0, {{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_copy %arg12[%c0, {{.+}}] if(%{{.+}}) elements(4)
// CHECK-NOT:     attn.threads
// CHECK:         attn_kernel.async_wait
// CHECK-NEXT:    scf.reduce
// CHECK-NEXT:    } {attn.threads}
// CHECK:         memref.load %arg13
// CHECK:         attn_kernel.warp_mma %[[Q:.+]], %{{.+}}, %{{.+}} rows(%{{.+}}) lane(%{{.+}}) n(32) k(32) {acc_fragment, rhs_transposed}
// CHECK:         attn_kernel.warp_mma %[[Q]], %{{.+}}, %{{.+}} n(16) k(32) {acc_fragment, rhs_transposed}
// CHECK:         } {attn.threads, attn.warp_sync}
// CHECK:         attn_kernel.warp_mma %{{.+}}, %{{.+}}, %{{.+}} n(32) k(16) {acc_fragment, accumulate, lhs_fragment}
// CHECK:         memref.store %{{.+}}, %arg8
// CHECK:         } {attn.threads}
// CHECK-NOT:     attn.threads
// CHECK:         return
// The gate (attn.rmsnorm_gate's kernel, bound to o, z, w and o again: in
// place): a block per 16 rows, whose indices are divided out once per row;
// its rows of o (%arg0) and z (%arg1) and the weights (%arg2) copied as
// stored, all before one wait; 8 partial sums of squares a row, then their
// sum.
// CHECK-LABEL: func.func private @gdn__gate5
// CHECK-SAME:    attn.block_kernel
// CHECK-SAME:    attn.kernel = "rmsnorm_gate"
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x3xi64>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x40xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x40xf32>
// CHECK:         memref.alloca() {alignment = 16 : i64, attn.shared} : memref<1x24xf32>
// CHECK:         %[[PARTIAL:.+]] = memref.alloca() {alignment = 16 : i64, attn.shared} : memref<16x9xf32>
// CHECK:         } {attn.threads}
// CHECK:         attn_kernel.async_copy %arg0[{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_copy %arg1[{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_copy %arg2[{{.+}}] if(%{{.+}}) elements(4)
// CHECK:         attn_kernel.async_wait
// CHECK:         } {attn.threads}
// CHECK:         memref.store %{{.+}}, %[[PARTIAL]]
// CHECK:         } {attn.threads}
// CHECK-COUNT-8: memref.load %[[PARTIAL]]
// CHECK:         math.sqrt
// The SIMT kernel takes calls of one step (decode), the local, chain and
// outputs kernels the others (temporaries laid out as v: W as the
// products' parts (one f32 part here), U, V' as the parts, G and 1 / |k|
// per step; the chunks' starting states as the parts, B * ceil(L / C) of
// them); the others get no blocks. The
// local and outputs kernels take a block per (batch, value head, chunk),
// the chain a block per (batch, value head), or when those would leave
// multiprocessors (workers / 4) idle, its narrow form a block per (batch,
// value head, 16 of the 32 columns).
// CHECK-LABEL: func.func @gdn(
// CHECK:         %[[B:.+]] = memref.dim %{{.+}}, %c0
// CHECK:         %[[L:.+]] = memref.dim %{{.+}}, %c2
// CHECK:         %[[HEADS:.+]] = arith.muli %[[B]], %c4
// CHECK:         %[[STEP:.+]] = arith.cmpi ule, %[[L]], %c1
// CHECK:         %[[WM:.+]] = memref.alloc(%{{.+}}, %{{.+}}) : memref<1x?x4x?x32xf32>
// CHECK:         %[[UM:.+]] = memref.alloc(%{{.+}}, %{{.+}}) : memref<?x4x?x24xf32>
// CHECK:         %[[VM:.+]] = memref.alloc(%{{.+}}, %{{.+}}) : memref<1x?x4x?x24xf32>
// CHECK:         %[[GM:.+]] = memref.alloc(%{{.+}}, %{{.+}}) : memref<?x4x?x2xf32>
// CHECK:         %[[CHUNKS:.+]] = arith.ceildivui %[[L]], %c16
// CHECK:         %[[SLOTS:.+]] = arith.muli %[[B]], %[[CHUNKS]]
// CHECK:         %[[SM:.+]] = memref.alloc(%[[SLOTS]]) : memref<1x?x4x24x32xf32>
// CHECK:         %[[ALL:.+]] = arith.muli %[[SLOTS]], %c4
// CHECK:         %[[CHUNKB:.+]] = arith.select %[[STEP]], %c0, %[[ALL]]
// CHECK:         attn_kernel.dispatch @gdn__chunk_local1 workgroups(%[[CHUNKB]]) bindings({{.*}}, %[[WM]], %[[UM]], %[[VM]], %[[GM]], %[[SM]])
// CHECK:         %[[NARROW:.+]] = arith.muli %[[B]], %c8
// CHECK:         %[[WORKERS:.+]] = attn_kernel.worker_count
// CHECK:         %[[SMS:.+]] = arith.divui %[[WORKERS]], %c4
// CHECK:         %[[FEW:.+]] = arith.cmpi ule, %[[NARROW]], %[[SMS]]
// CHECK:         %[[WIDE:.+]] = arith.select %[[FEW]], %c0, %[[HEADS]]
// CHECK:         %[[CHAIN:.+]] = arith.select %[[STEP]], %c0, %[[WIDE]]
// CHECK:         attn_kernel.dispatch @gdn__chunk_states2 workgroups(%[[CHAIN]]) bindings({{.*}}, %[[WM]], %[[UM]], %[[VM]], %[[GM]], %[[SM]])
// CHECK:         %[[HALVES:.+]] = arith.select %[[FEW]], %[[NARROW]], %c0
// CHECK:         %[[NARROWCHAIN:.+]] = arith.select %[[STEP]], %c0, %[[HALVES]]
// CHECK:         attn_kernel.dispatch @gdn__chunk_states_narrow3 workgroups(%[[NARROWCHAIN]]) bindings({{.*}}, %[[WM]], %[[UM]], %[[VM]], %[[GM]], %[[SM]])
// CHECK:         attn_kernel.dispatch @gdn__chunk_outputs4 workgroups(%[[CHUNKB]]) bindings({{.*}}, %[[WM]], %[[UM]], %[[VM]], %[[GM]], %[[SM]])
// CHECK:         %[[SIMT:.+]] = arith.select %[[STEP]], %[[HEADS]], %c0
// CHECK:         attn_kernel.dispatch @gdn__chunked0 workgroups(%[[SIMT]])
// CHECK:         %[[ROWS:.+]] = arith.muli %[[HEADS]], %[[L]]
// CHECK:         %[[GATEB:.+]] = arith.ceildivui %[[ROWS]], %c16
// CHECK:         attn_kernel.dispatch @gdn__gate5 workgroups(%[[GATEB]])
func.func @gdn(%q: tensor<?x2x?x32xf32>, %k: tensor<?x2x?x32xf32>,
               %v: tensor<?x4x?x24xf32>, %g: tensor<?x4x?xf32>,
               %beta: tensor<?x4x?xf32>, %s0: tensor<?x4x32x24xf32>,
               %z: tensor<?x4x?x24xf32>, %w: tensor<24xf32>)
    -> (tensor<?x4x?x24xf32>, tensor<?x4x32x24xf32>) {
  %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x4x?xf32>) beta(%beta : tensor<?x4x?xf32>)
      state(%s0 : tensor<?x4x32x24xf32>)
      output_gate(%z, %w : tensor<?x4x?x24xf32>, tensor<24xf32>)
      {chunk_size = 16, qk_l2norm}
      : tensor<?x2x?x32xf32>, tensor<?x2x?x32xf32>, tensor<?x4x?x24xf32>
  return %o, %s : tensor<?x4x?x24xf32>, tensor<?x4x32x24xf32>
}

// A gate no attention took (here on an entry input): a thread per element
// of the output (B x L tokens of 3 x 20 features), which the flat views of
// the buffers index directly; a headwise logit is that of element i's head
// vector, i / 20.
// CHECK-LABEL: func.func private @headwise__gate0
// CHECK-NOT:     attn.block_kernel
// CHECK-SAME:    attn.kernel = "gate"
// CHECK:         %[[VECTOR:.+]] = arith.divui %arg3, %c20
// CHECK:         memref.collapse_shape %arg0
// CHECK:         %[[LOGITS:.+]] = memref.collapse_shape %arg1
// CHECK:         memref.load %[[LOGITS]][%[[VECTOR]]]
// CHECK-LABEL: func.func @headwise(
// CHECK-DAG:     %[[L:.+]] = memref.dim %arg0, %c2
// CHECK-DAG:     %[[B:.+]] = memref.dim %arg0, %c0
// CHECK:         %[[TOKENS:.+]] = arith.muli %[[B]], %[[L]]
// CHECK:         %[[ELEMENTS:.+]] = arith.muli %[[TOKENS]], %c60
// CHECK:         attn_kernel.dispatch @headwise__gate0 workgroups(%[[ELEMENTS]])
func.func @headwise(%o: tensor<?x3x?x20xf32>, %g: tensor<?x3x?x1xf32>)
    -> tensor<?x3x?x20xf32> {
  %r = attn.gate %o, %g : tensor<?x3x?x20xf32>, tensor<?x3x?x1xf32>
  return %r : tensor<?x3x?x20xf32>
}
