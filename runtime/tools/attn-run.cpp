//===- attn-run.cpp - Run an entry of a compiled model --------------------===//
//
//   attn-run MODEL.attnb --list
//   attn-run MODEL.attnb --entry NAME --in A.npy [--in B.npy ...]
//            [--out O.npy ...] [--device cpu|cuda] [--threads N] [--repeat N]
//   attn-run MODEL.attnb --entry NAME --random SYM=N[,SYM=N...] [--seed S]
//            [--out O.npy ...] [--threads N] [--repeat N]
//
// SPEC §5: inputs in entry order as .npy files, outputs written as .npy
// only when the run succeeded; then, for each input the entry updates in
// place (SPEC §8: a state pool, a KV cache), an --out file for its updated
// value, in argument order. `--repeat N` runs once to warm up, then N
// times, and prints `median_ms=<float> min_ms=<float> runs=<N>`. `--random`
// makes inputs from the signature (f32 uniform in [-1, 1], i32 zeros, random
// valid trees, paths, ragged offsets and pool slots where an input has a
// value contract) with the dynamic dims given (a dim named `B+1` is one
// more than B), for trying a model without files.
//
//===----------------------------------------------------------------------===//

#include "runtime/Float16.h"
#include "runtime/Npy.h"
#include "runtime/attn_runtime.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <random>
#include <string>
#include <vector>

namespace {

/// Timed runs beyond this are a typo, not a benchmark.
constexpr long long kMaxRepeat = 1000000;

int usageError(const std::string &message) {
  std::fprintf(stderr,
               "attn-run: error: %s\n"
               "usage: attn-run MODEL.attnb --list\n"
               "       attn-run MODEL.attnb --entry NAME (--in A.npy ... | "
               "--random SYM=N,...)\n"
               "                [--out O.npy ...] [--device cpu|cuda] "
               "[--threads N] [--repeat N] [--seed S]\n",
               message.c_str());
  return 2;
}

int error(const std::string &message) {
  std::fprintf(stderr, "attn-run: error: %s\n", message.c_str());
  return 1;
}

bool parseInt(const std::string &text, long long &value) {
  if (text.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  value = std::strtoll(text.c_str(), &end, 10);
  return end && *end == '\0' && errno != ERANGE;
}

/// An argument's dtype, dims and contract; `queries` is the argument its
/// contract_queries names (unused when it names none).
std::string formatArgument(const attn_argument_info &info,
                           const attn_argument_info &queries) {
  // Key offsets checked against a draft tree's q or path, not the queries'
  // offsets.
  const bool treeQueries = info.contract_queries >= 0 && queries.rank != 1;
  std::string text = attn_dtype_name(info.dtype) + std::string(" [");
  for (int32_t d = 0; d < info.rank; ++d) {
    text += d ? ", " : "";
    if (info.dims[d] >= 0)
      text += std::to_string(info.dims[d]);
    else if (info.ceil_divs[d] > 0 && info.at_mosts[d] >= 0)
      text += "min(" + std::to_string(info.at_mosts[d]) + ", ceil(" +
              std::string(info.symbols[d]) + "/" +
              std::to_string(info.ceil_divs[d]) + "))";
    else if (info.ceil_divs[d] > 0)
      text += "ceil(" + std::string(info.symbols[d]) + "/" +
              std::to_string(info.ceil_divs[d]) + ")";
    else
      text += info.symbols[d];
  }
  text += "]";
  if (info.contract == ATTN_CONTRACT_TREE_PARENTS)
    text += " (tree parents: -1 for the root, then 0 <= parents[b][t] < t)";
  else if (info.contract == ATTN_CONTRACT_TREE_PATH)
    text += " (accepted path: nodes in [0, T) for the first length[b])";
  else if (info.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS)
    text += info.contract_queries < 0
                ? " (sequence offsets: 0, non-decreasing, up to the tokens)"
            : treeQueries
                ? " (sequence offsets: 0, non-decreasing, up to the tokens, "
                  "each sequence with at least its tree's T nodes, its last "
                  "T keys)"
                : " (sequence offsets: 0, non-decreasing, up to the tokens, "
                  "each sequence with at least its query rows)";
  else if (info.contract == ATTN_CONTRACT_POOL_SLOTS)
    text += " (pool slots: distinct, in [0, N))";
  else if (info.contract == ATTN_CONTRACT_CACHE_SLOTS)
    text += " (cache slots: -1 or distinct in [0, NP * P))";
  else if (info.contract == ATTN_CONTRACT_PAGE_TABLE)
    text += " (page table: pages in [0, NP) for each sequence's keys)";
  else if (info.contract == ATTN_CONTRACT_SEQUENCE_LENGTHS)
    text += info.contract_queries >= 0 ? " (key lengths: in [Lq, MP * P])"
                                       : " (key lengths: in [0, MP * P])";
  if (info.in_place)
    text += " (updated in place)";
  return text;
}

/// Random values that meet the value contracts of the entry's inputs:
/// random trees (each node's parent uniform among the earlier nodes) and
/// random paths with lengths in [1, T].
void meetContracts(attn_model *m, int32_t entry,
                   std::vector<attn::Tensor> &inputs, std::mt19937 &rng) {
  // A ragged batch's query offsets first: other contracts follow them.
  for (int pass = 0; pass < 2; ++pass)
    for (int32_t i = 0; i < static_cast<int32_t>(inputs.size()); ++i) {
      attn_argument_info info;
      attn_entry_argument(m, entry, i, &info);
      const bool queryOffsets =
          info.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS &&
          info.contract_queries < 0;
      if (info.contract == ATTN_CONTRACT_NONE || queryOffsets != (pass == 0))
        continue;
      attn::Tensor &tensor = inputs[i];
      int32_t *values = tensor.i32();
      const int64_t count = tensor.shape[0];
      const int64_t limit =
          info.contract_input >= 0 && !inputs[info.contract_input].shape.empty()
              ? inputs[info.contract_input].shape[0]
              : 0;
      // The query rows of sequence b under the offsets in input `queries`
      // (filled before: the query offsets have no queries of their own).
      auto rowsOf = [&](int32_t queries, int64_t b) -> int64_t {
        const int32_t *cu = inputs[queries].i32();
        return b + 1 < inputs[queries].shape[0] ? cu[b + 1] - cu[b] : 0;
      };
      if (info.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS &&
          info.contract_queries >= 0) {
        // Key offsets under a causal mask, or of a draft tree's keys: each
        // sequence's query rows (the tree's T nodes, from its q [B, H, T,
        // D] or path [B, T]) plus a random share of the other keys (when
        // there are enough keys).
        attn::Tensor &queries = inputs[info.contract_queries];
        const bool tree = queries.shape.size() != 1;
        const int64_t nodes =
            tree ? queries.shape[queries.shape.size() == 4 ? 2 : 1] : 0;
        auto queriesOf = [&](int64_t b) {
          return tree ? nodes : rowsOf(info.contract_queries, b);
        };
        const int64_t rows = tree ? std::max<int64_t>(count - 1, 0) * nodes
                                  : queries.i32()[queries.shape[0] - 1];
        std::vector<int64_t> extra(static_cast<size_t>(count), 0);
        for (int64_t n = 0; n < limit - rows; ++n)
          ++extra[rng() %
                  static_cast<uint64_t>(std::max<int64_t>(1, count - 1))];
        int64_t at = 0;
        for (int64_t n = 0; n < count; ++n) {
          values[n] = static_cast<int32_t>(std::min(at, limit));
          if (n + 1 < count)
            at += queriesOf(n) + extra[n];
        }
        if (count > 0)
          values[count - 1] = static_cast<int32_t>(limit);
        continue;
      }
      if (info.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS) {
        // Sorted random cut points of the tokens: 0, ..., limit.
        for (int64_t n = 0; n < count; ++n)
          values[n] = n == 0 || limit == 0
                          ? 0
                          : static_cast<int32_t>(
                                rng() % static_cast<uint64_t>(limit + 1));
        std::sort(values, values + count);
        if (count > 0)
          values[count - 1] = static_cast<int32_t>(limit);
        continue;
      }
      if (info.contract == ATTN_CONTRACT_PAGE_TABLE) {
        // Pages drawn from the cache's (the run names the error when it has
        // none).
        for (int64_t n = 0; n < tensor.numElements(); ++n)
          values[n] =
              limit > 0
                  ? static_cast<int32_t>(rng() % static_cast<uint64_t>(limit))
                  : 0;
        continue;
      }
      if (info.contract == ATTN_CONTRACT_SEQUENCE_LENGTHS) {
        // Lengths in [Lq, MP * P] under a causal mask, [0, MP * P] otherwise.
        attn_argument_info table;
        attn_entry_argument(m, entry, info.contract_input, &table);
        const attn::Tensor &pages = inputs[info.contract_input];
        const int64_t most =
            pages.shape[1] * inputs[table.contract_input].shape[1];
        // The queries: q [B, H, Lq, D] or a ragged batch's offsets.
        auto leastOf = [&](int64_t b) -> int64_t {
          if (info.contract_queries < 0)
            return 0;
          const attn::Tensor &queries = inputs[info.contract_queries];
          return std::min(most, queries.shape.size() == 1
                                    ? rowsOf(info.contract_queries, b)
                                    : queries.shape[2]);
        };
        for (int64_t n = 0; n < count; ++n) {
          const int64_t least = leastOf(n);
          values[n] = static_cast<int32_t>(
              least + static_cast<int64_t>(
                          rng() % static_cast<uint64_t>(most - least + 1)));
        }
        continue;
      }
      if (info.contract == ATTN_CONTRACT_CACHE_SLOTS) {
        // Distinct slots of the cache, -1 (skipped) past them.
        const int64_t slots = limit * inputs[info.contract_input].shape[1];
        std::vector<int32_t> all(static_cast<size_t>(slots));
        for (int64_t n = 0; n < slots; ++n)
          all[n] = static_cast<int32_t>(n);
        std::shuffle(all.begin(), all.end(), rng);
        for (int64_t n = 0; n < count; ++n)
          values[n] = n < slots ? all[n] : -1;
        continue;
      }
      if (info.contract == ATTN_CONTRACT_POOL_SLOTS) {
        // Distinct slots, a random draw of the pool's (the run names the
        // error when it has fewer slots than sequences).
        std::vector<int32_t> all(static_cast<size_t>(limit));
        for (int64_t n = 0; n < limit; ++n)
          all[n] = static_cast<int32_t>(n);
        std::shuffle(all.begin(), all.end(), rng);
        for (int64_t n = 0; n < count; ++n)
          values[n] = n < limit ? all[n] : 0;
        continue;
      }
      const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
      for (int64_t b = 0; b < rows; ++b) {
        if (info.contract == ATTN_CONTRACT_TREE_PARENTS) {
          for (int64_t t = 0; t < cols; ++t)
            values[b * cols + t] =
                t == 0 ? -1
                       : static_cast<int32_t>(rng() % static_cast<uint64_t>(t));
          continue;
        }
        int32_t *lengths = inputs[info.contract_input].i32();
        int32_t length =
            cols == 0
                ? 0
                : 1 + static_cast<int32_t>(rng() % static_cast<uint64_t>(cols));
        lengths[b] = length;
        for (int64_t n = 0; n < cols; ++n)
          values[b * cols + n] =
              n < length
                  ? static_cast<int32_t>(rng() % static_cast<uint64_t>(cols))
                  : -1;
      }
    }
}

std::string formatTensor(const std::string &name, const attn::Tensor &t) {
  return name + " " + attn_dtype_name(t.dtype) +
         attn::npy::formatShape(t.shape);
}

bool isStorageFloat(attn_dtype dtype) {
  return dtype == ATTN_F16 || dtype == ATTN_BF16;
}

/// `value` rounded to the storage dtype `dtype` (f16 or bf16).
uint16_t toStorage(attn_dtype dtype, float value) {
  return dtype == ATTN_F16 ? attn::floatToHalf(value)
                           : attn::floatToBf16(value);
}

/// An input for an argument of dtype `dtype` from a .npy array: float32
/// arrays are rounded to f16 / bf16 arguments (NumPy has no bf16), float16
/// ones are taken as they are; anything else keeps its dtype (and the
/// runtime names the mismatch).
attn::Tensor inputTensor(const attn::npy::Array &array, attn_dtype dtype) {
  if (array.dtype == attn::npy::DType::F32 && isStorageFloat(dtype)) {
    attn::Tensor tensor(dtype, array.shape);
    const auto *values = reinterpret_cast<const float *>(array.data.data());
    for (int64_t e = 0; e < tensor.numElements(); ++e)
      tensor.bits16()[e] = toStorage(dtype, values[e]);
    return tensor;
  }
  attn_dtype stored = array.dtype == attn::npy::DType::F32   ? ATTN_F32
                      : array.dtype == attn::npy::DType::F16 ? ATTN_F16
                                                             : ATTN_I32;
  attn::Tensor tensor(stored, array.shape);
  std::copy(array.data.begin(), array.data.end(),
            reinterpret_cast<uint8_t *>(tensor.storage.data()));
  return tensor;
}

/// The .npy array of an output: f32 and i32 as they are, f16 as float16,
/// bf16 widened (exactly) to float32.
attn::npy::Array outputArray(const attn::Tensor &tensor) {
  attn::npy::Array array;
  array.shape = tensor.shape;
  if (tensor.dtype == ATTN_BF16) {
    array.dtype = attn::npy::DType::F32;
    array.data.resize(static_cast<size_t>(tensor.numElements()) * 4);
    auto *values = reinterpret_cast<float *>(array.data.data());
    for (int64_t e = 0; e < tensor.numElements(); ++e)
      values[e] = attn::bf16ToFloat(tensor.bits16()[e]);
    return array;
  }
  array.dtype = tensor.dtype == ATTN_F32   ? attn::npy::DType::F32
                : tensor.dtype == ATTN_F16 ? attn::npy::DType::F16
                                           : attn::npy::DType::I32;
  const auto *bytes = reinterpret_cast<const uint8_t *>(tensor.storage.data());
  array.data.assign(bytes, bytes + tensor.numElements() *
                                       attn::npy::elementSize(array.dtype));
  return array;
}

void list(const attn::Model &model) {
  attn_model *m = model.get();
  std::printf("model '%s': %d entries, %d threads\n", attn_model_name(m),
              model.numEntries(), attn_model_num_threads(m));
  for (int32_t e = 0; e < model.numEntries(); ++e) {
    std::printf("entry %s\n", attn_entry_name(m, e));
    int32_t numInputs = attn_entry_num_inputs(m, e);
    int32_t total = numInputs + attn_entry_num_outputs(m, e);
    for (int32_t i = 0; i < total; ++i) {
      attn_argument_info info{}, queries{};
      attn_entry_argument(m, e, i, &info);
      if (info.contract_queries >= 0)
        attn_entry_argument(m, e, info.contract_queries, &queries);
      std::printf("  %-3s %-8s %s\n", i < numInputs ? "in" : "out", info.name,
                  formatArgument(info, queries).c_str());
    }
  }
}

} // namespace

int run(int argc, char **argv) {
  std::string modelPath, entryName, device = "cpu", randomDims;
  std::vector<std::string> inputPaths, outputPaths;
  long long threads = 0, repeat = 0, seed = 0;
  bool listEntries = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    std::string text;
    if (arg == "--list") {
      listEntries = true;
    } else if (arg == "--entry") {
      if (!value(entryName))
        return usageError("--entry needs a name");
    } else if (arg == "--in") {
      if (!value(text))
        return usageError("--in needs a .npy file");
      inputPaths.push_back(text);
    } else if (arg == "--out") {
      if (!value(text))
        return usageError("--out needs a .npy file");
      outputPaths.push_back(text);
    } else if (arg == "--device") {
      if (!value(device) || (device != "cpu" && device != "cuda"))
        return usageError("--device must be cpu or cuda");
    } else if (arg == "--threads") {
      if (!value(text) || !parseInt(text, threads) || threads <= 0 ||
          threads > ATTN_MAX_THREADS)
        return usageError("--threads needs a count in [1, " +
                          std::to_string(ATTN_MAX_THREADS) + "], got '" + text +
                          "'");
    } else if (arg == "--repeat") {
      if (!value(text) || !parseInt(text, repeat) || repeat <= 0 ||
          repeat > kMaxRepeat)
        return usageError("--repeat needs a count in [1, " +
                          std::to_string(kMaxRepeat) + "], got '" + text + "'");
    } else if (arg == "--seed") {
      if (!value(text) || !parseInt(text, seed))
        return usageError("--seed needs an integer, got '" + text + "'");
    } else if (arg == "--random") {
      if (!value(randomDims))
        return usageError("--random needs SYM=N[,SYM=N...]");
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("unknown option '" + arg + "'");
    } else if (modelPath.empty()) {
      modelPath = arg;
    } else {
      return usageError("unexpected argument '" + arg + "'");
    }
  }
  if (modelPath.empty())
    return usageError("no model file given");
  if (!listEntries && entryName.empty())
    return usageError("give --list or --entry NAME");

  std::unique_ptr<attn::Model> model;
  attn::Status status =
      attn::Model::loadFile(modelPath, static_cast<int>(threads), model);
  if (!status.ok())
    return error(status.message);
  if (listEntries) {
    list(*model);
    return 0;
  }
  if (device == "cuda") {
    status = model->setDevice(ATTN_DEVICE_CUDA);
    if (!status.ok())
      return error("--device cuda: " + status.message);
  }

  int32_t entry = 0;
  status = model->findEntry(entryName, entry);
  if (!status.ok())
    return error(status.message);
  attn_model *m = model->get();
  int32_t numInputs = attn_entry_num_inputs(m, entry);
  int32_t numOutputs = attn_entry_num_outputs(m, entry);

  std::vector<attn::Tensor> inputs;
  if (!randomDims.empty()) {
    if (!inputPaths.empty())
      return usageError("give --in files or --random, not both");
    std::map<std::string, int64_t> sizes;
    size_t start = 0;
    while (start <= randomDims.size()) {
      size_t comma = randomDims.find(',', start);
      std::string item = randomDims.substr(start, comma == std::string::npos
                                                      ? std::string::npos
                                                      : comma - start);
      size_t eq = item.find('=');
      long long size = 0;
      // Sizes past 2^62 fit no tensor; bounding them keeps B+1 and the
      // ceil divisions below from overflowing.
      if (eq == std::string::npos || eq == 0 ||
          !parseInt(item.substr(eq + 1), size) || size < 0 ||
          size > (1LL << 62))
        return usageError(
            "--random: expected SYM=N with 0 <= N <= 2^62, got '" + item + "'");
      if (!sizes.try_emplace(item.substr(0, eq), size).second)
        return usageError("--random: " + item.substr(0, eq) +
                          " is given twice");
      if (comma == std::string::npos)
        break;
      start = comma + 1;
    }
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (int32_t i = 0; i < numInputs; ++i) {
      attn_argument_info info;
      attn_entry_argument(m, entry, i, &info);
      std::vector<int64_t> shape;
      for (int32_t d = 0; d < info.rank; ++d) {
        if (info.dims[d] >= 0) {
          shape.push_back(info.dims[d]);
          continue;
        }
        std::string symbol = info.symbols[d];
        auto it = sizes.find(symbol);
        // B+1 (a ragged batch's offsets) follows from B.
        int64_t plus = 0;
        if (it == sizes.end() && symbol.size() > 2 &&
            symbol.compare(symbol.size() - 2, 2, "+1") == 0) {
          it = sizes.find(symbol.substr(0, symbol.size() - 2));
          plus = 1;
        }
        if (it == sizes.end())
          return usageError(std::string("--random: input '") + info.name +
                            "' needs a size for " + symbol);
        int64_t divisor = info.ceil_divs[d], size = it->second + plus;
        if (divisor > 0)
          size = size / divisor + (size % divisor != 0);
        if (divisor > 0 && info.at_mosts[d] >= 0)
          size = std::min(size, info.at_mosts[d]);
        shape.push_back(size);
      }
      attn::Tensor tensor;
      status = attn::Tensor::allocate(info.dtype, shape, tensor);
      if (!status.ok())
        return error(std::string("--random: input '") + info.name + "' " +
                     attn_dtype_name(info.dtype) +
                     attn::npy::formatShape(shape) + ": " + status.message);
      for (int64_t e = 0; e < tensor.numElements(); ++e) {
        if (info.dtype == ATTN_F32)
          tensor.f32()[e] = uniform(rng);
        else if (isStorageFloat(info.dtype))
          tensor.bits16()[e] = toStorage(info.dtype, uniform(rng));
      }
      inputs.push_back(std::move(tensor));
    }
    meetContracts(m, entry, inputs, rng);
  } else {
    for (const std::string &path : inputPaths) {
      attn::npy::Array array;
      std::string message;
      if (!attn::npy::readFile(path, array, message))
        return error(message);
      attn_argument_info info{};
      int32_t index = static_cast<int32_t>(inputs.size());
      info.dtype = ATTN_F32;
      if (index < numInputs)
        attn_entry_argument(m, entry, index, &info);
      inputs.push_back(inputTensor(array, info.dtype));
    }
  }
  // The inputs updated in place: their --out files follow the outputs'.
  std::vector<int32_t> inPlace;
  std::string names;
  for (int32_t i = 0; i < numOutputs; ++i) {
    attn_argument_info info;
    attn_entry_argument(m, entry, numInputs + i, &info);
    names += (i ? ", " : "") + std::string(info.name);
  }
  for (int32_t i = 0; i < numInputs; ++i) {
    attn_argument_info info;
    attn_entry_argument(m, entry, i, &info);
    if (!info.in_place)
      continue;
    inPlace.push_back(i);
    names += (names.empty() ? "" : ", ") + std::string(info.name) +
             " (updated in place)";
  }
  const int32_t numFiles = numOutputs + static_cast<int32_t>(inPlace.size());
  if (!outputPaths.empty() &&
      static_cast<int32_t>(outputPaths.size()) != numFiles)
    return error("entry '" + entryName + "' writes " +
                 std::to_string(numFiles) + " --out files (" + names +
                 "), got " + std::to_string(outputPaths.size()));
  // Timed repeats start from the inputs as given, so what is written is
  // one run's.
  std::vector<attn::Tensor> given;
  if (repeat > 0)
    for (int32_t i : inPlace)
      given.push_back(inputs[i]);

  std::vector<attn::Tensor> outputs;
  status = model->run(entry, inputs, outputs);
  if (!status.ok())
    return error(status.message);
  if (!randomDims.empty()) {
    std::string text = "ran " + entryName + " on random inputs:";
    for (int32_t i = 0; i < numInputs; ++i) {
      attn_argument_info info;
      attn_entry_argument(m, entry, i, &info);
      text += " " + formatTensor(info.name, inputs[i]);
    }
    text += " ->";
    for (int32_t i = 0; i < numOutputs; ++i) {
      attn_argument_info info;
      attn_entry_argument(m, entry, numInputs + i, &info);
      text += " " + formatTensor(info.name, outputs[i]);
    }
    if (device == "cuda")
      std::printf("%s (CUDA)\n", text.c_str());
    else
      std::printf("%s (%d threads)\n", text.c_str(), attn_model_num_threads(m));
  }
  if (repeat > 0) {
    std::vector<double> times;
    for (long long r = 0; r < repeat; ++r) {
      for (size_t n = 0; n < inPlace.size(); ++n)
        inputs[inPlace[n]] = given[n];
      auto begin = std::chrono::steady_clock::now();
      status = model->run(entry, inputs, outputs);
      auto end = std::chrono::steady_clock::now();
      if (!status.ok())
        return error(status.message);
      times.push_back(
          std::chrono::duration<double, std::milli>(end - begin).count());
    }
    std::vector<double> sorted = times;
    std::sort(sorted.begin(), sorted.end());
    size_t n = sorted.size();
    double median =
        n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    std::printf("median_ms=%.4f min_ms=%.4f runs=%lld\n", median, sorted[0],
                repeat);
  }
  // Errors in the inputs come first; then no output file is in place
  // unless all of them are written.
  attn::npy::OutputFiles outputFiles;
  if (std::string message; !outputFiles.create(outputPaths, message))
    return error(message);
  for (size_t i = 0; i < outputPaths.size(); ++i) {
    const attn::Tensor &tensor =
        i < outputs.size() ? outputs[i] : inputs[inPlace[i - outputs.size()]];
    attn::npy::Array array = outputArray(tensor);
    std::string message;
    if (!outputFiles.write(i, array, message))
      return error(message);
  }
  if (std::string message; !outputFiles.commit(message))
    return error(message);
  return 0;
}

int main(int argc, char **argv) {
  // Every size is checked before it is allocated; what remains (a vector
  // that cannot grow) is reported, not an abort.
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc &) {
    return error("out of memory");
  }
}
