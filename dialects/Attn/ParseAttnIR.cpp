//===- ParseAttnIR.cpp - attn IR text to a module -------------------------===//

#include "Attn/ParseAttnIR.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/Regex.h"

using namespace mlir;

OwningOpRef<ModuleOp> mlir::attn::parseAttnIR(const llvm::SourceMgr &sourceMgr,
                                              const ParserConfig &config) {
  const llvm::MemoryBuffer *buffer =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  llvm::StringRef text = buffer->getBuffer();
  llvm::SmallVector<llvm::StringRef, 1> match;
  if (llvm::Regex("array[[:space:]]*<[[:space:]]*index([^_[:alnum:]]|$)")
          .match(text, &match)) {
    llvm::SMLoc at = llvm::SMLoc::getFromPointer(match.front().data());
    auto [line, column] = sourceMgr.getLineAndColumn(at);
    emitError(FileLineColLoc::get(config.getContext(),
                                  buffer->getBufferIdentifier(), line, column))
        << "a dense array of index (array<index: ...>) is not supported: "
           "LLVM 22's parser cannot read one; use array<i64: ...>";
    return nullptr;
  }
  return parseSourceFile<ModuleOp>(sourceMgr, config);
}
