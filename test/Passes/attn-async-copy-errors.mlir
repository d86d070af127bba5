// RUN: attn-opt %s -attn-async-copy-to-nvvm=chip=sm_90a -verify-diagnostics

// cp.async writes shared memory only: a target still in the default memory
// space (a block kernel not yet outlined) is refused, not miscompiled.
func.func @not_shared(%k: memref<?x128xbf16>, %ks: memref<64x136xbf16>, %i: index, %valid: i1) {
  // expected-error @+1 {{'attn_kernel.async_copy' op target must be in shared (workgroup) memory on the GPU, got 'memref<64x136xbf16>' (run -attn-gpu-outline-kernels first)}}
  attn_kernel.async_copy %k[%i, %i], %ks[%i, %i] if(%valid) elements(8)
      : memref<?x128xbf16>, memref<64x136xbf16>
  return
}
