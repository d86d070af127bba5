//===- CpuDispatches.cpp - Entries to host dispatch programs + kernels ----===//
//
// The one place where tensors become buffers: an entry's results are the
// caller's output buffers (destination passing), every other value gets a
// memref.alloc on the host side. Attention ops are read through
// AttentionOpInterface only; the workgroup bodies come from
// SoftmaxAttentionKernels (softmax normalizer) and LinearRecurrenceKernels
// (recurrent-state normalizer).
//
//===----------------------------------------------------------------------===//

#include "passes/LinearRecurrenceKernels.h"
#include "passes/Passes.h"
#include "passes/SoftmaxAttentionKernels.h"

#include "Attn/AttnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNCPUDISPATCHES
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

/// One dynamic dimension of a tensor value.
using DimRef = std::pair<Value, int64_t>;

/// Groups the dynamic dims of an entry that must be equal at run time and
/// names each group (B, Lq, Lk, ...) so the binary's signature and the
/// runtime's errors can say which dims must agree.
class SymbolicShapes {
public:
  /// Collects the equalities the ops of `func` imply; fails on an op whose
  /// shape relations are unknown.
  LogicalResult build(func::FuncOp func) {
    for (BlockArgument arg : func.getArguments())
      addValue(arg);
    WalkResult result = func.walk([&](Operation *op) -> WalkResult {
      for (Value v : op->getResults())
        addValue(v);
      if (auto attention = dyn_cast<AttentionOpInterface>(op)) {
        addAttention(attention);
        return WalkResult::advance();
      }
      return WalkResult::advance();
    });
    return failure(result.wasInterrupted());
  }

  /// The symbolic shape of `value`: a name per dynamic dim, the size per
  /// static dim.
  ArrayAttr shapeOf(Value value, Builder &b) {
    auto type = cast<ShapedType>(value.getType());
    SmallVector<Attribute> dims;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (!type.isDynamicDim(d)) {
        dims.push_back(b.getI64IntegerAttr(type.getDimSize(d)));
        continue;
      }
      dims.push_back(b.getStringAttr(nameOf({value, d})));
    }
    return b.getArrayAttr(dims);
  }

  bool sameClass(DimRef a, DimRef b) {
    return classes.isEquivalent(key(a), key(b));
  }

private:
  using Key = std::pair<void *, int64_t>;
  static Key key(DimRef ref) {
    return {ref.first.getAsOpaquePointer(), ref.second};
  }

  void addValue(Value value) {
    auto type = dyn_cast<ShapedType>(value.getType());
    if (!type)
      return;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        classes.insert(key({value, d}));
  }
  void unite(DimRef a, DimRef b, StringRef role = {}) {
    auto ta = cast<ShapedType>(a.first.getType());
    auto tb = cast<ShapedType>(b.first.getType());
    if (!ta.isDynamicDim(a.second) || !tb.isDynamicDim(b.second))
      return;
    classes.unionSets(key(a), key(b));
    if (!role.empty())
      nameRole(a, role);
  }
  /// Names the group of `ref` after `role` (B, Lq, L, ...).
  void nameRole(DimRef ref, StringRef role) {
    if (cast<ShapedType>(ref.first.getType()).isDynamicDim(ref.second))
      roles.try_emplace(key(ref), role.str());
  }
  void addAttention(AttentionOpInterface op) {
    if (op.getNormalizer() == Normalizer::RecurrentState)
      return addRecurrence(op);
    Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
    Value o = op.getOutput(), lse = op.getLogSumExp();
    unite({q, 0}, {k, 0}, "B");
    unite({q, 0}, {v, 0});
    unite({q, 0}, {o, 0});
    unite({k, 2}, {v, 2}, "Lk");
    unite({q, 2}, {o, 2}, "Lq");
    if (lse) {
      unite({q, 0}, {lse, 0});
      unite({q, 2}, {lse, 2});
    }
    for (Value operand : op.getEpilogueOperands()) {
      unite({q, 0}, {operand, 0});
      unite({q, 2}, {operand, 2});
    }
  }

  /// Every per-step operand shares the batch B and the length L; the
  /// states share B.
  void addRecurrence(AttentionOpInterface op) {
    Value q = op.getQuery();
    SmallVector<Value> perStep{op.getKey(), op.getValue(), op.getOutput()};
    for (Value operand : {op.getStepDecay(), op.getStepBeta()})
      if (operand)
        perStep.push_back(operand);
    for (Value operand : op.getEpilogueOperands())
      if (cast<ShapedType>(operand.getType()).getRank() == 4)
        perStep.push_back(operand);
    nameRole({q, 0}, "B");
    nameRole({q, 2}, "L");
    for (Value operand : perStep) {
      unite({q, 0}, {operand, 0});
      unite({q, 2}, {operand, 2});
    }
    unite({q, 0}, {op.getStateInput(), 0});
    unite({q, 0}, {op.getStateOutput(), 0});
  }

  std::string nameOf(DimRef ref) {
    Key leader = classes.getLeaderValue(key(ref));
    auto it = names.find(leader);
    if (it != names.end())
      return it->second;
    // The role of any member names the group; otherwise N0, N1, ...
    std::string name;
    for (auto member = classes.findLeader(key(ref));
         member != classes.member_end(); ++member)
      if (auto role = roles.find(*member); role != roles.end()) {
        name = role->second;
        break;
      }
    if (name.empty() || usedNames.contains(name))
      name = (name.empty() ? "N" : name) + std::to_string(names.size());
    usedNames.insert(name);
    names[leader] = name;
    return name;
  }

  llvm::EquivalenceClasses<Key> classes;
  llvm::DenseMap<Key, std::string> roles;
  llvm::DenseMap<Key, std::string> names;
  llvm::StringSet<> usedNames;
};

MemRefType bufferTypeOf(Type tensorType) {
  auto type = cast<RankedTensorType>(tensorType);
  return MemRefType::get(type.getShape(), type.getElementType());
}

/// Integer arithmetic on sizes, which the host program evaluates.
bool isHostArithmetic(Operation &op) {
  return isa<arith::ArithDialect>(op.getDialect()) &&
         llvm::all_of(op.getResultTypes(),
                      [](Type t) { return t.isIntOrIndex(); });
}

/// Lowers one entry function; kernels are created before `entry`.
class EntryLowering {
public:
  EntryLowering(func::FuncOp entry, const CpuTiling &tiling)
      : entry(entry), tiling(tiling) {}

  LogicalResult run();

private:
  LogicalResult lowerAttention(ImplicitLocOpBuilder &b,
                               AttentionOpInterface op);
  LogicalResult lowerRecurrence(ImplicitLocOpBuilder &b,
                                AttentionOpInterface op);
  /// The buffer of `result`: the output argument it is returned through, or
  /// a new allocation shaped like `like` dims (`dims[i]` = a host index
  /// value or null for a static dim).
  Value bufferFor(ImplicitLocOpBuilder &b, Value result,
                  ArrayRef<Value> dynamicSizes);
  std::string kernelName(StringRef kind) {
    std::string name;
    for (char c : entry.getSymName())
      name.push_back(llvm::isAlnum(c) ? c : '_');
    return name + "__" + kind.str() + std::to_string(kernelCount++);
  }

  func::FuncOp entry;
  const CpuTiling &tiling;
  func::FuncOp host;
  IRMapping buffers;
  /// Result value -> output argument index of the host function.
  llvm::DenseMap<Value, unsigned> returnedAt;
  unsigned numInputs = 0;
  unsigned kernelCount = 0;
};

LogicalResult EntryLowering::run() {
  if (!entry.getBody().hasOneBlock())
    return entry.emitError("an entry must have a single block");
  auto returnOp = cast<func::ReturnOp>(entry.getBody().front().getTerminator());
  numInputs = entry.getNumArguments();
  for (auto [index, value] : llvm::enumerate(returnOp.getOperands())) {
    if (isa<BlockArgument>(value))
      return returnOp.emitError()
             << "result #" << index
             << " returns an argument; an entry's results must be computed";
    if (!returnedAt.try_emplace(value, numInputs + index).second)
      return returnOp.emitError()
             << "result #" << index << " returns the same value as result #"
             << returnedAt[value] - numInputs
             << "; an entry's results must be distinct";
  }

  // Refuse what cannot be lowered before anything is built.
  for (Operation &op : entry.getBody().front()) {
    if (isa<func::ReturnOp, tensor::DimOp>(op) || isHostArithmetic(op))
      continue;
    if (auto attention = dyn_cast<AttentionOpInterface>(op)) {
      bool lowerable = attention.getNormalizer() == Normalizer::RecurrentState
                           ? succeeded(LinearRecurrenceShape::get(attention))
                           : succeeded(SoftmaxAttentionShape::get(attention));
      if (!lowerable)
        return failure();
      continue;
    }
    return op.emitError() << "no CPU lowering for '" << op.getName() << "' yet";
  }

  SymbolicShapes shapes;
  if (failed(shapes.build(entry)))
    return failure();

  // The host signature: inputs, then one output buffer per result.
  OpBuilder builder(entry);
  Builder &attrs = builder;
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  for (BlockArgument arg : entry.getArguments()) {
    if (!isa<RankedTensorType>(arg.getType()))
      return entry.emitError()
             << "argument #" << arg.getArgNumber() << " is not a ranked tensor";
    argTypes.push_back(bufferTypeOf(arg.getType()));
    NamedAttrList list(entry.getArgAttrDict(arg.getArgNumber()));
    list.set("attn.shape", shapes.shapeOf(arg, attrs));
    argAttrs.push_back(list.getDictionary(builder.getContext()));
  }
  for (auto [index, value] : llvm::enumerate(returnOp.getOperands())) {
    argTypes.push_back(bufferTypeOf(value.getType()));
    NamedAttrList list(entry.getResultAttrDict(index));
    list.set("attn.shape", shapes.shapeOf(value, attrs));
    argAttrs.push_back(list.getDictionary(builder.getContext()));
    // Every dynamic dim of an output must be bound by some input.
    auto type = cast<RankedTensorType>(value.getType());
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (!type.isDynamicDim(d))
        continue;
      bool bound = llvm::any_of(entry.getArguments(), [&](BlockArgument arg) {
        auto argType = cast<RankedTensorType>(arg.getType());
        for (int64_t ad = 0; ad < argType.getRank(); ++ad)
          if (argType.isDynamicDim(ad) &&
              shapes.sameClass({arg, ad}, {value, d}))
            return true;
        return false;
      });
      if (!bound)
        return returnOp.emitError()
               << "dim " << d << " of result #" << index
               << " is not determined by the sizes of the arguments";
    }
  }

  host = func::FuncOp::create(builder, entry.getLoc(),
                              (entry.getSymName() + ".host").str(),
                              builder.getFunctionType(argTypes, {}));
  host.setAllArgAttrs(argAttrs);
  host->setAttr("attn.entry", builder.getUnitAttr());
  host->setAttr("attn.num_inputs", builder.getI64IntegerAttr(numInputs));
  Block *body = host.addEntryBlock();
  for (BlockArgument arg : entry.getArguments())
    buffers.map(arg, body->getArgument(arg.getArgNumber()));

  ImplicitLocOpBuilder b(entry.getLoc(), builder);
  b.setInsertionPointToStart(body);
  for (Operation &op : entry.getBody().front()) {
    b.setLoc(op.getLoc());
    if (isa<func::ReturnOp>(op)) {
      func::ReturnOp::create(b);
      continue;
    }
    if (auto dim = dyn_cast<tensor::DimOp>(op)) {
      Value buffer = buffers.lookup(dim.getSource());
      Value size =
          memref::DimOp::create(b, buffer, buffers.lookup(dim.getIndex()));
      buffers.map(dim.getResult(), size);
      continue;
    }
    if (isHostArithmetic(op)) {
      b.clone(op, buffers);
      continue;
    }
    auto attention = cast<AttentionOpInterface>(op);
    if (failed(attention.getNormalizer() == Normalizer::RecurrentState
                   ? lowerRecurrence(b, attention)
                   : lowerAttention(b, attention)))
      return failure();
  }

  // The host function takes the entry's name.
  std::string name = entry.getSymName().str();
  entry.erase();
  host.setSymName(name);
  return success();
}

Value EntryLowering::bufferFor(ImplicitLocOpBuilder &b, Value result,
                               ArrayRef<Value> dynamicSizes) {
  if (auto it = returnedAt.find(result); it != returnedAt.end())
    return host.getArgument(it->second);
  return memref::AllocOp::create(b, bufferTypeOf(result.getType()),
                                 dynamicSizes);
}

LogicalResult EntryLowering::lowerAttention(ImplicitLocOpBuilder &b,
                                            AttentionOpInterface op) {
  FailureOr<SoftmaxAttentionShape> maybeShape = SoftmaxAttentionShape::get(op);
  if (failed(maybeShape))
    return failure();
  const SoftmaxAttentionShape &shape = *maybeShape;
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto mul = [&](Value x, Value y) { return arith::MulIOp::create(b, x, y); };
  auto select = [&](Value c, Value x, Value y) {
    return arith::SelectOp::create(b, c, x, y);
  };

  Value q = buffers.lookup(op.getQuery()), k = buffers.lookup(op.getKey()),
        v = buffers.lookup(op.getValue());
  Value gate;
  if (shape.epilogue == Epilogue::SigmoidGate)
    gate = buffers.lookup(op.getEpilogueOperands()[0]);
  Value batch = memref::DimOp::create(b, q, 0);
  Value lq = memref::DimOp::create(b, q, 2);
  Value lk = memref::DimOp::create(b, k, 2);

  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  SmallVector<Value> outSizes;
  for (int64_t d = 0; d < outType.getRank(); ++d)
    if (outType.isDynamicDim(d))
      outSizes.push_back(d == 0 ? batch : lq);
  Value out = bufferFor(b, op.getOutput(), outSizes);
  buffers.map(op.getOutput(), out);
  Value lse;
  if (Value lseResult = op.getLogSumExp()) {
    lse = bufferFor(b, lseResult, {batch, lq});
    buffers.map(lseResult, lse);
  }

  // Decode calls (few query rows) take split-KV + merge, others the flash
  // kernel; the other path gets zero workgroups and empty temporaries.
  Value zero = index(0);
  Value decode = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, lq,
                                       index(tiling.decodeMaxQueries));
  Value queryTiles = arith::CeilDivUIOp::create(b, lq, index(tiling.queryTile));
  Value flashGroups =
      select(decode, zero, mul(mul(batch, index(shape.numHeads)), queryTiles));
  Value splits = arith::CeilDivUIOp::create(b, lk, index(tiling.splitKeys));
  Value decodeBatch = select(decode, batch, zero);
  Value decodeSplits = select(decode, splits, zero);
  Value decodeRows = select(decode, lq, zero);
  auto partialOutType = MemRefType::get({ShapedType::kDynamic, shape.numHeads,
                                         ShapedType::kDynamic,
                                         ShapedType::kDynamic, shape.valueDim},
                                        b.getF32Type());
  auto partialLseType =
      MemRefType::get({ShapedType::kDynamic, shape.numHeads,
                       ShapedType::kDynamic, ShapedType::kDynamic},
                      b.getF32Type());
  Value partialOut = memref::AllocOp::create(
      b, partialOutType, ValueRange{decodeBatch, decodeRows, decodeSplits});
  Value partialLse = memref::AllocOp::create(
      b, partialLseType, ValueRange{decodeBatch, decodeRows, decodeSplits});
  Value splitGroups = mul(
      mul(mul(decodeBatch, index(shape.numKvHeads)), decodeSplits), decodeRows);
  Value mergeGroups = mul(mul(decodeBatch, index(shape.numHeads)), decodeRows);

  SmallVector<Value> flashBindings{q, k, v};
  if (gate)
    flashBindings.push_back(gate);
  flashBindings.push_back(out);
  if (lse)
    flashBindings.push_back(lse);
  SmallVector<Value> splitBindings{q, k, v, partialOut, partialLse};
  SmallVector<Value> mergeBindings{partialOut, partialLse};
  if (gate)
    mergeBindings.push_back(gate);
  mergeBindings.push_back(out);
  if (lse)
    mergeBindings.push_back(lse);

  OpBuilder kernelBuilder(host);
  auto dispatch = [&](func::FuncOp kernel, Value groups, ValueRange bindings) {
    DispatchOp::create(b, kernel.getSymName(), groups, bindings);
  };
  auto types = [](ValueRange values) {
    return SmallVector<Type>(values.getTypes());
  };
  dispatch(buildFlashAttentionKernel(kernelBuilder, op.getLoc(),
                                     kernelName("flash"), shape, tiling,
                                     types(flashBindings)),
           flashGroups, flashBindings);
  dispatch(buildSplitKvAttentionKernel(kernelBuilder, op.getLoc(),
                                       kernelName("split_kv"), shape, tiling,
                                       types(splitBindings)),
           splitGroups, splitBindings);
  dispatch(buildSplitKvMergeKernel(kernelBuilder, op.getLoc(),
                                   kernelName("merge"), shape, tiling,
                                   types(mergeBindings)),
           mergeGroups, mergeBindings);
  return success();
}

LogicalResult EntryLowering::lowerRecurrence(ImplicitLocOpBuilder &b,
                                             AttentionOpInterface op) {
  FailureOr<LinearRecurrenceShape> maybeShape = LinearRecurrenceShape::get(op);
  if (failed(maybeShape))
    return failure();
  const LinearRecurrenceShape &shape = *maybeShape;
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };

  SmallVector<Value> bindings;
  for (Value operand :
       {op.getQuery(), op.getKey(), op.getValue(), op.getStepDecay(),
        op.getStepBeta(), op.getStateInput()})
    if (operand)
      bindings.push_back(buffers.lookup(operand));
  for (Value operand : op.getEpilogueOperands())
    bindings.push_back(buffers.lookup(operand));
  Value q = bindings.front();
  Value batch = memref::DimOp::create(b, q, 0);
  Value length = memref::DimOp::create(b, q, 2);
  Value out = bufferFor(b, op.getOutput(), {batch, length});
  Value state = bufferFor(b, op.getStateOutput(), {batch});
  buffers.map(op.getOutput(), out);
  buffers.map(op.getStateOutput(), state);
  bindings.push_back(out);
  bindings.push_back(state);

  // Calls of 1 .. recurrent-max-steps steps run the recurrence step by step,
  // others (prefill, and L = 0, which only copies the state) the chunked
  // form; the other kernel gets zero workgroups.
  // L - 1 <= max - 1 unsigned: L = 0 wraps around and is not stepwise.
  Value stepwise = arith::CmpIOp::create(
      b, arith::CmpIPredicate::ule, arith::SubIOp::create(b, length, index(1)),
      index(tiling.recurrentMaxSteps - 1));
  Value groups = arith::MulIOp::create(b, batch, index(shape.numValueHeads));
  Value zero = index(0);
  Value chunkedGroups = arith::SelectOp::create(b, stepwise, zero, groups);
  Value stepGroups = arith::SelectOp::create(b, stepwise, groups, zero);

  OpBuilder kernelBuilder(host);
  SmallVector<Type> types(ValueRange(bindings).getTypes());
  const int64_t rowColumns = shape.paddedValueDim(tiling.vectorWidth);
  func::FuncOp chunked = buildChunkedRecurrenceKernel(
      kernelBuilder, op.getLoc(), kernelName("chunked"), shape, tiling,
      rowColumns, types);

  // With fewer (batch, value head) pairs than workers, column tiles of the
  // state keep more workers busy, each repeating the column-independent
  // work of a chunk. One kernel per tile width; the host runs the one (or
  // whole rows) whose critical path, in multiply-adds per chunk, is the
  // shortest for the call's batch and the runtime's workers.
  SmallVector<int64_t> tileWidths = shape.stateColumnTiles(tiling);
  SmallVector<Value> tileGroups;
  Value gateGroups;
  if (!tileWidths.empty()) {
    Value workers = WorkerCountOp::create(b, b.getIndexType());
    auto critical = [&](Value workgroups, int64_t work) -> Value {
      return arith::MulIOp::create(
          b, arith::CeilDivUIOp::create(b, workgroups, workers), index(work));
    };
    Value bestPath = critical(groups, shape.chunkWork(rowColumns));
    Value bestColumns = index(rowColumns);
    for (int64_t columns : tileWidths) {
      Value path = critical(
          arith::MulIOp::create(b, groups, index(rowColumns / columns)),
          shape.chunkWork(columns));
      Value shorter =
          arith::CmpIOp::create(b, arith::CmpIPredicate::ult, path, bestPath);
      bestPath = arith::SelectOp::create(b, shorter, path, bestPath);
      bestColumns =
          arith::SelectOp::create(b, shorter, index(columns), bestColumns);
    }
    // (chunkedGroups is already 0 for stepwise calls.)
    auto ifChosen = [&](int64_t columns, Value count) -> Value {
      Value chosen = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                           bestColumns, index(columns));
      return arith::SelectOp::create(b, chosen, count, zero);
    };
    chunkedGroups = ifChosen(rowColumns, chunkedGroups);
    Value chunkedCall = arith::SelectOp::create(b, stepwise, zero, groups);
    for (int64_t columns : tileWidths)
      tileGroups.push_back(ifChosen(
          columns,
          arith::MulIOp::create(b, chunkedCall, index(rowColumns / columns))));
    if (shape.rmsNormGate) {
      Value rows = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                         bestColumns, index(rowColumns));
      gateGroups = arith::SelectOp::create(
          b, rows, zero,
          arith::MulIOp::create(
              b, chunkedCall,
              arith::CeilDivUIOp::create(b, length, index(shape.chunkSize))));
    }
  }

  func::FuncOp recurrent =
      buildRecurrentStepKernel(kernelBuilder, op.getLoc(),
                               kernelName("recurrent"), shape, tiling, types);
  DispatchOp::create(b, chunked.getSymName(), chunkedGroups, bindings);
  for (auto [columns, count] : llvm::zip(tileWidths, tileGroups)) {
    func::FuncOp columnTiled = buildChunkedRecurrenceKernel(
        kernelBuilder, op.getLoc(),
        kernelName(("chunked_columns" + Twine(columns) + "_").str()), shape,
        tiling, columns, types);
    DispatchOp::create(b, columnTiled.getSymName(), count, bindings);
  }
  if (gateGroups) {
    func::FuncOp gate = buildRecurrenceGateKernel(
        kernelBuilder, op.getLoc(), kernelName("gate"), shape, tiling, types);
    DispatchOp::create(b, gate.getSymName(), gateGroups, bindings);
  }
  DispatchOp::create(b, recurrent.getSymName(), stepGroups, bindings);
  return success();
}

struct AttnCpuDispatches final
    : mlir::attn::impl::AttnCpuDispatchesBase<AttnCpuDispatches> {
  using Base::Base;

  void runOnOperation() override {
    CpuTiling tiling;
    tiling.vectorWidth = vectorWidth;
    tiling.queryTile = queryTile;
    tiling.keyTile = keyTile;
    tiling.splitKeys = splitKeys;
    tiling.decodeMaxQueries = decodeMaxQueries;
    tiling.recurrentMaxSteps = recurrentMaxSteps;
    tiling.stateColumns = stateColumns;
    if (tiling.vectorWidth <= 0 || tiling.queryTile <= 0 ||
        tiling.queryTile % tiling.vectorWidth != 0 || tiling.keyTile <= 0 ||
        tiling.keyTile % 4 != 0 || tiling.splitKeys <= 0 ||
        tiling.stateColumns < tiling.vectorWidth) {
      getOperation().emitError()
          << "bad CPU tiling: query-tile (" << tiling.queryTile
          << ") must be a positive multiple of vector-width ("
          << tiling.vectorWidth << "), key-tile (" << tiling.keyTile
          << ") a positive multiple of 4, split-keys (" << tiling.splitKeys
          << ") positive, state-columns (" << tiling.stateColumns
          << ") at least vector-width";
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> entries;
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() && !func->hasAttr("attn.kernel") &&
          !func->hasAttr("attn.entry"))
        entries.push_back(func);
    for (func::FuncOp entry : entries)
      if (failed(EntryLowering(entry, tiling).run()))
        return signalPassFailure();
  }
};

} // namespace
