//===- AttnKernelDialect.td - The attn_kernel dialect ------*- tablegen -*-===//

#ifndef ATTN_KERNEL_DIALECT_TD
#define ATTN_KERNEL_DIALECT_TD

include "mlir/IR/OpBase.td"

def AttnKernel_Dialect : Dialect {
  let name = "attn_kernel";
  let cppNamespace = "::mlir::attn";
  let summary = "How attn's targets run attention: dispatches and kernel primitives";
  let description = [{
    The ops below attn's dispatch boundary. Entry lowering turns each entry
    of `attn` ops into a host program of `attn_kernel.dispatch` ops (sized
    by `attn_kernel.worker_count`) over kernel functions; the CUDA kernels
    are built from `attn_kernel.warp_mma` and `attn_kernel.async_copy` /
    `attn_kernel.async_wait`, which their passes lower to NVVM or to loops.
    None of these ops is written by users.
  }];
}

class AttnKernel_Op<string mnemonic, list<Trait> traits = []>
    : Op<AttnKernel_Dialect, mnemonic, traits>;

#endif // ATTN_KERNEL_DIALECT_TD
