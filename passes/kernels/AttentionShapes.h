//===- AttentionShapes.h - What both targets' kernels share -----*- C++ -*-===//
//
// The static facts a kernel is specialized on, read from an
// AttentionOpInterface op, and the conventions the CPU and CUDA kernels of
// one op share: which part of a tree's keys a kernel attends to, the tile
// classes of a block mask, the arguments of a split-KV merge and of a
// recurrence kernel.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_KERNELS_ATTENTIONSHAPES_H
#define ATTN_PASSES_KERNELS_ATTENTIONSHAPES_H

#include "Attn/AttnOps.h"
#include "passes/kernels/KernelEmitter.h"
#include "passes/kernels/VariantRegions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <array>

namespace mlir::attn {

/// Whether `mask` hides the keys before a first key that depends on the
/// query's position (sliding_window, chunked; see firstVisibleKey).
inline bool masksEarlyKeys(MaskKind mask) {
  return mask == MaskKind::SlidingWindow || mask == MaskKind::Chunked;
}

/// The static facts a softmax-attention kernel is specialized on, read from
/// an AttentionOpInterface op.
struct SoftmaxAttentionShape {
  int64_t numHeads = 0, numKvHeads = 0, headDim = 0, valueDim = 0;
  /// Keys and values in a paged cache of pages of this many keys (SPEC
  /// §8): the kernels bind the page table and the key lengths after v.
  /// 0: [B, Hkv, Lk, F].
  int64_t pageSize = 0;
  bool paged() const { return pageSize > 0; }
  /// A ragged batch (SPEC §8): q, gate, o and lse packed token-major
  /// [T, H, F] with the queries' offsets, and the keys too ([Tk, Hkv, F]
  /// with their own offsets) unless paged. Work is planned over the real
  /// lengths: the kernels bind the offsets and their part of the plan
  /// after the keys (see RaggedPlan).
  bool ragged = false;
  /// Keys and values packed [Tk, Hkv, F] with their offsets: in a ragged
  /// batch unless paged, and under a draft tree of T nodes per sequence,
  /// whose queries stay [B, H, T, D].
  bool keysPacked = false;
  bool packedKeys() const { return keysPacked; }
  double scale = 1.0, softcap = 0.0;
  MaskKind mask = MaskKind::None;
  int64_t window = 0;
  /// None, or a sigmoid gate that is elementwise (gate dim 3 == Dv) or
  /// headwise (gate dim 3 == 1).
  Epilogue epilogue = Epilogue::None;
  bool headwiseGate = false;
  bool withLogSumExp = false;
  /// Attention sinks [H] (a logit per query head in each row's softmax
  /// denominator): the kernels that end rows bind them after the gate.
  bool withSinks = false;
  /// Dense, or the keys of selected blocks (sparse_sdpa, with their size),
  /// or a draft tree's (tree_sdpa).
  KeySelectionKind selection = KeySelectionKind::Dense;
  int64_t selectionBlockSize = 0;
  /// The op's score_mod and mask_mod (SPEC §7) and the tensors they read,
  /// which every kernel that scores keys binds last.
  VariantRegions variants;

  /// Whether the kernels of a tree's prefix need each node's position
  /// P + depth: for its window, or for the variant regions.
  bool treePrefixNeedsDepths() const {
    return masksEarlyKeys(mask) || !variants.empty();
  }

  /// Reads the shape of `op`, or says why the kernels of `target` ("CPU",
  /// "CUDA") cannot run it.
  static FailureOr<SoftmaxAttentionShape> get(AttentionOpInterface op,
                                              StringRef target = "CPU");
};

/// The bindings every softmax kernel that reads q, k and v starts with:
/// q, k, v, then [page table, key lengths] over a paged cache, then in a
/// ragged batch the queries' offsets, then [the keys' offsets] when packed,
/// then in a ragged batch of dense attention the kernel's part of the plan
/// (RaggedPlan).
struct SoftmaxBindings {
  Value q, k, v, pageTable, keyLengths, queryOffsets, keyOffsets, plan;

  /// Reads them from `kernel`'s arguments from `next`, which it advances.
  SoftmaxBindings(func::FuncOp kernel, const SoftmaxAttentionShape &shape,
                  unsigned &next);
  SoftmaxBindings() = default;
};

/// Where a softmax kernel reads its keys and values: rows of [B, Hkv, Lk,
/// F], of a ragged batch's packed [Tk, Hkv, F] from cu_seqlens_k[b], or of
/// a paged cache [NP, P, Hkv, F], key j of sequence b being slot j % P of
/// page page_table[b, j / P] (SPEC §8). Kernels see keys by their position
/// in the sequence, whatever the layout.
class KeyRows {
public:
  KeyRows(KernelEmitter &e, const SoftmaxAttentionShape &shape,
          const SoftmaxBindings &args);
  /// Keys `k` [B, Hkv, Lk, D], or a paged cache [NP, P, Hkv, D] with its
  /// page table and key lengths (the selections, which read no values).
  KeyRows(KernelEmitter &e, Value k, Value pageTable, Value keyLengths);

  /// The keys of sequence `batch`: dim 2 of k, the difference of its
  /// offsets, or seq_lens[batch].
  Value length(Value batch) const;
  /// The index prefix of key `j` of sequence `batch` at kv head `kvHead` in
  /// k and v, before the feature index.
  SmallVector<Value> at(Value batch, Value kvHead, Value j) const;
  /// Reads where sequence `batch` starts once, here, for the kernel's later
  /// at(batch, ...) (in its inner loops the offset's load would be
  /// repeated: LLVM cannot tell that the kernel's stores leave it alone).
  void bind(Value batch);

  /// A paged cache: its page size P (0 otherwise).
  int64_t pagedBy() const { return pageTable ? pageSize : 0; }
  /// The page that holds keys [i P, i P + P) of sequence `batch`, read
  /// from the page table (a kernel may read pages ahead of their keys).
  Value page(Value batch, Value i) const;
  /// at() for key `j` of a paged cache when its page is known.
  SmallVector<Value> atPage(Value page, Value kvHead, Value j) const;

private:
  KernelEmitter &e;
  Value k, pageTable, keyLengths, keyOffsets;
  int64_t pageSize;
  Value boundBatch, boundFirst;
};

/// Where a softmax kernel reads its queries and writes its rows (q, gate,
/// o: before the feature index; lse: the whole index): [B, H, Lq, F], or a
/// ragged batch's packed [T, H, F] from cu_seqlens_q[b].
class QueryRows {
public:
  QueryRows(KernelEmitter &e, const SoftmaxBindings &args);

  /// The query rows of sequence `batch`.
  Value length(Value batch) const;
  /// The index prefix of row `row` of sequence `batch` at head `head`.
  SmallVector<Value> at(Value batch, Value head, Value row) const;
  /// As KeyRows::bind.
  void bind(Value batch);

private:
  KernelEmitter &e;
  Value q, offsets;
  Value boundBatch, boundFirst;
};

/// A ragged batch's work (SPEC §8), planned per call over the real
/// lengths, as FlashInfer's plan/run: a one-workgroup plan kernel reads the
/// offsets (and key lengths) and lists the work of the flash, split-KV and
/// merge kernels, each an i32 table of entries [N, 4] whose first column
/// is the sequence (-1: no work; the host sizes the tables for the most
/// entries any batch of these dims can need, so workgroups past the plan
/// return at once).
///
///  * flash: (sequence, first query row of a tile of TQ rows) for the
///    sequences with more than decodeMaxQueries rows, the last tiles of
///    each sequence (the most keys under a causal mask) first;
///  * split: (sequence, query row, first key, end key) for the other
///    sequences' rows; the entry's index is its partial's;
///  * merge: (sequence, query row, first split entry, split entries).
///
/// Decode rows split their keys into ranges of at least splitKeys keys and
/// at most kMaxSplits + B ranges in all, so the partials are bounded by
/// the dims alone.
struct RaggedPlan {
  static constexpr int64_t kColumns = 4;
  static constexpr int64_t kMaxSplits = 64;
  /// The rows of a flash entry (the flash kernel's query tile).
  int64_t queryTile = 0;
  /// Sequences of 1 .. decodeMaxQueries rows decode.
  int64_t decodeMaxQueries = 0;
  /// A decode key range's least keys, and what its size is a multiple of
  /// (the CUDA decode kernel walks whole key tiles).
  int64_t splitKeys = 0, keyGranule = 1;
};

/// The steps of a ragged plan for one sequence, which a plan kernel walks
/// its sequences through: the scalar kernel (buildRaggedPlanKernel) all of
/// them in order, the CUDA one (buildSimtRaggedPlanKernel) a share per
/// thread. Built over the plan kernel's arguments: the queries' offsets,
/// the keys' offsets or (paged) key lengths, the flash, split and merge
/// tables.
class RaggedPlanner {
public:
  RaggedPlanner(KernelEmitter &e, const SoftmaxAttentionShape &shape,
                const RaggedPlan &plan, ValueRange args);

  /// The sequences of the batch.
  Value batch() const { return batchSize; }
  /// The keys of sequence `seq` when it decodes, else 0.
  Value decodeKeys(Value seq);
  /// The size of a decode key range, for all decode rows' keys
  /// `decodeKeys`: at least splitKeys keys, and large enough that they make
  /// at most kMaxSplits ranges (plus one partial range per sequence), which
  /// bounds the partials by the dims alone; a multiple of the key granule.
  Value chunkFor(Value decodeKeys);
  /// The entries sequence `seq` takes in the flash, split and merge tables.
  std::array<Value, 3> entries(Value seq, Value chunk);
  /// Writes sequence `seq`'s entries into the three tables from entries
  /// `at`, and returns how many it wrote to each.
  std::array<Value, 3> write(Value seq, Value chunk, ArrayRef<Value> at);
  /// Marks entries `from`, `from + step`, ... of table `table` (0: flash,
  /// 1: split, 2: merge) as having no work.
  void markUnused(int table, Value from, Value step);

private:
  /// A sequence's rows and keys, and the work they make.
  struct Work {
    Value rows, keys, tiles, decodeRows, splits;
  };
  Work work(Value seq, Value chunk);
  Value queriesOf(Value seq);
  Value keysOf(Value seq);
  Value decodes(Value rows);

  KernelEmitter &e;
  const SoftmaxAttentionShape &shape;
  const RaggedPlan &plan;
  Value queryOffsets, keyCounts, batchSize;
  std::array<Value, 3> tables;
};

/// The plan kernel of a ragged batch (RaggedPlan): scalar code, one
/// workgroup walking every sequence (the CPU target's). Kernel bindings:
/// the queries' offsets, the keys' offsets or (paged) key lengths, the
/// flash, split and merge tables.
func::FuncOp buildRaggedPlanKernel(OpBuilder &builder, Location loc,
                                   StringRef name,
                                   const SoftmaxAttentionShape &shape,
                                   const RaggedPlan &plan,
                                   DictionaryAttr tiling,
                                   TypeRange bindingTypes);

/// The kv heads one CPU workgroup of split-KV decode or top-k selection
/// serves: every kv head over a paged cache (a page's [P, Hkv, D] rows and
/// its [2, Hkv, D] bounds are then read front to back once, not a kv
/// head's rows at a time by Hkv workgroups), one otherwise (a kv head's
/// keys and bounds are contiguous).
inline int64_t kvHeadsPerCpuWorkgroup(bool paged, int64_t numKvHeads) {
  return paged ? numKvHeads : 1;
}
inline int64_t splitKvHeadsPerWorkgroup(const SoftmaxAttentionShape &shape) {
  return kvHeadsPerCpuWorkgroup(shape.paged(), shape.numKvHeads);
}

/// Which keys a kernel attends to and where its results go. Tree attention
/// without a window runs in two parts merged like split-KV partials: the
/// prefix, which every node sees whole (tiled like prefill by the flash
/// kernel, so K and V are read once per tile of nodes), and each node's
/// tree keys (the gathered kernel).
enum class KeyPart {
  /// The keys the op's mask (and selection) leave visible; o (gated) and
  /// [lse] are written.
  All,
  /// Keys [0, Lk - Lq), all visible (with a window: from each node's
  /// window start, which depends on its depth, so the kernel also binds
  /// the tree's parents after v); o and lse go to the first S - 1 splits of
  /// partial o [B, H, Lq, S, Dv] and partial lse [B, H, Lq, S] (the flash
  /// kernel: S = 2).
  TreePrefix,
  /// The node's own and its ancestors' keys; o and lse go to split S - 1.
  TreeNodes,
};

/// FlexAttention's block mask, for the flash kernels of an op with a
/// mask_mod: the class of each (query tile, key tile) under the mask_mod,
/// computed per call (the mask_mod may read run-time tensors, such as
/// document ids) into `tile classes` [Bm, Hm, ceil(Lq / TQ),
/// ceil(Lk / TK)] i8, where Bm is B when the mask_mod reads `b` and 1
/// otherwise, Hm likewise H or 1. The flash kernel skips empty tiles and
/// evaluates no mask_mod on full ones; its key tiles then start at
/// multiples of TK.
enum TileClass : int8_t { kEmptyTile = 0, kPartialTile = 1, kFullTile = 2 };

/// Whether the flash kernel of `shape` for `part` takes tile classes: with
/// a mask_mod, over ranges whose rows sit at their own positions (not a
/// tree's prefix, whose nodes sit at their depths).
/// The tile classes are those of one batch row's contiguous query and key
/// positions: over a paged cache or a ragged batch the flash kernel
/// evaluates the mask_mod per key instead (no empty tile skipped).
inline bool flashUsesBlockMask(const SoftmaxAttentionShape &shape,
                               KeyPart part) {
  return shape.variants.maskMod && part == KeyPart::All && !shape.paged() &&
         !shape.ragged && !shape.packedKeys();
}

/// What every target's merge kernel starts from: its arguments in binding
/// order ([queries' offsets, merge plan] in a ragged batch of dense
/// attention, partial o, partial lse, [gate], [sinks], o, [lse], workgroup)
/// and the query row it merges, `rowIndex` (by default the workgroup): row
/// fastest, then head, then batch; in a ragged batch head fastest, then the
/// plan's entry, or for sparse attention (no plan, partials [T, H, S, (Dv)])
/// the packed row, `batch` then being the token.
struct SplitKvMerge {
  Value queryOffsets, plan, partialOut, partialLse, gate, sinks, out, lse;
  Value batch, head, row;
  /// The row's partials are splits firstSplit .. firstSplit + splits - 1.
  Value firstSplit, splits;
  /// In a ragged batch, whether the plan gives the workgroup a row (merge
  /// only where it holds); null otherwise.
  Value hasRow;

  SplitKvMerge(KernelEmitter &e, func::FuncOp kernel,
               const SoftmaxAttentionShape &shape, Value rowIndex = Value());
  /// The same over `bindings` (the merge kernel's, from its first) for
  /// row `rowIndex` (the merge kernel's workgroup order).
  SplitKvMerge(KernelEmitter &e, ValueRange bindings,
               const SoftmaxAttentionShape &shape, Value rowIndex);

  /// The index of split `s`'s partial lse; partial o's is followed by the
  /// feature index.
  SmallVector<Value> partialAt(Value s) const;
  /// The index prefix of the row in gate and o (before the feature index)
  /// and its index in lse.
  SmallVector<Value> rowAt() const;
  /// The largest partial lse of the row made safe to exponentiate against
  /// (KernelEmitter::safeMax: 0 for a row whose ranges are all empty).
  Value maxLse() const;
  /// The row's attention sink (null without sinks).
  Value sink() const;

private:
  KernelEmitter &e;
  bool ragged, planned;
};

/// The static facts a recurrence kernel is specialized on.
struct LinearRecurrenceShape {
  RecurrenceRule rule = RecurrenceRule::Linear;
  int64_t numKeyHeads = 0, numValueHeads = 0, keyDim = 0, valueDim = 0;
  int64_t chunkSize = 64;
  double scale = 1.0;
  bool normalizeQueryKey = false;
  /// The rmsnorm-silu output gate, fused into the kernels' epilogue.
  bool rmsNormGate = false;
  /// attn.tree_recurrence (SPEC §10): the steps are a draft tree's nodes,
  /// `parents` is bound after beta, there is no final state, and
  /// `chunkSize` is the most nodes (the whole tree is one chunk).
  bool tree = false;
  /// A ragged batch (SPEC §8): per-step tensors packed token-major
  /// [T, H, ...] with `cu_seqlens`, bound after the pool slots.
  bool ragged = false;
  /// The states a pool [N, Hv, Dk, Dv] indexed by the sequences' slots
  /// (bound after the pool): in a ragged batch, or for batch rows [B, H,
  /// L, ...] with `pool(...)`.
  bool pooled = false;
  double gateEpsilon = 0.0;
  /// The gate's activation of z: silu, or sigmoid.
  GateActivation gateActivation = GateActivation::Silu;

  /// A scalar log-decay per step (decay, gated_delta).
  bool scalarDecay() const { return hasScalarDecay(rule); }
  /// A log-decay per step and key feature (gla, kda).
  bool featureDecay() const { return hasFeatureDecay(rule); }
  bool hasDecay() const { return scalarDecay() || featureDecay(); }
  /// A delta rule: a write strength per step and the WY / UT form.
  bool isDelta() const { return isDeltaRule(rule); }

  /// Value features padded to whole vectors of `width` lanes.
  int64_t paddedValueDim(int64_t width) const {
    return roundUp(valueDim, width);
  }
  /// The column tiles of the state for workgroups that share a value head,
  /// widest first: the padded Dv split in 2, 3, ... equal tiles of whole
  /// vectors, down to `tiling.stateColumns` columns.
  SmallVector<int64_t> stateColumnTiles(const CpuTiling &tiling) const;
  /// Multiply-adds of one chunk of the chunked kernel for a workgroup that
  /// owns `columns` state columns: the part that depends only on q, k and
  /// the gates (every column tile repeats it) plus the part per column.
  int64_t chunkWork(int64_t columns) const;

  /// Reads the shape of `op`, or says why the kernels of `target` ("CPU",
  /// "CUDA") cannot run it.
  static FailureOr<LinearRecurrenceShape> get(AttentionOpInterface op,
                                              StringRef target = "CPU");
};

/// An rmsnorm output gate (attn.rmsnorm_gate) as the gate kernels of both
/// targets take it, over o and z [B, H, L, Dv] or packed [T, H, Dv]: each
/// group of `groupFeatures` of a token's H * Dv features (whole heads or
/// part of one) normalized, weighted and gated. The kernels work by rows:
/// a row is the head vectors one group spans (one head vector where groups
/// are within a head), so it holds groupsPerRow() groups.
struct RmsNormGateShape {
  int64_t heads = 0, headFeatures = 0, groupFeatures = 0;
  bool packed = false;
  /// Normalize o, then gate (Qwen3-Next), or normalize o act(z) (Mamba2).
  bool normBeforeGate = true;
  /// A weight per feature of the token ([H * Dv]), else per head's ([Dv]).
  bool weightPerToken = false;
  /// Mamba2's skip: o + d[h] x normalized in place of o (x and d bound
  /// after the weight).
  bool skip = false;
  GateActivation activation = GateActivation::Silu;
  double epsilon = 0.0;

  /// Head vectors in a row, and groups in a row.
  int64_t headsPerRow() const {
    return std::max<int64_t>(1, groupFeatures / headFeatures);
  }
  int64_t groupsPerRow() const {
    return std::max<int64_t>(1, headFeatures / groupFeatures);
  }
  int64_t rowFeatures() const { return headFeatures * headsPerRow(); }
  /// Rows per token.
  int64_t rowsPerToken() const { return heads / headsPerRow(); }

  static RmsNormGateShape get(RmsNormGateOp op);
  /// A recurrence's gate: per head, normalized first, a weight per head's
  /// feature.
  static RmsNormGateShape get(const LinearRecurrenceShape &shape);
};

/// attn.gate on its own (where no softmax attention took it into its
/// epilogue): (o + d[h] x) act(gate) per element of [B, H, L, Dv] or
/// packed [T, H, Dv] rows, the gate elementwise or one logit per head
/// vector. Bindings: o, gate, [x, d], result.
struct OutputGateShape {
  int64_t heads = 0, headFeatures = 0;
  bool packed = false;
  /// One gate logit per head vector ([.., 1]), else one per feature.
  bool headwise = false;
  /// Mamba2's skip: o + d[h] x gated in place of o.
  bool skip = false;
  GateActivation activation = GateActivation::Sigmoid;

  static OutputGateShape get(GateOp op);
};

/// A recurrence kernel's arguments, in binding order (below).
struct RecurrenceBindings {
  Value q, k, v, g, beta, parents, initialState, slots, offsets, z, w, out,
      finalState, workgroup;

  RecurrenceBindings(func::FuncOp func, const LinearRecurrenceShape &shape)
      : RecurrenceBindings(ValueRange(func.getArguments()), shape) {}
  /// The same over a dispatch's bindings (which have no workgroup: it is
  /// then the last binding, and meaningless).
  RecurrenceBindings(ValueRange args, const LinearRecurrenceShape &shape) {
    unsigned next = 0;
    q = args[next++];
    k = args[next++];
    v = args[next++];
    if (shape.hasDecay())
      g = args[next++];
    if (shape.isDelta())
      beta = args[next++];
    if (shape.tree)
      parents = args[next++];
    initialState = args[next++];
    if (shape.pooled)
      slots = args[next++];
    if (shape.ragged)
      offsets = args[next++];
    if (shape.rmsNormGate) {
      z = args[next++];
      w = args[next++];
    }
    out = args[next++];
    if (!shape.tree)
      finalState = args[next++];
    workgroup = args.back();
  }
};

/// Where one sequence's steps and state are, for the kernels of a
/// recurrence: per batch row (steps [B, H, L, ...], state [B, Hv, Dk, Dv])
/// or, in a ragged batch, packed token-major from `cu_seqlens[b]` (steps
/// [T, H, ...]); with a pool the state is in slot `state_indices[b]`
/// (whose update goes back to the same slot: the pool is updated in
/// place).
class RecurrenceSequence {
public:
  RecurrenceSequence(KernelEmitter &e, const LinearRecurrenceShape &shape,
                     const RecurrenceBindings &args, Value batch);

  /// The sequence's steps.
  Value length;
  /// The index prefix of step `t`'s row at `head` in a per-step tensor
  /// (q, k, v, g, beta, z, o), before its feature index, if any.
  SmallVector<Value> step(Value head, Value t) const;
  /// The index prefix of the state at value head `head`, before its
  /// [Dk, Dv] indices.
  SmallVector<Value> state(Value head) const;
  /// The index of feature `f` of step `t`'s row at `head`.
  SmallVector<Value> stepFeature(Value head, Value t, Value f) const {
    SmallVector<Value> at = step(head, t);
    at.push_back(f);
    return at;
  }
  /// The index of state element [i, column] at value head `head`.
  SmallVector<Value> stateElement(Value head, Value i, Value column) const {
    SmallVector<Value> at = state(head);
    at.append({i, column});
    return at;
  }

private:
  KernelEmitter &e;
  Value batch;
  /// The first token (ragged) and the pool slot (pooled); null otherwise.
  Value first, slot;
};

} // namespace mlir::attn

#endif // ATTN_PASSES_KERNELS_ATTENTIONSHAPES_H
