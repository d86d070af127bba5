//===- Passes.h - Passes of attn --------------------------------*- C++ -*-===//

#ifndef ATTN_PASSES_PASSES_H
#define ATTN_PASSES_PASSES_H

#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace mlir::attn {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// Adds the pattern that folds an epilogue op into the attention producing
/// its input (what -attn-fuse-epilogues runs).
void populateFuseEpiloguePatterns(RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::attn

#endif // ATTN_PASSES_PASSES_H
