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
#include "runtime/GuardedMemory.h"
#include "runtime/HostProgram.h"
#include "runtime/RuntimeTesting.h"
#include "runtime/ThreadPool.h"
#include "runtime/schemas/attnb_generated.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

using namespace attn::host;

namespace {

constexpr uint32_t kFormatVersion = 9;

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
  ATTN_FEATURE("avx512bf16")
  ATTN_FEATURE("amx-tile")
  ATTN_FEATURE("amx-bf16")
#undef ATTN_FEATURE
#endif
  known = false;
  return false;
}

/// Asks Linux for the AMX tile data state: until a process has it, its
/// first tile instruction is killed with SIGILL (the state is 8 KiB per
/// thread, so Linux hands it out only on request). Once is enough for
/// every thread of the process; asking again is harmless.
bool requestAmxTileState(std::string &why) {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023; // ARCH_REQ_XCOMP_PERM
  constexpr int kXfeatureXtiledata = 18;    // XFEATURE_XTILEDATA
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0)
    return true;
  why = std::strerror(errno);
#else
  why = "not an x86-64 Linux";
#endif
  return false;
}

} // namespace

/// Memory for the temporaries of CPU calls, kept with the model. Fresh
/// temporaries on every call cost more than the kernels on long inputs:
/// glibc maps large blocks anew and returns them on free, so each call
/// page-faults (and the kernel zeroes) every page again (Gated DeltaNet
/// prefill of 8K tokens spent about half its time there). A call takes a
/// workspace (one per concurrent call), carves its temporaries from it and
/// gives it back; one that was too small grows to what the call needed.
/// Device temporaries are carved at this alignment (cuMemAlloc's), host
/// ones at a cache line.
constexpr size_t kDeviceTemporaryAlignment = 256, kHostTemporaryAlignment = 64;

/// `bytes` rounded up to `alignment` (SIZE_MAX when that does not fit).
size_t alignTemporary(size_t bytes, size_t alignment) {
  if (bytes > SIZE_MAX - alignment)
    return SIZE_MAX;
  return (bytes + alignment - 1) / alignment * alignment;
}

/// ATTN_POISON=1 in the environment: each call first fills its temporaries
/// and its outputs with kPoisonByte (NaN as floats, -1 as integers), so a
/// kernel that reads memory nothing wrote, or leaves part of an output
/// unwritten, shows it in its results instead of passing on memory that
/// happened to be zero (fresh pages) or right (a workspace's last call).
/// For tests (test/lit.cfg.py sets it): it costs a pass over that memory.
bool poisonEachCall() {
  static const bool poison = [] {
    const char *value = std::getenv("ATTN_POISON");
    return value && *value && std::strcmp(value, "0") != 0;
  }();
  return poison;
}
constexpr uint8_t kPoisonByte = 0xFF;

class WorkspacePool {
public:
  struct Workspace {
    std::unique_ptr<uint8_t, decltype(&std::free)> block{nullptr, &std::free};
    size_t capacity = 0;
  };

  std::unique_ptr<Workspace> take() {
    std::lock_guard<std::mutex> lock(mutex);
    if (free.empty())
      return std::make_unique<Workspace>();
    std::unique_ptr<Workspace> workspace = std::move(free.back());
    free.pop_back();
    return workspace;
  }
  /// Returns `workspace`, first regrown to `needed` bytes if it held less
  /// (left empty if that much cannot be had: the next call allocates).
  void give(std::unique_ptr<Workspace> workspace, size_t needed) {
    if (needed > workspace->capacity) {
      workspace->block.reset();
      workspace->block.reset(
          static_cast<uint8_t *>(std::aligned_alloc(64, needed)));
      workspace->capacity = workspace->block ? needed : 0;
    }
    std::lock_guard<std::mutex> lock(mutex);
    free.push_back(std::move(workspace));
  }

private:
  std::mutex mutex;
  std::vector<std::unique_ptr<Workspace>> free;
};

/// The CUDA code of a binary, loaded onto the GPU at first use.
struct CudaCode {
  std::string chip, ptx;
  std::vector<uint8_t> cubin;
  std::vector<attn::cuda::Module::Kernel> kernels;
  std::unique_ptr<attn::cuda::Module> module;
  /// The records of index errors of attn_run_device calls, one i32 [8]
  /// per entry in device memory (see attn_model_device_status). Guarded by
  /// the model's cudaMutex.
  uint64_t deviceIndexRecords = 0;

  ~CudaCode() {
    std::string ignored;
    if (module && deviceIndexRecords && module->makeCurrent(ignored))
      module->release(deviceIndexRecords);
  }
};

struct attn_model {
  std::vector<uint8_t> bytes;
  /// The nested model, copied when it does not start 8-byte aligned.
  std::vector<uint64_t> alignedModel;
  std::string name;
  std::vector<Entry> entries;
  bool hasCpuCode = false;
  void *library = nullptr;
  /// The memfd the CPU code was loaded from, open while the code is: the
  /// dynamic loader returns an already loaded library for a path it has
  /// seen, so every live model needs its own /proc/self/fd/N.
  int codeFd = -1;
  std::unique_ptr<attn::ThreadPool> pool;
  WorkspacePool workspaces;
  std::optional<CudaCode> cuda;
  /// The kernel ABIs of each target's code, by exported name.
  std::map<std::string, KernelAbi> cpuAbis, cudaAbis;
  /// Serializes what changes `device` and every CUDA run: the module's
  /// events and context are one per model. CPU runs take no lock.
  std::mutex cudaMutex;
  std::atomic<attn_device> device{ATTN_DEVICE_CPU};
  /// The device memory attn_run_device calls take their temporaries from
  /// (attn_model_set_workspace; 0 bytes: none, they allocate on their
  /// stream). Guarded by cudaMutex.
  uint64_t deviceWorkspace = 0;
  size_t deviceWorkspaceBytes = 0;

  /// What the last successful attn_run on the calling thread spent in its
  /// host program and kernels (see attn_model_last_kernel_ms).
  void recordKernelMs(double milliseconds) {
    std::lock_guard<std::mutex> lock(timesMutex);
    lastKernelMs[std::this_thread::get_id()] = milliseconds;
  }
  std::optional<double> kernelMsOfThisThread() const {
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
  mutable std::mutex timesMutex;
  std::map<std::thread::id, double> lastKernelMs;

  attn_status loadCode(const attn::fb::CpuCode *cpu);
};

extern "C" const char *attn_last_error(void) { return lastErrorMessage(); }

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
      std::string why;
      if (feature->str() == "amx-tile" && !requestAmxTileState(why))
        return fail(ATTN_UNSUPPORTED,
                    "the CPU code uses AMX tiles, and Linux refused this "
                    "process their state (arch_prctl ARCH_REQ_XCOMP_PERM: " +
                        why + "); recompile with --cpu=x86-64-v4+avx512bf16");
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
  // The nested model's 8-byte fields are aligned relative to its start; a
  // file whose model does not start 8-byte aligned is read from a copy.
  if (reinterpret_cast<uintptr_t>(payload) % alignof(int64_t) != 0) {
    alignedModel.assign((payloadSize + 7) / 8, 0);
    std::memcpy(alignedModel.data(), payload, payloadSize);
    payload = reinterpret_cast<const uint8_t *>(alignedModel.data());
  }
  if (attn::fnv1a64(payload, payloadSize) != binary->model_fnv1a64())
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: the model does not match its checksum");
  flatbuffers::Verifier modelVerifier(payload, payloadSize);
  if (!modelVerifier.VerifyBuffer<attn::fb::Model>(nullptr))
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: the Flatbuffers verifier rejected the model");
  const attn::fb::Model *model = flatbuffers::GetRoot<attn::fb::Model>(payload);
  if (!wideVectorsAligned(model))
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: a kernel ABI record's dims are not 8-byte "
                "aligned");
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
    std::FILE *file = std::fopen(path, "rb");
    if (!file)
      return fail(ATTN_IO_ERROR,
                  std::string(path) + ": cannot open: " + std::strerror(errno));
    std::vector<char> bytes;
    char buffer[1 << 16];
    size_t count;
    while ((count = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
      bytes.insert(bytes.end(), buffer, buffer + count);
    const int readError = std::ferror(file) ? errno : 0;
    std::fclose(file);
    if (readError)
      return fail(ATTN_IO_ERROR, std::string(path) + ": cannot read: " +
                                     std::strerror(readError));
    attn_status status =
        attn_model_load_memory(bytes.data(), bytes.size(), numThreads, model);
    if (status != ATTN_OK)
      fail(status, std::string(path) + ": " + lastErrorMessage());
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
      // The entries' records of index errors of attn_run_device calls,
      // made here so that no call (which may be captured in a CUDA graph)
      // has to.
      bool checksIndices = false;
      for (const Entry &e : model->entries)
        checksIndices |= e.cuda.checksIndices;
      const std::vector<int32_t> clear(
          model->entries.size() * kIndexRecordFields, 0);
      const size_t bytes = clear.size() * sizeof(int32_t);
      uint64_t records = 0;
      if (checksIndices &&
          (!loaded->allocate(bytes, records, error) ||
           !loaded->copyToDevice(records, clear.data(), bytes, error))) {
        model->cuda->module.reset();
        return fail(ATTN_RUN_ERROR, error);
      }
      model->cuda->deviceIndexRecords = records;
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
  std::optional<double> last = model->kernelMsOfThisThread();
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

/// The error of a call of `function` on no entry: a null model, or an
/// index outside the model's entries.
attn_status noEntry(const attn_model *model, int32_t entry,
                    const std::string &function) {
  if (!model)
    return fail(ATTN_INVALID_ARGUMENT, function + ": the model is null");
  return fail(ATTN_INVALID_ARGUMENT,
              function + ": no entry #" + std::to_string(entry) +
                  " (the model has " + std::to_string(model->entries.size()) +
                  ")");
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
  if (!e)
    return noEntry(model, entry, "attn_entry_argument");
  if (!info)
    return fail(ATTN_INVALID_ARGUMENT, "attn_entry_argument: info is null");
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
  info->in_place = sig.inPlace ? 1 : 0;
  info->contract_queries = sig.contractQueries;
  return ATTN_OK;
}

namespace {
/// Calls a kernel of the binary's CPU code. UBSan's function check
/// (-fsanitize=function, in the sanitizer build) reads the 8 bytes before
/// a callee's entry for its type signature; a kernel is code of the
/// library the binary carries, not of a C++ translation unit, and one that
/// starts a page after an unmapped one faulted there.
#if defined(__clang__)
__attribute__((no_sanitize("function")))
#endif
void callKernel(KernelFn kernel, void *const *buffers,
                const int64_t *dims, int64_t workgroup) {
  kernel(buffers, dims, workgroup);
}

/// `poisonOutputs`: whether ATTN_POISON may fill the outputs first; not
/// for a call whose kernels check its index inputs, which leaves its
/// outputs as they were when a check fails.
attn_status runOnCpu(attn_model &model, const Entry &e,
                     std::vector<Buffer> &buffers, bool poisonOutputs) {
  if (!model.hasCpuCode)
    return fail(ATTN_UNSUPPORTED,
                "the binary has no CPU code (compiled with --target cuda); "
                "run it on the GPU (--device cuda)");
  // Temporaries come from the call's workspace while it has room, else
  // from the heap; the workspace then grows to all of them for next time.
  std::unique_ptr<WorkspacePool::Workspace> workspace = model.workspaces.take();
  size_t used = 0, needed = 0;
  std::vector<std::unique_ptr<void, decltype(&std::free)>> overflow;
  std::vector<std::unique_ptr<GuardedBlock>> guardedTemporaries;
  auto allocate = [&](size_t bytes, void *&data) {
    const size_t requested = bytes;
    bytes = alignTemporary(bytes, kHostTemporaryAlignment);
    data = nullptr;
    if (!bytes)
      return ATTN_OK;
    if (guardEachCall()) {
      // The temporary's own size, not the rounded one: no kernel may read
      // the rounding's slack either. The workspace is left as it is.
      guardedTemporaries.push_back(GuardedBlock::map(requested));
      if (!guardedTemporaries.back())
        return fail(ATTN_RUN_ERROR, "entry '" + e.name +
                                        "': ATTN_GUARD could not map a "
                                        "temporary of " +
                                        std::to_string(requested) + " bytes");
      data = guardedTemporaries.back()->data;
    } else {
      needed = bytes > SIZE_MAX - needed ? SIZE_MAX : needed + bytes;
      if (bytes <= workspace->capacity - used) {
        data = workspace->block.get() + used;
        used += bytes;
      } else {
        data = std::aligned_alloc(64, bytes);
        if (!data)
          return fail(ATTN_RUN_ERROR,
                      "entry '" + e.name +
                          "': out of memory for a temporary of " +
                          std::to_string(bytes) + " bytes");
        overflow.emplace_back(data, &std::free);
      }
    }
    if (poisonEachCall())
      std::memset(data, kPoisonByte, guardEachCall() ? requested : bytes);
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
    model.pool->parallelFor(
        count, [&](int64_t id) { callKernel(kernel, ptrs, dimData, id); });
    return ATTN_OK;
  };
  if (poisonEachCall() && poisonOutputs)
    for (size_t i = e.inputs.size(); i < buffers.size(); ++i)
      if (buffers[i].data) // an empty output may have none
        std::memset(buffers[i].data, kPoisonByte, buffers[i].bytes());
  // The record of index errors, for programs whose kernels check their
  // index inputs (CUDA kernels run on the CPU, CompileOptions::
  // cpuRunsCudaKernels): clear unless the host's checks were skipped.
  int32_t indexRecord[kIndexRecordFields] = {};
  GuardedTensors guarded;
  attn_status status = guardEachCall() ? guarded.guard(e, buffers) : ATTN_OK;
  auto begin = std::chrono::steady_clock::now();
  if (status == ATTN_OK)
    status = runProgram(e, e.cpu, buffers, model.pool->size(), indexRecord,
                        allocate, dispatch);
  if (status == ATTN_OK)
    status = indexRecordError(e, indexRecord);
  if (guardEachCall())
    guarded.restore(e, buffers, status == ATTN_OK);
  if (status == ATTN_OK)
    model.recordKernelMs(std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - begin)
                             .count());
  overflow.clear();
  model.workspaces.give(std::move(workspace), status == ATTN_OK ? needed : 0);
  return status;
}

/// Launches the kernel of dispatch `step` over `count` workgroups on
/// `stream`, its bindings passed by pointer and shape (the CudaKernel ABI).
bool launchDispatch(attn::cuda::Module &gpu, const Step &step, int64_t count,
                    const std::vector<const Buffer *> &bindings, void *stream,
                    std::string &error) {
  const attn::cuda::Module::Kernel *kernel = gpu.kernel(step.kernelName);
  if (!kernel) {
    error = "no kernel " + step.kernelName;
    return false;
  }
  std::vector<uint64_t> pointers;
  std::vector<std::vector<int64_t>> shapes;
  for (const Buffer *buffer : bindings) {
    pointers.push_back(reinterpret_cast<uint64_t>(buffer->data));
    shapes.push_back(buffer->shape);
  }
  return gpu.launch(*kernel, count, pointers, shapes, stream, error);
}

attn_status runOnCuda(attn_model &model, const Entry &e,
                      std::vector<Buffer> &hostBuffers) {
  attn::cuda::Module &gpu = *model.cuda->module;
  std::string error;
  auto cudaFail = [&](const std::string &what) {
    return fail(ATTN_RUN_ERROR,
                "entry '" + e.name + "' on " + gpu.deviceName() + ": " + what);
  };
  // Every buffer lives on the device for the run: inputs copied there,
  // outputs copied back. The temporaries are allocated on the stream, from
  // the device's memory pool, which keeps them for the next call
  // (Module::load): cuMemAlloc and cuMemFree for each call's temporaries
  // synchronize with the device and map memory anew, and took longer than
  // the kernels (an H100's 32K-key decode: 0.27 ms timed for 0.07 ms of
  // kernels). Both are given back however the call ends.
  std::vector<uint64_t> owned, temporaries;
  struct Release {
    attn::cuda::Module &gpu;
    std::vector<uint64_t> &owned, &temporaries;
    ~Release() {
      for (uint64_t pointer : temporaries)
        gpu.releaseAsync(pointer, nullptr);
      for (uint64_t pointer : owned)
        gpu.release(pointer);
    }
  } release{gpu, owned, temporaries};
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
    if (i >= e.inputs.size() && poisonEachCall() &&
        !gpu.fillAsync(pointer, kPoisonByte, bytes, nullptr, error))
      return cudaFail(error);
    buffers.push_back({reinterpret_cast<void *>(pointer), hostBuffers[i].shape,
                       hostBuffers[i].elementBytes});
  }
  auto allocate = [&](size_t bytes, void *&data) {
    data = nullptr;
    bytes = alignTemporary(bytes, kDeviceTemporaryAlignment);
    if (bytes == 0)
      return ATTN_OK;
    uint64_t pointer = 0;
    if (!gpu.allocateAsync(bytes, nullptr, pointer, error))
      return cudaFail(error);
    temporaries.push_back(pointer);
    if (poisonEachCall() &&
        !gpu.fillAsync(pointer, kPoisonByte, bytes, nullptr, error))
      return cudaFail(error);
    data = reinterpret_cast<void *>(pointer);
    return ATTN_OK;
  };
  auto dispatch = [&](const Step &step, int64_t count,
                      const std::vector<const Buffer *> &bindings) {
    if (!launchDispatch(gpu, step, count, bindings, nullptr, error))
      return cudaFail(error);
    return ATTN_OK;
  };
  // The call's own record of index errors (its inputs were checked on the
  // host, so the kernels' checks agree and leave it clear).
  int32_t indexRecord[kIndexRecordFields] = {};
  uint64_t deviceRecord = 0;
  if (e.cuda.checksIndices &&
      (!gpu.allocate(sizeof indexRecord, deviceRecord, error) ||
       (owned.push_back(deviceRecord),
        !gpu.copyToDevice(deviceRecord, indexRecord, sizeof indexRecord,
                          error))))
    return cudaFail(error);
  // The copies in are synchronous, so the events time the launches alone.
  if (!gpu.startTimer(error))
    return cudaFail(error);
  if (attn_status status = runProgram(
          e, e.cuda, buffers,
          kCudaWorkersPerMultiprocessor * gpu.multiprocessorCount(),
          reinterpret_cast<int32_t *>(deviceRecord), allocate, dispatch))
    return status;
  double kernelMs = 0;
  if (!gpu.stopTimer(kernelMs, error) || !gpu.synchronize(error))
    return cudaFail(error);
  if (deviceRecord) {
    if (!gpu.copyToHost(indexRecord, deviceRecord, sizeof indexRecord, error))
      return cudaFail(error);
    if (attn_status status = indexRecordError(e, indexRecord))
      return status;
  }
  model.recordKernelMs(kernelMs);
  // The outputs and the inputs updated in place come back.
  for (size_t i = 0; i < hostBuffers.size(); ++i)
    if (e.writes(i) &&
        !gpu.copyToHost(hostBuffers[i].data,
                        reinterpret_cast<uint64_t>(buffers[i].data),
                        hostBuffers[i].bytes(), error))
      return cudaFail(error);
  return ATTN_OK;
}

} // namespace

namespace {

/// Binds the symbols of `inputs`' dtypes and shapes as bindInputs does,
/// their data pointers unread (they may be null).
attn_status bindShapes(const Entry &e, const attn_tensor *inputs,
                       int32_t numInputs,
                       std::map<std::string, int64_t> &bound) {
  std::vector<attn_tensor> shapes;
  if (inputs && numInputs > 0)
    shapes.assign(inputs, inputs + numInputs);
  static uint8_t unread;
  for (attn_tensor &tensor : shapes)
    tensor.data = &unread;
  return bindInputs(e, inputs ? shapes.data() : nullptr, numInputs, bound);
}

} // namespace

extern "C" attn_status attn_entry_output_shapes(const attn_model *model,
                                                int32_t entry,
                                                const attn_tensor *inputs,
                                                int32_t numInputs,
                                                int64_t *const *outputShapes) {
  return guarded("attn_entry_output_shapes", [&]() -> attn_status {
    const Entry *e = entryAt(model, entry);
    if (!e)
      return noEntry(model, entry, "attn_entry_output_shapes");
    for (size_t i = 0; i < e->outputs.size(); ++i)
      if (!outputShapes || !outputShapes[i])
        return fail(
            ATTN_INVALID_ARGUMENT,
            "attn_entry_output_shapes: output_shapes" +
                (outputShapes ? "[" + std::to_string(i) + "]" : std::string()) +
                " is null");
    std::map<std::string, int64_t> bound;
    if (attn_status status = bindShapes(*e, inputs, numInputs, bound))
      return status;
    for (size_t i = 0; i < e->outputs.size(); ++i) {
      std::vector<int64_t> shape = outputShape(e->outputs[i], bound);
      std::copy(shape.begin(), shape.end(), outputShapes[i]);
    }
    return ATTN_OK;
  });
}

namespace {

/// The program's buffers of a call whose symbols are `bound`: its inputs,
/// then its outputs, each with the data of `inputs` / `outputs` (none when
/// those are null: a dry run).
std::vector<Buffer> callBuffers(const Entry &e,
                                const std::map<std::string, int64_t> &bound,
                                const attn_tensor *inputs,
                                const attn_tensor *outputs) {
  std::vector<Buffer> buffers;
  for (size_t i = 0; i < e.inputs.size(); ++i)
    buffers.push_back({inputs ? inputs[i].data : nullptr,
                       outputShape(e.inputs[i], bound),
                       attn_dtype_size(e.inputs[i].dtype)});
  for (size_t i = 0; i < e.outputs.size(); ++i)
    buffers.push_back({outputs ? outputs[i].data : nullptr,
                       outputShape(e.outputs[i], bound),
                       attn_dtype_size(e.outputs[i].dtype)});
  return buffers;
}

/// Checks a call's inputs and outputs against the entry's signature and
/// makes the program's buffers of them (inputs, then outputs).
attn_status bindCall(const Entry &e, const attn_tensor *inputs,
                     int32_t numInputs, const attn_tensor *outputs,
                     int32_t numOutputs, std::vector<Buffer> &buffers) {
  std::map<std::string, int64_t> bound;
  if (attn_status status = bindInputs(e, inputs, numInputs, bound))
    return status;
  if (numOutputs > 0 && !outputs)
    return fail(ATTN_INVALID_ARGUMENT,
                "entry '" + e.name + "': outputs is null");
  if (numOutputs != static_cast<int32_t>(e.outputs.size()))
    return fail(ATTN_SIGNATURE_MISMATCH,
                "entry '" + e.name + "' has " +
                    std::to_string(e.outputs.size()) + " outputs, got " +
                    std::to_string(numOutputs) + " output buffers");
  for (int32_t i = 0; i < numOutputs; ++i)
    if (attn_status status =
            checkTensor(e, "output", i, e.outputs[i], outputs[i], bound))
      return status;
  buffers = callBuffers(e, bound, inputs, outputs);
  return ATTN_OK;
}

/// The bytes of the temporaries `program` allocates for `buffers` (each
/// aligned to `alignment`), without running a kernel: its sizes depend on
/// the dims and `workers` alone.
attn_status temporaryBytes(const Entry &e, const Program &program,
                           std::vector<Buffer> buffers, int64_t workers,
                           size_t alignment, size_t &bytes) {
  bytes = 0;
  auto allocate = [&](size_t size, void *&data) {
    data = nullptr;
    size_t aligned = alignTemporary(size, alignment);
    if (aligned > SIZE_MAX - bytes)
      return fail(ATTN_RUN_ERROR, "entry '" + e.name +
                                      "': its temporaries do not fit in "
                                      "memory");
    bytes += aligned;
    return ATTN_OK;
  };
  auto dispatch = [](const Step &, int64_t,
                     const std::vector<const Buffer *> &) { return ATTN_OK; };
  return runProgram(e, program, buffers, workers, /*indexRecord=*/nullptr,
                    allocate, dispatch);
}

/// attn_run_device's work: the entry's program on the model's GPU over
/// buffers in its memory, enqueued on `stream`.
attn_status runOnCudaStream(attn_model &model, const Entry &e,
                            std::vector<Buffer> &buffers, void *stream) {
  attn::cuda::Module &gpu = *model.cuda->module;
  std::string error;
  auto cudaFail = [&](const std::string &what) {
    return fail(ATTN_RUN_ERROR,
                "entry '" + e.name + "' on " + gpu.deviceName() + ": " + what);
  };
  if (!gpu.makeCurrent(error))
    return cudaFail(error);
  const int64_t workers =
      kCudaWorkersPerMultiprocessor * gpu.multiprocessorCount();
  // With a workspace, what the temporaries need first (a dry run of the
  // host program): one too small fails before anything is enqueued.
  const bool fromWorkspace = model.deviceWorkspaceBytes > 0;
  if (fromWorkspace) {
    size_t needed = 0;
    if (attn_status status = temporaryBytes(e, e.cuda, buffers, workers,
                                            kDeviceTemporaryAlignment, needed))
      return status;
    if (needed > model.deviceWorkspaceBytes)
      return fail(ATTN_INVALID_ARGUMENT,
                  "entry '" + e.name + "' needs " + std::to_string(needed) +
                      " bytes of workspace for these inputs, and the model's "
                      "workspace holds " +
                      std::to_string(model.deviceWorkspaceBytes) +
                      " (attn_entry_workspace_bytes says what a call needs)");
  }
  // Without a workspace the temporaries are allocated on the stream and
  // freed on it after the launches that use them.
  std::vector<uint64_t> owned;
  size_t used = 0;
  auto allocate = [&](size_t bytes, void *&data) {
    data = nullptr;
    bytes = alignTemporary(bytes, kDeviceTemporaryAlignment);
    if (bytes == 0)
      return ATTN_OK;
    uint64_t pointer = 0;
    if (fromWorkspace) {
      pointer = model.deviceWorkspace + used;
      used += bytes;
    } else {
      if (!gpu.allocateAsync(bytes, stream, pointer, error))
        return cudaFail(error);
      owned.push_back(pointer);
    }
    if (poisonEachCall() &&
        !gpu.fillAsync(pointer, kPoisonByte, bytes, stream, error))
      return cudaFail(error);
    data = reinterpret_cast<void *>(pointer);
    return ATTN_OK;
  };
  auto dispatch = [&](const Step &step, int64_t count,
                      const std::vector<const Buffer *> &bindings) {
    if (!launchDispatch(gpu, step, count, bindings, stream, error))
      return cudaFail(error);
    return ATTN_OK;
  };
  // The entry's record of index errors, which its kernels' checks set and
  // attn_model_device_status reads and clears.
  const size_t entryIndex = static_cast<size_t>(&e - model.entries.data());
  int32_t *indexRecord =
      model.cuda->deviceIndexRecords
          ? reinterpret_cast<int32_t *>(model.cuda->deviceIndexRecords) +
                entryIndex * kIndexRecordFields
          : nullptr;
  attn_status status =
      runProgram(e, e.cuda, buffers, workers, indexRecord, allocate, dispatch);
  for (uint64_t pointer : owned)
    gpu.releaseAsync(pointer, stream);
  return status;
}

} // namespace

namespace {

/// attn_run's work; `checkIndexValues` false leaves the values of index
/// inputs to the kernels' own checks (attn::test_hooks).
attn_status runHostTensors(attn_model *model, int32_t entry,
                           const attn_tensor *inputs, int32_t numInputs,
                           const attn_tensor *outputs, int32_t numOutputs,
                           bool checkIndexValues) {
  const Entry *e = entryAt(model, entry);
  if (!e)
    return noEntry(model, entry, "attn_run");
  std::vector<Buffer> buffers;
  if (attn_status status =
          bindCall(*e, inputs, numInputs, outputs, numOutputs, buffers))
    return status;
  if (attn_status status = checkIndexValues ? checkContracts(*e, inputs)
                                            : checkContractShapes(*e, inputs))
    return status;
  if (model->device == ATTN_DEVICE_CPU)
    return runOnCpu(*model, *e, buffers, /*poisonOutputs=*/checkIndexValues);
  // One CUDA run at a time per model (its events and module are shared);
  // the device is read again under the lock set_device takes.
  std::lock_guard<std::mutex> lock(model->cudaMutex);
  if (model->device == ATTN_DEVICE_CPU)
    return runOnCpu(*model, *e, buffers, /*poisonOutputs=*/checkIndexValues);
  return runOnCuda(*model, *e, buffers);
}

} // namespace

extern "C" attn_status attn_run(attn_model *model, int32_t entry,
                                const attn_tensor *inputs, int32_t numInputs,
                                const attn_tensor *outputs,
                                int32_t numOutputs) {
  return guarded("attn_run", [&]() -> attn_status {
    return runHostTensors(model, entry, inputs, numInputs, outputs, numOutputs,
                          /*checkIndexValues=*/true);
  });
}

attn_status attn::test_hooks::runCheckingIndicesInKernels(
    attn_model *model, int32_t entry, const attn_tensor *inputs,
    int32_t numInputs, const attn_tensor *outputs, int32_t numOutputs) {
  return guarded("runCheckingIndicesInKernels", [&]() -> attn_status {
    const Entry *e = entryAt(model, entry);
    if (!e)
      return noEntry(model, entry, "attn_run");
    bool hasIndexInputs = false;
    for (const Signature &sig : e->inputs)
      hasIndexInputs |= sig.contract != ATTN_CONTRACT_NONE;
    const Program &program =
        model->device == ATTN_DEVICE_CPU ? e->cpu : e->cuda;
    if (hasIndexInputs && !program.checksIndices)
      return fail(ATTN_UNSUPPORTED,
                  "entry '" + e->name +
                      "': its kernels here do not check its index inputs "
                      "(CPU kernels: compile with cpuRunsCudaKernels)");
    return runHostTensors(model, entry, inputs, numInputs, outputs, numOutputs,
                          /*checkIndexValues=*/false);
  });
}

extern "C" attn_status attn_run_device(attn_model *model, int32_t entry,
                                       const attn_tensor *inputs,
                                       int32_t numInputs,
                                       const attn_tensor *outputs,
                                       int32_t numOutputs, void *stream) {
  return guarded("attn_run_device", [&]() -> attn_status {
    const Entry *e = entryAt(model, entry);
    if (!e)
      return noEntry(model, entry, "attn_run_device");
    std::vector<Buffer> buffers;
    if (attn_status status =
            bindCall(*e, inputs, numInputs, outputs, numOutputs, buffers))
      return status;
    // Index values in device memory cannot be read here without a
    // synchronisation: the kernels check them (attn_model_device_status
    // reports what they find), the host checks what the dims state.
    if (attn_status status = checkContractShapes(*e, inputs))
      return status;
    std::lock_guard<std::mutex> lock(model->cudaMutex);
    if (model->device != ATTN_DEVICE_CUDA)
      return fail(ATTN_UNSUPPORTED,
                  "attn_run_device: the model runs on the CPU; choose the "
                  "GPU first (attn_model_set_device(ATTN_DEVICE_CUDA))");
    return runOnCudaStream(*model, *e, buffers, stream);
  });
}

extern "C" attn_status attn_entry_workspace_bytes(const attn_model *model,
                                                  int32_t entry,
                                                  const attn_tensor *inputs,
                                                  int32_t numInputs,
                                                  size_t *bytes) {
  return guarded("attn_entry_workspace_bytes", [&]() -> attn_status {
    const Entry *e = entryAt(model, entry);
    if (!e)
      return noEntry(model, entry, "attn_entry_workspace_bytes");
    if (!bytes)
      return fail(ATTN_INVALID_ARGUMENT,
                  "attn_entry_workspace_bytes: bytes is null");
    std::map<std::string, int64_t> bound;
    if (attn_status status = bindShapes(*e, inputs, numInputs, bound))
      return status;
    std::vector<Buffer> buffers = callBuffers(*e, bound, nullptr, nullptr);
    if (model->device == ATTN_DEVICE_CPU) {
      if (!model->hasCpuCode)
        return fail(ATTN_UNSUPPORTED,
                    "the binary has no CPU code (compiled with --target "
                    "cuda); choose the GPU first");
      return temporaryBytes(*e, e->cpu, buffers, model->pool->size(),
                            kHostTemporaryAlignment, *bytes);
    }
    return temporaryBytes(*e, e->cuda, buffers,
                          kCudaWorkersPerMultiprocessor *
                              model->cuda->module->multiprocessorCount(),
                          kDeviceTemporaryAlignment, *bytes);
  });
}

extern "C" attn_status attn_model_device_status(attn_model *model) {
  return guarded("attn_model_device_status", [&]() -> attn_status {
    if (!model)
      return fail(ATTN_INVALID_ARGUMENT,
                  "attn_model_device_status: null model");
    std::lock_guard<std::mutex> lock(model->cudaMutex);
    if (!model->cuda || !model->cuda->module ||
        !model->cuda->deviceIndexRecords)
      return ATTN_OK;
    attn::cuda::Module &gpu = *model->cuda->module;
    const uint64_t records = model->cuda->deviceIndexRecords;
    std::vector<int32_t> all(model->entries.size() * kIndexRecordFields);
    std::string error;
    if (!gpu.makeCurrent(error) ||
        !gpu.copyToHost(all.data(), records, all.size() * sizeof(int32_t),
                        error))
      return fail(ATTN_RUN_ERROR, "attn_model_device_status: " + error);
    // The first entry with an error; its record is cleared, so the next
    // call reports the next.
    for (size_t i = 0; i < model->entries.size(); ++i) {
      const int32_t *record = all.data() + i * kIndexRecordFields;
      if (record[0] == 0)
        continue;
      const int32_t clear[kIndexRecordFields] = {};
      if (!gpu.copyToDevice(records + i * sizeof clear, clear, sizeof clear,
                            error))
        return fail(ATTN_RUN_ERROR, "attn_model_device_status: " + error);
      return indexRecordError(model->entries[i], record);
    }
    return ATTN_OK;
  });
}

extern "C" attn_status
attn_model_set_workspace(attn_model *model, void *devicePointer, size_t bytes) {
  return guarded("attn_model_set_workspace", [&]() -> attn_status {
    if (!model || (!devicePointer && bytes > 0))
      return fail(ATTN_INVALID_ARGUMENT,
                  "attn_model_set_workspace: null model, or no memory for " +
                      std::to_string(bytes) + " bytes");
    std::lock_guard<std::mutex> lock(model->cudaMutex);
    if (model->device != ATTN_DEVICE_CUDA)
      return fail(ATTN_UNSUPPORTED,
                  "attn_model_set_workspace: a workspace of device memory is "
                  "for a model on the GPU (attn_model_set_device("
                  "ATTN_DEVICE_CUDA)); CPU calls keep their own");
    model->deviceWorkspace = reinterpret_cast<uint64_t>(devicePointer);
    model->deviceWorkspaceBytes = devicePointer ? bytes : 0;
    return ATTN_OK;
  });
}
