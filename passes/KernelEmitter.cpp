//===- KernelEmitter.cpp - Building CPU kernel IR -------------------------===//

#include "passes/KernelEmitter.h"

using namespace mlir;
using namespace mlir::attn;

DictionaryAttr CpuTiling::toAttr(MLIRContext *context) const {
  Builder b(context);
  return b.getDictionaryAttr({
      b.getNamedAttr("vector_width", b.getI64IntegerAttr(vectorWidth)),
      b.getNamedAttr("query_tile", b.getI64IntegerAttr(queryTile)),
      b.getNamedAttr("key_tile", b.getI64IntegerAttr(keyTile)),
      b.getNamedAttr("split_keys", b.getI64IntegerAttr(splitKeys)),
      b.getNamedAttr("decode_max_queries",
                     b.getI64IntegerAttr(decodeMaxQueries)),
      b.getNamedAttr("recurrent_max_steps",
                     b.getI64IntegerAttr(recurrentMaxSteps)),
      b.getNamedAttr("state_columns", b.getI64IntegerAttr(stateColumns)),
  });
}

func::FuncOp mlir::attn::createKernel(OpBuilder &builder, Location loc,
                                      StringRef name, TypeRange bindingTypes,
                                      DictionaryAttr tiling, StringRef kind) {
  SmallVector<Type> argTypes(bindingTypes);
  argTypes.push_back(builder.getIndexType());
  auto func = func::FuncOp::create(builder, loc, name,
                                   builder.getFunctionType(argTypes, {}));
  func.setPrivate();
  func->setAttr("attn.kernel", builder.getStringAttr(kind));
  func->setAttr("attn.tiling", tiling);
  Block *entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  return func;
}
