//===- OutputGateKernel.cpp - attn.gate as its own CPU kernel -------------===//
//
// attn.gate where no softmax attention took it into its epilogue: an entry
// input gated, an attention output also used ungated, and the forms
// attention never fuses (silu, Mamba2's skip: Falcon-H1's mixer without its
// norm). Elementwise and memory-bound, so a workgroup takes a run of
// consecutive elements in memory order (gateTokensPerWorkgroup tokens of
// one head of [B, H, L, Dv], or of every head of packed [T, H, Dv]), a
// vector of consecutive features at a time: a run per input stream, which
// the hardware prefetches, where a token's head vectors of [B, H, L, Dv]
// are L Dv apart.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cpu/CpuKernels.h"

using namespace mlir;
using namespace mlir::attn;

func::FuncOp mlir::attn::buildOutputGateKernel(OpBuilder &builder, Location loc,
                                               StringRef name,
                                               const OutputGateShape &shape,
                                               const CpuTiling &tiling,
                                               TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "gate");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  auto args = func.getArguments();
  Value output = args[0], gate = args[1];
  Value skipInput = shape.skip ? args[2] : Value();
  Value skipScale = shape.skip ? args[3] : Value();
  Value result = args[args.size() - 2], workgroup = args.back();
  const int64_t Dv = shape.headFeatures;

  const int64_t T = gateTokensPerWorkgroup(shape);
  // The workgroup's tokens [first, end) of one head (b, h) of [B, H, L, Dv],
  // or of every head of packed [T, H, Dv].
  Value tokens = e.dim(output, shape.packed ? 0 : 2);
  Value batch, fixedHead, first;
  if (shape.packed) {
    first = e.mul(workgroup, e.index(T));
  } else {
    Value runs = e.div(e.add(tokens, e.index(T - 1)), e.index(T));
    Value row = e.div(workgroup, runs);
    batch = e.div(row, e.index(shape.heads));
    fixedHead = e.rem(row, e.index(shape.heads));
    first = e.mul(e.rem(workgroup, runs), e.index(T));
  }
  Value end = e.minS(tokens, e.add(first, e.index(T)));
  auto at = [&](Value token, Value head, Value feature) -> SmallVector<Value> {
    if (shape.packed)
      return {token, head, feature};
    return {batch, head, token, feature};
  };
  // One head vector of one token.
  auto gateVector = [&](Value token, Value head) {
    Value headLogit;
    if (shape.headwise)
      headLogit = e.broadcast(e.load(gate, at(token, head, e.index(0))));
    Value scale;
    if (skipScale)
      scale = e.broadcast(e.load(skipScale, {head}));
    for (int64_t off = 0; off < Dv; off += e.width) {
      const int64_t lanes = std::min(e.width, Dv - off);
      SmallVector<Value> indices = at(token, head, e.index(off));
      Value x = e.loadVector(output, indices, lanes);
      if (skipInput)
        x = e.fma(scale, e.loadVector(skipInput, indices, lanes), x);
      Value logit = headLogit ? headLogit : e.loadVector(gate, indices, lanes);
      e.storeVector(e.activationGate(x, shape.activation, logit), result,
                    indices, lanes);
    }
  };
  e.loop(first, end, e.index(1), [&](Value token) {
    if (!shape.packed)
      return gateVector(token, fixedHead);
    e.loop(e.index(0), e.index(shape.heads), e.index(1),
           [&](Value head) { gateVector(token, head); });
  });
  func::ReturnOp::create(b);
  return func;
}
