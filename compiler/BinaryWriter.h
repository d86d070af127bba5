//===- BinaryWriter.h - The .attnb writer -----------------------*- C++ -*-===//
//
// Writes the compiled model of SPEC §6: the entries' signatures and host
// dispatch programs (read from the `attn.entry` functions that
// -attn-cpu-dispatches and -attn-gpu-dispatches produce), the CPU shared
// object and the CUDA PTX and cubin, as the Flatbuffers buffer of
// runtime/schemas/attnb.fbs.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_BINARYWRITER_H
#define ATTN_COMPILER_BINARYWRITER_H

#include "compiler/CpuTarget.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir::attn {

/// The format version this compiler writes (Binary.format_version).
constexpr uint32_t kAttnbFormatVersion = 9;

/// The CPU code of a model.
struct CpuCode {
  CpuTarget target;
  std::string tiling;
  std::string sharedObject;
};

/// The CUDA code of a model.
struct CudaCode {
  struct Kernel {
    std::string name;
    int64_t blockThreads;
    /// A workgroup is a block (else a thread).
    bool perBlock;
    /// Dynamic shared memory per block.
    int64_t sharedBytes;
  };
  std::string chip;
  std::string tiling;
  std::string ptx;
  std::string cubin;
  std::vector<Kernel> kernels;
};

/// Which code a host program dispatches.
enum class CodeTarget { Cpu, Cuda };

class BinaryWriter {
public:
  BinaryWriter();
  ~BinaryWriter();

  /// Records the signature and host program of every `attn.entry` function
  /// of `module`, in order, as the programs of `target`. Entries already
  /// recorded for the other target must have the same names, in the same
  /// order. Emits an error on an op a host program cannot hold.
  LogicalResult addEntries(ModuleOp module, CodeTarget target);

  /// The finished buffer, with the code of each target given.
  std::string finish(llvm::StringRef modelName, const CpuCode *cpu,
                     const CudaCode *cuda);

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace mlir::attn

#endif // ATTN_COMPILER_BINARYWRITER_H
