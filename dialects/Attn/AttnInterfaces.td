//===- AttnInterfaces.td - Attention op interface ----------*- tablegen -*-===//

#ifndef ATTN_INTERFACES_TD
#define ATTN_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Attn_EpilogueOpInterface : OpInterface<"EpilogueOpInterface"> {
  let cppNamespace = "::mlir::attn";
  let description = [{
    A row-wise transform of an attention output that can run in the epilogue
    of the attention op producing it (cf. FlashInfer's output transform):
    the sigmoid output gate, the rmsnorm-silu gate. Epilogue fusion folds it
    into any AttentionOpInterface op that accepts its kind.
  }];
  let methods = [
    InterfaceMethod<"The attention output this op transforms.",
      "::mlir::Value", "getEpilogueInput">,
    InterfaceMethod<"Which epilogue this op is.",
      "::mlir::attn::Epilogue", "getEpilogueKind">,
    InterfaceMethod<[{
        The operands besides the input: the gate logits, or `z` and the
        weight.
      }],
      "::llvm::SmallVector<::mlir::Value>", "getEpilogueParameters">
  ];
}

def Attn_AttentionOpInterface : OpInterface<"AttentionOpInterface"> {
  let cppNamespace = "::mlir::attn";
  let description = [{
    An attention-like op, described as the few hooks every attention variant
    is made of (cf. FlashInfer's variants): which operands are the query, key
    and value; which keys a query row may see (a position mask, narrowed by a
    block selection or a draft tree); how a score is modified (scale,
    softcap); how scores become weights (online softmax, or a recurrent state
    for linear attention); and which epilogue transforms each output row.

    Tiling and fusion passes work on this interface, never on op names, so a
    new variant gets them by implementing these methods.
  }];

  let methods = [
    InterfaceMethod<"The query tensor [B, Hq, Lq, D].",
      "::mlir::Value", "getQuery">,
    InterfaceMethod<"The key tensor [B, Hk, Lk, D].",
      "::mlir::Value", "getKey">,
    InterfaceMethod<"The value tensor [B, Hv, Lk, Dv].",
      "::mlir::Value", "getValue">,
    InterfaceMethod<"The main output [B, H, Lq, Dv].",
      "::mlir::Value", "getOutput">,
    InterfaceMethod<[{
        The log-sum-exp of each row's visible scores [B, H, Lq], or null
        when the op does not return it.
      }],
      "::mlir::Value", "getLogSumExp", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        The position mask: which key positions a query position may see
        before any selection or tree narrows it.
      }],
      "::mlir::attn::MaskAttr", "getPositionMask">,
    InterfaceMethod<"What else narrows the visible keys.",
      "::mlir::attn::KeySelectionKind", "getKeySelectionKind", (ins), [{}],
      [{ return ::mlir::attn::KeySelectionKind::Dense; }]>,
    InterfaceMethod<[{
        The operand that narrows the visible keys: the block/token selection
        (`Blocks`) or the parent array (`Tree`); null when `Dense`.
      }],
      "::mlir::Value", "getKeySelection", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        Size in keys of one selection entry (`Blocks`); 1 otherwise.
      }],
      "int64_t", "getSelectionBlockSize", (ins), [{}], [{ return 1; }]>,
    InterfaceMethod<[{
        The factor applied to dot(q, k), with the default 1/sqrt(D)
        resolved.
      }],
      "double", "getScoreScale">,
    InterfaceMethod<"The softcap `c` (s = c * tanh(s / c)), 0 for none.",
      "double", "getScoreSoftcap", (ins), [{}], [{ return 0.0; }]>,
    InterfaceMethod<[{
        The `score_mod` region (SPEC §7) that modifies each score after
        scale and softcap, or null when the op has none.
      }],
      "::mlir::Region *", "getScoreModifier", (ins), [{}],
      [{ return nullptr; }]>,
    InterfaceMethod<[{
        The `mask_mod` region (SPEC §7) that may hide keys the position mask
        and the selection leave visible, or null when the op has none.
      }],
      "::mlir::Region *", "getMaskModifier", (ins), [{}],
      [{ return nullptr; }]>,
    InterfaceMethod<[{
        The attention sinks [H] (f32): per query head, a logit that joins
        each row's softmax denominator with no value (gpt-oss); null when
        the op has none.
      }],
      "::mlir::Value", "getAttentionSinks", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<"How scores become weights.",
      "::mlir::attn::Normalizer", "getNormalizer", (ins), [{}],
      [{ return ::mlir::attn::Normalizer::Softmax; }]>,
    InterfaceMethod<[{
        With the `RecurrentState` normalizer: how each step updates the
        state `S [Dk, Dv]` (SPEC §2).
      }],
      "::mlir::attn::RecurrenceRule", "getRecurrenceRule", (ins), [{}],
      [{ return ::mlir::attn::RecurrenceRule::Linear; }]>,
    InterfaceMethod<[{
        The per-step log-decays `g` [B, Hv, L] (per key feature:
        [B, Hv, L, Dk]) of a gated recurrence; null otherwise.
      }],
      "::mlir::Value", "getStepDecay", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        The per-step write strengths `beta` [B, Hv, L] of a delta rule; null
        otherwise.
      }],
      "::mlir::Value", "getStepBeta", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        The state before the first step [B, Hv, Dk, Dv], and the result
        holding the state after the last; null without a recurrent state.
      }],
      "::mlir::Value", "getStateInput", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<"See getStateInput.",
      "::mlir::Value", "getStateOutput", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        A paged KV cache (SPEC §8): the page table [B, MP] (i32) through
        which the keys and values [NP, P, Hkv, F] are read; null when they
        are [B, Hkv, Lk, F].
      }],
      "::mlir::Value", "getKeyPageTable", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        With a page table: each sequence's key count `seq_lens [B]` (i32).
      }],
      "::mlir::Value", "getKeyLengths", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        A ragged batch (SPEC §8): the offsets `cu_seqlens [B+1]` (i32) of
        the sequences packed token-major in the per-step operands (a
        recurrence) or the per-row operands (softmax attention: query, gate,
        output, lse), which then have no batch dim ([T, H, ...]); null for
        [B, H, L, ...].
      }],
      "::mlir::Value", "getSequenceOffsets", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        A ragged batch of softmax attention with packed keys (SPEC §8): the
        offsets `cu_seqlens_k [B+1]` (i32) of each sequence's keys in the
        packed key and value [Tk, Hkv, F]; null otherwise (the queries'
        offsets are getSequenceOffsets; a draft tree over packed keys has
        none: its queries stay [B, H, T, D]).
      }],
      "::mlir::Value", "getKeyOffsets", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        With a state pool [N, Hv, Dk, Dv] as the state input: the pool slot
        of each sequence, `state_indices [B]` (i32); null otherwise.
      }],
      "::mlir::Value", "getStateSlots", (ins), [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        Steps per chunk of the chunked form of a recurrence; 0 otherwise.
      }],
      "int64_t", "getStepChunkSize", (ins), [{}], [{ return 0; }]>,
    InterfaceMethod<[{
        Whether each query and key vector is divided by its L2 norm before
        anything else.
      }],
      "bool", "getNormalizesQueryKey", (ins), [{}], [{ return false; }]>,
    InterfaceMethod<"The epilogue applied to each output row.",
      "::mlir::attn::Epilogue", "getEpilogue", (ins), [{}],
      [{ return ::mlir::attn::Epilogue::None; }]>,
    InterfaceMethod<[{
        The operands the epilogue reads: the gate logits (`SigmoidGate`);
        `z` and the weight `w` (`RmsNormSiluGate`); none otherwise.
      }],
      "::llvm::SmallVector<::mlir::Value>", "getEpilogueOperands", (ins),
      [{}], [{ return {}; }]>,
    InterfaceMethod<[{
        The epsilon of a normalizing epilogue (`RmsNormSiluGate`); 0 otherwise.
      }],
      "double", "getEpilogueEpsilon", (ins), [{}], [{ return 0.0; }]>,
    InterfaceMethod<[{
        The activation of z in an rmsnorm gate (`RmsNormSiluGate`: silu or
        sigmoid); silu otherwise.
      }],
      "::mlir::attn::GateActivation", "getEpilogueActivation", (ins), [{}],
      [{ return ::mlir::attn::GateActivation::Silu; }]>,
    InterfaceMethod<[{
        Builds, at the rewriter's insertion point, this op with `epilogue`
        (whose input is this op's output) applied to each output row before
        it is stored, so no second pass reads the output. The new op has the
        same results in the same order, its output being the epilogue's
        result. Fails, building nothing, when the op already has an epilogue
        or cannot apply this kind.
      }],
      "::mlir::FailureOr<::mlir::Operation *>", "fuseEpilogue",
      (ins "::mlir::RewriterBase &":$rewriter,
           "::mlir::attn::EpilogueOpInterface":$epilogue), [{}],
      [{ return ::mlir::failure(); }]>
  ];
}

#endif // ATTN_INTERFACES_TD
