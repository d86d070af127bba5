//===- Compile.h - attn IR to a compiled model -----------------*- C++ -*-===//
//
// The whole compiler after the frontend, as one library call: the
// registered pipelines of Pipelines.h in order, CPU code generation and
// the .attnb writer. attnc and the end-to-end tests both use it.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_COMPILER_COMPILE_H
#define ATTN_COMPILER_COMPILE_H

#include "compiler/CpuTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir::attn {

/// Where compilation stops; each stage leaves `module` in that form.
enum class CompileStage {
  Optimized,   // attn IR after attn-optimize
  Dispatch,    // host dispatch programs + kernels (attn-cpu-dispatch)
  LlvmDialect, // kernels in the LLVM dialect (attn-cpu-lower-to-llvm)
  Binary,      // the .attnb bytes
};

/// Choices that change which kernels run, never what they compute.
struct CompileOptions {
  /// Recurrences of at most this many steps run step by step; longer ones
  /// take the chunked form (1: only decode steps).
  int64_t recurrentMaxSteps = 1;
  /// The narrowest column tile of a recurrent state (0: 4 vectors of the
  /// target).
  int64_t stateColumns = 0;
};

/// Lowers `module` (attn IR, verified) in place up to `stage`. For
/// CompileStage::Binary returns the .attnb bytes, otherwise "". Diagnostics
/// of failing passes go to the context's handler; the error says which
/// step failed.
llvm::Expected<std::string> compile(ModuleOp module, CompileStage stage,
                                    const CpuTarget &cpu,
                                    llvm::StringRef modelName,
                                    const CompileOptions &options = {});

/// Parses a SPEC §3 model description or a Hugging Face config.json, builds
/// its attn IR and compiles it to .attnb bytes for `cpu` (what
/// `attnc MODEL.json -o OUT.attnb` does).
llvm::Expected<std::string>
compileModelDescription(llvm::StringRef json, const CpuTarget &cpu,
                        const CompileOptions &options = {});

/// Registers on `registry` every dialect and translation the compiler
/// needs, for tools and tests that create their own MLIRContext.
void registerCompilerDialects(DialectRegistry &registry);

} // namespace mlir::attn

#endif // ATTN_COMPILER_COMPILE_H
