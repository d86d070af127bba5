// An in-place argument read again after its update.
func.func @lin(%q: tensor<?x2x?x8xf32>, %v: tensor<?x4x?x8xf32>,
               %s0: tensor<?x4x8x8xf32> {attn.name = "S", attn.in_place})
    -> (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x8x8xf32>) {
  %o, %s = attn.linear_recurrence linear %q, %q, %v
      state(%s0 : tensor<?x4x8x8xf32>)
      : tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x4x?x8xf32>
  %o2, %s2 = attn.linear_recurrence linear %q, %q, %v
      state(%s0 : tensor<?x4x8x8xf32>)
      : tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x4x?x8xf32>
  return %o, %o2, %s : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x8x8xf32>
}
