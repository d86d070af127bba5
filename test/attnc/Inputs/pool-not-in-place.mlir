// A batch's recurrence over a state pool (pool(...)) whose pool is no
// in-place argument.
func.func @gdn(%q: tensor<?x2x?x8xf32>, %v: tensor<?x4x?x8xf32>,
               %pool: tensor<?x4x8x8xf32> {attn.name = "states"},
               %idx: tensor<?xi32>)
    -> (tensor<?x4x?x8xf32>, tensor<?x4x8x8xf32>) {
  %o, %s = attn.linear_recurrence linear %q, %q, %v
      state(%pool : tensor<?x4x8x8xf32>) pool(%idx : tensor<?xi32>)
      : tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x4x?x8xf32>
  return %o, %s : tensor<?x4x?x8xf32>, tensor<?x4x8x8xf32>
}
