//===- AttnOps.h - Ops of the attn dialect ----------------------*- C++ -*-===//

#ifndef ATTN_DIALECT_ATTN_ATTNOPS_H
#define ATTN_DIALECT_ATTN_ATTNOPS_H

#include "Attn/AttnDialect.h"
#include "Attn/AttnInterfaces.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "Attn/AttnOps.h.inc"

#endif // ATTN_DIALECT_ATTN_ATTNOPS_H
