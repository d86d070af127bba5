//===- attnc.cpp - The attn compiler driver -------------------------------===//
//
// attnc INPUT -o OUT.attnb [--target=cpu|cuda|all] [--cpu=LEVEL]
//       [--sm=sm_90a] [--cuda-path=DIR] [--recurrent-max-steps=N]
//       [--emit=attn|mlir|dispatch|llvm-mlir|llvm|ptx]
//
// INPUT is a model description (.json, SPEC §3), a Hugging Face config.json
// (frontend/HuggingFaceConfig.h) or attn IR (.mlir). A thin
// driver: it reads the input, runs the registered pipelines of
// compiler/Pipelines.h, and either prints the requested stage or writes the
// .attnb binary (compiler/BinaryWriter.h).
//
//===----------------------------------------------------------------------===//

#include "Attn/AttnDialect.h"
#include "Attn/ParseAttnIR.h"
#include "compiler/Compile.h"
#include "compiler/CpuTarget.h"
#include "compiler/Pipelines.h"
#include "frontend/HuggingFaceConfig.h"
#include "frontend/ModelToAttn.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {

enum class Stage { Binary, Attn, Mlir, Dispatch, LlvmMlir, Llvm, Ptx };

/// attnc's own options: --help lists these, not LLVM's internal ones.
cl::OptionCategory attncOptions("attnc options");

cl::opt<std::string>
    inputFilename(cl::Positional, cl::Required,
                  cl::desc("<model.json | config.json | model.mlir>"),
                  cl::cat(attncOptions));
cl::opt<std::string> outputFilename("o", cl::desc("Output file"),
                                    cl::value_desc("file"), cl::init("-"),
                                    cl::cat(attncOptions));
cl::opt<Stage>
    emitStage("emit", cl::desc("Stop after a stage and print it"),
              cl::values(clEnumValN(Stage::Attn, "attn",
                                    "attn IR straight from the frontend"),
                         clEnumValN(Stage::Mlir, "mlir",
                                    "IR after the attention-level pipeline"),
                         clEnumValN(Stage::Dispatch, "dispatch",
                                    "host dispatch programs and kernels (the "
                                    "CPU ones with --target all)"),
                         clEnumValN(Stage::LlvmMlir, "llvm-mlir",
                                    "kernels in the LLVM / NVVM dialects (the "
                                    "CPU ones with --target all)"),
                         clEnumValN(Stage::Llvm, "llvm",
                                    "optimized LLVM IR of the CPU "
                                    "code"),
                         clEnumValN(Stage::Ptx, "ptx", "PTX of the GPU code")),
              cl::init(Stage::Binary), cl::cat(attncOptions));
cl::opt<std::string> target("target", cl::desc("cpu, cuda or all"),
                            cl::init("cpu"), cl::cat(attncOptions));
cl::opt<std::string>
    cpuLevel("cpu",
             cl::desc("CPU code level: host (default), x86-64-v2, x86-64-v3, "
                      "x86-64-v4, x86-64-v4+avx512bf16 or "
                      "x86-64-v4+avx512bf16+amx-bf16; the tiles follow "
                      "its vector width"),
             cl::init("host"), cl::cat(attncOptions));
cl::opt<std::string> smChip("sm",
                            cl::desc("the NVIDIA GPU the CUDA code is for "
                                     "(default sm_90a)"),
                            cl::init("sm_90a"), cl::cat(attncOptions));
cl::opt<std::string>
    cudaPath("cuda-path",
             cl::desc("the CUDA toolkit (libdevice, ptxas); default "
                      "/usr/local/cuda"),
             cl::init("/usr/local/cuda"), cl::cat(attncOptions));
cl::opt<int64_t> recurrentMaxSteps(
    "recurrent-max-steps",
    cl::desc("Linear recurrences called with at most this many steps run "
             "step by step, longer ones in the chunked form (default 1: "
             "decode steps only)"),
    cl::init(1), cl::cat(attncOptions));
cl::opt<int64_t> cudaWarpgroups(
    "cuda-warpgroups",
    cl::desc("CUDA prefill of f16/bf16 on sm_90a's warpgroup tensor-core "
             "instructions (wgmma), N warpgroups of 64 rows per block (1 "
             "or 2; default 0: mma.sync, faster on an H100 so far)"),
    cl::init(0), cl::cat(attncOptions));
cl::opt<bool> cudaProducer(
    "cuda-producer",
    cl::desc("With --cuda-warpgroups, a producer warpgroup per block stages "
             "the k and v tiles for the product warpgroups through "
             "mbarriers (FlashAttention-3's warp specialization; sm_90a)"),
    cl::init(false), cl::cat(attncOptions));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "attnc") << message << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(attncOptions);
  cl::ParseCommandLineOptions(argc, argv, "attn compiler\n");
  if (target != "cpu" && target != "cuda" && target != "all")
    return fail("--target must be cpu, cuda or all, got '" + target + "'");

  std::string errorMessage;
  std::unique_ptr<llvm::MemoryBuffer> input =
      openInputFile(inputFilename, &errorMessage);
  if (!input)
    return fail(errorMessage);

  MLIRContext context;
  // The error names the op and points at its line; the op's generic form
  // after it would only repeat that line.
  context.printOpOnDiagnostic(false);
  DialectRegistry registry;
  attn::registerCompilerDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadDialect<attn::AttnDialect, arith::ArithDialect, func::FuncDialect,
                      tensor::TensorDialect>();
  OwningOpRef<ModuleOp> module;
  // Diagnostics of every phase print as file:line:col with the source line
  // when they point into attn IR.
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  std::string modelName = llvm::sys::path::stem(inputFilename).str();
  llvm::StringRef extension = llvm::sys::path::extension(inputFilename);
  if (extension == ".json") {
    llvm::Expected<attn::frontend::ModelDescription> model =
        attn::frontend::parseModelInput(input->getBuffer());
    if (!model)
      return fail(inputFilename + ": " + llvm::toString(model.takeError()));
    module = attn::frontend::buildAttnModule(context, *model);
    if (!module)
      return 1; // the handler printed why
    modelName = model->model;
  } else if (extension == ".mlir") {
    sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
    module = attn::parseAttnIR(sourceMgr, ParserConfig(&context));
    if (!module)
      return 1; // the handler printed why
  } else {
    return fail(
        inputFilename + ": unknown input kind '" + extension +
        "'; expected a model description or Hugging Face config (.json) "
        "or attn IR (.mlir)");
  }
  if (failed(verify(*module)))
    return 1;

  auto print = [&]() {
    std::unique_ptr<llvm::ToolOutputFile> output =
        openOutputFile(outputFilename, &errorMessage);
    if (!output)
      return fail(errorMessage);
    module->print(output->os());
    output->os() << "\n";
    output->keep();
    return 0;
  };
  auto printText = [&](llvm::StringRef text) {
    std::unique_ptr<llvm::ToolOutputFile> output =
        openOutputFile(outputFilename, &errorMessage);
    if (!output)
      return fail(errorMessage);
    output->os() << text;
    output->keep();
    return 0;
  };
  if (emitStage == Stage::Attn)
    return print();

  if (emitStage == Stage::Ptx && target == "cpu")
    return fail("--emit=ptx needs --target cuda or all");
  attn::CpuTarget cpu = attn::CpuTarget::host();
  if (cpuLevel != "host") {
    llvm::Expected<attn::CpuTarget> level = attn::CpuTarget::forLevel(cpuLevel);
    if (!level)
      return fail("--cpu: " + llvm::toString(level.takeError()));
    cpu = *level;
  }

  if (recurrentMaxSteps < 1)
    return fail("--recurrent-max-steps must be at least 1, got " +
                llvm::Twine(recurrentMaxSteps.getValue()));
  attn::CompileOptions options;
  options.recurrentMaxSteps = recurrentMaxSteps;
  if (cudaWarpgroups < 0 || cudaWarpgroups > 2)
    return fail("--cuda-warpgroups must be 0, 1 or 2, got " +
                llvm::Twine(cudaWarpgroups.getValue()));
  options.cudaFlashWarpgroups = cudaWarpgroups;
  if (cudaProducer && cudaWarpgroups == 0)
    return fail("--cuda-producer stages tiles for warpgroup products: it "
                "needs --cuda-warpgroups 1 or 2");
  options.cudaFlashProducer = cudaProducer;
  options.targets = target == "cpu"    ? attn::TargetSet::Cpu
                    : target == "cuda" ? attn::TargetSet::Cuda
                                       : attn::TargetSet::All;
  if (options.targets != attn::TargetSet::Cpu) {
    llvm::Expected<attn::CudaTarget> cuda =
        attn::CudaTarget::get(smChip, cudaPath);
    if (!cuda)
      return fail("--sm / --cuda-path: " + llvm::toString(cuda.takeError()));
    options.cuda = *cuda;
  }

  attn::CompileStage stage = attn::CompileStage::Binary;
  if (emitStage == Stage::Mlir)
    stage = attn::CompileStage::Optimized;
  else if (emitStage == Stage::Dispatch)
    stage = attn::CompileStage::Dispatch;
  else if (emitStage == Stage::LlvmMlir || emitStage == Stage::Llvm)
    stage = attn::CompileStage::LlvmDialect;
  else if (emitStage == Stage::Ptx)
    stage = attn::CompileStage::Ptx;
  if (emitStage == Stage::Llvm && target == "cuda")
    return fail("--emit=llvm prints the CPU code; for the CUDA code use "
                "--emit=llvm-mlir or --emit=ptx");
  if (stage == attn::CompileStage::Binary && outputFilename == "-")
    return fail("attnc writes a binary: give -o OUT.attnb (or --emit=STAGE "
                "to print a stage)");
  llvm::Expected<std::string> result =
      attn::compile(*module, stage, cpu, modelName, options);
  if (!result)
    return fail(llvm::toString(result.takeError()));
  if (emitStage == Stage::Llvm) {
    llvm::Expected<std::string> ir = attn::emitCpuLlvmIr(*module, cpu);
    if (!ir)
      return fail(llvm::toString(ir.takeError()));
    return printText(*ir);
  }
  if (stage != attn::CompileStage::Binary && stage != attn::CompileStage::Ptx)
    return print();
  return printText(*result);
}
