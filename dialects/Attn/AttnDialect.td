//===- AttnDialect.td - The attn dialect -------------------*- tablegen -*-===//
//
// The attn dialect: one op per attention computation of SPEC §1-2, on ranked
// tensors in [B, H, L, D] layout.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_DIALECT_TD
#define ATTN_DIALECT_TD

include "mlir/IR/OpBase.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let cppNamespace = "::mlir::attn";
  let summary = "Attention variants: softmax, sparse, tree and linear recurrences";
  let description = [{
    The `attn` dialect holds one op per attention computation: dense softmax
    attention (`attn.sdpa`) with masks, softcap and grouped-query heads; the
    sigmoid output gate; Quest block metadata and top-k block selection;
    Twilight top-p token selection; attention over a selection; tree attention
    for speculative verification with greedy acceptance and KV compaction; and
    chunked linear recurrences (linear, decay, GLA, DeltaNet, Gated DeltaNet)
    with their rmsnorm-silu output gate.

    Tensors are row-major in `[B, H, L, D]` layout. Batch and sequence lengths
    may be dynamic; head counts and feature sizes are static.
  }];
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::tensor::TensorDialect"];
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Attn_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attn_Dialect, mnemonic, traits>;

#endif // ATTN_DIALECT_TD
