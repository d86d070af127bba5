//===- HuggingFaceConfig.cpp - Hugging Face config.json as input ----------===//
//
// The attention of a Hugging Face model, from its `config.json`: one layer
// per distinct layer kind, named after transformers' layer type. Which
// layer is which kind comes from `layer_types` where the config has it,
// else from the rule of the model's transformers config class:
//
//  - qwen3_next (Qwen3NextConfig): every `full_attention_interval`-th of
//    `num_hidden_layers` layers is full_attention, the others
//    linear_attention. The two kinds become
//      - full_attention: gated attention (Qiu et al.), causal, GQA with
//        `num_attention_heads` / `num_key_value_heads` heads of `head_dim`,
//        and the elementwise sigmoid output gate;
//      - linear_attention: Gated DeltaNet, `linear_num_key_heads` /
//        `linear_num_value_heads` heads of `linear_key_head_dim` /
//        `linear_value_head_dim`, L2-normalized q/k, chunks of 64 steps, and
//        the rmsnorm-silu output gate with `rms_norm_eps`.
//    Qwen3.5 (qwen3_5_text, qwen3_5_moe_text, and qwen3_5 and qwen3_5_moe
//    whose `text_config` is one) has the same layers, with its config
//    classes' defaults (every 4th layer full attention).
//  - llama, mistral, qwen2, qwen3, gemma2, gemma3_text (and gemma3, whose
//    `text_config` is a gemma3_text config): causal GQA softmax attention,
//    full_attention or sliding_attention (a window of `sliding_window`
//    keys, the query's own included, as transformers' masks). Sliding
//    layers: mistral's every layer when `sliding_window` is set; qwen2 and
//    qwen3's layers from `max_window_layers` on with `use_sliding_window`;
//    gemma2's even layers; gemma3's all but every `sliding_window_pattern`-th
//    (6). Gemma scales scores by `query_pre_attn_scalar`^-1/2 and caps them
//    with `attn_logit_softcapping`.
//  - llama4, llama4_text (Llama4TextConfig; llama4's `text_config`): causal
//    GQA softmax attention, full_attention or chunked_attention (causal
//    within chunks of `attention_chunk_size` positions). Without
//    `layer_types`, the RoPE layers of `no_rope_layers` (1) are chunked and
//    the NoPE ones (0) full; without that list, every
//    `no_rope_layer_interval`-th layer (4) is full.
//  - gpt_oss (GptOssConfig): as gemma2's layers (even layers slide), with
//    learned attention sinks: each entry takes the layer's `sinks [H]`
//    (transformers' `self_attn.sinks`, one logit per query head).
//  - deepseek_v2, deepseek_v3, kimi_k2 (DeepseekV2Config,
//    DeepseekV3Config): multi-head latent attention (MLA), causal, in its
//    two forms, which serving engines use for prefill and for decode:
//      - full_attention: the keys and values expanded per head by
//        kv_b_proj, `num_attention_heads` heads of `qk_nope_head_dim` +
//        `qk_rope_head_dim` features and values of `v_head_dim`;
//      - latent_attention: the absorbed form over the compressed cache,
//        one kv head of `kv_lora_rank` + `qk_rope_head_dim` features whose
//        first `kv_lora_rank` are the values ("latent_kv"); the queries
//        are q_nope times W_UK per head beside q_pe, and the output, in
//        the latent space, goes through W_UV after attention.
//    Both scale scores by (qk_nope_head_dim + qk_rope_head_dim)^-1/2,
//    times mscale^2 with YaRN's mscale = 0.1 mscale_all_dim ln(factor) + 1
//    when `rope_scaling` sets `mscale_all_dim` (and factor > 1).
//  - kimi_linear (Kimi Linear, vLLM's KimiLinearConfig): the layers that
//    `linear_attn_config.kda_layers` lists (1-based, as the released
//    configs and vLLM read them) are linear_attention, the others MLA as
//    deepseek_v3's (full_attention and latent_attention; Kimi's MLA layers
//    use no RoPE, which changes nothing here). linear_attention is Kimi
//    Delta Attention: rule kda, `linear_attn_config.num_heads` heads of
//    `linear_attn_config.head_dim` for q, k and v alike, L2-normalized
//    q/k, chunks of 64 steps, and the rmsnorm output gate with a sigmoid
//    of z (FusedRMSNormGated(activation="sigmoid")) and `rms_norm_eps`.
//    Without `linear_attn_config` every layer is MLA.
//  - mamba2 (Mamba2Config): every layer is one kind, mamba, whose SSD
//    (Dao and Gu's state space duality) is the decay rule: with the
//    projections' x, B, C, the step dt (after softplus and its bias) and
//    A = -exp(A_log), the state h_t = exp(dt_t A) h_{t-1} + B_t (dt_t
//    x_t)^T and y_t = h_t^T C_t are attn's recurrence with q = C, k = B
//    (`n_groups` key heads of `state_size`), v = dt x (`num_heads` value
//    heads of `head_dim`), g = dt A and scale 1, in chunks of 64 steps
//    (`chunk_size` is a kernel's tiling, not the math). Then, as
//    mamba_ssm's kernels (and transformers' CUDA path) finish the scan,
//    the skip D x and the gated RMSNorm: y + D x times silu(z), normalized
//    over `n_groups` groups of the heads' features and weighted per
//    feature (`layer_norm_epsilon`; `norm_before_gate`, false by default,
//    normalizes first). The entry takes z, the norm's weight [heads x
//    head_dim], x and D after S_init. The convolution and the projections
//    stay with the caller.
//  - nemotron_h (NemotronHConfig, as vLLM reads it): layer i is a Mamba2
//    mixer (mamba, as mamba2's with `mamba_num_heads` heads of
//    `mamba_head_dim`, `n_groups` (or `mamba_n_groups`) groups of
//    `ssm_state_size`) where `hybrid_override_pattern[i]` is 'M', causal
//    GQA softmax attention (full_attention: `num_attention_heads` /
//    `num_key_value_heads` heads of `attention_head_dim`) where it is '*',
//    and no attention where it is '-' (MLP) or 'E' (MoE).
//  - granitemoehybrid (Granite 4.0-H), bamba, falcon_h1: Mamba2 hybrids
//    whose mixers (mamba) have `mamba_n_heads` heads of `mamba_d_head`
//    ("auto": the mixer's width, `mamba_expand` x `hidden_size` or
//    Falcon-H1's `mamba_d_ssm`, over the heads) and `mamba_n_groups`
//    groups of `mamba_d_state`. Granite's `layer_types` names each layer
//    "mamba" or "attention", Bamba's `attn_layer_indices` lists the
//    attention layers, and every Falcon-H1 layer runs a mixer and
//    attention side by side. Their attention is full_attention, causal
//    GQA; Granite's scaled by `attention_multiplier`. Their mixers end as
//    mamba2's (the norm's groups `mamba_n_groups`, its epsilon
//    `rms_norm_eps`); Falcon-H1's with `mamba_rms_norm` (in the order
//    `mamba_norm_before_gate` says), else (its released checkpoints) as
//    its mixer ends without the norm: y + D x gated by silu(z) alone.
//  - granite, granitemoe, granitemoeshared: Llama's layers, scaled by
//    `attention_multiplier`.
//  - minimax (MiniMaxConfig, MiniMax-Text-01): each layer of `layer_types`
//    is full_attention (Mixtral's causal GQA softmax attention;
//    sliding_attention when `sliding_window` is set, as transformers masks
//    it then) or linear_attention (lightning attention, see
//    readLightningAttention); without `layer_types`, even layers are
//    full_attention. minimax_m2 (MiniMaxM2Config) is Llama's layers.
//
// attn's own key `speculative` (SPEC §3's object, e.g. {"max_tree_nodes":
// 64}) turns on speculative verification: every kind gets "tree": true, so
// softmax kinds get .tree and .compact, linear_attention .tree and .commit,
// and the model verify.accept.
//
// Weights, projections (with RoPE and the q/k norms of Qwen3 and Gemma 3),
// convolutions and MoE blocks are not attention and are not compiled.
// Storage is f32 whatever `torch_dtype` says: the CPU kernels compute in
// f32.
//
//===----------------------------------------------------------------------===//

#include "frontend/HuggingFaceConfig.h"
#include "frontend/JsonReader.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <functional>

using namespace mlir::attn::frontend;
namespace limits = mlir::attn::limits;

namespace {

constexpr llvm::StringRef kFullAttention = "full_attention";
constexpr llvm::StringRef kSlidingAttention = "sliding_attention";
constexpr llvm::StringRef kLinearAttention = "linear_attention";
constexpr llvm::StringRef kChunkedAttention = "chunked_attention";
constexpr llvm::StringRef kMamba = "mamba";

/// The transformers config classes whose attention attn reads, by how
/// their layers are laid out and scored.
enum class Family {
  Qwen3Next,
  Llama,
  Mistral,
  Qwen2,
  Qwen3Moe,
  Gemma2,
  Gemma3,
  Llama4,
  GptOss,
  DeepSeek,
  KimiLinear,
  Mamba2,
  NemotronH,
  Granite,
  GraniteHybrid,
  Bamba,
  FalconH1,
  MiniMax
};

/// What the config class assumes for a key a config leaves out: hub
/// configs rely on these (Gemma 3's text_config often names no head
/// count). Qwen3-Next's keys are required, as its configs give them all;
/// Qwen3.5's classes default them.
struct Defaults {
  std::optional<int64_t> numHeads, numKvHeads, headDim, hiddenSize, layers,
      slidingWindow;
  /// Gated DeltaNet's: full_attention_interval and the linear_* keys.
  struct {
    std::optional<int64_t> fullAttentionInterval, keyHeads, valueHeads, keyDim,
        valueDim;
  } linear;
};

struct ModelType {
  llvm::StringRef name;
  Family family;
  Defaults defaults;
  /// Whether the language model's config is the `text_config` of a
  /// multimodal one.
  bool textConfig = false;
};

// transformers' LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
// Gemma2Config, Gemma3TextConfig, Llama4TextConfig, GptOssConfig,
// DeepseekV2Config and DeepseekV3Config (Kimi K2's), Mamba2Config,
// GraniteConfig, GraniteMoeConfig, GraniteMoeSharedConfig,
// GraniteMoeHybridConfig, BambaConfig, FalconH1Config, MiniMaxConfig and
// MiniMaxM2Config, and vLLM's
// KimiLinearConfig and NemotronHConfig
// (num_key_value_heads unset means num_attention_heads, head_dim unset
// hidden_size / num_attention_heads). Qwen3.5's classes
// (Qwen3_5TextConfig, Qwen3_5MoeTextConfig) default every key that
// Qwen3-Next's configs give.
constexpr Defaults kQwen35Defaults{
    16, 4, 256, 4096, 32, {}, {4, 16, 32, 128, 128}};
constexpr Defaults kQwen35MoeDefaults{
    16, 2, 256, 2048, 40, {}, {4, 16, 32, 128, 128}};
const ModelType kModelTypes[] = {
    {"qwen3_next", Family::Qwen3Next, {}},
    {"qwen3_5", Family::Qwen3Next, kQwen35Defaults, /*textConfig=*/true},
    {"qwen3_5_text", Family::Qwen3Next, kQwen35Defaults},
    {"qwen3_5_moe", Family::Qwen3Next, kQwen35MoeDefaults, /*textConfig=*/true},
    {"qwen3_5_moe_text", Family::Qwen3Next, kQwen35MoeDefaults},
    {"llama", Family::Llama, {32, {}, {}, 4096, 32, {}}},
    {"mistral", Family::Mistral, {32, 8, {}, 4096, 32, 4096}},
    {"qwen2", Family::Qwen2, {32, 32, {}, 4096, 32, 4096}},
    {"qwen3", Family::Qwen2, {32, 32, 128, 4096, 32, 4096}},
    {"qwen3_moe", Family::Qwen3Moe, {32, 4, {}, 2048, 24, 4096}},
    {"mixtral", Family::Mistral, {32, 8, {}, 4096, 32, {}}},
    {"phi3", Family::Mistral, {32, {}, {}, 3072, 32, {}}},
    {"olmo2", Family::Llama, {32, {}, {}, 4096, 32, {}}},
    {"gemma2", Family::Gemma2, {8, 4, 256, 2304, 26, 4096}},
    {"gemma3_text", Family::Gemma3, {8, 4, 256, 2304, 26, 4096}},
    {"gemma3",
     Family::Gemma3,
     {8, 4, 256, 2304, 26, 4096},
     /*textConfig=*/true},
    {"llama4_text", Family::Llama4, {40, 8, 128, 5120, 48, {}}},
    {"llama4", Family::Llama4, {40, 8, 128, 5120, 48, {}}, /*textConfig=*/true},
    {"gpt_oss", Family::GptOss, {64, 8, 64, 2880, 36, 128}},
    {"deepseek_v2", Family::DeepSeek, {32, 32, {}, 4096, 30, {}}},
    {"deepseek_v3", Family::DeepSeek, {128, 128, {}, 7168, 61, {}}},
    {"kimi_k2", Family::DeepSeek, {128, 128, {}, 7168, 61, {}}},
    {"kimi_linear", Family::KimiLinear, {32, 32, {}, 4096, 32, {}}},
    {"mamba2", Family::Mamba2, {128, {}, 64, 4096, 64, {}}},
    {"nemotron_h", Family::NemotronH, {32, 8, 128, 4096, 52, {}}},
    {"granite", Family::Granite, {32, {}, {}, 4096, 32, {}}},
    {"granitemoe", Family::Granite, {32, {}, {}, 4096, 32, {}}},
    {"granitemoeshared", Family::Granite, {32, {}, {}, 4096, 32, {}}},
    {"granitemoehybrid", Family::GraniteHybrid, {32, {}, {}, 4096, 32, {}}},
    {"bamba", Family::Bamba, {32, 8, {}, 4096, 32, {}}},
    {"falcon_h1", Family::FalconH1, {32, 8, {}, 4096, 32, {}}},
    {"minimax", Family::MiniMax, {32, 8, {}, 4096, 32, {}}},
    {"minimax_m2", Family::Llama, {48, 8, 128, 3072, 62, {}}}};

/// The config object, its JSON path and its class's defaults.
struct Config {
  const json::Object &object;
  std::string path;
  const Defaults &defaults;
};

/// `heads` is a multiple of `groups`, both read from `config`.
void checkGroups(Reader &reader, const Config &config, int64_t heads,
                 llvm::StringRef headsKey, int64_t groups,
                 llvm::StringRef groupsKey) {
  if (reader.failed() || heads % groups == 0)
    return;
  reader.fail(Reader::join(config.path, headsKey),
              llvm::formatv("expected a multiple of {0} ({1}), got {2}",
                            groupsKey, groups, heads)
                  .str());
}

/// The number at `key`, `fallback` when absent or null; an error unless it
/// is > 0.
double positiveNumber(Reader &reader, const json::Object &object,
                      const std::string &path, llvm::StringRef key,
                      double fallback) {
  double x = reader.number(object, path, key).value_or(fallback);
  if (x <= 0.0)
    reader.fail(Reader::join(path, key),
                "expected a number > 0, got " + std::to_string(x));
  return x;
}

/// Whether `key` is set to something other than null.
bool isSet(const Config &config, llvm::StringRef key) {
  const json::Value *value = config.object.get(key);
  return value && value->kind() != json::Value::Null;
}

/// Whether the config has a sliding window: `sliding_window` set, or
/// absent with a default (null turns it off).
bool hasWindow(const Config &config) {
  return isSet(config, "sliding_window") ||
         (!config.object.get("sliding_window") &&
          config.defaults.slidingWindow);
}

/// The layer kinds after an error: every layer full attention.
llvm::StringRef allFullAttention(int64_t) { return kFullAttention; }

/// Llama 4's rule: `no_rope_layers[i]` is 1 for a RoPE layer (chunked
/// attention) and 0 for a NoPE layer (full attention); without the list
/// (or with an empty one), layer i is NoPE when (i + 1) %
/// no_rope_layer_interval == 0.
std::function<llvm::StringRef(int64_t)>
llama4LayerKinds(Reader &reader, const Config &config, int64_t layers) {
  const json::Value *value = config.object.get("no_rope_layers");
  const std::string listPath = Reader::join(config.path, "no_rope_layers");
  const json::Array *list = value && value->kind() != json::Value::Null
                                ? value->getAsArray()
                                : nullptr;
  if (value && value->kind() != json::Value::Null && !list) {
    reader.fail(listPath, "expected an array of 0 and 1 (one per layer), got " +
                              Reader::describe(value));
    return allFullAttention;
  }
  if (list && !list->empty()) {
    if (static_cast<int64_t>(list->size()) < layers) {
      reader.fail(listPath,
                  llvm::formatv("expected one entry per layer ({0}), got {1}",
                                layers, list->size())
                      .str());
      return allFullAttention;
    }
    std::vector<bool> rope;
    for (auto [i, entry] : llvm::enumerate(*list)) {
      std::optional<int64_t> flag = entry.getAsInteger();
      if (!flag || (*flag != 0 && *flag != 1)) {
        reader.fail(llvm::formatv("{0}[{1}]", listPath, i).str(),
                    "expected 0 (NoPE: full attention) or 1 (RoPE: chunked "
                    "attention), got " +
                        Reader::describe(&entry));
        return allFullAttention;
      }
      rope.push_back(*flag == 1);
    }
    return [rope](int64_t i) {
      return rope[i] ? kChunkedAttention : kFullAttention;
    };
  }
  int64_t interval =
      reader.integer(config.object, config.path, "no_rope_layer_interval", 4, 1,
                     limits::kMaxLayers);
  return [interval](int64_t i) {
    return (i + 1) % interval ? kChunkedAttention : kFullAttention;
  };
}

/// Kimi Linear's layers: the 1-based `linear_attn_config.kda_layers` are
/// linear_attention (KDA), the others full_attention (MLA); a config that
/// lists only `full_attn_layers` has KDA everywhere else.
std::function<llvm::StringRef(int64_t)>
kimiLinearLayerKinds(Reader &reader, const Config &config, int64_t layers) {
  const json::Value *linear = config.object.get("linear_attn_config");
  if (!linear || linear->kind() == json::Value::Null)
    return allFullAttention;
  const std::string linearPath =
      Reader::join(config.path, "linear_attn_config");
  const json::Object *object = reader.object(linear, linearPath);
  if (!object)
    return allFullAttention;
  // A list of distinct 1-based layer numbers, as a mask over the layers.
  auto readList = [&](llvm::StringRef key) -> std::optional<std::vector<bool>> {
    const json::Value *value = object->get(key);
    if (!value || value->kind() == json::Value::Null)
      return std::nullopt;
    const std::string listPath = Reader::join(linearPath, key);
    const json::Array *list = value->getAsArray();
    if (!list) {
      reader.fail(listPath, "expected an array of 1-based layer numbers, got " +
                                Reader::describe(value));
      return std::nullopt;
    }
    std::vector<bool> listed(layers, false);
    for (auto [i, entry] : llvm::enumerate(*list)) {
      std::optional<int64_t> number = entry.getAsInteger();
      if (!number || *number < 1 || *number > layers) {
        reader.fail(llvm::formatv("{0}[{1}]", listPath, i).str(),
                    llvm::formatv("expected a layer number in [1, {0}] "
                                  "(num_hidden_layers; 1-based), got {1}",
                                  layers, Reader::describe(&entry))
                        .str());
        return std::nullopt;
      }
      listed[*number - 1] = true;
    }
    return listed;
  };
  std::optional<std::vector<bool>> kda = readList("kda_layers");
  std::optional<std::vector<bool>> full = readList("full_attn_layers");
  if (reader.failed())
    return allFullAttention;
  if (kda && full)
    for (int64_t i = 0; i < layers; ++i)
      if ((*kda)[i] && (*full)[i]) {
        reader.fail(
            Reader::join(linearPath, "kda_layers"),
            llvm::formatv("layer {0} is also in full_attn_layers", i + 1)
                .str());
        return allFullAttention;
      }
  if (!kda && !full) {
    reader.fail(linearPath, "expected 'kda_layers' or 'full_attn_layers'");
    return allFullAttention;
  }
  if (!kda) {
    kda = std::vector<bool>(layers);
    for (int64_t i = 0; i < layers; ++i)
      (*kda)[i] = !(*full)[i];
  }
  return [kda = *kda](int64_t i) {
    return kda[i] ? kLinearAttention : kFullAttention;
  };
}

/// Nemotron-H's layers from `hybrid_override_pattern`, a character per
/// layer: 'M' Mamba2, '*' attention, '-' MLP and 'E' MoE (no attention:
/// the empty kind).
std::function<llvm::StringRef(int64_t)>
nemotronHLayerKinds(Reader &reader, const Config &config, int64_t layers) {
  const std::string pattern = reader.string(
      config.object, config.path, "hybrid_override_pattern",
      std::string("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"));
  const std::string patternPath =
      Reader::join(config.path, "hybrid_override_pattern");
  if (reader.failed())
    return allFullAttention;
  if (static_cast<int64_t>(pattern.size()) != layers) {
    reader.fail(patternPath, llvm::formatv("expected a character per layer "
                                           "(num_hidden_layers = {0}), got {1}",
                                           layers, pattern.size())
                                 .str());
    return allFullAttention;
  }
  for (auto [i, c] : llvm::enumerate(pattern))
    if (!llvm::is_contained(llvm::StringRef("M*-E"), c)) {
      reader.fail(patternPath,
                  llvm::formatv("expected 'M' (Mamba2), '*' (attention), '-' "
                                "(MLP) or 'E' (MoE) for each layer, got '{0}' "
                                "at layer {1}",
                                c, i)
                      .str());
      return allFullAttention;
    }
  return [pattern](int64_t i) -> llvm::StringRef {
    return pattern[i] == 'M'   ? kMamba
           : pattern[i] == '*' ? kFullAttention
                               : llvm::StringRef();
  };
}

/// Bamba's layers: those `attn_layer_indices` lists (0-based) are
/// attention, the others Mamba2 mixers.
std::function<llvm::StringRef(int64_t)>
bambaLayerKinds(Reader &reader, const Config &config, int64_t layers) {
  std::vector<bool> attention(layers);
  const std::string path = Reader::join(config.path, "attn_layer_indices");
  const json::Value *value = config.object.get("attn_layer_indices");
  if (value && value->kind() != json::Value::Null) {
    const json::Array *indices = value->getAsArray();
    if (!indices) {
      reader.fail(path, "expected an array of layer indices, got " +
                            Reader::describe(value));
      return allFullAttention;
    }
    for (auto [i, index] : llvm::enumerate(*indices)) {
      std::optional<int64_t> layer = index.getAsInteger();
      if (!layer || *layer < 0 || *layer >= layers) {
        reader.fail(llvm::formatv("{0}[{1}]", path, i).str(),
                    llvm::formatv("expected a layer index in [0, {0}) "
                                  "(num_hidden_layers = {0}), got {1}",
                                  layers, Reader::describe(&index))
                        .str());
        return allFullAttention;
      }
      attention[*layer] = true;
    }
  }
  return
      [attention](int64_t i) { return attention[i] ? kFullAttention : kMamba; };
}

/// The family's rule for the kind of layer i of `layers`, for configs
/// without `layer_types`, with its keys read once (transformers' defaults
/// where a key is absent). After an error, every layer is full attention.
std::function<llvm::StringRef(int64_t)> defaultLayerKinds(Reader &reader,
                                                          const Config &config,
                                                          Family family,
                                                          int64_t layers) {
  const json::Object &object = config.object;
  const std::string &path = config.path;
  switch (family) {
  case Family::Qwen3Next: {
    // transformers: layer i is full attention when (i + 1) % interval == 0.
    int64_t interval = reader.integer(
        object, path, "full_attention_interval",
        config.defaults.linear.fullAttentionInterval, 1, limits::kMaxLayers);
    if (reader.failed())
      break;
    return [interval](int64_t i) {
      return (i + 1) % interval == 0 ? kFullAttention : kLinearAttention;
    };
  }
  case Family::Llama:
  case Family::DeepSeek:
  case Family::Granite:
  case Family::FalconH1:
    break;
  case Family::Mistral: {
    llvm::StringRef kind =
        hasWindow(config) ? kSlidingAttention : kFullAttention;
    return [kind](int64_t) { return kind; };
  }
  case Family::Qwen3Moe: {
    // transformers keeps sliding_window only with use_sliding_window, and
    // then every layer slides.
    llvm::StringRef kind =
        reader.boolean(object, path, "use_sliding_window", false) &&
                hasWindow(config)
            ? kSlidingAttention
            : kFullAttention;
    return [kind](int64_t) { return kind; };
  }
  case Family::Qwen2: {
    bool sliding = reader.boolean(object, path, "use_sliding_window", false) &&
                   hasWindow(config);
    int64_t first = reader.integer(object, path, "max_window_layers", 28, 0,
                                   limits::kMaxLayers);
    return [sliding, first](int64_t i) {
      return sliding && i >= first ? kSlidingAttention : kFullAttention;
    };
  }
  case Family::Gemma2:
  case Family::GptOss:
    return [](int64_t i) {
      return (i + 1) % 2 ? kSlidingAttention : kFullAttention;
    };
  case Family::Gemma3: {
    int64_t pattern = reader.integer(object, path, "sliding_window_pattern", 6,
                                     1, limits::kMaxLayers);
    if (reader.failed())
      break;
    return [pattern](int64_t i) {
      return (i + 1) % pattern ? kSlidingAttention : kFullAttention;
    };
  }
  case Family::Llama4:
    return llama4LayerKinds(reader, config, layers);
  case Family::KimiLinear:
    return kimiLinearLayerKinds(reader, config, layers);
  case Family::Mamba2:
  case Family::GraniteHybrid:
    return [](int64_t) { return kMamba; };
  case Family::NemotronH:
    return nemotronHLayerKinds(reader, config, layers);
  case Family::Bamba:
    return bambaLayerKinds(reader, config, layers);
  case Family::MiniMax:
    // transformers: layer i is full attention when (i + 1) % 2 == 1.
    return [](int64_t i) {
      return (i + 1) % 2 ? kFullAttention : kLinearAttention;
    };
  }
  return allFullAttention;
}

/// A name `layer_types` may give a layer, and the kind it is.
struct LayerTypeName {
  llvm::StringRef name, kind;
};

/// The names the family's `layer_types` may hold.
std::vector<LayerTypeName> layerTypeNames(Family family) {
  const LayerTypeName full{kFullAttention, kFullAttention};
  switch (family) {
  case Family::Qwen3Next:
  case Family::KimiLinear:
  case Family::MiniMax:
    return {full, {kLinearAttention, kLinearAttention}};
  case Family::Llama4:
    return {full, {kChunkedAttention, kChunkedAttention}};
  case Family::Llama:
  case Family::Mistral:
  case Family::Qwen2:
  case Family::Qwen3Moe:
  case Family::Gemma2:
  case Family::Gemma3:
  case Family::GptOss:
    return {full, {kSlidingAttention, kSlidingAttention}};
  case Family::DeepSeek:
  case Family::Granite:
  case Family::FalconH1:
    return {full};
  case Family::Mamba2:
    return {{kMamba, kMamba}};
  case Family::NemotronH:
    return {full, {kMamba, kMamba}};
  // Their configs' names, as transformers saved them before and after it
  // renamed them; the kinds are full_attention and mamba as in every
  // other family.
  case Family::GraniteHybrid:
  case Family::Bamba:
    return {{"attention", kFullAttention},
            {kMamba, kMamba},
            full,
            {kLinearAttention, kMamba}};
  }
  return {full};
}

/// The layer kinds in order of first appearance.
std::vector<std::string> readLayerKinds(Reader &reader, const Config &config,
                                        Family family) {
  std::vector<std::string> kinds;
  // transformers masks MiniMax's full_attention layers with the config's
  // sliding window when it sets one: they are sliding_attention here.
  const bool miniMaxSlides = family == Family::MiniMax && hasWindow(config);
  auto addKind = [&](llvm::StringRef kind) {
    if (miniMaxSlides && kind == kFullAttention)
      kind = kSlidingAttention;
    if (!kind.empty() && !llvm::is_contained(kinds, kind))
      kinds.push_back(kind.str());
  };
  // Falcon-H1's every layer runs a Mamba2 mixer and attention side by side.
  if (family == Family::FalconH1)
    return {kMamba.str(), kFullAttention.str()};
  const std::vector<LayerTypeName> names = layerTypeNames(family);
  std::string expected;
  for (auto [i, n] : llvm::enumerate(names))
    expected += llvm::formatv("{0}\"{1}\"",
                              i == 0                  ? ""
                              : i + 1 == names.size() ? " or "
                                                      : ", ",
                              n.name)
                    .str();
  const std::string typesPath = Reader::join(config.path, "layer_types");
  if (const json::Value *types = config.object.get("layer_types")) {
    const json::Array *array = types->getAsArray();
    if (array && static_cast<int64_t>(array->size()) > limits::kMaxLayers) {
      reader.fail(typesPath,
                  llvm::formatv("{0} layers; attn compiles at most {1}",
                                array->size(), limits::kMaxLayers)
                      .str());
      return kinds;
    }
    if (!array || array->empty()) {
      reader.fail(typesPath, "expected a non-empty array of " + expected +
                                 ", got " + Reader::describe(types));
      return kinds;
    }
    for (auto [i, type] : llvm::enumerate(*array)) {
      std::optional<llvm::StringRef> name = type.getAsString();
      auto known = llvm::find_if(names, [&](const LayerTypeName &n) {
        return name && n.name == *name;
      });
      if (known == names.end()) {
        reader.fail(llvm::formatv("{0}[{1}]", typesPath, i).str(),
                    "expected " + expected + ", got " +
                        Reader::describe(&type));
        return kinds;
      }
      addKind(known->kind);
    }
    return kinds;
  }
  // Without layer_types, Llama, Mistral, Qwen3's MoE, DeepSeek, Granite
  // (and Granite's hybrid) and Mamba2 have one kind whatever the count; the
  // others' kinds follow the layer index.
  int64_t layers =
      family == Family::Llama || family == Family::Mistral ||
              family == Family::Qwen3Moe || family == Family::DeepSeek ||
              family == Family::Mamba2 || family == Family::Granite ||
              family == Family::GraniteHybrid
          ? 1
          : reader.integer(config.object, config.path, "num_hidden_layers",
                           config.defaults.layers, 1, limits::kMaxLayers);
  if (reader.failed())
    return kinds;
  std::function<llvm::StringRef(int64_t)> kindOf =
      defaultLayerKinds(reader, config, family, layers);
  for (int64_t i = 0; i < layers && !reader.failed(); ++i)
    addKind(kindOf(i));
  return kinds;
}

/// The head dim of `heads` attention heads: `head_dim` (Nemotron-H's
/// `attention_head_dim`), else the class's default, else transformers'
/// hidden_size / num_attention_heads.
int64_t readHeadDim(Reader &reader, const Config &config, Family family,
                    int64_t heads) {
  const json::Object &object = config.object;
  const std::string &path = config.path;
  const Defaults &defaults = config.defaults;
  // transformers' default head_dim is hidden_size / num_attention_heads.
  // Nemotron-H names it attention_head_dim (its Mamba layers have theirs).
  const llvm::StringRef headDimKey =
      family == Family::NemotronH ? "attention_head_dim" : "head_dim";
  std::optional<int64_t> headDim = defaults.headDim;
  if (!isSet(config, headDimKey) && !headDim && !reader.failed()) {
    int64_t hidden =
        reader.integer(object, path, "hidden_size", defaults.hiddenSize, 1,
                       limits::kMaxHeads * limits::kMaxFeatureDim);
    headDim = hidden / heads;
    if (!reader.failed() && (*headDim < 1 || *headDim > limits::kMaxFeatureDim))
      reader.fail(Reader::join(path, "hidden_size"),
                  llvm::formatv("without head_dim, the head dim is "
                                "hidden_size / num_attention_heads = {0} / {1} "
                                "= {2}; expected 1 to {3} (give head_dim)",
                                hidden, heads, *headDim, limits::kMaxFeatureDim)
                      .str());
  }
  return isSet(config, headDimKey)
             ? reader.integer(object, path, headDimKey, {}, 1,
                              limits::kMaxFeatureDim)
             : headDim.value_or(0);
}

/// A softmax attention kind: `full_attention` or `sliding_attention`.
AttentionLayer readSoftmaxAttention(Reader &reader, const Config &config,
                                    Family family, llvm::StringRef kind) {
  const json::Object &object = config.object;
  const std::string &path = config.path;
  AttentionLayer layer;
  layer.name = kind.str();
  const Defaults &defaults = config.defaults;
  layer.numHeads = reader.integer(object, path, "num_attention_heads",
                                  defaults.numHeads, 1, limits::kMaxHeads);
  layer.numKvHeads = isSet(config, "num_key_value_heads")
                         ? reader.integer(object, path, "num_key_value_heads",
                                          {}, 1, limits::kMaxHeads)
                         : defaults.numKvHeads.value_or(layer.numHeads);
  layer.headDim = readHeadDim(reader, config, family, layer.numHeads);
  layer.valueDim = layer.headDim;
  layer.mask = MaskKind::Causal;
  if (kind == kSlidingAttention) {
    if (!hasWindow(config))
      reader.fail(Reader::join(path, "sliding_window"),
                  "a sliding_attention layer needs a window: expected a "
                  "positive integer, got " +
                      Reader::describe(object.get("sliding_window")));
    layer.mask = MaskKind::SlidingWindow;
    layer.window =
        reader.integer(object, path, "sliding_window", defaults.slidingWindow,
                       1, limits::kMaxTokens);
  }
  if (kind == kChunkedAttention) {
    layer.mask = MaskKind::Chunked;
    layer.window = reader.integer(object, path, "attention_chunk_size", 8192, 1,
                                  limits::kMaxTokens);
  }
  if (family == Family::Qwen3Next)
    layer.gate = GateKind::Elementwise;
  layer.sinks = family == Family::GptOss;
  if (family == Family::Granite || family == Family::GraniteHybrid) {
    // Granite's scores are scaled by attention_multiplier (its config
    // class's default 1.0), not head_dim^-1/2.
    layer.scale =
        positiveNumber(reader, object, path, "attention_multiplier", 1.0);
  }
  if (family == Family::Gemma2 || family == Family::Gemma3) {
    // Scores are scaled by query_pre_attn_scalar^-1/2 (transformers'
    // default 256) and, where attn_logit_softcapping is set (Gemma 2's
    // default 50), capped.
    double scalar =
        positiveNumber(reader, object, path, "query_pre_attn_scalar", 256.0);
    if (scalar > 0.0)
      layer.scale = 1.0 / std::sqrt(scalar);
    std::optional<double> softcap =
        object.get("attn_logit_softcapping")
            ? reader.number(object, path, "attn_logit_softcapping")
        : family == Family::Gemma2 ? std::optional<double>(50.0)
                                   : std::nullopt;
    if (softcap && *softcap <= 0.0)
      reader.fail(Reader::join(path, "attn_logit_softcapping"),
                  "expected a number > 0 or null, got " +
                      std::to_string(*softcap));
    layer.softcap = softcap.value_or(0.0);
  }
  checkGroups(reader, config, layer.numHeads, "num_attention_heads",
              layer.numKvHeads, "num_key_value_heads");
  return layer;
}

/// DeepSeek's score scale: qk_head_dim^-1/2, times mscale^2 when
/// `rope_scaling` (transformers 5: `rope_parameters`) sets a nonzero
/// `mscale_all_dim`, with YaRN's mscale = 0.1 mscale_all_dim ln(factor) + 1
/// (1 for factor <= 1), as transformers' DeepseekV3Attention computes it.
double deepSeekScale(Reader &reader, const Config &config, int64_t qkHeadDim) {
  double scale = 1.0 / std::sqrt(static_cast<double>(qkHeadDim));
  llvm::StringRef key =
      isSet(config, "rope_scaling") ? "rope_scaling" : "rope_parameters";
  if (!isSet(config, key))
    return scale;
  const std::string path = Reader::join(config.path, key);
  const json::Object *rope = reader.object(config.object.get(key), path);
  if (!rope)
    return scale;
  std::optional<double> mscaleAllDim =
      reader.number(*rope, path, "mscale_all_dim");
  if (!mscaleAllDim || *mscaleAllDim == 0.0)
    return scale;
  std::optional<double> factor = reader.number(*rope, path, "factor");
  if (!factor) {
    reader.fail(Reader::join(path, "factor"),
                "expected a number (the YaRN factor that mscale_all_dim "
                "scales), got " +
                    Reader::describe(rope->get("factor")));
    return scale;
  }
  double mscale =
      *factor <= 1.0 ? 1.0 : 0.1 * *mscaleAllDim * std::log(*factor) + 1.0;
  return scale * mscale * mscale;
}

/// DeepSeek's multi-head latent attention: `full_attention` with the keys
/// and values expanded per head, and `latent_attention`, the absorbed form
/// over the compressed cache (see the file comment).
std::vector<AttentionLayer> readLatentAttention(Reader &reader,
                                                const Config &config) {
  const json::Object &object = config.object;
  const std::string &path = config.path;
  // Kimi's MLA output gate (sigmoid(g) on each head's values) has no place
  // in the latent form, whose output is still in the latent space.
  if (reader.boolean(object, path, "mla_use_output_gate", false))
    reader.fail(Reader::join(path, "mla_use_output_gate"),
                "MLA with an output gate is not supported");
  auto feature = [&](llvm::StringRef key, int64_t fallback) {
    return reader.integer(object, path, key, fallback, 1,
                          limits::kMaxFeatureDim);
  };
  // transformers' defaults (both classes).
  const int64_t nope = feature("qk_nope_head_dim", 128);
  const int64_t rope = feature("qk_rope_head_dim", 64);
  const int64_t valueDim = feature("v_head_dim", 128);
  const int64_t rank = feature("kv_lora_rank", 512);
  AttentionLayer full;
  full.name = kFullAttention.str();
  full.numHeads =
      reader.integer(object, path, "num_attention_heads",
                     config.defaults.numHeads, 1, limits::kMaxHeads);
  full.numKvHeads = full.numHeads;
  full.headDim = nope + rope;
  full.valueDim = valueDim;
  full.mask = MaskKind::Causal;
  AttentionLayer latent = full;
  latent.name = "latent_attention";
  latent.numKvHeads = 1;
  latent.headDim = rank + rope;
  latent.valueDim = rank;
  latent.latentKv = true;
  for (auto [dim, what] :
       {std::pair{full.headDim, "qk_nope_head_dim + qk_rope_head_dim"},
        std::pair{latent.headDim, "kv_lora_rank + qk_rope_head_dim"}})
    if (!reader.failed() && dim > limits::kMaxFeatureDim)
      reader.fail(Reader::join(path, "qk_rope_head_dim"),
                  llvm::formatv("{0} = {1}; attn's head dims go to {2}", what,
                                dim, limits::kMaxFeatureDim)
                      .str());
  if (reader.failed())
    return {};
  full.scale = latent.scale = deepSeekScale(reader, config, full.headDim);
  return {full, latent};
}

/// The linear layers' output-gate epsilon, `rms_norm_eps` (1e-6 if absent).
double readGateEps(Reader &reader, const Config &config) {
  return positiveNumber(reader, config.object, config.path, "rms_norm_eps",
                        1e-6);
}

/// Kimi Linear's KDA layer (see the file comment).
LinearAttentionLayer readKimiDeltaAttention(Reader &reader,
                                            const Config &config) {
  const std::string path = Reader::join(config.path, "linear_attn_config");
  LinearAttentionLayer layer;
  layer.name = kLinearAttention.str();
  layer.rule = Rule::Kda;
  const json::Object *linear =
      reader.object(config.object.get("linear_attn_config"), path);
  if (!linear)
    return layer;
  const json::Object &object = *linear;
  layer.numKHeads = layer.numVHeads =
      reader.integer(object, path, "num_heads", {}, 1, limits::kMaxHeads);
  layer.kDim = layer.vDim =
      reader.integer(object, path, "head_dim", {}, 1, limits::kMaxFeatureDim);
  layer.chunkSize = 64;
  layer.qkL2Norm = true;
  layer.outputGate = OutputGate::RmsNormSigmoid;
  layer.gateEps = readGateEps(reader, config);
  return layer;
}

/// The keys a config class gives its Mamba2 mixers, and the class's
/// defaults.
struct MambaKeys {
  llvm::StringRef heads, groups, stateSize, headDim;
  int64_t defaultGroups, defaultStateSize;
  /// The head dim's default where the class has one; else it may be
  /// "auto" (and is by default): the mixer's width over its heads.
  std::optional<int64_t> defaultHeadDim;
};

MambaKeys mambaKeys(const Config &config, Family family) {
  switch (family) {
  case Family::NemotronH:
    // NemotronHConfig takes mamba_n_groups and stores n_groups, which its
    // saved configs carry.
    return {"mamba_num_heads",
            !isSet(config, "n_groups") && isSet(config, "mamba_n_groups")
                ? "mamba_n_groups"
                : "n_groups",
            "ssm_state_size",
            "mamba_head_dim",
            8,
            128,
            64};
  case Family::GraniteHybrid:
  case Family::Bamba:
  case Family::FalconH1:
    return {"mamba_n_heads",
            "mamba_n_groups",
            "mamba_d_state",
            "mamba_d_head",
            1,
            256,
            std::nullopt};
  default:
    return {"num_heads", "n_groups", "state_size", "head_dim", 8, 128, 64};
  }
}

/// The Mamba2 mixer's width (its intermediate size): mamba_expand (2) times
/// hidden_size, or Falcon-H1's mamba_d_ssm (1024 if absent; null: the
/// former).
int64_t mambaWidth(Reader &reader, const Config &config, Family family) {
  const json::Object &object = config.object;
  if (family == Family::FalconH1 && !config.object.get("mamba_d_ssm"))
    return 1024;
  if (family == Family::FalconH1 && isSet(config, "mamba_d_ssm"))
    return reader.integer(object, config.path, "mamba_d_ssm", {}, 1,
                          limits::kMaxHeads * limits::kMaxFeatureDim);
  int64_t expand = reader.integer(object, config.path, "mamba_expand", 2, 1,
                                  limits::kMaxFeatureDim);
  int64_t hidden = reader.integer(object, config.path, "hidden_size",
                                  config.defaults.hiddenSize, 1,
                                  limits::kMaxHeads * limits::kMaxFeatureDim);
  return expand * hidden;
}

/// The mixer's head dim: its key's integer, or "auto" (the default where
/// the class has no other): the width over the heads, which must divide it.
int64_t mambaHeadDim(Reader &reader, const Config &config, Family family,
                     const MambaKeys &keys, int64_t heads) {
  const json::Value *value = config.object.get(keys.headDim);
  const bool automatic =
      value ? value->getAsString() == "auto" : !keys.defaultHeadDim.has_value();
  if (!automatic)
    return reader.integer(config.object, config.path, keys.headDim,
                          keys.defaultHeadDim, 1, limits::kMaxFeatureDim);
  int64_t width = mambaWidth(reader, config, family);
  if (reader.failed())
    return 0;
  if (width % heads != 0 || width / heads > limits::kMaxFeatureDim) {
    reader.fail(Reader::join(config.path, keys.headDim),
                llvm::formatv("\"auto\" is the mixer's width over {0}: {1} / "
                              "{2}; expected a whole head dim of 1 to {3}",
                              keys.heads, width, heads, limits::kMaxFeatureDim)
                    .str());
    return 0;
  }
  return width / heads;
}

/// The end of a Mamba2 mixer (see the file comment): the skip D x and the
/// gated RMSNorm over its SSD groups, or Falcon-H1's gate without the norm.
void readMambaNorm(Reader &reader, const Config &config, Family family,
                   LinearAttentionLayer &layer) {
  const json::Object &object = config.object;
  const std::string &path = config.path;
  bool normBeforeGate = false;
  llvm::StringRef epsilonKey = "rms_norm_eps";
  double defaultEpsilon = 1e-5;
  switch (family) {
  case Family::Mamba2:
    normBeforeGate = reader.boolean(object, path, "norm_before_gate", false);
    [[fallthrough]];
  case Family::NemotronH:
    epsilonKey = "layer_norm_epsilon";
    break;
  case Family::GraniteHybrid:
    defaultEpsilon = 1e-6;
    break;
  case Family::FalconH1:
    layer.skip = true;
    // Without its norm (the released checkpoints), the mixer gates y + D x
    // by silu(z) alone.
    if (!reader.boolean(object, path, "mamba_rms_norm", false)) {
      layer.outputGate = OutputGate::Silu;
      return;
    }
    normBeforeGate =
        reader.boolean(object, path, "mamba_norm_before_gate", true);
    break;
  default:
    break;
  }
  layer.outputGate = OutputGate::RmsNormSilu;
  layer.gateEps =
      positiveNumber(reader, object, path, epsilonKey, defaultEpsilon);
  layer.gateGroups = layer.numKHeads;
  layer.normBeforeGate = normBeforeGate;
  layer.skip = true;
}

/// Mamba2's SSD as the decay rule (see the file comment), with the
/// config class's keys and defaults.
LinearAttentionLayer readMamba2(Reader &reader, const Config &config,
                                Family family) {
  const json::Object &object = config.object;
  const std::string &path = config.path;
  const MambaKeys keys = mambaKeys(config, family);
  LinearAttentionLayer layer;
  layer.name = kMamba.str();
  layer.rule = Rule::Decay;
  layer.numVHeads =
      reader.integer(object, path, keys.heads, 128, 1, limits::kMaxHeads);
  layer.numKHeads = reader.integer(object, path, keys.groups,
                                   keys.defaultGroups, 1, limits::kMaxHeads);
  layer.kDim = reader.integer(object, path, keys.stateSize,
                              keys.defaultStateSize, 1, limits::kMaxFeatureDim);
  layer.vDim = mambaHeadDim(reader, config, family, keys, layer.numVHeads);
  layer.chunkSize = 64;
  layer.scale = 1.0;
  checkGroups(reader, config, layer.numVHeads, keys.heads, layer.numKHeads,
              keys.groups);
  readMambaNorm(reader, config, family, layer);
  return layer;
}

LinearAttentionLayer readLinearAttention(Reader &reader, const Config &config) {
  const json::Object &object = config.object;
  const std::string &path = config.path;
  LinearAttentionLayer layer;
  layer.name = kLinearAttention.str();
  layer.rule = Rule::GatedDelta;
  const auto &defaults = config.defaults.linear;
  layer.numKHeads = reader.integer(object, path, "linear_num_key_heads",
                                   defaults.keyHeads, 1, limits::kMaxHeads);
  layer.numVHeads = reader.integer(object, path, "linear_num_value_heads",
                                   defaults.valueHeads, 1, limits::kMaxHeads);
  layer.kDim = reader.integer(object, path, "linear_key_head_dim",
                              defaults.keyDim, 1, limits::kMaxFeatureDim);
  layer.vDim = reader.integer(object, path, "linear_value_head_dim",
                              defaults.valueDim, 1, limits::kMaxFeatureDim);
  layer.chunkSize = 64;
  layer.qkL2Norm = true;
  layer.outputGate = OutputGate::RmsNormSilu;
  layer.gateEps = readGateEps(reader, config);
  checkGroups(reader, config, layer.numVHeads, "linear_num_value_heads",
              layer.numKHeads, "linear_num_key_heads");
  return layer;
}

/// MiniMax's lightning attention (MiniMaxLightningAttention):
/// `num_attention_heads` heads of q, k and v alike, of the softmax layers'
/// head dim, whose state decays by a constant per head and layer: the decay
/// rule with g = -slope_rate (the caller fills g: the slope depends on the
/// layer), unscaled scores, and no norm of q, k; transformers' `block_size`
/// is its tiling, not the math. The RMSNorm over all heads and the sigmoid
/// gate that follow stay with the caller, as projections do.
LinearAttentionLayer readLightningAttention(Reader &reader,
                                            const Config &config) {
  LinearAttentionLayer layer;
  layer.name = kLinearAttention.str();
  layer.rule = Rule::Decay;
  layer.numVHeads =
      reader.integer(config.object, config.path, "num_attention_heads",
                     config.defaults.numHeads, 1, limits::kMaxHeads);
  layer.numKHeads = layer.numVHeads;
  layer.kDim = reader.failed() ? 0
                               : readHeadDim(reader, config, Family::MiniMax,
                                             layer.numVHeads);
  layer.vDim = layer.kDim;
  layer.chunkSize = 64;
  layer.scale = 1.0;
  return layer;
}

/// `text` with Python's words for float('inf') and float('nan') outside
/// strings (Infinity, -Infinity, NaN: Python's json writes them, and saved
/// configs carry them, e.g. a time-step limit), which strict JSON refuses,
/// as null, padded to their length so that columns stay: no key attn reads
/// has a use for them, and one that is null takes its default.
std::string withoutPythonConstants(llvm::StringRef text) {
  std::string out;
  out.reserve(text.size());
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size())
        out.push_back(text[++i]);
      else if (c == '"')
        inString = false;
      continue;
    }
    inString = c == '"';
    static constexpr llvm::StringLiteral kWords[] = {"-Infinity", "Infinity",
                                                     "NaN"};
    llvm::StringRef rest = text.substr(i);
    const llvm::StringLiteral *word = llvm::find_if(
        kWords, [&](llvm::StringRef w) { return rest.starts_with(w); });
    if (word == std::end(kWords)) {
      out.push_back(c);
      continue;
    }
    out += "null";
    out.append(word->size() > 4 ? word->size() - 4 : 0, ' ');
    i += word->size() - 1;
  }
  return out;
}

} // namespace

llvm::ArrayRef<llvm::StringRef>
mlir::attn::frontend::supportedHuggingFaceModelTypes() {
  static const std::vector<llvm::StringRef> types = [] {
    std::vector<llvm::StringRef> names;
    for (const ModelType &type : kModelTypes)
      names.push_back(type.name);
    return names;
  }();
  return types;
}

llvm::Expected<ModelDescription>
mlir::attn::frontend::parseHuggingFaceConfig(llvm::StringRef text) {
  llvm::Expected<json::Value> parsed = parseJson(withoutPythonConstants(text));
  if (!parsed)
    return parsed.takeError();
  Reader reader;
  const json::Object *root = reader.object(&*parsed, "$");
  if (!root)
    return reader.takeError();
  std::string modelType = reader.string(*root, "$", "model_type", {});
  const ModelType *type = llvm::find_if(
      kModelTypes, [&](const ModelType &t) { return t.name == modelType; });
  if (!reader.failed() && type == std::end(kModelTypes))
    reader.fail("$.model_type",
                "unsupported Hugging Face model type \"" + modelType +
                    "\"; supported: " +
                    llvm::join(supportedHuggingFaceModelTypes(), ", "));
  if (reader.failed())
    return reader.takeError();
  // Multimodal configs (Gemma 3's, Llama 4's, Qwen3.5's) keep the language
  // model's in text_config.
  const json::Object *object = root;
  std::string path = "$";
  if (type->textConfig) {
    path = "$.text_config";
    object = reader.object(root->get("text_config"), path);
    if (!object)
      return reader.takeError();
  }
  Config config{*object, path, type->defaults};

  ModelDescription model;
  model.model = modelType;
  model.dtype = ElementType::F32;
  const bool speculative = root->get("speculative") != nullptr;
  for (const std::string &kind : readLayerKinds(reader, config, type->family)) {
    if (kind == kMamba) {
      LinearAttentionLayer layer = readMamba2(reader, config, type->family);
      layer.tree = speculative;
      model.layers.push_back(layer);
    } else if (kind == kLinearAttention) {
      LinearAttentionLayer layer = type->family == Family::KimiLinear
                                       ? readKimiDeltaAttention(reader, config)
                                   : type->family == Family::MiniMax
                                       ? readLightningAttention(reader, config)
                                       : readLinearAttention(reader, config);
      layer.tree = speculative;
      model.layers.push_back(layer);
    } else if (type->family == Family::DeepSeek ||
               type->family == Family::KimiLinear) {
      for (AttentionLayer &layer : readLatentAttention(reader, config)) {
        layer.tree = speculative;
        model.layers.push_back(layer);
      }
    } else {
      AttentionLayer layer =
          readSoftmaxAttention(reader, config, type->family, kind);
      layer.tree = speculative;
      model.layers.push_back(layer);
    }
  }
  readSpeculative(reader, *root, model);
  if (reader.failed())
    return reader.takeError();
  return model;
}

llvm::Expected<ModelDescription>
mlir::attn::frontend::parseModelInput(llvm::StringRef text) {
  // A model description stays strict JSON: only a config's words for
  // float('inf') and float('nan') become null.
  llvm::Expected<json::Value> parsed = parseJson(withoutPythonConstants(text));
  if (!parsed)
    return parsed.takeError();
  const json::Object *root = parsed->getAsObject();
  if (root && root->get("model_type"))
    return parseHuggingFaceConfig(text);
  return parseModelDescription(text);
}
