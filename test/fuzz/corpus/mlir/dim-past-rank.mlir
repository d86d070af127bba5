func.func @full0(%arg0: tensor<?x8x?x64xf32> {attn.name = "q"}, %arg1: tensor<?x2x?x64xf32> {attn.name = "k"}, %arg2: tensor<?x2x?x64xf32> {attn.name = "v"}, %arg4: tensor<?x2x?x2x64xf32> {attn.name = "kmeta"}) -> (tensor<?x8x?x64xf32> {attn.name = "o"}) {
  %c2 = arith.constant 4294967296 : index
  %dim = tensor.dim %arg1, %c2 : tensor<?x2x?x64xf32>
  %0 = attn.select_topk %arg0, %arg4, %dim {block_size = 16 : i64, local_blocks = 1 : i64, mask = #attn.mask<causal>, sink_blocks = 1 : i64, top_k = 64 : i64} : tensor<?x8x?x64xf32>, tensor<?x2x?x2x64xf32>
  %output = attn.sparse_sdpa %arg0, %arg1, %arg2, %0 {block_size = 16 : i64, mask = #attn.mask<causal>} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x8x?x?xi32>
  return %output : tensor<?x8x?x64xf32>
}
