// Key feature size differs from the query's.
func.func @f(%q: tensor<1x4x8x64xf32>, %k: tensor<1x4x8x32xf32>,
             %v: tensor<1x4x8x32xf32>) -> tensor<1x4x8x32xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<1x4x8x64xf32>, tensor<1x4x8x32xf32>, tensor<1x4x8x32xf32>
  return %o : tensor<1x4x8x32xf32>
}
