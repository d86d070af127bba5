func.func @loop(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                %v: tensor<?x2x?x16xf32>) -> tensor<?x4x?x16xf32> {
  %o = func.call @loop(%q, %k, %v)
      : (tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>)
      -> tensor<?x4x?x16xf32>
  return %o : tensor<?x4x?x16xf32>
}
