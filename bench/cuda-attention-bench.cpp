//===- cuda-attention-bench.cpp - Softmax attention on a CUDA GPU ---------===//
//
// Not a test: prints a table for issue NVVM's benchmark, timed on the
// device (attn_model_last_kernel_ms: CUDA events around the launches, the
// copies of inputs and outputs left out), median of --repeat runs after
// one warm-up:
//
//  * prefill, B=4, H=32, L=4096, D=128, bf16, dense and causal, in TFLOP/s
//    of visible work (4 D per visible (query, key) pair);
//  * decode, B=1, H=32, Hkv=8, D=128, bf16, Lq=1, Lk=4K..32K, in GB/s of K
//    and V read.
//
// The ceilings to divide by (PyTorch's scaled_dot_product_attention with
// the flash backend, FlexAttention, the card's copy bandwidth) come from
// bench/torch-attention-baseline.py, run in the same session:
//
//   cuda-attention-bench [--repeat N] [--sm sm_90a] [--cuda-path DIR]
//                        [--quick]
//
//===----------------------------------------------------------------------===//

#include "compiler/Compile.h"
#include "runtime/attn_runtime.hpp"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

struct Options {
  int repeat = 20;
  bool quick = false;
  std::string sm = "sm_90a", cudaPath = "/usr/local/cuda";

  bool parse(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--repeat" && i + 1 < argc)
        repeat = std::max(1, std::atoi(argv[++i]));
      else if (arg == "--sm" && i + 1 < argc)
        sm = argv[++i];
      else if (arg == "--cuda-path" && i + 1 < argc)
        cudaPath = argv[++i];
      else if (arg == "--quick")
        quick = true;
      else {
        std::fprintf(stderr,
                     "usage: %s [--repeat N] [--sm SM] [--cuda-path DIR] "
                     "[--quick]\n",
                     argv[0]);
        return false;
      }
    }
    return true;
  }
};

/// One bf16 attention layer compiled for the GPU and loaded on it; null
/// with the reason printed when there is no toolkit, driver or GPU.
std::unique_ptr<attn::Model> loadLayer(const Options &options, int heads,
                                       int kvHeads, int dim, const char *mask) {
  llvm::Expected<mlir::attn::CudaTarget> target =
      mlir::attn::CudaTarget::get(options.sm, options.cudaPath);
  if (!target) {
    std::fprintf(stderr, "%s\n", llvm::toString(target.takeError()).c_str());
    return nullptr;
  }
  char json[512];
  std::snprintf(json, sizeof(json),
                R"({"model": "bench", "dtype": "bf16", "layers": [{"name": )"
                R"("layer", "type": "attention", "num_heads": %d, )"
                R"("num_kv_heads": %d, "head_dim": %d, "mask": "%s"}]})",
                heads, kvHeads, dim, mask);
  mlir::attn::CompileOptions compile;
  compile.targets = mlir::attn::TargetSet::Cuda;
  compile.cuda = *target;
  llvm::Expected<std::string> binary = mlir::attn::compileModelDescription(
      json, mlir::attn::CpuTarget::host(), compile);
  if (!binary) {
    std::fprintf(stderr, "%s\n", llvm::toString(binary.takeError()).c_str());
    return nullptr;
  }
  std::unique_ptr<attn::Model> model;
  attn::Status status =
      attn::Model::loadMemory(binary->data(), binary->size(), 1, model);
  if (status.ok())
    status = model->setDevice(ATTN_DEVICE_CUDA);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.message.c_str());
    return nullptr;
  }
  return model;
}

/// q, k, v of random bf16 values in [-1, 1].
std::vector<attn::Tensor> randomInputs(int64_t batch, int heads, int kvHeads,
                                       int64_t lq, int64_t lk, int dim) {
  std::vector<attn::Tensor> inputs{
      attn::Tensor(ATTN_BF16, {batch, heads, lq, dim}),
      attn::Tensor(ATTN_BF16, {batch, kvHeads, lk, dim}),
      attn::Tensor(ATTN_BF16, {batch, kvHeads, lk, dim})};
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> mantissa(0, 127);
  std::bernoulli_distribution sign;
  for (attn::Tensor &t : inputs)
    for (int64_t i = 0; i < t.numElements(); ++i) // exponent 2^-1: [0.5, 1)
      t.bits16()[i] = static_cast<uint16_t>((sign(rng) ? 0x8000 : 0) | 0x3f00 |
                                            mantissa(rng));
  return inputs;
}

/// Median device milliseconds of `repeat` runs after a warm-up; negative
/// (with the error printed) on failure.
double deviceMs(attn::Model &model, const std::vector<attn::Tensor> &inputs,
                int repeat) {
  std::vector<attn::Tensor> outputs;
  std::vector<double> times;
  for (int r = 0; r <= repeat; ++r) {
    attn::Status status = model.run(0, inputs, outputs);
    double ms = 0;
    if (status.ok())
      status = model.lastKernelMs(ms);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message.c_str());
      return -1;
    }
    if (r > 0)
      times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (!options.parse(argc, argv))
    return 2;
  const int heads = 32, dim = 128;
  const int64_t batch = 4, length = options.quick ? 1024 : 4096;
  std::printf("| prefill | B | H | L | D | ms | TFLOP/s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const char *mask : {"none", "causal"}) {
    std::unique_ptr<attn::Model> model =
        loadLayer(options, heads, heads, dim, mask);
    if (!model)
      return 1;
    double ms =
        deviceMs(*model, randomInputs(batch, heads, heads, length, length, dim),
                 options.repeat);
    if (ms < 0)
      return 1;
    double pairs = std::string(mask) == "causal"
                       ? length * (length + 1) / 2.0
                       : static_cast<double>(length) * length;
    double flops = 4.0 * dim * pairs * batch * heads;
    std::printf("| %s | %lld | %d | %lld | %d | %.3f | %.1f |\n",
                mask[0] == 'n' ? "dense" : "causal",
                static_cast<long long>(batch), heads,
                static_cast<long long>(length), dim, ms, flops / ms / 1e9);
  }

  const int kvHeads = 8;
  std::printf("\n| decode | H | Hkv | Lk | ms | GB/s of K and V |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::unique_ptr<attn::Model> model =
      loadLayer(options, heads, kvHeads, dim, "causal");
  if (!model)
    return 1;
  for (int64_t keys : {4096, 8192, 16384, 32768}) {
    double ms = deviceMs(*model, randomInputs(1, heads, kvHeads, 1, keys, dim),
                         options.repeat);
    if (ms < 0)
      return 1;
    double bytes = 2.0 * kvHeads * keys * dim * 2; // K and V, bf16
    std::printf("| bf16 | %d | %d | %lld | %.4f | %.1f |\n", heads, kvHeads,
                static_cast<long long>(keys), ms, bytes / ms / 1e6);
  }
  return 0;
}
