//===- AttnOps.td - Ops of the attn dialect ----------------*- tablegen -*-===//
//
// One op per computation of SPEC §1-2. Every op is on ranked tensors, infers
// its result types from its operands, and has a verifier that names the
// operand and the expected and actual value of whatever is wrong.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_OPS_TD
#define ATTN_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "AttnDialect.td"
include "AttnAttrs.td"
include "AttnInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints and shared pieces
//===----------------------------------------------------------------------===//

/// Storage types of activations; arithmetic always accumulates in f32.
def Attn_FloatTensor : RankedTensorOf<[F32, F16, BF16]>;
def Attn_F32Tensor : RankedTensorOf<[F32]>;
def Attn_I32Tensor : RankedTensorOf<[I32]>;

/// Options shared by the softmax-attention ops: the score modifier and the
/// optional log-sum-exp result.
defvar Attn_ScoreModifierAttrs = (ins
  OptionalAttr<F64Attr>:$scale,
  DefaultValuedAttr<F64Attr, "0.0">:$softcap,
  UnitAttr:$return_lse
);

class Attn_PureOp<string mnemonic, list<Trait> traits = []>
    : Attn_Op<mnemonic, !listconcat([Pure, InferTypeOpAdaptor], traits)> {
  let hasVerifier = 1;
}

defvar Attn_AttentionInterfaceMethods = [
  "getLogSumExp", "getPositionMask", "getScoreScale",
  "getScoreSoftcap", "getScoreModifier", "getMaskModifier",
  "getAttentionSinks", "getEpilogue", "getEpilogueOperands", "fuseEpilogue"];

/// The user-defined variant of a softmax-attention op (SPEC §7), as
/// FlexAttention's `score_mod` and `mask_mod` functions: each region is
/// empty or one block of pure scalar code ending in `attn.yield`.
///   score_mod (s: f32, b: index, h: index, qp: index, kp: index) -> f32
///   mask_mod (b: index, h: index, qp: index, kp: index) -> i1
defvar Attn_VariantRegions = (region
  MaxSizedRegion<1>:$score_mod,
  MaxSizedRegion<1>:$mask_mod);

/// How the variant regions print: after the types, each behind its keyword.
defvar Attn_VariantRegionsFormat = [{
  (`score_mod` $score_mod^)? (`mask_mod` $mask_mod^)?
}];

/// What the three softmax-attention ops' descriptions say of the regions.
defvar Attn_VariantRegionsDoc = [{

    Optional regions state a variant without C++ (SPEC §7). `score_mod`
    receives the score `s` (after `scale` and `softcap`), the batch `b`, the
    query head `h`, the query position `qp` and the key position `kp`, and
    yields the score to use; `mask_mod` receives `b, h, qp, kp` and yields
    whether the key stays visible (on top of the op's own rules). Both hold
    only `arith`, `math` and `tensor.extract` ops on scalars and may read
    tensors defined above them; every kernel of every target inlines them.

    ```mlir
    %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
        : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
        score_mod {
        ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
          %d = arith.subi %kp, %qp : index
          %di = arith.index_cast %d : index to i32
          %df = arith.sitofp %di : i32 to f32
          %c = arith.constant 0.0625 : f32
          %bias = arith.mulf %df, %c : f32
          %r = arith.addf %s, %bias : f32
          attn.yield %r : f32
        }
        mask_mod {
        ^bb0(%b: index, %h: index, %qp: index, %kp: index):
          %dq = tensor.extract %doc[%b, %qp] : tensor<?x?xi32>
          %dk = tensor.extract %doc[%b, %kp] : tensor<?x?xi32>
          %same = arith.cmpi eq, %dq, %dk : i32
          attn.yield %same : i1
        }
    ```
}];

//===----------------------------------------------------------------------===//
// §1.1 Dense attention and §1.2 its output gate
//===----------------------------------------------------------------------===//

def Attn_SdpaOp : Attn_PureOp<"sdpa", [
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<OpAsmOpInterface,
        ["getAsmResultNames", "getAsmBlockArgumentNames"]>,
    DeclareOpInterfaceMethods<Attn_AttentionOpInterface,
        !listconcat(Attn_AttentionInterfaceMethods,
                    ["getKeyPageTable", "getKeyLengths",
                     "getSequenceOffsets", "getKeyOffsets"])>]> {
  let summary = "dense softmax attention with mask, softcap, GQA and gate";
  let description = !strconcat([{
    `o[i] = sum_j softmax_j(s[i, :]) * v[j]` over the keys that `mask` leaves
    visible to row `i`, with `s[i, j] = scale * dot(q[i], k[j])` (`scale`
    defaults to `1/sqrt(D)`), softcapped to `c * tanh(s / c)` when
    `softcap = c > 0`. Query head `h` reads key/value head `h / (H / Hkv)`.
    A row that sees no key is 0. The optional `gate` operand is the sigmoid
    output gate applied in the epilogue: `o * sigmoid(gate)`, `gate` being
    `[B, H, Lq, Dv]` (elementwise) or `[B, H, Lq, 1]` (headwise). With
    `return_lse`, a second result holds the log-sum-exp of each row's visible
    scores (`-inf` for an empty row).

    With `sinks(%sinks)` (f32 `[H]`), query head `h` has an attention sink
    (gpt-oss; StreamingLLM's sink token as a learned logit): a logit
    `sinks[h]` that joins each row's softmax denominator and carries no
    value, `o[i] = sum_j exp(s[i, j]) v[j] / (exp(sinks[h]) +
    sum_j exp(s[i, j]))`. It acts as one more visible key whose value is 0:
    `lse` counts it, a row that sees no key is still 0 (its `lse` is
    `sinks[h]`), and `-inf` is no sink.

    Operands: `query [B, H, Lq, D]`, `key [B, Hkv, Lk, D]`,
    `value [B, Hkv, Lk, Dv]`. Results: `output [B, H, Lq, Dv]` and, with
    `return_lse`, `lse [B, H, Lq]` (f32).

    With `paged(%page_table, %seq_lens)` (SPEC §8) the keys and values live
    in a paged cache, `key [NP, P, Hkv, D]` and `value [NP, P, Hkv, Dv]`:
    sequence `b` has `seq_lens[b]` keys (i32 `[B]`), key `j` being slot
    `j % P` of page `page_table[b, j / P]` (i32 `[B, MP]`), and its query
    `i` sits at position `seq_lens[b] - Lq + i`.

    With `ragged(%cu_seqlens_q, %cu_seqlens_k)` (SPEC §8) the batch is
    packed token-major: `query [T, H, D]`, `gate [T, H, Dv or 1]`,
    `output [T, H, Dv]`, `lse [T, H]`, sequence `b` owning rows
    `cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1` (i32 `[B+1]`), and likewise
    `key [Tk, Hkv, D]`, `value [Tk, Hkv, Dv]` with `cu_seqlens_k`. With a
    paged cache, `ragged(%cu_seqlens_q)` alone: the keys are the cache's.
    Query `i` of sequence `b` sits at position `Lk_b - Lq_b + i`.

    ```mlir
    %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
        : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
    %o2, %lse = attn.sdpa %q, %k, %v gate(%g)
        {mask = #attn.mask<sliding_window = 128>, softcap = 30.0, return_lse}
        : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
          tensor<?x8x?x64xf32>
    ```
  }], Attn_VariantRegionsDoc);
  let arguments = !con((ins
    Attn_FloatTensor:$query,
    Attn_FloatTensor:$key,
    Attn_FloatTensor:$value,
    Optional<Attn_FloatTensor>:$gate,
    Optional<Attn_F32Tensor>:$sinks,
    Optional<Attn_I32Tensor>:$page_table,
    Optional<Attn_I32Tensor>:$seq_lens,
    Optional<Attn_I32Tensor>:$cu_seqlens_q,
    Optional<Attn_I32Tensor>:$cu_seqlens_k,
    Attn_MaskAttr:$mask), Attn_ScoreModifierAttrs);
  let results = (outs Attn_FloatTensor:$output, Optional<Attn_F32Tensor>:$lse);
  let regions = Attn_VariantRegions;
  let assemblyFormat = !strconcat([{
    $query `,` $key `,` $value (`gate` `(` $gate^ `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`paged` `(` $page_table^ `,` $seq_lens `:` type($page_table) `,`
       type($seq_lens) `)`)?
    (`ragged` `(` $cu_seqlens_q^ (`,` $cu_seqlens_k^)? `:`
       type($cu_seqlens_q) (`,` type($cu_seqlens_k)^)? `)`)? attr-dict `:`
    type($query) `,` type($key) `,` type($value) (`,` type($gate)^)?
  }], Attn_VariantRegionsFormat);
  let hasRegionVerifier = 1;
  let hasCanonicalizer = 1;
}

def Attn_GateOp : Attn_PureOp<"gate", [SameOperandsElementType,
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Attn_EpilogueOpInterface>]> {
  let summary = "output gate: output * sigmoid(gate)";
  let description = [{
    The output gate of Gated Attention: `result = output * sigmoid(gate)`.
    `gate` is `[B, H, L, Dv]` (elementwise, the paper's G1 variant) or
    `[B, H, L, 1]` (headwise, broadcast over `Dv`); a ragged batch's packed
    `[T, H, Dv]` and `[T, H, 1]` likewise. Fusion folds this op into the
    epilogue of the softmax attention that produces `output`.

    Beyond SPEC, for the Mamba2 mixers that gate without a norm (Falcon-H1's
    released checkpoints, `mamba_rms_norm = false`): `activation = silu`
    gates by `silu(gate)`, and `skip(%x, %d)` adds Mamba2's skip first,
    `result = (output + d[h] x) * act(gate)`, with `x` shaped as `output`
    and `d [H]`. These forms run as a kernel of their own after the
    recurrence; no attention takes them into its epilogue.

    ```mlir
    %r = attn.gate %o, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x1xf32>
    %y = attn.gate %o, %z skip(%x, %d : tensor<?x24x?x64xf32>,
        tensor<24xf32>) {activation = #attn.gate_activation<silu>}
        : tensor<?x24x?x64xf32>, tensor<?x24x?x64xf32>
    ```
  }];
  let arguments = (ins Attn_FloatTensor:$output, Attn_FloatTensor:$gate,
                       Optional<Attn_FloatTensor>:$skip_input,
                       Optional<Attn_FloatTensor>:$skip_scale,
                       DefaultValuedAttr<Attn_GateActivationAttr,
                           "::mlir::attn::GateActivation::Sigmoid">:$activation);
  let results = (outs Attn_FloatTensor:$result);
  let assemblyFormat = [{
    $output `,` $gate
    (`skip` `(` $skip_input^ `,` $skip_scale `:` type($skip_input) `,`
      type($skip_scale) `)`)?
    attr-dict `:` type($output) `,` type($gate)
  }];
  let builders = [
    // SPEC §1.2's gate: sigmoid, no skip.
    OpBuilder<(ins "::mlir::Value":$output, "::mlir::Value":$gate), [{
      build($_builder, $_state, output, gate, ::mlir::Value(),
            ::mlir::Value(), ::mlir::attn::GateActivation::Sigmoid);
    }]>
  ];
  let extraClassDeclaration = [{
    /// Whether this is SPEC §1.2's gate, the one softmax attention fuses:
    /// sigmoid, no skip.
    bool isAttentionGate();
  }];
}

//===----------------------------------------------------------------------===//
// §1.3 Sparsity budgets
//===----------------------------------------------------------------------===//

def Attn_BlockMetaOp : Attn_PureOp<"block_meta", [AttrSizedOperandSegments]> {
  let summary = "Quest block metadata: channel-wise min and max of key blocks";
  let description = [{
    Cuts the keys into blocks of `block_size` tokens (the last one may be
    partial) and returns `kmeta [B, Hkv, NB, 2, D]`, `NB = ceil(Lk /
    block_size)`, with `kmeta[.., b, 0, :]` the channel-wise minimum and
    `kmeta[.., b, 1, :]` the channel-wise maximum of the keys of block `b`.

    With `paged(%page_table, %seq_lens)` (SPEC §8) the keys are a paged
    cache `key [NP, P, Hkv, D]`, the blocks are its pages (`block_size =
    P`) and the result is `kmeta_pages [NP, 2, Hkv, D]`: each page's
    minimum and maximum over the slots that hold keys of a sequence (the
    first `min(P, seq_lens[b] - i * P)` slots of page `page_table[b, i]`,
    the most any sequence uses), so junk past a sequence's keys never
    loosens a bound. A page no sequence uses is summarized whole.

    ```mlir
    %meta = attn.block_meta %k {block_size = 16} : tensor<?x2x?x64xf32>
    %pages = attn.block_meta %k_cache paged(%pt, %lens
        : tensor<?x?xi32>, tensor<?xi32>) {block_size = 16}
        : tensor<?x16x2x64xf32>
    ```
  }];
  let arguments = (ins Attn_FloatTensor:$key,
    Optional<Attn_I32Tensor>:$page_table,
    Optional<Attn_I32Tensor>:$seq_lens,
    I64Attr:$block_size);
  let results = (outs Attn_FloatTensor:$meta);
  let assemblyFormat = [{
    $key (`paged` `(` $page_table^ `,` $seq_lens `:` type($page_table) `,`
       type($seq_lens) `)`)? attr-dict `:` type($key)
  }];
}

def Attn_SelectTopKOp : Attn_PureOp<"select_topk", [AttrSizedOperandSegments]> {
  let summary = "Quest top-k block selection per query head and row";
  let description = [{
    Scores every candidate key block `b` of row `i` (a block holding at
    least one key that `mask` leaves visible to `i`) by the upper bound
    `scale * sum_d max(q[i,d] * kmin[b,d], q[i,d] * kmax[b,d])`, then keeps
    the first `sink_blocks` and the last `local_blocks` candidates and fills
    up to `top_k` blocks with the highest-scoring remaining ones (ties: the
    lower block index). With fewer than `top_k` candidates, all are kept.

    `key_length` is `Lk`, which places the query rows (bottom-right
    alignment) and bounds the last block. The result
    `blocks [B, H, Lq, min(top_k, NB)]` (NB: the metadata's blocks, so a
    budget larger than the keys costs nothing) lists the kept block indices
    in ascending order, padded with -1.

    Over a paged cache, `paged(%page_table, %seq_lens)` replaces
    `key_length`: `meta` is `kmeta_pages [NP, 2, Hkv, D]` (see
    `attn.block_meta`), sequence `b` has `seq_lens[b]` keys, its block `i`
    is page `page_table[b, i]` (so `block_size` is the page size) and the
    result has `min(top_k, MP)` slots a row, listing blocks by their index
    in the sequence. With `ragged(%cu_seqlens_q)` as well, the queries are
    packed token-major `[T, H, D]` (SPEC §8) and so is the result,
    `[T, H, min(top_k, MP)]`.

    ```mlir
    %blocks = attn.select_topk %q, %meta, %lk
        {block_size = 16, top_k = 8, sink_blocks = 1, local_blocks = 1,
         mask = #attn.mask<causal>}
        : tensor<?x8x?x64xf32>, tensor<?x2x?x2x64xf32>
    ```
  }];
  let arguments = (ins
    Attn_FloatTensor:$query,
    Attn_FloatTensor:$meta,
    Optional<Index>:$key_length,
    Optional<Attn_I32Tensor>:$page_table,
    Optional<Attn_I32Tensor>:$seq_lens,
    Optional<Attn_I32Tensor>:$cu_seqlens_q,
    I64Attr:$block_size,
    I64Attr:$top_k,
    DefaultValuedAttr<I64Attr, "0">:$sink_blocks,
    DefaultValuedAttr<I64Attr, "0">:$local_blocks,
    Attn_MaskAttr:$mask,
    OptionalAttr<F64Attr>:$scale);
  let results = (outs Attn_I32Tensor:$blocks);
  let assemblyFormat = [{
    $query `,` $meta (`,` $key_length^)?
    (`paged` `(` $page_table^ `,` $seq_lens `:` type($page_table) `,`
       type($seq_lens) `)`)? (`ragged` `(` $cu_seqlens_q^ `:` type($cu_seqlens_q) `)`)? attr-dict `:` type($query) `,` type($meta)
  }];
}

def Attn_SelectTopPOp : Attn_PureOp<"select_topp", [AttrSizedOperandSegments]> {
  let summary = "Twilight top-p token selection per query head and row";
  let description = [{
    The candidates of row `i` are the keys visible to it under `mask`, or,
    when `blocks` (a top-k block selection of `block_size`-token blocks) is
    given, the visible keys of the selected blocks. Their weights
    `w_j = softmax_j(s[i, j])` are estimated from the scores `s` (scaled and
    softcapped as in `attn.sdpa`; `estimator = exact` uses the exact
    scores, `estimator = int4` the scores of the keys as a 4-bit key cache
    holds them: each key's channels rounded to 16 levels between its lowest
    and highest channel, `lo + floor((x - lo) * 15 / (hi - lo) + 0.5) *
    (hi - lo) / 15`). Tokens are sorted by weight, descending (ties: the lower index),
    and the shortest prefix whose sum reaches `top_p` is kept, its length
    clamped to `[min_tokens, max_tokens]` (and to the number of candidates).

    The result `tokens [B, H, Lq, N]` lists the kept key indices in
    ascending order padded with -1; `N` is `max_tokens` when given, else
    `Lk`.

    With `paged(%page_table, %seq_lens)` the keys are a paged cache
    `key [NP, P, Hkv, D]` as in `attn.sdpa`; indices are positions in the
    sequence and `N` defaults to the table's capacity `MP * P`; with
    `ragged(%cu_seqlens_q)` too the queries and the result are packed
    token-major, `[T, H, D]` and `[T, H, N]`.

    ```mlir
    %tokens = attn.select_topp %q, %k blocks(%blocks)
        {top_p = 0.95, min_tokens = 16, max_tokens = 1024, block_size = 16,
         mask = #attn.mask<causal>}
        : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x8x?x8xi32>
    ```
  }];
  let arguments = (ins
    Attn_FloatTensor:$query,
    Attn_FloatTensor:$key,
    Optional<Attn_I32Tensor>:$page_table,
    Optional<Attn_I32Tensor>:$seq_lens,
    Optional<Attn_I32Tensor>:$cu_seqlens_q,
    Optional<Attn_I32Tensor>:$blocks,
    F64Attr:$top_p,
    DefaultValuedAttr<I64Attr, "0">:$min_tokens,
    OptionalAttr<I64Attr>:$max_tokens,
    OptionalAttr<I64Attr>:$block_size,
    DefaultValuedAttr<Attn_SelectionEstimatorAttr,
                      "::mlir::attn::SelectionEstimator::Exact">:$estimator,
    Attn_MaskAttr:$mask,
    OptionalAttr<F64Attr>:$scale,
    DefaultValuedAttr<F64Attr, "0.0">:$softcap);
  let results = (outs Attn_I32Tensor:$tokens);
  let assemblyFormat = [{
    $query `,` $key (`paged` `(` $page_table^ `,` $seq_lens `:` type($page_table) `,`
       type($seq_lens) `)`)? (`ragged` `(` $cu_seqlens_q^ `:` type($cu_seqlens_q) `)`)?
    (`blocks` `(` $blocks^ `)`)? attr-dict `:`
    type($query) `,` type($key) (`,` type($blocks)^)?
  }];
}

def Attn_SparseSdpaOp : Attn_PureOp<"sparse_sdpa", [
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<OpAsmOpInterface,
        ["getAsmResultNames", "getAsmBlockArgumentNames"]>,
    DeclareOpInterfaceMethods<Attn_AttentionOpInterface,
        !listconcat(Attn_AttentionInterfaceMethods,
                    ["getKeySelectionKind", "getKeySelection",
                     "getSelectionBlockSize", "getKeyPageTable",
                     "getKeyLengths", "getSequenceOffsets"])>]> {
  let summary = "softmax attention over a block or token selection";
  let description = !strconcat([{
    `attn.sdpa` restricted, for each head and row, to the visible keys of the
    selected blocks: key `j` is seen by row `i` iff `mask` leaves it visible
    and `j / block_size` is listed in `selection[b, h, i, :]` (-1 entries and
    repeats are ignored). A token selection is a selection of 1-token
    blocks. Operands and results are those of `attn.sdpa` (sinks
    included) plus `selection [B, H, Lq, N]` (i32), whose entries count blocks (or
    tokens) by their position in the sequence; `paged(%page_table,
    %seq_lens)` reads the keys and values from a paged cache as in
    `attn.sdpa`, and `ragged(%cu_seqlens_q)` packs the rows token-major
    (`query`, `gate`, `output`, `lse` and `selection [T, H, N]`).

    ```mlir
    %o = attn.sparse_sdpa %q, %k, %v, %blocks
        {block_size = 16, mask = #attn.mask<causal>}
        : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
          tensor<?x8x?x8xi32>
    ```
  }], Attn_VariantRegionsDoc);
  let arguments = !con((ins
    Attn_FloatTensor:$query,
    Attn_FloatTensor:$key,
    Attn_FloatTensor:$value,
    Attn_I32Tensor:$selection,
    Optional<Attn_FloatTensor>:$gate,
    Optional<Attn_F32Tensor>:$sinks,
    Optional<Attn_I32Tensor>:$page_table,
    Optional<Attn_I32Tensor>:$seq_lens,
    Optional<Attn_I32Tensor>:$cu_seqlens_q,
    I64Attr:$block_size,
    Attn_MaskAttr:$mask), Attn_ScoreModifierAttrs);
  let results = (outs Attn_FloatTensor:$output, Optional<Attn_F32Tensor>:$lse);
  let regions = Attn_VariantRegions;
  let assemblyFormat = !strconcat([{
    $query `,` $key `,` $value `,` $selection (`gate` `(` $gate^ `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`paged` `(` $page_table^ `,` $seq_lens `:` type($page_table) `,`
       type($seq_lens) `)`)? (`ragged` `(` $cu_seqlens_q^ `:` type($cu_seqlens_q) `)`)? attr-dict `:` type($query) `,` type($key) `,` type($value) `,`
    type($selection) (`,` type($gate)^)?
  }], Attn_VariantRegionsFormat);
  let hasRegionVerifier = 1;
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// §1.4 Speculative verification trees
//===----------------------------------------------------------------------===//

def Attn_TreeSdpaOp : Attn_PureOp<"tree_sdpa", [
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<OpAsmOpInterface,
        ["getAsmResultNames", "getAsmBlockArgumentNames"]>,
    DeclareOpInterfaceMethods<Attn_AttentionOpInterface,
        !listconcat(Attn_AttentionInterfaceMethods,
                    ["getKeySelectionKind", "getKeySelection",
                     "getKeyPageTable", "getKeyLengths", "getKeyOffsets"])>]> {
  let summary = "softmax attention of a draft tree over prefix + tree keys";
  let description = !strconcat([{
    The queries are the `T` nodes of a draft tree given by
    `parents [B, T]` (i32; `parents[b, 0] = -1`, `0 <= parents[b, t] < t`).
    Keys and values hold the committed prefix of `P` tokens followed by the
    tree tokens: `key [B, Hkv, P + T, D]`. Node `t` sees every prefix key and
    tree key `P + u` iff `u` is `t` or an ancestor of `t`. Node `t` sits at
    absolute position `P + depth(t)` and tree key `P + u` at `P + depth(u)`;
    with `window = W` a key is also hidden unless its position is above
    `position(t) - W`, and with `chunk = C` (Llama 4's chunked mask) unless
    its position is in the chunk of `position(t)` (`pos / C` equal). Score
    modifier, sinks, gate and `lse` are those of `attn.sdpa`. No `T x T` mask is materialized.

    ```mlir
    %o = attn.tree_sdpa %q, %k, %v, %parents
        : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
          tensor<?x?xi32>
    ```

    In the regions, `qp` is the node's position `P + depth(t)` and `kp` the
    key's: `j` for a prefix key, `P + depth(u)` for tree key `P + u`.

    With `paged(%page_table, %seq_lens)` (SPEC §8) the keys and values are
    a paged cache as for `attn.sdpa`: sequence `b`'s `seq_lens[b]` keys are
    its prefix followed by its `T` tree keys (the last `T`).

    With `packed(%cu_seqlens_k)` the keys and values of a ragged batch
    (SPEC §8) are packed token-major, `key [Tk, Hkv, D]` and `value [Tk,
    Hkv, Dv]`, sequence `b` owning rows `cu_seqlens_k[b] ..
    cu_seqlens_k[b+1] - 1`: its prefix followed by its `T` tree keys (the
    last `T`). The queries stay `[B, H, T, D]`: each sequence verifies a
    tree of `T` nodes.

    ```mlir
    %o = attn.tree_sdpa %q, %k, %v, %parents
        packed(%cu_seqlens_k : tensor<?xi32>)
        : tensor<?x8x?x64xf32>, tensor<?x2x64xf32>, tensor<?x2x64xf32>,
          tensor<?x?xi32>
    ```
  }], Attn_VariantRegionsDoc);
  let arguments = !con((ins
    Attn_FloatTensor:$query,
    Attn_FloatTensor:$key,
    Attn_FloatTensor:$value,
    Attn_I32Tensor:$parents,
    Optional<Attn_FloatTensor>:$gate,
    Optional<Attn_F32Tensor>:$sinks,
    Optional<Attn_I32Tensor>:$page_table,
    Optional<Attn_I32Tensor>:$seq_lens,
    Optional<Attn_I32Tensor>:$cu_seqlens_k,
    OptionalAttr<I64Attr>:$window,
    OptionalAttr<I64Attr>:$chunk), Attn_ScoreModifierAttrs);
  let results = (outs Attn_FloatTensor:$output, Optional<Attn_F32Tensor>:$lse);
  let regions = Attn_VariantRegions;
  let assemblyFormat = !strconcat([{
    $query `,` $key `,` $value `,` $parents (`gate` `(` $gate^ `)`)?
    (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`paged` `(` $page_table^ `,` $seq_lens `:` type($page_table) `,`
       type($seq_lens) `)`)?
    (`packed` `(` $cu_seqlens_k^ `:` type($cu_seqlens_k) `)`)?
    attr-dict `:` type($query) `,` type($key) `,` type($value) `,`
    type($parents) (`,` type($gate)^)?
  }], Attn_VariantRegionsFormat);
  let hasRegionVerifier = 1;
  let hasCanonicalizer = 1;
}

def Attn_YieldOp : Attn_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["SdpaOp", "SparseSdpaOp", "TreeSdpaOp"]>]> {
  let summary = "the value a variant region computes";
  let description = [{
    Ends a `score_mod` region (with the modified `f32` score) or a
    `mask_mod` region (with an `i1`: whether the key stays visible).

    ```mlir
    attn.yield %score : f32
    ```
  }];
  let arguments = (ins AnyTypeOf<[F32, I1]>:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

def Attn_TreeAcceptOp : Attn_PureOp<"tree_accept"> {
  let summary = "greedy acceptance of a draft tree";
  let description = [{
    Starting at the root, repeatedly moves to the lowest-index child `c` of
    the current node with `tokens[c] == target[current]`, and stops when
    there is none. `tokens`, `target` and `parents` are `[B, T]` (i32).
    Results: `path [B, T]` (the visited nodes starting with 0, padded with
    -1), `length [B]` (nodes on the path, root included) and
    `bonus [B] = target[last node on the path]`.

    ```mlir
    %path, %length, %bonus = attn.tree_accept %tokens, %target, %parents
        : tensor<?x?xi32>, tensor<?x?xi32>, tensor<?x?xi32>
    ```
  }];
  let arguments = (ins Attn_I32Tensor:$tokens, Attn_I32Tensor:$target,
                       Attn_I32Tensor:$parents);
  let results = (outs Attn_I32Tensor:$path, Attn_I32Tensor:$length,
                      Attn_I32Tensor:$bonus);
  let assemblyFormat = [{
    $tokens `,` $target `,` $parents attr-dict `:` type($tokens) `,`
    type($target) `,` type($parents)
  }];
}

def Attn_KvAppendOp : Attn_PureOp<"kv_append", [AttrSizedOperandSegments]> {
  let summary = "writes new key and value rows into a paged cache";
  let description = [{
    SPEC §8's `<layer>.append`: token `t` of `key [T, Hkv, D]` and
    `value [T, Hkv, Dv]` goes to flat slot `slots[t]` (i32 `[T]`: `page * P
    + offset`, `-1` skips the token) of `key_cache [NP, P, Hkv, D]` and
    `value_cache [NP, P, Hkv, Dv]`; the results are the caches with those
    rows replaced. An entry returns them as the updates of its
    `attn.in_place` cache arguments, so only the written rows are touched.
    A latent cache, whose keys' leading features are its values (a layer
    with `latent_kv`), has no value operands and one result.

    ```mlir
    %kc2, %vc2 = attn.kv_append %k, %v, %slots into %kc, %vc
        : tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?xi32>,
          tensor<?x16x2x64xf32>, tensor<?x16x2x64xf32>
    %kvc2 = attn.kv_append %kv, %slots into %kvc
        : tensor<?x1x576xf32>, tensor<?xi32>, tensor<?x64x1x576xf32>
    ```
  }];
  let arguments = (ins Attn_FloatTensor:$key,
                       Optional<Attn_FloatTensor>:$value,
                       Attn_I32Tensor:$slots, Attn_FloatTensor:$key_cache,
                       Optional<Attn_FloatTensor>:$value_cache);
  let results = (outs Attn_FloatTensor:$new_key_cache,
                      Optional<Attn_FloatTensor>:$new_value_cache);
  // The operand lists tell the two forms apart (3 or 2 before `into`),
  // which a declarative format cannot without a keyword.
  let hasCustomAssemblyFormat = 1;
}

def Attn_PageMetaUpdateOp : Attn_PureOp<"page_meta_update"> {
  let summary = "refreshes the Quest bounds of the pages an append wrote";
  let description = [{
    After `attn.kv_append` wrote token `t` to flat slot `slots[t]` (`page *
    P + offset`, `-1` skips it) of `key_cache [NP, P, Hkv, D]`, returns
    `meta [NP, 2, Hkv, D]` (the bounds `attn.block_meta` computes over a
    paged cache) with the bounds of each page that `slots` write taken
    again over its slots `0 .. o`, where `o` is the highest offset written
    to it: a sequence's keys fill a page from slot 0 in order, so that is
    the page's fill after the append, and slots past it (rows a rolled-back
    draft left) never loosen a bound. Other pages'
    bounds come out unchanged, so a serving engine's step costs what its
    new rows' pages cost, not what the cache costs. An entry returns the
    result as the update of its `attn.in_place` metadata argument.

    ```mlir
    %meta2 = attn.page_meta_update %k_cache, %slots into %meta
        : tensor<?x16x2x64xf32>, tensor<?xi32>, tensor<?x2x2x64xf32>
    ```
  }];
  let arguments = (ins Attn_FloatTensor:$key_cache, Attn_I32Tensor:$slots,
                       Attn_FloatTensor:$meta);
  let results = (outs Attn_FloatTensor:$new_meta);
  let assemblyFormat = [{
    $key_cache `,` $slots `into` $meta attr-dict `:` type($key_cache) `,`
    type($slots) `,` type($meta)
  }];
}

def Attn_KvCompactOp : Attn_PureOp<"kv_compact", [AttrSizedOperandSegments]> {
  let summary = "moves the accepted path's KV rows right after the prefix";
  let description = [{
    `key [B, Hkv, P + T, D]` and `value [B, Hkv, P + T, Dv]` come out
    unchanged except rows `P .. P + length - 1`, which hold rows
    `P + path[0 .. length - 1]` in path order. `path [B, T]` and
    `length [B]` are the results of `attn.tree_accept`; `T` is `path`'s
    second dimension. A latent cache (its keys' leading features are its
    values) has no `value` and one result.

    With `packed(%cu_seqlens_k)` the keys and values of a ragged batch are
    packed token-major (SPEC §8), `key [Tk, Hkv, D]`: sequence `b` owns
    rows `cu_seqlens_k[b] ..`, its last `T` being its tree's, and its own
    `P` is its key count less `T`.

    ```mlir
    %k2, %v2 = attn.kv_compact %k, %v, %path, %length
        : tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x?xi32>,
          tensor<?xi32>
    %kv2 = attn.kv_compact %kv, %path, %length
        : tensor<?x1x?x576xf32>, tensor<?x?xi32>, tensor<?xi32>
    %pk, %pv = attn.kv_compact %k, %v, %path, %length
        packed(%cu_seqlens_k : tensor<?xi32>)
        : tensor<?x2x64xf32>, tensor<?x2x64xf32>, tensor<?x?xi32>,
          tensor<?xi32>
    ```
  }];
  let arguments = (ins Attn_FloatTensor:$key,
                       Optional<Attn_FloatTensor>:$value,
                       Attn_I32Tensor:$path, Attn_I32Tensor:$length,
                       Optional<Attn_I32Tensor>:$cu_seqlens_k);
  let results = (outs Attn_FloatTensor:$new_key,
                      Optional<Attn_FloatTensor>:$new_value);
  // The operand count tells the two forms apart (4 or 3).
  let hasCustomAssemblyFormat = 1;
}

def Attn_PathStepsOp : Attn_PureOp<"path_steps"> {
  let summary = "the steps of an accepted path, in path order";
  let description = [{
    Per-step tensor `input [B, H, T]` or `[B, H, T, F]` (a draft tree's
    per-node inputs) comes out with step `i` holding node `path[i]` for
    `i < length`, and zeros after: `result[b, h, i] = input[b, h,
    path[b, i]]`. `path [B, T]` and `length [B]` are those of
    `attn.tree_accept`. Zero steps leave a linear recurrence's state
    unchanged under every rule (no write, no decay), so the state after an
    accepted path (SPEC §10's `.commit`) is `attn.linear_recurrence` over
    the path steps of its inputs.

    ```mlir
    %kp = attn.path_steps %k, %path, %length
        : tensor<?x4x?x64xf32>, tensor<?x?xi32>, tensor<?xi32>
    ```
  }];
  let arguments = (ins Attn_FloatTensor:$input, Attn_I32Tensor:$path,
                       Attn_I32Tensor:$length);
  let results = (outs Attn_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $path `,` $length attr-dict `:` type($input) `,` type($path)
    `,` type($length)
  }];
}

//===----------------------------------------------------------------------===//
// §2 Chunked linear recurrences
//===----------------------------------------------------------------------===//

def Attn_LinearRecurrenceOp : Attn_PureOp<"linear_recurrence", [
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Attn_AttentionOpInterface,
        ["getPositionMask", "getScoreScale", "getNormalizer",
         "getEpilogue", "getEpilogueOperands", "fuseEpilogue",
         "getRecurrenceRule", "getStepDecay", "getStepBeta", "getStateInput",
         "getStateOutput", "getStepChunkSize", "getNormalizesQueryKey",
         "getEpilogueEpsilon", "getEpilogueActivation", "getSequenceOffsets",
         "getStateSlots"]>]> {
  let summary = "linear attention as a state recurrence (linear to Gated DeltaNet)";
  let description = [{
    Per batch and value head, a state `S [Dk, Dv]` evolves from
    `initial_state` over `t = 0 .. L-1` by `rule`:

    | rule          | update                                             |
    |---------------|----------------------------------------------------|
    | `linear`      | `S = S + k_t v_t^T`                                |
    | `decay`       | `S = exp(g_t) S + k_t v_t^T`, `g_t` scalar          |
    | `gla`         | `S = diag(exp(g_t)) S + k_t v_t^T`, `g_t` in R^Dk   |
    | `delta`       | `u = beta_t (v_t - S^T k_t)`, `S = S + k_t u^T`     |
    | `gated_delta` | `S = exp(g_t) S`, then as `delta`                  |
    | `kda`         | `S = diag(exp(g_t)) S`, then as `delta`            |

    and `o_t = S^T (scale * q_t)` with the state after step `t` (`scale`
    defaults to `1/sqrt(Dk)`). With `qk_l2norm`, each `q_t` and `k_t` is
    first divided by `sqrt(sum(x^2) + 1e-6)`. Value head `j` reads query/key
    head `j / (Hv / Hk)`. `chunk_size` is the chunk length of the chunked
    form used for `L > 1`.

    Operands: `query, key [B, Hk, L, Dk]`, `value [B, Hv, L, Dv]`,
    `decay [B, Hv, L]` (`gla`, `kda`: `[B, Hv, L, Dk]`) for the gated rules,
    `beta [B, Hv, L]` for the delta rules, `initial_state [B, Hv, Dk, Dv]`
    (f32) and, once the output gate is fused, `gate_z [B, Hv, L, Dv]` and
    `gate_weight [Dv]` with `gate_eps` and `gate_activation` (see
    `attn.rmsnorm_gate`). Results:
    `output [B, Hv, L, Dv]` and `final_state [B, Hv, Dk, Dv]` (f32).

    A ragged batch (SPEC §8) packs its sequences token-major: with
    `cu_seqlens [B+1]` (i32; sequence `b` owns steps `cu_seqlens[b] ..
    cu_seqlens[b+1] - 1`), every per-step operand drops its batch dim
    (`query, key [T, Hk, Dk]`, `value [T, Hv, Dv]`, `decay [T, Hv]` or
    `[T, Hv, Dk]`, `beta [T, Hv]`, `gate_z [T, Hv, Dv]`, `output
    [T, Hv, Dv]`), and `initial_state` is a pool `[N, Hv, Dk, Dv]` with
    `state_indices [B]` (i32, distinct): sequence `b` starts from pool
    slot `state_indices[b]`, and `final_state` is the pool with those slots
    replaced by the sequences' final states (the others unchanged). The
    pool is meant to be updated in place: an entry that returns it as the
    update of an `attn.in_place` argument writes only those slots.
    `pool(%pool_indices)` keeps the per-step operands `[B, H, L, ...]` and
    takes the state from a pool the same way, batch row `b` starting from
    slot `pool_indices[b]` (a draft tree's accepted path committed into a
    serving engine's pool, SPEC §10 over §8).

    ```mlir
    %o2, %pool2 = attn.linear_recurrence gated_delta %q, %k, %v
        decay(%g : tensor<?x8xf32>) beta(%beta : tensor<?x8xf32>)
        state(%pool : tensor<?x8x64x64xf32>)
        ragged(%cu_seqlens, %state_indices : tensor<?xi32>, tensor<?xi32>)
        : tensor<?x4x64xf32>, tensor<?x4x64xf32>, tensor<?x8x64xf32>
    ```

    ```mlir
    %o, %s = attn.linear_recurrence gated_delta %q, %k, %v
        decay(%g : tensor<?x8x?xf32>) beta(%beta : tensor<?x8x?xf32>)
        state(%s0 : tensor<?x8x64x64xf32>) {chunk_size = 64, qk_l2norm}
        : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x64xf32>
    ```
  }];
  let arguments = (ins
    Attn_RecurrenceRuleAttr:$rule,
    Attn_FloatTensor:$query,
    Attn_FloatTensor:$key,
    Attn_FloatTensor:$value,
    Optional<Attn_FloatTensor>:$decay,
    Optional<Attn_FloatTensor>:$beta,
    Attn_F32Tensor:$initial_state,
    Optional<Attn_I32Tensor>:$cu_seqlens,
    Optional<Attn_I32Tensor>:$state_indices,
    Optional<Attn_I32Tensor>:$pool_indices,
    Optional<Attn_FloatTensor>:$gate_z,
    Optional<Attn_FloatTensor>:$gate_weight,
    DefaultValuedAttr<I64Attr, "64">:$chunk_size,
    OptionalAttr<F64Attr>:$scale,
    UnitAttr:$qk_l2norm,
    DefaultValuedAttr<F64Attr, "1.0e-6">:$gate_eps,
    DefaultValuedAttr<Attn_GateActivationAttr,
        "::mlir::attn::GateActivation::Silu">:$gate_activation);
  let results = (outs Attn_FloatTensor:$output, Attn_F32Tensor:$final_state);
  let assemblyFormat = [{
    custom<RuleKeyword>($rule) $query `,` $key `,` $value
    (`decay` `(` $decay^ `:` type($decay) `)`)?
    (`beta` `(` $beta^ `:` type($beta) `)`)?
    `state` `(` $initial_state `:` type($initial_state) `)`
    (`ragged` `(` $cu_seqlens^ `,` $state_indices `:` type($cu_seqlens) `,`
       type($state_indices) `)`)?
    (`pool` `(` $pool_indices^ `:` type($pool_indices) `)`)?
    (`output_gate` `(` $gate_z^ `,` $gate_weight `:` type($gate_z) `,`
       type($gate_weight) `)`)?
    attr-dict `:` type($query) `,` type($key) `,` type($value)
  }];
}

def Attn_TreeRecurrenceOp : Attn_PureOp<"tree_recurrence", [
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Attn_AttentionOpInterface,
        ["getPositionMask", "getScoreScale", "getNormalizer",
         "getEpilogue", "getEpilogueOperands", "fuseEpilogue",
         "getRecurrenceRule", "getStepDecay", "getStepBeta", "getStateInput",
         "getStepChunkSize", "getNormalizesQueryKey", "getEpilogueEpsilon",
         "getEpilogueActivation",
         "getKeySelectionKind", "getKeySelection", "getStateSlots"]>]> {
  let summary = "a linear recurrence over the nodes of a draft tree (SPEC §10)";
  let description = [{
    The tree form of `attn.linear_recurrence`: the `T` steps are the nodes
    of a draft tree given by `parents [B, T]` (i32; `parents[b, 0] = -1`,
    `0 <= parents[b, t] < t`). Node `t`'s state is `rule` applied to its
    parent's state (the root's to `initial_state`) with node `t`'s inputs,
    and `o_t = S_t^T (scale * q_t)`: running `attn.linear_recurrence` on
    each root-to-node path gives the same outputs. Operands, attributes and
    the output gate are those of `attn.linear_recurrence`, with `L = T`;
    there is no final state (the state after an accepted path is that
    path's `attn.linear_recurrence`).

    The kernels take the whole tree as one chunk of the chunked form, in
    which the ancestor relation replaces the causal mask and the decays
    are summed along each node's path; `max_nodes` bounds `T` (a larger
    tree is a run-time error).

    With `pool(%pool_indices)` the initial states come from a serving
    engine's pool `[N, Hv, Dk, Dv]` (SPEC §8): tree `b`'s root starts from
    slot `pool_indices[b]`, which the tree only reads.

    ```mlir
    %o = attn.tree_recurrence gated_delta %q, %k, %v
        decay(%g : tensor<?x8x?xf32>) beta(%beta : tensor<?x8x?xf32>)
        parents(%parents : tensor<?x?xi32>)
        state(%s0 : tensor<?x8x64x64xf32>) {qk_l2norm}
        : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x64xf32>
    ```
  }];
  let arguments = (ins
    Attn_RecurrenceRuleAttr:$rule,
    Attn_FloatTensor:$query,
    Attn_FloatTensor:$key,
    Attn_FloatTensor:$value,
    Optional<Attn_FloatTensor>:$decay,
    Optional<Attn_FloatTensor>:$beta,
    Attn_I32Tensor:$parents,
    Attn_F32Tensor:$initial_state,
    Optional<Attn_I32Tensor>:$pool_indices,
    Optional<Attn_FloatTensor>:$gate_z,
    Optional<Attn_FloatTensor>:$gate_weight,
    DefaultValuedAttr<I64Attr, "64">:$max_nodes,
    OptionalAttr<F64Attr>:$scale,
    UnitAttr:$qk_l2norm,
    DefaultValuedAttr<F64Attr, "1.0e-6">:$gate_eps,
    DefaultValuedAttr<Attn_GateActivationAttr,
        "::mlir::attn::GateActivation::Silu">:$gate_activation);
  let results = (outs Attn_FloatTensor:$output);
  let assemblyFormat = [{
    custom<RuleKeyword>($rule) $query `,` $key `,` $value
    (`decay` `(` $decay^ `:` type($decay) `)`)?
    (`beta` `(` $beta^ `:` type($beta) `)`)?
    `parents` `(` $parents `:` type($parents) `)`
    `state` `(` $initial_state `:` type($initial_state) `)`
    (`pool` `(` $pool_indices^ `:` type($pool_indices) `)`)?
    (`output_gate` `(` $gate_z^ `,` $gate_weight `:` type($gate_z) `,`
       type($gate_weight) `)`)?
    attr-dict `:` type($query) `,` type($key) `,` type($value)
  }];
}

def Attn_RmsNormGateOp : Attn_PureOp<"rmsnorm_gate", [SameOperandsElementType,
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Attn_EpilogueOpInterface>]> {
  let summary = "rmsnorm output gate (Qwen3-Next, Kimi Linear, Mamba2)";
  let description = [{
    Per head vector of `Dv` features (the default):
    `result = (output / sqrt(mean(output^2) + eps)) * weight * act(z)`, with
    `output` and `z` `[B, H, L, Dv]` (or packed `[T, H, Dv]`), `weight
    [Dv]` and `act` the `activation`: `silu` (Qwen3-Next's Gated DeltaNet;
    the default) or `sigmoid` (Kimi Linear's KDA). Fusion folds this form
    into the epilogue of the `attn.linear_recurrence` that produces
    `output`, whose `gate_activation` it becomes.

    Mamba2's gated RMSNorm (mamba_ssm's `RMSNormGated`) normalizes groups
    of features that may span heads, and may gate first:
    `group_size` features of a token's `H * Dv` (its heads' vectors one
    after another) form a group, which must be whole heads or part of one
    (a divisor of `H * Dv` that divides `Dv` or is a multiple of it);
    `norm_before_gate = false` normalizes `output * act(z)` instead of
    `output`; `weight` is `[Dv]` (shared by the heads) or `[H * Dv]` (a
    weight per feature of the token, as Mamba2's `norm.weight`). With
    `skip(%x, %d)` (`x` shaped as `output`, `d [H]`) the gate takes
    `output + d[h] x` in place of `output`: Mamba2's skip `D x`, which comes
    before its norm. A gate of any of these forms runs as its own kernel
    after the recurrence.

    ```mlir
    %r = attn.rmsnorm_gate %o, %z, %w {eps = 1.0e-6}
        : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<64xf32>
    %s = attn.rmsnorm_gate %o, %z, %w
        {activation = #attn.gate_activation<sigmoid>, eps = 1.0e-5}
        : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<64xf32>
    // Nemotron-H's: 128 heads of 64 in 8 groups, gated first, after the
    // skip D x.
    %m = attn.rmsnorm_gate %o, %z, %w skip(%x, %d : tensor<?x128x?x64xf32>,
        tensor<128xf32>) {eps = 1.0e-5, group_size = 1024,
        norm_before_gate = false}
        : tensor<?x128x?x64xf32>, tensor<?x128x?x64xf32>, tensor<8192xf32>
    ```
  }];
  let arguments = (ins Attn_FloatTensor:$output, Attn_FloatTensor:$z,
                       Attn_FloatTensor:$weight,
                       Optional<Attn_FloatTensor>:$skip_input,
                       Optional<Attn_FloatTensor>:$skip_scale,
                       DefaultValuedAttr<F64Attr, "1.0e-6">:$eps,
                       DefaultValuedAttr<Attn_GateActivationAttr,
                           "::mlir::attn::GateActivation::Silu">:$activation,
                       OptionalAttr<I64Attr>:$group_size,
                       DefaultValuedAttr<BoolAttr, "true">:$norm_before_gate);
  let results = (outs Attn_FloatTensor:$result);
  let assemblyFormat = [{
    $output `,` $z `,` $weight
    (`skip` `(` $skip_input^ `,` $skip_scale `:` type($skip_input) `,`
      type($skip_scale) `)`)?
    attr-dict `:` type($output) `,` type($z) `,` type($weight)
  }];
  let extraClassDeclaration = [{
    /// The features of a head (Dv) and of a token (H * Dv).
    int64_t getHeadFeatures();
    int64_t getTokenFeatures();
    /// The features a norm sums over: group_size, else a head's.
    int64_t getGroupFeatures();
    /// Whether this is the per-head form the recurrence kernels fuse: groups
    /// of one head, normalized before the gate, one weight for every head,
    /// no skip.
    bool isPerHeadForm();
  }];
}

#endif // ATTN_OPS_TD
