//===- ShapeChecks.h - Named shape checks for attn ops ----------*- C++ -*-===//
//
// Helpers shared by type inference and verifiers. Every check names the
// operand, the dimension (by its index and its name in the op's layout, e.g.
// "dim 2 (Lk)"), and the expected and actual value, so a user can fix the IR
// from the message alone.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_DIALECT_ATTN_SHAPECHECKS_H
#define ATTN_DIALECT_ATTN_SHAPECHECKS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>
#include <string>

namespace mlir::attn {

/// Produces the diagnostic a failed check is written into.
using EmitErrorFn = llvm::function_ref<InFlightDiagnostic()>;

/// A tensor operand (or result) with its name and layout, e.g.
/// {"key", type, {"B", "Hkv", "Lk", "D"}}.
struct NamedTensor {
  llvm::StringRef name;
  RankedTensorType type;
  llvm::ArrayRef<const char *> dims;

  int64_t dim(unsigned i) const { return type.getDimSize(i); }
  bool isStatic(unsigned i) const { return !type.isDynamicDim(i); }
};

/// Formats a layout as "[B, H, Lq, D]".
std::string formatLayout(llvm::ArrayRef<const char *> dims);

/// Builds a NamedTensor from a value that must be a ranked tensor (ODS
/// type constraints guarantee it for verified ops).
NamedTensor named(llvm::StringRef name, Value value,
                  llvm::ArrayRef<const char *> dims);

/// The tensor has exactly as many dimensions as its layout names.
LogicalResult checkRank(EmitErrorFn emitError, const NamedTensor &t);

/// Dimension `d` is static (head counts and feature sizes are fixed by the
/// model description).
LogicalResult checkStaticDim(EmitErrorFn emitError, const NamedTensor &t,
                             unsigned d);

/// Dimension `ad` of `a` equals dimension `bd` of `b` when both are static.
LogicalResult checkSameDim(EmitErrorFn emitError, const NamedTensor &a,
                           unsigned ad, const NamedTensor &b, unsigned bd);

/// Dimension `d` of `t` is `expected` when static.
LogicalResult checkDimIs(EmitErrorFn emitError, const NamedTensor &t,
                         unsigned d, int64_t expected);

/// Dimension `d` of `t` is a multiple of dimension `d` of `divisor` (head
/// grouping: query heads over key/value heads, value heads over key heads).
LogicalResult checkDimMultiple(EmitErrorFn emitError, const NamedTensor &t,
                               const NamedTensor &divisor, unsigned d);

/// Both tensors store the same element type.
LogicalResult checkSameElementType(EmitErrorFn emitError, const NamedTensor &a,
                                   const NamedTensor &b);

/// An attribute that must be strictly positive.
LogicalResult checkPositive(EmitErrorFn emitError, llvm::StringRef attr,
                            int64_t value);

/// A scale attribute, when present, is finite and strictly positive.
LogicalResult checkScale(EmitErrorFn emitError, std::optional<double> scale);

/// Resolves an optional scale attribute against the feature size of the
/// scores it multiplies: 1/sqrt(featureSize) by default.
double resolveScale(std::optional<double> scale, int64_t featureSize);

} // namespace mlir::attn

#endif // ATTN_DIALECT_ATTN_SHAPECHECKS_H
