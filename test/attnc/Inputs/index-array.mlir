// A dense array of index, which LLVM 22's parser crashes on.
func.func @f(%q: tensor<1x4x8x64xf32>) -> tensor<1x4x8x64xf32>
    attributes {offsets = array<index: 1, 2>} {
  %o = attn.sdpa %q, %q, %q {mask = #attn.mask<causal>}
      : tensor<1x4x8x64xf32>, tensor<1x4x8x64xf32>, tensor<1x4x8x64xf32>
  return %o : tensor<1x4x8x64xf32>
}
