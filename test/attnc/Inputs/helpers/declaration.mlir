func.func private @elsewhere(tensor<?x4x?x16xf32>) -> tensor<?x4x?x16xf32>

func.func @entry(%q: tensor<?x4x?x16xf32>) -> tensor<?x4x?x16xf32> {
  %o = func.call @elsewhere(%q) : (tensor<?x4x?x16xf32>) -> tensor<?x4x?x16xf32>
  return %o : tensor<?x4x?x16xf32>
}
