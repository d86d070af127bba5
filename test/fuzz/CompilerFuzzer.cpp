//===- CompilerFuzzer.cpp - libFuzzer target: attn IR through the compiler
//-===//
//
// Any text as attn IR, as `attnc MODEL.mlir` reads it (users write their
// own variants and entries in the dialect): the parser or the verifier
// refuses it with a diagnostic, or the compiler takes it through the
// attention-level pipeline and the CPU dispatches down to the LLVM dialect,
// and a copy through the CUDA dispatches (the kernel builders of both
// targets), or a pass refuses it with a diagnostic. A crash, a sanitizer
// report or a failure that says nothing is a bug. Code generation (LLVM's
// and ptxas) is left out: it is not ours, and it would make each input
// several times slower.
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnDialect.h"
#include "Attn/ParseAttnIR.h"
#include "compiler/Compile.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

using namespace mlir;

namespace {

MLIRContext &context() {
  static MLIRContext *created = [] {
    DialectRegistry registry;
    attn::registerCompilerDialects(registry);
    auto *context = new MLIRContext(registry);
    context->loadDialect<attn::AttnDialect, arith::ArithDialect,
                         func::FuncDialect, tensor::TensorDialect>();
    context->printOpOnDiagnostic(false);
    return context;
  }();
  return *created;
}

/// The diagnostics of one input; printed only before an abort.
struct Diagnostics {
  int errors = 0;
  std::string text;
};

[[noreturn]] void fail(const Diagnostics &diagnostics, llvm::StringRef why) {
  llvm::errs() << diagnostics.text << "attn-fuzz-compile: " << why << "\n";
  std::abort();
}

/// Compiles `module` up to `stage`; a failure must have said why.
void compileOrRefuse(ModuleOp module, attn::CompileStage stage,
                     const attn::CompileOptions &options,
                     Diagnostics &diagnostics) {
  // A named level, not the host: a reproducer then reproduces anywhere.
  static const attn::CpuTarget cpu =
      llvm::cantFail(attn::CpuTarget::forLevel("x86-64-v3"));
  int errorsBefore = diagnostics.errors;
  llvm::Expected<std::string> result =
      attn::compile(module, stage, cpu, "fuzz", options);
  if (result)
    return;
  std::string message = llvm::toString(result.takeError());
  if (diagnostics.errors == errorsBefore)
    fail(diagnostics, "compile failed with no diagnostic: " + message);
}

} // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

/// Half the mutations put an edge value in place of a number of the text:
/// attn IR's shapes, dims and attributes are numbers, and byte mutations
/// seldom turn one valid literal into another (a tensor.dim past its rank
/// was found this way).
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  std::minstd_rand random(seed);
  if (random() % 2)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::vector<std::pair<size_t, size_t>> numbers; // [begin, end)
  for (size_t i = 0; i < size;) {
    if (!std::isdigit(data[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < size && std::isdigit(data[end]))
      ++end;
    numbers.push_back({i, end});
    i = end;
  }
  if (numbers.empty())
    return LLVMFuzzerMutate(data, size, maxSize);
  static const char *const kEdges[] = {
      "0",     "1",          "2",          "3",          "7",
      "16",    "17",         "-1",         "-2",         "255",
      "65536", "2147483647", "2147483648", "4294967296", "9223372036854775807"};
  std::string edge = kEdges[random() % std::size(kEdges)];
  auto [begin, end] = numbers[random() % numbers.size()];
  size_t newSize = size - (end - begin) + edge.size();
  if (newSize > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memmove(data + begin + edge.size(), data + end, size - end);
  std::memcpy(data + begin, edge.data(), edge.size());
  return newSize;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &ctx = context();
  Diagnostics diagnostics;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diagnostic) {
    if (diagnostic.getSeverity() == DiagnosticSeverity::Error)
      ++diagnostics.errors;
    llvm::raw_string_ostream(diagnostics.text)
        << diagnostic.getLocation() << ": " << diagnostic << "\n";
    return success();
  });
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      // A copy: the lexer reads the terminating NUL the fuzzer's bytes lack.
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size), "input"),
      llvm::SMLoc());
  OwningOpRef<ModuleOp> module =
      attn::parseAttnIR(sourceMgr, ParserConfig(&ctx));
  if (!module) {
    if (diagnostics.errors == 0)
      fail(diagnostics, "the parser refused the input with no diagnostic");
    return 0;
  }
  if (failed(verify(*module))) {
    if (diagnostics.errors == 0)
      fail(diagnostics, "the verifier refused the input with no diagnostic");
    return 0;
  }
  OwningOpRef<ModuleOp> cudaCopy = module->clone();

  attn::CompileOptions cpu;
  compileOrRefuse(*module, attn::CompileStage::LlvmDialect, cpu, diagnostics);

  attn::CompileOptions cuda;
  cuda.targets = attn::TargetSet::Cuda;
  compileOrRefuse(*cudaCopy, attn::CompileStage::Dispatch, cuda, diagnostics);
  return 0;
}
