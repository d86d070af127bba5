//===- CpuTarget.cpp - The host CPU as a code generation target -----------===//

#include "compiler/CpuTarget.h"

#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

/// The features each x86-64 level adds (LLVM names; the runtime checks
/// them with __builtin_cpu_supports).
const std::vector<std::string> kLevel2 = {"sse3", "ssse3", "sse4.1", "sse4.2",
                                          "popcnt"};
const std::vector<std::string> kLevel3 = {
    "avx", "avx2", "fma", "bmi", "bmi2", "f16c", "lzcnt", "movbe", "xsave"};
const std::vector<std::string> kLevel4 = {"avx512f", "avx512bw", "avx512cd",
                                          "avx512dq", "avx512vl"};
/// What CpuTarget::bf16Dot adds to level 4.
const char *const kBf16Dot = "avx512bf16";
/// What CpuTarget::amxTiles adds to that: the tile registers and their
/// bf16 products.
const std::vector<std::string> kAmxTiles = {"amx-tile", "amx-bf16"};

CpuTarget makeTarget(int level) {
  CpuTarget target;
  target.triple = llvm::sys::getProcessTriple();
  target.tuneCpu = llvm::sys::getHostCPUName().str();
  target.isaLevel = "x86-64-v" + std::to_string(level);
  target.features = kLevel2;
  if (level >= 3)
    target.features.insert(target.features.end(), kLevel3.begin(),
                           kLevel3.end());
  if (level >= 4)
    target.features.insert(target.features.end(), kLevel4.begin(),
                           kLevel4.end());
  target.vectorWidth = level >= 4 ? 16 : level == 3 ? 8 : 4;
  return target;
}

CpuTarget withBf16Dot(CpuTarget target) {
  target.isaLevel += std::string("+") + kBf16Dot;
  target.features.push_back(kBf16Dot);
  target.bf16Dot = true;
  return target;
}

CpuTarget withAmxTiles(CpuTarget target) {
  target.isaLevel += "+amx-bf16";
  target.features.insert(target.features.end(), kAmxTiles.begin(),
                         kAmxTiles.end());
  target.amxTiles = true;
  return target;
}

bool hostHasAll(const std::vector<std::string> &features) {
  llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
  return llvm::all_of(features, [&](const std::string &feature) {
    return host.lookup(feature);
  });
}

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// LLVM IR of `module`, optimized for `target`, with its target machine.
llvm::Expected<std::unique_ptr<llvm::Module>>
translateAndOptimize(ModuleOp module, const CpuTarget &target,
                     llvm::LLVMContext &llvmContext,
                     std::unique_ptr<llvm::TargetMachine> &machine) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  registerBuiltinDialectTranslation(*module.getContext());
  registerLLVMDialectTranslation(*module.getContext());

  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "attn_cpu_kernels");
  if (!llvmModule)
    return error("translating the CPU kernels to LLVM IR failed");

  llvm::Triple triple(target.triple);
  std::string lookupError;
  const llvm::Target *llvmTarget =
      llvm::TargetRegistry::lookupTarget(triple, lookupError);
  if (!llvmTarget)
    return error("no LLVM target for " + target.triple + ": " + lookupError);
  llvm::TargetOptions options;
  const std::string cpu = target.isaLevel.substr(0, target.isaLevel.find('+'));
  const std::string features = target.extraFeatures();
  machine.reset(llvmTarget->createTargetMachine(
      triple, cpu, features, options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return error("cannot create an LLVM target machine for " + target.isaLevel);
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(machine->createDataLayout());

  // Only the runtime's entry points stay visible; the kernels they wrap are
  // internal so they inline into them.
  for (llvm::Function &function : *llvmModule) {
    if (function.isDeclaration())
      continue;
    if (!function.getName().starts_with("attn_kernel_"))
      function.setLinkage(llvm::GlobalValue::InternalLinkage);
    function.addFnAttr("target-cpu", cpu);
    if (!features.empty())
      function.addFnAttr("target-features", features);
    function.addFnAttr("tune-cpu", target.tuneCpu);
  }

  auto optimize = makeOptimizingTransformer(3, 0, machine.get());
  if (llvm::Error e = optimize(llvmModule.get()))
    return std::move(e);
  return llvmModule;
}

/// The host's CPU level.
CpuTarget hostLevel() {
  if (hostHasAll(kLevel3) && hostHasAll(kLevel4)) {
    if (!hostHasAll({kBf16Dot}))
      return makeTarget(4);
    CpuTarget target = withBf16Dot(makeTarget(4));
    return hostHasAll(kAmxTiles) ? withAmxTiles(target) : target;
  }
  if (hostHasAll(kLevel3))
    return makeTarget(3);
  return makeTarget(2);
}

} // namespace

CpuTarget CpuTarget::host() {
  CpuTarget target = hostLevel();
  // Where split-KV decode's requests for its coming K and V rows should
  // land depends on the micro-architecture and on how they are spread
  // (bench/RESULTS.md): on a Zen 5 VM, into L1 (prefetcht0) took 0.80-0.93x
  // the time of into L2 (prefetcht1) over contiguous keys and 0.86-1.00x
  // over a paged cache, measured interleaved in one run, where with V's
  // rows requested in one burst, L2 had been the faster. Other CPUs keep
  // L2, with which the spread requests were tuned on Zen 3 (L1 is not
  // measured there since).
  target.prefetchIntoL1 = target.tuneCpu == "znver5";
  return target;
}

llvm::Expected<CpuTarget> CpuTarget::forLevel(llvm::StringRef level) {
  if (level == "x86-64-v2")
    return makeTarget(2);
  if (level == "x86-64-v3")
    return makeTarget(3);
  if (level == "x86-64-v4")
    return makeTarget(4);
  if (level == std::string("x86-64-v4+") + kBf16Dot)
    return withBf16Dot(makeTarget(4));
  if (level == std::string("x86-64-v4+") + kBf16Dot + "+amx-bf16")
    return withAmxTiles(withBf16Dot(makeTarget(4)));
  return error("unknown CPU level '" + level +
               "'; expected x86-64-v2, x86-64-v3, x86-64-v4, "
               "x86-64-v4+avx512bf16 or x86-64-v4+avx512bf16+amx-bf16");
}

std::string CpuTarget::extraFeatures() const {
  std::string features = bf16Dot ? std::string("+") + kBf16Dot : "";
  if (amxTiles)
    for (const std::string &feature : kAmxTiles)
      features += ",+" + feature;
  return features;
}

llvm::Expected<std::string> mlir::attn::emitCpuLlvmIr(ModuleOp module,
                                                      const CpuTarget &target) {
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::TargetMachine> machine;
  auto llvmModule = translateAndOptimize(module, target, llvmContext, machine);
  if (!llvmModule)
    return llvmModule.takeError();
  std::string text;
  llvm::raw_string_ostream os(text);
  (*llvmModule)->print(os, nullptr);
  return text;
}

llvm::Expected<std::string>
mlir::attn::emitCpuSharedObject(ModuleOp module, const CpuTarget &target) {
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::TargetMachine> machine;
  auto llvmModule = translateAndOptimize(module, target, llvmContext, machine);
  if (!llvmModule)
    return llvmModule.takeError();

  // Object file and shared object go through two temporary files: ld.lld
  // is a separate program.
  llvm::SmallString<128> objectPath, sharedPath;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("attn-kernels", "o", objectPath))
    return error("cannot create a temporary object file: " + ec.message());
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("attn-kernels", "so", sharedPath))
    return error("cannot create a temporary shared object: " + ec.message());
  llvm::scope_exit cleanup([&] {
    llvm::sys::fs::remove(objectPath);
    llvm::sys::fs::remove(sharedPath);
  });
  {
    std::error_code ec;
    llvm::raw_fd_ostream object(objectPath, ec);
    if (ec)
      return error("cannot write " + objectPath + ": " + ec.message());
    llvm::legacy::PassManager passes;
    if (machine->addPassesToEmitFile(passes, object, nullptr,
                                     llvm::CodeGenFileType::ObjectFile))
      return error("LLVM cannot emit an object file for " + target.isaLevel);
    passes.run(**llvmModule);
  }

  llvm::ErrorOr<std::string> linker =
      llvm::sys::findProgramByName("ld.lld", {ATTN_LLVM_TOOLS_DIR});
  if (!linker)
    return error("cannot find ld.lld (looked in " ATTN_LLVM_TOOLS_DIR
                 " and PATH); install lld-22");
  std::string errorMessage;
  // The builtins archive last: ld.lld takes from it only the members the
  // kernels call.
  if (!llvm::sys::fs::exists(ATTN_CLANG_RT_BUILTINS))
    return error("cannot find the compiler-rt builtins " ATTN_CLANG_RT_BUILTINS
                 "; install libclang-rt-22-dev");
  llvm::StringRef args[] = {*linker,    "-shared",  "--no-undefined-version",
                            "-o",       sharedPath, objectPath,
                            ATTN_CLANG_RT_BUILTINS};
  int status = llvm::sys::ExecuteAndWait(*linker, args, std::nullopt, {}, 0, 0,
                                         &errorMessage);
  if (status != 0)
    return error("linking the CPU kernels with " + *linker + " failed (" +
                 llvm::Twine(status) + ") " + errorMessage);
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> shared =
      llvm::MemoryBuffer::getFile(sharedPath, /*IsText=*/false);
  if (!shared)
    return error("cannot read " + sharedPath + ": " +
                 shared.getError().message());
  return (*shared)->getBuffer().str();
}
