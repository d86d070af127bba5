//===- Compile.h - attn IR to a compiled model -----------------*- C++ -*-===//
//
// The whole compiler after the frontend, as one library call: the
// registered pipelines of Pipelines.h in order, CPU code generation and
// the .attnb writer. attnc and the end-to-end tests both use it.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_COMPILE_H
#define ATTN_COMPILER_COMPILE_H

#include "compiler/CpuTarget.h"
#include "compiler/CudaTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir::attn {

/// Where compilation stops; each stage leaves `module` in that form (for
/// the CPU code when compiling for both targets).
enum class CompileStage {
  Optimized,   // attn IR after attn-optimize
  Dispatch,    // host dispatch programs + kernels (attn-cpu/gpu-dispatch)
  LlvmDialect, // kernels in the LLVM / NVVM dialects
  Ptx,         // the PTX of the CUDA kernels (returned as text)
  Binary,      // the .attnb bytes
};

/// The code a binary carries.
enum class TargetSet { Cpu, Cuda, All };

/// Choices that change which kernels run, never what they compute.
struct CompileOptions {
  /// Recurrences of at most this many steps run step by step; longer ones
  /// take the chunked form (1: only decode steps).
  int64_t recurrentMaxSteps = 1;
  /// The narrowest column tile of a recurrent state (0: 4 vectors of the
  /// target).
  int64_t stateColumns = 0;
  /// Which code to build; `cuda` says for which GPU.
  TargetSet targets = TargetSet::Cpu;
  CudaTarget cuda;
  /// Test aid: the CPU code runs the CUDA kernels' one-thread bodies (one
  /// workgroup per CUDA thread) instead of the CPU kernels, so their
  /// arithmetic is checked on machines without a GPU.
  bool cpuRunsCudaKernels = false;
  /// Test aid, with cpuRunsCudaKernels: the CUDA block kernels run as a
  /// GPU may run them at their least convenient, so that a kernel that
  /// works on the CPU by chance fails: their asynchronous copies landing
  /// as late as their waits allow, their targets NaN until then
  /// (-attn-defer-async-copies), a tile read before the wait for its
  /// copies then not there yet, and the results of asynchronous warpgroup
  /// products appearing only at their waits, NaN where their operands
  /// changed in flight (-attn-defer-warpgroup-products); their threads in
  /// another order
  /// (-attn-reorder-thread-loops: each thread loop last thread first,
  /// warp-synchronized loops warp by warp), a race then reading something
  /// else, and their shared and register buffers starting as NaN
  /// (-attn-poison-kernel-buffers), an element read before any write then
  /// giving NaN.
  bool cpuStressesCudaKernels = false;
  /// Row tiles of 16 per warp in the CUDA prefill flash kernels (1 or 2;
  /// the benchmark compares them; 1 was faster on an H100).
  int64_t cudaFlashRowTiles = 1;
  /// The CUDA prefill flash kernels of f16/bf16 compute their products on
  /// sm_90a's warpgroup instructions (wgmma) with this many warpgroups of
  /// 64 rows per block (1 or 2) instead of mma.sync (0). 0 by default
  /// until wgmma has been checked and timed on an H100.
  int64_t cudaFlashWarpgroups = 0;
  /// With cudaFlashWarpgroups, a producer warpgroup more per block stages
  /// the k and v tiles for the product warpgroups, handing them on through
  /// mbarriers (FlashAttention-3's warp specialization). Off by default
  /// until an H100 has timed it.
  bool cudaFlashProducer = false;
};

/// Lowers `module` (attn IR, verified) in place up to `stage`. For
/// CompileStage::Binary returns the .attnb bytes, for CompileStage::Ptx the
/// PTX, otherwise "". Diagnostics
/// of failing passes go to the context's handler; the error says which
/// step failed.
llvm::Expected<std::string> compile(ModuleOp module, CompileStage stage,
                                    const CpuTarget &cpu,
                                    llvm::StringRef modelName,
                                    const CompileOptions &options = {});

/// Parses a SPEC §3 model description or a Hugging Face config.json, builds
/// its attn IR and compiles it to .attnb bytes for `cpu` (what
/// `attnc MODEL.json -o OUT.attnb` does).
llvm::Expected<std::string>
compileModelDescription(llvm::StringRef json, const CpuTarget &cpu,
                        const CompileOptions &options = {});

/// Registers on `registry` every dialect and translation the compiler
/// needs, for tools and tests that create their own MLIRContext.
void registerCompilerDialects(DialectRegistry &registry);

} // namespace mlir::attn

#endif // ATTN_COMPILER_COMPILE_H
