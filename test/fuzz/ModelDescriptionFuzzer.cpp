//===- ModelDescriptionFuzzer.cpp - libFuzzer target: the frontend --------===//
//
// Any text as a model description or Hugging Face config: the frontend
// either refuses it with an error that names a JSON path ("$..."), or
// builds attn IR that verifies, or, for a variant's own attn IR
// ({"func": ...}), reports diagnostics that each point into that text (its
// JSON path as the file name).
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnDialect.h"
#include "frontend/HuggingFaceConfig.h"
#include "frontend/ModelToAttn.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <cstdlib>
#include <string>
#include <vector>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static MLIRContext *context = [] {
    DialectRegistry registry;
    registry.insert<attn::AttnDialect, arith::ArithDialect, func::FuncDialect,
                    tensor::TensorDialect>();
    auto *created = new MLIRContext(registry);
    created->loadAllAvailableDialects();
    return created;
  }();
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<attn::frontend::ModelDescription> model =
      attn::frontend::parseModelInput(text);
  if (!model) {
    std::string message = llvm::toString(model.takeError());
    if (message.empty() || message[0] != '$')
      std::abort(); // an error that names no JSON path
    return 0;
  }
  // Each diagnostic's file (the JSON path of a variant's text), and all of
  // them as text, printed only before an abort.
  std::vector<std::string> files;
  std::string messages;
  ScopedDiagnosticHandler handler(context, [&](Diagnostic &diagnostic) {
    auto at = diagnostic.getLocation()->findInstanceOf<FileLineColLoc>();
    files.push_back(at ? at.getFilename().str() : "");
    llvm::raw_string_ostream(messages)
        << diagnostic.getLocation() << ": " << diagnostic << "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module =
      attn::frontend::buildAttnModule(*context, *model);
  if (module && succeeded(verify(*module)))
    return 0;
  auto fail = [&] {
    llvm::errs() << messages;
    std::abort();
  };
  if (files.empty())
    fail(); // accepted, but built invalid IR or failed silently
  for (const std::string &file : files)
    if (file.rfind("$.layers[", 0) != 0 ||
        file.find("_mod.func") == std::string::npos)
      fail(); // an error outside the user's attn IR
  return 0;
}
