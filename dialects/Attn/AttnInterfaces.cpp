//===- AttnInterfaces.cpp - Attention op interface ------------------------===//

#include "Attn/AttnInterfaces.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/SetVector.h"

#include "Attn/AttnInterfaces.cpp.inc"

using namespace mlir;

SmallVector<Value> mlir::attn::getVariantTensors(AttentionOpInterface op) {
  llvm::SetVector<Value> tensors;
  for (Region *region : {op.getScoreModifier(), op.getMaskModifier()})
    if (region)
      region->walk([&](tensor::ExtractOp extract) {
        tensors.insert(extract.getTensor());
      });
  return tensors.takeVector();
}
