func.func @f(%k: tensor<?x2x?x65536xf32> {attn.name = "k"}) -> (tensor<?x2x?x2x65536xf32> {attn.name = "m"}) {
  %m = attn.block_meta %k {block_size = 16 : i64} : tensor<?x2x?x65536xf32>
  return %m : tensor<?x2x?x2x65536xf32>
}
