//===- NvvmExternDynamicShared.cpp - Dynamic shared memory as extern ------===//
//
// See the pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNNVVMEXTERNDYNAMICSHARED
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;

namespace {

/// NVVM's shared address space.
constexpr unsigned kSharedAddressSpace = 3;

struct AttnNvvmExternDynamicShared final
    : mlir::attn::impl::AttnNvvmExternDynamicSharedBase<
          AttnNvvmExternDynamicShared> {
  void runOnOperation() override {
    getOperation().walk([](LLVM::GlobalOp global) {
      auto array = dyn_cast<LLVM::LLVMArrayType>(global.getGlobalType());
      if (global.getAddrSpace() == kSharedAddressSpace && array &&
          array.getNumElements() == 0 &&
          global.getInitializerRegion().empty() && !global.getValue())
        global.setLinkage(LLVM::Linkage::External);
    });
  }
};

} // namespace
