//===- CudaDriver.h - The CUDA driver API, loaded at first use --*- C++ -*-===//
//
// The runtime builds and runs without CUDA: the driver (libcuda.so.1) is
// opened with dlopen when a model is first asked to run on a GPU, and only
// the few driver entry points the runtime calls are declared here.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_CUDADRIVER_H
#define ATTN_RUNTIME_CUDADRIVER_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attn::cuda {

/// A module loaded on the first CUDA device, with its kernels.
class Module {
public:
  struct Kernel {
    std::string name;
    int32_t blockThreads = 0;
    /// A workgroup is a block (else one thread).
    bool perBlock = false;
    /// Dynamic shared memory per block.
    int32_t sharedBytes = 0;
    void *function = nullptr; // CUfunction
  };

  ~Module();

  /// Opens the driver and the first device, and loads `cubin` (or, when the
  /// driver refuses it, e.g. for another SM, JIT-compiles `ptx`). On
  /// failure returns false with `error` saying what is missing: the
  /// driver, a device, or a kernel.
  static bool load(const std::vector<uint8_t> &cubin, const std::string &ptx,
                   const std::string &chip, std::vector<Kernel> kernels,
                   Module *&module, std::string &error);

  /// The device's name and compute capability, for messages.
  const std::string &deviceName() const { return device; }
  /// The device's streaming multiprocessors (at least 1).
  int multiprocessorCount() const {
    return multiprocessors > 0 ? multiprocessors : 1;
  }

  const Kernel *kernel(const std::string &name) const;

  /// Makes the module's context (the device's primary context, which the
  /// CUDA runtime and PyTorch share) current on the calling thread.
  bool makeCurrent(std::string &error);

  /// Device memory; `bytes` = 0 gives a null pointer.
  bool allocate(size_t bytes, uint64_t &pointer, std::string &error);
  void release(uint64_t pointer);
  /// Stream-ordered device memory (cuMemAllocAsync / cuMemFreeAsync on
  /// `stream`, a CUstream; null is the legacy default stream): usable by
  /// the work enqueued on `stream` after it, with no synchronisation.
  bool allocateAsync(size_t bytes, void *stream, uint64_t &pointer,
                     std::string &error);
  void releaseAsync(uint64_t pointer, void *stream);
  bool copyToDevice(uint64_t dst, const void *src, size_t bytes,
                    std::string &error);
  bool copyToHost(void *dst, uint64_t src, size_t bytes, std::string &error);
  /// Sets `bytes` bytes at `pointer` to `byte`, enqueued on `stream`.
  bool fillAsync(uint64_t pointer, uint8_t byte, size_t bytes, void *stream,
                 std::string &error);

  /// Launches `kernel` over `workgroups` workgroups (threads or blocks)
  /// with the parameters of the CudaKernel ABI (attnb.fbs): per binding a
  /// row-major memref descriptor, then the workgroup count.
  /// Enqueued on `stream` (a CUstream; null is the legacy default stream).
  bool launch(const Kernel &kernel, int64_t workgroups,
              const std::vector<uint64_t> &pointers,
              const std::vector<std::vector<int64_t>> &shapes, void *stream,
              std::string &error);
  bool synchronize(std::string &error);

  /// Device time of the launches between startTimer and stopTimer (CUDA
  /// events on the default stream; stopTimer waits for them to finish).
  bool startTimer(std::string &error);
  bool stopTimer(double &milliseconds, std::string &error);

private:
  Module() = default;
  void *context = nullptr; // CUcontext (the device's primary context)
  void *module = nullptr;  // CUmodule
  int deviceId = 0;
  int multiprocessors = 0;
  std::string device;
  std::vector<Kernel> kernels;
  void *startEvent = nullptr, *stopEvent = nullptr; // CUevent, lazily
};

} // namespace attn::cuda

#endif // ATTN_RUNTIME_CUDADRIVER_H
