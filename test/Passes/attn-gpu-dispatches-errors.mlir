// RUN: attn-opt %s -split-input-file -attn-gpu-dispatches -verify-diagnostics

// What the CUDA kernels do not run yet is refused with the op's location.

func.func @selection(%q: tensor<?x2x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                     %sel: tensor<?x2x?x4xi32>) -> tensor<?x2x?x16xf32> {
  // expected-error @below {{no CUDA lowering: key selections (sparsity, trees) are not lowered yet}}
  %o = attn.sparse_sdpa %q, %k, %k, %sel
      {block_size = 16, mask = #attn.mask<causal>}
      : tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>,
        tensor<?x2x?x4xi32>
  return %o : tensor<?x2x?x16xf32>
}

// -----

func.func @ungated(%o: tensor<?x2x?x16xf32>, %g: tensor<?x2x?x16xf32>)
    -> tensor<?x2x?x16xf32> {
  // expected-error @below {{no CUDA lowering for 'attn.gate' yet}}
  %r = attn.gate %o, %g : tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
  return %r : tensor<?x2x?x16xf32>
}
