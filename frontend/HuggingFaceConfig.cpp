//===- HuggingFaceConfig.cpp - Hugging Face config.json as input ----------===//
//
// Qwen3-Next (transformers' Qwen3NextConfig): `layer_types`, or, without
// it, every `full_attention_interval`-th of `num_hidden_layers` layers is
// full attention and the others linear attention. The two kinds become
//
//  - full_attention: gated attention (Qiu et al.), causal, GQA with
//    `num_attention_heads` / `num_key_value_heads` heads of `head_dim`, and
//    the elementwise sigmoid output gate;
//  - linear_attention: Gated DeltaNet, `linear_num_key_heads` /
//    `linear_num_value_heads` heads of `linear_key_head_dim` /
//    `linear_value_head_dim`, L2-normalized q/k, chunks of 64 steps, and the
//    rmsnorm-silu output gate with `rms_norm_eps`.
//
// attn's own key `speculative` (SPEC §3's object, e.g. {"max_tree_nodes":
// 64}) turns on speculative verification: both kinds get "tree": true, so
// full_attention gets .tree and .compact, linear_attention .tree and
// .commit, and the model verify.accept.
//
// Weights, projections, convolutions and MoE blocks are not attention and
// are not compiled. Storage is f32 whatever `torch_dtype` says: the CPU
// kernels compute in f32.
//
//===----------------------------------------------------------------------===//

#include "frontend/HuggingFaceConfig.h"
#include "frontend/JsonReader.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace mlir::attn::frontend;

namespace {

constexpr llvm::StringRef kFullAttention = "full_attention";
constexpr llvm::StringRef kLinearAttention = "linear_attention";

/// `heads` is a multiple of `groups`, both read from `config`.
void checkGroups(Reader &reader, int64_t heads, llvm::StringRef headsKey,
                 int64_t groups, llvm::StringRef groupsKey) {
  if (reader.failed() || heads % groups == 0)
    return;
  reader.fail(Reader::join("$", headsKey),
              llvm::formatv("expected a multiple of {0} ({1}), got {2}",
                            groupsKey, groups, heads)
                  .str());
}

/// The layer kinds in order of first appearance.
std::vector<std::string> readLayerKinds(Reader &reader,
                                        const json::Object &config) {
  std::vector<std::string> kinds;
  auto addKind = [&](llvm::StringRef kind) {
    if (!llvm::is_contained(kinds, kind))
      kinds.push_back(kind.str());
  };
  if (const json::Value *types = config.get("layer_types")) {
    const json::Array *array = types->getAsArray();
    if (array && static_cast<int64_t>(array->size()) > limits::kMaxLayers) {
      reader.fail("$.layer_types",
                  llvm::formatv("{0} layers; attn compiles at most {1}",
                                array->size(), limits::kMaxLayers)
                      .str());
      return kinds;
    }
    if (!array || array->empty()) {
      reader.fail("$.layer_types",
                  "expected a non-empty array of \"full_attention\" or "
                  "\"linear_attention\", got " +
                      Reader::describe(types));
      return kinds;
    }
    for (auto [i, type] : llvm::enumerate(*array)) {
      std::optional<llvm::StringRef> name = type.getAsString();
      if (!name || (*name != kFullAttention && *name != kLinearAttention)) {
        reader.fail(
            llvm::formatv("$.layer_types[{0}]", i).str(),
            "expected \"full_attention\" or \"linear_attention\", got " +
                Reader::describe(&type));
        return kinds;
      }
      addKind(*name);
    }
    return kinds;
  }
  int64_t layers = reader.integer(config, "$", "num_hidden_layers", {}, 1,
                                  limits::kMaxLayers);
  int64_t interval = reader.integer(config, "$", "full_attention_interval", {},
                                    1, limits::kMaxLayers);
  if (reader.failed())
    return kinds;
  // transformers: layer i is full attention when (i + 1) % interval == 0.
  // The kinds repeat with the interval, so one period names them all.
  for (int64_t i = 0; i < std::min(layers, interval); ++i)
    addKind((i + 1) % interval == 0 ? kFullAttention : kLinearAttention);
  return kinds;
}

AttentionLayer readFullAttention(Reader &reader, const json::Object &config) {
  AttentionLayer layer;
  layer.name = kFullAttention.str();
  layer.numHeads = reader.integer(config, "$", "num_attention_heads", {}, 1,
                                  limits::kMaxHeads);
  layer.numKvHeads = reader.integer(config, "$", "num_key_value_heads",
                                    layer.numHeads, 1, limits::kMaxHeads);
  // transformers' default head_dim is hidden_size / num_attention_heads.
  std::optional<int64_t> headDim;
  if (!config.get("head_dim") && !reader.failed()) {
    int64_t hidden = reader.integer(config, "$", "hidden_size", {}, 1,
                                    limits::kMaxHeads * limits::kMaxFeatureDim);
    headDim = hidden / layer.numHeads;
    if (!reader.failed() && (*headDim < 1 || *headDim > limits::kMaxFeatureDim))
      reader.fail("$.hidden_size",
                  llvm::formatv("without head_dim, the head dim is "
                                "hidden_size / num_attention_heads = {0} / {1} "
                                "= {2}; expected 1 to {3} (give head_dim)",
                                hidden, layer.numHeads, *headDim,
                                limits::kMaxFeatureDim)
                      .str());
  }
  layer.headDim = reader.integer(config, "$", "head_dim", headDim, 1,
                                 limits::kMaxFeatureDim);
  layer.valueDim = layer.headDim;
  layer.mask = MaskKind::Causal;
  layer.gate = GateKind::Elementwise;
  checkGroups(reader, layer.numHeads, "num_attention_heads", layer.numKvHeads,
              "num_key_value_heads");
  return layer;
}

LinearAttentionLayer readLinearAttention(Reader &reader,
                                         const json::Object &config) {
  LinearAttentionLayer layer;
  layer.name = kLinearAttention.str();
  layer.rule = Rule::GatedDelta;
  layer.numKHeads = reader.integer(config, "$", "linear_num_key_heads", {}, 1,
                                   limits::kMaxHeads);
  layer.numVHeads = reader.integer(config, "$", "linear_num_value_heads", {}, 1,
                                   limits::kMaxHeads);
  layer.kDim = reader.integer(config, "$", "linear_key_head_dim", {}, 1,
                              limits::kMaxFeatureDim);
  layer.vDim = reader.integer(config, "$", "linear_value_head_dim", {}, 1,
                              limits::kMaxFeatureDim);
  layer.chunkSize = 64;
  layer.qkL2Norm = true;
  layer.outputGate = OutputGate::RmsNormSilu;
  if (std::optional<double> eps = reader.number(config, "$", "rms_norm_eps")) {
    if (*eps > 0.0)
      layer.gateEps = *eps;
    else
      reader.fail("$.rms_norm_eps",
                  "expected a number > 0, got " + std::to_string(*eps));
  }
  checkGroups(reader, layer.numVHeads, "linear_num_value_heads",
              layer.numKHeads, "linear_num_key_heads");
  return layer;
}

} // namespace

llvm::ArrayRef<llvm::StringRef>
mlir::attn::frontend::supportedHuggingFaceModelTypes() {
  static const llvm::StringRef types[] = {"qwen3_next"};
  return types;
}

llvm::Expected<ModelDescription>
mlir::attn::frontend::parseHuggingFaceConfig(llvm::StringRef text) {
  llvm::Expected<json::Value> parsed = parseJson(text);
  if (!parsed)
    return parsed.takeError();
  Reader reader;
  const json::Object *config = reader.object(&*parsed, "$");
  if (!config)
    return reader.takeError();
  std::string modelType = reader.string(*config, "$", "model_type", {});
  if (!reader.failed() &&
      !llvm::is_contained(supportedHuggingFaceModelTypes(), modelType))
    reader.fail("$.model_type",
                "unsupported Hugging Face model type \"" + modelType +
                    "\"; supported: " +
                    llvm::join(supportedHuggingFaceModelTypes(), ", "));
  if (reader.failed())
    return reader.takeError();

  ModelDescription model;
  model.model = modelType;
  model.dtype = ElementType::F32;
  const bool speculative = config->get("speculative") != nullptr;
  for (const std::string &kind : readLayerKinds(reader, *config)) {
    if (kind == kFullAttention) {
      AttentionLayer layer = readFullAttention(reader, *config);
      layer.tree = speculative;
      model.layers.push_back(layer);
    } else {
      LinearAttentionLayer layer = readLinearAttention(reader, *config);
      layer.tree = speculative;
      model.layers.push_back(layer);
    }
  }
  readSpeculative(reader, *config, model);
  if (reader.failed())
    return reader.takeError();
  return model;
}

llvm::Expected<ModelDescription>
mlir::attn::frontend::parseModelInput(llvm::StringRef text) {
  llvm::Expected<json::Value> parsed = parseJson(text);
  if (!parsed)
    return parsed.takeError();
  const json::Object *root = parsed->getAsObject();
  if (root && root->get("model_type"))
    return parseHuggingFaceConfig(text);
  return parseModelDescription(text);
}
