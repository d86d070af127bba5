//===- Reference.h - Float64 step-by-step reference of SPEC §1-2 -*- C++
//-*-===//
//
// The definition every numeric test compares compiled code against: each
// computation of SPEC §1-2 written the most direct way, in double precision,
// one query row / one time step at a time, with no tiling, chunking or
// online softmax. Clarity over speed: these loops are the spec in code.
//
// Tensors are row-major [B, H, L, D] as in the spec.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEST_REFERENCE_REFERENCE_H
#define ATTN_TEST_REFERENCE_REFERENCE_H

#include <cassert>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace attn::ref {

/// A dense row-major array with its shape.
template <typename T> class Array {
public:
  Array() = default;
  explicit Array(std::vector<int64_t> shape, T fill = T())
      : shape_(std::move(shape)), values_(numElements(shape_), fill) {}
  Array(std::vector<int64_t> shape, std::vector<T> values)
      : shape_(std::move(shape)), values_(std::move(values)) {
    assert(static_cast<int64_t>(values_.size()) == numElements(shape_));
  }

  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[i]; }
  int64_t size() const { return static_cast<int64_t>(values_.size()); }
  std::vector<T> &values() { return values_; }
  const std::vector<T> &values() const { return values_; }

  template <typename... Index> T &operator()(Index... index) {
    return values_[offset({static_cast<int64_t>(index)...})];
  }
  template <typename... Index> const T &operator()(Index... index) const {
    return values_[offset({static_cast<int64_t>(index)...})];
  }

  static int64_t numElements(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }

private:
  int64_t offset(std::initializer_list<int64_t> index) const {
    assert(static_cast<int64_t>(index.size()) == rank());
    int64_t flat = 0, i = 0;
    for (int64_t x : index) {
      assert(x >= 0 && x < shape_[i]);
      flat = flat * shape_[i++] + x;
    }
    return flat;
  }

  std::vector<int64_t> shape_;
  std::vector<T> values_;
};

using Tensor = Array<double>;
using IntTensor = Array<int32_t>;

//===----------------------------------------------------------------------===//
// §1.1 Dense attention, §1.2 output gate
//===----------------------------------------------------------------------===//

enum class MaskKind { None, Causal, SlidingWindow, Chunked };

/// Which keys a query sees; positions are absolute (bottom-right aligned).
struct Mask {
  MaskKind kind = MaskKind::Causal;
  int64_t window = 0; ///< the window W, or the chunk size of Chunked

  static Mask none() { return {MaskKind::None, 0}; }
  static Mask causal() { return {MaskKind::Causal, 0}; }
  static Mask slidingWindow(int64_t w) { return {MaskKind::SlidingWindow, w}; }
  /// Llama 4's chunked attention: causal within chunks of `size` positions.
  static Mask chunked(int64_t size) { return {MaskKind::Chunked, size}; }

  bool visible(int64_t queryPos, int64_t keyPos) const;
};

/// SPEC §7's score_mod: the score to use for `s` (after scale and softcap)
/// of query position `qp` and key position `kp` in batch `b`, head `h`.
using ScoreMod = std::function<double(double s, int64_t b, int64_t h,
                                      int64_t qp, int64_t kp)>;
/// SPEC §7's mask_mod: whether the key stays visible.
using MaskMod =
    std::function<bool(int64_t b, int64_t h, int64_t qp, int64_t kp)>;

/// How keys are scored: s = scale * dot(q, k), then c * tanh(s / c), then
/// the variant's score_mod; its mask_mod hides keys on top of the op's
/// mask, selection or tree. Selections (top-k, top-p) ignore the variant.
struct Score {
  std::optional<double> scale; ///< default 1/sqrt(D)
  double softcap = 0.0;        ///< 0: none
  ScoreMod scoreMod;           ///< none when empty
  MaskMod maskMod;             ///< none when empty
  /// Attention sinks, one logit per query head (gpt-oss): each joins its
  /// head's softmax denominator as a key with a zero value. None when empty.
  std::vector<double> sinks;
};

struct AttentionResult {
  Tensor output; ///< [B, H, Lq, Dv]
  Tensor lse;    ///< [B, H, Lq]; -inf for a row that sees no key (the
                 ///< sink with sinks)
};

/// Dense softmax attention with GQA, mask, softcap and optional sigmoid gate
/// (`gate` [B, H, Lq, Dv] or [B, H, Lq, 1]).
AttentionResult sdpa(const Tensor &q, const Tensor &k, const Tensor &v,
                     const Mask &mask, const Score &score = {},
                     const Tensor *gate = nullptr);

/// o * sigmoid(gate), elementwise or headwise.
Tensor sigmoidGate(const Tensor &o, const Tensor &gate);
/// o * silu(gate) = o * gate * sigmoid(gate), elementwise or headwise
/// (beyond SPEC: Falcon-H1's mixer without its norm).
Tensor siluGate(const Tensor &o, const Tensor &gate);

//===----------------------------------------------------------------------===//
// §1.3 Sparsity budgets
//===----------------------------------------------------------------------===//

/// Quest metadata [B, Hkv, NB, 2, D]: channel-wise min (0) and max (1) of
/// each block of `blockSize` keys.
Tensor blockMeta(const Tensor &k, int64_t blockSize);

struct TopK {
  int64_t blockSize = 16;
  int64_t topK = 1;
  int64_t sinkBlocks = 0;
  int64_t localBlocks = 0;
};

/// Kept block indices [B, H, Lq, min(topK, NB)], ascending, padded with -1.
IntTensor selectTopK(const Tensor &q, const Tensor &meta, int64_t keyLength,
                     const Mask &mask, const Score &score, const TopK &topK);

struct TopP {
  double topP = 1.0;
  int64_t minTokens = 0;
  std::optional<int64_t> maxTokens;
  /// The `int4` estimator: weights from keys rounded to 16 levels per key
  /// row between its lowest and highest channel.
  bool int4 = false;
};

/// Kept token indices [B, H, Lq, maxTokens or Lk], ascending, padded with
/// -1. With `blocks`, candidates are the visible keys of the listed
/// `blockSize`-token blocks; else every visible key.
IntTensor selectTopP(const Tensor &q, const Tensor &k, const IntTensor *blocks,
                     int64_t blockSize, const Mask &mask, const Score &score,
                     const TopP &topP);

/// Attention over the visible keys of the selected blocks
/// (`selection` [B, H, Lq, N], -1 and repeats ignored).
AttentionResult sparseSdpa(const Tensor &q, const Tensor &k, const Tensor &v,
                           const IntTensor &selection, int64_t blockSize,
                           const Mask &mask, const Score &score = {},
                           const Tensor *gate = nullptr);

//===----------------------------------------------------------------------===//
// §1.4 Speculative verification trees
//===----------------------------------------------------------------------===//

/// Empty when `parents` [B, T] is a valid tree; else a message naming the
/// first offending index, e.g. "parents[1][3] = 5 must be in [0, 3)".
std::string checkParents(const IntTensor &parents);

/// Tree attention: node t sees the prefix and its ancestors (itself
/// included), at position P + depth(t); `window` applies to positions.
/// `parents` must be valid (checkParents).
AttentionResult treeSdpa(const Tensor &q, const Tensor &k, const Tensor &v,
                         const IntTensor &parents,
                         std::optional<int64_t> window, const Score &score = {},
                         const Tensor *gate = nullptr);
/// The same under any position mask (causal, a window, chunks), applied to
/// each node's position P + depth and each key's.
AttentionResult treeSdpa(const Tensor &q, const Tensor &k, const Tensor &v,
                         const IntTensor &parents, const Mask &mask,
                         const Score &score = {}, const Tensor *gate = nullptr);

struct Acceptance {
  IntTensor path;   ///< [B, T], padded with -1
  IntTensor length; ///< [B]
  IntTensor bonus;  ///< [B]
};

/// Greedy acceptance: follow the lowest-index child whose token matches the
/// target of the current node.
Acceptance treeAccept(const IntTensor &tokens, const IntTensor &target,
                      const IntTensor &parents);

/// Rows P .. P+length-1 of k and v take rows P + path[0 .. length-1].
std::pair<Tensor, Tensor> kvCompact(const Tensor &k, const Tensor &v,
                                    const IntTensor &path,
                                    const IntTensor &length);

//===----------------------------------------------------------------------===//
// §2 Linear recurrences
//===----------------------------------------------------------------------===//

enum class Rule { Linear, Decay, Gla, Delta, GatedDelta, Kda };

struct Recurrence {
  Rule rule = Rule::Linear;
  std::optional<double> scale; ///< default 1/sqrt(Dk)
  bool qkL2Norm = false;
};

struct RecurrenceResult {
  Tensor output; ///< [B, Hv, L, Dv]
  Tensor state;  ///< [B, Hv, Dk, Dv]
};

/// The recurrence of SPEC §2, one time step at a time. `g` is [B, Hv, L]
/// (`Gla`, `Kda`: [B, Hv, L, Dk]) for the gated rules, `beta` [B, Hv, L]
/// for the delta rules; pass null otherwise. `Kda` (Kimi Delta Attention)
/// decays the state per key feature, as `Gla`, then writes as `Delta`.
RecurrenceResult linearRecurrence(const Tensor &q, const Tensor &k,
                                  const Tensor &v, const Tensor *g,
                                  const Tensor *beta,
                                  const Tensor &initialState,
                                  const Recurrence &options);

/// The activation of an rmsnorm gate's z.
enum class GateActivation { Silu, Sigmoid };

/// (o / sqrt(mean(o^2) + eps)) * w * act(z) per head vector, act silu
/// (z sigmoid(z)) or sigmoid.
Tensor rmsNormGate(const Tensor &o, const Tensor &z, const Tensor &w,
                   double eps = 1e-6,
                   GateActivation activation = GateActivation::Silu);

/// Mamba2's gated RMSNorm (mamba_ssm's RMSNormGated) over o and z [B, H, L,
/// Dv]: each token's H * Dv features (its heads' vectors in order) in
/// groups of `groupSize`, each group normalized, weighted by w ([Dv], or
/// [H * Dv]: a weight per feature of the token) and gated; with
/// `normBeforeGate` false the norm is of o act(z) (the gate first).
Tensor groupedRmsNormGate(const Tensor &o, const Tensor &z, const Tensor &w,
                          int64_t groupSize, bool normBeforeGate, double eps,
                          GateActivation activation);

//===----------------------------------------------------------------------===//
// Test helpers
//===----------------------------------------------------------------------===//

/// A tensor of uniform values in [lo, hi).
Tensor randomTensor(std::vector<int64_t> shape, std::mt19937_64 &rng,
                    double lo = -1.0, double hi = 1.0);

/// max |a - b| / max(max |b|, tiny): the error measure of numeric tests.
double maxRelativeError(const Tensor &actual, const Tensor &expected);

} // namespace attn::ref

#endif // ATTN_TEST_REFERENCE_REFERENCE_H
