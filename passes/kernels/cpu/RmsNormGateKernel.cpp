//===- RmsNormGateKernel.cpp - The rmsnorm gate as its own CPU kernel -----===//
//
// attn.rmsnorm_gate where no recurrence took it into its epilogue: Mamba2's
// groups of features spanning heads (or part of one), the gate before the
// norm, a weight per feature of the token, the skip d[h] x before it all
// (RmsNormGateShape). A workgroup takes a run of tokens of one row (the
// head vectors one group spans, or one head vector holding several
// groups), head by head: in [B, H, L, Dv] a head's vectors of consecutive
// tokens are consecutive, so each head of the row is one run in memory
// (where a token's head vectors are L Dv apart). Two passes over the run:
// each group's sum of squares of what is normalized (o, or o act(z) when
// the gate comes first) per token, then its features; the second reads
// from the cache what the first read (rmsNormGateTokensPerWorkgroup keeps a
// run's rows to 64 KiB a stream).
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
  // A group's features: `segments` spans of `span` consecutive features
  // (whole head vectors, or part of one).
  const int64_t segments = shape.headsPerRow(), span = std::min(G, Dv);

  // The workgroup's run [first, end) of tokens of one row: workgroup =
  // ((b, row), run) of [B, H, L, Dv], (run, row) packed.
  const int64_t T = rmsNormGateTokensPerWorkgroup(shape);
  Value rowsPerToken = e.index(shape.rowsPerToken());
  Value tokens = e.dim(output, shape.packed ? 0 : 2);
  Value runs = e.div(e.add(tokens, e.index(T - 1)), e.index(T));
  Value batch, row, tokenRun;
  if (shape.packed) {
    row = e.rem(workgroup, rowsPerToken);
    tokenRun = e.div(workgroup, rowsPerToken);
  } else {
    tokenRun = e.rem(workgroup, runs);
    Value batchRow = e.div(workgroup, runs);
    batch = e.div(batchRow, rowsPerToken);
    row = e.rem(batchRow, rowsPerToken);
  }
  Value first = e.mul(tokenRun, e.index(T));
  Value end = e.minS(tokens, e.add(first, e.index(T)));
  Value firstHead = e.mul(row, e.index(shape.headsPerRow()));
  auto at = [&](Value token, Value head, Value feature) -> SmallVector<Value> {
    if (shape.packed)
      return {token, head, feature};
    return {batch, head, token, feature};
  };
  // What the norm sums: o (plus the skip d[h] x), times act(z) when the
  // gate comes first (masked lanes read 0 and stay 0: act(0) is finite).
  auto normalized = [&](SmallVector<Value> indices, Value head, int64_t lanes) {
    Value x = e.loadVector(output, indices, lanes);
    if (skipInput)
      x = e.fma(e.broadcast(e.load(skipScale, {head})),
                e.loadVector(skipInput, indices, lanes), x);
    if (shape.normBeforeGate)
      return x;
    return e.activationGate(x, shape.activation,
                            e.loadVector(z, indices, lanes));
  };
  // Over the row's head vectors, the run's tokens and each head vector's
  // groups g (features [g span, g span + span)): body(token, head, first
  // feature, slot), slot the (token, group)'s in `perGroup`.
  const int64_t groups = shape.groupsPerRow();
  auto eachSpan = [&](function_ref<void(Value, Value, int64_t, Value)> body) {
    e.loop(e.index(0), e.index(segments), e.index(1), [&](Value s) {
      Value head = e.add(firstHead, s);
      e.loop(first, end, e.index(1), [&](Value token) {
        Value tokenSlot = e.mul(e.sub(token, first), e.index(groups));
        for (int64_t g = 0; g < groups; ++g)
          body(token, head, g * span, e.add(tokenSlot, e.index(g)));
      });
    });
  };
  // Per (token, group): the sum of squares, then the inverse of its root
  // mean square.
  Value perGroup = e.scratch({T * groups});
  e.loop(e.index(0), e.index(T * groups), e.index(1),
         [&](Value i) { e.store(e.scalar(0.0), perGroup, {i}); });
  eachSpan([&](Value token, Value head, int64_t firstFeature, Value slot) {
    Value squares = e.splat(0.0);
    for (int64_t off = 0; off < span; off += e.width) {
      Value x = normalized(at(token, head, e.index(firstFeature + off)), head,
                           std::min(e.width, span - off));
      squares = e.fma(x, x, squares);
    }
    e.store(e.fadd(e.load(perGroup, {slot}), e.sumLanes(squares)), perGroup,
            {slot});
  });
  e.loop(e.index(0), e.index(T * groups), e.index(1), [&](Value i) {
    Value meanSquare =
        e.fmul(e.load(perGroup, {i}), e.scalar(1.0 / static_cast<double>(G)));
    e.store(e.fdiv(e.scalar(1.0),
                   math::SqrtOp::create(
                       b, e.fadd(meanSquare, e.scalar(shape.epsilon)))),
            perGroup, {i});
  });
  eachSpan([&](Value token, Value head, int64_t firstFeature, Value slot) {
    Value inverse = e.broadcast(e.load(perGroup, {slot}));
    for (int64_t off = 0; off < span; off += e.width) {
      const int64_t lanes = std::min(e.width, span - off);
      Value feature = e.index(firstFeature + off);
      SmallVector<Value> indices = at(token, head, feature);
      Value w = e.loadVector(weight,
                             {shape.weightPerToken
                                  ? e.add(e.mul(head, e.index(Dv)), feature)
                                  : feature},
                             lanes);
      Value x = e.fmul(e.fmul(normalized(indices, head, lanes), inverse), w);
      if (shape.normBeforeGate)
        x = e.activationGate(x, shape.activation,
                             e.loadVector(z, indices, lanes));
      e.storeVector(x, result, indices, lanes);
    }
  });
  func::ReturnOp::create(b);
  return func;
}
