// RUN: attn-opt %s -split-input-file -attn-cpu-dispatches | FileCheck %s --check-prefix=CPU
// RUN: attn-opt %s -split-input-file -attn-gpu-dispatches | FileCheck %s --check-prefix=CUDA

// Every kernel that scores keys inlines the variant regions (SPEC §7) and
// binds the tensors they read after its other bindings. On the CPU the
// region runs lane-wise: a bias read at the head index is a scalar load, a
// document id read at a lane's position a gather (indices clamped into the
// tensor); on CUDA each thread runs it on scalars.

func.func @layer(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                 %v: tensor<?x2x?x16xf32>, %bias: tensor<4xf32>,
                 %doc: tensor<?x?xi32>) -> tensor<?x4x?x16xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %x = tensor.extract %bias[%h] : tensor<4xf32>
        %r = arith.addf %s, %x : f32
        attn.yield %r : f32
      }
      mask_mod {
      ^bb0(%b: index, %h: index, %qp: index, %kp: index):
        %dq = tensor.extract %doc[%b, %qp] : tensor<?x?xi32>
        %dk = tensor.extract %doc[%b, %kp] : tensor<?x?xi32>
        %same = arith.cmpi eq, %dq, %dk : i32
        attn.yield %same : i1
      }
  return %o : tensor<?x4x?x16xf32>
}

// The block mask: a workgroup per (batch row, query tile) classifies the
// key tiles under the mask_mod, which reads b but not h (one class per
// head); lanes whose rows are past the tile count for nothing.
// CPU-LABEL: func.func private @layer__tile_classes0(
// CPU-SAME:    %{{.+}}: memref<?x?x?x?xi8>, %{{.+}}: memref<4xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: index)
// CPU:         vector.gather
// CPU:         vector.reduction <or>, %{{.+}} : vector<8xi1> into i1
// CPU:         vector.reduction <and>, %{{.+}} : vector<8xi1> into i1
// CPU:         memref.store %{{.+}}, %{{.+}}[%{{.+}}, %c0{{.*}}, %{{.+}}, %{{.+}}] : memref<?x?x?x?xi8>
// The flash kernel's lanes are query rows: qp is a vector, kp a scalar. It
// skips empty tiles and evaluates no mask_mod on full ones.
// CPU-LABEL: func.func private @layer__flash1(
// CPU-SAME:    %{{.+}}: memref<?x?x?x?xi8>, %{{.+}}: memref<4xf32>, %[[DOC:.+]]: memref<?x?xi32>, %{{.+}}: index)
// CPU:         %[[CLASS:.+]] = memref.load %{{.+}} : memref<?x?x?x?xi8>
// CPU:         %[[FULL:.+]] = arith.cmpi eq, %[[CLASS]], %c2_i8 : i8
// CPU:         %[[SOME:.+]] = arith.cmpi ne, %[[CLASS]], %c0_i8 : i8
// CPU:         scf.if %[[SOME]] {
// CPU:         memref.load %{{.+}}[%{{.+}}] : memref<4xf32>
// CPU:         arith.addf %{{.+}}, %{{.+}} : vector<8xf32>
// CPU:         %[[FLAT:.+]] = memref.collapse_shape %[[DOC]] {{\[\[}}0, 1]] : memref<?x?xi32> into memref<?xi32>
// CPU:         vector.gather %[[FLAT]][%{{.+}}] [%{{.+}}], %{{.+}}, %{{.+}} : memref<?xi32>, vector<8xi32>, vector<8xi1>, vector<8xi32> into vector<8xi32>
// CPU:         memref.load %[[DOC]][%{{.+}}, %{{.+}}] : memref<?x?xi32>
// CPU:         scf.if %[[FULL]] -> (vector<8xi1>) {
// CPU:         } else {
// CPU:         arith.cmpi eq, %{{.+}}, %{{.+}} : vector<8xi32>
// The split-KV kernel's lanes are keys: kp is the vector.
// CPU-LABEL: func.func private @layer__split_kv2(
// CPU-SAME:    %{{.+}}: memref<4xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: index)
// CPU:         memref.load %{{.+}}[%{{.+}}] : memref<4xf32>
// CPU:         vector.gather
// CPU:         arith.cmpi eq, %{{.+}}, %{{.+}} : vector<8xi32>
// The merge kernel scores nothing and binds no region tensor.
// CPU-LABEL: func.func private @layer__merge3(
// CPU-NOT:     memref<4xf32>
// CPU-LABEL: func.func @layer(
// CPU-SAME:    %[[BIAS:[a-z0-9]+]]: memref<4xf32> {attn.shape = [4]}
// CPU-SAME:    %[[DOCS:[a-z0-9]+]]: memref<?x?xi32> {attn.shape = ["B", "Lk"]}
// CPU:         %[[CLASSES:.+]] = memref.alloc({{.+}}) : memref<?x?x?x?xi8>
// CPU:         attn_kernel.dispatch @layer__tile_classes0 {{.+}} bindings(%{{.+}}, %{{.+}}, %[[CLASSES]], %[[BIAS]], %[[DOCS]])
// CPU:         attn_kernel.dispatch @layer__flash1 {{.+}} bindings({{.+}}, %[[CLASSES]], %[[BIAS]], %[[DOCS]])
// CPU:         attn_kernel.dispatch @layer__split_kv2 {{.+}} bindings({{.+}}, %[[BIAS]], %[[DOCS]])

// The CUDA block mask: a thread per tile classifies it, a thread per query
// tile lists its key tiles that are not empty; the flash kernel's blocks
// walk the list (FlexAttention's kv_indices and kv_num_blocks).
// CUDA-LABEL: func.func private @layer__tile_classes0(
// CUDA-SAME:    %{{.+}}: memref<?x?x?x?xi8>, %{{.+}}: memref<4xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: index)
// CUDA:         arith.cmpi eq, %{{.+}}, %{{.+}} : i32
// CUDA:         memref.store %{{.+}} : memref<?x?x?x?xi8>
// CUDA-LABEL: func.func private @layer__tile_list1(
// CUDA-SAME:    %{{.+}}: memref<?x?x?x?xi8>, %{{.+}}: memref<?x?x?x?xi32>, %{{.+}}: memref<?x?x?xi32>, %{{.+}}: index)
// CUDA-LABEL: func.func private @layer__flash2(
// CUDA-SAME:    %{{.+}}: memref<?x?x?x?xi8>, %[[LIST:.+]]: memref<?x?x?x?xi32>, %[[COUNTS:.+]]: memref<?x?x?xi32>, %{{.+}}: memref<4xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: index)
// CUDA:         memref.load %[[COUNTS]]
// CUDA:         memref.load %[[LIST]]
// CUDA:         memref.load %{{.+}}[%{{.+}}] : memref<4xf32>
// CUDA:         memref.load %{{.+}}[%{{.+}}, %{{.+}}] : memref<?x?xi32>
// CUDA:         arith.cmpi eq, %{{.+}}, %{{.+}} : i32
// CUDA-LABEL: func.func private @layer__flash_decode3(
// CUDA-SAME:    %{{.+}}: memref<4xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: index)
// CUDA:         arith.cmpi eq, %{{.+}}, %{{.+}} : i32

// -----

// Sparse and tree attention: the gathered kernels see each listed key at
// its position (a tree key P + u at P + depth(u)); a tree's prefix kernels
// also bind the parents, for each node's position P + depth(t).
func.func @sparse(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                  %v: tensor<?x2x?x16xf32>, %sel: tensor<?x4x?x2xi32>)
    -> tensor<?x4x?x16xf32> {
  %o = attn.sparse_sdpa %q, %k, %v, %sel {block_size = 8, mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x4x?x2xi32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %d = arith.subi %qp, %kp : index
        %di = arith.index_cast %d : index to i32
        %df = arith.sitofp %di : i32 to f32
        %r = arith.subf %s, %df : f32
        attn.yield %r : f32
      }
  return %o : tensor<?x4x?x16xf32>
}
func.func @tree(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                %v: tensor<?x2x?x16xf32>, %parents: tensor<?x?xi32>)
    -> tensor<?x4x?x16xf32> {
  %o = attn.tree_sdpa %q, %k, %v, %parents
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x?xi32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %d = arith.subi %qp, %kp : index
        %di = arith.index_cast %d : index to i32
        %df = arith.sitofp %di : i32 to f32
        %r = arith.subf %s, %df : f32
        attn.yield %r : f32
      }
  return %o : tensor<?x4x?x16xf32>
}

// CPU-LABEL: func.func private @sparse__sparse0(
// CPU:         arith.subi %{{.+}}, %{{.+}} : vector<8xi32>
// CPU:         arith.sitofp %{{.+}} : vector<8xi32> to vector<8xf32>
// CPU-LABEL: func.func private @tree__tree_prefix0(
// CPU-SAME:    %{{.+}}: memref<?x2x?x16xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: memref<?x4x?x?x16xf32>
// CPU:         arith.subi %{{.+}}, %{{.+}} : vector<8xi32>
// CPU-LABEL: func.func private @tree__tree_prefix_split1(
// CPU-SAME:    %{{.+}}: memref<?x2x?x16xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: memref<?x4x?x?x16xf32>
// CPU-LABEL: func.func private @tree__tree_nodes2(
// CPU:         arith.subi %{{.+}}, %{{.+}} : vector<8xi32>

// CUDA-LABEL: func.func private @sparse__sparse_decode0(
// CUDA:         arith.sitofp %{{.+}} : i32 to f32
// CUDA-LABEL: func.func private @sparse__sparse_split1(
// CUDA:         arith.sitofp %{{.+}} : i32 to f32
// CUDA-LABEL: func.func private @tree__tree_prefix0(
// CUDA-SAME:    %{{.+}}: memref<?x2x?x16xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: memref<?x4x?x?x16xf32>
// CUDA:         arith.sitofp %{{.+}} : i32 to f32
// CUDA-LABEL: func.func private @tree__small_tree_prefix1(
// CUDA-SAME:    %{{.+}}: memref<?x2x?x16xf32>, %{{.+}}: memref<?x?xi32>, %{{.+}}: memref<?x4x?x?x16xf32>
// CUDA-LABEL: func.func private @tree__tree_nodes2(
// CUDA:         arith.sitofp %{{.+}} : i32 to f32

// -----

// Where arith leaves a result undefined, a region's is defined on every
// target, for scalars and lanes alike: an integer division's divisor of 0
// or -1 is replaced by 1 before it divides (no idiv trap) and the result
// chosen after (x rem 0 = x); a float becomes an integer clamped, NaN as 0,
// above the integer range the integer maximum.
func.func @edges(%q: tensor<?x4x?x16xf32>, %k: tensor<?x4x?x16xf32>,
                 %v: tensor<?x4x?x16xf32>, %per: tensor<4xi32>,
                 %t: tensor<4xf32>) -> tensor<?x4x?x16xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %x = tensor.extract %t[%h] : tensor<4xf32>
        %i = arith.fptosi %x : f32 to i32
        %f = arith.sitofp %i : i32 to f32
        %r = arith.addf %s, %f : f32
        attn.yield %r : f32
      }
      mask_mod {
      ^bb0(%b: index, %h: index, %qp: index, %kp: index):
        %p = tensor.extract %per[%h] : tensor<4xi32>
        %kpi = arith.index_cast %kp : index to i32
        %r = arith.remsi %kpi, %p : i32
        %c0 = arith.constant 0 : i32
        %z = arith.cmpi eq, %r, %c0 : i32
        attn.yield %z : i1
      }
  return %o : tensor<?x4x?x16xf32>
}

// The split-KV kernel's lanes are keys: the remainder is on lanes, the
// conversion of a per-head float on a scalar.
// CPU-LABEL: func.func private @edges__split_kv2(
// CPU:         %[[NAN:.+]] = arith.cmpf uno, %[[T:.+]], %[[T]] : f32
// CPU:         %[[ABOVE_LOW:.+]] = arith.maximumf %[[T]], %[[LOW:.+]] : f32
// CPU:         %[[CLAMPED:.+]] = arith.minimumf %[[ABOVE_LOW]], %[[HIGH:.+]] : f32
// CPU:         %[[NUMBER:.+]] = arith.select %[[NAN]], %{{.+}}, %[[CLAMPED]] : f32
// CPU:         %[[ABOVE:.+]] = arith.cmpf ogt, %[[T]], %[[HIGH]] : f32
// CPU:         %[[I:.+]] = arith.fptosi %[[NUMBER]] : f32 to i32
// CPU:         %[[MAX:.+]] = arith.constant 2147483647 : i32
// CPU:         arith.select %[[ABOVE]], %[[MAX]], %[[I]] : i32
// CPU:         %[[ZERO:.+]] = arith.cmpi eq, %[[P:.+]], %{{.+}} : vector<8xi32>
// CPU:         %[[MINUS_ONE:.+]] = arith.cmpi eq, %[[P]], %{{.+}} : vector<8xi32>
// CPU:         %[[EITHER:.+]] = arith.ori %[[ZERO]], %[[MINUS_ONE]] : vector<8xi1>
// CPU:         %[[DIVISOR:.+]] = arith.select %[[EITHER]], %{{.+}}, %[[P]] : vector<8xi1>, vector<8xi32>
// CPU:         %[[REM:.+]] = arith.remsi %[[KP:.+]], %[[DIVISOR]] : vector<8xi32>
// CPU:         arith.select %[[ZERO]], %[[KP]], %[[REM]] : vector<8xi1>, vector<8xi32>

// CUDA threads run the regions on scalars.
// CUDA-LABEL: func.func private @edges__tile_classes0(
// CUDA:         %[[ZERO:.+]] = arith.cmpi eq, %[[P:.+]], %c0_i32 : i32
// CUDA:         %[[MINUS_ONE:.+]] = arith.cmpi eq, %[[P]], %c-1_i32 : i32
// CUDA:         %[[EITHER:.+]] = arith.ori %[[ZERO]], %[[MINUS_ONE]] : i1
// CUDA:         %[[DIVISOR:.+]] = arith.select %[[EITHER]], %c1_i32, %[[P]] : i32
// CUDA:         %[[REM:.+]] = arith.remsi %[[KP:.+]], %[[DIVISOR]] : i32
// CUDA:         arith.select %[[ZERO]], %[[KP]], %[[REM]] : i32
// CUDA-LABEL: func.func private @edges__flash2(
// CUDA:         arith.cmpf uno
// CUDA:         arith.fptosi
// CUDA:         arith.select %{{.+}}, %c2147483647_i32, %{{.+}} : i32
