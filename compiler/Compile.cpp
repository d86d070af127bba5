//===- Compile.cpp - attn IR to a compiled model --------------------------===//

#include "compiler/Compile.h"

#include "compiler/BinaryWriter.h"
#include "compiler/Pipelines.h"
#include "passes/kernels/cuda/SimtKernels.h"

#include "Attn/AttnDialect.h"
#include "AttnKernel/AttnKernelOps.h"
#include "frontend/HuggingFaceConfig.h"
#include "frontend/ModelToAttn.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::attn;

namespace {
llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

void mlir::attn::registerCompilerDialects(DialectRegistry &registry) {
  registry.insert<AttnDialect, AttnKernelDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  // CUDA: gpu.module -> LLVM IR -> PTX (gpu-module-to-binary).
  registerGPUDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
}

namespace {

/// CPU code for the attn IR in `module`, lowered in place. Returns
/// std::nullopt when `stage` stops before the code exists.
llvm::Expected<std::optional<CpuCode>>
compileCpu(ModuleOp module, CompileStage stage, const CpuTarget &cpu,
           const CompileOptions &options, BinaryWriter &writer) {
  MLIRContext *context = module.getContext();
  std::string tilingText;
  llvm::raw_string_ostream tilingStream(tilingText);
  PassManager dispatch(context);
  if (options.cpuRunsCudaKernels) {
    GpuDispatchOptions tiling;
    tiling.flashRowTiles = options.cudaFlashRowTiles;
    tiling.flashWarpgroups = options.cudaFlashWarpgroups;
    tiling.flashProducer = options.cudaFlashProducer;
    buildGpuDispatchPipeline(dispatch, tiling);
    tilingStream << "cuda_kernels_on_cpu block_threads=" << tiling.blockThreads
                 << " split_keys=" << tiling.splitKeys
                 << " decode_max_queries=" << tiling.decodeMaxQueries;
  } else {
    // The kernels are tiled for the target's vector width: 4 query vectors
    // per flash workgroup, column tiles of recurrent states down to 4
    // vectors.
    CpuDispatchOptions tiling;
    tiling.vectorWidth = cpu.vectorWidth;
    tiling.queryTile = 4 * cpu.vectorWidth;
    // On AMX, flash steps of 64 keys halve the passes over acc per key:
    // bf16 prefill 1.13x faster than with 32 (f32's, 0.94-0.98x); tiles of
    // 128 queries halve the key and value rows each query tile streams
    // and pairs: 1.1-1.2x at D = 256 and L = 2K, 1.05-1.09x at D = 128
    // and L = 8K, even at D = 128 and L = 2K (bench/RESULTS.md).
    if (cpu.amxTiles) {
      tiling.keyTile = 64;
      tiling.queryTile = 128;
    }
    tiling.stateColumns =
        options.stateColumns > 0 ? options.stateColumns : 4 * cpu.vectorWidth;
    tiling.recurrentMaxSteps = options.recurrentMaxSteps;
    tiling.bf16Dot = cpu.bf16Dot;
    tiling.amxTiles = cpu.amxTiles;
    tiling.prefetchIntoL1 = cpu.prefetchIntoL1;
    buildCpuDispatchPipeline(dispatch, tiling);
    tilingStream << "vector_width=" << tiling.vectorWidth
                 << " query_tile=" << tiling.queryTile
                 << " key_tile=" << tiling.keyTile
                 << " split_keys=" << tiling.splitKeys
                 << " decode_max_queries=" << tiling.decodeMaxQueries
                 << " recurrent_max_steps=" << tiling.recurrentMaxSteps
                 << " state_columns=" << tiling.stateColumns
                 << (tiling.bf16Dot ? " bf16_dot" : "")
                 << (tiling.amxTiles ? " amx_tiles" : "")
                 << (tiling.prefetchIntoL1 ? " prefetch_into_l1" : "");
  }
  if (failed(dispatch.run(module)))
    return error("lowering to CPU dispatches (attn-cpu-dispatch) failed");
  if (stage == CompileStage::Dispatch)
    return std::nullopt;

  // The host programs go into the binary before the kernel lowering drops
  // them from the module.
  if (failed(writer.addEntries(module, CodeTarget::Cpu)))
    return error("writing the entries' host programs failed");
  PassManager lower(context);
  buildCpuKernelLoweringPipeline(lower, options.cpuStressesCudaKernels);
  if (failed(lower.run(module)))
    return error("lowering the CPU kernels to LLVM (attn-cpu-lower-to-llvm) "
                 "failed");
  if (stage == CompileStage::LlvmDialect)
    return std::nullopt;

  llvm::Expected<std::string> sharedObject = emitCpuSharedObject(module, cpu);
  if (!sharedObject)
    return sharedObject.takeError();
  return CpuCode{cpu, tilingText, std::move(*sharedObject)};
}

/// CUDA code for the attn IR in `module`, lowered in place. Returns the
/// PTX alone for CompileStage::Ptx, std::nullopt for the stages before.
llvm::Expected<std::optional<CudaCode>>
compileCuda(ModuleOp module, CompileStage stage, const CudaTarget &target,
            const CompileOptions &options, BinaryWriter &writer) {
  MLIRContext *context = module.getContext();
  // wgmma exists on sm_90a alone (not sm_90, nor later chips).
  if (options.cudaFlashWarpgroups > 0 && target.chip != "sm_90a")
    return error("warpgroup products (wgmma) need --sm sm_90a, not " +
                 target.chip);
  GpuDispatchOptions tiling;
  tiling.maxSharedBytes = target.maxSharedBytesPerBlock();
  tiling.flashRowTiles = options.cudaFlashRowTiles;
  tiling.flashWarpgroups = options.cudaFlashWarpgroups;
  tiling.flashProducer = options.cudaFlashProducer;
  PassManager dispatch(context);
  buildGpuDispatchPipeline(dispatch, tiling);
  if (failed(dispatch.run(module)))
    return error("lowering to CUDA dispatches (attn-gpu-dispatch) failed");
  if (stage == CompileStage::Dispatch)
    return std::nullopt;

  if (failed(writer.addEntries(module, CodeTarget::Cuda)))
    return error("writing the entries' CUDA host programs failed");
  CudaCode code;
  code.chip = target.chip;
  llvm::raw_string_ostream(code.tiling)
      << "block_threads=" << tiling.blockThreads
      << " split_keys=" << tiling.splitKeys
      << " decode_max_queries=" << tiling.decodeMaxQueries;
  for (auto kernel : module.getOps<func::FuncOp>()) {
    if (!kernel->hasAttr("attn.kernel"))
      continue;
    FailureOr<SimtLaunch> launch = SimtLaunch::get(kernel);
    if (failed(launch))
      return error("reading the launch of CUDA kernel '" + kernel.getSymName() +
                   "' failed");
    if (launch->sharedBytes > target.maxSharedBytesPerBlock())
      return error("CUDA kernel '" + kernel.getSymName() + "' needs " +
                   llvm::Twine(launch->sharedBytes) +
                   " bytes of shared memory per block; " + target.chip +
                   " allows " + llvm::Twine(target.maxSharedBytesPerBlock()) +
                   " (a smaller chunk_size, max_tree_nodes or head dims need less)");
    code.kernels.push_back({kernel.getSymName().str(), launch->blockThreads,
                            launch->perBlock, launch->sharedBytes});
  }

  GpuLoweringOptions lowering;
  lowering.chip = target.chip;
  lowering.features = target.ptxFeatures();
  PassManager lower(context);
  buildGpuKernelLoweringPipeline(lower, lowering);
  if (failed(lower.run(module)))
    return error("lowering the CUDA kernels to NVVM (attn-gpu-lower-to-nvvm) "
                 "failed");
  if (stage == CompileStage::LlvmDialect)
    return std::nullopt;
  llvm::Expected<std::string> ptx = emitPtx(module, target);
  if (!ptx)
    return ptx.takeError();
  code.ptx = std::move(*ptx);
  if (stage == CompileStage::Ptx)
    return code;
  llvm::Expected<std::string> cubin = assembleCubin(code.ptx, target);
  if (!cubin)
    return cubin.takeError();
  code.cubin = std::move(*cubin);
  return code;
}

} // namespace

llvm::Expected<std::string>
mlir::attn::compile(ModuleOp module, CompileStage stage, const CpuTarget &cpu,
                    llvm::StringRef modelName, const CompileOptions &options) {
  MLIRContext *context = module.getContext();
  PassManager optimize(context);
  buildAttnOptimizationPipeline(optimize);
  if (failed(optimize.run(module)))
    return error("the attention-level pipeline (attn-optimize) failed");
  if (llvm::none_of(module.getOps<func::FuncOp>(),
                    [](func::FuncOp f) { return f.isPublic(); }))
    return error("the module defines no entry: each entry is a public "
                 "func.func with a body");
  if (stage == CompileStage::Optimized)
    return "";

  bool withCuda = options.targets != TargetSet::Cpu;
  bool withCpu =
      options.targets != TargetSet::Cuda && stage != CompileStage::Ptx;
  if (stage == CompileStage::Ptx && !withCuda)
    return error("PTX exists only for the CUDA target (--target cuda or all)");

  // Each target lowers its own copy of the optimized module; stages print
  // the CPU one when there are both.
  OwningOpRef<ModuleOp> cudaCopy;
  ModuleOp cudaModule = module;
  if (withCuda && withCpu) {
    cudaCopy = module.clone();
    cudaModule = *cudaCopy;
  }
  BinaryWriter writer;
  std::optional<CpuCode> cpuCode;
  if (withCpu) {
    auto code = compileCpu(module, stage, cpu, options, writer);
    if (!code)
      return code.takeError();
    if (!*code)
      return "";
    cpuCode = std::move(**code);
  }
  std::optional<CudaCode> cudaCode;
  if (withCuda) {
    auto code = compileCuda(cudaModule, stage, options.cuda, options, writer);
    if (!code)
      return code.takeError();
    if (!*code)
      return "";
    if (stage == CompileStage::Ptx)
      return (*code)->ptx;
    cudaCode = std::move(**code);
  }
  return writer.finish(modelName, cpuCode ? &*cpuCode : nullptr,
                       cudaCode ? &*cudaCode : nullptr);
}

llvm::Expected<std::string>
mlir::attn::compileModelDescription(llvm::StringRef json, const CpuTarget &cpu,
                                    const CompileOptions &options) {
  llvm::Expected<frontend::ModelDescription> description =
      frontend::parseModelInput(json);
  if (!description)
    return description.takeError();
  DialectRegistry registry;
  registerCompilerDialects(registry);
  MLIRContext context(registry);
  // The errors of a variant's attn IR (SPEC §7 `{"func": ...}`) come back in
  // the error, as attnc prints them: location, then message.
  OwningOpRef<ModuleOp> module;
  {
    std::string diagnostics;
    ScopedDiagnosticHandler collect(&context, [&](Diagnostic &diagnostic) {
      llvm::raw_string_ostream os(diagnostics);
      os << (diagnostics.empty() ? "" : "\n");
      if (auto at = diagnostic.getLocation()->findInstanceOf<FileLineColLoc>())
        os << at.getFilename().getValue() << ":" << at.getLine() << ":"
           << at.getColumn() << ": ";
      os << diagnostic;
      return success();
    });
    module = frontend::buildAttnModule(context, *description);
    if (!module || failed(verify(*module)))
      return error(diagnostics);
  }
  return compile(*module, CompileStage::Binary, cpu, description->model,
                 options);
}
