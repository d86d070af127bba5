// RUN: attn-opt %s -attn-warp-mma-to-nvvm=chip=sm_90a -canonicalize -cse | FileCheck %s --check-prefix=MMA
// RUN: attn-opt %s -attn-warp-mma-to-nvvm=chip=sm_75 -canonicalize -cse | FileCheck %s --check-prefix=LOOPS
// RUN: attn-opt %s -attn-warp-mma-to-loops -canonicalize -cse | FileCheck %s --check-prefix=LOOPS

// The two lowerings of one lane's share of a warp's 16-row product. Lane
// l holds g = l / 4 and 2t = 2 (l % 4): accumulator rows row + g and
// row + g + 8, columns 2t and 2t + 1 of each block of 8.

// Tensor cores (sm_80 and newer): per 16-wide step of K, the A fragment
// (4 pairs of adjacent bf16 as i32: rows g and g + 8, k 2t and 2t + 8) once,
// then per block of 8 columns the B fragment and one mma.sync whose
// accumulators carry over to the next step. q k^T reads k's rows (B
// transposed) as adjacent pairs. K = 32, N = 16: 2 steps x 2 blocks.
// MMA-LABEL: func.func @scores_bf16
// MMA-SAME:    %[[Q:[a-z0-9]+]]: memref<32x32xbf16>, %[[K:[a-z0-9]+]]: memref<16x32xbf16>, %[[S:[a-z0-9]+]]: memref<32x16xf32>, %[[ROW:[a-z0-9]+]]: index, %[[LANE:[a-z0-9]+]]: index
// MMA-DAG:     %[[G:.+]] = arith.divui %[[LANE]], %c4
// MMA-DAG:     %[[T:.+]] = arith.remui %[[LANE]], %c4
// MMA-DAG:     %[[T2:.+]] = arith.muli %[[T]], %c2
// MMA-DAG:     %[[R0:.+]] = arith.addi %[[ROW]], %[[G]]
// MMA-DAG:     %[[G8:.+]] = arith.addi %[[G]], %c8
// MMA-DAG:     %[[R8:.+]] = arith.addi %[[ROW]], %[[G8]]
// MMA-DAG:     %[[T2P8:.+]] = arith.addi %[[T2]], %c8
// MMA:         %[[A0V:.+]] = vector.load %[[Q]][%[[R0]], %[[T2]]] : memref<32x32xbf16>, vector<2xbf16>
// MMA:         %[[A0W:.+]] = vector.bitcast %[[A0V]] : vector<2xbf16> to vector<1xi32>
// MMA:         %[[A0:.+]] = vector.extract %[[A0W]][0] : i32 from vector<1xi32>
// MMA:         vector.load %[[Q]][%[[R8]], %[[T2]]]
// MMA:         vector.load %[[Q]][%[[R0]], %[[T2P8]]]
// MMA:         vector.load %[[Q]][%[[R8]], %[[T2P8]]]
// MMA:         vector.load %[[K]][%[[G]], %[[T2]]]
// MMA:         vector.load %[[K]][%[[G]], %[[T2P8]]]
// MMA:         %[[D0:.+]] = nvvm.mma.sync A[%[[A0]], %{{.+}}, %{{.+}}, %{{.+}}]  B[%{{.+}}, %{{.+}}]  C[%cst, %cst, %cst, %cst]
// MMA-SAME:      layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>
// MMA-SAME:      multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>
// MMA-SAME:      shape = #nvvm.shape<m = 16, n = 8, k = 16>
// MMA-SAME:      (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// MMA:         %[[C0:.+]] = llvm.extractvalue %[[D0]][0]
// The second block of columns: k's rows 8 + g.
// MMA:         vector.load %[[K]][%[[G8]], %[[T2]]]
// MMA:         nvvm.mma.sync
// The second step (k + 16) accumulates onto the first.
// MMA:         nvvm.mma.sync A[{{.+}}]  B[{{.+}}]  C[%[[C0]], %{{.+}}, %{{.+}}, %{{.+}}]
// MMA:         %[[E:.+]] = nvvm.mma.sync
// MMA:         %[[E0:.+]] = llvm.extractvalue %[[E]][0]
// MMA-NOT:     nvvm.mma.sync
// MMA:         memref.store %{{.+}}, %[[S]][%[[R0]], %[[T2]]]
// MMA:         memref.store %[[E0]], %[[S]][%[[R0]], %[[T2P8]]]
func.func @scores_bf16(%q: memref<32x32xbf16>, %k: memref<16x32xbf16>, %s: memref<32x16xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(16) k(32) {rhs_transposed}
      : memref<32x32xbf16>, memref<16x32xbf16>, memref<32x16xf32>
  return
}

// f16, B not transposed (P v): the B pairs run down v's columns (two
// scalar loads each), the accumulators start from acc.
// MMA-LABEL: func.func @pv_f16
// MMA-SAME:    %[[P:[a-z0-9]+]]: memref<16x16xf16>, %[[V:[a-z0-9]+]]: memref<16x8xf16>, %[[O:[a-z0-9]+]]: memref<16x8xf32>
// MMA:         %[[C0:.+]] = memref.load %[[O]]
// MMA:         %[[A0:.+]] = vector.load %[[P]]{{.+}} : memref<16x16xf16>, vector<2xf16>
// MMA:         %[[B00:.+]] = memref.load %[[V]][%[[T2:.+]], %[[G:.+]]] : memref<16x8xf16>
// MMA:         %[[B01:.+]] = memref.load %[[V]][%{{.+}}, %[[G]]] : memref<16x8xf16>
// MMA:         %[[B0:.+]] = vector.from_elements %[[B00]], %[[B01]] : vector<2xf16>
// MMA:         nvvm.mma.sync A[%[[A0]], %{{.+}}, %{{.+}}, %{{.+}}]  B[%[[B0]], %{{.+}}]  C[%[[C0]], %{{.+}}, %{{.+}}, %{{.+}}]
// MMA-SAME:      (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// MMA-NOT:     nvvm.mma.sync
// MMA:         return

// Loops (the CPU, and chips before sm_80): per element of the lane,
// a fused multiply-add chain over K in f32; no tensor cores.
// LOOPS-LABEL: func.func @scores_bf16
// LOOPS-NOT:   nvvm.mma.sync
// LOOPS:       scf.for %[[BLOCK:.+]] = %c0 to %c2 step %c1 {
// LOOPS:         scf.for %[[KK:.+]] = %c0 to %c32 step %c1 iter_args(%{{.+}} = %cst)
// LOOPS:           memref.load %arg0[%{{.+}}, %[[KK]]] : memref<32x32xbf16>
// LOOPS:           arith.extf
// LOOPS:           memref.load %arg1[%{{.+}}, %[[KK]]] : memref<16x32xbf16>
// LOOPS:           math.fma
// LOOPS-COUNT-3: scf.for %{{.+}} = %c0 to %c32
// LOOPS-LABEL: func.func @pv_f16
// LOOPS:       %[[INIT:.+]] = memref.load %arg2
// LOOPS:       scf.for %[[KK:.+]] = %c0 to %c16 step %c1 iter_args(%{{.+}} = %[[INIT]])
// LOOPS:         memref.load %arg1[%[[KK]], %{{.+}}] : memref<16x8xf16>
func.func @pv_f16(%p: memref<16x16xf16>, %v: memref<16x8xf16>, %o: memref<16x8xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(8) k(16) {accumulate}
      : memref<16x16xf16>, memref<16x8xf16>, memref<16x8xf32>
  return
}

// A fragment accumulator (acc_fragment): the lane's elements are acc[b, 0..3]
// of block b (rows g, g, g + 8, g + 8; columns 2t, 2t + 1, 2t, 2t + 1), read
// and written at constant indices by the tensor-core form, so they stay in
// registers. N = 16: 2 blocks, one mma.sync each.
// MMA-LABEL: func.func @pv_fragment
// MMA-SAME:    %[[FRAG:[a-z0-9]+]]: memref<2x4xf32, strided<[4, 1], offset: ?>>
// MMA-DAG:     %[[C00:.+]] = memref.load %[[FRAG]][%c0, %c0]
// MMA-DAG:     %[[C01:.+]] = memref.load %[[FRAG]][%c0, %c1]
// MMA-DAG:     %[[C02:.+]] = memref.load %[[FRAG]][%c0, %c2]
// MMA-DAG:     %[[C03:.+]] = memref.load %[[FRAG]][%c0, %c3]
// MMA-DAG:     memref.load %[[FRAG]][%c1, %c3]
// MMA:         %[[D:.+]] = nvvm.mma.sync A[{{.+}}]  B[{{.+}}]  C[%[[C00]], %[[C01]], %[[C02]], %[[C03]]]
// MMA:         %[[D0:.+]] = llvm.extractvalue %[[D]][0]
// MMA:         nvvm.mma.sync
// MMA-NOT:     nvvm.mma.sync
// MMA:         memref.store %[[D0]], %[[FRAG]][%c0, %c0]
// MMA:         memref.store %{{.+}}, %[[FRAG]][%c1, %c3]
// The loops keep a fragment's elements as values, never indexing the
// lane's registers with a variable (which the GPU would put in local
// memory): the lane's 8 (2 blocks x rows g, g + 8 x columns 2t, 2t + 1)
// are loaded from constant places, carried through one loop over K and
// stored back. acc[1, 3] is row row + g + 8, column 8 + 2t + 1.
// LOOPS-LABEL: func.func @pv_fragment
// LOOPS-SAME:    %[[P:[a-z0-9]+]]: memref<32x16xbf16>, %[[V:[a-z0-9]+]]: memref<16x16xbf16>, %[[FRAG:[a-z0-9]+]]: memref<2x4xf32, strided<[4, 1], offset: ?>>, %[[ROW:[a-z0-9]+]]: index, %[[LANE:[a-z0-9]+]]: index
// LOOPS-DAG:     %[[G:.+]] = arith.divui %[[LANE]], %c4
// LOOPS-DAG:     %[[INIT00:.+]] = memref.load %[[FRAG]][%c0, %c0]
// LOOPS-DAG:     %[[INIT13:.+]] = memref.load %[[FRAG]][%c1, %c3]
// LOOPS-DAG:     %[[COL13:.+]] = arith.addi %{{.+}}, %c9 : index
// LOOPS-DAG:     %[[G8:.+]] = arith.addi %[[G]], %c8 : index
// LOOPS-DAG:     %[[ROW8:.+]] = arith.addi %[[ROW]], %[[G8]] : index
// LOOPS:         %[[SUMS:.+]]:8 = scf.for %[[K:.+]] = %c0 to %c16 step %c1 iter_args(%{{.+}} = %[[INIT00]], {{.+}}, %[[ACC13:[a-z0-9]+]] = %[[INIT13]]) -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// LOOPS:           %[[A1:.+]] = memref.load %[[P]][%[[ROW8]], %[[K]]] : memref<32x16xbf16>
// LOOPS:           %[[A1F:.+]] = arith.extf %[[A1]]
// LOOPS:           %[[B13:.+]] = memref.load %[[V]][%[[K]], %[[COL13]]] : memref<16x16xbf16>
// LOOPS:           %[[B13F:.+]] = arith.extf %[[B13]]
// LOOPS:           %[[SUM13:.+]] = math.fma %[[A1F]], %[[B13F]], %[[ACC13]] : f32
// LOOPS:           scf.yield {{.+}}, %[[SUM13]] : f32, f32, f32, f32, f32, f32, f32, f32
// LOOPS-NOT:     memref.load %[[FRAG]]
// LOOPS:         memref.store %[[SUMS]]#0, %[[FRAG]][%c0, %c0]
// LOOPS:         memref.store %[[SUMS]]#7, %[[FRAG]][%c1, %c3]
// LOOPS-LABEL: func.func @scores_f32
// LOOPS-NOT:   nvvm.mma.sync
// LOOPS:       math.fma
func.func @pv_fragment(%p: memref<32x16xbf16>, %v: memref<16x16xbf16>, %frag: memref<2x4xf32, strided<[4, 1], offset: ?>>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %frag rows(%row) lane(%lane) n(16) k(16) {accumulate, acc_fragment}
      : memref<32x16xbf16>, memref<16x16xbf16>, memref<2x4xf32, strided<[4, 1], offset: ?>>
  return
}

// f32 on sm_80 and newer: three tf32 mma.sync (.m16n8k8) per step of 8
// and block of 8 columns. Each element x is split as hi = tf32(x), lo =
// tf32(x - hi), both rounded to nearest, and the products go smaller terms
// first: hi lo, lo hi, hi hi. The lane's k slots of PTX's tf32 fragments
// hold k t and t + 4 here ("natural": B is k's rows, transposed): A's
// rows g, g + 8 at k t, then at k t + 4; B's column g at k t and t + 4.
// MMA-LABEL: func.func @scores_f32
// MMA-SAME:    %[[Q:[a-z0-9]+]]: memref<16x16xf32>, %[[K:[a-z0-9]+]]: memref<8x16xf32>, %[[S:[a-z0-9]+]]: memref<16x8xf32>, %[[ROW:[a-z0-9]+]]: index, %[[LANE:[a-z0-9]+]]: index
// MMA-DAG:     %[[G:.+]] = arith.divui %[[LANE]], %c4
// MMA-DAG:     %[[T:.+]] = arith.remui %[[LANE]], %c4
// MMA-DAG:     %[[T4:.+]] = arith.addi %[[T]], %c4
// MMA-DAG:     %[[R0:.+]] = arith.addi %[[ROW]], %[[G]]
// MMA:         %[[A0:.+]] = memref.load %[[Q]][%[[R0]], %[[T]]]
// MMA:         %[[A1:.+]] = memref.load %[[Q]][%[[R8:.+]], %[[T]]]
// MMA:         %[[A2:.+]] = memref.load %[[Q]][%[[R0]], %[[T4]]]
// MMA:         %[[A3:.+]] = memref.load %[[Q]][%[[R8]], %[[T4]]]
// MMA:         %[[A0HI:.+]] = nvvm.convert.float.to.tf32 %[[A0]] {rnd = #nvvm.fp_rnd_mode<rna>}
// MMA-NEXT:    %[[A0HIF:.+]] = arith.bitcast %[[A0HI]] : i32 to f32
// MMA-NEXT:    %[[A0REST:.+]] = arith.subf %[[A0]], %[[A0HIF]] : f32
// MMA-NEXT:    %[[A0LO:.+]] = nvvm.convert.float.to.tf32 %[[A0REST]] {rnd = #nvvm.fp_rnd_mode<rna>}
// MMA:         %[[A1HI:.+]] = nvvm.convert.float.to.tf32 %[[A1]]
// MMA:         %[[A2HI:.+]] = nvvm.convert.float.to.tf32 %[[A2]]
// MMA:         %[[A3HI:.+]] = nvvm.convert.float.to.tf32 %[[A3]]
// MMA:         %[[B0:.+]] = memref.load %[[K]][%[[G]], %[[T]]]
// MMA:         %[[B1:.+]] = memref.load %[[K]][%[[G]], %[[T4]]]
// MMA:         %[[B0HI:.+]] = nvvm.convert.float.to.tf32 %[[B0]]
// MMA:         %[[B0LO:.+]] = nvvm.convert.float.to.tf32
// MMA:         %[[B1HI:.+]] = nvvm.convert.float.to.tf32 %[[B1]]
// MMA:         %[[B1LO:.+]] = nvvm.convert.float.to.tf32
// MMA:         %[[D0:.+]] = nvvm.mma.sync A[%[[A0HI]], %[[A1HI]], %[[A2HI]], %[[A3HI]]]  B[%[[B0LO]], %[[B1LO]]]  C[%cst, %cst, %cst, %cst]
// MMA-SAME:      multiplicandAPtxType = #nvvm.mma_type<tf32>, multiplicandBPtxType = #nvvm.mma_type<tf32>, shape = #nvvm.shape<m = 16, n = 8, k = 8>
// MMA:         %[[D0C0:.+]] = llvm.extractvalue %[[D0]][0]
// MMA:         %[[D1:.+]] = nvvm.mma.sync A[%[[A0LO]], %{{.+}}, %{{.+}}, %{{.+}}]  B[%[[B0HI]], %[[B1HI]]]  C[%[[D0C0]], %{{.+}}, %{{.+}}, %{{.+}}]
// MMA:         %[[D1C0:.+]] = llvm.extractvalue %[[D1]][0]
// MMA:         nvvm.mma.sync A[%[[A0HI]], %[[A1HI]], %[[A2HI]], %[[A3HI]]]  B[%[[B0HI]], %[[B1HI]]]  C[%[[D1C0]], %{{.+}}, %{{.+}}, %{{.+}}]
// The second step: k 8 + t and 12 + t.
// MMA:         %[[T8:.+]] = arith.addi %[[T]], %c8
// MMA:         memref.load %[[Q]][%[[R0]], %[[T8]]]
// MMA-COUNT-3: nvvm.mma.sync
// MMA-NOT:     nvvm.mma.sync
// MMA:         memref.store %{{.+}}, %[[S]]
func.func @scores_f32(%q: memref<16x16xf32>, %k: memref<8x16xf32>, %s: memref<16x8xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(8) k(16) {rhs_transposed}
      : memref<16x16xf32>, memref<8x16xf32>, memref<16x8xf32>
  return
}

// B read down its columns (rhs [k, n]): the slots hold k 2t and 2t + 1
// ("paired"), whose loads of B hit 32 different banks in rows padded by 4
// floats: A's rows g, g + 8 at k 2t, then at 2t + 1; B's rows 2t and
// 2t + 1 at column g.
// MMA-LABEL: func.func @pv_f32
// MMA-SAME:    %[[P:[a-z0-9]+]]: memref<16x16xf32>, %[[V:[a-z0-9]+]]: memref<16x8xf32>, %{{.+}}: memref<16x8xf32>, %[[ROW:[a-z0-9]+]]: index, %[[LANE:[a-z0-9]+]]: index
// MMA-DAG:     %[[G:.+]] = arith.divui %[[LANE]], %c4
// MMA-DAG:     %[[T:.+]] = arith.remui %[[LANE]], %c4
// MMA-DAG:     %[[T2:.+]] = arith.muli %[[T]], %c2
// MMA-DAG:     %[[T21:.+]] = arith.addi %[[T2]], %c1
// MMA-DAG:     %[[R0:.+]] = arith.addi %[[ROW]], %[[G]]
// MMA:         memref.load %[[P]][%[[R0]], %[[T2]]]
// MMA:         memref.load %[[P]][%[[R8:.+]], %[[T2]]]
// MMA:         memref.load %[[P]][%[[R0]], %[[T21]]]
// MMA:         memref.load %[[P]][%[[R8]], %[[T21]]]
// MMA:         memref.load %[[V]][%[[T2]], %[[G]]]
// MMA:         memref.load %[[V]][%[[T21]], %[[G]]]
// MMA-COUNT-3: nvvm.mma.sync
// The second step: k 8 + 2t and 9 + 2t.
// MMA:         %[[K8:.+]] = arith.addi %[[T2]], %c8
// MMA:         memref.load %[[P]][%[[R0]], %[[K8]]]
// MMA-COUNT-3: nvvm.mma.sync
// MMA-NOT:     nvvm.mma.sync
func.func @pv_f32(%p: memref<16x16xf32>, %v: memref<16x8xf32>, %o: memref<16x8xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(8) k(16) {accumulate}
      : memref<16x16xf32>, memref<16x8xf32>, memref<16x8xf32>
  return
}

// Shared buffers whose rows are whole 16-byte pieces are read with ldmatrix
// (four 8 x 8 matrices a warp instruction): lane l points at row l % 8 of
// matrix l / 8 and gets its fragment pair of each. A: rows row + l % 16,
// column k + 8 (l / 16) -> a0..a3. k^T (rhs [n, k]): rows 8 b + l % 8 +
// 8 (l / 16), column k + 8 ((l / 8) % 2) -> b0, b1 of blocks b and b + 1.
// MMA-LABEL: func.func @scores_ldmatrix
// MMA-SAME:    %[[Q:[a-z0-9]+]]: memref<32x24xbf16, #gpu.address_space<workgroup>>, %[[K:[a-z0-9]+]]: memref<16x24xbf16, #gpu.address_space<workgroup>>, %{{.+}}: memref<2x4xf32>, %[[ROW:[a-z0-9]+]]: index, %[[LANE:[a-z0-9]+]]: index
// MMA-DAG:     %[[L16:.+]] = arith.remui %[[LANE]], %c16
// MMA-DAG:     %[[HALF:.+]] = arith.divui %[[LANE]], %c16
// MMA-DAG:     %[[COL8:.+]] = arith.muli %[[HALF]], %c8
// MMA-DAG:     %[[L8:.+]] = arith.remui %[[LANE]], %c8
// MMA-DAG:     %[[MATRIX:.+]] = arith.divui %[[LANE]], %c8
// MMA-DAG:     %[[ODD:.+]] = arith.remui %[[MATRIX]], %c2
// MMA-DAG:     %[[K8:.+]] = arith.muli %[[ODD]], %c8
// MMA:         %[[AROW:.+]] = arith.addi %[[ROW]], %[[L16]]
// MMA:         %[[A:.+]] = nvgpu.ldmatrix %[[Q]][%[[AROW]], %[[COL8]]] {numTiles = 4 : i32, transpose = false} : memref<32x24xbf16, #gpu.address_space<workgroup>> -> vector<4x2xbf16>
// MMA:         vector.extract %[[A]][0]
// MMA:         %[[KROW:.+]] = arith.addi %[[L8]], %[[COL8]]
// MMA:         %[[B:.+]] = nvgpu.ldmatrix %[[K]][%[[KROW]], %[[K8]]] {numTiles = 4 : i32, transpose = false}
// MMA:         nvvm.mma.sync
// MMA:         nvvm.mma.sync
// MMA-NOT:     nvvm.mma.sync
// MMA-NOT:     nvgpu.ldmatrix
// MMA:         return
func.func @scores_ldmatrix(%q: memref<32x24xbf16, #gpu.address_space<workgroup>>, %k: memref<16x24xbf16, #gpu.address_space<workgroup>>, %s: memref<2x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(16) k(16) {rhs_transposed, acc_fragment}
      : memref<32x24xbf16, #gpu.address_space<workgroup>>, memref<16x24xbf16, #gpu.address_space<workgroup>>, memref<2x4xf32>
  return
}

// v (rhs [k, n]) with .trans: rows k + l % 16, column 8 b + 8 (l / 16) ->
// b0, b1 of blocks b and b + 1; the last odd block (N = 24: 3 blocks) takes
// two matrices (numTiles = 2) at column 16.
// MMA-LABEL: func.func @pv_ldmatrix
// MMA-SAME:    %[[P:[a-z0-9]+]]: memref<16x24xf16, #gpu.address_space<workgroup>>, %[[V:[a-z0-9]+]]: memref<16x24xf16, #gpu.address_space<workgroup>>
// MMA-DAG:     %[[L16:.+]] = arith.remui %{{.+}}, %c16
// MMA-DAG:     %[[COL8:.+]] = arith.muli %{{.+}}, %c8
// MMA:         nvgpu.ldmatrix %[[P]][%{{.+}}, %[[COL8]]] {numTiles = 4 : i32, transpose = false}
// MMA:         nvgpu.ldmatrix %[[V]][%[[L16]], %[[COL8]]] {numTiles = 4 : i32, transpose = true} : memref<16x24xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
// MMA:         nvvm.mma.sync
// MMA:         nvvm.mma.sync
// MMA:         nvgpu.ldmatrix %[[V]][%[[L16]], %c16] {numTiles = 2 : i32, transpose = true} : memref<16x24xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>
// MMA:         nvvm.mma.sync
// MMA-NOT:     nvvm.mma.sync
// MMA:         return
func.func @pv_ldmatrix(%p: memref<16x24xf16, #gpu.address_space<workgroup>>, %v: memref<16x24xf16, #gpu.address_space<workgroup>>, %o: memref<3x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(24) k(16) {accumulate, acc_fragment}
      : memref<16x24xf16, #gpu.address_space<workgroup>>, memref<16x24xf16, #gpu.address_space<workgroup>>, memref<3x4xf32>
  return
}

// Rows of 20 f16 (40 bytes) are not 16-byte aligned: pairs, not ldmatrix.
// MMA-LABEL: func.func @unaligned_rows
// MMA-NOT:     nvgpu.ldmatrix %arg0
// MMA-COUNT-4: vector.load %arg0
// MMA:         nvgpu.ldmatrix %arg1
func.func @unaligned_rows(%p: memref<16x20xf16, #gpu.address_space<workgroup>>, %v: memref<16x8xf16, #gpu.address_space<workgroup>>, %o: memref<1x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %p, %v, %o rows(%row) lane(%lane) n(8) k(16) {accumulate, acc_fragment}
      : memref<16x20xf16, #gpu.address_space<workgroup>>, memref<16x8xf16, #gpu.address_space<workgroup>>, memref<1x4xf32>
  return
}

// Two row tiles (row_tiles = 2, the warp's 32 rows): each B fragment is
// loaded once and used by both tiles' mma.sync, whose A fragments come from
// rows row + g (+ 8) and row + 16 + g (+ 8); the fragment holds tile t's
// block b at [t * blocks + b].
// MMA-LABEL: func.func @two_row_tiles
// MMA-SAME:    %[[Q:[a-z0-9]+]]: memref<32x16xbf16>, %[[K:[a-z0-9]+]]: memref<8x16xbf16>, %[[S:[a-z0-9]+]]: memref<2x4xf32>, %[[ROW:[a-z0-9]+]]: index, %[[LANE:[a-z0-9]+]]: index
// MMA-DAG:     %[[G:.+]] = arith.divui %[[LANE]], %c4
// MMA-DAG:     %[[ROW16:.+]] = arith.addi %[[ROW]], %c16
// MMA-DAG:     %[[R0:.+]] = arith.addi %[[ROW]], %[[G]]
// MMA:         vector.load %[[Q]][%[[R0]],
// MMA:         %[[R16:.+]] = arith.addi %[[ROW16]], %[[G]]
// MMA:         vector.load %[[Q]][%[[R16]],
// MMA:         vector.load %[[K]][%[[G]],
// MMA:         %[[B0:.+]] = vector.extract
// MMA:         vector.load %[[K]][%[[G]],
// MMA:         %[[B1:.+]] = vector.extract
// MMA-NOT:     vector.load
// MMA:         nvvm.mma.sync A[{{.*}}]  B[%[[B0]], %[[B1]]]
// MMA:         nvvm.mma.sync A[{{.*}}]  B[%[[B0]], %[[B1]]]
// MMA-NOT:     nvvm.mma.sync
// MMA:         memref.store %{{.+}}, %[[S]][%c0, %c3]
// MMA:         memref.store %{{.+}}, %[[S]][%c1, %c0]
// The loops take the row tiles one after the other, each its own loop over
// K, the first tile's elements at s[0, ...], the second's at s[1, ...].
// LOOPS-LABEL: func.func @two_row_tiles
// LOOPS-SAME:    %[[Q:[a-z0-9]+]]: memref<32x16xbf16>, %{{.+}}: memref<8x16xbf16>, %[[S:[a-z0-9]+]]: memref<2x4xf32>, %[[ROW:[a-z0-9]+]]: index, %[[LANE:[a-z0-9]+]]: index
// LOOPS:         %[[G:.+]] = arith.divui %[[LANE]], %c4
// LOOPS:         %[[R0:.+]] = arith.addi %[[ROW]], %[[G]]
// LOOPS:         %[[T0:.+]]:4 = scf.for %[[K0:.+]] = %c0 to %c16 step %c1 iter_args(
// LOOPS:           memref.load %[[Q]][%[[R0]], %[[K0]]]
// LOOPS:         memref.store %[[T0]]#0, %[[S]][%c0, %c0]
// LOOPS:         %[[ROW16:.+]] = arith.addi %[[ROW]], %c16
// LOOPS:         %[[R16:.+]] = arith.addi %[[ROW16]], %[[G]]
// LOOPS:         %[[T1:.+]]:4 = scf.for %[[K1:.+]] = %c0 to %c16 step %c1 iter_args(
// LOOPS:           memref.load %[[Q]][%[[R16]], %[[K1]]]
// LOOPS:         memref.store %[[T1]]#0, %[[S]][%c1, %c0]
func.func @two_row_tiles(%q: memref<32x16xbf16>, %k: memref<8x16xbf16>,
                         %s: memref<2x4xf32>, %row: index, %lane: index) {
  attn_kernel.warp_mma %q, %k, %s rows(%row) lane(%lane) n(8) k(16)
      {rhs_transposed, acc_fragment, row_tiles = 2}
      : memref<32x16xbf16>, memref<8x16xbf16>, memref<2x4xf32>
  return
}
