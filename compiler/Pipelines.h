//===- Pipelines.h - attn compilation pipelines -----------------*- C++ -*-===//
//
// The pipelines attnc runs, as libraries so attn-opt and lit can run the
// same thing by name (`attn-opt --pass-pipeline='builtin.module(attn-...)'`
// or `attn-opt -attn-...`). In order:
//
//   attn-optimize           attn IR -> attn IR (canonicalize, fuse gates)
//
// then, per target, on its own copy of the optimized module:
//
//   attn-cpu-dispatch       attn IR -> host dispatch programs + kernels
//   (attnc serializes the host programs into the binary here)
//   attn-cpu-lower-to-llvm  kernels -> LLVM dialect, runtime ABI wrappers
//
//   attn-gpu-dispatch       attn IR -> host dispatch programs + one-thread
//                           kernels
//   (attnc serializes the host programs into the binary here)
//   attn-gpu-lower-to-nvvm  kernels -> gpu.module of NVVM/LLVM dialect
//   (then gpu-module-to-binary makes the PTX and ptxas the cubin:
//   compiler/CudaTarget.h)
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_PIPELINES_H
#define ATTN_COMPILER_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::attn {

/// Attention-level optimization on attn IR: canonicalize, fold output gates
/// into the attention epilogues, canonicalize again.
void buildAttnOptimizationPipeline(OpPassManager &pm);

/// The tile sizes of the CPU kernels (see -attn-cpu-dispatches).
struct CpuDispatchOptions : public PassPipelineOptions<CpuDispatchOptions> {
  Option<int64_t> vectorWidth{*this, "vector-width",
                              llvm::cl::desc("f32 lanes of a vector register"),
                              llvm::cl::init(8)};
  Option<int64_t> queryTile{*this, "query-tile",
                            llvm::cl::desc("query rows per flash workgroup"),
                            llvm::cl::init(32)};
  Option<int64_t> keyTile{*this, "key-tile",
                          llvm::cl::desc("keys per flash step"),
                          llvm::cl::init(32)};
  Option<int64_t> splitKeys{*this, "split-keys",
                            llvm::cl::desc("keys per split-KV workgroup"),
                            llvm::cl::init(512)};
  Option<int64_t> decodeMaxQueries{
      *this, "decode-max-queries",
      llvm::cl::desc("calls with at most this many query rows use split-KV"),
      llvm::cl::init(8)};
  Option<int64_t> recurrentMaxSteps{
      *this, "recurrent-max-steps",
      llvm::cl::desc("recurrences of at most this many steps run step by "
                     "step, longer ones chunked"),
      llvm::cl::init(1)};
  Option<int64_t> stateColumns{
      *this, "state-columns",
      llvm::cl::desc("value features of the state per column-tiled chunked "
                     "workgroup"),
      llvm::cl::init(32)};
  Option<bool> bf16Dot{
      *this, "bf16-dot",
      llvm::cl::desc("products of bf16 operands on AVX512-BF16 (needs "
                     "vector-width 16)"),
      llvm::cl::init(false)};
  Option<bool> amxTiles{
      *this, "amx-tiles",
      llvm::cl::desc("flash attention's bf16 products on AMX tiles (needs "
                     "bf16-dot)"),
      llvm::cl::init(false)};
  Option<bool> prefetchIntoL1{
      *this, "prefetch-into-l1",
      llvm::cl::desc("split-KV decode requests its coming K and V rows into "
                     "L1 instead of L2"),
      llvm::cl::init(false)};
};

/// attn IR (after attn-optimize) -> host dispatch programs (`attn.entry`
/// funcs on memrefs) and CPU kernels (`attn.kernel` funcs).
void buildCpuDispatchPipeline(OpPassManager &pm,
                              const CpuDispatchOptions &options);

/// Kernels -> LLVM dialect: the runtime ABI wrappers (host funcs dropped),
/// polynomial math, then the upstream conversions to LLVM.
/// `stressBlockKernels`: CompileOptions::cpuStressesCudaKernels.
void buildCpuKernelLoweringPipeline(OpPassManager &pm,
                                    bool stressBlockKernels = false);

/// The launch shapes of the CUDA kernels (see -attn-gpu-dispatches).
struct GpuDispatchOptions : public PassPipelineOptions<GpuDispatchOptions> {
  Option<int64_t> blockThreads{*this, "block-threads",
                               llvm::cl::desc("threads per CUDA block"),
                               llvm::cl::init(128)};
  Option<int64_t> splitKeys{*this, "split-keys",
                            llvm::cl::desc("keys per split-KV thread"),
                            llvm::cl::init(256)};
  Option<int64_t> decodeMaxQueries{
      *this, "decode-max-queries",
      llvm::cl::desc("calls with at most this many query rows use split-KV"),
      llvm::cl::init(8)};
  Option<int64_t> maxSharedBytes{
      *this, "max-shared-bytes",
      llvm::cl::desc("shared memory a block may use (the chip's limit)"),
      llvm::cl::init(227 * 1024)};
  Option<int64_t> flashRowTiles{
      *this, "flash-row-tiles",
      llvm::cl::desc("row tiles of 16 per warp in prefill flash kernels"),
      llvm::cl::init(1)};
  Option<int64_t> flashWarpgroups{
      *this, "flash-warpgroups",
      llvm::cl::desc("prefill flash kernels' products on this many "
                     "warpgroups per block (wgmma, sm_90a; 0: mma.sync)"),
      llvm::cl::init(0)};
  Option<bool> flashProducer{
      *this, "flash-producer",
      llvm::cl::desc("with flash-warpgroups, a producer warpgroup stages "
                     "the k and v tiles (mbarriers)"),
      llvm::cl::init(false)};
};

/// attn IR (after attn-optimize) -> host dispatch programs and one-thread
/// kernels for CUDA.
void buildGpuDispatchPipeline(OpPassManager &pm,
                              const GpuDispatchOptions &options);

/// The SM the NVVM lowering targets.
struct GpuLoweringOptions : public PassPipelineOptions<GpuLoweringOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("the SM"),
                           llvm::cl::init("sm_90a")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("PTX ISA version (+ptxNN)"),
                               llvm::cl::init("+ptx80")};
};

/// One-thread kernels -> `gpu.module @attn_kernels` with the NVVM target in
/// the NVVM/LLVM dialects (host funcs dropped).
void buildGpuKernelLoweringPipeline(OpPassManager &pm,
                                    const GpuLoweringOptions &options);

/// Registers the pipelines above: `attn-optimize`, `attn-cpu-dispatch`,
/// `attn-cpu-lower-to-llvm`, `attn-gpu-dispatch`, `attn-gpu-lower-to-nvvm`.
void registerAttnPipelines();

} // namespace mlir::attn

#endif // ATTN_COMPILER_PIPELINES_H
