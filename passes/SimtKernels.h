//===- SimtKernels.h - One-thread kernels for CUDA --------------*- C++ -*-===//
//
// The kernels of -attn-gpu-dispatches. Each is written for one CUDA thread:
// a function `(bindings..., %workgroup: index)` like a CPU kernel, where
// the workgroup id is the thread's global index, and with scalar
// scf + memref + math only (no vector dialect, no cross-thread
// communication). That makes the same body two things:
//
//  * a CUDA kernel: -attn-gpu-outline-kernels moves it into a gpu.module,
//    computing the index from the block and thread ids and skipping
//    threads past the dispatch's count;
//  * a CPU kernel: the CPU lowering compiles it unchanged, one workgroup
//    per CUDA thread, so the CUDA kernels' arithmetic is tested against the
//    float64 reference on machines without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_SIMTKERNELS_H
#define ATTN_PASSES_SIMTKERNELS_H

#include "passes/SoftmaxAttentionKernels.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::attn {

/// The launch shape and work split of the CUDA kernels, recorded on every
/// kernel as `attn.tiling`.
struct GpuTiling {
  /// Threads per CUDA block.
  int64_t blockThreads = 128;
  /// Keys per split-KV thread.
  int64_t splitKeys = 256;
  /// Entries with at most this many query rows take the split-KV path.
  int64_t decodeMaxQueries = 8;

  DictionaryAttr toAttr(MLIRContext *context) const;
};

/// One thread per (batch, head, query row) over every visible key, online
/// softmax in registers. Bindings: q, k, v, [gate], o, [lse].
func::FuncOp buildSimtAttentionKernel(OpBuilder &builder, Location loc,
                                      StringRef name,
                                      const SoftmaxAttentionShape &shape,
                                      const GpuTiling &tiling,
                                      TypeRange bindingTypes);

/// One thread per (batch, head, query row, key range of splitKeys keys),
/// for decode. Bindings: q, k, v, partial o [B, H, Lq, S, Dv], partial lse
/// [B, H, Lq, S].
func::FuncOp buildSimtSplitKvKernel(OpBuilder &builder, Location loc,
                                    StringRef name,
                                    const SoftmaxAttentionShape &shape,
                                    const GpuTiling &tiling,
                                    TypeRange bindingTypes);

/// One thread per (batch, head, query row): merges the partials through
/// their log-sum-exp and applies the gate. Bindings: partial o, partial
/// lse, [gate], o, [lse].
func::FuncOp buildSimtMergeKernel(OpBuilder &builder, Location loc,
                                  StringRef name,
                                  const SoftmaxAttentionShape &shape,
                                  const GpuTiling &tiling,
                                  TypeRange bindingTypes);

} // namespace mlir::attn

#endif // ATTN_PASSES_SIMTKERNELS_H
