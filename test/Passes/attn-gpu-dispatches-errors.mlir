// RUN: attn-opt %s -split-input-file -attn-gpu-dispatches -verify-diagnostics

// What the CUDA kernels do not run is refused with the op's location.

func.func @ungated(%o: tensor<?x2x?x16xf32>, %g: tensor<?x2x?x16xf32>)
    -> tensor<?x2x?x16xf32> {
  // expected-error @below {{no CUDA lowering for 'attn.gate' yet}}
  %r = attn.gate %o, %g : tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
  return %r : tensor<?x2x?x16xf32>
}
