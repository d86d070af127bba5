// attn.page_meta_update on metadata that is no in-place argument.
func.func @refresh(%kc: tensor<?x4x2x8xf32>, %slots: tensor<?xi32>,
                   %meta: tensor<?x2x2x8xf32>) -> tensor<?x2x2x8xf32> {
  %meta2 = attn.page_meta_update %kc, %slots into %meta
      : tensor<?x4x2x8xf32>, tensor<?xi32>, tensor<?x2x2x8xf32>
  return %meta2 : tensor<?x2x2x8xf32>
}
