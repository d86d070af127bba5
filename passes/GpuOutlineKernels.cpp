//===- GpuOutlineKernels.cpp - One-thread kernels into a gpu.module -------===//
//
// Moves every kernel function into `gpu.module @attn_kernels` (with the
// NVVM target) as a `gpu.func` kernel taking the bindings and the
// dispatch's thread count: the body runs for global thread index
// blockIdx.x * blockDim.x + threadIdx.x when that index is below the count.
// The host functions are dropped; their dispatch programs are in the
// binary by then.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNGPUOUTLINEKERNELS
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

struct AttnGpuOutlineKernels final
    : mlir::attn::impl::AttnGpuOutlineKernelsBase<AttnGpuOutlineKernels> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *context = &getContext();
    SmallVector<func::FuncOp> kernels, hosts;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func->hasAttr("attn.kernel"))
        kernels.push_back(func);
      else if (func->hasAttr("attn.entry"))
        hosts.push_back(func);
    }
    for (func::FuncOp host : hosts)
      host.erase();
    if (kernels.empty())
      return;

    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(context));
    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    auto target = NVVM::NVVMTargetAttr::get(
        context, /*optLevel=*/3, "nvptx64-nvidia-cuda", chip, features);
    auto gpuModule =
        gpu::GPUModuleOp::create(builder, module.getLoc(), "attn_kernels",
                                 builder.getArrayAttr({target}));

    for (func::FuncOp kernel : kernels) {
      if (failed(outline(kernel, gpuModule)))
        return signalPassFailure();
      kernel.erase();
    }
  }

  LogicalResult outline(func::FuncOp kernel, gpu::GPUModuleOp gpuModule) {
    auto tiling = kernel->getAttrOfType<DictionaryAttr>("attn.tiling");
    auto blockThreads =
        tiling ? tiling.getAs<IntegerAttr>("block_threads") : IntegerAttr();
    if (!blockThreads || !kernel.getBody().hasOneBlock())
      return kernel.emitError("not a one-thread kernel of "
                              "-attn-gpu-dispatches (attn.tiling has no "
                              "block_threads, or the body has several "
                              "blocks)");
    // Same signature: the last index argument is the thread count instead
    // of the thread's index.
    OpBuilder builder = OpBuilder::atBlockEnd(gpuModule.getBody());
    auto func =
        gpu::GPUFuncOp::create(builder, kernel.getLoc(), kernel.getSymName(),
                               kernel.getFunctionType());
    func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  builder.getUnitAttr());
    func.setKnownBlockSizeAttr(builder.getDenseI32ArrayAttr(
        {static_cast<int32_t>(blockThreads.getInt()), 1, 1}));
    for (StringRef name : {"attn.kernel", "attn.tiling"})
      func->setAttr(name, kernel->getAttr(name));

    Block &entry = func.getBody().front();
    ImplicitLocOpBuilder b(kernel.getLoc(), OpBuilder::atBlockBegin(&entry));
    Value thread = arith::AddIOp::create(
        b,
        arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                              gpu::BlockDimOp::create(b, gpu::Dimension::x)),
        gpu::ThreadIdOp::create(b, gpu::Dimension::x));
    Value count = entry.getArguments().back();
    Value inRange =
        arith::CmpIOp::create(b, arith::CmpIPredicate::ult, thread, count);
    auto guard = scf::IfOp::create(b, inRange, /*withElseRegion=*/false);
    gpu::ReturnOp::create(b);

    // Move the body under the guard, the thread index replacing the
    // workgroup id.
    Block &body = kernel.getBody().front();
    body.getTerminator()->erase();
    SmallVector<Value> replacements(entry.getArguments());
    replacements.back() = thread;
    Block *then = guard.thenBlock();
    then->getOperations().splice(then->begin(), body.getOperations());
    for (auto [from, to] : llvm::zip(body.getArguments(), replacements))
      from.replaceAllUsesWith(to);
    return success();
  }
};

} // namespace
