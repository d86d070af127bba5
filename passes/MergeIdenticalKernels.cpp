//===- MergeIdenticalKernels.cpp - One kernel for equal layers -----------===//
//
// A model's equal layers (Qwen3-Next repeats two layer kinds 48 times)
// lower to entries whose kernels differ only in their names. Everything
// after the dispatch passes (vector and NVVM lowering, LLVM's -O3, ptxas)
// costs time per kernel, so equal kernels are merged into the first one
// before it: its dispatches name the kept kernel and the copies go.
//
// Two kernels are equal when they print the same under one name: same
// signature, attributes (kind, tiling, launch shape) and body. Printing is
// exact and cheap next to what the merge saves; the body's structure is
// what code generation depends on, so nothing weaker may decide it.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNMERGEIDENTICALKERNELS
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

/// The kernel as text under a fixed name: equal text, equal kernel.
std::string printedBody(func::FuncOp kernel) {
  StringAttr name = kernel.getSymNameAttr();
  kernel.setSymName("kernel");
  std::string text;
  llvm::raw_string_ostream os(text);
  kernel->print(os, OpPrintingFlags().useLocalScope());
  kernel.setSymName(name);
  return text;
}

struct AttnMergeIdenticalKernels final
    : mlir::attn::impl::AttnMergeIdenticalKernelsBase<
          AttnMergeIdenticalKernels> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::StringMap<FlatSymbolRefAttr> firstOfText;
    llvm::DenseMap<StringAttr, FlatSymbolRefAttr> keptFor;
    SmallVector<func::FuncOp> copies;
    for (auto kernel : module.getOps<func::FuncOp>()) {
      if (!kernel->hasAttr("attn.kernel"))
        continue;
      auto [it, inserted] = firstOfText.try_emplace(
          printedBody(kernel), FlatSymbolRefAttr::get(kernel.getSymNameAttr()));
      if (inserted)
        continue;
      keptFor[kernel.getSymNameAttr()] = it->second;
      copies.push_back(kernel);
    }
    if (copies.empty())
      return;
    module.walk([&](DispatchOp dispatch) {
      if (FlatSymbolRefAttr kept =
              keptFor.lookup(dispatch.getKernelAttr().getAttr()))
        dispatch.setKernelAttr(kept);
    });
    for (func::FuncOp copy : copies)
      copy.erase();
  }
};

} // namespace
