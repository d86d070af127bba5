//===- MergeIdenticalKernels.cpp - One kernel for equal layers -----------===//
//
// A model's equal layers (Qwen3-Next repeats two layer kinds 48 times)
// lower to entries whose kernels differ only in their names. Everything
// after the dispatch passes (vector and NVVM lowering, LLVM's -O3, ptxas)
// costs time per kernel, so equal kernels are merged into the first one
// before it: its dispatches name the kept kernel and the copies go.
//
// Two kernels are equal when they are the same but for their names: same
// signature, attributes (kind, tiling, launch shape) and body, op for op
// (OperationEquivalence, as upstream's -duplicate-function-elimination
// compares functions; that pass merges public functions too, and the
// entries must keep theirs). The comparison is exact and costs a walk, so
// the dispatch pipelines merge the kernels as built, before anything
// cleans them up: the canonicalizer then sees one kernel where a model
// repeats a layer 48 times.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNMERGEIDENTICALKERNELS
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

/// Kernels as keys of a set in which kernels equal but for their names are
/// one key.
struct KernelEquivalence : llvm::DenseMapInfo<func::FuncOp> {
  static unsigned getHashValue(func::FuncOp kernel) {
    llvm::hash_code hash = llvm::hash_combine(
        kernel.getFunctionType(), kernel->getDiscardableAttrDictionary());
    kernel.getBody().walk([&](Operation *op) {
      hash = llvm::hash_combine(hash,
                                OperationEquivalence::computeHash(
                                    op, OperationEquivalence::ignoreHashValue,
                                    OperationEquivalence::ignoreHashValue,
                                    OperationEquivalence::IgnoreLocations));
    });
    return hash;
  }

  static bool isEqual(func::FuncOp lhs, func::FuncOp rhs) {
    if (lhs == rhs)
      return true;
    if (lhs == getEmptyKey() || lhs == getTombstoneKey() ||
        rhs == getEmptyKey() || rhs == getTombstoneKey())
      return false;
    auto lhsProperties = lhs.getProperties();
    auto rhsProperties = rhs.getProperties();
    lhsProperties.sym_name = rhsProperties.sym_name = nullptr;
    return lhsProperties == rhsProperties &&
           lhs->getDiscardableAttrDictionary() ==
               rhs->getDiscardableAttrDictionary() &&
           OperationEquivalence::isRegionEquivalentTo(
               &lhs.getBody(), &rhs.getBody(),
               OperationEquivalence::IgnoreLocations);
  }
};

struct AttnMergeIdenticalKernels final
    : mlir::attn::impl::AttnMergeIdenticalKernelsBase<
          AttnMergeIdenticalKernels> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    llvm::DenseSet<func::FuncOp, KernelEquivalence> kept;
    llvm::DenseMap<StringAttr, FlatSymbolRefAttr> keptFor;
    SmallVector<func::FuncOp> copies;
    for (auto kernel : module.getOps<func::FuncOp>()) {
      if (!kernel->hasAttr("attn.kernel") || kernel.isDeclaration())
        continue;
      auto [first, inserted] = kept.insert(kernel);
      if (inserted)
        continue;
      keptFor[kernel.getSymNameAttr()] =
          FlatSymbolRefAttr::get(first->getSymNameAttr());
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
