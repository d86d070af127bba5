//===- ShapeChecks.cpp - Named shape checks for attn ops ------------------===//

#include "Attn/ShapeChecks.h"

#include <cmath>

using namespace mlir;
using namespace mlir::attn;

std::string mlir::attn::formatLayout(llvm::ArrayRef<const char *> dims) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(dims)) {
    if (i)
      s += ", ";
    s += d;
  }
  return s + "]";
}

NamedTensor mlir::attn::named(llvm::StringRef name, Value value,
                              llvm::ArrayRef<const char *> dims) {
  return {name, llvm::cast<RankedTensorType>(value.getType()), dims};
}

LogicalResult mlir::attn::checkRank(EmitErrorFn emitError,
                                    const NamedTensor &t) {
  if (t.type.getRank() == static_cast<int64_t>(t.dims.size()))
    return success();
  return emitError() << "'" << t.name << "' must be a rank-" << t.dims.size()
                     << " tensor " << formatLayout(t.dims) << ", got "
                     << t.type;
}

LogicalResult mlir::attn::checkStaticDim(EmitErrorFn emitError,
                                         const NamedTensor &t, unsigned d) {
  if (t.isStatic(d))
    return success();
  return emitError() << "'" << t.name << "' dim " << d << " (" << t.dims[d]
                     << ") must be static: head counts and feature sizes are "
                        "fixed by the model, got "
                     << t.type;
}

LogicalResult mlir::attn::checkSameDim(EmitErrorFn emitError,
                                       const NamedTensor &a, unsigned ad,
                                       const NamedTensor &b, unsigned bd) {
  if (!a.isStatic(ad) || !b.isStatic(bd) || a.dim(ad) == b.dim(bd))
    return success();
  return emitError() << "'" << a.name << "' dim " << ad << " (" << a.dims[ad]
                     << ") must match '" << b.name << "' dim " << bd << " ("
                     << b.dims[bd] << "): expected " << b.dim(bd) << ", got "
                     << a.dim(ad);
}

LogicalResult mlir::attn::checkDimIs(EmitErrorFn emitError,
                                     const NamedTensor &t, unsigned d,
                                     int64_t expected) {
  if (!t.isStatic(d) || t.dim(d) == expected)
    return success();
  return emitError() << "'" << t.name << "' dim " << d << " (" << t.dims[d]
                     << ") must be " << expected << ", got " << t.dim(d);
}

LogicalResult mlir::attn::checkDimMultiple(EmitErrorFn emitError,
                                           const NamedTensor &t,
                                           const NamedTensor &divisor,
                                           unsigned d) {
  if (!t.isStatic(d) || !divisor.isStatic(d))
    return success();
  if (divisor.dim(d) > 0 && t.dim(d) % divisor.dim(d) == 0)
    return success();
  return emitError() << "'" << t.name << "' dim " << d << " (" << t.dims[d]
                     << " = " << t.dim(d) << ") must be a multiple of '"
                     << divisor.name << "' dim " << d << " (" << divisor.dims[d]
                     << " = " << divisor.dim(d) << ")";
}

LogicalResult mlir::attn::checkSameElementType(EmitErrorFn emitError,
                                               const NamedTensor &a,
                                               const NamedTensor &b) {
  if (a.type.getElementType() == b.type.getElementType())
    return success();
  return emitError() << "'" << a.name << "' must have the element type of '"
                     << b.name << "': expected " << b.type.getElementType()
                     << ", got " << a.type.getElementType();
}

LogicalResult mlir::attn::checkPositive(EmitErrorFn emitError,
                                        llvm::StringRef attr, int64_t value) {
  if (value > 0)
    return success();
  return emitError() << "'" << attr << "' must be > 0, got " << value;
}

LogicalResult mlir::attn::checkScale(EmitErrorFn emitError,
                                     std::optional<double> scale) {
  if (!scale || (std::isfinite(*scale) && *scale > 0.0))
    return success();
  return emitError() << "'scale' must be finite and > 0, got " << *scale;
}

double mlir::attn::resolveScale(std::optional<double> scale,
                                int64_t featureSize) {
  if (scale)
    return *scale;
  return 1.0 / std::sqrt(static_cast<double>(featureSize));
}
