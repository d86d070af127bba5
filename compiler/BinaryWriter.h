//===- BinaryWriter.h - The .attnb writer -----------------------*- C++ -*-===//
//
// Writes the compiled model of SPEC §6: the entries' signatures and host
// dispatch programs (read from the `attn.entry` functions that
// -attn-cpu-dispatches produces) and the CPU shared object, as the
// Flatbuffers buffer of runtime/schemas/attnb.fbs.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_BINARYWRITER_H
#define ATTN_COMPILER_BINARYWRITER_H

#include "compiler/CpuTarget.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>

namespace mlir::attn {

/// The format version this compiler writes (Binary.format_version).
constexpr uint32_t kAttnbFormatVersion = 2;

class BinaryWriter {
public:
  BinaryWriter();
  ~BinaryWriter();

  /// Records every `attn.entry` function of `module`, in order; emits an
  /// error on an op a host program cannot hold.
  LogicalResult addEntries(ModuleOp module);

  /// The finished buffer.
  std::string finish(llvm::StringRef modelName, const CpuTarget &target,
                     llvm::StringRef tiling, llvm::StringRef sharedObject);

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace mlir::attn

#endif // ATTN_COMPILER_BINARYWRITER_H
