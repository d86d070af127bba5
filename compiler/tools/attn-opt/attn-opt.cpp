//===- attn-opt.cpp - The attn optimizer driver ---------------------------===//
//
// mlir-opt with the attn dialect and its passes: the tool every lit test of
// a pass or pipeline runs. Upstream dialects, passes and extensions are all
// registered, so tests can mix attn ops with whatever the pipelines lower to.
//
//===----------------------------------------------------------------------===//

#include "compiler/Compile.h"
#include "compiler/Pipelines.h"
#include "passes/Passes.h"
#include "test/lib/TestPasses.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::attn::registerAttnPasses();
  mlir::attn::registerAttnPipelines();
  mlir::attn::test::registerTestPasses();

  mlir::DialectRegistry registry;
  mlir::attn::registerCompilerDialects(registry);

  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "attn optimizer driver\n", registry));
}
