//===- AttnEnums.td - Enums of the attn dialect ------------*- tablegen -*-===//

#ifndef ATTN_ENUMS_TD
#define ATTN_ENUMS_TD

include "mlir/IR/EnumAttr.td"

def Attn_MaskKind : I32EnumAttr<"MaskKind",
    "which keys a query row may see (positions are bottom-right aligned)", [
      I32EnumAttrCase<"None", 0, "none">,
      I32EnumAttrCase<"Causal", 1, "causal">,
      I32EnumAttrCase<"SlidingWindow", 2, "sliding_window">,
      I32EnumAttrCase<"Chunked", 3, "chunked">
    ]> {
  let cppNamespace = "::mlir::attn";
  let genSpecializedAttr = 0;
}

def Attn_GateActivation : I32EnumAttr<"GateActivation",
    "the activation of an output gate's logits (z)", [
      I32EnumAttrCase<"Silu", 0, "silu">,
      I32EnumAttrCase<"Sigmoid", 1, "sigmoid">
    ]> {
  let cppNamespace = "::mlir::attn";
  let genSpecializedAttr = 0;
}

def Attn_RecurrenceRule : I32EnumAttr<"RecurrenceRule",
    "state update rule of a linear recurrence", [
      I32EnumAttrCase<"Linear", 0, "linear">,
      I32EnumAttrCase<"Decay", 1, "decay">,
      I32EnumAttrCase<"Gla", 2, "gla">,
      I32EnumAttrCase<"Delta", 3, "delta">,
      I32EnumAttrCase<"GatedDelta", 4, "gated_delta">,
      I32EnumAttrCase<"Kda", 5, "kda">
    ]> {
  let cppNamespace = "::mlir::attn";
  let genSpecializedAttr = 0;
}

def Attn_SelectionEstimator : I32EnumAttr<"SelectionEstimator",
    "how top-p selection estimates attention weights", [
      I32EnumAttrCase<"Exact", 0, "exact">,
      I32EnumAttrCase<"Int4", 1, "int4">
    ]> {
  let cppNamespace = "::mlir::attn";
  let genSpecializedAttr = 0;
}

// The following enums describe attention-like ops through
// AttentionOpInterface; they are not attributes.

def Attn_KeySelectionKind : I32Enum<"KeySelectionKind",
    "what besides the position mask decides which keys a row sees", [
      I32EnumCase<"Dense", 0, "dense">,
      I32EnumCase<"Blocks", 1, "blocks">,
      I32EnumCase<"Tree", 2, "tree">
    ]> {
  let cppNamespace = "::mlir::attn";
}

def Attn_Normalizer : I32Enum<"Normalizer",
    "how scores become weights", [
      I32EnumCase<"Softmax", 0, "softmax">,
      I32EnumCase<"RecurrentState", 1, "recurrent_state">
    ]> {
  let cppNamespace = "::mlir::attn";
}

def Attn_Epilogue : I32Enum<"Epilogue",
    "elementwise transform applied to each output row before it is stored", [
      I32EnumCase<"None", 0, "none">,
      I32EnumCase<"SigmoidGate", 1, "sigmoid_gate">,
      I32EnumCase<"RmsNormSiluGate", 2, "rmsnorm_silu_gate">
    ]> {
  let cppNamespace = "::mlir::attn";
}

#endif // ATTN_ENUMS_TD
