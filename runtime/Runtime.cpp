//===- Runtime.cpp - Load and run compiled models -------------------------===//
//
// Loading: Flatbuffers verification, format version, a semantic check of
// every host program (registers, buffer ids, bindings), the CPU-feature and
// code-checksum checks, then the shared object goes through a memfd into
// dlopen. Running: bind every dynamic dim from the inputs, check every
// argument, evaluate the host program, run each dispatch on the pool.
//
//===----------------------------------------------------------------------===//

#include "runtime/attn_runtime.h"

#include "runtime/CheckedSize.h"
#include "runtime/Checksum.h"
#include "runtime/CudaDriver.h"
#include "runtime/ThreadPool.h"
#include "runtime/schemas/attnb_generated.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint32_t kFormatVersion = 7;

/// Whether an integer op reads operand registers (a, b; Select also c).
bool readsRegisters(attn::fb::IntOpKind op) {
  using K = attn::fb::IntOpKind;
  return op != K::Constant && op != K::BufferDim && op != K::WorkerCount;
}

thread_local std::string lastError;

attn_status fail(attn_status status, const std::string &message) {
  lastError = message;
  return status;
}

/// Runs the body of a C API function: no C++ exception (an allocation
/// that fails, a thread that cannot start) crosses into the caller.
template <typename Body>
attn_status guarded(const char *function, Body &&body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(ATTN_RUN_ERROR, std::string(function) + ": out of memory");
  } catch (const std::exception &e) {
    return fail(ATTN_RUN_ERROR, std::string(function) + ": " + e.what());
  }
}

using KernelFn = void (*)(void *const *buffers, const int64_t *dims,
                          int64_t workgroup);

struct Signature {
  std::string name;
  attn_dtype dtype;
  std::vector<int64_t> dims;        // -1 for dynamic
  std::vector<std::string> symbols; // "" for static
  /// > 0: the dim is ceil(symbol / ceilDiv), not a symbol of its own,
  /// capped at atMosts[d] when that is >= 0.
  std::vector<int64_t> ceilDivs, atMosts;
  /// What users see of each dim: the symbol, or "ceil(Lk/16)".
  std::vector<std::string> displaySymbols;
  std::vector<const char *> symbolPtrs;
  attn_value_contract contract = ATTN_CONTRACT_NONE;
  int32_t contractInput = -1;
};

struct Step {
  enum Kind { Int, Temp, Dispatch, Assert } kind;
  // Int
  attn::fb::IntOpKind op;
  int32_t a = 0, b = 0, c = 0;
  int64_t value = 0;
  // Temp
  attn::fb::DType tempDtype = attn::fb::DType::f32;
  size_t elementBytes = 0;
  std::vector<int32_t> dims;
  // Dispatch
  KernelFn kernel = nullptr;
  std::string kernelName;
  int32_t workgroups = 0;
  std::vector<int32_t> bindings;
  /// What the kernel was compiled to bind (set when the binary is loaded).
  const struct KernelAbi *abi = nullptr;
  // Assert: fails with `message` unless register `a` is non-zero.
  std::string message;
};

/// What a kernel binds: per binding the dtype and dims (-1: dynamic).
struct KernelAbi {
  std::string name;
  std::vector<attn::fb::DType> dtypes;
  std::vector<std::vector<int64_t>> dims;
};

/// A host program: its steps and how many temporaries it allocates.
struct Program {
  std::vector<Step> steps;
  int32_t numTemps = 0;
};

struct Entry {
  std::string name;
  std::vector<Signature> inputs, outputs;
  Program cpu, cuda;
};

/// The runtime dtype of a binary's, false for one this runtime does not
/// know.
bool dtypeOf(attn::fb::DType stored, attn_dtype &dtype) {
  switch (stored) {
  case attn::fb::DType::f32:
    dtype = ATTN_F32;
    return true;
  case attn::fb::DType::i32:
    dtype = ATTN_I32;
    return true;
  case attn::fb::DType::f16:
    dtype = ATTN_F16;
    return true;
  case attn::fb::DType::bf16:
    dtype = ATTN_BF16;
    return true;
  default:
    return false;
  }
}

/// Bytes per element of a temporary of dtype `stored`, which may also be
/// one of the dtypes for temporaries only; 0 for one this runtime does not
/// know.
size_t temporaryElementBytes(attn::fb::DType stored) {
  switch (stored) {
  case attn::fb::DType::f64:
    return 8;
  case attn::fb::DType::i8:
    return 1;
  default:
    attn_dtype dtype;
    return dtypeOf(stored, dtype) ? attn_dtype_size(dtype) : 0;
  }
}

std::string formatDims(const std::vector<int64_t> &dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

/// The size of dynamic dim `d` of `sig` when its symbol is `symbolValue`.
int64_t dimSize(const Signature &sig, size_t d, int64_t symbolValue) {
  int64_t divisor = sig.ceilDivs[d];
  if (divisor <= 0)
    return symbolValue;
  int64_t blocks = symbolValue / divisor + (symbolValue % divisor != 0);
  return sig.atMosts[d] >= 0 ? std::min(blocks, sig.atMosts[d]) : blocks;
}

/// "[B=2, 8, Lq, 64]": the signature with the symbols bound so far.
std::string formatSignature(const Signature &sig,
                            const std::map<std::string, int64_t> &bound) {
  std::string text = "[";
  for (size_t i = 0; i < sig.dims.size(); ++i) {
    text += i ? ", " : "";
    if (sig.dims[i] >= 0) {
      text += std::to_string(sig.dims[i]);
      continue;
    }
    text += sig.displaySymbols[i];
    auto it = bound.find(sig.symbols[i]);
    if (it != bound.end())
      text += "=" + std::to_string(dimSize(sig, i, it->second));
  }
  return text + "]";
}

/// Whether the host has an x86 feature (LLVM name); unknown names are not
/// supported.
bool hostSupports(const std::string &feature, bool &known) {
  known = true;
#if defined(__x86_64__)
#define ATTN_FEATURE(name)                                                     \
  if (feature == name)                                                         \
    return __builtin_cpu_supports(name);
  ATTN_FEATURE("sse3")
  ATTN_FEATURE("ssse3")
  ATTN_FEATURE("sse4.1")
  ATTN_FEATURE("sse4.2")
  ATTN_FEATURE("popcnt")
  ATTN_FEATURE("avx")
  ATTN_FEATURE("avx2")
  ATTN_FEATURE("fma")
  ATTN_FEATURE("bmi")
  ATTN_FEATURE("bmi2")
  ATTN_FEATURE("f16c")
  ATTN_FEATURE("lzcnt")
  ATTN_FEATURE("movbe")
  ATTN_FEATURE("xsave")
  ATTN_FEATURE("avx512f")
  ATTN_FEATURE("avx512bw")
  ATTN_FEATURE("avx512cd")
  ATTN_FEATURE("avx512dq")
  ATTN_FEATURE("avx512vl")
#undef ATTN_FEATURE
#endif
  known = false;
  return false;
}

} // namespace

/// The CUDA code of a binary, loaded onto the GPU at first use.
struct CudaCode {
  std::string chip, ptx;
  std::vector<uint8_t> cubin;
  std::vector<attn::cuda::Module::Kernel> kernels;
  std::unique_ptr<attn::cuda::Module> module;
};

struct attn_model {
  std::vector<uint8_t> bytes;
  std::string name;
  std::vector<Entry> entries;
  bool hasCpuCode = false;
  void *library = nullptr;
  /// The memfd the CPU code was loaded from, open while the code is: the
  /// dynamic loader returns an already loaded library for a path it has
  /// seen, so every live model needs its own /proc/self/fd/N.
  int codeFd = -1;
  std::unique_ptr<attn::ThreadPool> pool;
  std::optional<CudaCode> cuda;
  /// The kernel ABIs of each target's code, by exported name.
  std::map<std::string, KernelAbi> cpuAbis, cudaAbis;
  /// Serializes what changes `device` and every CUDA run: the module's
  /// events and context are one per model. CPU runs take no lock.
  std::mutex cudaMutex;
  std::atomic<attn_device> device{ATTN_DEVICE_CPU};

  /// What the last successful attn_run on the calling thread spent in its
  /// host program and kernels (see attn_model_last_kernel_ms).
  void recordKernelMs(double milliseconds) {
    std::lock_guard<std::mutex> lock(timesMutex);
    lastKernelMs[std::this_thread::get_id()] = milliseconds;
  }
  std::optional<double> kernelMsOfThisThread() {
    std::lock_guard<std::mutex> lock(timesMutex);
    auto it = lastKernelMs.find(std::this_thread::get_id());
    if (it == lastKernelMs.end())
      return std::nullopt;
    return it->second;
  }

  ~attn_model() {
    if (library)
      dlclose(library);
    if (codeFd >= 0)
      close(codeFd);
  }

  attn_status load(int32_t numThreads);

private:
  std::mutex timesMutex;
  std::map<std::thread::id, double> lastKernelMs;

  attn_status readEntry(const attn::fb::Entry *fbEntry, Entry &entry);
  attn_status readKernelAbis(
      const flatbuffers::Vector<flatbuffers::Offset<attn::fb::KernelAbi>> *list,
      const char *target, std::map<std::string, KernelAbi> &abis);
  attn_status checkBindings(Entry &entry, Program &program,
                            const std::map<std::string, KernelAbi> &abis,
                            const char *target);
  attn_status
  readProgram(const Entry &entry,
              const flatbuffers::Vector<attn::fb::Step> *types,
              const flatbuffers::Vector<flatbuffers::Offset<void>> *steps,
              const char *target, Program &program);
  attn_status loadCode(const attn::fb::CpuCode *cpu);
};

extern "C" const char *attn_last_error(void) { return lastError.c_str(); }

extern "C" size_t attn_dtype_size(attn_dtype dtype) {
  switch (dtype) {
  case ATTN_F32:
  case ATTN_I32:
    return 4;
  case ATTN_F16:
  case ATTN_BF16:
    return 2;
  }
  return 0;
}

extern "C" attn_status attn_tensor_bytes(attn_dtype dtype, int32_t rank,
                                         const int64_t *shape, size_t *bytes) {
  if (!bytes || rank < 0 || (rank > 0 && !shape))
    return fail(ATTN_INVALID_ARGUMENT,
                "attn_tensor_bytes: null pointer or negative rank");
  if (!attn_dtype_size(dtype))
    return fail(ATTN_INVALID_ARGUMENT,
                "attn_tensor_bytes: unknown dtype " +
                    std::to_string(static_cast<int>(dtype)));
  std::vector<int64_t> dims(shape, shape + rank);
  std::optional<int64_t> total = attn::checkedTensorBytes(
      dims, static_cast<int64_t>(attn_dtype_size(dtype)));
  if (!total)
    return fail(ATTN_INVALID_ARGUMENT,
                std::string("a tensor of ") + attn_dtype_name(dtype) + " " +
                    formatDims(dims) +
                    (std::any_of(dims.begin(), dims.end(),
                                 [](int64_t d) { return d < 0; })
                         ? " has a negative dim"
                         : " holds more than 2^63 bytes"));
  *bytes = static_cast<size_t>(*total);
  return ATTN_OK;
}

extern "C" const char *attn_dtype_name(attn_dtype dtype) {
  switch (dtype) {
  case ATTN_F32:
    return "f32";
  case ATTN_I32:
    return "i32";
  case ATTN_F16:
    return "f16";
  case ATTN_BF16:
    return "bf16";
  }
  return "?";
}

attn_status attn_model::readEntry(const attn::fb::Entry *fbEntry,
                                  Entry &entry) {
  auto bad = [&](const std::string &why) {
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: entry '" + entry.name + "': " + why);
  };
  if (!fbEntry->name() || !fbEntry->inputs() || !fbEntry->outputs())
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: an entry lacks its name or signature");
  entry.name = fbEntry->name()->str();
  auto readSignatures = [&](const auto *list, std::vector<Signature> &out) {
    for (const attn::fb::TensorSignature *fbSig : *list) {
      Signature sig;
      if (!fbSig->name() || !fbSig->dims())
        return false;
      sig.name = fbSig->name()->str();
      if (!dtypeOf(fbSig->dtype(), sig.dtype))
        return false;
      for (const attn::fb::Dim *dim : *fbSig->dims()) {
        if (dim->size() >= 0) {
          sig.dims.push_back(dim->size());
          sig.symbols.push_back("");
          sig.displaySymbols.push_back("");
        } else if (dim->symbol() && dim->symbol()->size() > 0) {
          sig.dims.push_back(-1);
          sig.symbols.push_back(dim->symbol()->str());
          sig.displaySymbols.push_back(sig.symbols.back());
        } else {
          return false;
        }
        if (dim->ceil_div() < 0 || (dim->ceil_div() > 0 && dim->size() >= 0) ||
            dim->at_most() < -1 ||
            (dim->at_most() >= 0 && dim->ceil_div() == 0))
          return false;
        sig.ceilDivs.push_back(dim->ceil_div());
        sig.atMosts.push_back(dim->at_most());
        if (dim->ceil_div() > 0)
          sig.displaySymbols.back() = "ceil(" + sig.symbols.back() + "/" +
                                      std::to_string(dim->ceil_div()) + ")";
        if (dim->at_most() >= 0)
          sig.displaySymbols.back() = "min(" + std::to_string(dim->at_most()) +
                                      ", " + sig.displaySymbols.back() + ")";
      }
      switch (fbSig->contract()) {
      case attn::fb::ValueContract::none:
        break;
      case attn::fb::ValueContract::tree_parents:
        sig.contract = ATTN_CONTRACT_TREE_PARENTS;
        break;
      case attn::fb::ValueContract::tree_path:
        sig.contract = ATTN_CONTRACT_TREE_PATH;
        break;
      default:
        return false;
      }
      sig.contractInput = fbSig->contract_input();
      out.push_back(std::move(sig));
    }
    return true;
  };
  if (!readSignatures(fbEntry->inputs(), entry.inputs) ||
      !readSignatures(fbEntry->outputs(), entry.outputs))
    return bad("a signature has no name, a bad dtype or a dim that is "
               "neither static nor named");
  // Every symbol must be bound by a plain dynamic dim of an input, so that
  // derived dims (of inputs too) and output dims can be computed.
  auto boundByInputs = [&](const std::string &symbol) {
    for (const Signature &in : entry.inputs)
      for (size_t d = 0; d < in.symbols.size(); ++d)
        if (in.symbols[d] == symbol && in.ceilDivs[d] == 0)
          return true;
    return false;
  };
  for (std::vector<Signature> *list : {&entry.inputs, &entry.outputs})
    for (Signature &sig : *list) {
      for (size_t d = 0; d < sig.symbols.size(); ++d) {
        sig.symbolPtrs.push_back(sig.symbols[d].c_str());
        if (!sig.symbols[d].empty() && !boundByInputs(sig.symbols[d]))
          return bad("'" + sig.name + "' has a dim '" + sig.displaySymbols[d] +
                     "' that no input binds");
      }
      if (sig.contract == ATTN_CONTRACT_NONE)
        continue;
      bool pathWithLengths =
          sig.contract == ATTN_CONTRACT_TREE_PATH && sig.contractInput >= 0 &&
          sig.contractInput < static_cast<int32_t>(entry.inputs.size()) &&
          entry.inputs[sig.contractInput].dims.size() == 1 &&
          entry.inputs[sig.contractInput].dtype == ATTN_I32;
      if (list != &entry.inputs || sig.dtype != ATTN_I32 ||
          sig.dims.size() != 2 ||
          (sig.contract == ATTN_CONTRACT_TREE_PATH && !pathWithLengths))
        return bad("'" + sig.name +
                   "' has a value contract that does not "
                   "fit it");
    }

  if (attn_status status = readProgram(entry, fbEntry->program_type(),
                                       fbEntry->program(), "CPU", entry.cpu))
    return status;
  return readProgram(entry, fbEntry->cuda_program_type(),
                     fbEntry->cuda_program(), "CUDA", entry.cuda);
}

attn_status attn_model::readProgram(
    const Entry &entry, const flatbuffers::Vector<attn::fb::Step> *types,
    const flatbuffers::Vector<flatbuffers::Offset<void>> *steps,
    const char *target, Program &program) {
  auto bad = [&](const std::string &why) {
    return fail(ATTN_INVALID_BINARY, "corrupt .attnb: entry '" + entry.name +
                                         "', " + target + " program: " + why);
  };
  if (!types != !steps)
    return bad("program step types and steps differ in count");
  if (!steps)
    return ATTN_OK;
  if (types->size() != steps->size())
    return bad("program step types and steps differ in count");
  int32_t numBuffers =
      static_cast<int32_t>(entry.inputs.size() + entry.outputs.size());
  std::vector<bool> isRegister;
  auto checkRegister = [&](int32_t r) {
    return r >= 0 && r < static_cast<int32_t>(isRegister.size()) &&
           isRegister[r];
  };
  for (uint32_t i = 0; i < steps->size(); ++i) {
    Step step;
    switch (static_cast<attn::fb::Step>(types->Get(i))) {
    case attn::fb::Step::IntOp: {
      const auto *op = static_cast<const attn::fb::IntOp *>(steps->Get(i));
      step.kind = Step::Int;
      step.op = op->kind();
      step.a = op->a();
      step.b = op->b();
      step.c = op->c();
      step.value = op->value();
      using K = attn::fb::IntOpKind;
      if (step.op > K::MAX)
        return bad("unknown integer op at step " + std::to_string(i));
      if (step.op == K::BufferDim) {
        if (step.a < 0 || step.a >= numBuffers + program.numTemps)
          return bad("step " + std::to_string(i) + " reads a dim of buffer " +
                     std::to_string(step.a) + ", which does not exist");
        // Ranks are checked when the program runs.
      } else if (readsRegisters(step.op)) {
        if (!checkRegister(step.a) || !checkRegister(step.b) ||
            (step.op == K::Select && !checkRegister(step.c)))
          return bad("step " + std::to_string(i) +
                     " reads a register no earlier step wrote");
      }
      isRegister.push_back(true);
      break;
    }
    case attn::fb::Step::TempBuffer: {
      const auto *temp =
          static_cast<const attn::fb::TempBuffer *>(steps->Get(i));
      step.kind = Step::Temp;
      if (!temp->dims())
        return bad("a temporary has no dims");
      step.tempDtype = temp->dtype();
      step.elementBytes = temporaryElementBytes(temp->dtype());
      if (!step.elementBytes)
        return bad("a temporary has an unknown dtype");
      for (int32_t r : *temp->dims()) {
        if (!checkRegister(r))
          return bad("a temporary's size reads a register no earlier step "
                     "wrote");
        step.dims.push_back(r);
      }
      ++program.numTemps;
      isRegister.push_back(false);
      break;
    }
    case attn::fb::Step::Dispatch: {
      const auto *dispatch =
          static_cast<const attn::fb::Dispatch *>(steps->Get(i));
      step.kind = Step::Dispatch;
      if (!dispatch->kernel() || !dispatch->bindings())
        return bad("a dispatch has no kernel or bindings");
      step.kernelName = dispatch->kernel()->str();
      step.workgroups = dispatch->workgroups();
      if (!checkRegister(step.workgroups))
        return bad("dispatch of " + step.kernelName +
                   " reads its workgroup count from a register no earlier "
                   "step wrote");
      for (int32_t binding : *dispatch->bindings()) {
        if (binding < 0 || binding >= numBuffers + program.numTemps)
          return bad("dispatch of " + step.kernelName + " binds buffer " +
                     std::to_string(binding) + ", which does not exist");
        step.bindings.push_back(binding);
      }
      isRegister.push_back(false);
      break;
    }
    case attn::fb::Step::Assert: {
      const auto *check = static_cast<const attn::fb::Assert *>(steps->Get(i));
      step.kind = Step::Assert;
      step.a = check->condition();
      if (!checkRegister(step.a) || !check->message())
        return bad("an assertion reads a register no earlier step wrote or "
                   "has no message");
      step.message = check->message()->str();
      isRegister.push_back(false);
      break;
    }
    default:
      return bad("unknown program step at " + std::to_string(i));
    }
    program.steps.push_back(std::move(step));
  }
  return ATTN_OK;
}

namespace {
/// The binary's dtype of a signature's.
attn::fb::DType storedDtype(attn_dtype dtype) {
  switch (dtype) {
  case ATTN_I32:
    return attn::fb::DType::i32;
  case ATTN_F16:
    return attn::fb::DType::f16;
  case ATTN_BF16:
    return attn::fb::DType::bf16;
  case ATTN_F32:
    break;
  }
  return attn::fb::DType::f32;
}
} // namespace

attn_status attn_model::readKernelAbis(
    const flatbuffers::Vector<flatbuffers::Offset<attn::fb::KernelAbi>> *list,
    const char *target, std::map<std::string, KernelAbi> &abis) {
  auto bad = [&](const std::string &why) {
    return fail(ATTN_INVALID_BINARY, std::string("corrupt .attnb: the ") +
                                         target + " code's kernel ABI " + why);
  };
  if (!list)
    return bad("records are missing");
  for (const attn::fb::KernelAbi *record : *list) {
    if (!record->name() || !record->bindings())
      return bad("record has no name or bindings");
    KernelAbi abi;
    abi.name = record->name()->str();
    for (const attn::fb::BindingAbi *binding : *record->bindings()) {
      if (!temporaryElementBytes(binding->dtype()) || !binding->dims())
        return bad("of '" + abi.name +
                   "' has a binding of unknown dtype or "
                   "without dims");
      std::vector<int64_t> dims(binding->dims()->begin(),
                                binding->dims()->end());
      for (int64_t size : dims)
        if (size < -1)
          return bad("of '" + abi.name + "' has a negative dim");
      abi.dtypes.push_back(binding->dtype());
      abi.dims.push_back(std::move(dims));
    }
    std::string name = abi.name;
    if (!abis.emplace(name, std::move(abi)).second)
      return bad("names '" + name + "' twice");
  }
  return ATTN_OK;
}

attn_status
attn_model::checkBindings(Entry &entry, Program &program,
                          const std::map<std::string, KernelAbi> &abis,
                          const char *target) {
  // The dtype and dims of every buffer a program can bind: the
  // signatures, then the temporaries in order.
  std::vector<attn::fb::DType> dtypes;
  std::vector<std::vector<int64_t>> dims;
  for (const std::vector<Signature> *list : {&entry.inputs, &entry.outputs})
    for (const Signature &sig : *list) {
      dtypes.push_back(storedDtype(sig.dtype));
      dims.push_back(sig.dims);
    }
  for (const Step &step : program.steps)
    if (step.kind == Step::Temp) {
      dtypes.push_back(step.tempDtype);
      dims.push_back(std::vector<int64_t>(step.dims.size(), -1));
    }
  for (Step &step : program.steps) {
    if (step.kind != Step::Dispatch)
      continue;
    auto bad = [&](const std::string &why) {
      return fail(ATTN_INVALID_BINARY, "corrupt .attnb: entry '" + entry.name +
                                           "', " + target +
                                           " program: the dispatch of '" +
                                           step.kernelName + "' " + why);
    };
    auto it = abis.find(step.kernelName);
    if (it == abis.end())
      return bad("names a kernel without an ABI record");
    const KernelAbi &abi = it->second;
    if (step.bindings.size() != abi.dtypes.size())
      return bad("binds " + std::to_string(step.bindings.size()) +
                 " buffers; the kernel takes " +
                 std::to_string(abi.dtypes.size()));
    for (size_t i = 0; i < step.bindings.size(); ++i) {
      int32_t buffer = step.bindings[i];
      const std::vector<int64_t> &expected = abi.dims[i];
      if (dtypes[buffer] != abi.dtypes[i] ||
          dims[buffer].size() != expected.size())
        return bad("binds buffer " + std::to_string(buffer) + " as binding #" +
                   std::to_string(i) +
                   " with another dtype or rank than the kernel's");
      for (size_t d = 0; d < expected.size(); ++d)
        if (expected[d] >= 0 && dims[buffer][d] >= 0 &&
            dims[buffer][d] != expected[d])
          return bad(
              "binds buffer " + std::to_string(buffer) + " as binding #" +
              std::to_string(i) + ", whose dim " + std::to_string(d) + " is " +
              std::to_string(dims[buffer][d]) +
              "; the kernel was compiled for " + std::to_string(expected[d]));
    }
    step.abi = &abi;
  }
  return ATTN_OK;
}

attn_status attn_model::loadCode(const attn::fb::CpuCode *cpu) {
  if (!cpu->shared_object() || !cpu->triple())
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: the CPU code has no shared object or triple");
  std::string triple = cpu->triple()->str();
#if defined(__x86_64__)
  if (triple.rfind("x86_64", 0) != 0)
    return fail(ATTN_UNSUPPORTED,
                "the CPU code is for " + triple + "; this host is x86_64");
#endif
  if (cpu->features()) {
    for (const flatbuffers::String *feature : *cpu->features()) {
      bool known = false;
      bool has = hostSupports(feature->str(), known);
      if (!known)
        return fail(ATTN_UNSUPPORTED, "the CPU code needs CPU feature '" +
                                          feature->str() +
                                          "', which this runtime cannot check");
      if (!has)
        return fail(ATTN_UNSUPPORTED,
                    "the CPU code was compiled for " +
                        (cpu->isa_level() ? cpu->isa_level()->str()
                                          : std::string("another CPU")) +
                        " and needs CPU feature '" + feature->str() +
                        "', which this host lacks; recompile on (or for) "
                        "this machine");
    }
  }
  const uint8_t *code = cpu->shared_object()->data();
  size_t size = cpu->shared_object()->size();

  codeFd = memfd_create("attn-cpu-code", MFD_CLOEXEC);
  if (codeFd < 0)
    return fail(ATTN_IO_ERROR,
                std::string("memfd_create failed: ") + std::strerror(errno));
  size_t written = 0;
  while (written < size) {
    ssize_t n = write(codeFd, code + written, size - written);
    if (n <= 0)
      return fail(ATTN_IO_ERROR, "writing the CPU code to a memfd failed");
    written += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(codeFd);
  library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library)
    return fail(ATTN_IO_ERROR,
                std::string("loading the CPU code failed: ") + dlerror());
  for (Entry &entry : entries)
    for (Step &step : entry.cpu.steps) {
      if (step.kind != Step::Dispatch)
        continue;
      step.kernel =
          reinterpret_cast<KernelFn>(dlsym(library, step.kernelName.c_str()));
      if (!step.kernel)
        return fail(ATTN_INVALID_BINARY,
                    "corrupt .attnb: entry '" + entry.name +
                        "' dispatches kernel '" + step.kernelName +
                        "', which the CPU code does not define");
    }
  return ATTN_OK;
}

attn_status attn_model::load(int32_t numThreads) {
  if (bytes.size() < 8 || !flatbuffers::BufferHasIdentifier(
                              bytes.data(), attn::fb::BinaryIdentifier()))
    return fail(
        ATTN_INVALID_BINARY,
        "not an .attnb file: " +
            (bytes.size() < 8
                 ? "it is only " + std::to_string(bytes.size()) + " bytes long"
                 : std::string("the file identifier is not '") +
                       attn::fb::BinaryIdentifier() + "'"));
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!attn::fb::VerifyBinaryBuffer(verifier))
    return fail(ATTN_INVALID_BINARY,
                "corrupt or truncated .attnb: the Flatbuffers verifier "
                "rejected the buffer (" +
                    std::to_string(bytes.size()) + " bytes)");
  const attn::fb::Binary *binary = attn::fb::GetBinary(bytes.data());
  if (binary->format_version() != kFormatVersion)
    return fail(ATTN_INVALID_BINARY,
                ".attnb format version " +
                    std::to_string(binary->format_version()) +
                    " is not supported; this runtime reads version " +
                    std::to_string(kFormatVersion));
  if (!binary->model())
    return fail(ATTN_INVALID_BINARY, "corrupt .attnb: no model");
  const uint8_t *payload = binary->model()->data();
  size_t payloadSize = binary->model()->size();
  if (attn::fnv1a64(payload, payloadSize) != binary->model_fnv1a64())
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: the model does not match its checksum");
  flatbuffers::Verifier modelVerifier(payload, payloadSize);
  if (!modelVerifier.VerifyBuffer<attn::fb::Model>(nullptr))
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: the Flatbuffers verifier rejected the model");
  const attn::fb::Model *model = flatbuffers::GetRoot<attn::fb::Model>(payload);
  name = model->name() ? model->name()->str() : "";
  if (!model->entries())
    return fail(ATTN_INVALID_BINARY, "corrupt .attnb: no entry list");
  for (const attn::fb::Entry *fbEntry : *model->entries()) {
    Entry entry;
    if (attn_status status = readEntry(fbEntry, entry))
      return status;
    entries.push_back(std::move(entry));
  }
  if (!model->cpu() && !model->cuda())
    return fail(ATTN_INVALID_BINARY, "corrupt .attnb: no CPU or CUDA code");
  // Every dispatch must bind what its kernel was compiled for before any
  // code is loaded.
  if (model->cpu()) {
    if (attn_status status =
            readKernelAbis(model->cpu()->kernels(), "CPU", cpuAbis))
      return status;
    for (Entry &entry : entries)
      if (attn_status status = checkBindings(entry, entry.cpu, cpuAbis, "CPU"))
        return status;
  }
  if (model->cuda()) {
    if (attn_status status =
            readKernelAbis(model->cuda()->abis(), "CUDA", cudaAbis))
      return status;
    for (Entry &entry : entries)
      if (attn_status status =
              checkBindings(entry, entry.cuda, cudaAbis, "CUDA"))
        return status;
  }
  if (model->cpu())
    if (attn_status status = loadCode(model->cpu()))
      return status;
  if (const attn::fb::CudaCode *cudaCode = model->cuda()) {
    // Kept for the first run on a GPU, which loads the driver.
    if (!cudaCode->ptx() || !cudaCode->kernels() || !cudaCode->chip())
      return fail(ATTN_INVALID_BINARY,
                  "corrupt .attnb: the CUDA code has no PTX, chip or kernel "
                  "list");
    cuda.emplace();
    cuda->chip = cudaCode->chip()->str();
    cuda->ptx = cudaCode->ptx()->str();
    if (cudaCode->cubin())
      cuda->cubin.assign(cudaCode->cubin()->begin(), cudaCode->cubin()->end());
    for (const attn::fb::CudaKernel *kernel : *cudaCode->kernels()) {
      if (!kernel->name() || kernel->block_threads() <= 0 ||
          kernel->block_threads() > 1024 || kernel->shared_bytes() < 0 ||
          (kernel->workgroup() != attn::fb::CudaWorkgroup::thread &&
           kernel->workgroup() != attn::fb::CudaWorkgroup::block))
        return fail(ATTN_INVALID_BINARY,
                    "corrupt .attnb: a CUDA kernel has no name, a block "
                    "size outside [1, 1024], an unknown workgroup kind or "
                    "negative shared memory");
      cuda->kernels.push_back(
          {kernel->name()->str(), kernel->block_threads(),
           kernel->workgroup() == attn::fb::CudaWorkgroup::block,
           kernel->shared_bytes(), nullptr});
    }
    for (const Entry &entry : entries)
      for (const Step &step : entry.cuda.steps) {
        if (step.kind != Step::Dispatch)
          continue;
        bool found = false;
        for (const auto &kernel : cuda->kernels)
          found |= kernel.name == step.kernelName;
        if (!found)
          return fail(ATTN_INVALID_BINARY,
                      "corrupt .attnb: entry '" + entry.name +
                          "' dispatches CUDA kernel '" + step.kernelName +
                          "', which the CUDA code does not define");
      }
  }
  hasCpuCode = model->cpu() != nullptr;
  std::string poolError;
  pool = attn::ThreadPool::create(numThreads, poolError);
  if (!pool)
    return fail(ATTN_INVALID_ARGUMENT,
                "num_threads = " + std::to_string(numThreads) + ": " +
                    poolError);
  return ATTN_OK;
}

extern "C" attn_status attn_model_load_memory(const void *data, size_t size,
                                              int32_t numThreads,
                                              attn_model **model) {
  return guarded("attn_model_load_memory", [&]() -> attn_status {
    if (!model || (!data && size))
      return fail(ATTN_INVALID_ARGUMENT,
                  "attn_model_load_memory: null pointer");
    auto loaded = std::make_unique<attn_model>();
    loaded->bytes.assign(static_cast<const uint8_t *>(data),
                         static_cast<const uint8_t *>(data) + size);
    if (attn_status status = loaded->load(numThreads))
      return status;
    *model = loaded.release();
    return ATTN_OK;
  });
}

extern "C" attn_status
attn_model_load_file(const char *path, int32_t numThreads, attn_model **model) {
  return guarded("attn_model_load_file", [&]() -> attn_status {
    if (!path || !model)
      return fail(ATTN_INVALID_ARGUMENT, "attn_model_load_file: null pointer");
    std::ifstream file(path, std::ios::binary);
    if (!file)
      return fail(ATTN_IO_ERROR,
                  std::string(path) + ": cannot open: " + std::strerror(errno));
    std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    attn_status status =
        attn_model_load_memory(bytes.data(), bytes.size(), numThreads, model);
    if (status != ATTN_OK)
      lastError = std::string(path) + ": " + lastError;
    return status;
  });
}

extern "C" void attn_model_free(attn_model *model) { delete model; }

extern "C" attn_status attn_model_set_device(attn_model *model,
                                             attn_device device) {
  return guarded("attn_model_set_device", [&]() -> attn_status {
    if (!model)
      return fail(ATTN_INVALID_ARGUMENT, "attn_model_set_device: null model");
    std::lock_guard<std::mutex> lock(model->cudaMutex);
    if (device == ATTN_DEVICE_CPU) {
      if (!model->hasCpuCode)
        return fail(ATTN_UNSUPPORTED,
                    "the binary has no CPU code (compiled with --target cuda)");
      model->device = device;
      return ATTN_OK;
    }
    if (device != ATTN_DEVICE_CUDA)
      return fail(ATTN_INVALID_ARGUMENT,
                  "attn_model_set_device: unknown device " +
                      std::to_string(static_cast<int>(device)));
    if (!model->cuda)
      return fail(ATTN_UNSUPPORTED,
                  "the binary has no CUDA code; compile it with attnc --target "
                  "cuda or --target all");
    if (!model->cuda->module) {
      attn::cuda::Module *loaded = nullptr;
      std::string error;
      if (!attn::cuda::Module::load(model->cuda->cubin, model->cuda->ptx,
                                    model->cuda->chip, model->cuda->kernels,
                                    loaded, error))
        return fail(ATTN_UNSUPPORTED, error);
      model->cuda->module.reset(loaded);
    }
    model->device = device;
    return ATTN_OK;
  });
}

extern "C" attn_device attn_model_device(const attn_model *model) {
  return model ? model->device.load() : ATTN_DEVICE_CPU;
}

extern "C" attn_status attn_model_last_kernel_ms(const attn_model *model,
                                                 double *milliseconds) {
  if (!model || !milliseconds)
    return fail(ATTN_INVALID_ARGUMENT,
                "attn_model_last_kernel_ms: null model or result");
  std::optional<double> last =
      const_cast<attn_model *>(model)->kernelMsOfThisThread();
  if (!last)
    return fail(ATTN_INVALID_ARGUMENT,
                "attn_model_last_kernel_ms: no entry of this model has run "
                "on this thread yet");
  *milliseconds = *last;
  return ATTN_OK;
}

extern "C" const char *attn_model_name(const attn_model *model) {
  return model ? model->name.c_str() : "";
}
extern "C" int32_t attn_model_num_threads(const attn_model *model) {
  return model ? model->pool->size() : 0;
}
extern "C" int32_t attn_model_num_entries(const attn_model *model) {
  return model ? static_cast<int32_t>(model->entries.size()) : 0;
}

namespace {
const Entry *entryAt(const attn_model *model, int32_t entry) {
  if (!model || entry < 0 ||
      entry >= static_cast<int32_t>(model->entries.size()))
    return nullptr;
  return &model->entries[entry];
}
} // namespace

extern "C" const char *attn_entry_name(const attn_model *model, int32_t entry) {
  const Entry *e = entryAt(model, entry);
  return e ? e->name.c_str() : nullptr;
}

extern "C" attn_status attn_model_find_entry(const attn_model *model,
                                             const char *name, int32_t *entry) {
  return guarded("attn_model_find_entry", [&]() -> attn_status {
    if (!model || !name || !entry)
      return fail(ATTN_INVALID_ARGUMENT, "attn_model_find_entry: null pointer");
    std::string known;
    for (size_t i = 0; i < model->entries.size(); ++i) {
      if (model->entries[i].name == name) {
        *entry = static_cast<int32_t>(i);
        return ATTN_OK;
      }
      known += (i ? ", " : "") + model->entries[i].name;
    }
    return fail(ATTN_NOT_FOUND, std::string("no entry named '") + name +
                                    "'; the model has: " + known);
  });
}

extern "C" int32_t attn_entry_num_inputs(const attn_model *model,
                                         int32_t entry) {
  const Entry *e = entryAt(model, entry);
  return e ? static_cast<int32_t>(e->inputs.size()) : -1;
}
extern "C" int32_t attn_entry_num_outputs(const attn_model *model,
                                          int32_t entry) {
  const Entry *e = entryAt(model, entry);
  return e ? static_cast<int32_t>(e->outputs.size()) : -1;
}

extern "C" attn_status attn_entry_argument(const attn_model *model,
                                           int32_t entry, int32_t index,
                                           attn_argument_info *info) {
  const Entry *e = entryAt(model, entry);
  if (!e || !info)
    return fail(ATTN_INVALID_ARGUMENT, "attn_entry_argument: bad entry");
  int32_t numInputs = static_cast<int32_t>(e->inputs.size());
  if (index < 0 || index >= numInputs + static_cast<int32_t>(e->outputs.size()))
    return fail(ATTN_INVALID_ARGUMENT,
                "attn_entry_argument: no argument #" + std::to_string(index));
  const Signature &sig =
      index < numInputs ? e->inputs[index] : e->outputs[index - numInputs];
  info->name = sig.name.c_str();
  info->dtype = sig.dtype;
  info->rank = static_cast<int32_t>(sig.dims.size());
  info->dims = sig.dims.data();
  info->symbols = sig.symbolPtrs.data();
  info->ceil_divs = sig.ceilDivs.data();
  info->at_mosts = sig.atMosts.data();
  info->contract = sig.contract;
  info->contract_input = sig.contractInput;
  return ATTN_OK;
}

namespace {

/// Checks one tensor against its signature, binding dynamic dims. Derived
/// dims (ceil(Lk/16)) are checked only with `derived`, once every input
/// has bound its symbols.
attn_status checkTensor(const Entry &entry, const char *role, size_t index,
                        const Signature &sig, const attn_tensor &tensor,
                        std::map<std::string, int64_t> &bound,
                        bool derived = true) {
  std::string what = std::string(role) + " '" + sig.name + "' (#" +
                     std::to_string(index) + ") of entry '" + entry.name + "'";
  std::vector<int64_t> actual;
  if (tensor.rank >= 0 && (tensor.shape || tensor.rank == 0))
    actual.assign(tensor.shape, tensor.shape + tensor.rank);
  if (tensor.dtype != sig.dtype)
    return fail(ATTN_SIGNATURE_MISMATCH,
                what + ": expected dtype " + attn_dtype_name(sig.dtype) +
                    ", got " + attn_dtype_name(tensor.dtype));
  auto mismatch = [&](const std::string &why) {
    return fail(ATTN_SIGNATURE_MISMATCH,
                what + ": expected shape " + formatSignature(sig, bound) +
                    ", got " + formatDims(actual) + " (" + why + ")");
  };
  if (actual.size() != sig.dims.size())
    return mismatch("rank " + std::to_string(actual.size()) + ", expected " +
                    std::to_string(sig.dims.size()));
  for (size_t d = 0; d < sig.dims.size(); ++d) {
    if (actual[d] < 0)
      return mismatch("dim " + std::to_string(d) + " is negative");
    if (sig.dims[d] >= 0) {
      if (actual[d] != sig.dims[d])
        return mismatch("dim " + std::to_string(d) + " must be " +
                        std::to_string(sig.dims[d]));
      continue;
    }
    if (sig.ceilDivs[d] > 0) {
      if (!derived)
        continue;
      int64_t expected = dimSize(sig, d, bound.at(sig.symbols[d]));
      if (actual[d] != expected)
        return mismatch("dim " + std::to_string(d) + " must be " +
                        sig.displaySymbols[d] + " = " +
                        std::to_string(expected));
      continue;
    }
    auto [it, inserted] = bound.emplace(sig.symbols[d], actual[d]);
    if (!inserted && it->second != actual[d])
      return mismatch("dim " + std::to_string(d) + " is " + sig.symbols[d] +
                      ", which an earlier argument set to " +
                      std::to_string(it->second));
  }
  std::optional<int64_t> bytes = attn::checkedTensorBytes(
      actual, static_cast<int64_t>(attn_dtype_size(tensor.dtype)));
  if (!bytes)
    return mismatch("its size in bytes does not fit in 64 bits");
  if (!tensor.data && *bytes != 0)
    return fail(ATTN_INVALID_ARGUMENT, what + ": data is null");
  return ATTN_OK;
}

attn_status bindInputs(const Entry &entry, const attn_tensor *inputs,
                       int32_t numInputs,
                       std::map<std::string, int64_t> &bound) {
  if (numInputs != static_cast<int32_t>(entry.inputs.size()) ||
      (numInputs > 0 && !inputs)) {
    std::string names;
    for (size_t i = 0; i < entry.inputs.size(); ++i)
      names += (i ? ", " : "") + entry.inputs[i].name;
    return fail(ATTN_SIGNATURE_MISMATCH,
                "entry '" + entry.name + "' takes " +
                    std::to_string(entry.inputs.size()) + " inputs (" + names +
                    "), got " + std::to_string(numInputs));
  }
  for (bool derived : {false, true})
    for (int32_t i = 0; i < numInputs; ++i)
      if (attn_status status = checkTensor(entry, "input", i, entry.inputs[i],
                                           inputs[i], bound, derived))
        return status;
  return ATTN_OK;
}

/// Checks the value contracts of the inputs (tree parents, accepted
/// paths), naming the first offending element.
attn_status checkContracts(const Entry &entry, const attn_tensor *inputs) {
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const Signature &sig = entry.inputs[i];
    if (sig.contract == ATTN_CONTRACT_NONE)
      continue;
    const auto *values = static_cast<const int32_t *>(inputs[i].data);
    const int64_t rows = inputs[i].shape[0], cols = inputs[i].shape[1];
    auto bad = [&](int64_t b, int64_t t, const std::string &why) {
      return fail(ATTN_SIGNATURE_MISMATCH,
                  "input '" + sig.name + "' (#" + std::to_string(i) +
                      ") of entry '" + entry.name + "': " + sig.name + "[" +
                      std::to_string(b) + "][" + std::to_string(t) + "] = " +
                      std::to_string(values[b * cols + t]) + " " + why);
    };
    for (int64_t b = 0; b < rows; ++b) {
      if (sig.contract == ATTN_CONTRACT_TREE_PARENTS) {
        for (int64_t t = 0; t < cols; ++t) {
          int32_t parent = values[b * cols + t];
          if (t == 0 && parent != -1)
            return bad(b, t, "must be -1 (the root)");
          if (t > 0 && (parent < 0 || parent >= t))
            return bad(b, t, "must be in [0, " + std::to_string(t) + ")");
        }
        continue;
      }
      const Signature &lengthSig = entry.inputs[sig.contractInput];
      int32_t length =
          static_cast<const int32_t *>(inputs[sig.contractInput].data)[b];
      if (length < 0 || length > cols)
        return fail(ATTN_SIGNATURE_MISMATCH,
                    "input '" + lengthSig.name + "' (#" +
                        std::to_string(sig.contractInput) + ") of entry '" +
                        entry.name + "': " + lengthSig.name + "[" +
                        std::to_string(b) + "] = " + std::to_string(length) +
                        " must be in [0, " + std::to_string(cols) +
                        "] (the nodes of '" + sig.name + "')");
      for (int64_t n = 0; n < length; ++n)
        if (values[b * cols + n] < 0 || values[b * cols + n] >= cols)
          return bad(b, n,
                     "must be a tree node in [0, " + std::to_string(cols) +
                         ") (it is within " + lengthSig.name + "[" +
                         std::to_string(b) + "] = " + std::to_string(length) +
                         ")");
    }
  }
  return ATTN_OK;
}

std::vector<int64_t> outputShape(const Signature &sig,
                                 const std::map<std::string, int64_t> &bound) {
  std::vector<int64_t> shape;
  for (size_t d = 0; d < sig.dims.size(); ++d)
    shape.push_back(sig.dims[d] >= 0
                        ? sig.dims[d]
                        : dimSize(sig, d, bound.at(sig.symbols[d])));
  return shape;
}

/// A buffer of the running program: data and shape.
struct Buffer {
  void *data = nullptr;
  std::vector<int64_t> shape;
  size_t elementBytes = 4;

  size_t bytes() const {
    size_t elements = 1;
    for (int64_t size : shape)
      elements *= static_cast<size_t>(size);
    return elements * elementBytes;
  }
};

attn_status evalInt(const Entry &entry, size_t index, const Step &step,
                    const std::vector<int64_t> &regs,
                    const std::vector<Buffer> &buffers, int64_t workers,
                    int64_t &result) {
  using K = attn::fb::IntOpKind;
  int64_t a = readsRegisters(step.op) ? regs[step.a] : 0;
  int64_t b = readsRegisters(step.op) ? regs[step.b] : 0;
  auto bad = [&](const std::string &why) {
    return fail(ATTN_RUN_ERROR, "entry '" + entry.name + "', step " +
                                    std::to_string(index) + ": " + why);
  };
  bool divides = step.op == K::DivU || step.op == K::CeilDivU ||
                 step.op == K::RemU || step.op == K::DivS ||
                 step.op == K::CeilDivS || step.op == K::FloorDivS ||
                 step.op == K::RemS;
  if (divides && b == 0)
    return bad("division by zero");
  // The one signed quotient that does not fit in 64 bits.
  bool signedDivides = step.op == K::DivS || step.op == K::CeilDivS ||
                       step.op == K::FloorDivS || step.op == K::RemS;
  if (signedDivides && a == INT64_MIN && b == -1)
    return bad("integer overflow: " + std::to_string(a) + " / -1");
  auto overflow = [&](const char *op) {
    return bad("integer overflow: " + std::to_string(a) + " " + op + " " +
               std::to_string(b));
  };
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (step.op) {
  case K::Constant:
    result = step.value;
    break;
  case K::WorkerCount:
    result = workers;
    break;
  case K::BufferDim: {
    const Buffer &buffer = buffers[step.a];
    if (step.b < 0 || step.b >= static_cast<int32_t>(buffer.shape.size()))
      return bad("reads dim " + std::to_string(step.b) + " of a rank-" +
                 std::to_string(buffer.shape.size()) + " buffer");
    result = buffer.shape[step.b];
    break;
  }
  case K::Add:
    if (__builtin_add_overflow(a, b, &result))
      return overflow("+");
    break;
  case K::Sub:
    if (__builtin_sub_overflow(a, b, &result))
      return overflow("-");
    break;
  case K::Mul:
    if (__builtin_mul_overflow(a, b, &result))
      return overflow("*");
    break;
  case K::DivU:
    result = static_cast<int64_t>(ua / ub);
    break;
  case K::CeilDivU:
    result = static_cast<int64_t>(ua / ub + (ua % ub != 0));
    break;
  case K::RemU:
    result = static_cast<int64_t>(ua % ub);
    break;
  case K::DivS:
    result = a / b;
    break;
  case K::CeilDivS:
    result = a / b + ((a % b != 0) && ((a < 0) == (b < 0)));
    break;
  case K::FloorDivS:
    result = a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
    break;
  case K::RemS:
    result = a % b;
    break;
  case K::MinU:
    result = ua < ub ? a : b;
    break;
  case K::MaxU:
    result = ua > ub ? a : b;
    break;
  case K::MinS:
    result = a < b ? a : b;
    break;
  case K::MaxS:
    result = a > b ? a : b;
    break;
  case K::Select:
    result = a ? b : regs[step.c];
    break;
  case K::CmpEq:
    result = a == b;
    break;
  case K::CmpNe:
    result = a != b;
    break;
  case K::CmpSlt:
    result = a < b;
    break;
  case K::CmpSle:
    result = a <= b;
    break;
  case K::CmpSgt:
    result = a > b;
    break;
  case K::CmpSge:
    result = a >= b;
    break;
  case K::CmpUlt:
    result = ua < ub;
    break;
  case K::CmpUle:
    result = ua <= ub;
    break;
  case K::CmpUgt:
    result = ua > ub;
    break;
  case K::CmpUge:
    result = ua >= ub;
    break;
  }
  return ATTN_OK;
}

/// Evaluates `program` over `buffers` (the entry's inputs and outputs, on
/// the device that runs it), appending its temporaries, which `allocate`
/// provides, and handing each dispatch with a positive count to
/// `dispatch`.
attn_status runProgram(
    const Entry &e, const Program &program, std::vector<Buffer> &buffers,
    int64_t workers,
    const std::function<attn_status(size_t bytes, void *&data)> &allocate,
    const std::function<attn_status(const Step &step, int64_t count,
                                    const std::vector<const Buffer *> &)>
        &dispatch) {
  std::vector<int64_t> regs(program.steps.size(), 0);
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const Step &step = program.steps[i];
    switch (step.kind) {
    case Step::Int:
      if (attn_status status =
              evalInt(e, i, step, regs, buffers, workers, regs[i]))
        return status;
      break;
    case Step::Temp: {
      Buffer buffer;
      buffer.elementBytes = step.elementBytes;
      for (int32_t r : step.dims)
        buffer.shape.push_back(regs[r]);
      std::optional<int64_t> bytes = attn::checkedTensorBytes(
          buffer.shape, static_cast<int64_t>(step.elementBytes));
      if (!bytes)
        return fail(ATTN_RUN_ERROR, "entry '" + e.name + "', step " +
                                        std::to_string(i) + ": a temporary " +
                                        formatDims(buffer.shape) +
                                        " has a negative or too large size");
      if (attn_status status =
              allocate(static_cast<size_t>(*bytes), buffer.data))
        return status;
      buffers.push_back(std::move(buffer));
      break;
    }
    case Step::Assert:
      if (!regs[step.a])
        return fail(ATTN_SIGNATURE_MISMATCH,
                    "entry '" + e.name + "': " + step.message);
      break;
    case Step::Dispatch: {
      int64_t count = regs[step.workgroups];
      if (count < 0)
        return fail(ATTN_RUN_ERROR, "entry '" + e.name + "': dispatch of " +
                                        step.kernelName +
                                        " has a negative workgroup count");
      if (count == 0)
        break;
      std::vector<const Buffer *> bindings;
      for (size_t b = 0; b < step.bindings.size(); ++b) {
        int32_t binding = step.bindings[b];
        if (binding >= static_cast<int32_t>(buffers.size()))
          return fail(ATTN_RUN_ERROR, "entry '" + e.name +
                                          "': a dispatch binds a temporary "
                                          "before it is allocated");
        // The static dims the kernel was compiled for (ranks were checked
        // at load time).
        if (!step.abi)
          return fail(ATTN_INVALID_BINARY,
                      "corrupt .attnb: entry '" + e.name + "' dispatches '" +
                          step.kernelName + "', which has no ABI record");
        const Buffer &buffer = buffers[binding];
        const std::vector<int64_t> &expected = step.abi->dims[b];
        for (size_t d = 0; d < expected.size(); ++d)
          if (expected[d] >= 0 && buffer.shape[d] != expected[d])
            return fail(ATTN_INVALID_BINARY,
                        "corrupt .attnb: entry '" + e.name + "' binds " +
                            formatDims(buffer.shape) + " as binding #" +
                            std::to_string(b) + " of '" + step.kernelName +
                            "', which was compiled for dim " +
                            std::to_string(d) + " = " +
                            std::to_string(expected[d]));
        bindings.push_back(&buffer);
      }
      if (attn_status status = dispatch(step, count, bindings))
        return status;
      break;
    }
    }
  }
  return ATTN_OK;
}

attn_status runOnCpu(attn_model &model, const Entry &e,
                     std::vector<Buffer> &buffers) {
  if (!model.hasCpuCode)
    return fail(ATTN_UNSUPPORTED,
                "the binary has no CPU code (compiled with --target cuda); "
                "run it on the GPU (--device cuda)");
  std::vector<std::unique_ptr<void, decltype(&std::free)>> temps;
  auto allocate = [&](size_t bytes, void *&data) {
    bytes = (bytes + 63) / 64 * 64;
    data = bytes ? std::aligned_alloc(64, bytes) : nullptr;
    if (bytes && !data)
      return fail(ATTN_RUN_ERROR, "entry '" + e.name +
                                      "': out of memory for a temporary of " +
                                      std::to_string(bytes) + " bytes");
    temps.emplace_back(data, &std::free);
    return ATTN_OK;
  };
  auto dispatch = [&](const Step &step, int64_t count,
                      const std::vector<const Buffer *> &bindings) {
    std::vector<void *> pointers;
    std::vector<int64_t> dims;
    for (const Buffer *buffer : bindings) {
      pointers.push_back(buffer->data);
      dims.insert(dims.end(), buffer->shape.begin(), buffer->shape.end());
    }
    KernelFn kernel = step.kernel;
    void *const *ptrs = pointers.data();
    const int64_t *dimData = dims.data();
    model.pool->parallelFor(count,
                            [&](int64_t id) { kernel(ptrs, dimData, id); });
    return ATTN_OK;
  };
  auto begin = std::chrono::steady_clock::now();
  attn_status status =
      runProgram(e, e.cpu, buffers, model.pool->size(), allocate, dispatch);
  if (status == ATTN_OK)
    model.recordKernelMs(std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - begin)
                             .count());
  return status;
}

/// How many workgroups a GPU keeps busy at once, as host programs ask
/// (attn.worker_count; decode splits its keys until it has that many
/// blocks): 4 blocks per multiprocessor.
constexpr int64_t kCudaBlocksPerMultiprocessor = 4;

attn_status runOnCuda(attn_model &model, const Entry &e,
                      std::vector<Buffer> &hostBuffers) {
  attn::cuda::Module &gpu = *model.cuda->module;
  std::string error;
  auto cudaFail = [&](const std::string &what) {
    return fail(ATTN_RUN_ERROR,
                "entry '" + e.name + "' on " + gpu.deviceName() + ": " + what);
  };
  // Every buffer lives on the device for the run: inputs copied there,
  // outputs copied back.
  std::vector<uint64_t> owned;
  struct Release {
    attn::cuda::Module &gpu;
    std::vector<uint64_t> &owned;
    ~Release() {
      for (uint64_t pointer : owned)
        gpu.release(pointer);
    }
  } release{gpu, owned};
  std::vector<Buffer> buffers;
  for (size_t i = 0; i < hostBuffers.size(); ++i) {
    uint64_t pointer = 0;
    size_t bytes = hostBuffers[i].bytes();
    if (!gpu.allocate(bytes, pointer, error))
      return cudaFail(error);
    owned.push_back(pointer);
    if (i < e.inputs.size() &&
        !gpu.copyToDevice(pointer, hostBuffers[i].data, bytes, error))
      return cudaFail(error);
    buffers.push_back({reinterpret_cast<void *>(pointer), hostBuffers[i].shape,
                       hostBuffers[i].elementBytes});
  }
  auto allocate = [&](size_t bytes, void *&data) {
    uint64_t pointer = 0;
    if (!gpu.allocate(bytes, pointer, error))
      return cudaFail(error);
    owned.push_back(pointer);
    data = reinterpret_cast<void *>(pointer);
    return ATTN_OK;
  };
  auto dispatch = [&](const Step &step, int64_t count,
                      const std::vector<const Buffer *> &bindings) {
    const attn::cuda::Module::Kernel *kernel = gpu.kernel(step.kernelName);
    std::vector<uint64_t> pointers;
    std::vector<std::vector<int64_t>> shapes;
    for (const Buffer *buffer : bindings) {
      pointers.push_back(reinterpret_cast<uint64_t>(buffer->data));
      shapes.push_back(buffer->shape);
    }
    if (!kernel || !gpu.launch(*kernel, count, pointers, shapes, error))
      return cudaFail(kernel ? error : "no kernel " + step.kernelName);
    return ATTN_OK;
  };
  // The copies in are synchronous, so the events time the launches alone.
  if (!gpu.startTimer(error))
    return cudaFail(error);
  if (attn_status status =
          runProgram(e, e.cuda, buffers,
                     kCudaBlocksPerMultiprocessor * gpu.multiprocessorCount(),
                     allocate, dispatch))
    return status;
  double kernelMs = 0;
  if (!gpu.stopTimer(kernelMs, error) || !gpu.synchronize(error))
    return cudaFail(error);
  model.recordKernelMs(kernelMs);
  for (size_t i = e.inputs.size(); i < hostBuffers.size(); ++i)
    if (!gpu.copyToHost(hostBuffers[i].data,
                        reinterpret_cast<uint64_t>(buffers[i].data),
                        hostBuffers[i].bytes(), error))
      return cudaFail(error);
  return ATTN_OK;
}

} // namespace

extern "C" attn_status attn_entry_output_shapes(const attn_model *model,
                                                int32_t entry,
                                                const attn_tensor *inputs,
                                                int32_t numInputs,
                                                int64_t *const *outputShapes) {
  return guarded("attn_entry_output_shapes", [&]() -> attn_status {
    const Entry *e = entryAt(model, entry);
    if (!e || (!outputShapes && !e->outputs.empty()))
      return fail(ATTN_INVALID_ARGUMENT, "attn_entry_output_shapes: bad entry");
    std::map<std::string, int64_t> bound;
    if (attn_status status = bindInputs(*e, inputs, numInputs, bound))
      return status;
    for (size_t i = 0; i < e->outputs.size(); ++i) {
      std::vector<int64_t> shape = outputShape(e->outputs[i], bound);
      std::copy(shape.begin(), shape.end(), outputShapes[i]);
    }
    return ATTN_OK;
  });
}

extern "C" attn_status attn_run(attn_model *model, int32_t entry,
                                const attn_tensor *inputs, int32_t numInputs,
                                const attn_tensor *outputs,
                                int32_t numOutputs) {
  return guarded("attn_run", [&]() -> attn_status {
    const Entry *e = entryAt(model, entry);
    if (!e)
      return fail(ATTN_INVALID_ARGUMENT,
                  "attn_run: no entry #" + std::to_string(entry));
    std::map<std::string, int64_t> bound;
    if (attn_status status = bindInputs(*e, inputs, numInputs, bound))
      return status;
    if (numOutputs != static_cast<int32_t>(e->outputs.size()) ||
        (numOutputs > 0 && !outputs))
      return fail(ATTN_SIGNATURE_MISMATCH,
                  "entry '" + e->name + "' has " +
                      std::to_string(e->outputs.size()) + " outputs, got " +
                      std::to_string(numOutputs) + " output buffers");
    for (int32_t i = 0; i < numOutputs; ++i)
      if (attn_status status =
              checkTensor(*e, "output", i, e->outputs[i], outputs[i], bound))
        return status;
    if (attn_status status = checkContracts(*e, inputs))
      return status;

    std::vector<Buffer> buffers;
    for (int32_t i = 0; i < numInputs; ++i)
      buffers.push_back({inputs[i].data, outputShape(e->inputs[i], bound),
                         attn_dtype_size(e->inputs[i].dtype)});
    for (int32_t i = 0; i < numOutputs; ++i)
      buffers.push_back({outputs[i].data, outputShape(e->outputs[i], bound),
                         attn_dtype_size(e->outputs[i].dtype)});
    if (model->device == ATTN_DEVICE_CPU)
      return runOnCpu(*model, *e, buffers);
    // One CUDA run at a time per model (its events and module are shared);
    // the device is read again under the lock set_device takes.
    std::lock_guard<std::mutex> lock(model->cudaMutex);
    if (model->device == ATTN_DEVICE_CPU)
      return runOnCpu(*model, *e, buffers);
    return runOnCuda(*model, *e, buffers);
  });
}
