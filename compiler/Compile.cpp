//===- Compile.cpp - attn IR to a compiled model --------------------------===//

#include "compiler/Compile.h"

#include "compiler/BinaryWriter.h"
#include "compiler/Pipelines.h"

#include "Attn/AttnDialect.h"
#include "frontend/HuggingFaceConfig.h"
#include "frontend/ModelToAttn.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::attn;

namespace {
llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

void mlir::attn::registerCompilerDialects(DialectRegistry &registry) {
  registry.insert<AttnDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
}

llvm::Expected<std::string>
mlir::attn::compile(ModuleOp module, CompileStage stage, const CpuTarget &cpu,
                    llvm::StringRef modelName, const CompileOptions &options) {
  MLIRContext *context = module.getContext();
  PassManager optimize(context);
  buildAttnOptimizationPipeline(optimize);
  if (failed(optimize.run(module)))
    return error("the attention-level pipeline (attn-optimize) failed");
  if (stage == CompileStage::Optimized)
    return "";

  // The kernels are tiled for the target's vector width: 4 query vectors
  // per flash workgroup, column tiles of recurrent states down to 4 vectors.
  CpuDispatchOptions tiling;
  tiling.vectorWidth = cpu.vectorWidth;
  tiling.queryTile = 4 * cpu.vectorWidth;
  tiling.stateColumns =
      options.stateColumns > 0 ? options.stateColumns : 4 * cpu.vectorWidth;
  tiling.recurrentMaxSteps = options.recurrentMaxSteps;
  PassManager dispatch(context);
  buildCpuDispatchPipeline(dispatch, tiling);
  if (failed(dispatch.run(module)))
    return error("lowering to CPU dispatches (attn-cpu-dispatch) failed");
  if (stage == CompileStage::Dispatch)
    return "";

  // The host programs go into the binary before the kernel lowering drops
  // them from the module.
  BinaryWriter writer;
  if (failed(writer.addEntries(module)))
    return error("writing the entries' host programs failed");
  PassManager lower(context);
  buildCpuKernelLoweringPipeline(lower);
  if (failed(lower.run(module)))
    return error("lowering the CPU kernels to LLVM (attn-cpu-lower-to-llvm) "
                 "failed");
  if (stage == CompileStage::LlvmDialect)
    return "";

  llvm::Expected<std::string> sharedObject = emitCpuSharedObject(module, cpu);
  if (!sharedObject)
    return sharedObject.takeError();
  std::string tilingText;
  llvm::raw_string_ostream(tilingText)
      << "vector_width=" << tiling.vectorWidth
      << " query_tile=" << tiling.queryTile << " key_tile=" << tiling.keyTile
      << " split_keys=" << tiling.splitKeys
      << " decode_max_queries=" << tiling.decodeMaxQueries
      << " recurrent_max_steps=" << tiling.recurrentMaxSteps
      << " state_columns=" << tiling.stateColumns;
  return writer.finish(modelName, cpu, tilingText, *sharedObject);
}

llvm::Expected<std::string>
mlir::attn::compileModelDescription(llvm::StringRef json, const CpuTarget &cpu,
                                    const CompileOptions &options) {
  llvm::Expected<frontend::ModelDescription> description =
      frontend::parseModelInput(json);
  if (!description)
    return description.takeError();
  DialectRegistry registry;
  registerCompilerDialects(registry);
  MLIRContext context(registry);
  OwningOpRef<ModuleOp> module =
      frontend::buildAttnModule(context, *description);
  if (failed(verify(*module)))
    return error("the frontend built invalid attn IR");
  return compile(*module, CompileStage::Binary, cpu, description->model,
                 options);
}
