// A layer written once as a private helper and called by two entries, one
// of them through a second helper; @direct is the same layer written out.
func.func private @gated_layer(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                               %v: tensor<?x2x?x16xf32>, %g: tensor<?x4x?x16xf32>)
    -> tensor<?x4x?x16xf32> {
  %o = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>, softcap = 20.0}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
        tensor<?x4x?x16xf32>
  return %o : tensor<?x4x?x16xf32>
}

func.func private @outer(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                         %v: tensor<?x2x?x16xf32>, %g: tensor<?x4x?x16xf32>)
    -> tensor<?x4x?x16xf32> {
  %o = func.call @gated_layer(%q, %k, %v, %g)
      : (tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
         tensor<?x4x?x16xf32>) -> tensor<?x4x?x16xf32>
  return %o : tensor<?x4x?x16xf32>
}

func.func @helper(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                  %v: tensor<?x2x?x16xf32>, %gate: tensor<?x4x?x16xf32>)
    -> tensor<?x4x?x16xf32> {
  %out = func.call @gated_layer(%q, %k, %v, %gate)
      : (tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
         tensor<?x4x?x16xf32>) -> tensor<?x4x?x16xf32>
  return %out : tensor<?x4x?x16xf32>
}

func.func @nested(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                  %v: tensor<?x2x?x16xf32>, %gate: tensor<?x4x?x16xf32>)
    -> tensor<?x4x?x16xf32> {
  %out = func.call @outer(%q, %k, %v, %gate)
      : (tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
         tensor<?x4x?x16xf32>) -> tensor<?x4x?x16xf32>
  return %out : tensor<?x4x?x16xf32>
}

func.func @direct(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                  %v: tensor<?x2x?x16xf32>,
                  %gate: tensor<?x4x?x16xf32> {attn.name = "g"})
    -> (tensor<?x4x?x16xf32> {attn.name = "y"}) {
  %0 = attn.sdpa %q, %k, %v gate(%gate) {mask = #attn.mask<causal>, softcap = 20.0}
      : tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
        tensor<?x4x?x16xf32>
  return %0 : tensor<?x4x?x16xf32>
}
