//===- CudaDriver.cpp - The CUDA driver API, loaded at first use ----------===//

#include "runtime/CudaDriver.h"

#include <dlfcn.h>

#include <mutex>

namespace attn::cuda {
namespace {

// The driver API's types and the entry points used, as in cuda.h.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;
/// Shared memory a block may use without opting in.
constexpr int32_t kDefaultSharedBytes = 48 * 1024;

/// Spells a function pointer type in declarator position.
template <typename T> using Type = T;

struct Driver {
  void *library = nullptr;
  std::string openError;
#define ATTN_CUDA_FUNCTIONS(X)                                                 \
  X(cuInit, CUresult (*)(unsigned))                                            \
  X(cuGetErrorName, CUresult (*)(CUresult, const char **))                     \
  X(cuGetErrorString, CUresult (*)(CUresult, const char **))                   \
  X(cuDeviceGetCount, CUresult (*)(int *))                                     \
  X(cuDeviceGet, CUresult (*)(CUdevice *, int))                                \
  X(cuDeviceGetName, CUresult (*)(char *, int, CUdevice))                      \
  X(cuDeviceGetAttribute, CUresult (*)(int *, int, CUdevice))                  \
  X(cuDevicePrimaryCtxRetain, CUresult (*)(void **, CUdevice))                 \
  X(cuDevicePrimaryCtxRelease_v2, CUresult (*)(CUdevice))                      \
  X(cuCtxSetCurrent, CUresult (*)(void *))                                     \
  X(cuCtxSynchronize, CUresult (*)())                                          \
  X(cuModuleLoadData, CUresult (*)(void **, const void *))                     \
  X(cuModuleUnload, CUresult (*)(void *))                                      \
  X(cuModuleGetFunction, CUresult (*)(void **, void *, const char *))          \
  X(cuFuncSetAttribute, CUresult (*)(void *, int, int))                        \
  X(cuMemAlloc_v2, CUresult (*)(CUdeviceptr *, size_t))                        \
  X(cuMemFree_v2, CUresult (*)(CUdeviceptr))                                   \
  X(cuMemAllocAsync, CUresult (*)(CUdeviceptr *, size_t, void *))              \
  X(cuMemFreeAsync, CUresult (*)(CUdeviceptr, void *))                         \
  X(cuDeviceGetDefaultMemPool, CUresult (*)(void **, CUdevice))                \
  X(cuMemPoolSetAttribute, CUresult (*)(void *, int, void *))                  \
  X(cuMemcpyHtoD_v2, CUresult (*)(CUdeviceptr, const void *, size_t))          \
  X(cuMemcpyDtoH_v2, CUresult (*)(void *, CUdeviceptr, size_t))                \
  X(cuMemsetD8Async, CUresult (*)(CUdeviceptr, unsigned char, size_t, void *)) \
  X(cuEventCreate, CUresult (*)(void **, unsigned))                            \
  X(cuEventRecord, CUresult (*)(void *, void *))                               \
  X(cuEventSynchronize, CUresult (*)(void *))                                  \
  X(cuEventElapsedTime, CUresult (*)(float *, void *, void *))                 \
  X(cuEventDestroy_v2, CUresult (*)(void *))                                   \
  X(cuLaunchKernel,                                                            \
    CUresult (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,     \
                 unsigned, unsigned, void *, void **, void **))
#define ATTN_DECLARE(name, type) Type<type> name = nullptr;
  ATTN_CUDA_FUNCTIONS(ATTN_DECLARE)
#undef ATTN_DECLARE

  /// The driver, opened once per process; null with `error` set when it
  /// cannot be used.
  static Driver *get(std::string &error) {
    static Driver driver;
    static std::once_flag once;
    std::call_once(once, [] { driver.open(); });
    if (!driver.openError.empty()) {
      error = driver.openError;
      return nullptr;
    }
    return &driver;
  }

  /// "CUDA_ERROR_NAME: description" of a driver result.
  std::string describe(CUresult result) {
    const char *name = nullptr, *text = nullptr;
    cuGetErrorName(result, &name);
    cuGetErrorString(result, &text);
    return std::string(name ? name : "CUDA error " + std::to_string(result)) +
           (text ? std::string(": ") + text : "");
  }

  bool check(CUresult result, const char *what, std::string &error) {
    if (result == CUDA_SUCCESS)
      return true;
    error = std::string(what) + " failed: " + describe(result);
    return false;
  }

private:
  void open() {
    library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      const char *why = dlerror();
      openError = std::string("no CUDA driver: dlopen(libcuda.so.1) failed (") +
                  (why ? why : "unknown reason") +
                  "); install the NVIDIA driver or run on the CPU";
      return;
    }
#define ATTN_RESOLVE(name, type)                                               \
  name = reinterpret_cast<Type<type>>(dlsym(library, #name));                  \
  if (!name) {                                                                 \
    openError = "the CUDA driver (libcuda.so.1) lacks " #name                  \
                "; it is too old for this runtime";                            \
    return;                                                                    \
  }
    ATTN_CUDA_FUNCTIONS(ATTN_RESOLVE)
#undef ATTN_RESOLVE
    CUresult result = cuInit(0);
    if (result != CUDA_SUCCESS)
      openError = "initializing the CUDA driver failed: " + describe(result);
  }
};

} // namespace

/// A call's device temporaries (split-KV partials, chunk states) come from
/// the device's default memory pool (cuMemAllocAsync) and go back to it at
/// the call's end. By default the pool returns freed memory to the driver
/// at every synchronization, and the next call maps it again, inside the
/// time of its kernels; a pool that keeps what it held makes every call
/// after the first reuse it. Best effort: a driver that refuses only
/// costs that time.
static void keepFreedTemporaries(Driver &driver, CUdevice device) {
  void *pool = nullptr;
  unsigned long long keepAll = ~0ull;
  if (driver.cuDeviceGetDefaultMemPool(&pool, device) == CUDA_SUCCESS)
    driver.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                 &keepAll);
}

Module::~Module() {
  std::string ignored;
  Driver *driver = Driver::get(ignored);
  if (!driver)
    return;
  for (void *event : {startEvent, stopEvent})
    if (event) {
      driver->cuCtxSetCurrent(context);
      driver->cuEventDestroy_v2(event);
    }
  if (module) {
    driver->cuCtxSetCurrent(context);
    driver->cuModuleUnload(module);
  }
  if (context)
    driver->cuDevicePrimaryCtxRelease_v2(deviceId);
}

bool Module::load(const std::vector<uint8_t> &cubin, const std::string &ptx,
                  const std::string &chip, std::vector<Kernel> kernelList,
                  Module *&result, std::string &error) {
  Driver *driver = Driver::get(error);
  if (!driver)
    return false;
  int count = 0;
  if (!driver->check(driver->cuDeviceGetCount(&count), "cuDeviceGetCount",
                     error))
    return false;
  if (count == 0) {
    error = "no CUDA device: the driver sees no GPU";
    return false;
  }
  Module *module = new Module();
  auto giveUp = [&] {
    delete module;
    return false;
  };
  CUdevice device = 0;
  if (!driver->check(driver->cuDeviceGet(&device, 0), "cuDeviceGet", error))
    return giveUp();
  module->deviceId = device;
  char name[256] = {0};
  driver->cuDeviceGetName(name, sizeof(name) - 1, device);
  int major = 0, minor = 0;
  driver->cuDeviceGetAttribute(
      &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  driver->cuDeviceGetAttribute(
      &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  module->device = std::string(name) + " (sm_" + std::to_string(major) +
                   std::to_string(minor) + ")";
  driver->cuDeviceGetAttribute(&module->multiprocessors,
                               CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                               device);
  if (!driver->check(driver->cuDevicePrimaryCtxRetain(&module->context, device),
                     "cuDevicePrimaryCtxRetain", error))
    return giveUp();
  if (!driver->check(driver->cuCtxSetCurrent(module->context),
                     "cuCtxSetCurrent", error))
    return giveUp();
  keepFreedTemporaries(*driver, device);
  // The cubin runs only on its SM; any other device JIT-compiles the PTX.
  CUresult loaded =
      cubin.empty() ? 1
                    : driver->cuModuleLoadData(&module->module, cubin.data());
  if (loaded != CUDA_SUCCESS) {
    std::string cubinError = cubin.empty() ? "none" : driver->describe(loaded);
    CUresult jit = driver->cuModuleLoadData(&module->module, ptx.c_str());
    if (jit != CUDA_SUCCESS) {
      error = "loading the CUDA code on " + module->device +
              " failed: the cubin (" + chip + ") was refused (" + cubinError +
              ") and so was the PTX (" + driver->describe(jit) + ")";
      return giveUp();
    }
  }
  for (Kernel &kernel : kernelList) {
    if (!driver->check(driver->cuModuleGetFunction(&kernel.function,
                                                   module->module,
                                                   kernel.name.c_str()),
                       ("finding kernel '" + kernel.name + "'").c_str(), error))
      return giveUp();
    if (kernel.sharedBytes > kDefaultSharedBytes &&
        !driver->check(driver->cuFuncSetAttribute(
                           kernel.function,
                           CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                           kernel.sharedBytes),
                       ("giving kernel '" + kernel.name + "' " +
                        std::to_string(kernel.sharedBytes) +
                        " bytes of shared memory")
                           .c_str(),
                       error))
      return giveUp();
  }
  module->kernels = std::move(kernelList);
  result = module;
  return true;
}

const Module::Kernel *Module::kernel(const std::string &name) const {
  for (const Kernel &k : kernels)
    if (k.name == name)
      return &k;
  return nullptr;
}

bool Module::makeCurrent(std::string &error) {
  Driver *driver = Driver::get(error);
  return driver && driver->check(driver->cuCtxSetCurrent(context),
                                 "cuCtxSetCurrent", error);
}

bool Module::allocateAsync(size_t bytes, void *stream, uint64_t &pointer,
                           std::string &error) {
  pointer = 0;
  if (bytes == 0)
    return true;
  Driver *driver = Driver::get(error);
  CUdeviceptr p = 0;
  if (!driver || !driver->check(driver->cuMemAllocAsync(&p, bytes, stream),
                                ("allocating " + std::to_string(bytes) +
                                 " bytes of device memory on the stream")
                                    .c_str(),
                                error))
    return false;
  pointer = p;
  return true;
}

void Module::releaseAsync(uint64_t pointer, void *stream) {
  std::string ignored;
  if (Driver *driver = Driver::get(ignored); driver && pointer)
    driver->cuMemFreeAsync(pointer, stream);
}

bool Module::allocate(size_t bytes, uint64_t &pointer, std::string &error) {
  pointer = 0;
  if (bytes == 0)
    return true;
  Driver *driver = Driver::get(error);
  CUdeviceptr p = 0;
  if (!driver || !driver->check(driver->cuCtxSetCurrent(context),
                                "cuCtxSetCurrent", error))
    return false;
  if (!driver->check(
          driver->cuMemAlloc_v2(&p, bytes),
          ("allocating " + std::to_string(bytes) + " bytes of device memory")
              .c_str(),
          error))
    return false;
  pointer = p;
  return true;
}

void Module::release(uint64_t pointer) {
  std::string ignored;
  if (Driver *driver = Driver::get(ignored); driver && pointer)
    driver->cuMemFree_v2(pointer);
}

bool Module::copyToDevice(uint64_t dst, const void *src, size_t bytes,
                          std::string &error) {
  Driver *driver = Driver::get(error);
  return !bytes ||
         (driver && driver->check(driver->cuMemcpyHtoD_v2(dst, src, bytes),
                                  "copying to the device", error));
}

bool Module::fillAsync(uint64_t pointer, uint8_t byte, size_t bytes,
                       void *stream, std::string &error) {
  Driver *driver = Driver::get(error);
  return !bytes ||
         (driver &&
          driver->check(driver->cuMemsetD8Async(pointer, byte, bytes, stream),
                        "filling device memory", error));
}

bool Module::copyToHost(void *dst, uint64_t src, size_t bytes,
                        std::string &error) {
  Driver *driver = Driver::get(error);
  return !bytes ||
         (driver && driver->check(driver->cuMemcpyDtoH_v2(dst, src, bytes),
                                  "copying from the device", error));
}

bool Module::launch(const Kernel &kernel, int64_t workgroups,
                    const std::vector<uint64_t> &pointers,
                    const std::vector<std::vector<int64_t>> &shapes,
                    void *stream, std::string &error) {
  Driver *driver = Driver::get(error);
  if (!driver)
    return false;
  // Every parameter is 8 bytes: pointers and 64-bit integers.
  std::vector<uint64_t> values;
  for (size_t i = 0; i < pointers.size(); ++i) {
    values.push_back(pointers[i]); // allocated
    values.push_back(pointers[i]); // aligned
    values.push_back(0);           // offset
    const std::vector<int64_t> &shape = shapes[i];
    for (int64_t size : shape)
      values.push_back(static_cast<uint64_t>(size));
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;)
      strides[d - 1] = strides[d] * shape[d];
    for (int64_t stride : strides)
      values.push_back(static_cast<uint64_t>(stride));
  }
  values.push_back(static_cast<uint64_t>(workgroups));
  std::vector<void *> params;
  for (uint64_t &value : values)
    params.push_back(&value);
  int64_t blocks = kernel.perBlock ? workgroups
                                   : (workgroups + kernel.blockThreads - 1) /
                                         kernel.blockThreads;
  if (blocks > 0x7fffffff) {
    error = "kernel '" + kernel.name + "' needs " + std::to_string(blocks) +
            " blocks, more than a CUDA grid holds";
    return false;
  }
  return driver->check(
      driver->cuLaunchKernel(kernel.function, static_cast<unsigned>(blocks), 1,
                             1, static_cast<unsigned>(kernel.blockThreads), 1,
                             1, static_cast<unsigned>(kernel.sharedBytes),
                             stream, params.data(), nullptr),
      ("launching kernel '" + kernel.name + "'").c_str(), error);
}

bool Module::synchronize(std::string &error) {
  Driver *driver = Driver::get(error);
  return driver && driver->check(driver->cuCtxSynchronize(),
                                 "running the kernels", error);
}

bool Module::startTimer(std::string &error) {
  Driver *driver = Driver::get(error);
  if (!driver)
    return false;
  for (void **event : {&startEvent, &stopEvent})
    if (!*event && !driver->check(driver->cuEventCreate(event, 0),
                                  "creating a timing event", error))
      return false;
  return driver->check(driver->cuEventRecord(startEvent, nullptr),
                       "recording the start event", error);
}

bool Module::stopTimer(double &milliseconds, std::string &error) {
  Driver *driver = Driver::get(error);
  float elapsed = 0;
  if (!driver ||
      !driver->check(driver->cuEventRecord(stopEvent, nullptr),
                     "recording the stop event", error) ||
      !driver->check(driver->cuEventSynchronize(stopEvent),
                     "running the kernels", error) ||
      !driver->check(
          driver->cuEventElapsedTime(&elapsed, startEvent, stopEvent),
          "reading the kernels' time", error))
    return false;
  milliseconds = elapsed;
  return true;
}

} // namespace attn::cuda
