//===- CpuTarget.h - The host CPU as a code generation target ---*- C++ -*-===//
//
// Which x86-64 ISA level the CPU code is built for, the vector width the
// kernels are tiled for, and turning the LLVM-dialect kernels into a shared
// object the runtime can load.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_CPUTARGET_H
#define ATTN_COMPILER_CPUTARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mlir::attn {

struct CpuTarget {
  /// LLVM target triple (the compiler's own: attnc builds for its host).
  std::string triple;
  /// The x86-64 micro-architecture level the code may use (x86-64-v4 when
  /// the host has AVX-512, x86-64-v3 with AVX2 + FMA, else x86-64-v2).
  std::string isaLevel;
  /// The host CPU, used only to tune instruction scheduling.
  std::string tuneCpu;
  /// CPU features (LLVM names) the code needs; the runtime checks each.
  std::vector<std::string> features;
  /// f32 lanes of a vector register at this level: 16, 8 or 4.
  int64_t vectorWidth = 8;
  /// Products of bf16 operands on AVX512-BF16 (x86-64-v4 with avx512bf16,
  /// which the level does not include: Zen 4 and later, Cooper Lake,
  /// Sapphire Rapids and later).
  bool bf16Dot = false;
  /// Flash attention's bf16 products on AMX tiles (with bf16Dot; amx-tile
  /// and amx-bf16: Sapphire Rapids and later). The runtime asks Linux for
  /// the tile state before it runs such code.
  bool amxTiles = false;
  /// Split-KV decode requests its coming K and V rows into L1 rather than
  /// L2 (CpuTiling::prefetchIntoL1): a choice for the host's
  /// micro-architecture, as tuneCpu is, made only for the host target.
  bool prefetchIntoL1 = false;

  /// The host this process runs on.
  static CpuTarget host();
  /// A named level (x86-64-v2, x86-64-v3, x86-64-v4,
  /// x86-64-v4+avx512bf16 and x86-64-v4+avx512bf16+amx-bf16), for cross
  /// builds and tests; an error names the levels known.
  static llvm::Expected<CpuTarget> forLevel(llvm::StringRef level);

  /// The features beyond the level, as LLVM's target-features string
  /// ("+avx512bf16,+amx-tile,+amx-bf16"; empty when none).
  std::string extraFeatures() const;
};

/// Translates `module` (LLVM dialect, after attn-cpu-lower-to-llvm) to LLVM
/// IR for `target`, keeps only the `attn_kernel_*` functions external,
/// optimizes at -O3 and returns the LLVM IR as text.
llvm::Expected<std::string> emitCpuLlvmIr(ModuleOp module,
                                          const CpuTarget &target);

/// As above, then emits an object file and links it into a shared object
/// with ld.lld; returns the shared object's bytes.
llvm::Expected<std::string> emitCpuSharedObject(ModuleOp module,
                                                const CpuTarget &target);

} // namespace mlir::attn

#endif // ATTN_COMPILER_CPUTARGET_H
