//===- CudaTarget.h - NVIDIA GPUs as a code generation target ---*- C++ -*-===//
//
// Which SM the CUDA code is for and where the CUDA toolkit is (libdevice is
// linked into the kernels, ptxas assembles the cubin), and turning the
// NVVM-dialect gpu.module into PTX and a cubin.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_CUDATARGET_H
#define ATTN_COMPILER_CUDATARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir::attn {

struct CudaTarget {
  /// The SM the PTX and cubin are for, e.g. sm_90a.
  std::string chip = "sm_90a";
  /// The CUDA toolkit: nvvm/libdevice/libdevice.10.bc and bin/ptxas.
  std::string toolkitPath = "/usr/local/cuda";

  /// The PTX ISA version for the chip, as an LLVM NVPTX feature (+ptx80 up
  /// to sm_90a, +ptx86 for sm_100 and later).
  std::string ptxFeatures() const;
  /// The SM number (90 for sm_90a).
  int smVersion() const;
  /// The most shared memory a block may use on the chip (with the opt-in
  /// for more than 48 KiB), in bytes.
  int64_t maxSharedBytesPerBlock() const;

  /// Checks `chip` (sm_<N>[a|f], N >= 75) and that the toolkit has
  /// libdevice and ptxas; the error says what is missing and where it
  /// looked.
  static llvm::Expected<CudaTarget> get(llvm::StringRef chip,
                                        llvm::StringRef toolkitPath);
};

/// The PTX of `module`'s gpu.module (NVVM dialect, after
/// attn-gpu-lower-to-nvvm), with libdevice linked in.
llvm::Expected<std::string> emitPtx(ModuleOp module, const CudaTarget &target);

/// Assembles `ptx` with the toolkit's ptxas for the target's chip; returns
/// the cubin. ptxas's own message is in the error.
llvm::Expected<std::string> assembleCubin(llvm::StringRef ptx,
                                          const CudaTarget &target);

} // namespace mlir::attn

#endif // ATTN_COMPILER_CUDATARGET_H
