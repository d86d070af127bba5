//===- Pipelines.cpp - attn compilation pipelines -------------------------===//

#include "compiler/Pipelines.h"

#include "passes/Passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void mlir::attn::buildAttnOptimizationPipeline(OpPassManager &pm) {
  // attn IR written by hand may call private helpers: their bodies go into
  // the entries, and the helpers away (every func.func left is an entry).
  pm.addPass(createInlinerPass());
  pm.addPass(createSymbolDCEPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createAttnFuseEpilogues());
  pm.addPass(createCanonicalizerPass());
}

/// Canonicalization and CSE after a dispatch pass, with equal layers'
/// kernels merged so that each is cleaned up, lowered and compiled once:
/// as built (the dispatch passes build a layer's kernels whatever the
/// layers before it built; a 48-layer model's cleanup took 2.6 of 4.9 s
/// on CUDA), and again after the cleanup, for kernels it makes equal.
static void addCleanupMergingKernels(OpPassManager &pm) {
  pm.addPass(attn::createAttnMergeIdenticalKernels());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(attn::createAttnMergeIdenticalKernels());
}

void mlir::attn::buildCpuDispatchPipeline(OpPassManager &pm,
                                          const CpuDispatchOptions &options) {
  AttnCpuDispatchesOptions dispatch;
  dispatch.vectorWidth = options.vectorWidth;
  dispatch.queryTile = options.queryTile;
  dispatch.keyTile = options.keyTile;
  dispatch.splitKeys = options.splitKeys;
  dispatch.decodeMaxQueries = options.decodeMaxQueries;
  dispatch.recurrentMaxSteps = options.recurrentMaxSteps;
  dispatch.stateColumns = options.stateColumns;
  dispatch.bf16Dot = options.bf16Dot;
  dispatch.amxTiles = options.amxTiles;
  dispatch.prefetchIntoL1 = options.prefetchIntoL1;
  pm.addPass(createAttnCpuDispatches(dispatch));
  addCleanupMergingKernels(pm);
}

void mlir::attn::buildCpuKernelLoweringPipeline(OpPassManager &pm,
                                                bool stressBlockKernels) {
  pm.addPass(createAttnCpuKernelAbi());
  // Block kernels of the CUDA target, run on the CPU: each lane's share of
  // a warp's matrix product as loops, its asynchronous copies done at once
  // (when stressed, the copies land and the asynchronous products' results
  // appear as late as their waits allow).
  if (stressBlockKernels)
    pm.addPass(createAttnDeferWarpgroupProducts());
  pm.addPass(createAttnWarpMmaToLoops());
  if (stressBlockKernels)
    pm.addPass(createAttnDeferAsyncCopies());
  pm.addPass(createAttnAsyncCopyToLoops());
  if (stressBlockKernels) {
    pm.addPass(createAttnReorderThreadLoops());
    pm.addPass(createAttnPoisonKernelBuffers());
  }
  pm.addPass(createAttnExpandMath());
  pm.addNestedPass<func::FuncOp>(createAttnCpuApproximateMath());
  pm.addPass(createCanonicalizerPass());
  // bf16 <-> f32 conversions as integer arithmetic: x86 has no bf16
  // instructions below AVX512-BF16, and LLVM would call a runtime library
  // the kernels' shared object does not link.
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  pm.addPass(createSCFToControlFlowPass());
  // AVX512-BF16's dot products (CpuTiling::bf16Dot) and AMX's tile ops
  // (CpuTiling::amxTiles) as LLVM intrinsics.
  ConvertVectorToLLVMPassOptions vectorToLlvm;
  vectorToLlvm.x86Vector = true;
  vectorToLlvm.amx = true;
  pm.addPass(createConvertVectorToLLVMPass(vectorToLlvm));
  // The threads' views of block kernels' register buffers (subviews).
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
}

void mlir::attn::buildGpuDispatchPipeline(OpPassManager &pm,
                                          const GpuDispatchOptions &options) {
  AttnGpuDispatchesOptions dispatch;
  dispatch.blockThreads = options.blockThreads;
  dispatch.splitKeys = options.splitKeys;
  dispatch.decodeMaxQueries = options.decodeMaxQueries;
  dispatch.maxSharedBytes = options.maxSharedBytes;
  dispatch.flashRowTiles = options.flashRowTiles;
  dispatch.flashWarpgroups = options.flashWarpgroups;
  dispatch.flashProducer = options.flashProducer;
  pm.addPass(createAttnGpuDispatches(dispatch));
  // Device memory cannot be read on the host: index inputs are checked
  // by the kernels.
  pm.addPass(createAttnGpuIndexChecks());
  addCleanupMergingKernels(pm);
}

void mlir::attn::buildGpuKernelLoweringPipeline(
    OpPassManager &pm, const GpuLoweringOptions &options) {
  AttnGpuOutlineKernelsOptions outline;
  outline.chip = options.chip;
  outline.features = options.features;
  pm.addPass(createAttnGpuOutlineKernels(outline));
  AttnWarpMmaToNvvmOptions mma;
  mma.chip = options.chip;
  pm.addPass(createAttnWarpMmaToNvvm(mma));
  AttnAsyncCopyToNvvmOptions copies;
  copies.chip = options.chip;
  pm.addPass(createAttnAsyncCopyToNvvm(copies));
  pm.addPass(createCanonicalizerPass());
  // Views of global scratch rows (memref.subview) as pointer arithmetic.
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  // ldmatrix (from the tensor-core products) to nvvm.ldmatrix, the
  // staging copies to cp.async.
  pm.addPass(createConvertNVGPUToNVVMPass());
  // math ops become libdevice calls (__nv_expf, ...), linked in when the
  // PTX is made; those libdevice has no call for (ctlz, ctpop, cttz,
  // trunc) LLVM intrinsics, which NVPTX selects.
  pm.addPass(createAttnExpandMath());
  pm.addNestedPass<gpu::GPUModuleOp>(createConvertGpuOpsToNVVMOps());
  pm.addNestedPass<gpu::GPUModuleOp>(createConvertMathToLLVMPass());
  // NVVM ops written as inline PTX (wgmma.mma_async) become llvm.inline_asm.
  pm.addPass(createConvertNVVMToLLVMPass());
  pm.addPass(createAttnNvvmExternDynamicShared());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
}

void mlir::attn::registerAttnPipelines() {
  PassPipelineRegistration<>(
      "attn-optimize",
      "Attention-level optimization: canonicalize and fuse epilogues",
      [](OpPassManager &pm) { buildAttnOptimizationPipeline(pm); });
  PassPipelineRegistration<CpuDispatchOptions>(
      "attn-cpu-dispatch",
      "Entries to host dispatch programs and CPU kernels (scf/vector/memref)",
      [](OpPassManager &pm, const CpuDispatchOptions &options) {
        buildCpuDispatchPipeline(pm, options);
      });
  PassPipelineRegistration<>(
      "attn-cpu-lower-to-llvm",
      "CPU kernels to the LLVM dialect with the runtime's calling convention",
      [](OpPassManager &pm) { buildCpuKernelLoweringPipeline(pm); });
  PassPipelineRegistration<GpuDispatchOptions>(
      "attn-gpu-dispatch",
      "Entries to host dispatch programs and one-thread CUDA kernels",
      [](OpPassManager &pm, const GpuDispatchOptions &options) {
        buildGpuDispatchPipeline(pm, options);
      });
  PassPipelineRegistration<GpuLoweringOptions>(
      "attn-gpu-lower-to-nvvm",
      "One-thread kernels to a gpu.module in the NVVM/LLVM dialects",
      [](OpPassManager &pm, const GpuLoweringOptions &options) {
        buildGpuKernelLoweringPipeline(pm, options);
      });
}
