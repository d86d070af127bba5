//===- ModelDescription.h - SPEC §3 model descriptions ----------*- C++ -*-===//
//
// The in-memory form of a model description (SPEC §3) and its strict JSON
// reader: every unknown key and bad value is an error naming its JSON path
// ("$.layers[1].num_kv_heads") and what was expected.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_FRONTEND_MODELDESCRIPTION_H
#define ATTN_FRONTEND_MODELDESCRIPTION_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace mlir::attn::frontend {

enum class ElementType { F32, F16, BF16 };
enum class MaskKind { None, Causal, SlidingWindow, Chunked };
enum class GateKind { None, Elementwise, Headwise };
enum class SparsityMethod { TopK, TopP };
enum class Estimator { Exact, Int4 };
enum class Rule { Linear, Decay, Gla, Delta, GatedDelta, Kda };
/// A linear layer's output gate: (o / rms(o)) * w * act(z), act silu
/// (Qwen3-Next, Mamba2) or sigmoid (Kimi Linear).
/// A linear layer's output gate: SPEC §2's rmsnorm gate (z activated by
/// silu, or by sigmoid as Kimi Linear's), or beyond SPEC a gate without the
/// norm, o act(z) (Falcon-H1's mixer without `mamba_rms_norm`).
enum class OutputGate { None, RmsNormSilu, RmsNormSigmoid, Silu, Sigmoid };

/// Whether the gate normalizes (and so takes a weight w).
inline bool normalizes(OutputGate gate) {
  return gate == OutputGate::RmsNormSilu || gate == OutputGate::RmsNormSigmoid;
}
/// The variants of SPEC §7, built as score_mod / mask_mod regions: a named
/// one, or `Func`, the user's own function given as attn IR.
enum class ScoreMod { None, Alibi, RelativeBias, Func };
enum class MaskMod { None, Document, PrefixLm, Func };

/// A `{"func": "..."}` variant: the text of one `func.func` whose body
/// becomes the region (SPEC §7's block arguments first, then the tensors it
/// reads, each an extra input named by its `attn.name`), and the JSON path
/// of that text, which the frontend's errors name.
struct VariantFunc {
  std::string text;
  std::string path;
};

struct Sparsity {
  SparsityMethod method = SparsityMethod::TopK;
  int64_t blockSize = 0;
  std::optional<int64_t> topK; ///< required for top_k, optional for top_p
  double topP = 1.0;           ///< top_p only
  int64_t minTokens = 0;       ///< top_p only
  std::optional<int64_t> maxTokens;
  int64_t sinkBlocks = 0;
  int64_t localBlocks = 0;
  Estimator estimator = Estimator::Exact;
};

struct AttentionLayer {
  std::string name;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0; ///< defaults to numHeads
  int64_t headDim = 0;
  int64_t valueDim = 0; ///< defaults to headDim
  MaskKind mask = MaskKind::Causal;
  int64_t window = 0; ///< sliding_window's W, or chunked's chunk size
  GateKind gate = GateKind::None;
  double softcap = 0.0;
  std::optional<double> scale; ///< null: 1/sqrt(head_dim)
  std::optional<Sparsity> sparsity;
  bool tree = false;
  ScoreMod scoreMod = ScoreMod::None;
  int64_t relativeBiasRadius = 0; ///< R of {"relative_bias": R}
  VariantFunc scoreModFunc;       ///< ScoreMod::Func only
  MaskMod maskMod = MaskMod::None;
  VariantFunc maskModFunc; ///< MaskMod::Func only
  /// SPEC §8 `"layout": {"page_size": P}`: keys and values in a paged
  /// cache of pages of P keys; 0 for [B, Hkv, Lk, F].
  int64_t pageSize = 0;
  /// SPEC §8 `"layout": {"ragged": true}`: the main entry takes a ragged
  /// batch packed token-major, q [T, H, D] with cu_seqlens_q (and packed
  /// keys with cu_seqlens_k unless paged).
  bool ragged = false;
  /// SPEC §9: the entries <layer> and <layer>.tree also return lse [B, H, Lq]
  /// (the log-sum-exp of each row's scores), for merging partial results.
  bool returnLse = false;
  /// `"sinks": true`: each query head has an attention sink, a learned logit
  /// in its softmax denominator (gpt-oss); the entries take `sinks [H]`.
  bool sinks = false;
  /// `"latent_kv": true`: one cache serves as keys and values, the values
  /// being each key's first value_dim features (DeepSeek's multi-head
  /// latent attention in its absorbed form: a 512-feature latent plus 64
  /// rotary features per key, one kv head). The entries take `kv` (or
  /// `kv_cache`) where others take k and v.
  bool latentKv = false;
};

struct LinearAttentionLayer {
  std::string name;
  Rule rule = Rule::GatedDelta;
  int64_t numKHeads = 0;
  int64_t numVHeads = 0; ///< defaults to numKHeads
  int64_t kDim = 0;
  int64_t vDim = 0; ///< defaults to kDim
  int64_t chunkSize = 64;
  bool qkL2Norm = false;
  OutputGate outputGate = OutputGate::None;
  std::optional<double> scale; ///< null: 1/sqrt(k_dim)
  double gateEps = 1e-6;
  /// Mamba2's gated RMSNorm (beyond SPEC): `"gate_groups": N` normalizes N
  /// groups of a token's num_v_heads * v_dim features (whole heads or part
  /// of one) and takes a weight per feature of the token, w [num_v_heads *
  /// v_dim]; absent, the gate is per head with w [v_dim].
  std::optional<int64_t> gateGroups;
  /// `"norm_before_gate": false`: the norm is of o act(z) (Mamba2's order).
  bool normBeforeGate = true;
  /// `"skip": true`: Mamba2's skip D x, added to o before the gate; the
  /// entries take x (shaped as o) and D [num_v_heads] after their other
  /// inputs.
  bool skip = false;
  /// SPEC §10: the layer also verifies draft trees (its .tree entry).
  bool tree = false;
  /// SPEC §8 `"layout": {"ragged": true}`: the main entry takes a ragged
  /// batch packed token-major with `cu_seqlens` and a state pool updated
  /// in place.
  bool ragged = false;
};

using Layer = std::variant<AttentionLayer, LinearAttentionLayer>;

struct ModelDescription {
  std::string model;
  ElementType dtype = ElementType::F32;
  std::vector<Layer> layers;
  /// Present when the model verifies draft trees (`verify.accept`).
  std::optional<int64_t> maxTreeNodes;
};

/// Reads a version-1 model description (SPEC §3). The error names the JSON
/// path of the first offending key or value and what was expected.
llvm::Expected<ModelDescription> parseModelDescription(llvm::StringRef json);

} // namespace mlir::attn::frontend

#endif // ATTN_FRONTEND_MODELDESCRIPTION_H
