//===- CpuKernelAbi.cpp - The runtime's calling convention for kernels ----===//
//
// The wrapper builds each binding's memref descriptor as an LLVM struct and
// hands it to the kernel through an unrealized_conversion_cast; once
// func-to-llvm has converted the memref types to the same struct,
// reconcile-unrealized-casts removes the casts. The descriptor layout is the
// default one of MemRefToLLVM: {allocated, aligned, offset, sizes[R],
// strides[R]}.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNCPUKERNELABI
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;

namespace {

/// Adds `attn_kernel_<name>` calling `kernel`.
LogicalResult addWrapper(func::FuncOp kernel) {
  MLIRContext *context = kernel.getContext();
  OpBuilder builder(kernel);
  builder.setInsertionPointAfter(kernel);
  auto ptrType = LLVM::LLVMPointerType::get(context);
  Type i64 = builder.getI64Type();
  auto wrapper = func::FuncOp::create(
      builder, kernel.getLoc(), ("attn_kernel_" + kernel.getSymName()).str(),
      builder.getFunctionType({ptrType, ptrType, i64}, {}));
  wrapper->setAttr("attn.kernel_wrapper", kernel.getSymNameAttr());
  Block *body = wrapper.addEntryBlock();
  ImplicitLocOpBuilder b(kernel.getLoc(), builder);
  b.setInsertionPointToStart(body);
  Value buffers = body->getArgument(0), dims = body->getArgument(1);

  SmallVector<Value> callArgs;
  int64_t dimOffset = 0;
  ArrayRef<Type> argTypes = kernel.getArgumentTypes();
  for (auto [index, type] : llvm::enumerate(argTypes.drop_back())) {
    auto memref = dyn_cast<MemRefType>(type);
    if (!memref || !memref.getLayout().isIdentity())
      return kernel.emitError()
             << "kernel argument #" << index
             << " must be a memref with the identity layout, got " << type;
    int64_t rank = memref.getRank();
    auto arrayType = LLVM::LLVMArrayType::get(i64, rank);
    SmallVector<Type> fields{ptrType, ptrType, i64};
    if (rank > 0)
      fields.append({arrayType, arrayType});
    auto descType = LLVM::LLVMStructType::getLiteral(context, fields);

    auto load = [&](Type t, Value base, int64_t offset) -> Value {
      Value address = LLVM::GEPOp::create(
          b, ptrType, t, base,
          ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(offset)});
      return LLVM::LoadOp::create(b, t, address);
    };
    Value pointer = load(ptrType, buffers, index);
    Value desc = LLVM::UndefOp::create(b, descType);
    desc = LLVM::InsertValueOp::create(b, desc, pointer, ArrayRef<int64_t>{0});
    desc = LLVM::InsertValueOp::create(b, desc, pointer, ArrayRef<int64_t>{1});
    desc = LLVM::InsertValueOp::create(
        b, desc, LLVM::ConstantOp::create(b, i64, b.getI64IntegerAttr(0)),
        ArrayRef<int64_t>{2});
    SmallVector<Value> sizes;
    for (int64_t d = 0; d < rank; ++d)
      sizes.push_back(load(i64, dims, dimOffset + d));
    dimOffset += rank;
    // Row-major strides of a contiguous buffer.
    Value stride = LLVM::ConstantOp::create(b, i64, b.getI64IntegerAttr(1));
    for (int64_t d = rank - 1; d >= 0; --d) {
      desc = LLVM::InsertValueOp::create(b, desc, sizes[d],
                                         ArrayRef<int64_t>{3, d});
      desc =
          LLVM::InsertValueOp::create(b, desc, stride, ArrayRef<int64_t>{4, d});
      stride = LLVM::MulOp::create(b, stride, sizes[d]);
    }
    callArgs.push_back(
        UnrealizedConversionCastOp::create(b, memref, desc).getResult(0));
  }
  callArgs.push_back(
      arith::IndexCastOp::create(b, b.getIndexType(), body->getArgument(2)));
  func::CallOp::create(b, kernel, callArgs);
  func::ReturnOp::create(b);
  return success();
}

struct AttnCpuKernelAbi final
    : mlir::attn::impl::AttnCpuKernelAbiBase<AttnCpuKernelAbi> {
  void runOnOperation() override {
    SmallVector<func::FuncOp> kernels, hosts;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func->hasAttr("attn.kernel"))
        kernels.push_back(func);
      else if (func->hasAttr("attn.entry"))
        hosts.push_back(func);
    }
    for (func::FuncOp host : hosts)
      host.erase();
    for (func::FuncOp kernel : kernels) {
      kernel.setPrivate();
      if (failed(addWrapper(kernel)))
        return signalPassFailure();
    }
  }
};

} // namespace
