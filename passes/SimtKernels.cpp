//===- SimtKernels.cpp - One-thread kernels for CUDA ----------------------===//
//
// Softmax attention, one query row per thread: the thread walks the keys
// its row sees (the mask's range), carrying the online-softmax state (m, l
// and the accumulator acc[Dv]) itself. Threads of a warp hold neighbouring
// query rows of one head, so they read the same key and value rows at the
// same time. Decode splits the key range over threads and merges the
// partials through their log-sum-exp, as on the CPU.
//
// Empty rows (no visible key) give o = 0 and lse = -inf: exponentials are
// taken against a max that is 0 while the max is -inf.
//
//===----------------------------------------------------------------------===//

#include "passes/SimtKernels.h"

#include "passes/KernelEmitter.h"

using namespace mlir;
using namespace mlir::attn;

DictionaryAttr GpuTiling::toAttr(MLIRContext *context) const {
  Builder b(context);
  return b.getDictionaryAttr({
      b.getNamedAttr("block_threads", b.getI64IntegerAttr(blockThreads)),
      b.getNamedAttr("split_keys", b.getI64IntegerAttr(splitKeys)),
      b.getNamedAttr("decode_max_queries",
                     b.getI64IntegerAttr(decodeMaxQueries)),
  });
}

FailureOr<SimtLaunch> SimtLaunch::get(func::FuncOp kernel) {
  auto tiling = kernel->getAttrOfType<DictionaryAttr>("attn.tiling");
  auto blockThreads =
      tiling ? tiling.getAs<IntegerAttr>("block_threads") : IntegerAttr();
  if (!blockThreads || !kernel.getBody().hasOneBlock())
    return kernel.emitError("not a kernel of -attn-gpu-dispatches "
                            "(attn.tiling has no block_threads, or the body "
                            "has several blocks)");
  SimtLaunch launch;
  launch.blockThreads = blockThreads.getInt();
  launch.perBlock = kernel->hasAttr(kBlockKernelAttr);
  for (auto alloca : kernel.getOps<memref::AllocaOp>()) {
    if (!alloca->hasAttr(kSharedBufferAttr))
      continue;
    MemRefType type = alloca.getType();
    if (!type.hasStaticShape())
      return alloca.emitError("a shared buffer needs a static shape");
    launch.sharedBytes +=
        roundUp(type.getNumElements() * type.getElementTypeBitWidth() / 8, 16);
  }
  return launch;
}

Value SimtEmitter::shared(ArrayRef<int64_t> shape) {
  OpBuilder::InsertionGuard guard(b);
  Operation *parent = b.getInsertionBlock()->getParentOp();
  auto func = dyn_cast<func::FuncOp>(parent);
  if (!func)
    func = parent->getParentOfType<func::FuncOp>();
  Block *entry = &func.getBody().front();
  // After the allocations already there, so they keep their order.
  auto it = entry->begin();
  while (it != entry->end() && isa<memref::AllocaOp>(*it))
    ++it;
  b.setInsertionPoint(entry, it);
  auto alloca = memref::AllocaOp::create(b, MemRefType::get(shape, f32),
                                         b.getI64IntegerAttr(16));
  alloca->setAttr(kSharedBufferAttr, b.getUnitAttr());
  return alloca;
}

void SimtEmitter::eachThread(function_ref<void(Value thread)> body) {
  assert(blockThreads > 0 && "thread loops are for block kernels");
  auto loop = scf::ParallelOp::create(
      b, ValueRange{index(0)}, ValueRange{index(blockThreads)},
      ValueRange{index(1)}, [&](OpBuilder &nested, Location, ValueRange ivs) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nested.getInsertionBlock(),
                            nested.getInsertionPoint());
        body(ivs[0]);
      });
  loop->setAttr(kThreadLoopAttr, b.getUnitAttr());
}

void SimtEmitter::forAll(Value count, function_ref<void(Value i)> body) {
  eachThread([&](Value thread) {
    loop(thread, count, index(blockThreads), [&](Value i) { body(i); });
  });
}

namespace {

func::FuncOp createSimtKernel(OpBuilder &builder, Location loc, StringRef name,
                              TypeRange bindingTypes, const GpuTiling &tiling,
                              StringRef kind) {
  return createKernel(builder, loc, name, bindingTypes,
                      tiling.toAttr(builder.getContext()), kind);
}

/// The online softmax of one query row over keys [begin, end): returns
/// (m, l) and leaves the unnormalized output in `acc` [Dv].
std::pair<Value, Value> attendRow(SimtEmitter &e,
                                  const SoftmaxAttentionShape &shape, Value q,
                                  Value k, Value v, Value batch, Value head,
                                  Value row, Value begin, Value end,
                                  Value acc) {
  const int64_t D = shape.headDim, Dv = shape.valueDim;
  Value c0 = e.index(0), c1 = e.index(1);
  Value kvHead = e.div(head, e.index(shape.numHeads / shape.numKvHeads));

  // The scaled query row, read once.
  Value query = e.scratch(D);
  e.loop(c0, e.index(D), c1, [&](Value d) {
    e.store(e.fmul(e.load(q, {batch, head, row, d}), e.scalar(shape.scale)),
            query, d);
  });
  e.loop(c0, e.index(Dv), c1, [&](Value d) { e.store(e.scalar(0.0), acc, d); });

  SmallVector<Value> state = e.loop(
      begin, end, c1, {e.scalar(kNegInf), e.scalar(0.0)},
      [&](Value key, ValueRange it) {
        Value score = e.loop(
            c0, e.index(D), c1, {e.scalar(0.0)}, [&](Value d, ValueRange dot) {
              return SmallVector<Value>{
                  e.fma(e.load(query, d), e.load(k, {batch, kvHead, key, d}),
                        dot[0])};
            })[0];
        score = e.softcap(score, shape.softcap);
        // Every key of the range is visible, so the new max is finite and
        // exp(m - max) is 0 for the first key (m = -inf).
        Value max = e.fmax(it[0], score);
        Value rescale = e.exp(e.fsub(it[0], max));
        Value p = e.exp(e.fsub(score, max));
        e.loop(c0, e.index(Dv), c1, [&](Value d) {
          e.store(e.fma(p, e.load(v, {batch, kvHead, key, d}),
                        e.fmul(e.load(acc, d), rescale)),
                  acc, d);
        });
        return SmallVector<Value>{max, e.fma(it[1], rescale, p)};
      });
  return {state[0], state[1]};
}

/// The visible keys [begin, end) of query row `row` (its position is
/// Lk - Lq + row), intersected with [from, to).
std::pair<Value, Value> visibleKeys(SimtEmitter &e,
                                    const SoftmaxAttentionShape &shape,
                                    Value row, Value lq, Value lk, Value from,
                                    Value to) {
  Value pos = e.add(e.sub(lk, lq), row);
  Value begin = from, end = to;
  if (shape.mask != MaskKind::None)
    end = e.minS(end, e.add(pos, e.index(1)));
  if (shape.mask == MaskKind::SlidingWindow)
    begin = e.maxS(begin, e.add(e.sub(pos, e.index(shape.window)), e.index(1)));
  return {begin, e.maxS(end, begin)};
}

/// o = acc * inv, gated, written to out[batch, head, row, :].
void storeRow(SimtEmitter &e, const SoftmaxAttentionShape &shape, Value acc,
              Value inv, Value gate, Value out, Value batch, Value head,
              Value row) {
  Value c0 = e.index(0);
  Value headGate;
  if (gate && shape.headwiseGate)
    headGate = e.load(gate, {batch, head, row, c0});
  e.loop(c0, e.index(shape.valueDim), e.index(1), [&](Value d) {
    Value o = e.fmul(e.load(acc, d), inv);
    if (gate)
      o = e.sigmoidGate(o, headGate ? headGate
                                    : e.load(gate, {batch, head, row, d}));
    e.store(o, out, {batch, head, row, d});
  });
}

} // namespace

func::FuncOp mlir::attn::buildSimtAttentionKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const GpuTiling &tiling,
    TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createSimtKernel(builder, loc, name, bindingTypes, tiling, "attention");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  unsigned next = 0;
  Value q = args[next++], k = args[next++], v = args[next++];
  Value gate = shape.epilogue == Epilogue::SigmoidGate ? args[next++] : Value();
  Value out = args[next++];
  Value lse = shape.withLogSumExp ? args[next++] : Value();
  Value thread = args.back();

  // Thread order (batch, head, row), the row fastest.
  Value lq = e.dim(q, 2), lk = e.dim(k, 2);
  Value row = e.rem(thread, lq);
  Value bh = e.div(thread, lq);
  Value head = e.rem(bh, e.index(shape.numHeads));
  Value batch = e.div(bh, e.index(shape.numHeads));

  auto [begin, end] = visibleKeys(e, shape, row, lq, lk, e.index(0), lk);
  Value acc = e.scratch(shape.valueDim);
  auto [m, l] = attendRow(e, shape, q, k, v, batch, head, row, begin, end, acc);
  storeRow(e, shape, acc, e.reciprocalOrZero(l), gate, out, batch, head, row);
  if (lse)
    e.store(e.logSumExp(m, l), lse, {batch, head, row});
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtSplitKvKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const GpuTiling &tiling,
    TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createSimtKernel(builder, loc, name, bindingTypes, tiling, "split_kv");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  auto args = func.getArguments();
  Value q = args[0], k = args[1], v = args[2], partialOut = args[3],
        partialLse = args[4], thread = args[5];

  // Thread order (batch, head, row, split), the split fastest.
  Value lq = e.dim(q, 2), lk = e.dim(k, 2), splits = e.dim(partialLse, 3);
  Value split = e.rem(thread, splits);
  Value rest = e.div(thread, splits);
  Value row = e.rem(rest, lq);
  rest = e.div(rest, lq);
  Value head = e.rem(rest, e.index(shape.numHeads));
  Value batch = e.div(rest, e.index(shape.numHeads));

  Value from = e.mul(split, e.index(tiling.splitKeys));
  Value to = e.minS(lk, e.add(from, e.index(tiling.splitKeys)));
  auto [begin, end] = visibleKeys(e, shape, row, lq, lk, from, to);
  Value acc = e.scratch(shape.valueDim);
  auto [m, l] = attendRow(e, shape, q, k, v, batch, head, row, begin, end, acc);

  // The normalized partial and its log-sum-exp (0 and -inf when empty).
  Value inv = e.reciprocalOrZero(l);
  e.loop(e.index(0), e.index(shape.valueDim), e.index(1), [&](Value d) {
    e.store(e.fmul(e.load(acc, d), inv), partialOut,
            {batch, head, row, split, d});
  });
  e.store(e.logSumExp(m, l), partialLse, {batch, head, row, split});
  func::ReturnOp::create(b);
  return func;
}

func::FuncOp mlir::attn::buildSimtMergeKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const GpuTiling &tiling,
    TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createSimtKernel(builder, loc, name, bindingTypes, tiling, "merge");
  ImplicitLocOpBuilder b(loc, builder);
  SimtEmitter e(b);
  SplitKvMerge merge(e, func, shape);
  Value partialOut = merge.partialOut, partialLse = merge.partialLse;
  Value batch = merge.batch, head = merge.head, row = merge.row,
        safe = merge.maxLse;
  Value c0 = e.index(0), c1 = e.index(1), dv = e.index(shape.valueDim);

  // lse = log sum_s exp(lse_s); o = sum_s exp(lse_s - lse) o_s. Partials
  // of empty ranges have lse_s = -inf and weigh 0.
  Value acc = e.scratch(shape.valueDim);
  e.loop(c0, dv, c1, [&](Value d) { e.store(e.scalar(0.0), acc, d); });
  Value total = e.loop(
      c0, merge.splits, c1, {e.scalar(0.0)}, [&](Value s, ValueRange it) {
        Value weight =
            e.exp(e.fsub(e.load(partialLse, {batch, head, row, s}), safe));
        e.loop(c0, dv, c1, [&](Value d) {
          e.store(e.fma(weight, e.load(partialOut, {batch, head, row, s, d}),
                        e.load(acc, d)),
                  acc, d);
        });
        return SmallVector<Value>{e.fadd(it[0], weight)};
      })[0];
  storeRow(e, shape, acc, e.reciprocalOrZero(total), merge.gate, merge.out,
           batch, head, row);
  if (merge.lse)
    e.store(e.logSumExp(safe, total), merge.lse, {batch, head, row});
  func::ReturnOp::create(b);
  return func;
}
