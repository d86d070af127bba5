// attn.kv_append on a cache that is no in-place argument.
func.func @append(%k: tensor<?x2x8xf32>, %v: tensor<?x2x8xf32>,
                  %slots: tensor<?xi32>, %kc: tensor<?x4x2x8xf32>,
                  %vc: tensor<?x4x2x8xf32>)
    -> (tensor<?x4x2x8xf32>, tensor<?x4x2x8xf32>) {
  %kc2, %vc2 = attn.kv_append %k, %v, %slots into %kc, %vc
      : tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<?xi32>,
        tensor<?x4x2x8xf32>, tensor<?x4x2x8xf32>
  return %kc2, %vc2 : tensor<?x4x2x8xf32>, tensor<?x4x2x8xf32>
}
