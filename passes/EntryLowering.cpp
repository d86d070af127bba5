//===- EntryLowering.cpp - Entries to host programs + kernels -------------===//
//
// The one place where tensors become buffers: an entry's results are the
// caller's output buffers (destination passing), every other value gets a
// memref.alloc on the host side. The symbolic shapes name the dynamic dims
// that must agree at run time (B, Lq, Lk, L, ...).
//
//===----------------------------------------------------------------------===//

#include "passes/EntryLowering.h"

#include "Attn/AttnDialect.h"
#include "Attn/Limits.h"
#include "passes/kernels/AttentionShapes.h"
#include "passes/kernels/KeySelection.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "llvm/ADT/StringSet.h"

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
      if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
        int64_t rank = slice.getResultType().getRank();
        uniteLeading(slice.getSource(), slice.getResult(), rank - 1);
        return WalkResult::advance();
      }
      addKernelOp(op);
      return WalkResult::advance();
    });
    return failure(result.wasInterrupted());
  }

  /// A dim computed from another: min(atMost, ceil(from / divisor))
  /// (Quest's block count ceil(Lk / block_size), a top-k selection's
  /// min(top_k, ceil(Lk / block_size)) slots). atMost < 0: no cap.
  struct Derived {
    DimRef from;
    int64_t divisor;
    int64_t atMost;
  };
  /// Whether dim `ref` is derived from another, and how.
  std::optional<Derived> derivedFrom(DimRef ref) const {
    auto it = derived.find(key(ref));
    if (it == derived.end())
      return std::nullopt;
    return it->second;
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
      if (auto from = derivedFrom({value, d})) {
        // {of = "Lk", ceil_div = 16[, at_most = 64]}: the runtime computes
        // and checks it.
        SmallVector<NamedAttribute> fields{
            b.getNamedAttr("of", b.getStringAttr(nameOf(from->from))),
            b.getNamedAttr("ceil_div", b.getI64IntegerAttr(from->divisor))};
        if (from->atMost >= 0)
          fields.push_back(
              b.getNamedAttr("at_most", b.getI64IntegerAttr(from->atMost)));
        dims.push_back(b.getDictionaryAttr(fields));
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
  /// `ref` is min(`atMost`, ceil(`from` / `divisor`)) (when both are
  /// dynamic; atMost < 0: no cap).
  void derive(DimRef ref, DimRef from, int64_t divisor, int64_t atMost = -1) {
    if (cast<ShapedType>(ref.first.getType()).isDynamicDim(ref.second) &&
        cast<ShapedType>(from.first.getType()).isDynamicDim(from.second))
      derived.try_emplace(key(ref), Derived{from, divisor, atMost});
  }
  /// Unites dims [0, count) of `a` and `b`.
  void uniteLeading(Value a, Value b, int64_t count) {
    for (int64_t d = 0; d < count; ++d)
      unite({a, d}, {b, d});
  }

  /// A page table [B, MP] and the key lengths [B] beside it, both
  /// following the queries `q` [B, ...] when given.
  void addPageTable(Value pageTable, Value seqLens, Value q) {
    if (q)
      unite({q, 0}, {pageTable, 0}, "B");
    else
      nameRole({pageTable, 0}, "B");
    nameRole({pageTable, 1}, "MP");
    unite({pageTable, 0}, {seqLens, 0});
  }

  /// Unites dim 0 of `pages` (a tensor indexed by page) with the NP of the
  /// paged caches read through `pageTable`, which its page numbers index.
  void unitePages(Value pages, Value pageTable) {
    for (Operation *user : pageTable.getUsers()) {
      Value cache;
      if (auto attention = dyn_cast<AttentionOpInterface>(user))
        cache = attention.getKeyPageTable() == pageTable ? attention.getKey()
                                                         : Value();
      else if (auto select = dyn_cast<SelectTopPOp>(user))
        cache = select.getKey();
      else if (auto meta = dyn_cast<BlockMetaOp>(user))
        cache = meta.getKey();
      if (cache)
        unite({pages, 0}, {cache, 0}, "NP");
    }
  }

  /// A selection's rows follow its queries: [B, H, Lq, N] beside [B, H,
  /// Lq, D], or packed [T, H, N] beside [T, H, D] with the queries'
  /// offsets [B+1].
  void addSelectionRows(Value q, Value selection, Value queryOffsets) {
    unite({q, 0}, {selection, 0}, queryOffsets ? "T" : "B");
    if (queryOffsets)
      nameRole({queryOffsets, 0}, "B+1");
    else
      unite({q, 2}, {selection, 2}, "Lq");
  }

  /// The shape relations of the ops with kernels of their own (isKernelOp).
  void addKernelOp(Operation *op) {
    if (auto meta = dyn_cast<BlockMetaOp>(op); meta && meta.getPageTable()) {
      // kmeta_pages [NP, 2, Hkv, D] of a cache [NP, P, Hkv, D].
      unite({meta.getKey(), 0}, {meta.getMeta(), 0}, "NP");
      addPageTable(meta.getPageTable(), meta.getSeqLens(), Value());
    } else if (auto select = dyn_cast<SelectTopKOp>(op);
               select && select.getPageTable()) {
      Value q = select.getQuery(), offsets = select.getCuSeqlensQ();
      addPageTable(select.getPageTable(), select.getSeqLens(),
                   offsets ? Value() : q);
      unitePages(select.getMeta(), select.getPageTable());
      addSelectionRows(q, select.getBlocks(), offsets);
    } else if (auto select = dyn_cast<SelectTopPOp>(op);
               select && select.getPageTable()) {
      Value q = select.getQuery(), offsets = select.getCuSeqlensQ();
      addPageTable(select.getPageTable(), select.getSeqLens(),
                   offsets ? Value() : q);
      nameRole({select.getKey(), 0}, "NP");
      addSelectionRows(q, select.getTokens(), offsets);
      if (Value blocks = select.getBlocks())
        addSelectionRows(q, blocks, offsets);
    } else if (auto meta = dyn_cast<BlockMetaOp>(op)) {
      unite({meta.getKey(), 0}, {meta.getMeta(), 0}, "B");
      nameRole({meta.getKey(), 2}, "Lk");
      derive({meta.getMeta(), 2}, {meta.getKey(), 2}, meta.getBlockSize());
    } else if (auto select = dyn_cast<SelectTopKOp>(op)) {
      Value q = select.getQuery();
      unite({q, 0}, {select.getMeta(), 0}, "B");
      unite({q, 0}, {select.getBlocks(), 0});
      unite({q, 2}, {select.getBlocks(), 2}, "Lq");
      // The metadata holds ceil(Lk / block_size) blocks of the keys whose
      // length is `key_length`.
      // Its result keeps min(top_k, that many) slots a row.
      if (auto dim = select.getKeyLength().getDefiningOp<tensor::DimOp>())
        if (std::optional<int64_t> index = dim.getConstantIndex()) {
          DimRef keyLength{dim.getSource(), *index};
          derive({select.getMeta(), 2}, keyLength, select.getBlockSize());
          derive({select.getBlocks(), 3}, keyLength, select.getBlockSize(),
                 select.getTopK());
        }
    } else if (auto select = dyn_cast<SelectTopPOp>(op)) {
      Value q = select.getQuery(), tokens = select.getTokens();
      unite({q, 0}, {select.getKey(), 0}, "B");
      unite({q, 0}, {tokens, 0});
      unite({q, 2}, {tokens, 2}, "Lq");
      nameRole({select.getKey(), 2}, "Lk");
      if (!select.getMaxTokens())
        unite({select.getKey(), 2}, {tokens, 3});
      if (Value blocks = select.getBlocks())
        uniteLeading(q, blocks, 3);
    } else if (auto accept = dyn_cast<TreeAcceptOp>(op)) {
      Value tokens = accept.getTokens();
      nameRole({tokens, 0}, "B");
      nameRole({tokens, 1}, "T");
      for (Value tree :
           {accept.getTarget(), accept.getParents(), accept.getPath()})
        uniteLeading(tokens, tree, 2);
      unite({tokens, 0}, {accept.getLength(), 0});
      unite({tokens, 0}, {accept.getBonus(), 0});
    } else if (auto gate = dyn_cast<GateOp>(op)) {
      Value output = gate.getOutput();
      const int64_t rank = gate.getOutput().getType().getRank();
      uniteLeading(output, gate.getGate(), rank - 1);
      if (Value skipInput = gate.getSkipInput())
        uniteLeading(output, skipInput, rank);
      uniteLeading(output, gate.getResult(), rank);
    } else if (auto gate = dyn_cast<RmsNormGateOp>(op)) {
      Value output = gate.getOutput();
      const int64_t rank = gate.getOutput().getType().getRank();
      uniteLeading(output, gate.getZ(), rank);
      if (Value skipInput = gate.getSkipInput())
        uniteLeading(output, skipInput, rank);
      uniteLeading(output, gate.getResult(), rank);
    } else if (auto steps = dyn_cast<PathStepsOp>(op)) {
      Value input = steps.getInput(), result = steps.getResult();
      nameRole({input, 0}, "B");
      nameRole({steps.getPath(), 1}, "T");
      unite({input, 0}, {steps.getPath(), 0});
      unite({input, 0}, {steps.getLength(), 0});
      unite({input, 2}, {steps.getPath(), 1});
      uniteLeading(input, result, cast<ShapedType>(input.getType()).getRank());
    } else if (auto update = dyn_cast<PageMetaUpdateOp>(op)) {
      Value cache = update.getKeyCache();
      nameRole({cache, 0}, "NP");
      nameRole({update.getSlots(), 0}, "T");
      unite({cache, 0}, {update.getMeta(), 0});
      unite({cache, 0}, {update.getNewMeta(), 0});
    } else if (auto append = dyn_cast<KvAppendOp>(op)) {
      Value k = append.getKey();
      nameRole({k, 0}, "T");
      unite({k, 0}, {append.getSlots(), 0});
      Value cache = append.getKeyCache();
      nameRole({cache, 0}, "NP");
      unite({cache, 0}, {append.getNewKeyCache(), 0});
      if (append.getValue()) {
        unite({k, 0}, {append.getValue(), 0});
        unite({cache, 0}, {append.getValueCache(), 0});
        unite({cache, 0}, {append.getNewValueCache(), 0});
      }
    } else if (auto compact = dyn_cast<KvCompactOp>(op);
               compact && compact.getCuSeqlensK()) {
      // Packed keys [Tk, Hkv, F], each sequence's by its offsets [B + 1].
      Value k = compact.getKey(), path = compact.getPath();
      nameRole({k, 0}, "Tk");
      nameRole({path, 0}, "B");
      nameRole({path, 1}, "T");
      nameRole({compact.getCuSeqlensK(), 0}, "B+1");
      unite({path, 0}, {compact.getLength(), 0});
      for (Value kv :
           {compact.getValue(), compact.getNewKey(), compact.getNewValue()})
        if (kv)
          uniteLeading(k, kv, 2);
    } else if (auto compact = dyn_cast<KvCompactOp>(op)) {
      Value k = compact.getKey();
      nameRole({k, 0}, "B");
      nameRole({k, 2}, "Lk");
      nameRole({compact.getPath(), 1}, "T");
      for (Value kv :
           {compact.getValue(), compact.getNewKey(), compact.getNewValue()})
        if (kv)
          uniteLeading(k, kv, 3);
      unite({k, 0}, {compact.getPath(), 0});
      unite({k, 0}, {compact.getLength(), 0});
    }
  }

  void addAttention(AttentionOpInterface op) {
    if (op.getNormalizer() == Normalizer::RecurrentState)
      return addRecurrence(op);
    Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
    Value o = op.getOutput(), lse = op.getLogSumExp();
    if (Value offsets = op.getSequenceOffsets()) {
      // A ragged batch: rows packed token-major [T, H, F], keys packed
      // [Tk, Hkv, F] or in a paged cache; the offsets hold B + 1 entries,
      // a dim of its own that the host program checks against B.
      nameRole({q, 0}, "T");
      unite({q, 0}, {o, 0});
      if (lse)
        unite({q, 0}, {lse, 0});
      for (Value operand : op.getEpilogueOperands())
        unite({q, 0}, {operand, 0});
      nameRole({offsets, 0}, "B+1");
      // Sparse attention's selection [T, H, N].
      if (Value selection = op.getKeySelection())
        uniteLeading(q, selection, 2);
      if (Value pageTable = op.getKeyPageTable()) {
        unite({k, 0}, {v, 0}, "NP");
        nameRole({pageTable, 0}, "B");
        nameRole({pageTable, 1}, "MP");
        unite({pageTable, 0}, {op.getKeyLengths(), 0});
      } else {
        unite({k, 0}, {v, 0}, "Tk");
        unite({offsets, 0}, {op.getKeyOffsets(), 0});
      }
      return;
    }
    if (Value keyOffsets = op.getKeyOffsets()) {
      // A tree of T nodes per sequence over packed keys [Tk, Hkv, F]: the
      // offsets hold B + 1 entries, checked at run time against B.
      Value parents = op.getKeySelection();
      nameRole({q, 2}, "T");
      unite({q, 0}, {parents, 0}, "B");
      unite({q, 2}, {parents, 1});
      unite({k, 0}, {v, 0}, "Tk");
      nameRole({keyOffsets, 0}, "B+1");
      unite({q, 0}, {o, 0});
      unite({q, 2}, {o, 2});
      addRowTensors(op);
      return;
    }
    if (Value pageTable = op.getKeyPageTable()) {
      // A paged cache [NP, P, Hkv, F]: its pages are shared by the batch's
      // sequences; the page table [B, MP] and seq_lens [B] follow the
      // queries (a tree's T nodes, with its parents [B, T]).
      if (op.getKeySelectionKind() == KeySelectionKind::Tree) {
        Value parents = op.getKeySelection();
        nameRole({q, 2}, "T");
        unite({q, 0}, {parents, 0});
        unite({q, 2}, {parents, 1});
      } else if (Value selection = op.getKeySelection()) {
        uniteLeading(q, selection, 3);
      }
      unite({k, 0}, {v, 0}, "NP");
      unite({q, 0}, {pageTable, 0}, "B");
      nameRole({pageTable, 1}, "MP");
      unite({q, 0}, {op.getKeyLengths(), 0});
      unite({q, 0}, {o, 0});
      unite({q, 2}, {o, 2}, "Lq");
      addRowTensors(op);
      return;
    }
    if (Value selection = op.getKeySelection()) {
      if (op.getKeySelectionKind() == KeySelectionKind::Tree) {
        // parents [B, T]: the queries are the T tree nodes.
        nameRole({q, 2}, "T");
        unite({q, 0}, {selection, 0});
        unite({q, 2}, {selection, 1});
      } else {
        uniteLeading(q, selection, 3);
      }
    }
    unite({q, 0}, {k, 0}, "B");
    unite({q, 0}, {v, 0});
    unite({q, 0}, {o, 0});
    unite({k, 2}, {v, 2}, "Lk");
    unite({q, 2}, {o, 2}, "Lq");
    addRowTensors(op);
  }

  /// lse [B, H, Lq] and the epilogue's operands [B, H, Lq, ...] follow the
  /// queries [B, H, Lq, D]; then the variants' tensors.
  void addRowTensors(AttentionOpInterface op) {
    Value q = op.getQuery();
    SmallVector<Value> rows(op.getEpilogueOperands());
    if (Value lse = op.getLogSumExp())
      rows.insert(rows.begin(), lse);
    for (Value row : rows) {
      unite({q, 0}, {row, 0});
      unite({q, 2}, {row, 2});
    }
    addVariantTensors(op);
  }

  /// A dim of a tensor that a variant region reads directly at the batch
  /// `b` is B, at a position `qp` or `kp` it is Lk (positions index the
  /// keys): the runtime then checks, say, that document ids are [B, Lk].
  /// Dims read at computed indices stay free (the kernels clamp them).
  void addVariantTensors(AttentionOpInterface op) {
    for (Region *region : {op.getScoreModifier(), op.getMaskModifier()}) {
      if (!region)
        continue;
      // score_mod's arguments are (s, b, h, qp, kp), mask_mod's (b, h, qp,
      // kp).
      auto args = region->getArguments();
      unsigned first = args.size() == 5 ? 1 : 0;
      Value batch = args[first], queryPos = args[first + 2],
            keyPos = args[first + 3];
      region->walk([&](tensor::ExtractOp extract) {
        for (auto [d, index] : llvm::enumerate(extract.getIndices())) {
          DimRef dim{extract.getTensor(), static_cast<int64_t>(d)};
          if (index == batch)
            unite(dim, {op.getQuery(), 0});
          else if ((index == queryPos || index == keyPos) &&
                   !op.getKeyPageTable())
            unite(dim, {op.getKey(), 2});
        }
      });
    }
  }

  /// Every per-step operand shares the batch B and the length L; the
  /// states share B, or are a pool of N with a slot per batch row. A ragged
  /// batch (SPEC §8) packs the steps token-major ([T, H, ...]): they share
  /// T, the states are a pool of N, and B is that of the pool's slots.
  void addRecurrence(AttentionOpInterface op) {
    Value q = op.getQuery();
    if (Value offsets = op.getSequenceOffsets()) {
      nameRole({q, 0}, "T");
      SmallVector<Value> perStep{op.getKey(), op.getValue(), op.getOutput()};
      for (Value operand : {op.getStepDecay(), op.getStepBeta()})
        if (operand)
          perStep.push_back(operand);
      for (Value operand : op.getEpilogueOperands())
        if (cast<ShapedType>(operand.getType()).getRank() == 3)
          perStep.push_back(operand);
      for (Value operand : perStep)
        unite({q, 0}, {operand, 0});
      unite({op.getStateInput(), 0}, {op.getStateOutput(), 0}, "N");
      nameRole({op.getStateSlots(), 0}, "B");
      // cu_seqlens holds B + 1 offsets: a dim of its own, which the host
      // program checks against B.
      nameRole({offsets, 0}, "B+1");
      return;
    }
    SmallVector<Value> perStep{op.getKey(), op.getValue(), op.getOutput()};
    for (Value operand : {op.getStepDecay(), op.getStepBeta()})
      if (operand)
        perStep.push_back(operand);
    for (Value operand : op.getEpilogueOperands())
      if (cast<ShapedType>(operand.getType()).getRank() == 4)
        perStep.push_back(operand);
    const bool tree = op.getKeySelectionKind() == KeySelectionKind::Tree;
    nameRole({q, 0}, "B");
    nameRole({q, 2}, tree ? "T" : "L");
    for (Value operand : perStep) {
      unite({q, 0}, {operand, 0});
      unite({q, 2}, {operand, 2});
    }
    if (Value slots = op.getStateSlots()) {
      // States in a pool of N, a slot per batch row.
      nameRole({op.getStateInput(), 0}, "N");
      if (Value stateOutput = op.getStateOutput())
        unite({op.getStateInput(), 0}, {stateOutput, 0});
      unite({q, 0}, {slots, 0});
    } else {
      unite({q, 0}, {op.getStateInput(), 0});
      if (Value stateOutput = op.getStateOutput())
        unite({q, 0}, {stateOutput, 0});
    }
    // A tree's parents [B, T].
    if (tree) {
      unite({q, 0}, {op.getKeySelection(), 0});
      unite({q, 2}, {op.getKeySelection(), 1});
    }
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
  llvm::DenseMap<Key, Derived> derived;
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

/// A float constant, which only variant regions read (canonicalization
/// hoists their constants out of them); each kernel clones its own.
bool isRegionConstant(Operation &op) {
  return op.hasTrait<OpTrait::ConstantLike>() && op.getNumResults() == 1 &&
         isa<FloatType>(op.getResult(0).getType());
}

/// tensor.dim reads a dim the host knows: a constant index below the
/// rank (upstream leaves an index past it undefined rather than invalid).
LogicalResult checkDimLowerable(tensor::DimOp dim) {
  std::optional<int64_t> index = dim.getConstantIndex();
  if (!index)
    return dim.emitError("an entry's tensor.dim needs a constant index");
  auto type = dyn_cast<RankedTensorType>(dim.getSource().getType());
  if (!type)
    return dim.emitError("an entry's tensor.dim needs a ranked tensor");
  int64_t rank = type.getRank();
  if (*index < 0 || *index >= rank)
    return dim.emitError() << "index " << *index
                           << " is out of range for a tensor of rank " << rank;
  return success();
}

/// The feature sizes of an attn op (the last dim of each floating-point
/// tensor of rank 3 or more: queries, keys, values, gates, metadata,
/// states) are bounded as the frontend bounds head_dim: the kernels of both
/// targets unroll over them, and a hand-written 65536 took minutes and
/// gigabytes to compile.
LogicalResult checkFeatureSizes(Operation &op) {
  auto check = [&](Type type, StringRef kind, unsigned index) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || tensor.getRank() < 3 ||
        !isa<FloatType>(tensor.getElementType()))
      return success();
    int64_t size = tensor.getShape().back();
    if (ShapedType::isDynamic(size) || size <= limits::kMaxFeatureDim)
      return success();
    return LogicalResult(op.emitError() << "feature size " << size
                                        << " (the last dim of " << kind << " #"
                                        << index << ") is past attn's limit of "
                                        << limits::kMaxFeatureDim);
  };
  for (auto [index, type] : llvm::enumerate(op.getOperandTypes()))
    if (failed(check(type, "operand", index)))
      return failure();
  for (auto [index, type] : llvm::enumerate(op.getResultTypes()))
    if (failed(check(type, "result", index)))
      return failure();
  return success();
}

} // namespace

LogicalResult EntryLowering::run() {
  if (!entry.getBody().hasOneBlock())
    return entry.emitError("an entry must have a single block");
  auto returnOp = cast<func::ReturnOp>(entry.getBody().front().getTerminator());
  numInputs = entry.getNumArguments();
  // Arguments marked attn.in_place (state pools, KV caches) are updated in
  // place: the entry's last results, one per such argument in order, are
  // their new values, written into the argument's own buffer.
  SmallVector<BlockArgument> inPlace;
  for (BlockArgument arg : entry.getArguments())
    if (entry.getArgAttr(arg.getArgNumber(), "attn.in_place"))
      inPlace.push_back(arg);
  if (inPlace.size() > returnOp.getNumOperands())
    return returnOp.emitError()
           << "an entry with " << inPlace.size()
           << " in-place arguments must return their updates last, got "
           << returnOp.getNumOperands() << " results";
  numOutputs = returnOp.getNumOperands() - inPlace.size();
  for (auto [n, arg] : llvm::enumerate(inPlace)) {
    Value update = returnOp.getOperand(numOutputs + n);
    if (failed(checkInPlaceUpdate(arg, update)))
      return failure();
    returnedAt[update] = arg.getArgNumber();
  }
  for (auto [index, value] :
       llvm::enumerate(returnOp.getOperands().take_front(numOutputs))) {
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
    if (isa<func::ReturnOp>(op) || isHostArithmetic(op) || isRegionConstant(op))
      continue;
    if (auto dim = dyn_cast<tensor::DimOp>(op)) {
      if (failed(checkDimLowerable(dim)))
        return failure();
      continue;
    }
    if (isa<AttnDialect>(op.getDialect()) && failed(checkFeatureSizes(op)))
      return failure();
    if (auto attention = dyn_cast<AttentionOpInterface>(op)) {
      if (failed(checkLowerable(attention)) ||
          failed(checkStatePoolInPlace(attention)))
        return failure();
      continue;
    }
    if (auto append = dyn_cast<KvAppendOp>(op)) {
      if (failed(checkCachesInPlace(append)))
        return failure();
      continue;
    }
    if (auto update = dyn_cast<PageMetaUpdateOp>(op)) {
      if (failed(
              checkUpdatedInPlace(&op, "the metadata of attn.page_meta_update",
                                  {{update.getMeta(), update.getNewMeta()}})))
        return failure();
      continue;
    }
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
      if (failed(checkLeadingFeatureView(slice)))
        return failure();
      continue;
    }
    if (auto gate = dyn_cast<GateOp>(op)) {
      if (failed(checkGateLowerable(gate)))
        return failure();
      continue;
    }
    if (isKernelOp(&op))
      continue;
    // attn-optimize inlined every call it could.
    if (auto call = dyn_cast<func::CallOp>(op))
      return call.emitError()
             << "calls @" << call.getCallee()
             << ", which could not be inlined: a function an entry calls "
                "needs a body, and may not call itself";
    return op.emitError() << "no " << target << " lowering for '"
                          << op.getName() << "' yet";
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
  for (auto [index, value] :
       llvm::enumerate(returnOp.getOperands().take_front(numOutputs))) {
    argTypes.push_back(bufferTypeOf(value.getType()));
    NamedAttrList list(entry.getResultAttrDict(index));
    list.set("attn.shape", shapes.shapeOf(value, attrs));
    argAttrs.push_back(list.getDictionary(builder.getContext()));
    // Every dynamic dim of an output must be bound by some input (a
    // derived dim through the dim it is derived from).
    auto type = cast<RankedTensorType>(value.getType());
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (!type.isDynamicDim(d))
        continue;
      DimRef dim{value, d};
      if (auto from = shapes.derivedFrom(dim))
        dim = from->from;
      bool bound = llvm::any_of(entry.getArguments(), [&](BlockArgument arg) {
        auto argType = cast<RankedTensorType>(arg.getType());
        for (int64_t ad = 0; ad < argType.getRank(); ++ad)
          if (argType.isDynamicDim(ad) && !shapes.derivedFrom({arg, ad}) &&
              shapes.sameClass({arg, ad}, dim))
            return true;
        return false;
      });
      if (!bound)
        return returnOp.emitError()
               << "dim " << d << " of result #" << index
               << " is not determined by the sizes of the arguments";
    }
  }

  if (failed(addValueContracts(argAttrs)))
    return failure();

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
    if (isRegionConstant(op))
      continue;
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op)) {
      // A view of the source's leading features: the source's own buffer
      // (checkLeadingFeatureView).
      buffers.map(slice.getResult(), buffers.lookup(slice.getSource()));
      continue;
    }
    auto attention = dyn_cast<AttentionOpInterface>(op);
    if (!attention) {
      lowerOp(b, &op);
      continue;
    }
    if (failed(attention.getNormalizer() == Normalizer::RecurrentState
                   ? lowerRecurrence(b, attention)
                   : lowerSoftmax(b, attention)))
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

void EntryLowering::dispatchKernel(
    ImplicitLocOpBuilder &b, Value workgroups, ValueRange bindings,
    function_ref<func::FuncOp(OpBuilder &, TypeRange)> build) {
  OpBuilder kernelBuilder(host);
  SmallVector<Type> types(bindings.getTypes());
  DispatchOp::create(b, build(kernelBuilder, types).getSymName(), workgroups,
                     bindings);
}

std::string EntryLowering::kernelName(StringRef kind) {
  std::string name;
  for (char c : entry.getSymName())
    name.push_back(llvm::isAlnum(c) ? c : '_');
  return name + "__" + kind.str() + std::to_string(kernelCount++);
}

SmallVector<func::FuncOp> EntryLowering::entriesOf(ModuleOp module) {
  SmallVector<func::FuncOp> entries;
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal() && !func->hasAttr("attn.kernel") &&
        !func->hasAttr("attn.entry"))
      entries.push_back(func);
  return entries;
}

EntryLowering::SoftmaxBuffers
EntryLowering::bindSoftmax(ImplicitLocOpBuilder &b, AttentionOpInterface op,
                           bool gated) {
  SoftmaxBuffers s;
  s.q = buffers.lookup(op.getQuery());
  s.k = buffers.lookup(op.getKey());
  s.v = buffers.lookup(op.getValue());
  if (gated)
    s.gate = buffers.lookup(op.getEpilogueOperands()[0]);
  if (Value sinks = op.getAttentionSinks())
    s.sinks = buffers.lookup(sinks);
  for (Value tensor : getVariantTensors(op))
    s.variantTensors.push_back(buffers.lookup(tensor));
  HostIndexMath m{b};
  const bool ragged = static_cast<bool>(op.getSequenceOffsets());
  if (ragged) {
    // B sequences of T query rows in all.
    s.queryOffsets = buffers.lookup(op.getSequenceOffsets());
    s.batch = m.sub(m.dim(s.queryOffsets, 0), m.index(1));
    s.lq = m.dim(s.q, 0);
  } else {
    s.batch = m.dim(s.q, 0);
    s.lq = m.dim(s.q, 2);
  }
  StringRef opName = op->getName().getStringRef();
  if (Value pageTable = op.getKeyPageTable()) {
    // Splits are planned for the most keys the page table holds; each
    // split kernel stops at its sequence's length.
    s.pageTable = buffers.lookup(pageTable);
    s.keyLengths = buffers.lookup(op.getKeyLengths());
    s.lk = m.mul(m.dim(s.pageTable, 1), m.index(m.staticDim(s.k, 1)));
    if (ragged)
      assertAtRunTime(b,
                      arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                            m.dim(s.pageTable, 0), s.batch),
                      opName + ": 'cu_seqlens_q' must hold B + 1 offsets for "
                               "the B sequences of 'page_table'");
  } else if (Value keyOffsets = op.getKeyOffsets()) {
    // Splits are planned for all Tk keys; each split kernel stops at its
    // sequence's length.
    s.keyOffsets = buffers.lookup(keyOffsets);
    s.lk = m.dim(s.k, 0);
    Value offsets =
        ragged ? m.dim(s.queryOffsets, 0) : m.add(s.batch, m.index(1));
    assertAtRunTime(b,
                    arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                          m.dim(s.keyOffsets, 0), offsets),
                    ragged ? opName + ": 'cu_seqlens_k' must hold as many "
                                      "offsets as 'cu_seqlens_q' (B + 1)"
                           : opName + ": 'cu_seqlens_k' must hold B + 1 "
                                      "offsets for the B trees of 'q'");
  } else {
    s.lk = m.dim(s.k, 2);
  }

  // [B, H, Lq, Dv] and [B, H, Lq], or packed [T, H, Dv] and [T, H].
  auto outType = cast<RankedTensorType>(op.getOutput().getType());
  SmallVector<Value> outSizes;
  for (int64_t d = 0; d < outType.getRank(); ++d)
    if (outType.isDynamicDim(d))
      outSizes.push_back(d == 0 && !ragged ? s.batch : s.lq);
  s.out = bufferFor(b, op.getOutput(), outSizes);
  buffers.map(op.getOutput(), s.out);
  if (Value lseResult = op.getLogSumExp()) {
    s.lse = bufferFor(b, lseResult,
                      ragged ? SmallVector<Value>{s.lq}
                             : SmallVector<Value>{s.batch, s.lq});
    buffers.map(lseResult, s.lse);
  }
  // A tree places its rows by depth; every other op bottom-right aligns
  // them, which a causal mask allows only for Lq <= Lk (SPEC §1.1); with a
  // paged cache or a ragged batch the runtime checks it per sequence (the
  // contracts of seq_lens and cu_seqlens_k).
  if (op.getKeySelectionKind() != KeySelectionKind::Tree && !s.pageTable &&
      !ragged)
    assertCausalRowsFit(b, op.getPositionMask(), s.lq, s.lk,
                        op->getName().getStringRef());
  if (Value selection = op.getKeySelection()) {
    s.selection = buffers.lookup(selection);
    // Over a paged cache or packed keys the runtime checks each sequence's
    // keys (the contracts of seq_lens and cu_seqlens_k).
    if (op.getKeySelectionKind() == KeySelectionKind::Tree && !s.pageTable &&
        !s.keyOffsets)
      assertAtRunTime(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::sge, s.lk, s.lq),
          "attn.tree_sdpa: dim 2 of 'k' (P + T) must hold at least "
          "the T tree nodes of 'q'");
  }
  return s;
}

Value mlir::attn::tokensOf(const HostIndexMath &m, Value rows, bool packed) {
  return packed ? m.dim(rows, 0) : m.mul(m.dim(rows, 0), m.dim(rows, 2));
}

Value mlir::attn::rmsNormGateRows(const HostIndexMath &m,
                                  const RmsNormGateShape &shape, Value output) {
  Value tokens = tokensOf(m, output, shape.packed);
  return m.mul(tokens, m.index(shape.rowsPerToken()));
}

bool EntryLowering::isKernelOp(Operation *op) {
  return isa<BlockMetaOp, SelectTopKOp, SelectTopPOp, TreeAcceptOp, KvCompactOp,
             PathStepsOp, KvAppendOp, PageMetaUpdateOp, GateOp, RmsNormGateOp>(
      op);
}

void EntryLowering::lowerOp(ImplicitLocOpBuilder &b, Operation *op) {
  HostIndexMath m{b};
  auto check = [&](arith::CmpIPredicate predicate, Value x, Value y,
                   const Twine &message) {
    assertAtRunTime(b, arith::CmpIOp::create(b, predicate, x, y), message);
  };
  // Operands' buffers, then a buffer per result with `sizes` for its
  // dynamic dims.
  SmallVector<Value> bindings;
  auto bindOperands = [&](ValueRange operands) {
    for (Value operand : operands)
      bindings.push_back(buffers.lookup(operand));
  };
  auto bindResult = [&](Value result, ArrayRef<Value> sizes) {
    Value buffer = bufferFor(b, result, sizes);
    buffers.map(result, buffer);
    bindings.push_back(buffer);
  };

  if (auto meta = dyn_cast<BlockMetaOp>(op); meta && meta.getPageTable()) {
    // k_cache, page_table, seq_lens -> kmeta_pages [NP, 2, Hkv, D]: one
    // workgroup finds the slots of each page that sequences use, then the
    // target's kernel bounds them (k_cache, used, kmeta_pages).
    bindOperands(meta->getOperands());
    Value cache = bindings[0];
    Value used = memref::AllocOp::create(
        b, MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
        ValueRange{m.dim(cache, 0)});
    std::string useName = kernelName("page_use");
    dispatchKernel(b, m.index(1), {cache, bindings[1], bindings[2], used},
                   [&](OpBuilder &builder, TypeRange types) {
                     return buildPageUseKernel(builder, op->getLoc(), useName,
                                               scalarTiling(b.getContext()),
                                               types);
                   });
    bindings = {cache, used};
    bindResult(meta.getMeta(), {m.dim(cache, 0)});
  } else if (auto meta = dyn_cast<BlockMetaOp>(op)) {
    bindOperands(meta.getKey());
    Value k = bindings[0];
    bindResult(
        meta.getMeta(),
        {m.dim(k, 0), m.ceilDiv(m.dim(k, 2), m.index(meta.getBlockSize()))});
  } else if (auto select = dyn_cast<SelectTopKOp>(op);
             select && select.getPageTable()) {
    // q, kmeta_pages, page_table, seq_lens -> blocks [B, H, Lq,
    // min(top_k, MP)]: a sequence has at most MP blocks (its pages). The
    // runtime checked the pages and lengths (value contracts).
    bindOperands({select.getQuery(), select.getMeta(), select.getPageTable(),
                  select.getSeqLens()});
    if (Value offsets = select.getCuSeqlensQ())
      bindOperands(offsets);
    Value q = bindings[0], table = bindings[2];
    // [B, H, Lq, slots], or packed [T, H, slots].
    SmallVector<Value> sizes{m.dim(q, 0)};
    if (!select.getCuSeqlensQ())
      sizes.push_back(m.dim(q, 2));
    if (auto blocks = cast<ShapedType>(select.getBlocks().getType());
        blocks.isDynamicDim(blocks.getRank() - 1))
      sizes.push_back(m.minS(m.index(select.getTopK()), m.dim(table, 1)));
    bindResult(select.getBlocks(), sizes);
  } else if (auto select = dyn_cast<SelectTopKOp>(op)) {
    bindOperands({select.getQuery(), select.getMeta()});
    Value q = bindings[0], meta = bindings[1];
    Value keyLength = buffers.lookupOrDefault(select.getKeyLength());
    assertCausalRowsFit(b, select.getMask(), m.dim(q, 2), keyLength,
                        "attn.select_topk");
    check(arith::CmpIPredicate::eq, m.dim(meta, 2),
          m.ceilDiv(keyLength, m.index(select.getBlockSize())),
          "attn.select_topk: dim 2 of 'meta' must be ceil(key_length / " +
              Twine(select.getBlockSize()) + "), the blocks of the keys");
    // Kernels read the key length as the size of an empty buffer.
    bindings.push_back(memref::AllocOp::create(
        b, MemRefType::get({ShapedType::kDynamic, 0}, b.getI32Type()),
        ValueRange{keyLength}));
    SmallVector<Value> sizes{m.dim(q, 0), m.dim(q, 2)};
    if (cast<ShapedType>(select.getBlocks().getType()).isDynamicDim(3))
      sizes.push_back(m.minS(m.index(select.getTopK()), m.dim(meta, 2)));
    bindResult(select.getBlocks(), sizes);
  } else if (auto select = dyn_cast<SelectTopPOp>(op)) {
    // q, k (or k_cache, page_table, seq_lens), [blocks] -> tokens.
    bindOperands({select.getQuery(), select.getKey()});
    Value pageTable = select.getPageTable();
    if (pageTable)
      bindOperands({pageTable, select.getSeqLens()});
    if (Value offsets = select.getCuSeqlensQ())
      bindOperands(offsets);
    if (Value blocks = select.getBlocks())
      bindOperands(blocks);
    Value q = bindings[0], k = bindings[1];
    // Over a paged cache the runtime checked each sequence's rows against
    // its keys (value contracts), and a sequence holds at most MP * P keys.
    if (!pageTable)
      assertCausalRowsFit(b, select.getMask(), m.dim(q, 2), m.dim(k, 2),
                          "attn.select_topp");
    SmallVector<Value> sizes{m.dim(q, 0)};
    if (!select.getCuSeqlensQ())
      sizes.push_back(m.dim(q, 2));
    if (!select.getMaxTokens())
      sizes.push_back(
          pageTable ? m.mul(m.dim(bindings[2], 1), m.index(m.staticDim(k, 1)))
                    : m.dim(k, 2));
    bindResult(select.getTokens(), sizes);
  } else if (auto accept = dyn_cast<TreeAcceptOp>(op)) {
    bindOperands(accept->getOperands());
    Value batch = m.dim(bindings[0], 0), nodes = m.dim(bindings[0], 1);
    check(arith::CmpIPredicate::sge, nodes, m.index(1),
          "attn.tree_accept: a draft tree needs its root (T >= 1)");
    bindResult(accept.getPath(), {batch, nodes});
    bindResult(accept.getLength(), {batch});
    bindResult(accept.getBonus(), {batch});
  } else if (auto update = dyn_cast<PageMetaUpdateOp>(op)) {
    // k_cache, slots, kmeta_pages (in place, checked before lowering): the
    // target's kernels find the written pages' fill and leader (scratch
    // [NP], only the written pages' entries set), then bound those pages
    // (k_cache, slots, fill, leader, kmeta_pages).
    bindOperands(update->getOperands());
    Value cache = bindings[0], meta = bindings[2];
    auto pageScratch = [&]() -> Value {
      return memref::AllocOp::create(
          b, MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
          ValueRange{m.dim(cache, 0)});
    };
    Value fill = pageScratch(), leader = pageScratch();
    buffers.map(update.getNewMeta(), meta);
    bindings = {cache, bindings[1], fill, leader, meta};
  } else if (auto append = dyn_cast<KvAppendOp>(op)) {
    // The caches are in-place arguments (checked before lowering): the
    // kernel writes the new rows into their buffers.
    // k, [v], slots, k_cache, [v_cache].
    bindOperands(append->getOperands());
    buffers.map(append.getNewKeyCache(), buffers.lookup(append.getKeyCache()));
    if (Value valueCache = append.getValueCache())
      buffers.map(append.getNewValueCache(), buffers.lookup(valueCache));
  } else if (isa<GateOp, RmsNormGateOp>(op)) {
    // output, gate (or z, weight), [x, d] -> result, shaped as the output
    // ([B, H, L, Dv] or packed [T, H, Dv]); the entry's signature checked
    // the other operands against it.
    bindOperands(op->getOperands());
    Value output = bindings[0];
    SmallVector<Value> sizes{m.dim(output, 0)};
    if (cast<ShapedType>(op->getOperand(0).getType()).getRank() == 4)
      sizes.push_back(m.dim(output, 2));
    bindResult(op->getResult(0), sizes);
  } else if (auto steps = dyn_cast<PathStepsOp>(op)) {
    bindOperands(steps->getOperands());
    Value input = bindings[0], path = bindings[1];
    check(arith::CmpIPredicate::eq, m.dim(input, 2), m.dim(path, 1),
          "attn.path_steps: dim 2 of the input must be the T tree nodes of "
          "'path'");
    bindResult(steps.getResult(), {m.dim(input, 0), m.dim(path, 1)});
  } else {
    auto compact = cast<KvCompactOp>(op);
    // k, [v], path, length, [cu_seqlens_k], k', [v'].
    bindOperands(compact->getOperands());
    Value k = bindings[0], path = buffers.lookup(compact.getPath());
    if (compact.getCuSeqlensK()) {
      // Packed keys [Tk, Hkv, F]: the runtime checks that each sequence
      // holds its tree (the contract of cu_seqlens_k).
      bindResult(compact.getNewKey(), {m.dim(k, 0)});
      if (Value newValue = compact.getNewValue())
        bindResult(newValue, {m.dim(k, 0)});
      return dispatchOp(b, op, bindings);
    }
    Value batch = m.dim(k, 0), keys = m.dim(k, 2);
    check(arith::CmpIPredicate::sge, keys, m.dim(path, 1),
          "attn.kv_compact: dim 2 of 'k' (P + T) must hold at least "
          "the T tree nodes of 'path'");
    bindResult(compact.getNewKey(), {batch, keys});
    if (Value newValue = compact.getNewValue())
      bindResult(newValue, {batch, keys});
  }
  dispatchOp(b, op, bindings);
}

LogicalResult EntryLowering::checkInPlaceUpdate(BlockArgument arg,
                                                Value update) {
  auto name =
      entry.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "attn.name");
  auto describe = [&](InFlightDiagnostic diag) -> InFlightDiagnostic {
    diag << "in-place argument #" << arg.getArgNumber();
    if (name)
      diag << " ('" << name.getValue() << "')";
    return diag;
  };
  if (update.getType() != arg.getType())
    return describe(entry.emitError())
           << " must be returned with its own type " << arg.getType()
           << ", got " << update.getType();
  if (update == arg)
    return success();
  // attn.page_meta_update writes the bounds of the written pages into the
  // metadata it updates.
  if (auto refresh = update.getDefiningOp<PageMetaUpdateOp>()) {
    if (refresh.getMeta() != arg)
      return describe(entry.emitError())
             << " must be returned as the update of the metadata it is";
    if (!arg.hasOneUse())
      return describe(entry.emitError())
             << " is updated in place, so its update must be its only use";
    return success();
  }
  // attn.kv_append writes its new rows into the cache it updates.
  if (auto append = update.getDefiningOp<KvAppendOp>()) {
    Value cache = update == append.getNewKeyCache() ? append.getKeyCache()
                                                    : append.getValueCache();
    if (cache != arg)
      return describe(entry.emitError())
             << " must be returned as the update of the cache it is";
    if (!arg.hasOneUse())
      return describe(entry.emitError())
             << " is updated in place, so its update must be its only use";
    return success();
  }
  // Kernels write an update into the argument's buffer while reading the
  // argument, which is safe for the state of a recurrence (each workgroup
  // reads its slice of the state before writing it) and only when nothing
  // else reads the argument.
  auto op = update.getDefiningOp<AttentionOpInterface>();
  if (!op || op.getStateOutput() != update || op.getStateInput() != arg)
    return describe(entry.emitError())
           << " must be returned unchanged or as the state output of the "
              "recurrence that takes it as its state";
  if (!arg.hasOneUse())
    return describe(entry.emitError())
           << " is updated in place, so its update must be its only use";
  return success();
}

LogicalResult EntryLowering::checkCachesInPlace(KvAppendOp op) {
  // The kernel writes only the new rows.
  return checkUpdatedInPlace(op, "the caches of attn.kv_append",
                             {{op.getKeyCache(), op.getNewKeyCache()},
                              {op.getValueCache(), op.getNewValueCache()}});
}

LogicalResult
EntryLowering::checkUpdatedInPlace(Operation *op, StringRef what,
                                   ArrayRef<std::pair<Value, Value>> updates) {
  for (auto [input, update] : updates) {
    if (!input)
      continue;
    auto arg = dyn_cast<BlockArgument>(input);
    auto tied = returnedAt.find(update);
    if (!arg || tied == returnedAt.end() || tied->second != arg.getArgNumber())
      return op->emitError()
             << what
             << " must be entry arguments marked 'attn.in_place' and "
                "returned as their updates";
  }
  return success();
}

LogicalResult EntryLowering::checkStatePoolInPlace(AttentionOpInterface op) {
  // A tree over a pool only reads it.
  if (!op.getStateSlots() || !op.getStateOutput())
    return success();
  // The kernels write only the slots of the batch's sequences.
  auto pool = dyn_cast<BlockArgument>(op.getStateInput());
  auto tied = returnedAt.find(op.getStateOutput());
  if (!pool || tied == returnedAt.end() || tied->second != pool.getArgNumber())
    return op->emitError()
           << "the state pool of '" << op->getName()
           << "' must be an entry argument marked 'attn.in_place' and "
              "returned as its update (its kernels write only the batch's "
              "slots)";
  return success();
}

LogicalResult EntryLowering::checkGateLowerable(GateOp op) {
  RankedTensorType output = op.getOutput().getType();
  RankedTensorType gate = op.getGate().getType();
  const int64_t last = output.getRank() - 1;
  if (output.isDynamicDim(1) || output.isDynamicDim(last) ||
      gate.isDynamicDim(last))
    return op.emitError()
           << "no " << target
           << " lowering for an 'attn.gate' with a dynamic head count or "
              "feature size (dims 1 and "
           << last << " of the output and dim " << last
           << " of the gate must be static)";
  return success();
}

LogicalResult
EntryLowering::checkLeadingFeatureView(tensor::ExtractSliceOp slice) {
  auto refuse = [&](const Twine &why) {
    return slice.emitError()
           << "no " << target
           << " lowering for this 'tensor.extract_slice': " << why;
  };
  RankedTensorType source = slice.getSourceType();
  RankedTensorType result = slice.getResultType();
  const int64_t rank = source.getRank();
  if (result.getRank() != rank)
    return refuse("it drops dims");
  auto isConstant = [](OpFoldResult value, int64_t constant) {
    std::optional<int64_t> v = getConstantIntValue(value);
    return v && *v == constant;
  };
  for (auto [d, offset, size, stride] :
       llvm::enumerate(slice.getMixedOffsets(), slice.getMixedSizes(),
                       slice.getMixedStrides())) {
    if (!isConstant(offset, 0) || !isConstant(stride, 1))
      return refuse("only offsets 0 and strides 1 are views");
    if (static_cast<int64_t>(d) == rank - 1)
      continue;
    // A leading dim is kept whole: its size is the source's, a constant or
    // the source's tensor.dim.
    bool whole = false;
    if (auto value = dyn_cast<Value>(size)) {
      auto dim = value.getDefiningOp<tensor::DimOp>();
      whole = dim && dim.getSource() == slice.getSource() &&
              dim.getConstantIndex() == static_cast<int64_t>(d);
    } else {
      whole = isConstant(size, source.getDimSize(d));
    }
    if (!whole)
      return refuse("it must keep dim " + Twine(d) + " whole");
  }
  // Every operand the view is must be an attention's keys or values.
  Value view = slice.getResult();
  for (Operation *user : view.getUsers()) {
    auto attention = dyn_cast<AttentionOpInterface>(user);
    const int64_t uses = llvm::count(user->getOperands(), view);
    if (!attention || attention.getNormalizer() == Normalizer::RecurrentState ||
        uses != (attention.getKey() == view) + (attention.getValue() == view))
      return refuse("a view of leading features may only be the keys or "
                    "values of softmax attention");
  }
  return success();
}

LogicalResult EntryLowering::checkLowerable(AttentionOpInterface op) {
  return op.getNormalizer() == Normalizer::RecurrentState
             ? LogicalResult(LinearRecurrenceShape::get(op, target))
             : LogicalResult(SoftmaxAttentionShape::get(op, target));
}

LogicalResult
EntryLowering::addValueContracts(SmallVectorImpl<DictionaryAttr> &argAttrs) {
  MLIRContext *context = entry.getContext();
  // `input` and `queries`: the other inputs the contract is checked
  // against (attn.contract_input, attn.contract_queries).
  auto setContract = [&](BlockArgument arg, StringRef contract,
                         std::optional<unsigned> input = std::nullopt,
                         std::optional<unsigned> queries = std::nullopt) {
    NamedAttrList list(argAttrs[arg.getArgNumber()]);
    list.set("attn.contract", StringAttr::get(context, contract));
    auto index = [&](unsigned i) {
      return IntegerAttr::get(IntegerType::get(context, 64), i);
    };
    if (input)
      list.set("attn.contract_input", index(*input));
    if (queries)
      list.set("attn.contract_queries", index(*queries));
    argAttrs[arg.getArgNumber()] = list.getDictionary(context);
  };
  for (Operation &op : entry.getBody().front()) {
    Value parents;
    auto attention = dyn_cast<AttentionOpInterface>(op);
    if (attention && attention.getKeySelectionKind() == KeySelectionKind::Tree)
      parents = attention.getKeySelection();
    else if (auto accept = dyn_cast<TreeAcceptOp>(op))
      parents = accept.getParents();
    if (auto arg = dyn_cast_or_null<BlockArgument>(parents))
      setContract(arg, "tree_parents");
    // A paged cache's page table (against the pages of the cache) and key
    // lengths (against the page table, and under a causal mask the
    // queries).
    // A ragged softmax batch: the queries' offsets (against the rows of
    // q) and the keys' (against the keys, and under a causal mask the
    // queries' offsets); with a paged cache the queries' offsets are what
    // the key lengths are checked against.
    const bool softmax =
        attention && attention.getNormalizer() == Normalizer::Softmax;
    const bool causal =
        attention && attention.getPositionMask().requiresQueriesWithinKeys();
    BlockArgument queries;
    if (softmax) {
      queries = dyn_cast<BlockArgument>(attention.getQuery());
      if (Value offsets = attention.getSequenceOffsets()) {
        auto queryOffsets = dyn_cast<BlockArgument>(offsets);
        auto keyOffsets =
            dyn_cast_or_null<BlockArgument>(attention.getKeyOffsets());
        auto k = dyn_cast<BlockArgument>(attention.getKey());
        if (!queryOffsets || !queries || !k ||
            (attention.getKeyOffsets() && !keyOffsets))
          return op.emitError()
                 << "a ragged batch's offsets, queries and keys must be entry "
                    "inputs (checked at run time before anything runs)";
        setContract(queryOffsets, "sequence_offsets", queries.getArgNumber());
        if (keyOffsets)
          setContract(keyOffsets, "sequence_offsets", k.getArgNumber(),
                      causal
                          ? std::optional<unsigned>(queryOffsets.getArgNumber())
                          : std::nullopt);
        queries = queryOffsets;
      } else if (Value keyOffsets = attention.getKeyOffsets()) {
        // A draft tree over packed keys: the offsets against the keys, and
        // each sequence holds its tree's T nodes (dim 2 of q).
        auto offsets = dyn_cast<BlockArgument>(keyOffsets);
        auto k = dyn_cast<BlockArgument>(attention.getKey());
        if (!offsets || !queries || !k)
          return op.emitError()
                 << "packed keys, their offsets and the tree's queries must "
                    "be entry inputs (checked at run time before anything "
                    "runs)";
        setContract(offsets, "sequence_offsets", k.getArgNumber(),
                    queries.getArgNumber());
      }
    }
    // A tree's sequences hold at least its T nodes' keys, whatever the
    // mask.
    if (attention && attention.getKeyPageTable() &&
        failed(setPageTableContracts(
            &op, attention.getKeyPageTable(), attention.getKeyLengths(),
            attention.getKey(), queries,
            causal || attention.getKeySelectionKind() == KeySelectionKind::Tree,
            setContract)))
      return failure();
    // The selections over a paged cache, like the attention they serve.
    if (failed(addPagedSelectionContracts(&op, setContract)))
      return failure();
    // The slots attn.kv_append writes, and those whose pages
    // attn.page_meta_update bounds (against the cache).
    Value slotsOperand, cacheOperand;
    if (auto append = dyn_cast<KvAppendOp>(op)) {
      slotsOperand = append.getSlots();
      cacheOperand = append.getKeyCache();
    } else if (auto update = dyn_cast<PageMetaUpdateOp>(op)) {
      slotsOperand = update.getSlots();
      cacheOperand = update.getKeyCache();
    }
    if (slotsOperand) {
      auto slots = dyn_cast<BlockArgument>(slotsOperand);
      auto cache = dyn_cast<BlockArgument>(cacheOperand);
      if (!slots || !cache)
        return op.emitError()
               << "the slots of " << op.getName()
               << " and its cache must be entry inputs (checked at run time "
                  "before anything runs)";
      setContract(slots, "cache_slots", cache.getArgNumber());
      continue;
    }
    // A ragged batch's offsets (against the tokens of q) and pool slots
    // (against the pool).
    if (attention && !softmax && attention.getSequenceOffsets()) {
      auto offsets = dyn_cast<BlockArgument>(attention.getSequenceOffsets());
      auto slots = dyn_cast<BlockArgument>(attention.getStateSlots());
      auto q = dyn_cast<BlockArgument>(attention.getQuery());
      auto pool = dyn_cast<BlockArgument>(attention.getStateInput());
      if (!offsets || !slots || !q || !pool)
        return op.emitError()
               << "a ragged batch's 'cu_seqlens', 'state_indices', queries "
                  "and state pool must be entry inputs (checked at run time "
                  "before anything runs)";
      setContract(offsets, "sequence_offsets", q.getArgNumber());
      setContract(slots, "pool_slots", pool.getArgNumber());
    } else if (attention && !softmax && attention.getStateSlots()) {
      // Batch rows [B, H, L, ...] with their states in a pool: the slots
      // against the pool.
      auto slots = dyn_cast<BlockArgument>(attention.getStateSlots());
      auto pool = dyn_cast<BlockArgument>(attention.getStateInput());
      if (!slots || !pool)
        return op.emitError()
               << "a state pool and its 'pool_indices' must be entry inputs "
                  "(checked at run time before anything runs)";
      setContract(slots, "pool_slots", pool.getArgNumber());
    }
    // The accepted path of attn.kv_compact and attn.path_steps.
    Value pathOperand, lengthOperand;
    if (auto compact = dyn_cast<KvCompactOp>(op)) {
      pathOperand = compact.getPath();
      lengthOperand = compact.getLength();
      // Packed keys: the offsets against the keys, each sequence holding
      // the T nodes of the path's tree (dim 1 of path).
      if (Value keyOffsets = compact.getCuSeqlensK()) {
        auto offsets = dyn_cast<BlockArgument>(keyOffsets);
        auto k = dyn_cast<BlockArgument>(compact.getKey());
        auto path = dyn_cast<BlockArgument>(pathOperand);
        if (!offsets || !k || !path)
          return op.emitError()
                 << "packed keys, their offsets and the path must be entry "
                    "inputs (checked at run time before anything runs)";
        setContract(offsets, "sequence_offsets", k.getArgNumber(),
                    path.getArgNumber());
      }
    } else if (auto steps = dyn_cast<PathStepsOp>(op)) {
      pathOperand = steps.getPath();
      lengthOperand = steps.getLength();
    } else {
      continue;
    }
    auto path = dyn_cast<BlockArgument>(pathOperand);
    auto length = dyn_cast<BlockArgument>(lengthOperand);
    if (path && length)
      setContract(path, "tree_path", length.getArgNumber());
    else if (path || length)
      return op.emitError()
             << "'path' and 'length' must both be entry inputs (checked "
                "together at run time) or both results of attn.tree_accept";
  }
  return success();
}

LogicalResult
EntryLowering::addPagedSelectionContracts(Operation *op,
                                          ContractSetter setContract) {
  Value pageTable, seqLens, cache, queries, queryOffsets;
  MaskAttr mask;
  if (auto meta = dyn_cast<BlockMetaOp>(op)) {
    pageTable = meta.getPageTable();
    seqLens = meta.getSeqLens();
    cache = meta.getKey();
  } else if (auto select = dyn_cast<SelectTopPOp>(op)) {
    pageTable = select.getPageTable();
    seqLens = select.getSeqLens();
    cache = select.getKey();
    queries = select.getQuery();
    queryOffsets = select.getCuSeqlensQ();
    mask = select.getMask();
  } else if (auto select = dyn_cast<SelectTopKOp>(op)) {
    pageTable = select.getPageTable();
    seqLens = select.getSeqLens();
    queries = select.getQuery();
    queryOffsets = select.getCuSeqlensQ();
    mask = select.getMask();
    // Its metadata is per page: the runtime checks the table against the
    // cache that another op of the entry reads through it.
    if (pageTable)
      for (Operation *user : pageTable.getUsers())
        if (auto attention = dyn_cast<AttentionOpInterface>(user))
          if (attention.getKeyPageTable() == pageTable)
            cache = attention.getKey();
    if (pageTable && !cache)
      return op->emitError()
             << "attn.select_topk over a paged cache: its 'page_table' must "
                "also index a key cache in the entry (the runtime checks the "
                "table against the cache's pages)";
  }
  if (!pageTable)
    return success();
  // In a ragged batch the key lengths are checked against each sequence's
  // query rows.
  auto rows = dyn_cast_or_null<BlockArgument>(queries);
  if (queryOffsets) {
    auto offsets = dyn_cast<BlockArgument>(queryOffsets);
    if (!offsets || !rows)
      return op->emitError() << "a ragged batch's 'cu_seqlens_q' and queries "
                                "must be entry inputs (checked at run time "
                                "before anything runs)";
    setContract(offsets, "sequence_offsets", rows.getArgNumber(), std::nullopt);
    rows = offsets;
  }
  return setPageTableContracts(op, pageTable, seqLens, cache, rows,
                               mask && mask.requiresQueriesWithinKeys(),
                               setContract);
}

LogicalResult EntryLowering::setPageTableContracts(
    Operation *op, Value pageTable, Value seqLens, Value cache,
    BlockArgument queries, bool checkQueries, ContractSetter setContract) {
  auto table = dyn_cast<BlockArgument>(pageTable);
  auto lengths = dyn_cast<BlockArgument>(seqLens);
  auto pages = dyn_cast<BlockArgument>(cache);
  if (!table || !lengths || !pages || (checkQueries && !queries))
    return op->emitError()
           << "a paged cache's 'page_table', 'seq_lens', keys and the "
              "queries must be entry inputs (checked at run time before "
              "anything runs)";
  setContract(table, "page_table", pages.getArgNumber(), std::nullopt);
  setContract(lengths, "sequence_lengths", table.getArgNumber(),
              checkQueries ? std::optional<unsigned>(queries.getArgNumber())
                           : std::nullopt);
  return success();
}

void EntryLowering::assertAtRunTime(ImplicitLocOpBuilder &b, Value condition,
                                    const Twine &message) {
  cf::AssertOp::create(b, condition, b.getStringAttr(message));
}

void EntryLowering::assertCausalRowsFit(ImplicitLocOpBuilder &b, MaskAttr mask,
                                        Value lq, Value lk, StringRef opName) {
  if (!mask || !mask.requiresQueriesWithinKeys())
    return;
  assertAtRunTime(b,
                  arith::CmpIOp::create(b, arith::CmpIPredicate::ule, lq, lk),
                  opName + ": a " + stringifyMaskKind(mask.getKind()) +
                      " mask needs at most as many query rows as keys "
                      "(Lq <= Lk: query i sits at position Lk - Lq + i)");
}

EntryLowering::RecurrenceBuffers
EntryLowering::bindRecurrence(ImplicitLocOpBuilder &b,
                              AttentionOpInterface op) {
  RecurrenceBuffers r;
  // A tree recurrence binds its parents before the state.
  Value parents = op.getKeySelectionKind() == KeySelectionKind::Tree
                      ? op.getKeySelection()
                      : Value();
  // Pool slots, and a ragged batch's offsets, follow the pool.
  for (Value operand :
       {op.getQuery(), op.getKey(), op.getValue(), op.getStepDecay(),
        op.getStepBeta(), parents, op.getStateInput(), op.getStateSlots(),
        op.getSequenceOffsets()})
    if (operand)
      r.bindings.push_back(buffers.lookup(operand));
  for (Value operand : op.getEpilogueOperands())
    r.bindings.push_back(buffers.lookup(operand));
  Value q = r.bindings.front();
  SmallVector<Value> outSizes;
  if (Value offsets = op.getSequenceOffsets()) {
    // B sequences of T tokens in all.
    HostIndexMath m{b};
    r.batch = m.dim(buffers.lookup(op.getStateSlots()), 0);
    r.length = m.dim(q, 0);
    assertAtRunTime(
        b,
        arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                              m.dim(buffers.lookup(offsets), 0),
                              arith::AddIOp::create(b, r.batch, m.index(1))),
        op->getName().getStringRef() +
            ": 'cu_seqlens' must hold B + 1 offsets for the B sequences of "
            "'state_indices'");
    outSizes.push_back(r.length);
  } else {
    r.batch = memref::DimOp::create(b, q, 0);
    r.length = memref::DimOp::create(b, q, 2);
    outSizes = {r.batch, r.length};
  }
  Value out = bufferFor(b, op.getOutput(), outSizes);
  buffers.map(op.getOutput(), out);
  r.bindings.push_back(out);
  if (Value stateOutput = op.getStateOutput()) {
    Value state = bufferFor(b, stateOutput, {r.batch});
    buffers.map(stateOutput, state);
    r.bindings.push_back(state);
  }
  return r;
}

void EntryLowering::allocateSplitPartials(ImplicitLocOpBuilder &b,
                                          SoftmaxBuffers &s, int64_t numHeads,
                                          int64_t valueDim, Value batch,
                                          Value rows, Value splits) {
  int64_t dynamic = ShapedType::kDynamic;
  auto outType = MemRefType::get(
      {dynamic, numHeads, dynamic, dynamic, valueDim}, b.getF32Type());
  auto lseType =
      MemRefType::get({dynamic, numHeads, dynamic, dynamic}, b.getF32Type());
  s.partialOut =
      memref::AllocOp::create(b, outType, ValueRange{batch, rows, splits});
  s.partialLse =
      memref::AllocOp::create(b, lseType, ValueRange{batch, rows, splits});
}

EntryLowering::RaggedWork
EntryLowering::planRaggedBatch(ImplicitLocOpBuilder &b, AttentionOpInterface op,
                               const SoftmaxAttentionShape &shape,
                               const RaggedPlan &plan, SoftmaxBuffers &s) {
  HostIndexMath m{b};
  // The tables' sizes from the dims alone: a sequence's flash tiles number
  // at most its rows / queryTile + 1, the decode rows at most
  // decodeMaxQueries a sequence, and their key ranges at most kMaxSplits +
  // B a row.
  Value tokens = s.lq, batch = s.batch;
  Value decodeMax = m.index(plan.decodeMaxQueries);
  RaggedWork work;
  work.flashEntries = m.add(m.ceilDiv(tokens, m.index(plan.queryTile)), batch);
  work.mergeEntries = m.minS(tokens, m.mul(batch, decodeMax));
  work.splitEntries = m.mul(m.minS(tokens, decodeMax),
                            m.add(m.index(RaggedPlan::kMaxSplits), batch));
  auto tableOf = [&](Value entries) -> Value {
    return memref::AllocOp::create(
        b,
        MemRefType::get({ShapedType::kDynamic, RaggedPlan::kColumns},
                        b.getI32Type()),
        ValueRange{entries});
  };
  work.flashPlan = tableOf(work.flashEntries);
  work.splitPlan = tableOf(work.splitEntries);
  work.mergePlan = tableOf(work.mergeEntries);
  // The split partials, [entries, H, Dv] and [entries, H].
  int64_t dynamic = ShapedType::kDynamic;
  s.partialOut = memref::AllocOp::create(
      b,
      MemRefType::get({dynamic, shape.numHeads, shape.valueDim},
                      b.getF32Type()),
      ValueRange{work.splitEntries});
  s.partialLse = memref::AllocOp::create(
      b, MemRefType::get({dynamic, shape.numHeads}, b.getF32Type()),
      ValueRange{work.splitEntries});

  SmallVector<Value> planBindings{
      s.queryOffsets, s.keyOffsets ? s.keyOffsets : s.keyLengths,
      work.flashPlan, work.splitPlan, work.mergePlan};
  std::string planName = kernelName("ragged_plan");
  dispatchKernel(b, m.index(1), planBindings,
                 [&](OpBuilder &builder, TypeRange types) {
                   return buildRaggedPlan(builder, op.getLoc(), planName, shape,
                                          plan, types);
                 });
  return work;
}

func::FuncOp EntryLowering::buildRaggedPlan(OpBuilder &builder, Location loc,
                                            StringRef name,
                                            const SoftmaxAttentionShape &shape,
                                            const RaggedPlan &plan,
                                            TypeRange bindingTypes) {
  return buildRaggedPlanKernel(builder, loc, name, shape, plan,
                               scalarTiling(builder.getContext()),
                               bindingTypes);
}

SmallVector<Value>
EntryLowering::SoftmaxBuffers::keyBindings(Value plan) const {
  SmallVector<Value> bindings{q, k, v};
  if (pageTable)
    bindings.append({pageTable, keyLengths});
  if (queryOffsets)
    bindings.push_back(queryOffsets);
  if (keyOffsets)
    bindings.push_back(keyOffsets);
  // Sparse attention and trees have no plan.
  if (queryOffsets && plan)
    bindings.push_back(plan);
  return bindings;
}

SmallVector<Value> EntryLowering::SoftmaxBuffers::rowOutputs() const {
  SmallVector<Value> bindings;
  for (Value binding : {gate, sinks, out, lse})
    if (binding)
      bindings.push_back(binding);
  return bindings;
}

SmallVector<Value>
EntryLowering::SoftmaxBuffers::rowBindings(Value plan) const {
  SmallVector<Value> bindings = keyBindings(plan);
  llvm::append_range(bindings, rowOutputs());
  return withVariantTensors(std::move(bindings));
}

SmallVector<Value>
EntryLowering::SoftmaxBuffers::splitBindings(Value plan) const {
  SmallVector<Value> bindings = keyBindings(plan);
  bindings.append({partialOut, partialLse});
  return withVariantTensors(std::move(bindings));
}

SmallVector<Value> EntryLowering::SoftmaxBuffers::withVariantTensors(
    SmallVector<Value> bindings) const {
  llvm::append_range(bindings, variantTensors);
  return bindings;
}

SmallVector<Value>
EntryLowering::SoftmaxBuffers::mergeBindings(Value plan) const {
  SmallVector<Value> bindings;
  // Sparse attention over a ragged batch has no plan.
  if (plan)
    bindings.append({queryOffsets, plan});
  bindings.append({partialOut, partialLse});
  llvm::append_range(bindings, rowOutputs());
  return bindings;
}
