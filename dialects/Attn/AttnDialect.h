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

#define GET_ATTRDEF_CLASSES
#include "Attn/AttnAttrs.h.inc"

#endif // ATTN_DIALECT_ATTN_ATTNDIALECT_H
