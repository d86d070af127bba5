//===- TestAttentionInterface.cpp - Print AttentionOpInterface ------------===//
//
// -test-attention-interface attaches a remark to every op implementing
// AttentionOpInterface that spells out what the interface reports, so lit
// can check each op's answers with -verify-diagnostics.
//
//===----------------------------------------------------------------------===//

#include "test/lib/TestPasses.h"

#include "Attn/AttnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

/// Position of `value` among `op`'s operands, or -1.
int64_t operandIndex(Operation *op, Value value) {
  for (OpOperand &operand : op->getOpOperands())
    if (operand.get() == value)
      return operand.getOperandNumber();
  return -1;
}

struct TestAttentionInterfacePass final
    : PassWrapper<TestAttentionInterfacePass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestAttentionInterfacePass)

  StringRef getArgument() const override { return "test-attention-interface"; }
  StringRef getDescription() const override {
    return "Remark what AttentionOpInterface reports for each op";
  }

  void runOnOperation() override {
    getOperation().walk([](AttentionOpInterface op) {
      Operation *operation = op.getOperation();
      InFlightDiagnostic remark = operation->emitRemark();
      remark << "q/k/v = operands " << operandIndex(operation, op.getQuery())
             << "/" << operandIndex(operation, op.getKey()) << "/"
             << operandIndex(operation, op.getValue())
             << ", mask = " << op.getPositionMask() << ", selection = "
             << stringifyKeySelectionKind(op.getKeySelectionKind());
      if (Value selection = op.getKeySelection())
        remark << " (operand " << operandIndex(operation, selection)
               << ", block " << op.getSelectionBlockSize() << ")";
      remark << ", scale = " << op.getScoreScale()
             << ", softcap = " << op.getScoreSoftcap()
             << ", normalizer = " << stringifyNormalizer(op.getNormalizer())
             << ", epilogue = " << stringifyEpilogue(op.getEpilogue());
      for (Value operand : op.getEpilogueOperands())
        remark << " " << operandIndex(operation, operand);
      remark << ", lse = " << (op.getLogSumExp() ? "yes" : "no");
      if (Value sinks = op.getAttentionSinks())
        remark << ", sinks = operand " << operandIndex(operation, sinks);
      if (Value offsets = op.getSequenceOffsets()) {
        remark << ", ragged: offsets = operand "
               << operandIndex(operation, offsets);
        if (Value keyOffsets = op.getKeyOffsets())
          remark << ", key offsets = operand "
                 << operandIndex(operation, keyOffsets);
        if (Value slots = op.getStateSlots())
          remark << ", slots = operand " << operandIndex(operation, slots);
      } else if (Value keyOffsets = op.getKeyOffsets()) {
        remark << ", packed keys: offsets = operand "
               << operandIndex(operation, keyOffsets);
      } else if (Value slots = op.getStateSlots()) {
        remark << ", pool: slots = operand " << operandIndex(operation, slots);
      }
    });
  }
};

} // namespace

void mlir::attn::test::registerTestPasses() {
  PassRegistration<TestAttentionInterfacePass>();
}
