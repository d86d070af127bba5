//===- ParseAttnIR.h - attn IR text to a module ----------------*- C++ -*-===//
//
// The one place attn IR written by a user (attnc's .mlir input, a model
// description's `{"func": ...}` variants) is parsed.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_DIALECT_PARSEATTNIR_H
#define ATTN_DIALECT_PARSEATTNIR_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

namespace mlir::attn {

/// Parses the main buffer of `sourceMgr` as a module, as parseSourceFile
/// does: null after an error diagnostic. Before parsing, it refuses with an
/// error at its line and column what LLVM 22's parser crashes on instead
/// of refusing: a dense array of `index` (`array<index: ...>`;
/// llvm-project issue 179045, fixed after LLVM 22.1).
OwningOpRef<ModuleOp> parseAttnIR(const llvm::SourceMgr &sourceMgr,
                                  const ParserConfig &config);

} // namespace mlir::attn

#endif // ATTN_DIALECT_PARSEATTNIR_H
