//===- Reference.cpp - Float64 step-by-step reference of SPEC §1-2 --------===//

#include "test/reference/Reference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

namespace attn::ref {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double resolveScale(const std::optional<double> &scale, int64_t features) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(features));
}

/// s = scale * dot(q[b,h,i], k[b,hk,j]), softcapped.
double score(const Tensor &q, const Tensor &k, int64_t b, int64_t h, int64_t i,
             int64_t hk, int64_t j, double scale, double softcap) {
  double dot = 0.0;
  for (int64_t d = 0; d < q.dim(3); ++d)
    dot += q(b, h, i, d) * k(b, hk, j, d);
  double s = scale * dot;
  if (softcap > 0.0)
    s = softcap * std::tanh(s / softcap);
  return s;
}

/// score() with key j read as SPEC §1.3's `int4` estimator reads it: each
/// channel x rounded to one of 16 levels between the key's lowest (lo) and
/// highest (hi) channel, lo + floor((x - lo) * 15 / (hi - lo) + 0.5) *
/// (hi - lo) / 15; a constant key stays exact.
double int4Score(const Tensor &q, const Tensor &k, int64_t b, int64_t h,
                 int64_t i, int64_t hk, int64_t j, double scale,
                 double softcap) {
  const int64_t D = q.dim(3);
  double lo = k(b, hk, j, 0), hi = lo;
  for (int64_t d = 1; d < D; ++d) {
    lo = std::min(lo, k(b, hk, j, d));
    hi = std::max(hi, k(b, hk, j, d));
  }
  const double step = (hi - lo) / 15.0;
  const double perStep = hi > lo ? 15.0 / (hi - lo) : 0.0;
  double dot = 0.0;
  for (int64_t d = 0; d < D; ++d) {
    double level = std::floor((k(b, hk, j, d) - lo) * perStep + 0.5);
    dot += q(b, h, i, d) * (lo + level * step);
  }
  double s = scale * dot;
  if (softcap > 0.0)
    s = softcap * std::tanh(s / softcap);
  return s;
}

/// Whether key j is seen by row i of head h in batch b.
using Visibility =
    std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)>;
/// The positions (query, key) that the variant sees for row i and key j of
/// batch b.
using Positions =
    std::function<std::pair<int64_t, int64_t>(int64_t b, int64_t i, int64_t j)>;

/// Softmax attention of every row over the keys `visible` (and the
/// variant's mask_mod) admits: the one definition shared by dense, sparse
/// and tree attention.
AttentionResult attend(const Tensor &q, const Tensor &k, const Tensor &v,
                       const Score &scoreMod, const Tensor *gate,
                       const Visibility &visible, const Positions &positions) {
  const int64_t B = q.dim(0), H = q.dim(1), Lq = q.dim(2), D = q.dim(3);
  const int64_t Hkv = k.dim(1), Lk = k.dim(2), Dv = v.dim(3);
  assert(k.dim(0) == B && v.dim(0) == B && k.dim(3) == D && H % Hkv == 0);
  const double scale = resolveScale(scoreMod.scale, D);
  AttentionResult result{Tensor({B, H, Lq, Dv}), Tensor({B, H, Lq})};
  std::vector<double> s(Lk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv);
      for (int64_t i = 0; i < Lq; ++i) {
        double maxScore = kNegInf;
        for (int64_t j = 0; j < Lk; ++j) {
          auto [qp, kp] = positions(b, i, j);
          s[j] = kNegInf;
          if (!visible(b, h, i, j) ||
              (scoreMod.maskMod && !scoreMod.maskMod(b, h, qp, kp)))
            continue;
          s[j] = score(q, k, b, h, i, hk, j, scale, scoreMod.softcap);
          if (scoreMod.scoreMod)
            s[j] = scoreMod.scoreMod(s[j], b, h, qp, kp);
          maxScore = std::max(maxScore, s[j]);
        }
        // The sink: one more logit in the denominator, with no value.
        const double sink =
            scoreMod.sinks.empty() ? kNegInf : scoreMod.sinks[h];
        maxScore = std::max(maxScore, sink);
        if (maxScore == kNegInf) { // No visible key: o = 0, lse = -inf.
          result.lse(b, h, i) = kNegInf;
          continue;
        }
        double sum = sink == kNegInf ? 0.0 : std::exp(sink - maxScore);
        for (int64_t j = 0; j < Lk; ++j)
          sum += s[j] == kNegInf ? 0.0 : std::exp(s[j] - maxScore);
        for (int64_t j = 0; j < Lk; ++j) {
          if (s[j] == kNegInf)
            continue;
          double weight = std::exp(s[j] - maxScore) / sum;
          for (int64_t e = 0; e < Dv; ++e)
            result.output(b, h, i, e) += weight * v(b, hk, j, e);
        }
        result.lse(b, h, i) = maxScore + std::log(sum);
      }
    }
  if (gate)
    result.output = sigmoidGate(result.output, *gate);
  return result;
}

/// Absolute position of query row i of Lq against Lk keys.
int64_t queryPosition(int64_t i, int64_t Lq, int64_t Lk) { return Lk - Lq + i; }

/// Sorted unique non-negative entries of selection[b, h, i, :].
std::set<int64_t> selectedEntries(const IntTensor &selection, int64_t b,
                                  int64_t h, int64_t i) {
  std::set<int64_t> entries;
  for (int64_t n = 0; n < selection.dim(3); ++n)
    if (selection(b, h, i, n) >= 0)
      entries.insert(selection(b, h, i, n));
  return entries;
}

} // namespace

bool Mask::visible(int64_t queryPos, int64_t keyPos) const {
  switch (kind) {
  case MaskKind::None:
    return true;
  case MaskKind::Causal:
    return keyPos <= queryPos;
  case MaskKind::SlidingWindow:
    return keyPos <= queryPos && keyPos > queryPos - window;
  case MaskKind::Chunked: // window is the chunk size
    return keyPos <= queryPos && keyPos / window == queryPos / window;
  }
  return false;
}

AttentionResult sdpa(const Tensor &q, const Tensor &k, const Tensor &v,
                     const Mask &mask, const Score &score, const Tensor *gate) {
  const int64_t Lq = q.dim(2), Lk = k.dim(2);
  return attend(
      q, k, v, score, gate,
      [&](int64_t, int64_t, int64_t i, int64_t j) {
        return mask.visible(queryPosition(i, Lq, Lk), j);
      },
      [&](int64_t, int64_t i, int64_t j) {
        return std::pair{queryPosition(i, Lq, Lk), j};
      });
}

/// o * act(gate), the gate elementwise or headwise.
static Tensor gateBy(const Tensor &o, const Tensor &gate,
                     double (*act)(double)) {
  Tensor result = o;
  const bool headwise = gate.dim(3) == 1;
  for (int64_t b = 0; b < o.dim(0); ++b)
    for (int64_t h = 0; h < o.dim(1); ++h)
      for (int64_t i = 0; i < o.dim(2); ++i)
        for (int64_t e = 0; e < o.dim(3); ++e)
          result(b, h, i, e) *= act(gate(b, h, i, headwise ? 0 : e));
  return result;
}

Tensor sigmoidGate(const Tensor &o, const Tensor &gate) {
  return gateBy(o, gate, sigmoid);
}

Tensor siluGate(const Tensor &o, const Tensor &gate) {
  return gateBy(o, gate, [](double g) { return g * sigmoid(g); });
}

Tensor blockMeta(const Tensor &k, int64_t blockSize) {
  const int64_t B = k.dim(0), Hkv = k.dim(1), Lk = k.dim(2), D = k.dim(3);
  const int64_t NB = (Lk + blockSize - 1) / blockSize;
  Tensor meta({B, Hkv, NB, 2, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t n = 0; n < NB; ++n)
        for (int64_t d = 0; d < D; ++d) {
          double lo = std::numeric_limits<double>::infinity(), hi = -lo;
          for (int64_t j = n * blockSize; j < std::min(Lk, (n + 1) * blockSize);
               ++j) {
            lo = std::min(lo, k(b, h, j, d));
            hi = std::max(hi, k(b, h, j, d));
          }
          meta(b, h, n, 0, d) = lo;
          meta(b, h, n, 1, d) = hi;
        }
  return meta;
}

IntTensor selectTopK(const Tensor &q, const Tensor &meta, int64_t keyLength,
                     const Mask &mask, const Score &scoreMod,
                     const TopK &options) {
  const int64_t B = q.dim(0), H = q.dim(1), Lq = q.dim(2), D = q.dim(3);
  const int64_t Hkv = meta.dim(1), NB = meta.dim(2), bs = options.blockSize;
  const double scale = resolveScale(scoreMod.scale, D);
  // As attn.select_topk: a row lists at most every block there is.
  IntTensor kept({B, H, Lq, std::min(options.topK, NB)}, -1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv);
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t pos = queryPosition(i, Lq, keyLength);
        // Candidates: blocks holding at least one visible key, ascending.
        std::vector<int64_t> candidates;
        for (int64_t n = 0; n < NB; ++n)
          for (int64_t j = n * bs; j < std::min(keyLength, (n + 1) * bs); ++j)
            if (mask.visible(pos, j)) {
              candidates.push_back(n);
              break;
            }
        std::set<int64_t> chosen;
        const int64_t count = static_cast<int64_t>(candidates.size());
        if (count <= options.topK) {
          chosen.insert(candidates.begin(), candidates.end());
        } else {
          for (int64_t c = 0; c < options.sinkBlocks; ++c)
            chosen.insert(candidates[c]);
          for (int64_t c = count - options.localBlocks; c < count; ++c)
            chosen.insert(candidates[c]);
          std::vector<std::pair<double, int64_t>> ranked; // (-score, block)
          for (int64_t n : candidates) {
            if (chosen.count(n))
              continue;
            double upperBound = 0.0;
            for (int64_t d = 0; d < D; ++d)
              upperBound += std::max(q(b, h, i, d) * meta(b, hk, n, 0, d),
                                     q(b, h, i, d) * meta(b, hk, n, 1, d));
            ranked.push_back({-scale * upperBound, n});
          }
          std::sort(ranked.begin(), ranked.end()); // ties: lower block first
          for (auto &[negScore, n] : ranked) {
            if (static_cast<int64_t>(chosen.size()) >= options.topK)
              break;
            chosen.insert(n);
          }
        }
        int64_t slot = 0;
        for (int64_t n : chosen)
          kept(b, h, i, slot++) = static_cast<int32_t>(n);
      }
    }
  return kept;
}

IntTensor selectTopP(const Tensor &q, const Tensor &k, const IntTensor *blocks,
                     int64_t blockSize, const Mask &mask, const Score &scoreMod,
                     const TopP &options) {
  const int64_t B = q.dim(0), H = q.dim(1), Lq = q.dim(2), D = q.dim(3);
  const int64_t Hkv = k.dim(1), Lk = k.dim(2);
  const int64_t capacity = options.maxTokens.value_or(Lk);
  const double scale = resolveScale(scoreMod.scale, D);
  IntTensor kept({B, H, Lq, capacity}, -1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv);
      for (int64_t i = 0; i < Lq; ++i) {
        const int64_t pos = queryPosition(i, Lq, Lk);
        std::set<int64_t> allowedBlocks;
        if (blocks)
          allowedBlocks = selectedEntries(*blocks, b, h, i);
        std::vector<int64_t> candidates;
        std::vector<double> scores;
        for (int64_t j = 0; j < Lk; ++j) {
          if (!mask.visible(pos, j) ||
              (blocks && !allowedBlocks.count(j / blockSize)))
            continue;
          candidates.push_back(j);
          scores.push_back(
              options.int4
                  ? int4Score(q, k, b, h, i, hk, j, scale, scoreMod.softcap)
                  : score(q, k, b, h, i, hk, j, scale, scoreMod.softcap));
        }
        if (candidates.empty())
          continue;
        const double maxScore = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double s : scores)
          sum += std::exp(s - maxScore);
        std::vector<std::pair<double, int64_t>> ranked; // (-weight, token)
        for (size_t c = 0; c < candidates.size(); ++c)
          ranked.push_back(
              {-std::exp(scores[c] - maxScore) / sum, candidates[c]});
        std::sort(ranked.begin(), ranked.end()); // ties: lower token first
        const int64_t count = static_cast<int64_t>(ranked.size());
        int64_t keep = count;
        double mass = 0.0;
        for (int64_t c = 0; c < count; ++c) {
          mass -= ranked[c].first;
          if (mass >= options.topP) {
            keep = c + 1;
            break;
          }
        }
        keep = std::max(keep, options.minTokens);
        if (options.maxTokens)
          keep = std::min(keep, *options.maxTokens);
        keep = std::min(keep, count);
        std::vector<int64_t> tokens;
        for (int64_t c = 0; c < keep; ++c)
          tokens.push_back(ranked[c].second);
        std::sort(tokens.begin(), tokens.end());
        for (size_t c = 0; c < tokens.size(); ++c)
          kept(b, h, i, static_cast<int64_t>(c)) =
              static_cast<int32_t>(tokens[c]);
      }
    }
  return kept;
}

AttentionResult sparseSdpa(const Tensor &q, const Tensor &k, const Tensor &v,
                           const IntTensor &selection, int64_t blockSize,
                           const Mask &mask, const Score &score,
                           const Tensor *gate) {
  const int64_t Lq = q.dim(2), Lk = k.dim(2);
  return attend(
      q, k, v, score, gate,
      [&](int64_t b, int64_t h, int64_t i, int64_t j) {
        if (!mask.visible(queryPosition(i, Lq, Lk), j))
          return false;
        for (int64_t n = 0; n < selection.dim(3); ++n)
          if (selection(b, h, i, n) >= 0 &&
              selection(b, h, i, n) == j / blockSize)
            return true;
        return false;
      },
      [&](int64_t, int64_t i, int64_t j) {
        return std::pair{queryPosition(i, Lq, Lk), j};
      });
}

std::string checkParents(const IntTensor &parents) {
  for (int64_t b = 0; b < parents.dim(0); ++b)
    for (int64_t t = 0; t < parents.dim(1); ++t) {
      int32_t p = parents(b, t);
      bool ok = t == 0 ? p == -1 : (p >= 0 && p < t);
      if (!ok)
        return "parents[" + std::to_string(b) + "][" + std::to_string(t) +
               "] = " + std::to_string(p) +
               (t == 0 ? " must be -1 (the root)"
                       : " must be in [0, " + std::to_string(t) + ")");
    }
  return "";
}

/// depth[b][t] of every tree node.
static std::vector<std::vector<int64_t>> treeDepths(const IntTensor &parents) {
  std::vector<std::vector<int64_t>> depth(parents.dim(0),
                                          std::vector<int64_t>(parents.dim(1)));
  for (int64_t b = 0; b < parents.dim(0); ++b)
    for (int64_t t = 1; t < parents.dim(1); ++t)
      depth[b][t] = depth[b][parents(b, t)] + 1;
  return depth;
}

AttentionResult treeSdpa(const Tensor &q, const Tensor &k, const Tensor &v,
                         const IntTensor &parents,
                         std::optional<int64_t> window, const Score &score,
                         const Tensor *gate) {
  return treeSdpa(q, k, v, parents,
                  window ? Mask::slidingWindow(*window) : Mask::causal(), score,
                  gate);
}

AttentionResult treeSdpa(const Tensor &q, const Tensor &k, const Tensor &v,
                         const IntTensor &parents, const Mask &mask,
                         const Score &score, const Tensor *gate) {
  assert(checkParents(parents).empty());
  const int64_t T = q.dim(2), P = k.dim(2) - T;
  const auto depth = treeDepths(parents);
  auto isAncestorOrSelf = [&](int64_t b, int64_t u, int64_t t) {
    for (int64_t n = t; n >= 0; n = parents(b, n))
      if (n == u)
        return true;
    return false;
  };
  return attend(
      q, k, v, score, gate,
      [&](int64_t b, int64_t, int64_t t, int64_t j) {
        const int64_t queryPos = P + depth[b][t];
        int64_t keyPos = j;
        if (j >= P) {
          if (!isAncestorOrSelf(b, j - P, t))
            return false;
          keyPos = P + depth[b][j - P];
        }
        return mask.visible(queryPos, keyPos);
      },
      [&](int64_t b, int64_t t, int64_t j) {
        return std::pair{P + depth[b][t], j < P ? j : P + depth[b][j - P]};
      });
}

Acceptance treeAccept(const IntTensor &tokens, const IntTensor &target,
                      const IntTensor &parents) {
  assert(checkParents(parents).empty());
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  Acceptance result{IntTensor({B, T}, -1), IntTensor({B}), IntTensor({B})};
  for (int64_t b = 0; b < B; ++b) {
    int64_t current = 0, length = 1;
    result.path(b, 0) = 0;
    while (true) {
      int64_t next = -1;
      for (int64_t c = current + 1; c < T && next < 0; ++c)
        if (parents(b, c) == current && tokens(b, c) == target(b, current))
          next = c;
      if (next < 0)
        break;
      result.path(b, length++) = static_cast<int32_t>(next);
      current = next;
    }
    result.length(b) = static_cast<int32_t>(length);
    result.bonus(b) = target(b, current);
  }
  return result;
}

std::pair<Tensor, Tensor> kvCompact(const Tensor &k, const Tensor &v,
                                    const IntTensor &path,
                                    const IntTensor &length) {
  const int64_t T = path.dim(1), P = k.dim(2) - T;
  Tensor newK = k, newV = v;
  for (int64_t b = 0; b < k.dim(0); ++b)
    for (int64_t h = 0; h < k.dim(1); ++h)
      for (int64_t n = 0; n < length(b); ++n) {
        const int64_t from = P + path(b, n), to = P + n;
        for (int64_t d = 0; d < k.dim(3); ++d)
          newK(b, h, to, d) = k(b, h, from, d);
        for (int64_t e = 0; e < v.dim(3); ++e)
          newV(b, h, to, e) = v(b, h, from, e);
      }
  return {newK, newV};
}

RecurrenceResult linearRecurrence(const Tensor &q, const Tensor &k,
                                  const Tensor &v, const Tensor *g,
                                  const Tensor *beta,
                                  const Tensor &initialState,
                                  const Recurrence &options) {
  const int64_t B = q.dim(0), Hk = q.dim(1), L = q.dim(2), Dk = q.dim(3);
  const int64_t Hv = v.dim(1), Dv = v.dim(3);
  const bool featureDecay =
      options.rule == Rule::Gla || options.rule == Rule::Kda;
  const bool gated = featureDecay || options.rule == Rule::Decay ||
                     options.rule == Rule::GatedDelta;
  const bool delta = options.rule == Rule::Delta ||
                     options.rule == Rule::GatedDelta ||
                     options.rule == Rule::Kda;
  assert(Hv % Hk == 0 && (!gated || g) && (!delta || beta));
  const double scale = resolveScale(options.scale, Dk);
  RecurrenceResult result{Tensor({B, Hv, L, Dv}), initialState};
  Tensor &S = result.state;
  std::vector<double> qt(Dk), kt(Dk), u(Dv);
  auto l2normalize = [](std::vector<double> &x) {
    double sumSquares = 0.0;
    for (double e : x)
      sumSquares += e * e;
    const double norm = std::sqrt(sumSquares + 1e-6);
    for (double &e : x)
      e /= norm;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t hv = 0; hv < Hv; ++hv) {
      const int64_t hk = hv / (Hv / Hk);
      for (int64_t t = 0; t < L; ++t) {
        for (int64_t d = 0; d < Dk; ++d) {
          qt[d] = q(b, hk, t, d);
          kt[d] = k(b, hk, t, d);
        }
        if (options.qkL2Norm) {
          l2normalize(qt);
          l2normalize(kt);
        }
        // Decay the state.
        if (featureDecay) {
          for (int64_t d = 0; d < Dk; ++d)
            for (int64_t e = 0; e < Dv; ++e)
              S(b, hv, d, e) *= std::exp((*g)(b, hv, t, d));
        } else if (gated) {
          const double decay = std::exp((*g)(b, hv, t));
          for (int64_t d = 0; d < Dk; ++d)
            for (int64_t e = 0; e < Dv; ++e)
              S(b, hv, d, e) *= decay;
        }
        // Write: u = v_t (plain) or beta_t (v_t - S^T k_t) (delta rules).
        for (int64_t e = 0; e < Dv; ++e) {
          u[e] = v(b, hv, t, e);
          if (delta) {
            double predicted = 0.0;
            for (int64_t d = 0; d < Dk; ++d)
              predicted += S(b, hv, d, e) * kt[d];
            u[e] = (*beta)(b, hv, t) * (u[e] - predicted);
          }
        }
        for (int64_t d = 0; d < Dk; ++d)
          for (int64_t e = 0; e < Dv; ++e)
            S(b, hv, d, e) += kt[d] * u[e];
        // Read with the updated state.
        for (int64_t e = 0; e < Dv; ++e) {
          double o = 0.0;
          for (int64_t d = 0; d < Dk; ++d)
            o += S(b, hv, d, e) * scale * qt[d];
          result.output(b, hv, t, e) = o;
        }
      }
    }
  return result;
}

Tensor rmsNormGate(const Tensor &o, const Tensor &z, const Tensor &w,
                   double eps, GateActivation activation) {
  Tensor result = o;
  const int64_t Dv = o.dim(3);
  for (int64_t b = 0; b < o.dim(0); ++b)
    for (int64_t h = 0; h < o.dim(1); ++h)
      for (int64_t l = 0; l < o.dim(2); ++l) {
        double sumSquares = 0.0;
        for (int64_t e = 0; e < Dv; ++e)
          sumSquares += o(b, h, l, e) * o(b, h, l, e);
        const double rms = std::sqrt(sumSquares / Dv + eps);
        for (int64_t e = 0; e < Dv; ++e) {
          const double zv = z(b, h, l, e);
          const double act = activation == GateActivation::Sigmoid
                                 ? sigmoid(zv)
                                 : zv * sigmoid(zv);
          result(b, h, l, e) = o(b, h, l, e) / rms * w(e) * act;
        }
      }
  return result;
}

Tensor groupedRmsNormGate(const Tensor &o, const Tensor &z, const Tensor &w,
                          int64_t groupSize, bool normBeforeGate, double eps,
                          GateActivation activation) {
  Tensor result = o;
  const int64_t H = o.dim(1), Dv = o.dim(3);
  auto act = [&](double x) {
    return activation == GateActivation::Sigmoid ? sigmoid(x) : x * sigmoid(x);
  };
  for (int64_t b = 0; b < o.dim(0); ++b)
    for (int64_t l = 0; l < o.dim(2); ++l)
      for (int64_t first = 0; first < H * Dv; first += groupSize) {
        // Feature f of the token is feature f % Dv of head f / Dv.
        auto x = [&](int64_t f) {
          const double value = o(b, f / Dv, l, f % Dv);
          return normBeforeGate ? value : value * act(z(b, f / Dv, l, f % Dv));
        };
        double sumSquares = 0.0;
        for (int64_t f = first; f < first + groupSize; ++f)
          sumSquares += x(f) * x(f);
        const double rms = std::sqrt(sumSquares / groupSize + eps);
        for (int64_t f = first; f < first + groupSize; ++f) {
          const double weight = w.dim(0) == Dv ? w(f % Dv) : w(f);
          double y = x(f) / rms * weight;
          if (normBeforeGate)
            y *= act(z(b, f / Dv, l, f % Dv));
          result(b, f / Dv, l, f % Dv) = y;
        }
      }
  return result;
}

Tensor randomTensor(std::vector<int64_t> shape, std::mt19937_64 &rng, double lo,
                    double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t(std::move(shape));
  for (double &x : t.values())
    x = dist(rng);
  return t;
}

double maxRelativeError(const Tensor &actual, const Tensor &expected) {
  assert(actual.shape() == expected.shape());
  double maxDiff = 0.0, maxMagnitude = 0.0;
  for (int64_t n = 0; n < expected.size(); ++n) {
    const double a = actual.values()[n], e = expected.values()[n];
    if (std::isfinite(e))
      maxMagnitude = std::max(maxMagnitude, std::abs(e));
    if (a == e) // also equal infinities (the lse of empty rows)
      continue;
    if (!std::isfinite(a) || !std::isfinite(e)) // NaN, or one-sided inf
      return std::numeric_limits<double>::infinity();
    maxDiff = std::max(maxDiff, std::abs(a - e));
  }
  if (maxDiff == 0.0)
    return 0.0;
  return maxDiff / std::max(maxMagnitude, 1e-30);
}

} // namespace attn::ref
