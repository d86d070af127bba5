//===- ModelToAttn.h - Model description to attn IR -------------*- C++ -*-===//

#ifndef ATTN_FRONTEND_MODELTOATTN_H
#define ATTN_FRONTEND_MODELTOATTN_H

#include "frontend/ModelDescription.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mlir::attn::frontend {

/// Builds one func.func per entry of SPEC §4 for `model`: per attention
/// layer `<name>` (+ `<name>.meta` with sparsity, `<name>.tree` and
/// `<name>.compact` with `tree`), per linear-attention layer `<name>`, and
/// `verify.accept` when the model is speculative. Arguments and results
/// carry their SPEC names in `attn.name`. A `{"func": ...}` variant's attn
/// IR is parsed here: when it is wrong, the diagnostics go to `context`'s
/// handler, naming its JSON path, and the result is null. Otherwise the
/// module verifies when `model` came from parseModelDescription, except
/// where the verifier rejects what such a function's body holds.
OwningOpRef<ModuleOp> buildAttnModule(MLIRContext &context,
                                      const ModelDescription &model);

} // namespace mlir::attn::frontend

#endif // ATTN_FRONTEND_MODELTOATTN_H
