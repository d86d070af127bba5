//===- OutputGateKernel.cpp - attn.gate as its own CPU kernel -------------===//
//
// attn.gate where no softmax attention took it into its epilogue: an entry
// input gated, an attention output also used ungated, and the forms
// attention never fuses (silu, Mamba2's skip: Falcon-H1's mixer without its
// norm). Elementwise and memory-bound: a workgroup per token, its head
// vectors a vector of consecutive features at a time.
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
  Value result = args[args.size() - 2], token = args.back();
  const int64_t Dv = shape.headFeatures;

  // Token t of [B, H, L, Dv] is (t / L, t % L).
  Value batch, step;
  if (!shape.packed) {
    Value length = e.dim(output, 2);
    batch = e.div(token, length);
    step = e.rem(token, length);
  }
  auto at = [&](Value head, Value feature) -> SmallVector<Value> {
    if (shape.packed)
      return {token, head, feature};
    return {batch, head, step, feature};
  };
  e.loop(e.index(0), e.index(shape.heads), e.index(1), [&](Value head) {
    // A headwise gate's one logit, broadcast over the head vector.
    Value headLogit;
    if (shape.headwise)
      headLogit = e.broadcast(e.load(gate, at(head, e.index(0))));
    Value scale;
    if (skipScale)
      scale = e.broadcast(e.load(skipScale, {head}));
    for (int64_t off = 0; off < Dv; off += e.width) {
      const int64_t lanes = std::min(e.width, Dv - off);
      SmallVector<Value> indices = at(head, e.index(off));
      Value x = e.loadVector(output, indices, lanes);
      if (skipInput)
        x = e.fma(scale, e.loadVector(skipInput, indices, lanes), x);
      Value logit = headLogit ? headLogit : e.loadVector(gate, indices, lanes);
      // x sigmoid(g), or x silu(g) = x g sigmoid(g).
      Value gated = shape.activation == GateActivation::Sigmoid
                        ? e.sigmoidGate(x, logit)
                        : e.sigmoidGate(e.fmul(x, logit), logit);
      e.storeVector(gated, result, indices, lanes);
    }
  });
  func::ReturnOp::create(b);
  return func;
}
