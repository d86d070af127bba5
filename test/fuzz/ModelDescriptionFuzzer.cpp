//===- ModelDescriptionFuzzer.cpp - libFuzzer target: the frontend --------===//
//
// Any text as a model description or Hugging Face config: the frontend
// either refuses it with an error that names a JSON path ("$..."), or
// builds attn IR that verifies.
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnDialect.h"
#include "frontend/HuggingFaceConfig.h"
#include "frontend/ModelToAttn.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <cstdlib>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static MLIRContext *context = [] {
    DialectRegistry registry;
    registry.insert<attn::AttnDialect, arith::ArithDialect, func::FuncDialect,
                    tensor::TensorDialect>();
    auto *created = new MLIRContext(registry);
    created->loadAllAvailableDialects();
    // Verifier messages of a failing module go to stderr before the abort.
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
  OwningOpRef<ModuleOp> module =
      attn::frontend::buildAttnModule(*context, *model);
  if (!module || failed(verify(*module)))
    std::abort(); // accepted, but built invalid IR
  return 0;
}
