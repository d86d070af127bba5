// An in-place argument returned as something other than its update.
func.func @lin(%q: tensor<?x2x?x8xf32>, %v: tensor<?x4x?x8xf32>,
               %s0: tensor<?x4x8x8xf32> {attn.name = "S", attn.in_place},
               %s1: tensor<?x4x8x8xf32>)
    -> (tensor<?x4x?x8xf32>, tensor<?x4x8x8xf32>) {
  %o, %s = attn.linear_recurrence linear %q, %q, %v
      state(%s1 : tensor<?x4x8x8xf32>)
      : tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x4x?x8xf32>
  return %o, %s : tensor<?x4x?x8xf32>, tensor<?x4x8x8xf32>
}
