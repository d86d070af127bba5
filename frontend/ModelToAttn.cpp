//===- ModelToAttn.cpp - Model description to attn IR ---------------------===//
//
// One func.func per entry of SPEC §4, arguments in the contract's order.
// Every argument and result carries its SPEC name as `attn.name`, which the
// binary's signatures and `attn-run --list` report. Output gates are emitted
// as separate ops: -attn-fuse-epilogues folds them into the attention.
//
//===----------------------------------------------------------------------===//

#include "frontend/ModelToAttn.h"

#include "Attn/AttnOps.h"
#include "Attn/ParseAttnIR.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Parser/Parser.h"

#include <set>

using namespace mlir;
using namespace mlir::attn;
using namespace mlir::attn::frontend;

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

/// An entry under construction: named arguments, then a body, then named
/// results.
class EntryBuilder {
public:
  EntryBuilder(OpBuilder &builder, ModuleOp module, StringRef name)
      : builder(builder), module(module), name(name.str()) {}

  /// Declares the next argument; one `inPlace` is updated in place, its
  /// update returned after the results (finish()).
  void arg(StringRef argName, Type type, bool inPlace = false) {
    argNames.push_back(argName.str());
    argTypes.push_back(type);
    argsInPlace.push_back(inPlace);
  }

  /// Creates the function; arguments are then available through `operator[]`.
  void beginBody() {
    Location loc = builder.getUnknownLoc();
    builder.setInsertionPointToEnd(module.getBody());
    func = func::FuncOp::create(builder, loc, name,
                                builder.getFunctionType(argTypes, {}));
    Block *entry = func.addEntryBlock();
    builder.setInsertionPointToStart(entry);
    for (auto [i, argName] : llvm::enumerate(argNames)) {
      func.setArgAttr(i, "attn.name", builder.getStringAttr(argName));
      if (argsInPlace[i])
        func.setArgAttr(i, "attn.in_place", builder.getUnitAttr());
    }
  }

  Value operator[](StringRef argName) {
    for (auto [i, n] : llvm::enumerate(argNames))
      if (n == argName)
        return func.getArgument(i);
    llvm_unreachable("no argument of that name");
  }

  bool has(StringRef argName) const {
    return llvm::is_contained(argNames, argName.str());
  }

  /// Returns `values` as the results named `names`, then `updates`, the
  /// new values of the in-place arguments in order.
  void finish(ArrayRef<Value> results, ArrayRef<StringRef> names,
              ArrayRef<Value> updates = {}) {
    SmallVector<Value> values(results);
    llvm::append_range(values, updates);
    func::ReturnOp::create(builder, builder.getUnknownLoc(), values);
    func.setFunctionType(
        builder.getFunctionType(argTypes, ValueRange(values).getTypes()));
    for (auto [i, resultName] : llvm::enumerate(names))
      func.setResultAttr(i, "attn.name", builder.getStringAttr(resultName));
  }

  OpBuilder &builder;

private:
  ModuleOp module;
  std::string name;
  std::vector<std::string> argNames;
  SmallVector<Type> argTypes;
  SmallVector<bool> argsInPlace;
  func::FuncOp func;
};

Type elementTypeOf(MLIRContext *context, ElementType type) {
  switch (type) {
  case ElementType::F32:
    return Float32Type::get(context);
  case ElementType::F16:
    return Float16Type::get(context);
  case ElementType::BF16:
    return BFloat16Type::get(context);
  }
  llvm_unreachable("unknown element type");
}

MaskAttr maskOf(MLIRContext *context, const AttentionLayer &layer) {
  switch (layer.mask) {
  case frontend::MaskKind::None:
    return MaskAttr::get(context, attn::MaskKind::None, 0);
  case frontend::MaskKind::Causal:
    return MaskAttr::get(context, attn::MaskKind::Causal, 0);
  case frontend::MaskKind::SlidingWindow:
    return MaskAttr::get(context, attn::MaskKind::SlidingWindow, layer.window);
  case frontend::MaskKind::Chunked:
    return MaskAttr::get(context, attn::MaskKind::Chunked, layer.window);
  }
  llvm_unreachable("unknown mask kind");
}

/// A tensor a `{"func": ...}` variant reads: an extra input of the entries
/// that hold its region, named by the function argument's `attn.name`.
struct VariantInput {
  std::string name;
  RankedTensorType type;
  Location loc;
};

/// A `{"func": ...}` variant, parsed and checked: the function whose body
/// becomes the region and the extra inputs its trailing arguments declare.
struct ParsedVariant {
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  /// SPEC §7's block arguments: (s, b, h, qp, kp) or (b, h, qp, kp).
  unsigned fixedArgs = 0;
  std::vector<VariantInput> inputs;

  const VariantInput *find(StringRef name) const {
    for (const VariantInput &input : inputs)
      if (input.name == name)
        return &input;
    return nullptr;
  }
};

class ModuleBuilder {
public:
  ModuleBuilder(MLIRContext *context, const ModelDescription &model)
      : context(context), model(model), builder(context),
        element(elementTypeOf(context, model.dtype)) {}

  OwningOpRef<ModuleOp> build() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(builder.getUnknownLoc());
    module->setSymNameAttr(builder.getStringAttr(model.model));
    this->module = *module;
    for (const Layer &layer : model.layers) {
      if (const auto *attention = std::get_if<AttentionLayer>(&layer))
        addAttention(*attention);
      else
        addLinearAttention(std::get<LinearAttentionLayer>(layer),
                           model.maxTreeNodes.value_or(kDefaultTreeNodes));
    }
    if (model.maxTreeNodes)
      addAccept();
    if (failed)
      return nullptr;
    return module;
  }

private:
  RankedTensorType tensor(ArrayRef<int64_t> shape, Type elementType) const {
    return RankedTensorType::get(shape, elementType);
  }
  RankedTensorType rows(int64_t heads, int64_t features) const {
    return tensor({kDyn, heads, kDyn, features}, element);
  }
  Type i32() const { return IntegerType::get(context, 32); }
  /// A layer's paged cache [NP, P, Hkv, features] (SPEC §8).
  RankedTensorType pagedCache(const AttentionLayer &layer,
                              int64_t features) const {
    return tensor({kDyn, layer.pageSize, layer.numKvHeads, features}, element);
  }

  /// Declares a layer's keys and values: `k`, `v` (a paged cache's
  /// `k_cache`, `v_cache`) of `type(features)`, or with latent_kv the one
  /// cache both are read from, `kv` (`kv_cache`).
  void declareKeysValues(EntryBuilder &entry, const AttentionLayer &layer,
                         bool paged,
                         function_ref<RankedTensorType(int64_t)> type) {
    if (layer.latentKv) {
      entry.arg(paged ? "kv_cache" : "kv", type(layer.headDim));
      return;
    }
    entry.arg(paged ? "k_cache" : "k", type(layer.headDim));
    entry.arg(paged ? "v_cache" : "v", type(layer.valueDim));
  }
  /// The keys declareKeysValues declared.
  static Value keysOf(EntryBuilder &entry, const AttentionLayer &layer,
                      bool paged) {
    if (layer.latentKv)
      return entry[paged ? "kv_cache" : "kv"];
    return entry[paged ? "k_cache" : "k"];
  }
  /// The keys and values declareKeysValues declared; with latent_kv the
  /// values are the keys' first value_dim features.
  std::pair<Value, Value> keysValues(EntryBuilder &entry,
                                     const AttentionLayer &layer, bool paged) {
    Value keys = keysOf(entry, layer, paged);
    if (layer.latentKv)
      return {keys, leadingFeatures(keys, layer.valueDim)};
    return {keys, entry[paged ? "v_cache" : "v"]};
  }
  /// Features [0, n) of every row of `source`: a view, which no kernel
  /// copies (the dispatch passes bind the source's buffer).
  Value leadingFeatures(Value source, int64_t n) {
    Location loc = builder.getUnknownLoc();
    auto type = cast<RankedTensorType>(source.getType());
    const int64_t rank = type.getRank();
    SmallVector<OpFoldResult> offsets(rank, builder.getIndexAttr(0));
    SmallVector<OpFoldResult> strides(rank, builder.getIndexAttr(1));
    SmallVector<OpFoldResult> sizes;
    for (int64_t d = 0; d < rank - 1; ++d) {
      if (type.isDynamicDim(d))
        sizes.push_back(
            tensor::DimOp::create(builder, loc, source, d).getResult());
      else
        sizes.push_back(builder.getIndexAttr(type.getDimSize(d)));
    }
    sizes.push_back(builder.getIndexAttr(n));
    return tensor::ExtractSliceOp::create(builder, loc, source, offsets, sizes,
                                          strides);
  }

  FloatAttr optionalF64(std::optional<double> value) {
    return value ? builder.getF64FloatAttr(*value) : FloatAttr();
  }

  /// `output * sigmoid(gate)` as its own op, for fusion to fold.
  Value gated(EntryBuilder &entry, Value output) {
    if (!entry.has("gate"))
      return output;
    return GateOp::create(builder, builder.getUnknownLoc(), output,
                          entry["gate"]);
  }

  void declareGate(EntryBuilder &entry, const AttentionLayer &layer) {
    if (layer.gate == GateKind::None)
      return;
    int64_t width = layer.gate == GateKind::Elementwise ? layer.valueDim : 1;
    entry.arg("gate", rows(layer.numHeads, width));
  }

  /// `sinks [H]` (f32), the layer's attention sinks, when it has them: after
  /// the gate and the block metadata, before the layout's offsets.
  void declareSinks(EntryBuilder &entry, const AttentionLayer &layer) {
    if (layer.sinks)
      entry.arg("sinks", tensor({layer.numHeads}, Float32Type::get(context)));
  }
  /// The `window` and `chunk` attributes of a layer's tree_sdpa (a tree
  /// is causal, narrowed by its layer's window or chunks).
  std::pair<IntegerAttr, IntegerAttr> treeMask(const AttentionLayer &layer) {
    auto size = [&](frontend::MaskKind kind) {
      return layer.mask == kind ? builder.getI64IntegerAttr(layer.window)
                                : IntegerAttr();
    };
    return {size(frontend::MaskKind::SlidingWindow),
            size(frontend::MaskKind::Chunked)};
  }
  static Value sinksOf(EntryBuilder &entry) {
    return entry.has("sinks") ? entry["sinks"] : Value();
  }

  /// Reports an error of the user's attn IR once (an entry per layer kind
  /// declares the same inputs) and fails the build.
  void report(Location loc, const Twine &message) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << loc << message;
    if (reported.insert(text).second)
      emitError(loc) << message;
    failed = true;
  }

  /// Parses and checks a `{"func": ...}` variant: one func.func taking
  /// SPEC §7's block arguments, then the tensors it reads (each named by
  /// `attn.name`), returning one f32 (score_mod) or i1 (mask_mod). Its
  /// diagnostics name the JSON path of the text, with line and column. The
  /// body's ops are left to the attention op's verifier, the one place
  /// that knows what a region may hold.
  std::optional<ParsedVariant> parseVariantFunc(const VariantFunc &source,
                                                bool score) {
    StringRef kind = score ? "score_mod" : "mask_mod";
    ParsedVariant parsed;
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBuffer(source.text, source.path,
                                         /*RequiresNullTerminator=*/false),
        llvm::SMLoc());
    parsed.module = parseAttnIR(sourceMgr, ParserConfig(context));
    if (!parsed.module) {
      failed = true;
      return std::nullopt;
    }
    Location whole = FileLineColLoc::get(context, source.path, 1, 1);
    Block *body = parsed.module->getBody();
    auto func =
        body->empty() ? func::FuncOp() : dyn_cast<func::FuncOp>(body->front());
    if (!func || !llvm::hasSingleElement(*body) || func.isExternal() ||
        !func.getBody().hasOneBlock()) {
      report(whole,
             "expected one func.func of one block: the " + kind + " function");
      return std::nullopt;
    }
    Type f32 = Float32Type::get(context), index = builder.getIndexType();
    SmallVector<Type> fixed;
    if (score)
      fixed.push_back(f32);
    fixed.append(4, index);
    parsed.fixedArgs = fixed.size();
    FunctionType type = func.getFunctionType();
    ArrayRef<Type> args = type.getInputs();
    if (args.size() < fixed.size() ||
        !llvm::equal(args.take_front(fixed.size()), fixed)) {
      report(func.getLoc(), "a " + kind + " function takes (" +
                                (score ? "s: f32, b, h, qp, kp: index"
                                       : "b, h, qp, kp: index") +
                                "), then the tensors it reads");
      return std::nullopt;
    }
    Type result = score ? f32 : builder.getI1Type();
    if (type.getNumResults() != 1 || type.getResult(0) != result) {
      report(func.getLoc(), "a " + kind + " function returns one " +
                                (score ? "f32, the modified score"
                                       : "i1, whether the key is visible"));
      return std::nullopt;
    }
    for (unsigned i = fixed.size(); i < args.size(); ++i) {
      Location loc = func.getArgument(i).getLoc();
      auto tensorType = dyn_cast<RankedTensorType>(args[i]);
      Type element = tensorType ? tensorType.getElementType() : Type();
      if (!tensorType || !(element.isF32() || element.isF16() ||
                           element.isBF16() || element.isInteger(32))) {
        report(loc, "argument #" + Twine(i) +
                        " after SPEC §7's must be a ranked tensor of f32, "
                        "f16, bf16 or i32 (an extra input of the entry)");
        return std::nullopt;
      }
      auto name = func.getArgAttrOfType<StringAttr>(i, "attn.name");
      if (!name || name.getValue().empty()) {
        report(loc, "argument #" + Twine(i) +
                        " needs a name, %name or {attn.name = \"...\"}: the "
                        "name of the entry's input it becomes");
        return std::nullopt;
      }
      if (parsed.find(name.getValue())) {
        report(loc, "two arguments are named '" + name.getValue() + "'");
        return std::nullopt;
      }
      parsed.inputs.push_back({name.getValue().str(), tensorType, loc});
    }
    parsed.func = func;
    return parsed;
  }

  /// Parses the layer's `{"func": ...}` variants; false if one is wrong.
  bool prepareVariantFuncs(const AttentionLayer &layer) {
    scoreFunc.reset();
    maskFunc.reset();
    if (layer.scoreMod == ScoreMod::Func &&
        !(scoreFunc = parseVariantFunc(layer.scoreModFunc, /*score=*/true)))
      return false;
    if (layer.maskMod == MaskMod::Func &&
        !(maskFunc = parseVariantFunc(layer.maskModFunc, /*score=*/false)))
      return false;
    return true;
  }

  /// The inputs of a `{"func": ...}` variant, after the entry's others; a
  /// tensor the score_mod also reads (same name and type) is one input.
  void declareFuncInputs(EntryBuilder &entry, const ParsedVariant &variant,
                         const ParsedVariant *declaredBefore) {
    for (const VariantInput &input : variant.inputs) {
      if (const VariantInput *same =
              declaredBefore ? declaredBefore->find(input.name) : nullptr) {
        if (same->type != input.type) {
          std::string types;
          llvm::raw_string_ostream os(types);
          os << input.type << " here and " << same->type << " in the score_mod";
          report(input.loc, "input '" + input.name + "' is a " + types);
        }
        continue;
      }
      if (entry.has(input.name)) {
        report(input.loc, "input '" + input.name +
                              "' is already an input of the entry; give the "
                              "tensor another attn.name");
        continue;
      }
      entry.arg(input.name, input.type);
    }
  }

  /// The extra inputs of the layer's variants (SPEC §7), after every other
  /// input of an entry: rel_bias, doc_ids, prefix_len for the named ones,
  /// then those a `{"func": ...}` score_mod and mask_mod read, in their
  /// functions' order.
  void declareVariantInputs(EntryBuilder &entry, const AttentionLayer &layer) {
    if (layer.scoreMod == ScoreMod::RelativeBias)
      entry.arg("rel_bias",
                tensor({layer.numHeads, 2 * layer.relativeBiasRadius + 1},
                       Float32Type::get(context)));
    if (layer.maskMod == MaskMod::Document)
      entry.arg("doc_ids", tensor({kDyn, kDyn}, i32()));
    if (layer.maskMod == MaskMod::PrefixLm)
      entry.arg("prefix_len", tensor({kDyn}, i32()));
    if (scoreFunc)
      declareFuncInputs(entry, *scoreFunc, nullptr);
    if (maskFunc)
      declareFuncInputs(entry, *maskFunc, scoreFunc ? &*scoreFunc : nullptr);
  }

  /// Fills `region` with a block of the variant arguments (the score
  /// first when `withScore`) whose ops `body` builds; it yields the value
  /// `body` returns.
  void fillRegion(Region &region, bool withScore,
                  function_ref<Value(ValueRange args)> body) {
    OpBuilder::InsertionGuard guard(builder);
    Location loc = builder.getUnknownLoc();
    SmallVector<Type> types;
    if (withScore)
      types.push_back(Float32Type::get(context));
    types.append(4, builder.getIndexType());
    Block *block = builder.createBlock(
        &region, {}, types, SmallVector<Location>(types.size(), loc));
    YieldOp::create(builder, loc, body(block->getArguments()));
  }

  /// The body of a `{"func": ...}` variant as `region`: its SPEC §7
  /// arguments become the block's, its tensors the entry's inputs of their
  /// names, its return the yield.
  void cloneVariantFunc(Region &region, const ParsedVariant &variant,
                        EntryBuilder &entry) {
    func::FuncOp func = variant.func;
    Block &body = func.getBody().front();
    fillRegion(region, variant.fixedArgs == 5, [&](ValueRange args) -> Value {
      IRMapping map;
      for (auto [i, arg] : llvm::enumerate(args))
        map.map(body.getArgument(i), arg);
      for (auto [i, input] : llvm::enumerate(variant.inputs))
        map.map(body.getArgument(variant.fixedArgs + i), entry[input.name]);
      for (Operation &op : body.without_terminator())
        builder.clone(op, map);
      return map.lookupOrDefault(body.getTerminator()->getOperand(0));
    });
  }

  /// The layer's variants as the regions of `op` (sdpa, sparse_sdpa or
  /// tree_sdpa), reading the entry's variant inputs.
  void addVariantRegions(Operation *op, const AttentionLayer &layer,
                         EntryBuilder &entry) {
    Location loc = builder.getUnknownLoc();
    auto index = [&](int64_t value) -> Value {
      return arith::ConstantIndexOp::create(builder, loc, value);
    };
    auto f32 = [&](double value) -> Value {
      return arith::ConstantOp::create(builder, loc,
                                       builder.getF32FloatAttr(value));
    };
    // An index as f32 (positions stay below 2^31).
    auto toFloat = [&](Value x) -> Value {
      Value i = arith::IndexCastOp::create(builder, loc, i32(), x);
      return arith::SIToFPOp::create(builder, loc, builder.getF32Type(), i);
    };
    Region &scoreMod = op->getRegion(0), &maskMod = op->getRegion(1);
    if (scoreFunc || maskFunc) {
      // The verifier's errors about a region then point at the user's
      // function (its JSON path, line and column).
      SmallVector<Location> funcs;
      for (std::optional<ParsedVariant> *variant : {&scoreFunc, &maskFunc})
        if (*variant)
          funcs.push_back((*variant)->func.getLoc());
      op->setLoc(FusedLoc::get(context, funcs));
    }
    if (scoreFunc)
      cloneVariantFunc(scoreMod, *scoreFunc, entry);
    if (maskFunc)
      cloneVariantFunc(maskMod, *maskFunc, entry);
    if (layer.scoreMod == ScoreMod::Alibi) {
      // s - m_h * (qp - kp), with n the largest power of two <= H:
      // m_h = 2^(-8 (h + 1) / n) for h < n, else 2^(-4 (2 (h - n) + 1) / n).
      int64_t n = 1;
      while (n * 2 <= layer.numHeads)
        n *= 2;
      fillRegion(scoreMod, true, [&](ValueRange a) -> Value {
        Value s = a[0], h = a[2], qp = a[3], kp = a[4];
        Value low = arith::CmpIOp::create(
            builder, loc, arith::CmpIPredicate::slt, h, index(n));
        Value one = index(1);
        Value lowSteps = arith::AddIOp::create(builder, loc, h, one);
        Value highSteps = arith::AddIOp::create(
            builder, loc,
            arith::MulIOp::create(
                builder, loc, arith::SubIOp::create(builder, loc, h, index(n)),
                index(2)),
            one);
        Value steps =
            arith::SelectOp::create(builder, loc, low, lowSteps, highSteps);
        Value perStep = arith::SelectOp::create(
            builder, loc, low, f32(-8.0 / static_cast<double>(n)),
            f32(-4.0 / static_cast<double>(n)));
        Value slope = math::Exp2Op::create(
            builder, loc,
            arith::MulFOp::create(builder, loc, toFloat(steps), perStep));
        Value distance = toFloat(arith::SubIOp::create(builder, loc, qp, kp));
        return arith::SubFOp::create(
            builder, loc, s,
            arith::MulFOp::create(builder, loc, slope, distance));
      });
    } else if (layer.scoreMod == ScoreMod::RelativeBias) {
      // s + rel_bias[h, clamp(kp - qp, -R, R) + R]
      int64_t radius = layer.relativeBiasRadius;
      Value table = entry["rel_bias"];
      fillRegion(scoreMod, true, [&](ValueRange a) -> Value {
        Value s = a[0], h = a[2], qp = a[3], kp = a[4];
        Value offset = arith::SubIOp::create(builder, loc, kp, qp);
        Value clamped = arith::MinSIOp::create(
            builder, loc,
            arith::MaxSIOp::create(builder, loc, offset, index(-radius)),
            index(radius));
        Value column =
            arith::AddIOp::create(builder, loc, clamped, index(radius));
        Value bias = tensor::ExtractOp::create(builder, loc, table,
                                               ValueRange{h, column});
        return arith::AddFOp::create(builder, loc, s, bias);
      });
    }
    if (layer.maskMod == MaskMod::Document) {
      // doc_ids[b, qp] == doc_ids[b, kp]
      Value docs = entry["doc_ids"];
      fillRegion(maskMod, false, [&](ValueRange a) -> Value {
        Value b = a[0], qp = a[2], kp = a[3];
        Value queryDoc =
            tensor::ExtractOp::create(builder, loc, docs, ValueRange{b, qp});
        Value keyDoc =
            tensor::ExtractOp::create(builder, loc, docs, ValueRange{b, kp});
        return arith::CmpIOp::create(builder, loc, arith::CmpIPredicate::eq,
                                     queryDoc, keyDoc);
      });
    } else if (layer.maskMod == MaskMod::PrefixLm) {
      // kp < prefix_len[b] or kp <= qp
      Value prefix = entry["prefix_len"];
      fillRegion(maskMod, false, [&](ValueRange a) -> Value {
        Value b = a[0], qp = a[2], kp = a[3];
        Value length =
            tensor::ExtractOp::create(builder, loc, prefix, ValueRange{b});
        Value key = arith::IndexCastOp::create(builder, loc, i32(), kp);
        Value inPrefix = arith::CmpIOp::create(
            builder, loc, arith::CmpIPredicate::slt, key, length);
        Value notAhead = arith::CmpIOp::create(
            builder, loc, arith::CmpIPredicate::sle, kp, qp);
        return arith::OrIOp::create(builder, loc, inPrefix, notAhead);
      });
    }
  }

  UnitAttr returnLse(const AttentionLayer &layer) {
    return layer.returnLse ? builder.getUnitAttr() : UnitAttr();
  }

  /// Returns o, and lse after it when the layer asks for it (SPEC §9).
  static void finishAttention(EntryBuilder &entry, Value o, Value lse) {
    if (lse)
      entry.finish({o, lse}, {"o", "lse"});
    else
      entry.finish({o}, {"o"});
  }

  /// The layer's sparsity (SPEC §1.3) over q, k, v, with `meta` its keys'
  /// block metadata: top-k blocks, top-p tokens or both, then attention
  /// over the selection. Over a paged cache (`pageTable`, `seqLens`) the
  /// blocks are the pages; in a ragged batch `queryOffsets` place the
  /// packed query rows.
  SparseSdpaOp addSparseAttention(const AttentionLayer &layer,
                                  EntryBuilder &entry, MaskAttr mask,
                                  FloatAttr scale, FloatAttr softcap, Value q,
                                  Value k, Value v, Value meta, Value pageTable,
                                  Value seqLens, Value queryOffsets) {
    Location loc = builder.getUnknownLoc();
    const Sparsity &s = *layer.sparsity;
    Value blocks;
    if (s.topK) {
      // The keys' length places the rows; a paged cache has one per
      // sequence.
      Value keyLength;
      if (!pageTable)
        keyLength = tensor::DimOp::create(
            builder, loc, k, arith::ConstantIndexOp::create(builder, loc, 2));
      blocks = SelectTopKOp::create(
          builder, loc, q, meta, keyLength, pageTable, seqLens, queryOffsets,
          builder.getI64IntegerAttr(s.blockSize),
          builder.getI64IntegerAttr(*s.topK),
          builder.getI64IntegerAttr(s.sinkBlocks),
          builder.getI64IntegerAttr(s.localBlocks), mask, scale);
    }
    Value selection = blocks;
    int64_t selectionBlock = s.blockSize;
    if (s.method == SparsityMethod::TopP) {
      selection = SelectTopPOp::create(
          builder, loc, q, k, pageTable, seqLens, queryOffsets, blocks,
          builder.getF64FloatAttr(s.topP),
          builder.getI64IntegerAttr(s.minTokens),
          s.maxTokens ? builder.getI64IntegerAttr(*s.maxTokens) : IntegerAttr(),
          blocks ? builder.getI64IntegerAttr(s.blockSize) : IntegerAttr(),
          SelectionEstimatorAttr::get(context, s.estimator == Estimator::Exact
                                                   ? SelectionEstimator::Exact
                                                   : SelectionEstimator::Int4),
          mask, scale, softcap);
      selectionBlock = 1;
    }
    auto sparse = SparseSdpaOp::create(
        builder, loc, q, k, v, selection, Value(), sinksOf(entry), pageTable,
        seqLens, queryOffsets, builder.getI64IntegerAttr(selectionBlock), mask,
        scale, softcap, returnLse(layer));
    addVariantRegions(sparse, layer, entry);
    return sparse;
  }

  void addAttention(const AttentionLayer &layer) {
    if (!prepareVariantFuncs(layer))
      return;
    Location loc = builder.getUnknownLoc();
    MaskAttr mask = maskOf(context, layer);
    FloatAttr scale = optionalF64(layer.scale);
    FloatAttr softcap = builder.getF64FloatAttr(layer.softcap);
    RankedTensorType metaType =
        tensor({kDyn, layer.numKvHeads, kDyn, 2, layer.headDim}, element);
    auto kvRows = [&](int64_t features) {
      return rows(layer.numKvHeads, features);
    };

    // <layer> with a SPEC §8 layout: q, then k, v or over a paged cache
    // k_cache, v_cache, page_table, seq_lens, (+ gate), then for a ragged
    // batch cu_seqlens_q (+ cu_seqlens_k unless paged), (+ extras) -> o
    if (layer.pageSize > 0 || layer.ragged) {
      addLaidOutAttention(layer, mask, scale, softcap);
      return;
    }

    // <layer>: q, k, v (+ gate) (+ kmeta) -> o
    {
      EntryBuilder entry(builder, module, layer.name);
      entry.arg("q", rows(layer.numHeads, layer.headDim));
      declareKeysValues(entry, layer, /*paged=*/false, kvRows);
      declareGate(entry, layer);
      if (layer.sparsity)
        entry.arg("kmeta", metaType);
      declareSinks(entry, layer);
      declareVariantInputs(entry, layer);
      entry.beginBody();
      Value q = entry["q"], o, lse;
      auto [k, v] = keysValues(entry, layer, /*paged=*/false);
      if (!layer.sparsity) {
        auto sdpa = SdpaOp::create(
            builder, loc, q, k, v, Value(), sinksOf(entry), Value(), Value(),
            Value(), Value(), mask, scale, softcap, returnLse(layer));
        addVariantRegions(sdpa, layer, entry);
        o = sdpa.getOutput();
        lse = sdpa.getLse();
      } else {
        SparseSdpaOp sparse =
            addSparseAttention(layer, entry, mask, scale, softcap, q, k, v,
                               entry["kmeta"], Value(), Value(), Value());
        o = sparse.getOutput();
        lse = sparse.getLse();
      }
      finishAttention(entry, gated(entry, o), lse);
    }

    // <layer>.meta: k -> kmeta
    if (layer.sparsity) {
      EntryBuilder entry(builder, module, layer.name + ".meta");
      entry.arg(layer.latentKv ? "kv" : "k",
                rows(layer.numKvHeads, layer.headDim));
      entry.beginBody();
      Value meta = BlockMetaOp::create(
          builder, loc, keysOf(entry, layer, /*paged=*/false), Value(), Value(),
          builder.getI64IntegerAttr(layer.sparsity->blockSize));
      entry.finish({meta}, {"kmeta"});
    }

    if (!layer.tree)
      return;
    // <layer>.tree: q[B,H,T,D], k, v, parents (+ gate) -> o
    {
      EntryBuilder entry(builder, module, layer.name + ".tree");
      entry.arg("q", rows(layer.numHeads, layer.headDim));
      declareKeysValues(entry, layer, /*paged=*/false, kvRows);
      entry.arg("parents", tensor({kDyn, kDyn}, i32()));
      declareGate(entry, layer);
      declareSinks(entry, layer);
      declareVariantInputs(entry, layer);
      entry.beginBody();
      auto [window, chunk] = treeMask(layer);
      auto [k, v] = keysValues(entry, layer, /*paged=*/false);
      auto tree =
          TreeSdpaOp::create(builder, loc, entry["q"], k, v, entry["parents"],
                             Value(), sinksOf(entry), Value(), Value(), Value(),
                             window, chunk, scale, softcap, returnLse(layer));
      addVariantRegions(tree, layer, entry);
      finishAttention(entry, gated(entry, tree.getOutput()), tree.getLse());
    }
    // <layer>.compact: k, v, path, length -> k', v' (latent_kv: kv, path,
    // length -> kv')
    {
      EntryBuilder entry(builder, module, layer.name + ".compact");
      declareKeysValues(entry, layer, /*paged=*/false, kvRows);
      entry.arg("path", tensor({kDyn, kDyn}, i32()));
      entry.arg("length", tensor({kDyn}, i32()));
      entry.beginBody();
      if (layer.latentKv) {
        auto compact =
            KvCompactOp::create(builder, loc, entry["kv"], Value(),
                                entry["path"], entry["length"], Value());
        entry.finish({compact.getNewKey()}, {"kv'"});
      } else {
        auto compact =
            KvCompactOp::create(builder, loc, entry["k"], entry["v"],
                                entry["path"], entry["length"], Value());
        entry.finish({compact.getNewKey(), compact.getNewValue()},
                     {"k'", "v'"});
      }
    }
  }

  void addAccept() {
    Location loc = builder.getUnknownLoc();
    EntryBuilder entry(builder, module, "verify.accept");
    for (StringRef argName : {"tokens", "target", "parents"})
      entry.arg(argName, tensor({kDyn, kDyn}, i32()));
    entry.beginBody();
    auto accept = TreeAcceptOp::create(builder, loc, entry["tokens"],
                                       entry["target"], entry["parents"]);
    entry.finish({accept.getPath(), accept.getLength(), accept.getBonus()},
                 {"path", "length", "bonus"});
  }

  /// The most nodes of a draft tree in a model that does not say
  /// (speculative.max_tree_nodes).
  static constexpr int64_t kDefaultTreeNodes = 64;

  /// A linear layer's per-step inputs: q, k, v (+ g) (+ beta), then
  /// `between` (the tree's parents), S_init (+ z) (+ w when the gate
  /// normalizes).
  /// Where a recurrence entry's initial states come from: S_init [B, Hv,
  /// Dk, Dv], or a ragged layer's pool `states` [N, Hv, Dk, Dv] with
  /// `state_idx` [B] (SPEC §8), read only or updated in place.
  enum class States { Batch, Pool, PoolInPlace };

  void declareRecurrenceInputs(EntryBuilder &entry,
                               const LinearAttentionLayer &layer,
                               ArrayRef<std::pair<StringRef, Type>> between,
                               States states = States::Batch) {
    entry.arg("q", rows(layer.numKHeads, layer.kDim));
    entry.arg("k", rows(layer.numKHeads, layer.kDim));
    entry.arg("v", rows(layer.numVHeads, layer.vDim));
    if (usesDecay(layer))
      entry.arg("g", usesFeatureDecay(layer)
                         ? rows(layer.numVHeads, layer.kDim)
                         : tensor({kDyn, layer.numVHeads, kDyn}, element));
    if (usesBeta(layer))
      entry.arg("beta", tensor({kDyn, layer.numVHeads, kDyn}, element));
    for (auto [name, type] : between)
      entry.arg(name, type);
    RankedTensorType stateType =
        tensor({kDyn, layer.numVHeads, layer.kDim, layer.vDim},
               Float32Type::get(context));
    if (states == States::Batch) {
      entry.arg("S_init", stateType);
    } else {
      entry.arg("states", stateType,
                /*inPlace=*/states == States::PoolInPlace);
      entry.arg("state_idx", tensor({kDyn}, i32()));
    }
    if (layer.outputGate != OutputGate::None)
      entry.arg("z", rows(layer.numVHeads, layer.vDim));
    if (normalizes(layer.outputGate))
      entry.arg("w", gateWeight(layer));
    declareSkipInputs(entry, layer, rows(layer.numVHeads, layer.vDim));
  }

  /// The gate's weight: [v_dim] per head, or Mamba2's [num_v_heads * v_dim]
  /// with gate_groups.
  RankedTensorType gateWeight(const LinearAttentionLayer &layer) {
    return tensor(
        {layer.gateGroups ? layer.numVHeads * layer.vDim : layer.vDim},
        element);
  }

  /// Mamba2's skip D x (beyond SPEC), after every other input: x shaped as
  /// o, D [num_v_heads].
  void declareSkipInputs(EntryBuilder &entry, const LinearAttentionLayer &layer,
                         RankedTensorType outputType) {
    if (!layer.skip)
      return;
    entry.arg("x", outputType);
    entry.arg("D", tensor({layer.numVHeads}, element));
  }

  /// <layer> over a ragged batch (SPEC §8): q, k, v (+ g) (+ beta),
  /// states (in place), state_idx (+ z, w), cu_seqlens -> o.
  void addRaggedRecurrence(const LinearAttentionLayer &layer,
                           RecurrenceRuleAttr rule, UnitAttr l2norm) {
    Location loc = builder.getUnknownLoc();
    auto packed = [&](int64_t heads, int64_t features) {
      return tensor({kDyn, heads, features}, element);
    };
    EntryBuilder entry(builder, module, layer.name);
    entry.arg("q", packed(layer.numKHeads, layer.kDim));
    entry.arg("k", packed(layer.numKHeads, layer.kDim));
    entry.arg("v", packed(layer.numVHeads, layer.vDim));
    if (usesDecay(layer))
      entry.arg("g", usesFeatureDecay(layer)
                         ? packed(layer.numVHeads, layer.kDim)
                         : tensor({kDyn, layer.numVHeads}, element));
    if (usesBeta(layer))
      entry.arg("beta", tensor({kDyn, layer.numVHeads}, element));
    entry.arg("states",
              tensor({kDyn, layer.numVHeads, layer.kDim, layer.vDim},
                     Float32Type::get(context)),
              /*inPlace=*/true);
    entry.arg("state_idx", tensor({kDyn}, i32()));
    if (layer.outputGate != OutputGate::None)
      entry.arg("z", packed(layer.numVHeads, layer.vDim));
    if (normalizes(layer.outputGate))
      entry.arg("w", gateWeight(layer));
    entry.arg("cu_seqlens", tensor({kDyn}, i32()));
    declareSkipInputs(entry, layer, packed(layer.numVHeads, layer.vDim));
    entry.beginBody();
    auto optional = [&](StringRef name) {
      return entry.has(name) ? entry[name] : Value();
    };
    auto recurrence = LinearRecurrenceOp::create(
        builder, loc, rule, entry["q"], entry["k"], entry["v"], optional("g"),
        optional("beta"), entry["states"], entry["cu_seqlens"],
        entry["state_idx"], Value(), Value(), Value(),
        builder.getI64IntegerAttr(layer.chunkSize), optionalF64(layer.scale),
        l2norm, builder.getF64FloatAttr(1e-6));
    entry.finish({gatedRecurrence(entry, layer, recurrence.getOutput())}, {"o"},
                 {recurrence.getFinalState()});
  }

  /// <layer> over a paged cache, a ragged batch or both (SPEC §8), and
  /// <layer>.append with a paged cache.
  void addLaidOutAttention(const AttentionLayer &layer, MaskAttr mask,
                           FloatAttr scale, FloatAttr softcap) {
    Location loc = builder.getUnknownLoc();
    // [B, H, L, F], or packed token-major [T, H, F] in a ragged batch.
    auto perRow = [&](int64_t heads, int64_t features) {
      return layer.ragged ? tensor({kDyn, heads, features}, element)
                          : rows(heads, features);
    };
    const bool paged = layer.pageSize > 0;
    EntryBuilder entry(builder, module, layer.name);
    entry.arg("q", perRow(layer.numHeads, layer.headDim));
    declareKeysValues(entry, layer, paged, [&](int64_t features) {
      return paged ? pagedCache(layer, features)
                   : perRow(layer.numKvHeads, features);
    });
    if (paged)
      declarePageTable(entry);
    if (layer.gate != GateKind::None)
      entry.arg("gate",
                perRow(layer.numHeads, layer.gate == GateKind::Elementwise
                                           ? layer.valueDim
                                           : 1));
    // A page's [2, Hkv, D] per page of the cache.
    RankedTensorType pageMetaType =
        tensor({kDyn, 2, layer.numKvHeads, layer.headDim}, element);
    if (layer.sparsity)
      entry.arg("kmeta_pages", pageMetaType);
    declareSinks(entry, layer);
    if (layer.ragged) {
      entry.arg("cu_seqlens_q", tensor({kDyn}, i32()));
      if (!paged)
        entry.arg("cu_seqlens_k", tensor({kDyn}, i32()));
    }
    declareVariantInputs(entry, layer);
    entry.beginBody();
    auto optional = [&](StringRef name) {
      return entry.has(name) ? entry[name] : Value();
    };
    auto [k, v] = keysValues(entry, layer, paged);
    if (layer.sparsity) {
      // The reader allows sparsity over a paged cache only.
      SparseSdpaOp sparse =
          addSparseAttention(layer, entry, mask, scale, softcap, entry["q"], k,
                             v, entry["kmeta_pages"], entry["page_table"],
                             entry["seq_lens"], optional("cu_seqlens_q"));
      finishAttention(entry, gated(entry, sparse.getOutput()), sparse.getLse());
      addPagedMeta(layer);
      addAppend(layer);
      addPageMetaUpdate(layer);
      if (layer.tree)
        addLaidOutTree(layer, scale, softcap);
      return;
    }
    auto sdpa = SdpaOp::create(
        builder, loc, entry["q"], k, v, Value(), sinksOf(entry),
        optional("page_table"), optional("seq_lens"), optional("cu_seqlens_q"),
        optional("cu_seqlens_k"), mask, scale, softcap, returnLse(layer));
    addVariantRegions(sdpa, layer, entry);
    finishAttention(entry, gated(entry, sdpa.getOutput()), sdpa.getLse());
    if (paged)
      addAppend(layer);
    if (layer.tree)
      addLaidOutTree(layer, scale, softcap);
    if (layer.tree && !paged)
      addPackedCompact(layer);
  }

  /// <layer>.tree of a layer with a SPEC §8 layout: a tree of T nodes per
  /// sequence, q[B,H,T,D]; keys over a paged cache (k_cache, v_cache,
  /// page_table, seq_lens) or packed (k[Tk,Hkv,D], v); parents (+ gate)
  /// (+ sinks), cu_seqlens_k when packed (+ extras) -> o. Each sequence's
  /// last T keys are its tree's. Over pages there is no .compact: the
  /// engine writes the accepted tokens' rows with <layer>.append.
  void addLaidOutTree(const AttentionLayer &layer, FloatAttr scale,
                      FloatAttr softcap) {
    const bool paged = layer.pageSize > 0;
    EntryBuilder entry(builder, module, layer.name + ".tree");
    entry.arg("q", rows(layer.numHeads, layer.headDim));
    declareKeysValues(entry, layer, paged, [&](int64_t features) {
      return paged ? pagedCache(layer, features)
                   : tensor({kDyn, layer.numKvHeads, features}, element);
    });
    if (paged)
      declarePageTable(entry);
    entry.arg("parents", tensor({kDyn, kDyn}, i32()));
    declareGate(entry, layer);
    declareSinks(entry, layer);
    if (!paged)
      entry.arg("cu_seqlens_k", tensor({kDyn}, i32()));
    declareVariantInputs(entry, layer);
    entry.beginBody();
    auto optional = [&](StringRef name) {
      return entry.has(name) ? entry[name] : Value();
    };
    auto [window, chunk] = treeMask(layer);
    auto [k, v] = keysValues(entry, layer, paged);
    auto tree = TreeSdpaOp::create(
        builder, builder.getUnknownLoc(), entry["q"], k, v, entry["parents"],
        Value(), sinksOf(entry), optional("page_table"), optional("seq_lens"),
        optional("cu_seqlens_k"), window, chunk, scale, softcap,
        returnLse(layer));
    addVariantRegions(tree, layer, entry);
    finishAttention(entry, gated(entry, tree.getOutput()), tree.getLse());
  }

  /// <layer>.compact over packed keys: k[Tk,Hkv,D], v, path, length,
  /// cu_seqlens_k -> k', v' (latent_kv: kv, path, length, cu_seqlens_k ->
  /// kv'), each sequence's accepted rows moved right after its prefix.
  void addPackedCompact(const AttentionLayer &layer) {
    Location loc = builder.getUnknownLoc();
    EntryBuilder entry(builder, module, layer.name + ".compact");
    declareKeysValues(entry, layer, /*paged=*/false, [&](int64_t features) {
      return tensor({kDyn, layer.numKvHeads, features}, element);
    });
    entry.arg("path", tensor({kDyn, kDyn}, i32()));
    entry.arg("length", tensor({kDyn}, i32()));
    entry.arg("cu_seqlens_k", tensor({kDyn}, i32()));
    entry.beginBody();
    Value values = layer.latentKv ? Value() : entry["v"];
    auto compact = KvCompactOp::create(
        builder, loc, keysOf(entry, layer, /*paged=*/false), values,
        entry["path"], entry["length"], entry["cu_seqlens_k"]);
    if (layer.latentKv)
      entry.finish({compact.getNewKey()}, {"kv'"});
    else
      entry.finish({compact.getNewKey(), compact.getNewValue()}, {"k'", "v'"});
  }

  /// <layer>.meta over a paged cache (SPEC §8): k_cache, page_table,
  /// seq_lens -> kmeta_pages, the bounds of each page's keys.
  void addPagedMeta(const AttentionLayer &layer) {
    EntryBuilder entry(builder, module, layer.name + ".meta");
    entry.arg(layer.latentKv ? "kv_cache" : "k_cache",
              pagedCache(layer, layer.headDim));
    declarePageTable(entry);
    entry.beginBody();
    Value meta = BlockMetaOp::create(builder, builder.getUnknownLoc(),
                                     keysOf(entry, layer, /*paged=*/true),
                                     entry["page_table"], entry["seq_lens"],
                                     builder.getI64IntegerAttr(layer.pageSize));
    entry.finish({meta}, {"kmeta_pages"});
  }

  /// <layer>.meta_update (beyond SPEC §8): k_cache, slots (those of the
  /// step's `.append`), kmeta_pages (updated in place): the bounds of the
  /// pages the append wrote, so that an engine's step does not summarize
  /// the whole cache again.
  void addPageMetaUpdate(const AttentionLayer &layer) {
    EntryBuilder entry(builder, module, layer.name + ".meta_update");
    entry.arg(layer.latentKv ? "kv_cache" : "k_cache",
              pagedCache(layer, layer.headDim));
    entry.arg("slots", tensor({kDyn}, i32()));
    entry.arg("kmeta_pages",
              tensor({kDyn, 2, layer.numKvHeads, layer.headDim}, element),
              /*inPlace=*/true);
    entry.beginBody();
    auto update = PageMetaUpdateOp::create(
        builder, builder.getUnknownLoc(), keysOf(entry, layer, /*paged=*/true),
        entry["slots"], entry["kmeta_pages"]);
    entry.finish({}, {}, {update.getNewMeta()});
  }

  /// The page table [B, MP] and key lengths [B] of a paged cache.
  void declarePageTable(EntryBuilder &entry) {
    entry.arg("page_table", tensor({kDyn, kDyn}, i32()));
    entry.arg("seq_lens", tensor({kDyn}, i32()));
  }

  /// <layer>.append (SPEC §8): k_new, v_new, slots, k_cache, v_cache (both
  /// updated in place), no outputs; with latent_kv kv_new, slots, kv_cache.
  void addAppend(const AttentionLayer &layer) {
    if (layer.latentKv)
      return addLatentAppend(layer);
    EntryBuilder entry(builder, module, layer.name + ".append");
    entry.arg("k_new",
              tensor({kDyn, layer.numKvHeads, layer.headDim}, element));
    entry.arg("v_new",
              tensor({kDyn, layer.numKvHeads, layer.valueDim}, element));
    entry.arg("slots", tensor({kDyn}, i32()));
    entry.arg("k_cache", pagedCache(layer, layer.headDim), /*inPlace=*/true);
    entry.arg("v_cache", pagedCache(layer, layer.valueDim), /*inPlace=*/true);
    entry.beginBody();
    auto append = KvAppendOp::create(
        builder, builder.getUnknownLoc(), entry["k_new"], entry["v_new"],
        entry["slots"], entry["k_cache"], entry["v_cache"]);
    entry.finish({}, {}, {append.getNewKeyCache(), append.getNewValueCache()});
  }
  void addLatentAppend(const AttentionLayer &layer) {
    EntryBuilder entry(builder, module, layer.name + ".append");
    entry.arg("kv_new",
              tensor({kDyn, layer.numKvHeads, layer.headDim}, element));
    entry.arg("slots", tensor({kDyn}, i32()));
    entry.arg("kv_cache", pagedCache(layer, layer.headDim), /*inPlace=*/true);
    entry.beginBody();
    auto append =
        KvAppendOp::create(builder, builder.getUnknownLoc(), entry["kv_new"],
                           Value(), entry["slots"], entry["kv_cache"], Value());
    entry.finish({}, {}, {append.getNewKeyCache()});
  }

  static RecurrenceRule recurrenceRule(const LinearAttentionLayer &layer) {
    static const RecurrenceRule kRules[] = {
        RecurrenceRule::Linear,     RecurrenceRule::Decay,
        RecurrenceRule::Gla,        RecurrenceRule::Delta,
        RecurrenceRule::GatedDelta, RecurrenceRule::Kda};
    return kRules[static_cast<int>(layer.rule)];
  }
  static bool usesDecay(const LinearAttentionLayer &layer) {
    return hasScalarDecay(recurrenceRule(layer)) ||
           hasFeatureDecay(recurrenceRule(layer));
  }
  /// The decay is per key feature, [.., Hv, Dk] per step.
  static bool usesFeatureDecay(const LinearAttentionLayer &layer) {
    return hasFeatureDecay(recurrenceRule(layer));
  }
  static bool usesBeta(const LinearAttentionLayer &layer) {
    return isDeltaRule(recurrenceRule(layer));
  }

  /// o through the layer's output gate, if it has one.
  Value gatedRecurrence(EntryBuilder &entry, const LinearAttentionLayer &layer,
                        Value o) {
    if (layer.outputGate == OutputGate::None)
      return o;
    const GateActivation activation =
        layer.outputGate == OutputGate::RmsNormSigmoid ||
                layer.outputGate == OutputGate::Sigmoid
            ? GateActivation::Sigmoid
            : GateActivation::Silu;
    Value skipInput = layer.skip ? entry["x"] : Value();
    Value skipScale = layer.skip ? entry["D"] : Value();
    if (!normalizes(layer.outputGate))
      return GateOp::create(builder, builder.getUnknownLoc(), o, entry["z"],
                            skipInput, skipScale, activation);
    IntegerAttr groupSize;
    if (layer.gateGroups)
      groupSize = builder.getI64IntegerAttr(layer.numVHeads * layer.vDim /
                                            *layer.gateGroups);
    return RmsNormGateOp::create(
        builder, builder.getUnknownLoc(), o, entry["z"], entry["w"], skipInput,
        skipScale, builder.getF64FloatAttr(layer.gateEps),
        GateActivationAttr::get(context, activation), groupSize,
        builder.getBoolAttr(layer.normBeforeGate));
  }

  void addLinearAttention(const LinearAttentionLayer &layer,
                          int64_t maxTreeNodes) {
    Location loc = builder.getUnknownLoc();
    auto rule = RecurrenceRuleAttr::get(context, recurrenceRule(layer));
    auto step = [&](EntryBuilder &entry, StringRef name) {
      return usesDecay(layer) && name == "g"     ? entry["g"]
             : usesBeta(layer) && name == "beta" ? entry["beta"]
                                                 : Value();
    };
    UnitAttr l2norm = layer.qkL2Norm ? builder.getUnitAttr() : UnitAttr();

    // <layer>: q, k, v (+ g) (+ beta) + S_init (+ z, w) -> o, S, or its
    // ragged form.
    if (layer.ragged) {
      addRaggedRecurrence(layer, rule, l2norm);
    } else {
      EntryBuilder entry(builder, module, layer.name);
      declareRecurrenceInputs(entry, layer, {});
      entry.beginBody();
      auto recurrence = LinearRecurrenceOp::create(
          builder, loc, rule, entry["q"], entry["k"], entry["v"],
          step(entry, "g"), step(entry, "beta"), entry["S_init"], Value(),
          Value(), Value(), Value(), Value(),
          builder.getI64IntegerAttr(layer.chunkSize), optionalF64(layer.scale),
          l2norm, builder.getF64FloatAttr(1e-6));
      entry.finish({gatedRecurrence(entry, layer, recurrence.getOutput()),
                    recurrence.getFinalState()},
                   {"o", "S"});
    }
    if (!layer.tree)
      return;
    // A ragged layer's trees start from its pool and commit into it (SPEC
    // §8: states, state_idx for S_init); a tree of T nodes per sequence
    // keeps its steps [B, H, T, ...].
    const bool pooled = layer.ragged;
    // <layer>.tree: q, k, v (+ g) (+ beta), parents, S_init (+ z, w) -> o
    {
      EntryBuilder entry(builder, module, layer.name + ".tree");
      declareRecurrenceInputs(entry, layer,
                              {{"parents", tensor({kDyn, kDyn}, i32())}},
                              pooled ? States::Pool : States::Batch);
      entry.beginBody();
      auto recurrence = TreeRecurrenceOp::create(
          builder, loc, rule, entry["q"], entry["k"], entry["v"],
          step(entry, "g"), step(entry, "beta"), entry["parents"],
          entry[pooled ? "states" : "S_init"],
          pooled ? entry["state_idx"] : Value(), Value(), Value(),
          builder.getI64IntegerAttr(maxTreeNodes), optionalF64(layer.scale),
          l2norm, builder.getF64FloatAttr(1e-6));
      entry.finish({gatedRecurrence(entry, layer, recurrence.getOutput())},
                   {"o"});
    }
    // <layer>.commit: q, k, v (+ g) (+ beta), path, length, S_init -> S: the
    // recurrence over the accepted path's steps (zero steps past its
    // length change nothing), so no per-node state is kept. Over a pool:
    // ..., path, length, states (in place), state_idx, no outputs.
    {
      EntryBuilder entry(builder, module, layer.name + ".commit");
      LinearAttentionLayer ungated = layer;
      ungated.outputGate = OutputGate::None;
      ungated.skip = false;
      declareRecurrenceInputs(entry, ungated,
                              {{"path", tensor({kDyn, kDyn}, i32())},
                               {"length", tensor({kDyn}, i32())}},
                              pooled ? States::PoolInPlace : States::Batch);
      entry.beginBody();
      auto pathSteps = [&](Value x) -> Value {
        if (!x)
          return x;
        return PathStepsOp::create(builder, loc, x, entry["path"],
                                   entry["length"]);
      };
      auto recurrence = LinearRecurrenceOp::create(
          builder, loc, rule, pathSteps(entry["q"]), pathSteps(entry["k"]),
          pathSteps(entry["v"]), pathSteps(step(entry, "g")),
          pathSteps(step(entry, "beta")), entry[pooled ? "states" : "S_init"],
          Value(), Value(), pooled ? entry["state_idx"] : Value(), Value(),
          Value(), builder.getI64IntegerAttr(layer.chunkSize),
          optionalF64(layer.scale), l2norm, builder.getF64FloatAttr(1e-6));
      if (pooled)
        entry.finish({}, {}, {recurrence.getFinalState()});
      else
        entry.finish({recurrence.getFinalState()}, {"S"});
    }
  }

  MLIRContext *context;
  const ModelDescription &model;
  OpBuilder builder;
  Type element;
  ModuleOp module;
  /// The current layer's `{"func": ...}` variants, if any.
  std::optional<ParsedVariant> scoreFunc, maskFunc;
  /// Whether the user's attn IR was wrong (the diagnostics say how), and
  /// the errors reported so far.
  bool failed = false;
  std::set<std::string> reported;
};

} // namespace

OwningOpRef<ModuleOp>
mlir::attn::frontend::buildAttnModule(MLIRContext &context,
                                      const ModelDescription &model) {
  context.loadDialect<AttnDialect, arith::ArithDialect, func::FuncDialect,
                      math::MathDialect, tensor::TensorDialect>();
  return ModuleBuilder(&context, model).build();
}
