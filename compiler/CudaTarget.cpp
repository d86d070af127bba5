//===- CudaTarget.cpp - NVIDIA GPUs as a code generation target -----------===//

#include "compiler/CudaTarget.h"

#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Mutex.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::attn;

namespace {
llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string join(llvm::StringRef toolkit,
                 std::initializer_list<llvm::StringRef> components) {
  llvm::SmallString<128> path(toolkit);
  for (llvm::StringRef component : components)
    llvm::sys::path::append(path, component);
  return path.str().str();
}

/// Whether `ptxas` takes --split-compile (CUDA 12 and later do): its help
/// names the option. Asked once per ptxas.
bool ptxasSplitsCompile(const std::string &ptxas) {
  static llvm::sys::SmartMutex<true> mutex;
  static llvm::StringMap<bool> answers;
  llvm::sys::SmartScopedLock<true> lock(mutex);
  auto [at, inserted] = answers.try_emplace(ptxas, false);
  if (!inserted)
    return at->second;
  llvm::SmallString<128> helpPath;
  if (llvm::sys::fs::createTemporaryFile("attn-ptxas-help", "txt", helpPath))
    return false;
  llvm::scope_exit cleanup([&] { llvm::sys::fs::remove(helpPath); });
  llvm::StringRef args[] = {ptxas, "--help"};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, helpPath.str(),
                                                helpPath.str()};
  if (llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects) != 0)
    return false;
  if (auto help = llvm::MemoryBuffer::getFile(helpPath))
    at->second = (*help)->getBuffer().contains("--split-compile");
  return at->second;
}
} // namespace

int CudaTarget::smVersion() const { return smVersionOf(chip); }

int64_t CudaTarget::maxSharedBytesPerBlock() const {
  // The CUDA C++ Programming Guide's table of compute capabilities.
  switch (smVersion()) {
  case 75:
    return 64 * 1024;
  case 80:
  case 87:
    return 163 * 1024;
  case 86:
  case 89:
  case 120:
  case 121:
    return 99 * 1024;
  default:
    return 227 * 1024; // sm_90, sm_100 and the other datacenter chips
  }
}

std::string CudaTarget::ptxFeatures() const {
  return smVersion() >= 100 ? "+ptx86" : "+ptx80";
}

llvm::Expected<CudaTarget> CudaTarget::get(llvm::StringRef chip,
                                           llvm::StringRef toolkitPath) {
  CudaTarget target;
  target.chip = chip.str();
  target.toolkitPath = toolkitPath.str();
  llvm::StringRef rest = chip;
  unsigned version = 0;
  bool wellFormed = rest.consume_front("sm_") &&
                    !rest.consumeInteger(10, version) &&
                    (rest.empty() || rest == "a" || rest == "f");
  if (!wellFormed || version < 75)
    return error("unknown SM '" + chip +
                 "': expected sm_<N> with N >= 75, optionally with the "
                 "suffix a or f (e.g. sm_90a, sm_100a)");
  std::string libdevice =
      join(toolkitPath, {"nvvm", "libdevice", "libdevice.10.bc"});
  if (!llvm::sys::fs::exists(libdevice))
    return error("no CUDA toolkit at '" + toolkitPath + "': " + libdevice +
                 " does not exist (give the toolkit with --cuda-path)");
  std::string ptxas = join(toolkitPath, {"bin", "ptxas"});
  if (!llvm::sys::fs::can_execute(ptxas))
    return error("no CUDA toolkit at '" + toolkitPath + "': " + ptxas +
                 " is not an executable (give the toolkit with --cuda-path)");
  return target;
}

llvm::Expected<std::string> mlir::attn::emitPtx(ModuleOp module,
                                                const CudaTarget &target) {
  PassManager pm(module.getContext());
  GpuModuleToBinaryPassOptions options;
  options.toolkitPath = target.toolkitPath;
  options.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(options));
  if (failed(pm.run(module)))
    return error("translating the CUDA kernels to PTX failed");
  std::string ptx;
  for (auto binary : module.getOps<gpu::BinaryOp>())
    for (Attribute object : binary.getObjects())
      ptx += cast<gpu::ObjectAttr>(object).getObject().str();
  if (ptx.empty())
    return error("the module has no CUDA kernels");
  return ptx;
}

llvm::Expected<std::string>
mlir::attn::assembleCubin(llvm::StringRef ptx, const CudaTarget &target) {
  // ptxas reads and writes files.
  llvm::SmallString<128> ptxPath, cubinPath, logPath;
  for (auto [path, suffix] :
       {std::pair{&ptxPath, "ptx"}, std::pair{&cubinPath, "cubin"},
        std::pair{&logPath, "log"}})
    if (std::error_code ec =
            llvm::sys::fs::createTemporaryFile("attn-kernels", suffix, *path))
      return error("cannot create a temporary file: " + ec.message());
  llvm::scope_exit cleanup([&] {
    for (auto *path : {&ptxPath, &cubinPath, &logPath})
      llvm::sys::fs::remove(*path);
  });
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(ptxPath, ec);
    if (ec)
      return error("cannot write " + ptxPath + ": " + ec.message());
    out << ptx;
  }
  std::string ptxas = join(target.toolkitPath, {"bin", "ptxas"});
  std::string arch = "-arch=" + target.chip;
  // --split-compile 0: ptxas optimizes the kernels on as many threads as
  // the machine has CPUs. The machine code is the same (every kernel's
  // .text section byte for byte, Qwen3-Next's nine kernels), in 0.6x the
  // time on 2 cores.
  llvm::SmallVector<llvm::StringRef, 8> args{ptxas, arch, "-O3"};
  if (ptxasSplitsCompile(ptxas))
    args.append({"--split-compile", "0"});
  args.append({ptxPath, "-o", cubinPath});
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, logPath.str(),
                                                logPath.str()};
  std::string errorMessage;
  int status = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects,
                                         0, 0, &errorMessage);
  if (status != 0) {
    std::string log;
    if (auto buffer = llvm::MemoryBuffer::getFile(logPath))
      log = (*buffer)->getBuffer().trim().str();
    return error("ptxas (" + ptxas + ") rejected the PTX for " + target.chip +
                 " (exit " + llvm::Twine(status) +
                 "): " + (log.empty() ? errorMessage : log));
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> cubin =
      llvm::MemoryBuffer::getFile(cubinPath, /*IsText=*/false);
  if (!cubin)
    return error("cannot read " + cubinPath + ": " +
                 cubin.getError().message());
  return (*cubin)->getBuffer().str();
}
