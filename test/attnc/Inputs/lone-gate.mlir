// A gate on an entry input: no attention to fuse it into, and no kernel
// runs an unfused gate.
func.func @lone_gate(%o: tensor<?x2x?x16xf32>, %g: tensor<?x2x?x16xf32>)
    -> tensor<?x2x?x16xf32> {
  %r = attn.gate %o, %g : tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
  return %r : tensor<?x2x?x16xf32>
}
