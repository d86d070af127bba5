//===- AttnAttrs.td - Attributes of the attn dialect -------*- tablegen -*-===//

#ifndef ATTN_ATTRS_TD
#define ATTN_ATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "AttnDialect.td"
include "AttnEnums.td"

class Attn_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Attn_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Attn_MaskAttr : Attn_Attr<"Mask", "mask"> {
  let summary = "position mask of softmax attention";
  let description = [{
    Query row `i` of `Lq` sits at absolute position `p = Lk - Lq + i`
    (bottom-right alignment). Key `j` is visible to it under

    - `none`: always;
    - `causal`: iff `j <= p`;
    - `sliding_window = W`: iff `p - W < j <= p`;
    - `chunked = C`: iff `j <= p` and `j / C == p / C` (Llama 4's chunked
      attention: the sequence is cut into chunks of `C` positions and a
      query sees the keys of its own chunk, causally).

    Every kind but `none` hides all keys from a row at a negative position,
    and `causal` and `chunked` require `Lq <= Lk`. Each row's visible keys
    are a range `[first, p]` whose `first` never decreases with `p`.

    ```mlir
    #attn.mask<none>
    #attn.mask<causal>
    #attn.mask<sliding_window = 128>
    #attn.mask<chunked = 8192>
    ```
  }];
  let parameters = (ins
    EnumParameter<Attn_MaskKind>:$kind,
    // The window W of sliding_window or the chunk size C of chunked.
    DefaultValuedParameter<"int64_t", "0">:$window
  );
  let assemblyFormat = "`<` $kind (`=` $window^)? `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether a key at absolute position `keyPos` is visible to a query at
    /// absolute position `queryPos`.
    bool isVisible(int64_t queryPos, int64_t keyPos) const;
    bool isCausal() const { return getKind() == MaskKind::Causal; }
    bool isSlidingWindow() const {
      return getKind() == MaskKind::SlidingWindow;
    }
    /// Whether the mask needs every row at a position >= 0 (Lq <= Lk).
    bool requiresQueriesWithinKeys() const {
      return getKind() == MaskKind::Causal || getKind() == MaskKind::Chunked;
    }
  }];
}

def Attn_RecurrenceRuleAttr
    : EnumAttr<Attn_Dialect, Attn_RecurrenceRule, "rule"> {
  let assemblyFormat = "`<` $value `>`";
}

def Attn_GateActivationAttr
    : EnumAttr<Attn_Dialect, Attn_GateActivation, "gate_activation"> {
  let assemblyFormat = "`<` $value `>`";
}

def Attn_SelectionEstimatorAttr
    : EnumAttr<Attn_Dialect, Attn_SelectionEstimator, "estimator"> {
  let assemblyFormat = "`<` $value `>`";
}

#endif // ATTN_ATTRS_TD
