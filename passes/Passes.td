//===- Passes.td - Passes of attn --------------------------*- tablegen -*-===//

#ifndef ATTN_PASSES_TD
#define ATTN_PASSES_TD

include "mlir/Pass/PassBase.td"

def AttnFuseEpilogues : Pass<"attn-fuse-epilogues"> {
  let summary = "Fold output gates into the attention that produces their input";
  let description = [{
    Folds every epilogue op (`attn.gate`, `attn.rmsnorm_gate`: ops
    implementing EpilogueOpInterface) into the attention-like op that
    produces its input, when that op accepts the epilogue's kind
    (AttentionOpInterface::fuseEpilogue) and nothing else reads the
    un-transformed output. The fused op applies the transform to each output
    row before storing it, so no second pass reads the output.

    ```mlir
    %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>} : ...
    %r = attn.gate %o, %g : ...
    // becomes
    %r = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<causal>} : ...
    ```
  }];
}

#endif // ATTN_PASSES_TD
