//===- ModelDescription.cpp - SPEC §3 model descriptions ------------------===//

#include "frontend/ModelDescription.h"
#include "frontend/JsonReader.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cctype>
#include <cmath>
#include <cstdio>

using namespace mlir::attn::frontend;
namespace limits = mlir::attn::limits;
namespace json = llvm::json;

namespace {

/// A number as a person wrote it: 1.5, -1, 0.001.
std::string formatNumber(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", x);
  return text;
}

const std::pair<llvm::StringRef, ElementType> kDtypes[] = {
    {"f32", ElementType::F32},
    {"f16", ElementType::F16},
    {"bf16", ElementType::BF16}};
const std::pair<llvm::StringRef, GateKind> kGates[] = {
    {"none", GateKind::None},
    {"elementwise", GateKind::Elementwise},
    {"headwise", GateKind::Headwise}};
const std::pair<llvm::StringRef, MaskMod> kMaskMods[] = {
    {"none", MaskMod::None},
    {"document", MaskMod::Document},
    {"prefix_lm", MaskMod::PrefixLm}};
const std::pair<llvm::StringRef, SparsityMethod> kMethods[] = {
    {"top_k", SparsityMethod::TopK}, {"top_p", SparsityMethod::TopP}};
const std::pair<llvm::StringRef, Estimator> kEstimators[] = {
    {"exact", Estimator::Exact}, {"int4", Estimator::Int4}};
const std::pair<llvm::StringRef, Rule> kRules[] = {
    {"linear", Rule::Linear},
    {"decay", Rule::Decay},
    {"gla", Rule::Gla},
    {"delta", Rule::Delta},
    {"gated_delta", Rule::GatedDelta},
    {"kda", Rule::Kda}};
const std::pair<llvm::StringRef, OutputGate> kOutputGates[] = {
    {"none", OutputGate::None},
    {"rmsnorm_silu", OutputGate::RmsNormSilu},
    {"rmsnorm_sigmoid", OutputGate::RmsNormSigmoid},
    {"silu", OutputGate::Silu},
    {"sigmoid", OutputGate::Sigmoid}};
const std::pair<llvm::StringRef, int> kLayerTypes[] = {{"attention", 0},
                                                       {"linear_attention", 1}};

/// Heads are grouped: `heads` (query or value heads) is a multiple of
/// `groups` (key/value or key heads).
void checkHeadGroups(Reader &reader, const std::string &path,
                     llvm::StringRef headsKey, int64_t heads,
                     llvm::StringRef groupsKey, int64_t groups) {
  if (!reader.failed() && heads % groups != 0)
    reader.fail(path, llvm::formatv("{0} ({1}) must be a multiple of {2} ({3})",
                                    headsKey, heads, groupsKey, groups)
                          .str());
}

/// `scale`: a number > 0, or null / absent for 1/sqrt(dim).
std::optional<double> readScale(Reader &reader, const json::Object &layer,
                                const std::string &path) {
  std::optional<double> scale = reader.number(layer, path, "scale");
  if (scale && *scale <= 0.0)
    reader.fail(Reader::join(path, "scale"),
                "expected a number > 0 or null, got " + formatNumber(*scale));
  return scale;
}

/// `mask`: "none", "causal" or {"sliding_window": W}.
constexpr llvm::StringLiteral kExpectedMask =
    "expected \"none\", \"causal\", {\"sliding_window\": W} or "
    "{\"chunked\": C}";

void readMask(Reader &reader, const json::Object &layer,
              const std::string &path, AttentionLayer &out) {
  const json::Value *value = layer.get("mask");
  if (!value)
    return; // default: causal
  const std::string maskPath = Reader::join(path, "mask");
  if (std::optional<llvm::StringRef> s = value->getAsString()) {
    if (*s == "none")
      out.mask = MaskKind::None;
    else if (*s == "causal")
      out.mask = MaskKind::Causal;
    else
      reader.fail(maskPath, std::string(kExpectedMask) + ", got " +
                                Reader::describe(value));
    return;
  }
  const json::Object *object = value->getAsObject();
  if (!object || object->size() != 1) {
    reader.fail(maskPath, std::string(kExpectedMask) + ", got " +
                              Reader::describe(value));
    return;
  }
  reader.onlyKeys(*object, maskPath, {"sliding_window", "chunked"});
  llvm::StringRef kind = object->begin()->first;
  out.mask = kind == "chunked" ? MaskKind::Chunked : MaskKind::SlidingWindow;
  out.window =
      reader.integer(*object, maskPath, kind, {}, 1, limits::kMaxTokens);
}

/// `{"func": "<attn IR>"}`: a variant of the user's own (the object at
/// `path`); its text is parsed and checked when the IR is built.
VariantFunc readVariantFunc(Reader &reader, const json::Object &object,
                            const std::string &path) {
  reader.onlyKeys(object, path, {"func"});
  VariantFunc func;
  func.path = Reader::join(path, "func");
  func.text = reader.string(object, path, "func", std::nullopt);
  if (static_cast<int64_t>(func.text.size()) > limits::kMaxVariantFuncBytes)
    reader.fail(func.path, "expected at most " +
                               std::to_string(limits::kMaxVariantFuncBytes) +
                               " bytes of attn IR (attn's limit), got " +
                               std::to_string(func.text.size()));
  return func;
}

/// `score_mod`: "alibi", {"relative_bias": R} or {"func": "<attn IR>"}
/// (SPEC §7).
void readScoreMod(Reader &reader, const json::Object &layer,
                  const std::string &path, AttentionLayer &out) {
  const json::Value *value = layer.get("score_mod");
  if (!value || value->kind() == json::Value::Null)
    return;
  const std::string modPath = Reader::join(path, "score_mod");
  const char *expected = "expected \"alibi\", {\"relative_bias\": R} or "
                         "{\"func\": \"<attn IR>\"}, got ";
  if (std::optional<llvm::StringRef> s = value->getAsString()) {
    if (*s == "alibi")
      out.scoreMod = ScoreMod::Alibi;
    else
      reader.fail(modPath, expected + Reader::describe(value));
    return;
  }
  const json::Object *object = value->getAsObject();
  if (!object) {
    reader.fail(modPath, expected + Reader::describe(value));
    return;
  }
  if (object->get("func")) {
    out.scoreMod = ScoreMod::Func;
    out.scoreModFunc = readVariantFunc(reader, *object, modPath);
    return;
  }
  reader.onlyKeys(*object, modPath, {"relative_bias", "func"});
  out.scoreMod = ScoreMod::RelativeBias;
  out.relativeBiasRadius = reader.integer(*object, modPath, "relative_bias", {},
                                          0, limits::kMaxRelativeBiasRadius);
}

/// `mask_mod`: "none", "document", "prefix_lm" or {"func": "<attn IR>"}
/// (SPEC §7).
void readMaskMod(Reader &reader, const json::Object &layer,
                 const std::string &path, AttentionLayer &out) {
  const json::Value *value = layer.get("mask_mod");
  if (!value || value->kind() == json::Value::Null)
    return;
  const std::string modPath = Reader::join(path, "mask_mod");
  if (const json::Object *object = value->getAsObject()) {
    out.maskMod = MaskMod::Func;
    out.maskModFunc = readVariantFunc(reader, *object, modPath);
    return;
  }
  std::optional<llvm::StringRef> s = value->getAsString();
  for (const auto &[name, kind] : kMaskMods)
    if (s && *s == name) {
      out.maskMod = kind;
      return;
    }
  reader.fail(modPath, "expected \"none\", \"document\", \"prefix_lm\" or "
                       "{\"func\": \"<attn IR>\"}, got " +
                           Reader::describe(value));
}

std::optional<Sparsity> readSparsity(Reader &reader, const json::Object &layer,
                                     const std::string &path) {
  const json::Value *value = layer.get("sparsity");
  if (!value || value->kind() == json::Value::Null)
    return std::nullopt;
  const std::string sparsityPath = Reader::join(path, "sparsity");
  const json::Object *o = reader.object(value, sparsityPath);
  if (!o)
    return std::nullopt;
  reader.onlyKeys(*o, sparsityPath,
                  {"method", "block_size", "top_k", "top_p", "min_tokens",
                   "max_tokens", "sink_blocks", "local_blocks", "estimator"});
  Sparsity s;
  s.method =
      reader.choice<SparsityMethod>(*o, sparsityPath, "method", kMethods, {});
  // Over a paged cache the blocks are the pages: block_size may be left
  // out there (readAttentionLayout checks it).
  if (o->get("block_size"))
    s.blockSize = reader.integer(*o, sparsityPath, "block_size", {}, 1,
                                 limits::kMaxBlockSize);
  s.sinkBlocks = reader.integer(*o, sparsityPath, "sink_blocks", 0, 0,
                                limits::kMaxBudgetBlocks);
  s.localBlocks = reader.integer(*o, sparsityPath, "local_blocks", 0, 0,
                                 limits::kMaxBudgetBlocks);
  if (o->get("top_k") || s.method == SparsityMethod::TopK)
    s.topK = reader.integer(*o, sparsityPath, "top_k", {}, 1,
                            limits::kMaxBudgetBlocks);
  if (s.method == SparsityMethod::TopK) {
    for (llvm::StringRef key :
         {"top_p", "min_tokens", "max_tokens", "estimator"})
      if (o->get(key))
        reader.fail(Reader::join(sparsityPath, key),
                    "only used by method \"top_p\"");
  } else {
    std::optional<double> topP = reader.number(*o, sparsityPath, "top_p");
    if (!topP)
      reader.fail(sparsityPath, "missing required key 'top_p'");
    else if (!(*topP > 0.0 && *topP <= 1.0))
      reader.fail(Reader::join(sparsityPath, "top_p"),
                  "expected a number in (0, 1], got " + formatNumber(*topP));
    s.topP = topP.value_or(1.0);
    s.minTokens = reader.integer(*o, sparsityPath, "min_tokens", 0, 0,
                                 limits::kMaxTokens);
    if (o->get("max_tokens"))
      s.maxTokens = reader.integer(*o, sparsityPath, "max_tokens", {}, 1,
                                   limits::kMaxTokens);
    if (s.maxTokens && s.minTokens > *s.maxTokens)
      reader.fail(sparsityPath,
                  llvm::formatv("min_tokens ({0}) must not exceed max_tokens "
                                "({1})",
                                s.minTokens, *s.maxTokens)
                      .str());
    s.estimator = reader.choice<Estimator>(*o, sparsityPath, "estimator",
                                           kEstimators, Estimator::Exact);
  }
  if (s.topK && s.sinkBlocks + s.localBlocks > *s.topK)
    reader.fail(sparsityPath,
                llvm::formatv("sink_blocks + local_blocks ({0} + {1}) must "
                              "not exceed top_k ({2})",
                              s.sinkBlocks, s.localBlocks, *s.topK)
                    .str());
  return s;
}

/// A softmax layer's SPEC §8 layout: a ragged batch, a paged cache, or
/// both. Sparsity needs the pages (Quest's blocks).
void readAttentionLayout(Reader &reader, const json::Object &layer,
                         const std::string &path, AttentionLayer &out) {
  const json::Value *value = layer.get("layout");
  if (!value || value->kind() == json::Value::Null)
    return;
  const std::string layoutPath = Reader::join(path, "layout");
  const json::Object *o = reader.object(value, layoutPath);
  if (!o)
    return;
  reader.onlyKeys(*o, layoutPath, {"ragged", "page_size"});
  out.ragged = reader.boolean(*o, layoutPath, "ragged", false);
  if (o->get("page_size"))
    out.pageSize = reader.integer(*o, layoutPath, "page_size", {}, 1,
                                  limits::kMaxBlockSize);
  if (out.sparsity && out.pageSize == 0) {
    if (out.ragged)
      reader.fail(layoutPath, "sparsity with a layout needs \"page_size\" "
                              "(Quest's blocks are the cache's pages)");
    return;
  }
  if (out.sparsity) {
    // Quest's blocks are the pages.
    if (out.sparsity->blockSize == 0)
      out.sparsity->blockSize = out.pageSize;
    else if (out.sparsity->blockSize != out.pageSize)
      reader.fail(Reader::join(Reader::join(path, "sparsity"), "block_size"),
                  llvm::formatv("over a paged cache the blocks are its pages: "
                                "expected the page size {0}, got {1}",
                                out.pageSize, out.sparsity->blockSize)
                      .str());
  }
}

AttentionLayer readAttention(Reader &reader, const json::Object &layer,
                             const std::string &path) {
  reader.onlyKeys(layer, path,
                  {"name", "type", "num_heads", "num_kv_heads", "head_dim",
                   "value_dim", "mask", "gate", "softcap", "scale", "sparsity",
                   "tree", "score_mod", "mask_mod", "return_lse", "sinks",
                   "latent_kv", "layout"});
  AttentionLayer out;
  out.numHeads =
      reader.integer(layer, path, "num_heads", {}, 1, limits::kMaxHeads);
  out.numKvHeads = reader.integer(layer, path, "num_kv_heads", out.numHeads, 1,
                                  limits::kMaxHeads);
  out.headDim =
      reader.integer(layer, path, "head_dim", {}, 1, limits::kMaxFeatureDim);
  out.valueDim = reader.integer(layer, path, "value_dim", out.headDim, 1,
                                limits::kMaxFeatureDim);
  checkHeadGroups(reader, path, "num_heads", out.numHeads, "num_kv_heads",
                  out.numKvHeads);
  readMask(reader, layer, path, out);
  out.gate =
      reader.choice<GateKind>(layer, path, "gate", kGates, GateKind::None);
  std::optional<double> softcap = reader.number(layer, path, "softcap");
  if (softcap && *softcap < 0.0)
    reader.fail(Reader::join(path, "softcap"),
                "expected a number >= 0 (0 disables it), got " +
                    formatNumber(*softcap));
  out.softcap = softcap.value_or(0.0);
  out.scale = readScale(reader, layer, path);
  out.sparsity = readSparsity(reader, layer, path);
  out.tree = reader.boolean(layer, path, "tree", false);
  readScoreMod(reader, layer, path, out);
  readMaskMod(reader, layer, path, out);
  out.returnLse = reader.boolean(layer, path, "return_lse", false);
  out.sinks = reader.boolean(layer, path, "sinks", false);
  out.latentKv = reader.boolean(layer, path, "latent_kv", false);
  if (out.latentKv && out.valueDim > out.headDim)
    reader.fail(Reader::join(path, "value_dim"),
                "expected at most head_dim (" + std::to_string(out.headDim) +
                    ") with \"latent_kv\" (the values are the keys' first "
                    "value_dim features), got " +
                    std::to_string(out.valueDim));
  readAttentionLayout(reader, layer, path, out);
  if (out.sparsity && out.sparsity->blockSize == 0)
    reader.fail(Reader::join(path, "sparsity"),
                "missing required key 'block_size'");
  return out;
}

/// A linear layer's SPEC §8 layout: whether its batch is ragged (a state
/// pool has no pages).
bool readLinearLayout(Reader &reader, const json::Object &layer,
                      const std::string &path) {
  const json::Value *value = layer.get("layout");
  if (!value || value->kind() == json::Value::Null)
    return false;
  const std::string layoutPath = Reader::join(path, "layout");
  const json::Object *o = reader.object(value, layoutPath);
  if (!o)
    return false;
  if (o->get("page_size"))
    reader.fail(Reader::join(layoutPath, "page_size"),
                "pages hold keys and values of softmax attention layers; a "
                "linear layer keeps a state pool (\"ragged\": true)");
  reader.onlyKeys(*o, layoutPath, {"ragged", "page_size"});
  return reader.boolean(*o, layoutPath, "ragged", false);
}

/// Mamba2's form of the output gate: its groups, its order and the skip
/// before it (beyond SPEC).
void readMambaGate(Reader &reader, const json::Object &layer,
                   const std::string &path, LinearAttentionLayer &out) {
  if (layer.get("skip") && out.outputGate == OutputGate::None)
    reader.fail(Reader::join(path, "skip"),
                "needs an \"output_gate\" (Mamba2's skip D x is added to o "
                "before the gate)");
  for (llvm::StringRef key : {"gate_groups", "norm_before_gate"})
    if (layer.get(key) && !normalizes(out.outputGate))
      reader.fail(Reader::join(path, key),
                  "needs an \"output_gate\" that normalizes "
                  "(\"rmsnorm_silu\" or \"rmsnorm_sigmoid\"), whose norm "
                  "this key shapes");
  out.normBeforeGate = reader.boolean(layer, path, "norm_before_gate", true);
  out.skip = reader.boolean(layer, path, "skip", false);
  if (!layer.get("gate_groups"))
    return;
  const int64_t features = out.numVHeads * out.vDim;
  const int64_t groups =
      reader.integer(layer, path, "gate_groups", {}, 1,
                     limits::kMaxHeads * limits::kMaxFeatureDim);
  if (reader.failed())
    return;
  const int64_t size = features / groups;
  if (features % groups != 0 || (out.vDim % size != 0 && size % out.vDim != 0))
    reader.fail(Reader::join(path, "gate_groups"),
                llvm::formatv("expected a count that splits num_v_heads * "
                              "v_dim = {0} features into groups of whole "
                              "heads or of equal parts of one (v_dim = {1}), "
                              "got {2}",
                              features, out.vDim, groups)
                    .str());
  out.gateGroups = groups;
}

LinearAttentionLayer readLinearAttention(Reader &reader,
                                         const json::Object &layer,
                                         const std::string &path) {
  reader.onlyKeys(layer, path,
                  {"name", "type", "rule", "num_k_heads", "num_v_heads",
                   "k_dim", "v_dim", "chunk_size", "qk_l2norm", "output_gate",
                   "scale", "gate_eps", "gate_groups", "norm_before_gate",
                   "skip", "tree", "layout"});
  LinearAttentionLayer out;
  out.rule = reader.choice<Rule>(layer, path, "rule", kRules, {});
  out.numKHeads =
      reader.integer(layer, path, "num_k_heads", {}, 1, limits::kMaxHeads);
  out.numVHeads = reader.integer(layer, path, "num_v_heads", out.numKHeads, 1,
                                 limits::kMaxHeads);
  out.kDim =
      reader.integer(layer, path, "k_dim", {}, 1, limits::kMaxFeatureDim);
  out.vDim =
      reader.integer(layer, path, "v_dim", out.kDim, 1, limits::kMaxFeatureDim);
  checkHeadGroups(reader, path, "num_v_heads", out.numVHeads, "num_k_heads",
                  out.numKHeads);
  out.chunkSize = reader.integer(layer, path, "chunk_size", 64, 1, 128);
  if (!llvm::is_contained(std::initializer_list<int64_t>{16, 32, 64, 128},
                          out.chunkSize))
    reader.fail(
        Reader::join(path, "chunk_size"),
        llvm::formatv("expected 16, 32, 64 or 128, got {0}", out.chunkSize)
            .str());
  out.qkL2Norm = reader.boolean(layer, path, "qk_l2norm", false);
  out.tree = reader.boolean(layer, path, "tree", false);
  out.ragged = readLinearLayout(reader, layer, path);
  out.outputGate = reader.choice<OutputGate>(layer, path, "output_gate",
                                             kOutputGates, OutputGate::None);
  out.scale = readScale(reader, layer, path);
  if (std::optional<double> eps = reader.number(layer, path, "gate_eps")) {
    if (*eps <= 0.0)
      reader.fail(Reader::join(path, "gate_eps"),
                  "expected a number > 0, got " + formatNumber(*eps));
    out.gateEps = *eps;
  }
  readMambaGate(reader, layer, path, out);
  return out;
}

/// Entry names append ".meta", ".tree" and ".compact" to a layer's name and
/// must not collide with "verify.accept": names are identifiers.
bool isValidLayerName(llvm::StringRef name) {
  if (name.empty() || !(std::isalpha(name.front()) || name.front() == '_'))
    return false;
  return llvm::all_of(name, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

} // namespace

void mlir::attn::frontend::readSpeculative(Reader &reader,
                                           const json::Object &root,
                                           ModelDescription &model) {
  if (const json::Value *speculative = root.get("speculative")) {
    if (const json::Object *o = reader.object(speculative, "$.speculative")) {
      reader.onlyKeys(*o, "$.speculative", {"max_tree_nodes"});
      model.maxTreeNodes = reader.integer(*o, "$.speculative", "max_tree_nodes",
                                          {}, 1, limits::kMaxTreeNodes);
    }
  }
  bool linearTrees = llvm::any_of(model.layers, [](const Layer &layer) {
    const auto *linear = std::get_if<LinearAttentionLayer>(&layer);
    return linear && linear->tree;
  });
  if (linearTrees && model.maxTreeNodes &&
      *model.maxTreeNodes > limits::kMaxTreeRecurrenceNodes)
    reader.fail("$.speculative.max_tree_nodes",
                llvm::formatv("expected at most {0} with a linear layer's "
                              "\"tree\", got {1}",
                              limits::kMaxTreeRecurrenceNodes,
                              *model.maxTreeNodes)
                    .str());
}

llvm::Expected<ModelDescription>
mlir::attn::frontend::parseModelDescription(llvm::StringRef text) {
  llvm::Expected<json::Value> parsed = parseJson(text);
  if (!parsed)
    return parsed.takeError();
  Reader reader;
  ModelDescription model;
  const json::Object *root = reader.object(&*parsed, "$");
  if (!root)
    return reader.takeError();
  reader.onlyKeys(*root, "$", {"model", "dtype", "layers", "speculative"});
  model.model = reader.string(*root, "$", "model", {});
  model.dtype = reader.choice<ElementType>(*root, "$", "dtype", kDtypes,
                                           ElementType::F32);

  const json::Value *layers = root->get("layers");
  const json::Array *layerArray = layers ? layers->getAsArray() : nullptr;
  if (!layers)
    reader.fail("$", "missing required key 'layers'");
  else if (!layerArray || layerArray->empty())
    reader.fail("$.layers", "expected a non-empty array of layers, got " +
                                Reader::describe(layers));
  else if (static_cast<int64_t>(layerArray->size()) > limits::kMaxLayers)
    reader.fail("$.layers",
                llvm::formatv("{0} layers; attn compiles at most {1}",
                              layerArray->size(), limits::kMaxLayers)
                    .str());
  llvm::StringMap<std::string> namePaths;
  for (size_t i = 0; layerArray && i < layerArray->size() && !reader.failed();
       ++i) {
    const std::string path = llvm::formatv("$.layers[{0}]", i).str();
    const json::Object *layer = reader.object(&(*layerArray)[i], path);
    if (!layer)
      break;
    std::string name = reader.string(*layer, path, "name", {});
    int type = reader.choice<int>(*layer, path, "type", kLayerTypes, {});
    if (reader.failed())
      break;
    if (!isValidLayerName(name))
      reader.fail(Reader::join(path, "name"),
                  "expected an identifier (letters, digits, '_' or '-', not "
                  "starting with a digit), got \"" +
                      name + "\"");
    else if (name == "verify")
      reader.fail(Reader::join(path, "name"),
                  "\"verify\" is reserved for the verify.accept entry");
    auto [existing, inserted] = namePaths.try_emplace(name, path);
    if (!inserted)
      reader.fail(Reader::join(path, "name"), "\"" + name +
                                                  "\" is already the name of " +
                                                  existing->second);
    if (type == 0) {
      AttentionLayer attention = readAttention(reader, *layer, path);
      attention.name = name;
      model.layers.push_back(attention);
    } else {
      LinearAttentionLayer linear = readLinearAttention(reader, *layer, path);
      linear.name = name;
      model.layers.push_back(linear);
    }
  }

  readSpeculative(reader, *root, model);
  if (reader.failed())
    return reader.takeError();
  return model;
}
