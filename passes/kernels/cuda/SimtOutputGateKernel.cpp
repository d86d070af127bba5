//===- SimtOutputGateKernel.cpp - attn.gate as its own CUDA kernel --------===//
//
// attn.gate where no softmax attention took it into its epilogue (see
// OutputGateShape). Elementwise and memory-bound: a thread per element of
// the output in memory order, so a warp's loads and stores are 32
// consecutive elements. The buffers have identity layouts (the kernels'
// calling convention), so output, an elementwise gate, the skip's input
// and the result are read as flat arrays at the same index; a headwise
// gate's logit is the one of element i's head vector, i / Dv.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::attn;

/// `buffer` as one dim, in memory order.
static Value flatten(ImplicitLocOpBuilder &b, Value buffer) {
  const int64_t rank = cast<MemRefType>(buffer.getType()).getRank();
  SmallVector<ReassociationIndices> all(1);
  for (int64_t d = 0; d < rank; ++d)
    all[0].push_back(d);
  return memref::CollapseShapeOp::create(b, buffer, all);
}

func::FuncOp mlir::attn::buildSimtOutputGateKernel(OpBuilder &builder,
                                                   Location loc, StringRef name,
                                                   const OutputGateShape &shape,
                                                   const GpuTiling &tiling,
                                                   TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createSimtKernel(builder, loc, name, bindingTypes, tiling, "gate");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  Value output = args[0], gate = args[1];
  Value skipInput = shape.skip ? args[2] : Value();
  Value skipScale = shape.skip ? args[3] : Value();
  Value result = args[args.size() - 2], element = args.back();
  Value Dv = e.index(shape.headFeatures);

  // Element i of [B, H, L, Dv] is in head vector i / Dv of head
  // (i / (L Dv)) % H; of packed [T, H, Dv], of head (i / Dv) % H.
  Value headVector = e.div(element, Dv);
  Value x = e.load(flatten(b, output), {element});
  if (skipInput) {
    Value perHead =
        shape.packed ? headVector : e.div(headVector, e.dim(output, 2));
    Value head = e.rem(perHead, e.index(shape.heads));
    x = e.fma(e.load(skipScale, {head}),
              e.load(flatten(b, skipInput), {element}), x);
  }
  Value logit =
      e.load(flatten(b, gate), {shape.headwise ? headVector : element});
  e.store(e.activationGate(x, shape.activation, logit), flatten(b, result),
          {element});
  func::ReturnOp::create(b);
  return func;
}
