//===- attention-bench.cpp - Softmax attention against the machine --------===//
//
// Not a test: prints a table. Every number is a ratio against a ceiling
// measured in the same run on the same threads:
//
//  * prefill (B=1, H=8, L=1024/2048/4096, D=128; dense and causal; Hkv 8
//    and 2) in GFLOP/s over OpenBLAS sgemm (1024^3 on the same threads).
//    FLOPs count only visible work: 4*D per visible (query, key) pair, so
//    causal counts L(L+1)/2 pairs.
//  * decode (Lq=1, Lk=4K..32K) in GB/s of K and V read, over a memcpy of a
//    buffer far larger than the caches, counted as STREAM does (bytes read
//    + bytes written), and over a read of that buffer (decode only reads),
//    both timed right after each row (the bandwidth of this shared machine
//    drifts with its neighbours' load). The caches are emptied before each
//    timed call, so K and V come from DRAM.
//
//  * sparse decode (Lq=1, Lk=8K..32K, Hkv 2): Quest top-k (64 blocks of
//    16 keys, 1 sink and 1 local block) and top-k then Twilight top-p 0.9
//    with the exact and the int4 estimator, timed like decode, as a speedup
//    over dense decode measured beside them, and in GB/s over memcpy of what
//    they read at least: the block metadata and each query head's kept K and V
//    rows.
//  * tree verification (T = 8 and 64 draft nodes, random trees, over
//    8K-32K keys, H = 8, Hkv = 2) in GFLOP/s of visible work over sgemm,
//    beside dense attention of as many query rows over the same keys.
//  * variants (SPEC §7; causal prefill, H = 8, Hkv = 2, D = 128, L = 4096):
//    ALiBi, a relative-bias table (R = 64) and a document mask of 8
//    documents of L / 8 tokens, each as a ratio to plain causal attention
//    timed beside it. A document mask leaves 1/8 of the causal pairs
//    visible, so block masks should bring it near 0.125.
//
//   attention-bench [--threads N] [--repeat N] [--quick]
//                   [--only prefill|decode|sparse|tree|variants]
//
//===----------------------------------------------------------------------===//

#include "bench/Ceilings.h"
#include "bench/Variants.h"

#include <random>

namespace {

using namespace attn::bench;

std::unique_ptr<attn::Model> compileLayer(int heads, int kvHeads, int dim,
                                          const char *mask, int threads) {
  char json[512];
  std::snprintf(json, sizeof(json),
                R"({"model": "bench", "dtype": "f32", "layers": [{"name": )"
                R"("layer", "type": "attention", "num_heads": %d, )"
                R"("num_kv_heads": %d, "head_dim": %d, "mask": "%s"}]})",
                heads, kvHeads, dim, mask);
  return attn::bench::compileAndLoad(json, threads);
}

/// Runs entry `entry` of `model`; exits with the runtime's message if the
/// call fails.
void runOrExit(attn::Model &model, int32_t entry,
               const std::vector<attn::Tensor> &inputs,
               std::vector<attn::Tensor> &outputs) {
  attn::Status status = model.run(entry, inputs, outputs);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.message.c_str());
    std::exit(1);
  }
}

/// The median of 4 * repeat calls of `run`, each after the caches are
/// emptied, so that K and V come from DRAM as in a model whose layers each
/// read their cache once per token. Calls right after a large copy run up
/// to 3x slower for ~10 ms on this VM (and not after reads alone), so the
/// calls are warmed up for 100 ms first; time the ceiling after them.
template <typename F>
double coldMedianSeconds(MemcpyCeiling &ceiling, int repeat, F &&run) {
  auto warmUpEnd = Clock::now() + std::chrono::milliseconds(100);
  for (int calls = 0; calls < 3 || Clock::now() < warmUpEnd; ++calls)
    run();
  std::vector<double> times;
  for (int round = 0; round < 4 * repeat; ++round) {
    ceiling.evictCaches();
    auto begin = Clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return median(times);
}

std::vector<attn::Tensor> randomInputs(int heads, int kvHeads, int64_t lq,
                                       int64_t lk, int dim) {
  std::vector<attn::Tensor> inputs{
      attn::Tensor(ATTN_F32, {1, heads, lq, dim}),
      attn::Tensor(ATTN_F32, {1, kvHeads, lk, dim}),
      attn::Tensor(ATTN_F32, {1, kvHeads, lk, dim})};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (attn::Tensor &t : inputs)
    for (int64_t i = 0; i < t.numElements(); ++i)
      t.f32()[i] = uniform(rng);
  return inputs;
}

/// The prefill table: GFLOP/s of visible work over sgemm.
bool prefillTable(const BenchOptions &options, double sgemm) {
  const int heads = 8, dim = 128;
  std::printf("| prefill | Hkv | L | ms | GFLOP/s | x sgemm |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::vector<int64_t> lengths = options.quick
                                     ? std::vector<int64_t>{1024}
                                     : std::vector<int64_t>{1024, 2048, 4096};
  for (const char *mask : {"none", "causal"})
    for (int kvHeads : {8, 2}) {
      auto model = compileLayer(heads, kvHeads, dim, mask, options.threads);
      if (!model)
        return false;
      for (int64_t l : lengths) {
        std::vector<attn::Tensor> inputs =
                                      randomInputs(heads, kvHeads, l, l, dim),
                                  outputs;
        double seconds = medianSeconds(options.repeat, [&] {
          attn::Status status = model->run(0, inputs, outputs);
          if (!status.ok()) {
            std::fprintf(stderr, "%s\n", status.message.c_str());
            std::exit(1);
          }
        });
        double pairs = std::strcmp(mask, "causal") == 0
                           ? double(l) * (l + 1) / 2
                           : double(l) * l;
        double gflops = 4.0 * heads * dim * pairs / seconds / 1e9;
        std::printf("| %s | %d | %lld | %.2f | %.1f | %.2f |\n",
                    std::strcmp(mask, "none") == 0 ? "dense" : "causal",
                    kvHeads, static_cast<long long>(l), seconds * 1e3, gflops,
                    gflops / sgemm);
      }
    }
  std::printf("\n");
  return true;
}

/// The decode table: GB/s of K and V read over memcpy.
bool decodeTable(const BenchOptions &options) {
  const int heads = 8, dim = 128;
  std::printf("| decode | Hkv | Lk | ms | GB/s (K+V) | memcpy GB/s | x memcpy "
              "| read GB/s | x read |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::vector<int64_t> keyLengths =
      options.quick ? std::vector<int64_t>{4096}
                    : std::vector<int64_t>{4096, 8192, 16384, 32768};
  MemcpyCeiling ceiling(options.threads);
  for (int kvHeads : {8, 2}) {
    auto model = compileLayer(heads, kvHeads, dim, "causal", options.threads);
    if (!model)
      return false;
    for (int64_t lk : keyLengths) {
      std::vector<attn::Tensor> inputs =
                                    randomInputs(heads, kvHeads, 1, lk, dim),
                                outputs;
      const double bytes = 2.0 * kvHeads * lk * dim * 4;
      double seconds = coldMedianSeconds(ceiling, options.repeat, [&] {
        runOrExit(*model, 0, inputs, outputs);
      });
      double memcpyRate = ceiling.gbps(options.repeat);
      double readRate = ceiling.readGbps(options.repeat);
      double rate = bytes / seconds / 1e9;
      std::printf("| decode | %d | %lld | %.3f | %.1f | %.1f | %.2f | %.1f | "
                  "%.2f |\n",
                  kvHeads, static_cast<long long>(lk), seconds * 1e3, rate,
                  memcpyRate, rate / memcpyRate, readRate, rate / readRate);
    }
  }
  return true;
}

/// The sparse decode table: top-k and top-k + top-p against dense decode.
bool sparseTable(const BenchOptions &options) {
  const int heads = 8, kvHeads = 2, dim = 128, blockSize = 16, topK = 64;
  std::printf("| sparse decode (Lq = 1, causal, H = 8, Hkv = 2) | Lk | keys "
              "kept per head | ms | x dense speed | GB/s (meta + 8 heads x "
              "K,V of 64 blocks) | memcpy GB/s | x memcpy |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::vector<int64_t> keyLengths = options.quick
                                        ? std::vector<int64_t>{8192}
                                        : std::vector<int64_t>{8192, 32768};
  auto dense = compileLayer(heads, kvHeads, dim, "causal", options.threads);
  if (!dense)
    return false;
  MemcpyCeiling ceiling(options.threads);
  struct Budget {
    const char *label, *method, *topP;
  };
  for (const Budget &budget :
       {Budget{"top-k 64 x 16", "top_k", ""},
        Budget{"top-k 64 x 16, top-p 0.9", "top_p", R"("top_p": 0.9, )"},
        Budget{"top-k 64 x 16, top-p 0.9 (int4)", "top_p",
               R"("top_p": 0.9, "estimator": "int4", )"}}) {
    char json[768];
    std::snprintf(
        json, sizeof(json),
        R"({"model": "bench", "dtype": "f32", "layers": [{"name": "layer", )"
        R"("type": "attention", "num_heads": %d, "num_kv_heads": %d, )"
        R"("head_dim": %d, "mask": "causal", "sparsity": {"method": "%s", )"
        R"("block_size": %d, "top_k": %d, %s"sink_blocks": 1, )"
        R"("local_blocks": 1}}]})",
        heads, kvHeads, dim, budget.method, blockSize, topK, budget.topP);
    auto model = attn::bench::compileAndLoad(json, options.threads);
    int32_t entry = -1, metaEntry = -1;
    if (!model || !model->findEntry("layer", entry).ok() ||
        !model->findEntry("layer.meta", metaEntry).ok())
      return false;
    for (int64_t lk : keyLengths) {
      std::vector<attn::Tensor> inputs =
                                    randomInputs(heads, kvHeads, 1, lk, dim),
                                outputs, meta;
      // The metadata is kept next to the cache, not computed per token.
      runOrExit(*model, metaEntry, {inputs[1]}, meta);
      inputs.push_back(meta[0]);
      double seconds = coldMedianSeconds(ceiling, options.repeat, [&] {
        runOrExit(*model, entry, inputs, outputs);
      });
      std::vector<attn::Tensor> denseInputs(inputs.begin(), inputs.begin() + 3),
          denseOutputs;
      double denseSeconds = coldMedianSeconds(ceiling, options.repeat, [&] {
        runOrExit(*dense, 0, denseInputs, denseOutputs);
      });
      // What a row reads besides q: the metadata, then K and V of its 64
      // blocks (top-p scores all their keys, then attends to a subset).
      // Heads of a kv group that keep the same block read it from cache,
      // so this counts more than DRAM serves.
      const double keptKeys = double(topK) * blockSize;
      const double bytes =
          meta[0].numElements() * 4.0 + heads * keptKeys * 2.0 * dim * 4.0;
      double memcpyRate = ceiling.gbps(options.repeat);
      std::printf(
          "| %s | %lld | <= %.0f | %.3f | %.2f | %.1f | %.1f | %.2f |\n",
          budget.label, static_cast<long long>(lk), keptKeys, seconds * 1e3,
          denseSeconds / seconds, bytes / seconds / 1e9, memcpyRate,
          bytes / seconds / 1e9 / memcpyRate);
    }
  }
  return true;
}

/// The tree table: verification of a draft tree against dense attention
/// of as many rows, in GFLOP/s over sgemm.
bool treeTable(const BenchOptions &options, double sgemm) {
  const int heads = 8, kvHeads = 2, dim = 128;
  std::printf("| tree (H = 8, Hkv = 2, D = 128) | T | prefix | ms | GFLOP/s | "
              "x sgemm | dense rows ms | x dense speed |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  const char *json =
      R"({"model": "bench", "dtype": "f32", "layers": [{"name": "layer", )"
      R"("type": "attention", "num_heads": 8, "num_kv_heads": 2, )"
      R"("head_dim": 128, "mask": "causal", "tree": true}], )"
      R"("speculative": {"max_tree_nodes": 64}})";
  auto model = attn::bench::compileAndLoad(json, options.threads);
  int32_t treeEntry = -1, denseEntry = -1;
  if (!model || !model->findEntry("layer.tree", treeEntry).ok() ||
      !model->findEntry("layer", denseEntry).ok())
    return false;
  std::vector<int64_t> prefixes = options.quick
                                      ? std::vector<int64_t>{8192}
                                      : std::vector<int64_t>{8192, 32768};
  std::mt19937 rng(3);
  for (int64_t nodes : {8, 64})
    for (int64_t prefix : prefixes) {
      std::vector<attn::Tensor> inputs =
          randomInputs(heads, kvHeads, nodes, prefix + nodes, dim);
      std::vector<attn::Tensor> denseInputs = inputs, outputs;
      attn::Tensor parents(ATTN_I32, {1, nodes});
      for (int64_t t = 0; t < nodes; ++t)
        parents.i32()[t] = t == 0 ? -1 : static_cast<int32_t>(rng() % t);
      inputs.push_back(parents);
      double seconds = medianSeconds(options.repeat, [&] {
        runOrExit(*model, treeEntry, inputs, outputs);
      });
      double denseSeconds = medianSeconds(options.repeat, [&] {
        runOrExit(*model, denseEntry, denseInputs, outputs);
      });
      // Visible pairs: every node sees the prefix, and itself with its
      // ancestors (depth + 1 tree keys).
      std::vector<int64_t> depth(nodes, 0);
      double pairs = 0;
      for (int64_t t = 0; t < nodes; ++t) {
        if (t > 0)
          depth[t] = depth[parents.i32()[t]] + 1;
        pairs += prefix + depth[t] + 1;
      }
      double gflops = 4.0 * heads * dim * pairs / seconds / 1e9;
      std::printf("| tree | %lld | %lld | %.2f | %.1f | %.2f | %.2f | %.2f |\n",
                  static_cast<long long>(nodes), static_cast<long long>(prefix),
                  seconds * 1e3, gflops, gflops / sgemm, denseSeconds * 1e3,
                  denseSeconds / seconds);
    }
  std::printf("\n");
  return true;
}

/// The variants table: named variants (SPEC §7) in causal prefill, as
/// ratios to plain causal attention timed in the same run.
bool variantsTable(const BenchOptions &options) {
  const int heads = 8, kvHeads = 2, dim = 128;
  const int64_t l = options.quick ? 1024 : 4096;
  std::printf("| causal prefill, L = %lld | ms | x plain causal |\n",
              static_cast<long long>(l));
  std::printf("|---|---|---|\n");
  double plain = 0.0;
  for (const BenchVariant &variant : benchVariants()) {
    char json[512];
    std::snprintf(
        json, sizeof(json),
        R"({"model": "bench", "dtype": "f32", "layers": [{"name": )"
        R"("layer", "type": "attention", "num_heads": %d, )"
        R"("num_kv_heads": %d, "head_dim": %d, "mask": "causal"%s}]})",
        heads, kvHeads, dim, variant.keys);
    auto model = attn::bench::compileAndLoad(json, options.threads);
    if (!model)
      return false;
    std::vector<attn::Tensor> inputs = randomInputs(heads, kvHeads, l, l, dim),
                              outputs;
    appendVariantInputs(variant, 1, heads, l, inputs);
    double seconds = medianSeconds(
        options.repeat, [&] { runOrExit(*model, 0, inputs, outputs); });
    if (plain == 0.0)
      plain = seconds;
    std::printf("| %s | %.2f | %.3f |\n", variant.name, seconds * 1e3,
                seconds / plain);
  }
  std::printf("\n");
  return true;
}

} // namespace

int main(int argc, char **argv) {
  BenchOptions options;
  if (!options.parse(argc, argv))
    return 2;
  std::printf("threads=%d\n\n", options.threads);
  if (options.runs("prefill") || options.runs("tree")) {
    double sgemm = sgemmGflops(options.threads, options.repeat);
    std::printf("sgemm=%.1f GFLOP/s\n\n", sgemm);
    if (options.runs("prefill") && !prefillTable(options, sgemm))
      return 1;
    if (options.runs("tree") && !treeTable(options, sgemm))
      return 1;
  }
  if (options.runs("decode") && !decodeTable(options))
    return 1;
  if (options.runs("sparse") && !sparseTable(options))
    return 1;
  if (options.runs("variants") && !variantsTable(options))
    return 1;
  return 0;
}
