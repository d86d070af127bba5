//===- VariantTest.cpp - score_mod / mask_mod regions, end to end --------===//
//
// Each case writes attn IR whose softmax-attention op (dense, sparse or
// tree) carries variant regions (SPEC §7), compiles it for a backend, runs
// it on random inputs and compares o and lse with the float64 reference,
// whose score and mask callbacks state the same variant in C++. Two
// variants restate an attribute as a region (softcap, sliding window) and
// are checked against the reference of the attribute itself.
//
//===----------------------------------------------------------------------===//

#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>

using namespace attn;
using namespace attn::e2e;

namespace {

enum class OpKind { Dense, Sparse, Tree };

struct VariantCase {
  std::string label;
  /// softcap_region, window_region, head_table, alibi, relative_bias,
  /// document, prefix_lm, empty_rows, alibi_document, neg_inf_scores,
  /// edge_arithmetic, math_ops.
  std::string variant;
  OpKind op = OpKind::Dense;
  /// The op's position mask (dense and sparse): none, causal.
  std::string mask = "causal";
  int64_t batch = 2, heads = 6, kvHeads = 2, headDim = 24, valueDim = 20;
  /// Tree: Lq = T nodes and Lk = P + T.
  int64_t queries = 37, keys = 37;
  bool gate = false;
};

void PrintTo(const VariantCase &c, std::ostream *os) { *os << c.label; }

/// A variant as attn IR regions, its extra entry inputs, and its meaning
/// for the reference.
struct Variant {
  std::string scoreMod, maskMod;     // region bodies; empty: no region
  std::vector<std::string> argTypes; // the extra inputs' MLIR types
  std::vector<Tensor> inputs;
  ref::Score score;
  /// What the variant restates: a window over positions.
  std::optional<int64_t> window;
};

std::string f32(double x) {
  std::ostringstream os;
  os.precision(17);
  os << std::scientific << x;
  return os.str();
}

/// ALiBi's score_mod body: s - m_h * (qp - kp), the slope computed from h.
std::string alibiRegion(int64_t heads) {
  int64_t n = 1;
  while (n * 2 <= heads)
    n *= 2;
  std::ostringstream ir;
  ir << "%n = arith.constant " << n << " : index\n"
     << "%c1 = arith.constant 1 : index\n"
     << "%c2 = arith.constant 2 : index\n"
     << "%low = arith.cmpi slt, %h, %n : index\n"
     << "%hp1 = arith.addi %h, %c1 : index\n"
     << "%hmn = arith.subi %h, %n : index\n"
     << "%twice = arith.muli %hmn, %c2 : index\n"
     << "%odd = arith.addi %twice, %c1 : index\n"
     << "%steps = arith.select %low, %hp1, %odd : index\n"
     << "%stepsi = arith.index_cast %steps : index to i32\n"
     << "%stepsf = arith.sitofp %stepsi : i32 to f32\n"
     << "%wlow = arith.constant " << f32(-8.0 / n) << " : f32\n"
     << "%whigh = arith.constant " << f32(-4.0 / n) << " : f32\n"
     << "%w = arith.select %low, %wlow, %whigh : f32\n"
     << "%e = arith.mulf %stepsf, %w : f32\n"
     << "%m = math.exp2 %e : f32\n"
     << "%d = arith.subi %qp, %kp : index\n"
     << "%di = arith.index_cast %d : index to i32\n"
     << "%df = arith.sitofp %di : i32 to f32\n"
     << "%bias = arith.mulf %m, %df : f32\n"
     << "%r = arith.subf %s, %bias : f32\n"
     << "attn.yield %r : f32\n";
  return ir.str();
}

/// Document ids [B, Lk]: runs of 1 .. `longest` keys per document.
ref::IntTensor randomDocuments(int64_t batch, int64_t keys,
                               std::mt19937_64 &rng, int64_t longest = 12) {
  ref::IntTensor docs({batch, keys});
  for (int64_t b = 0; b < batch; ++b) {
    int32_t id = 0;
    int64_t left = 1 + rng() % longest;
    for (int64_t j = 0; j < keys; ++j) {
      if (left-- == 0) {
        ++id;
        left = rng() % longest;
      }
      docs(b, j) = id;
    }
  }
  return docs;
}

/// Prefix lengths [B] of a prefix-LM, uniform in [0, keys].
std::shared_ptr<ref::IntTensor> randomPrefixLengths(int64_t batch, int64_t keys,
                                                    std::mt19937_64 &rng) {
  auto prefix = std::make_shared<ref::IntTensor>(std::vector<int64_t>{batch});
  for (int64_t b = 0; b < batch; ++b)
    (*prefix)(b) = static_cast<int32_t>(rng() % (keys + 1));
  return prefix;
}

// SPEC §7's named variants, as the float64 reference states them.
ref::ScoreMod alibiReference(int64_t heads) {
  return [heads](double s, int64_t, int64_t h, int64_t qp, int64_t kp) {
    return s - alibiSlope(h, heads) * static_cast<double>(qp - kp);
  };
}
ref::ScoreMod relativeBiasReference(std::shared_ptr<ref::Tensor> table,
                                    int64_t radius) {
  return [table, radius](double s, int64_t, int64_t h, int64_t qp, int64_t kp) {
    return s +
           (*table)(h, std::clamp<int64_t>(kp - qp, -radius, radius) + radius);
  };
}
ref::MaskMod documentReference(std::shared_ptr<ref::IntTensor> docs) {
  return [docs](int64_t b, int64_t, int64_t qp, int64_t kp) {
    return (*docs)(b, qp) == (*docs)(b, kp);
  };
}
ref::MaskMod prefixLmReference(std::shared_ptr<ref::IntTensor> prefix) {
  return [prefix](int64_t b, int64_t, int64_t qp, int64_t kp) {
    return kp < (*prefix)(b) || kp <= qp;
  };
}

const char *kDocumentRegion = R"(
  %dq = tensor.extract %doc[%b, %qp] : tensor<?x?xi32>
  %dk = tensor.extract %doc[%b, %kp] : tensor<?x?xi32>
  %same = arith.cmpi eq, %dq, %dk : i32
  attn.yield %same : i1
)";

/// A per-head table of int32 values, cycled over `heads`.
ref::IntTensor headInts(int64_t heads, std::initializer_list<int32_t> values) {
  ref::IntTensor table(std::vector<int64_t>{heads});
  for (int64_t h = 0; h < heads; ++h)
    table(h) = values.begin()[h % values.size()];
  return table;
}

// arith's integer ops on i32, as regions define them where arith does not
// (docs/new-variant.md): division by 0 gives 0, remainder by 0 the
// dividend, division by -1 wraps, shifts outside [0, 32) give 0 (shrsi the
// sign), float-to-integer conversions saturate with NaN giving 0.
int32_t wrap(int64_t x) {
  return static_cast<int32_t>(static_cast<uint32_t>(x));
}
int32_t divS(int32_t x, int32_t d) {
  return d == 0 ? 0 : d == -1 ? wrap(-int64_t(x)) : x / d;
}
int32_t remS(int32_t x, int32_t d) { return d == 0 ? x : d == -1 ? 0 : x % d; }
int32_t floorDivS(int32_t x, int32_t d) {
  if (d == 0 || d == -1)
    return divS(x, d);
  int32_t q = x / d;
  return (x % d != 0 && (x < 0) != (d < 0)) ? q - 1 : q;
}
int32_t ceilDivS(int32_t x, int32_t d) {
  if (d == 0 || d == -1)
    return divS(x, d);
  int32_t q = x / d;
  return (x % d != 0 && (x < 0) == (d < 0)) ? q + 1 : q;
}
int32_t remU(int32_t x, int32_t d) {
  return d == 0 ? x : wrap(uint32_t(x) % uint32_t(d));
}
bool shiftInRange(int32_t amount) { return uint32_t(amount) < 32; }
int32_t shl(int32_t x, int32_t amount) {
  return shiftInRange(amount) ? wrap(int64_t(uint32_t(x) << amount)) : 0;
}
int32_t shrU(int32_t x, int32_t amount) {
  return shiftInRange(amount) ? wrap(uint32_t(x) >> amount) : 0;
}
int32_t shrS(int32_t x, int32_t amount) {
  return x >> (shiftInRange(amount) ? amount : 31);
}
int32_t fpToS(float x) {
  if (std::isnan(x))
    return 0;
  if (x >= 2147483648.0f)
    return std::numeric_limits<int32_t>::max();
  return static_cast<int32_t>(std::max(x, -2147483648.0f));
}

/// Regions whose divisors, shift amounts and converted floats come from
/// per-head tables holding the values arith leaves undefined (0 and -1
/// divisors, INT_MIN / -1, shifts of 32, 40 and -1, NaN, infinities and
/// floats past i32): on the CPU an integer division by 0 or INT_MIN / -1
/// traps the process unless the regions define them. Positions compared
/// with index constants past i32 (+-2^32) hold as they do in 64 bits on
/// the 32-bit lanes too.
void addEdgeArithmetic(Variant &v, int64_t H) {
  auto divisors =
      std::make_shared<ref::IntTensor>(headInts(H, {0, -1, 3, 2, 0, 5}));
  auto shifts =
      std::make_shared<ref::IntTensor>(headInts(H, {32, -1, 3, 31, 40, 0}));
  const float inf = std::numeric_limits<float>::infinity();
  const float floatValues[] = {std::nanf(""), inf, -3e9f, 2.5f, -inf, 3e9f};
  auto floats = std::make_shared<ref::Tensor>(std::vector<int64_t>{H});
  for (int64_t h = 0; h < H; ++h)
    (*floats)(h) = floatValues[h % 6];
  std::string heads = std::to_string(H);
  std::string intTable = "tensor<" + heads + "xi32>";
  std::string floatTable = "tensor<" + heads + "xf32>";
  v.argTypes = {intTable, intTable, floatTable};
  v.inputs = {intsToRuntime(*divisors), intsToRuntime(*shifts),
              toRuntime(*floats)};
  v.scoreMod = R"(
    %p = tensor.extract %arg0[%h] : )" +
               intTable + R"(
    %sh = tensor.extract %arg1[%h] : )" +
               intTable + R"(
    %t = tensor.extract %arg2[%h] : )" +
               floatTable + R"(
    %kpi = arith.index_cast %kp : index to i32
    %c0 = arith.constant 0 : i32
    %zero = arith.constant 0.0 : f32
    %shl = arith.shli %kpi, %sh : i32
    %none = arith.cmpi eq, %shl, %c0 : i32
    %one = arith.constant 1.0 : f32
    %bump = arith.select %none, %one, %zero : f32
    %neg = arith.subi %c0, %kpi : i32
    %srs = arith.shrsi %neg, %sh : i32
    %sru = arith.shrui %kpi, %sh : i32
    %shifted = arith.addi %srs, %sru : i32
    %shiftedf = arith.sitofp %shifted : i32 to f32
    %milli = arith.constant 1.0e-3 : f32
    %small = arith.mulf %shiftedf, %milli : f32
    %ti = arith.fptosi %t : f32 to i32
    %tf = arith.sitofp %ti : i32 to f32
    %nano = arith.constant 1.0e-9 : f32
    %tiny = arith.mulf %tf, %nano : f32
    %min = arith.constant -2147483648 : i32
    %big = arith.addi %min, %kpi : i32
    %quot = arith.divsi %big, %p : i32
    %negative = arith.cmpi slt, %quot, %c0 : i32
    %half = arith.constant 0.5 : f32
    %bump2 = arith.select %negative, %half, %zero : f32
    %r0 = arith.addf %s, %bump : f32
    %r1 = arith.addf %r0, %small : f32
    %r2 = arith.addf %r1, %tiny : f32
    %r = arith.addf %r2, %bump2 : f32
    attn.yield %r : f32
  )";
  v.maskMod = R"(
    %p = tensor.extract %arg0[%h] : )" +
              intTable + R"(
    %qpi = arith.index_cast %qp : index to i32
    %kpi = arith.index_cast %kp : index to i32
    %d = arith.subi %qpi, %kpi : i32
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c2 = arith.constant 2 : i32
    %c4 = arith.constant 4 : i32
    %r = arith.remsi %d, %p : i32
    %exact = arith.cmpi eq, %r, %c0 : i32
    %fq = arith.floordivsi %d, %p : i32
    %second = arith.cmpi eq, %fq, %c1 : i32
    %ru = arith.remui %kpi, %p : i32
    %two = arith.cmpi eq, %ru, %c2 : i32
    %cq = arith.ceildivsi %kpi, %p : i32
    %four = arith.cmpi eq, %cq, %c4 : i32
    %a = arith.ori %exact, %second : i1
    %b2 = arith.ori %a, %two : i1
    %any = arith.ori %b2, %four : i1
    %big = arith.constant 4294967296 : index
    %negbig = arith.constant -4294967296 : index
    %below = arith.cmpi slt, %kp, %big : index
    %above = arith.cmpi sgt, %qp, %negbig : index
    %bounds = arith.andi %below, %above : i1
    %in = arith.andi %any, %bounds : i1
    attn.yield %in : i1
  )";
  v.score.scoreMod = [divisors, shifts, floats](double s, int64_t, int64_t h,
                                                int64_t, int64_t kp) {
    int32_t p = (*divisors)(h), sh = (*shifts)(h), k = wrap(kp);
    double bump = shl(k, sh) == 0 ? 1.0 : 0.0;
    double small =
        1e-3 * static_cast<float>(wrap(int64_t(shrS(-k, sh)) + shrU(k, sh)));
    double tiny = 1e-9 * static_cast<float>(fpToS((*floats)(h)));
    int32_t quotient = divS(wrap(int64_t(INT32_MIN) + k), p);
    return s + bump + small + tiny + (quotient < 0 ? 0.5 : 0.0);
  };
  v.score.maskMod = [divisors](int64_t, int64_t h, int64_t qp, int64_t kp) {
    int32_t p = (*divisors)(h), d = wrap(qp - kp), k = wrap(kp);
    return remS(d, p) == 0 || floorDivS(d, p) == 1 || remU(k, p) == 2 ||
           ceilDivS(k, p) == 4;
  };
}

/// A score_mod using the math ops some target lowers only through attn's
/// expansions (acosh, asinh, atanh, clampf, fpowi, isinf, isnormal, ipowi
/// with negative exponents) or CUDA only through LLVM's intrinsics (ctlz,
/// ctpop, cttz, trunc), with a per-head table of special floats.
void addMathOps(Variant &v, int64_t H) {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {1.0f, inf, -inf, std::nanf(""), 1e-40f, 0.0f};
  auto table = std::make_shared<ref::Tensor>(std::vector<int64_t>{H});
  for (int64_t h = 0; h < H; ++h)
    (*table)(h) = specials[h % 6];
  std::string type = "tensor<" + std::to_string(H) + "xf32>";
  v.argTypes = {type};
  v.inputs = {toRuntime(*table)};
  v.scoreMod = R"(
    %kpi = arith.index_cast %kp : index to i32
    %qpi = arith.index_cast %qp : index to i32
    %one = arith.constant 1.0 : f32
    %a = math.absf %s : f32
    %a1 = arith.addf %a, %one : f32
    %ach = math.acosh %a1 : f32
    %ash = math.asinh %s : f32
    %ratio = arith.divf %s, %a1 : f32
    %ath = math.atanh %ratio : f32
    %lo = arith.constant -0.5 : f32
    %hi = arith.constant 0.5 : f32
    %cl = math.clampf %s to [%lo, %hi] : f32
    %c1 = arith.constant 1 : i32
    %c2 = arith.constant 2 : i32
    %c3 = arith.constant 3 : i32
    %c4 = arith.constant 4 : i32
    %c5 = arith.constant 5 : i32
    %e = arith.remsi %kpi, %c3 : i32
    %fp = math.fpowi %s, %e : f32, i32
    %f0 = arith.addf %ach, %ash : f32
    %f1 = arith.addf %f0, %ath : f32
    %f2 = arith.addf %f1, %cl : f32
    %f3 = arith.addf %f2, %fp : f32
    %tenth = arith.constant 0.1 : f32
    %floats = arith.mulf %f3, %tenth : f32
    %t = tensor.extract %arg0[%h] : )" +
               type + R"(
    %zero = arith.constant 0.0 : f32
    %isinf = math.isinf %t : f32
    %quarter = arith.constant 0.25 : f32
    %b1 = arith.select %isinf, %quarter, %zero : f32
    %isnormal = math.isnormal %t : f32
    %eighth = arith.constant 0.125 : f32
    %b2 = arith.select %isnormal, %eighth, %zero : f32
    %km = arith.remsi %kpi, %c5 : i32
    %base = arith.subi %km, %c2 : i32
    %qm = arith.remsi %qpi, %c4 : i32
    %exponent = arith.subi %qm, %c1 : i32
    %ip = math.ipowi %base, %exponent : i32
    %clz = math.ctlz %kpi : i32
    %pop = math.ctpop %kpi : i32
    %ctz = math.cttz %kpi : i32
    %i0 = arith.addi %clz, %pop : i32
    %i1 = arith.addi %i0, %ctz : i32
    %i2 = arith.addi %i1, %ip : i32
    %ints = arith.sitofp %i2 : i32 to f32
    %hundredth = arith.constant 0.01 : f32
    %intsScaled = arith.mulf %ints, %hundredth : f32
    %kpf = arith.sitofp %kpi : i32 to f32
    %half = arith.constant 0.5 : f32
    %kh = arith.addf %kpf, %half : f32
    %seven = arith.constant 0.7 : f32
    %scaled = arith.mulf %kh, %seven : f32
    %tr = math.trunc %scaled : f32
    %trScaled = arith.mulf %tr, %hundredth : f32
    %r0 = arith.addf %s, %floats : f32
    %r1 = arith.addf %r0, %b1 : f32
    %r2 = arith.addf %r1, %b2 : f32
    %r3 = arith.addf %r2, %intsScaled : f32
    %r = arith.addf %r3, %trScaled : f32
    attn.yield %r : f32
  )";
  v.score.scoreMod = [table](double s, int64_t, int64_t h, int64_t qp,
                             int64_t kp) {
    double a1 = std::abs(s) + 1.0;
    int32_t e = static_cast<int32_t>(kp % 3);
    double floats = std::acosh(a1) + std::asinh(s) + std::atanh(s / a1) +
                    std::clamp(s, -0.5, 0.5) + std::pow(s, e);
    float t = (*table)(h);
    double specials =
        (std::isinf(t) ? 0.25 : 0.0) + (std::isnormal(t) ? 0.125 : 0.0);
    int64_t base = kp % 5 - 2, exponent = qp % 4 - 1;
    int64_t power = 1;
    if (exponent < 0)
      power = base == 1 ? 1 : base == -1 ? -1 : 0; // exponent is -1
    for (int64_t i = 0; i < exponent; ++i)
      power *= base;
    uint32_t k = static_cast<uint32_t>(kp);
    int64_t clz = k == 0 ? 32 : __builtin_clz(k);
    int64_t ctz = k == 0 ? 32 : __builtin_ctz(k);
    int64_t ints = clz + __builtin_popcount(k) + ctz + power;
    double truncated = std::trunc((static_cast<double>(kp) + 0.5) * 0.7);
    return s + 0.1 * floats + specials + 0.01 * ints + 0.01 * truncated;
  };
}

Variant makeVariant(const VariantCase &c, std::mt19937_64 &rng) {
  Variant v;
  const int64_t H = c.heads;
  if (c.variant == "softcap_region") {
    v.scoreMod = R"(
      %c = arith.constant 5.0 : f32
      %x = arith.divf %s, %c : f32
      %t = math.tanh %x : f32
      %r = arith.mulf %t, %c : f32
      attn.yield %r : f32
    )";
    v.score.softcap = 5.0;
  } else if (c.variant == "window_region") {
    v.maskMod = R"(
      %c7 = arith.constant 7 : index
      %le = arith.cmpi sle, %kp, %qp : index
      %lo = arith.subi %qp, %c7 : index
      %gt = arith.cmpi sgt, %kp, %lo : index
      %in = arith.andi %le, %gt : i1
      attn.yield %in : i1
    )";
    v.window = 7;
  } else if (c.variant == "head_table") {
    auto table = std::make_shared<ref::Tensor>(randomF32({H}, rng, -2.0, 2.0));
    v.argTypes.push_back("tensor<" + std::to_string(H) + "xf32>");
    v.inputs.push_back(toRuntime(*table));
    v.scoreMod = "%t = tensor.extract %arg0[%h] : tensor<" + std::to_string(H) +
                 "xf32>\n%r = arith.addf %s, %t : f32\nattn.yield %r : f32\n";
    v.score.scoreMod = [table](double s, int64_t, int64_t h, int64_t, int64_t) {
      return s + (*table)(h);
    };
  } else if (c.variant == "alibi" || c.variant == "alibi_document") {
    v.scoreMod = alibiRegion(H);
    v.score.scoreMod = alibiReference(H);
  } else if (c.variant == "relative_bias") {
    const int64_t R = 3;
    auto table = std::make_shared<ref::Tensor>(
        randomF32({H, 2 * R + 1}, rng, -2.0, 2.0));
    std::string type = "tensor<" + std::to_string(H) + "x7xf32>";
    v.argTypes.push_back(type);
    v.inputs.push_back(toRuntime(*table));
    v.scoreMod = R"(
      %d = arith.subi %kp, %qp : index
      %r3 = arith.constant 3 : index
      %m3 = arith.constant -3 : index
      %lo = arith.maxsi %d, %m3 : index
      %cl = arith.minsi %lo, %r3 : index
      %i = arith.addi %cl, %r3 : index
      %x = tensor.extract %arg0[%h, %i] : )" +
                 type + R"(
      %r = arith.addf %s, %x : f32
      attn.yield %r : f32
    )";
    v.score.scoreMod = relativeBiasReference(table, R);
  } else if (c.variant == "prefix_lm") {
    auto prefix = randomPrefixLengths(c.batch, c.keys, rng);
    v.argTypes.push_back("tensor<?xi32>");
    v.inputs.push_back(intsToRuntime(*prefix));
    v.maskMod = R"(
      %p = tensor.extract %arg0[%b] : tensor<?xi32>
      %kpi = arith.index_cast %kp : index to i32
      %inPrefix = arith.cmpi slt, %kpi, %p : i32
      %past = arith.cmpi sle, %kp, %qp : index
      %in = arith.ori %inPrefix, %past : i1
      attn.yield %in : i1
    )";
    v.score.maskMod = prefixLmReference(prefix);
  } else if (c.variant == "head_prefix") {
    // Heads 0-2 see every key, the others only keys from 64 on: whole key
    // tiles are full for some heads and empty for others.
    v.maskMod = R"(
      %c3 = arith.constant 3 : index
      %c64 = arith.constant 64 : index
      %low = arith.cmpi slt, %h, %c3 : index
      %late = arith.cmpi sge, %kp, %c64 : index
      %in = arith.ori %low, %late : i1
      attn.yield %in : i1
    )";
    v.score.maskMod = [](int64_t, int64_t h, int64_t, int64_t kp) {
      return h < 3 || kp >= 64;
    };
  } else if (c.variant == "neg_inf_scores") {
    // -inf scores hide keys as a mask does, and a row whose every score is
    // -inf gives o = 0 and lse = -inf (no NaN from -inf - -inf).
    v.scoreMod = R"(
      %c4 = arith.constant 4 : index
      %c5 = arith.constant 5 : index
      %c0 = arith.constant 0 : index
      %ninf = arith.constant 0xFF800000 : f32
      %rk = arith.remui %kp, %c4 : index
      %rq = arith.remui %qp, %c5 : index
      %hk = arith.cmpi eq, %rk, %c0 : index
      %hq = arith.cmpi eq, %rq, %c0 : index
      %hide = arith.ori %hk, %hq : i1
      %r = arith.select %hide, %ninf, %s : f32
      attn.yield %r : f32
    )";
    v.score.scoreMod = [](double s, int64_t, int64_t, int64_t qp, int64_t kp) {
      return kp % 4 == 0 || qp % 5 == 0
                 ? -std::numeric_limits<double>::infinity()
                 : s;
    };
  } else if (c.variant == "edge_arithmetic") {
    addEdgeArithmetic(v, H);
  } else if (c.variant == "math_ops") {
    addMathOps(v, H);
  } else if (c.variant == "empty_rows") {
    v.maskMod = R"(
      %c3 = arith.constant 3 : index
      %c0 = arith.constant 0 : index
      %r = arith.remui %qp, %c3 : index
      %in = arith.cmpi ne, %r, %c0 : index
      attn.yield %in : i1
    )";
    v.score.maskMod = [](int64_t, int64_t, int64_t qp, int64_t) {
      return qp % 3 != 0;
    };
  }
  if (c.variant == "document" || c.variant == "alibi_document" ||
      c.variant == "long_documents") {
    // Long documents leave whole tiles inside one document (full) or
    // across two (empty).
    int64_t longest = c.variant == "long_documents" ? 90 : 12;
    auto docs = std::make_shared<ref::IntTensor>(
        randomDocuments(c.batch, c.keys, rng, longest));
    v.argTypes.push_back("tensor<?x?xi32>");
    v.inputs.push_back(intsToRuntime(*docs));
    std::string region = kDocumentRegion;
    std::string name = "%arg" + std::to_string(v.argTypes.size() - 1);
    for (size_t at; (at = region.find("%doc")) != std::string::npos;)
      region.replace(at, 4, name);
    v.maskMod = region;
    v.score.maskMod = documentReference(docs);
  }
  return v;
}

/// The entry: q, k, v, [selection | parents], [gate], the variant's
/// inputs; it returns o and lse.
std::string sourceOf(const VariantCase &c, const Variant &v, int64_t slots) {
  auto t = [](std::initializer_list<std::string> dims, const char *element) {
    std::string type = "tensor<";
    for (const std::string &d : dims)
      type += d + "x";
    return type + element + ">";
  };
  std::string H = std::to_string(c.heads), Hkv = std::to_string(c.kvHeads);
  std::string D = std::to_string(c.headDim), Dv = std::to_string(c.valueDim);
  std::string qType = t({"?", H, "?", D}, "f32"),
              kType = t({"?", Hkv, "?", D}, "f32"),
              vType = t({"?", Hkv, "?", Dv}, "f32"),
              oType = t({"?", H, "?", Dv}, "f32"),
              lseType = t({"?", H, "?"}, "f32");
  std::string selectionType =
      c.op == OpKind::Sparse ? t({"?", H, "?", std::to_string(slots)}, "i32")
                             : t({"?", "?"}, "i32");
  std::ostringstream ir;
  ir << "func.func @layer(%q: " << qType << ", %k: " << kType
     << ", %v: " << vType;
  if (c.op != OpKind::Dense)
    ir << ", %sel: " << selectionType;
  if (c.gate)
    ir << ", %g: " << oType;
  for (size_t i = 0; i < v.argTypes.size(); ++i)
    ir << ", %arg" << i << ": " << v.argTypes[i];
  ir << ") -> (" << oType << ", " << lseType << ") {\n";
  const char *name = c.op == OpKind::Dense    ? "attn.sdpa"
                     : c.op == OpKind::Sparse ? "attn.sparse_sdpa"
                                              : "attn.tree_sdpa";
  ir << "  %o, %lse = " << name << " %q, %k, %v";
  if (c.op != OpKind::Dense)
    ir << ", %sel";
  if (c.gate)
    ir << " gate(%g)";
  ir << " {return_lse";
  if (c.op == OpKind::Sparse)
    ir << ", block_size = 4";
  if (c.op != OpKind::Tree)
    ir << ", mask = #attn.mask<" << c.mask << ">";
  ir << "} : " << qType << ", " << kType << ", " << vType;
  if (c.op != OpKind::Dense)
    ir << ", " << selectionType;
  if (c.gate)
    ir << ", " << oType;
  ir << "\n";
  if (!v.scoreMod.empty())
    ir << "  score_mod {\n  ^bb0(%s: f32, %b: index, %h: index, %qp: index, "
          "%kp: index):\n"
       << v.scoreMod << "  }\n";
  if (!v.maskMod.empty())
    ir << "  mask_mod {\n  ^bb0(%b: index, %h: index, %qp: index, %kp: "
          "index):\n"
       << v.maskMod << "  }\n";
  ir << "  return %o, %lse : " << oType << ", " << lseType << "\n}\n";
  return ir.str();
}

class Variants
    : public testing::TestWithParam<std::tuple<VariantCase, Backend>> {};

TEST_P(Variants, MatchReference) {
  const auto &[c, backend] = GetParam();
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  Variant variant = makeVariant(c, rng);
  const int64_t slots = 4;
  std::string source = sourceOf(c, variant, slots);
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, attnIR(source), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model) << source;

  ref::Tensor q =
      randomF32({c.batch, c.heads, c.queries, c.headDim}, rng, -2.0, 2.0);
  ref::Tensor k =
      randomF32({c.batch, c.kvHeads, c.keys, c.headDim}, rng, -2.0, 2.0);
  ref::Tensor v =
      randomF32({c.batch, c.kvHeads, c.keys, c.valueDim}, rng, -1.0, 1.0);
  std::vector<Tensor> inputs{toRuntime(q), toRuntime(k), toRuntime(v)};
  std::optional<ref::IntTensor> selection;
  if (c.op == OpKind::Sparse) {
    // Blocks of 4 keys, -1 padding and repeats among them.
    int64_t blocks = (c.keys + 3) / 4;
    selection = ref::IntTensor({c.batch, c.heads, c.queries, slots});
    for (int32_t &entry : selection->values())
      entry = static_cast<int32_t>(rng() % (blocks + 1)) - 1;
    inputs.push_back(intsToRuntime(*selection));
  } else if (c.op == OpKind::Tree) {
    selection = randomParents(c.batch, c.queries, rng);
    inputs.push_back(intsToRuntime(*selection));
  }
  std::optional<ref::Tensor> gate;
  if (c.gate) {
    gate = randomF32({c.batch, c.heads, c.queries, c.valueDim}, rng, -3.0, 3.0);
    inputs.push_back(toRuntime(*gate));
  }
  for (const Tensor &input : variant.inputs)
    inputs.push_back(input);
  std::vector<Tensor> outputs = runEntry(*model, "layer", inputs);
  ASSERT_EQ(outputs.size(), 2u);

  ref::Mask mask = c.mask == "none" ? ref::Mask::none() : ref::Mask::causal();
  if (variant.window)
    mask = ref::Mask::slidingWindow(*variant.window);
  const ref::Tensor *gateRef = gate ? &*gate : nullptr;
  ref::AttentionResult expected =
      c.op == OpKind::Dense ? ref::sdpa(q, k, v, mask, variant.score, gateRef)
      : c.op == OpKind::Sparse
          ? ref::sparseSdpa(q, k, v, *selection, 4, mask, variant.score,
                            gateRef)
          : ref::treeSdpa(q, k, v, *selection, variant.window, variant.score,
                          gateRef);
  for (auto [actual, wanted, what] :
       {std::tuple{&outputs[0], &expected.output, "o"},
        std::tuple{&outputs[1], &expected.lse, "lse"}}) {
    ASSERT_EQ(actual->shape, wanted->shape()) << what;
    double error = ref::maxRelativeError(fromRuntime(*actual), *wanted);
    EXPECT_LE(error, 1e-5) << what;
  }
}

std::vector<VariantCase> cases() {
  const char *variants[] = {
      "softcap_region", "window_region",  "head_table",      "alibi",
      "relative_bias",  "document",       "prefix_lm",       "empty_rows",
      "alibi_document", "neg_inf_scores", "edge_arithmetic", "math_ops"};
  std::vector<VariantCase> all;
  for (const char *variant : variants) {
    std::string name = variant;
    // Masks the variant states itself want the op's mask to be none.
    bool ownMask = name == "window_region" || name == "prefix_lm";
    auto add = [&](VariantCase c) {
      c.variant = name;
      c.label = name + "_" + c.label;
      if (ownMask && c.op != OpKind::Tree)
        c.mask = "none";
      all.push_back(c);
    };
    VariantCase prefill;
    prefill.label = "prefill";
    prefill.gate = true;
    add(prefill);
    VariantCase decode;
    decode.label = "decode";
    decode.queries = 1;
    decode.keys = 53;
    add(decode);
    VariantCase shorter;
    shorter.label = "lq_below_lk";
    shorter.queries = 13;
    shorter.keys = 50;
    shorter.heads = shorter.kvHeads = 3;
    add(shorter);
    VariantCase sparse;
    sparse.label = "sparse";
    sparse.op = OpKind::Sparse;
    sparse.queries = 19;
    sparse.keys = 41;
    add(sparse);
    VariantCase fewNodes;
    fewNodes.label = "tree_5_nodes";
    fewNodes.op = OpKind::Tree;
    fewNodes.queries = 5;
    fewNodes.keys = 35;
    fewNodes.gate = true;
    add(fewNodes);
    VariantCase manyNodes;
    manyNodes.label = "tree_23_nodes";
    manyNodes.op = OpKind::Tree;
    manyNodes.queries = 23;
    manyNodes.keys = 60;
    add(manyNodes);
  }
  // Block masks: prefill long enough for tiles the mask_mod shows whole or
  // hides whole, per batch row (documents) and per head.
  for (const char *variant : {"long_documents", "head_prefix"}) {
    VariantCase c;
    c.variant = variant;
    c.label = std::string(variant) + "_prefill_block_mask";
    c.queries = c.keys = 203;
    c.gate = true;
    all.push_back(c);
    c.label = std::string(variant) + "_lq_below_lk_block_mask";
    c.queries = 71;
    c.mask = "none";
    c.gate = false;
    all.push_back(c);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Regions, Variants,
                         testing::Combine(testing::ValuesIn(cases()),
                                          allBackends()),
                         LabelAndBackend());

//===----------------------------------------------------------------------===//
// The named variants of model descriptions (SPEC §7), with their extra
// entry inputs in SPEC's order, combined with gates, windows, GQA,
// sparsity and trees.
//===----------------------------------------------------------------------===//

struct NamedCase {
  std::string label;
  std::string scoreMod; ///< JSON value, or empty
  std::string maskMod;  ///< JSON value, or empty
  std::string mask = "\"causal\"";
  std::string gate = "none";
  int64_t heads = 6, kvHeads = 2, headDim = 24, valueDim = 20;
  int64_t batch = 2, queries = 29, keys = 29;
  /// top_k blocks of 4 keys; 0: dense.
  int64_t topK = 0;
  /// Also run the `.tree` entry with this many nodes; 0: no tree.
  int64_t treeNodes = 0;
  /// Give the named variants as `{"func": ...}` attn IR of the same math,
  /// reading inputs of the same names, instead of by name.
  bool asFuncs = false;
};

/// `text` as a JSON string.
std::string jsonString(const std::string &text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      quoted += '\\';
    quoted += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return quoted + "\"";
}

/// The attn IR of `{"relative_bias": R}` and `"document"`, as a user would
/// write them for `{"func": ...}`.
std::string relativeBiasFunc(int64_t heads, int64_t radius) {
  std::string table = "tensor<" + std::to_string(heads) + "x" +
                      std::to_string(2 * radius + 1) + "xf32>";
  return "func.func @bias(%s: f32, %b: index, %h: index, %qp: index,\n"
         "    %kp: index, %t: " +
         table +
         " {attn.name = \"rel_bias\"}) -> f32 {\n"
         "  %d = arith.subi %kp, %qp : index\n"
         "  %lo = arith.constant -" +
         std::to_string(radius) +
         " : index\n"
         "  %hi = arith.constant " +
         std::to_string(radius) +
         " : index\n"
         "  %c = arith.maxsi %d, %lo : index\n"
         "  %c2 = arith.minsi %c, %hi : index\n"
         "  %col = arith.addi %c2, %hi : index\n"
         "  %x = tensor.extract %t[%h, %col] : " +
         table +
         "\n"
         "  %r = arith.addf %s, %x : f32\n"
         "  return %r : f32\n}";
}

const char *const kDocumentFunc =
    "func.func @docs(%b: index, %h: index, %qp: index, %kp: index,\n"
    "    %ids: tensor<?x?xi32> {attn.name = \"doc_ids\"}) -> i1 {\n"
    "  %mine = tensor.extract %ids[%b, %qp] : tensor<?x?xi32>\n"
    "  %theirs = tensor.extract %ids[%b, %kp] : tensor<?x?xi32>\n"
    "  %same = arith.cmpi eq, %mine, %theirs : i32\n"
    "  return %same : i1\n}";

void PrintTo(const NamedCase &c, std::ostream *os) { *os << c.label; }

std::string namedJson(const NamedCase &c) {
  std::ostringstream json;
  json << R"({"model": "variants", "layers": [{"name": "layer",)"
       << R"( "type": "attention", "num_heads": )" << c.heads
       << R"(, "num_kv_heads": )" << c.kvHeads << R"(, "head_dim": )"
       << c.headDim << R"(, "value_dim": )" << c.valueDim << R"(, "mask": )"
       << c.mask << R"(, "gate": ")" << c.gate << '"';
  if (c.asFuncs) {
    // The funcs this test writes: a relative bias and a document mask.
    if (!c.scoreMod.empty()) {
      const int64_t radius =
          std::stoll(c.scoreMod.substr(c.scoreMod.find(':') + 1));
      json << R"(, "score_mod": {"func": )"
           << jsonString(relativeBiasFunc(c.heads, radius)) << "}";
    }
    if (!c.maskMod.empty())
      json << R"(, "mask_mod": {"func": )" << jsonString(kDocumentFunc) << "}";
  } else {
    if (!c.scoreMod.empty())
      json << R"(, "score_mod": )" << c.scoreMod;
    if (!c.maskMod.empty())
      json << R"(, "mask_mod": )" << c.maskMod;
  }
  if (c.topK)
    json << R"(, "sparsity": {"method": "top_k", "block_size": 4, "top_k": )"
         << c.topK << "}";
  if (c.treeNodes)
    json << R"(, "tree": true)";
  json << "}]}";
  return json.str();
}

/// The reference of the case's variants, and the runtime inputs they add
/// (rel_bias, doc_ids, prefix_len) for `keys` keys.
ref::Score namedScore(const NamedCase &c, int64_t keys, std::mt19937_64 &rng,
                      std::vector<Tensor> &extra) {
  ref::Score score;
  const int64_t H = c.heads;
  if (c.scoreMod == "\"alibi\"") {
    score.scoreMod = alibiReference(H);
  } else if (!c.scoreMod.empty()) { // {"relative_bias": R}
    const int64_t R = std::stoll(c.scoreMod.substr(c.scoreMod.find(':') + 1));
    auto table =
        std::make_shared<ref::Tensor>(randomF32({H, 2 * R + 1}, rng, -3, 3));
    extra.push_back(toRuntime(*table));
    score.scoreMod = relativeBiasReference(table, R);
  }
  if (c.maskMod == "\"document\"") {
    auto docs =
        std::make_shared<ref::IntTensor>(randomDocuments(c.batch, keys, rng));
    extra.push_back(intsToRuntime(*docs));
    score.maskMod = documentReference(docs);
  } else if (c.maskMod == "\"prefix_lm\"") {
    auto prefix = randomPrefixLengths(c.batch, keys, rng);
    extra.push_back(intsToRuntime(*prefix));
    score.maskMod = prefixLmReference(prefix);
  }
  return score;
}

void expectMatches(const Tensor &actual, const ref::Tensor &expected,
                   const char *what) {
  ASSERT_EQ(actual.shape, expected.shape()) << what;
  EXPECT_LE(ref::maxRelativeError(fromRuntime(actual), expected), 1e-5) << what;
}

class NamedVariants
    : public testing::TestWithParam<std::tuple<NamedCase, Backend>> {};

TEST_P(NamedVariants, MatchReference) {
  const auto &[c, backend] = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(backend, modelDescription(namedJson(c)), 2, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  std::mt19937_64 rng(std::hash<std::string>()(c.label));
  const ref::Mask mask = referenceMask(c.mask);

  ref::Tensor q =
      randomF32({c.batch, c.heads, c.queries, c.headDim}, rng, -2.0, 2.0);
  ref::Tensor k =
      randomF32({c.batch, c.kvHeads, c.keys, c.headDim}, rng, -2.0, 2.0);
  ref::Tensor v =
      randomF32({c.batch, c.kvHeads, c.keys, c.valueDim}, rng, -1.0, 1.0);
  auto gateOf = [&](int64_t rows) -> std::optional<ref::Tensor> {
    if (c.gate == "none")
      return std::nullopt;
    return randomF32(
        {c.batch, c.heads, rows, c.gate == "elementwise" ? c.valueDim : 1}, rng,
        -3.0, 3.0);
  };
  std::optional<ref::Tensor> gate = gateOf(c.queries);
  std::vector<Tensor> inputs{toRuntime(q), toRuntime(k), toRuntime(v)};
  if (gate)
    inputs.push_back(toRuntime(*gate));
  std::optional<ref::Tensor> meta;
  if (c.topK) {
    meta = ref::blockMeta(k, 4);
    inputs.push_back(toRuntime(*meta));
  }
  ref::Score score = namedScore(c, c.keys, rng, inputs);
  std::vector<Tensor> out = runEntry(*model, "layer", inputs);
  ASSERT_EQ(out.size(), 1u);
  const ref::Tensor *g = gate ? &*gate : nullptr;
  ref::AttentionResult expected;
  if (c.topK) {
    // The selection ranks blocks without the variant (SPEC §7).
    ref::IntTensor blocks =
        ref::selectTopK(q, *meta, c.keys, mask, {}, {4, c.topK, 0, 0});
    expected = ref::sparseSdpa(q, k, v, blocks, 4, mask, score, g);
  } else {
    expected = ref::sdpa(q, k, v, mask, score, g);
  }
  expectMatches(out[0], expected.output, "o");

  if (!c.treeNodes)
    return;
  // .tree: q [B, H, T, D], k, v (P + T keys), parents (+ gate), variant
  // inputs for the P + T keys.
  const int64_t T = c.treeNodes, keys = c.keys + T;
  ref::Tensor tq = randomF32({c.batch, c.heads, T, c.headDim}, rng, -2.0, 2.0);
  ref::Tensor tk =
      randomF32({c.batch, c.kvHeads, keys, c.headDim}, rng, -2.0, 2.0);
  ref::Tensor tv =
      randomF32({c.batch, c.kvHeads, keys, c.valueDim}, rng, -1.0, 1.0);
  ref::IntTensor parents = randomParents(c.batch, T, rng);
  std::optional<ref::Tensor> treeGate = gateOf(T);
  std::vector<Tensor> treeInputs{toRuntime(tq), toRuntime(tk), toRuntime(tv),
                                 intsToRuntime(parents)};
  if (treeGate)
    treeInputs.push_back(toRuntime(*treeGate));
  ref::Score treeScore = namedScore(c, keys, rng, treeInputs);
  std::vector<Tensor> treeOut = runEntry(*model, "layer.tree", treeInputs);
  ASSERT_EQ(treeOut.size(), 1u);
  std::optional<int64_t> window;
  if (mask.kind == ref::MaskKind::SlidingWindow)
    window = mask.window;
  expectMatches(treeOut[0],
                ref::treeSdpa(tq, tk, tv, parents, window, treeScore,
                              treeGate ? &*treeGate : nullptr)
                    .output,
                "tree o");
}

std::vector<NamedCase> namedCases() {
  std::vector<NamedCase> all;
  auto add = [&](NamedCase c) { all.push_back(std::move(c)); };
  add({.label = "alibi_prefill_gated",
       .scoreMod = "\"alibi\"",
       .gate = "elementwise"});
  add({.label = "alibi_decode_gqa3",
       .scoreMod = "\"alibi\"",
       .queries = 1,
       .keys = 77});
  add({.label = "relative_bias_window_headwise_gate",
       .scoreMod = R"({"relative_bias": 5})",
       .mask = R"({"sliding_window": 9})",
       .gate = "headwise"});
  add({.label = "document_lq_below_lk",
       .maskMod = "\"document\"",
       .heads = 4,
       .kvHeads = 4,
       .queries = 11,
       .keys = 43});
  add({.label = "prefix_lm_none",
       .maskMod = "\"prefix_lm\"",
       .mask = "\"none\""});
  add({.label = "alibi_document_topk",
       .scoreMod = "\"alibi\"",
       .maskMod = "\"document\"",
       .queries = 21,
       .keys = 45,
       .topK = 4});
  add({.label = "relative_bias_document_tree",
       .scoreMod = R"({"relative_bias": 2})",
       .maskMod = "\"document\"",
       .gate = "elementwise",
       .treeNodes = 7});
  add({.label = "alibi_prefix_lm_window_tree",
       .scoreMod = "\"alibi\"",
       .maskMod = "\"prefix_lm\"",
       .mask = R"({"sliding_window": 12})",
       .treeNodes = 19});
  // The same variants as the user's own functions ({"func": ...}).
  add({.label = "funcs_relative_bias_document_tree",
       .scoreMod = R"({"relative_bias": 3})",
       .maskMod = "\"document\"",
       .gate = "elementwise",
       .treeNodes = 9,
       .asFuncs = true});
  add({.label = "funcs_document_topk",
       .maskMod = "\"document\"",
       .queries = 17,
       .keys = 38,
       .topK = 3,
       .asFuncs = true});
  add({.label = "funcs_relative_bias_decode",
       .scoreMod = R"({"relative_bias": 6})",
       .queries = 1,
       .keys = 61,
       .asFuncs = true});
  return all;
}

/// The runtime checks the variant inputs' shapes against the entry's
/// symbolic dims: doc_ids is [B, Lk], prefix_len [B], rel_bias [H, 2R+1].
TEST(VariantInputs, WrongShapesAreErrorsNamingTheArgument) {
  NamedCase c{.label = "shapes",
              .scoreMod = R"({"relative_bias": 2})",
              .maskMod = "\"document\""};
  std::unique_ptr<Model> model = compileAndLoad(namedJson(c), 1);
  ASSERT_TRUE(model);
  int32_t entry = -1;
  ASSERT_TRUE(model->findEntry("layer", entry).ok());
  auto run = [&](std::vector<int64_t> biasShape,
                 std::vector<int64_t> docShape) {
    std::vector<Tensor> inputs{Tensor(ATTN_F32, {2, c.heads, 9, c.headDim}),
                               Tensor(ATTN_F32, {2, c.kvHeads, 11, c.headDim}),
                               Tensor(ATTN_F32, {2, c.kvHeads, 11, c.valueDim}),
                               Tensor(ATTN_F32, biasShape),
                               Tensor(ATTN_I32, docShape)};
    std::vector<Tensor> outputs;
    return model->run(entry, inputs, outputs);
  };
  EXPECT_TRUE(run({c.heads, 5}, {2, 11}).ok());
  Status keys = run({c.heads, 5}, {2, 12});
  EXPECT_FALSE(keys.ok());
  EXPECT_NE(keys.message.find("doc_ids"), std::string::npos) << keys.message;
  Status batch = run({c.heads, 5}, {3, 11});
  EXPECT_FALSE(batch.ok());
  EXPECT_NE(batch.message.find("doc_ids"), std::string::npos) << batch.message;
  Status table = run({c.heads, 7}, {2, 11});
  EXPECT_FALSE(table.ok());
  EXPECT_NE(table.message.find("rel_bias"), std::string::npos) << table.message;
}

/// A wrong `{"func": ...}` variant is an error of the compile call that
/// names the JSON path of the text, with line and column.
TEST(VariantFuncs, ErrorsNameTheJsonPath) {
  NamedCase c{.label = "errors", .maskMod = "\"document\"", .asFuncs = true};
  std::string json = namedJson(c);
  // The document mask as a score_mod: the wrong block arguments.
  const std::string from = R"("mask_mod": {"func": )";
  json.replace(json.find(from), from.size(), R"("score_mod": {"func": )");
  llvm::Expected<std::string> binary =
      mlir::attn::compileModelDescription(json, testCpu());
  ASSERT_FALSE(binary);
  EXPECT_EQ(llvm::toString(binary.takeError()),
            "$.layers[0].score_mod.func:1:1: a score_mod function takes (s: "
            "f32, b, h, qp, kp: index), then the tensors it reads");
}

/// A region may read any tensor the caller passes, even an empty one: it
/// reads as 0 (never outside the buffer), on every backend's kernels.
TEST(VariantInputs, EmptyTensorReadsAsZero) {
  const char *source = R"mlir(
    func.func @layer(%q: tensor<?x2x?x8xf32>, %k: tensor<?x2x?x8xf32>,
                     %v: tensor<?x2x?x8xf32>, %bias: tensor<?xf32>)
        -> tensor<?x2x?x8xf32> {
      %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
          : tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>, tensor<?x2x?x8xf32>
          score_mod {
          ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
            %d = arith.subi %qp, %kp : index
            %x = tensor.extract %bias[%d] : tensor<?xf32>
            %r = arith.addf %s, %x : f32
            attn.yield %r : f32
          }
      return %o : tensor<?x2x?x8xf32>
    }
  )mlir";
  for (Backend backend : {Backend::Cpu, Backend::CudaKernelsOnCpu}) {
    std::string skip;
    std::unique_ptr<Model> model =
        compileAndLoadFor(backend, attnIR(source), 2, skip);
    ASSERT_TRUE(model);
    std::mt19937_64 rng(5);
    for (int64_t rows : {1, 40}) {
      ref::Tensor q = randomF32({1, 2, rows, 8}, rng, -1.0, 1.0);
      ref::Tensor k = randomF32({1, 2, 40, 8}, rng, -1.0, 1.0);
      ref::Tensor v = randomF32({1, 2, 40, 8}, rng, -1.0, 1.0);
      std::vector<Tensor> out = runEntry(
          *model, "layer",
          {toRuntime(q), toRuntime(k), toRuntime(v), Tensor(ATTN_F32, {0})});
      ASSERT_EQ(out.size(), 1u);
      expectMatches(out[0], ref::sdpa(q, k, v, ref::Mask::causal()).output,
                    backendName(backend));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Descriptions, NamedVariants,
                         testing::Combine(testing::ValuesIn(namedCases()),
                                          allBackends()),
                         LabelAndBackend());

} // namespace
