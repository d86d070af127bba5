//===- AttnDialect.h - The attn dialect -------------------------*- C++ -*-===//
//
// The attn dialect, its enums and attributes.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_DIALECT_ATTN_ATTNDIALECT_H
#define ATTN_DIALECT_ATTN_ATTNDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "Attn/AttnOpsDialect.h.inc"

#include "Attn/AttnEnums.h.inc"

namespace mlir::attn {
/// What a recurrence rule reads besides q, k and v: the one place that says
/// which rules decay the state (by a scalar per step, or per key feature)
/// and which are delta rules (a write strength beta, the WY / UT form).
inline bool hasScalarDecay(RecurrenceRule rule) {
  return rule == RecurrenceRule::Decay || rule == RecurrenceRule::GatedDelta;
}
inline bool hasFeatureDecay(RecurrenceRule rule) {
  return rule == RecurrenceRule::Gla || rule == RecurrenceRule::Kda;
}
inline bool isDeltaRule(RecurrenceRule rule) {
  return rule == RecurrenceRule::Delta || rule == RecurrenceRule::GatedDelta ||
         rule == RecurrenceRule::Kda;
}
} // namespace mlir::attn

#define GET_ATTRDEF_CLASSES
#include "Attn/AttnAttrs.h.inc"

#endif // ATTN_DIALECT_ATTN_ATTNDIALECT_H
