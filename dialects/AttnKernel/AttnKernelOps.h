//===- AttnKernelOps.h - Ops below the dispatch boundary --------*- C++ -*-===//

#ifndef ATTN_DIALECT_ATTNKERNEL_ATTNKERNELOPS_H
#define ATTN_DIALECT_ATTNKERNEL_ATTNKERNELOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "AttnKernel/AttnKernelOpsDialect.h.inc"

#define GET_OP_CLASSES
#include "AttnKernel/AttnKernelOps.h.inc"

#endif // ATTN_DIALECT_ATTNKERNEL_ATTNKERNELOPS_H
