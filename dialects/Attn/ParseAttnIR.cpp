//===- ParseAttnIR.cpp - attn IR text to a module -------------------------===//

#include "Attn/ParseAttnIR.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/AsmParser/AsmParserState.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Regex.h"

using namespace mlir;

namespace {

/// The name an SSA value was written with (`%q` -> "q"), if one was; none
/// for numbered values (`%0`, `%arg0` is a name).
std::optional<std::string> writtenName(llvm::SMRange range) {
  if (!range.isValid())
    return std::nullopt;
  llvm::StringRef text(range.Start.getPointer(),
                       range.End.getPointer() - range.Start.getPointer());
  if (!text.consume_front("%") || text.empty() ||
      llvm::all_of(text, [](char c) { return llvm::isDigit(c); }))
    return std::nullopt;
  return text.str();
}

/// Names each public function's arguments and results (`attn.name`, which
/// the binary's signatures, attn-run --list, Python and the runtime's
/// errors show) as the text names them: an argument by its SSA name, a
/// result by the name of the value returned, unless it has a name already.
void nameEntryValues(Block &parsed, const AsmParserState &state) {
  for (auto func : parsed.getOps<func::FuncOp>()) {
    if (!func.isPublic() || func.isExternal())
      continue;
    Block &body = func.getBody().front();
    MLIRContext *context = func.getContext();
    if (const auto *block = state.getBlockDef(&body))
      for (auto [index, argument] : llvm::enumerate(block->arguments))
        if (!func.getArgAttr(index, "attn.name"))
          if (std::optional<std::string> name = writtenName(argument.loc))
            func.setArgAttr(index, "attn.name",
                            StringAttr::get(context, *name));
    auto returned = dyn_cast<func::ReturnOp>(body.getTerminator());
    if (!returned)
      continue;
    for (auto [index, value] : llvm::enumerate(returned.getOperands())) {
      auto result = dyn_cast<OpResult>(value);
      if (!result || func.getResultAttr(index, "attn.name"))
        continue;
      const auto *op = state.getOpDef(result.getOwner());
      if (!op)
        continue;
      // The group that defines this result, if it defines it alone
      // (`%path, %length = ...`, not `%r:2 = ...`).
      unsigned number = result.getResultNumber();
      for (auto [g, group] : llvm::enumerate(op->resultGroups)) {
        unsigned end = g + 1 < op->resultGroups.size()
                           ? op->resultGroups[g + 1].startIndex
                           : result.getOwner()->getNumResults();
        if (group.startIndex == number && end == number + 1)
          if (std::optional<std::string> name =
                  writtenName(group.definition.loc))
            func.setResultAttr(index, "attn.name",
                               StringAttr::get(context, *name));
      }
    }
  }
}

} // namespace

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
  Block parsed;
  AsmParserState state;
  if (failed(parseAsmSourceFile(sourceMgr, &parsed, config, &state)))
    return nullptr;
  nameEntryValues(parsed, state);
  return detail::constructContainerOpForParserIfNecessary<ModuleOp>(
      &parsed, config.getContext(),
      FileLineColLoc::get(config.getContext(), buffer->getBufferIdentifier(),
                          /*line=*/0, /*column=*/0));
}
