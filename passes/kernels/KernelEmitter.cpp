//===- KernelEmitter.cpp - Building CPU kernel IR -------------------------===//

#include "passes/kernels/KernelEmitter.h"

using namespace mlir;
using namespace mlir::attn;

DictionaryAttr CpuTiling::toAttr(MLIRContext *context) const {
  Builder b(context);
  SmallVector<NamedAttribute> entries = {
      b.getNamedAttr("vector_width", b.getI64IntegerAttr(vectorWidth)),
      b.getNamedAttr("query_tile", b.getI64IntegerAttr(queryTile)),
      b.getNamedAttr("key_tile", b.getI64IntegerAttr(keyTile)),
      b.getNamedAttr("split_keys", b.getI64IntegerAttr(splitKeys)),
      b.getNamedAttr("decode_max_queries",
                     b.getI64IntegerAttr(decodeMaxQueries)),
      b.getNamedAttr("recurrent_max_steps",
                     b.getI64IntegerAttr(recurrentMaxSteps)),
      b.getNamedAttr("state_columns", b.getI64IntegerAttr(stateColumns)),
  };
  if (bf16Dot)
    entries.push_back(b.getNamedAttr("bf16_dot", b.getUnitAttr()));
  if (amxTiles)
    entries.push_back(b.getNamedAttr("amx_tiles", b.getUnitAttr()));
  if (prefetchIntoL1)
    entries.push_back(b.getNamedAttr("prefetch_into_l1", b.getUnitAttr()));
  return b.getDictionaryAttr(entries);
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

void mlir::attn::siftDown(KernelEmitter &e, const HeapStorage &heap, Value size,
                          Value start) {
  Value one = e.index(1), two = e.index(2);
  // Carries (position, whether the last step swapped).
  e.whileLoop(
      {start, arith::ConstantIntOp::create(e.b, e.b.getI1Type(), 1)},
      [&](ValueRange it) {
        Value child = e.add(e.mul(it[0], two), one);
        return e.andI(it[1], e.icmp(arith::CmpIPredicate::ult, child, size));
      },
      [&](ValueRange it) -> SmallVector<Value> {
        Value pos = it[0];
        Value child = e.add(e.mul(pos, two), one);
        Value right = e.add(child, one);
        SmallVector<Value> childItem = heap.load(child);
        // Clamped so that the load stays in the heap without a right child.
        SmallVector<Value> rightItem =
            heap.load(e.minS(right, e.sub(size, one)));
        Value useRight = e.andI(e.icmp(arith::CmpIPredicate::ult, right, size),
                                heap.worse(rightItem, childItem));
        Value worst = e.select(useRight, right, child);
        SmallVector<Value> worstItem;
        for (auto [r, c] : llvm::zip_equal(rightItem, childItem))
          worstItem.push_back(e.select(useRight, r, c));
        SmallVector<Value> posItem = heap.load(pos);
        Value swap = heap.worse(worstItem, posItem);
        e.ifThen(swap, [&] {
          heap.store(pos, worstItem);
          heap.store(worst, posItem);
        });
        return {e.select(swap, worst, pos), swap};
      });
}

void mlir::attn::heapify(KernelEmitter &e, const HeapStorage &heap,
                         Value size) {
  Value parents = e.div(size, e.index(2));
  e.loop(e.index(0), parents, e.index(1), [&](Value k) {
    siftDown(e, heap, size, e.sub(e.sub(parents, e.index(1)), k));
  });
}

void mlir::attn::sortBestFirst(KernelEmitter &e, const HeapStorage &heap,
                               Value size) {
  heapify(e, heap, size);
  Value zero = e.index(0), one = e.index(1);
  Value steps = e.maxS(e.sub(size, one), zero);
  e.loop(zero, steps, one, [&](Value k) {
    Value end = e.sub(e.sub(size, one), k);
    SmallVector<Value> root = heap.load(zero);
    heap.store(zero, heap.load(end));
    heap.store(end, root);
    siftDown(e, heap, end, zero);
  });
}
