func.func private @unused(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                          %v: tensor<?x2x?x16xf32>) -> tensor<?x4x?x16xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
  return %o : tensor<?x4x?x16xf32>
}
