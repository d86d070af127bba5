//===- RmsNormGateKernel.cpp - The rmsnorm gate as its own CPU kernel -----===//
//
// attn.rmsnorm_gate where no recurrence took it into its epilogue: Mamba2's
// groups of features spanning heads (or part of one), the gate before the
// norm, a weight per feature of the token, the skip d[h] x before it all
// (RmsNormGateShape). A workgroup
// per row (the head vectors one group spans, or one head vector holding
// several groups): per group, the sum of squares of what is normalized (o,
// or o act(z) when the gate comes first), then its features, a vector of
// consecutive features at a time.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cpu/CpuKernels.h"

using namespace mlir;
using namespace mlir::attn;

func::FuncOp mlir::attn::buildRmsNormGateKernel(OpBuilder &builder,
                                                Location loc, StringRef name,
                                                const RmsNormGateShape &shape,
                                                const CpuTiling &tiling,
                                                TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "rmsnorm_gate");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  auto args = func.getArguments();
  Value output = args[0], z = args[1], weight = args[2];
  Value skipInput = shape.skip ? args[3] : Value();
  Value skipScale = shape.skip ? args[4] : Value();
  Value result = args[args.size() - 2], workgroup = args.back();
  const int64_t Dv = shape.headFeatures, G = shape.groupFeatures;
  // A group's features: `segments` runs of `run` consecutive features (whole
  // head vectors, or part of one).
  const int64_t segments = shape.headsPerRow(), run = std::min(G, Dv);

  // Workgroup = (token, row of the token), the row fastest; token t of
  // [B, H, L, Dv] is (t / L, t % L).
  Value rowsPerToken = e.index(shape.rowsPerToken());
  Value token = e.div(workgroup, rowsPerToken);
  Value firstHead =
      e.mul(e.rem(workgroup, rowsPerToken), e.index(shape.headsPerRow()));
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
  auto activation = [&](Value x) {
    return shape.activation == GateActivation::Sigmoid
               ? e.sigmoidGate(e.splat(1.0), x)
               : e.sigmoidGate(x, x);
  };
  // Over the group's features from `first` in each head vector: body(head,
  // feature, lanes) per vector, its partial results carried.
  auto eachVector =
      [&](Value first, ValueRange inits,
          function_ref<SmallVector<Value>(Value, Value, int64_t, ValueRange)>
              body) {
        return e.loop(e.index(0), e.index(segments), e.index(1), inits,
                      [&](Value s, ValueRange carried) {
                        SmallVector<Value> values(carried);
                        Value head = e.add(firstHead, s);
                        for (int64_t off = 0; off < run; off += e.width)
                          values = body(head, e.add(first, e.index(off)),
                                        std::min(e.width, run - off), values);
                        return values;
                      });
      };
  // What the norm sums: o (plus the skip d[h] x), times act(z) when the
  // gate comes first (masked lanes read 0 and stay 0: act(0) is finite).
  auto normalized = [&](Value head, Value feature, int64_t lanes) {
    Value x = e.loadVector(output, at(head, feature), lanes);
    if (skipInput)
      x = e.fma(e.broadcast(e.load(skipScale, {head})),
                e.loadVector(skipInput, at(head, feature), lanes), x);
    if (shape.normBeforeGate)
      return x;
    return e.fmul(x, activation(e.loadVector(z, at(head, feature), lanes)));
  };

  // Groups within a head vector (G < Dv) start at g G; a group of whole
  // heads at 0.
  e.loop(e.index(0), e.index(shape.groupsPerRow()), e.index(1), [&](Value g) {
    Value first = e.mul(g, e.index(run));
    Value squares = eachVector(first, {e.splat(0.0)},
                               [&](Value head, Value feature, int64_t lanes,
                                   ValueRange sum) -> SmallVector<Value> {
                                 Value x = normalized(head, feature, lanes);
                                 return {e.fma(x, x, sum[0])};
                               })[0];
    Value meanSquare =
        e.fmul(e.sumLanes(squares), e.scalar(1.0 / static_cast<double>(G)));
    Value inverse = e.broadcast(e.fdiv(
        e.scalar(1.0),
        math::SqrtOp::create(b, e.fadd(meanSquare, e.scalar(shape.epsilon)))));
    eachVector(
        first, {},
        [&](Value head, Value feature, int64_t lanes,
            ValueRange) -> SmallVector<Value> {
          Value w = e.loadVector(weight,
                                 {shape.weightPerToken
                                      ? e.add(e.mul(head, e.index(Dv)), feature)
                                      : feature},
                                 lanes);
          Value x =
              e.fmul(e.fmul(normalized(head, feature, lanes), inverse), w);
          if (shape.normBeforeGate)
            x = e.fmul(x,
                       activation(e.loadVector(z, at(head, feature), lanes)));
          e.storeVector(x, result, at(head, feature), lanes);
          return {};
        });
  });
  func::ReturnOp::create(b);
  return func;
}
