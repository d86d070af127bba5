//===- KeySelection.h - Which keys a row sees, on both targets --*- C++ -*-===//
//
// What the CPU and CUDA kernels of masks, sparsity and trees share: the
// visible key range of a mask, the walk over a draft tree's keys, SPEC
// §1.3's order and estimators of scored candidates, per-row flag buffers,
// top-p's bucketed selection, and the tree acceptance kernel (scalar code,
// the same on both targets).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_KERNELS_KEYSELECTION_H
#define ATTN_PASSES_KERNELS_KEYSELECTION_H

#include "passes/kernels/AttentionShapes.h"

namespace mlir::attn {

/// The bindings of attn.kv_append, `k, [v], slots, k_cache, [v_cache]`,
/// and of attn.kv_compact, `k, [v], path, length, [cu_seqlens_k], k',
/// [v']`, on the host or in a kernel: the rows each copies from and to (the
/// keys, then the values unless a latent cache holds both) and its index
/// tensors (slots; path, length and, for packed keys [Tk, Hkv, F], their
/// offsets).
struct KvCopyBindings {
  SmallVector<std::pair<Value, Value>, 2> copies;
  SmallVector<Value, 2> indices;

  static KvCopyBindings forAppend(ValueRange bindings);
  static KvCopyBindings forCompact(ValueRange bindings);
  /// The features a row of every copy holds in all: the sources' last dims.
  int64_t features() const;

private:
  static KvCopyBindings split(ValueRange bindings, size_t indexCount);
};

/// The (batch, head, row) of a per-row workgroup (or thread) over
/// [B, H, Lq].
struct RowOfWorkgroup {
  Value batch, head, row;
  RowOfWorkgroup(KernelEmitter &e, Value workgroup, int64_t numHeads,
                 Value rows);
};

/// The query row of a per-row workgroup of the selections and sparse
/// attention: over [B, heads, Lq] as RowOfWorkgroup, or in a ragged batch
/// (`queryOffsets` [B+1] given) over the packed [T, heads], the head
/// fastest, the token's sequence found by a binary search of the offsets.
class QueryRowOfWorkgroup {
public:
  QueryRowOfWorkgroup(KernelEmitter &e, Value workgroup, int64_t numHeads,
                      Value q, Value queryOffsets);
  /// The row `row` of sequence `batch` at head `head`.
  Value batch, head, row;
  /// The query rows of the sequence: Lq, or the difference of its offsets.
  Value rows;
  /// The index prefix of the row at head `h` in a per-row tensor (q, gate,
  /// o, lse, a selection), before its feature or slot index:
  /// [batch, h, row], or [token, h] when packed.
  SmallVector<Value> at(Value h) const;

private:
  /// The packed row, in a ragged batch; null otherwise.
  Value token;
};

/// What a block-metadata kernel bounds: the blocks of keys [B, Hkv, Lk, D]
/// (attn.block_meta), the pages of a paged cache (attn.block_meta with a
/// page table), or the pages an append wrote (attn.page_meta_update).
struct MetaLayout {
  enum Kind { Blocks, Pages, AppendedPages } kind;
  int64_t blockSize;

  static MetaLayout of(BlockMetaOp op) {
    return {op.getPageTable() ? Pages : Blocks,
            static_cast<int64_t>(op.getBlockSize())};
  }
  static MetaLayout of(PageMetaUpdateOp op) {
    return {AppendedPages,
            cast<ShapedType>(op.getKeyCache().getType()).getDimSize(1)};
  }
};

/// The block a block-metadata kernel bounds for `index`, from the kernel's
/// bindings (without the index), by its layout:
///  - Blocks: k [B, Hkv, Lk, D], meta [B, Hkv, NB, 2, D]; index = (batch,
///    kv head, block) in RowOfWorkgroup's order;
///  - Pages: k_cache [NP, P, Hkv, D], used [NP] (the slots sequences use of
///    each page, from buildPageUseKernel), kmeta_pages [NP, 2, Hkv, D];
///    index = (page, kv head), the kv head fastest; a page's keys are its
///    used slots (all P when no sequence uses it);
///  - AppendedPages: k_cache, slots [T], fill [NP], leader [NP] (from the
///    target's appended-pages kernels), kmeta_pages; index = (token, kv
///    head), the kv head fastest; the page p of slots[t] over its first
///    fill[p] slots, bounded only by its leader, the token leader[p] = t
///    (`live`).
class MetaBlock {
public:
  MetaBlock(KernelEmitter &e, Value index, const MetaLayout &layout,
            ValueRange bindings);
  /// The keys and the metadata the kernel writes.
  Value keys, meta;
  /// The block's keys [first, end).
  Value first, end;
  /// Whether the index has a block to bound (null: always).
  Value live;
  /// The index prefix of key `j` in the keys, before the feature index.
  SmallVector<Value> key(Value j) const;
  /// The index prefix of bound `which` (0: min, 1: max) in the metadata,
  /// before the feature index.
  SmallVector<Value> bound(int64_t which) const;

private:
  KernelEmitter &e;
  bool paged;
  /// (page, kv head), or (batch, kv head, block).
  Value page, head, batch, block;
};

/// Where top-k finds each row's keys and their blocks' bounds: one key
/// length for the batch (carried as dim 0 of an empty [Lk, 0] buffer) and
/// metadata [B, Hkv, NB, 2, D]; or over a paged cache (SPEC §8) each
/// sequence's seq_lens[b], its block i being page page_table[b, i] of the
/// per-page metadata [NP, 2, Hkv, D].
class SelectionKeys {
public:
  /// Reads the bindings from `args` at `next` (advanced): the carrier, or
  /// the page table and the key lengths.
  SelectionKeys(ValueRange args, unsigned &next, bool paged);
  /// The bindings, in that order.
  SmallVector<Value> bindings() const;
  /// The keys of sequence `batch`.
  Value length(KernelEmitter &e, Value batch) const;
  /// The index of bound `which` (0: min, 1: max) of block `block` of
  /// sequence `batch` at kv head `kvHead`, before the feature index.
  SmallVector<Value> bound(KernelEmitter &e, Value batch, Value kvHead,
                           Value block, Value which) const;
  /// The kv-head dim of the metadata.
  static unsigned metaHeadDim(bool paged) { return paged ? 2 : 1; }

private:
  Value keyCarrier, pageTable, keyLengths;
};

/// The row attn.kv_compact copies into row `r` of a sequence whose draft
/// tree's T keys come last, from `prefixEnd` on (P): row P + path[n] when
/// r = P + n with n < length[batch], else r itself. Rows count as the
/// caller counts them: within the sequence ([B, Hkv, P + T, F]) or in the
/// packed keys ([Tk, Hkv, F], `prefixEnd` then cu_seqlens_k[batch + 1] -
/// T).
Value compactSourceRow(KernelEmitter &e, Value path, Value length, Value batch,
                       Value prefixEnd, Value r);

/// The sequence b of a ragged batch that holds token `token` (< T):
/// offsets[b] <= token < offsets[b + 1], found by a binary search of the
/// B + 1 offsets (which the runtime checked are non-decreasing from 0 to
/// T), so empty sequences are skipped.
Value sequenceOfToken(KernelEmitter &e, Value offsets, Value token);

/// The mask geometry every kernel shares: the first key `mask` (`size`: the
/// window W or the chunk size C) leaves visible to a query at (signed)
/// position `pos`, not clamped: 0; pos - W + 1; or the first position of
/// pos's chunk, (pos / C) * C. It never decreases as pos grows, so the rows
/// of a tile all see the keys from the last row's first key on. A
/// mask other than `none` also hides the keys after pos. `pos` may be an
/// index, an integer or a vector of them (a lane per row).
Value firstVisibleKey(KernelEmitter &e, MaskKind mask, int64_t size, Value pos);

/// The keys [begin, end) that `mask` leaves visible to a query at (signed)
/// position `pos` among `lk` keys; empty when none is.
std::pair<Value, Value> visibleRange(KernelEmitter &e, MaskKind mask,
                                     int64_t window, Value pos, Value lk);

/// The candidate blocks of top-k for a query at (signed) position `pos`
/// among `lk` keys: [first, first + count), the blocks that hold a key the
/// op's mask leaves visible.
std::pair<Value, Value> topKCandidates(KernelEmitter &e, SelectTopKOp op,
                                       Value pos, Value lk);

/// Fills out[prefix..., from .. to) with -1 (a selection's padding).
void padWithMinusOne(KernelEmitter &e, Value out, ValueRange prefix, Value from,
                     Value to);

/// The keys node `node` of a draft tree sees (SPEC §1.4), from its batch
/// row of `parents` [B, T]: node t sits at P + depth(t) and sees the prefix
/// keys from its window's start and the tree keys P + u of itself and its
/// ancestors whose positions P + depth(u) are in the window. The runtime has
/// checked that parents form a tree, so the walks end at the root.
class TreeNodeKeys {
public:
  TreeNodeKeys(KernelEmitter &e, Value parents, Value batch, Value node,
               Value prefixLength, MaskKind mask, int64_t window);
  /// The first prefix key in the node's window (the prefix ends at P).
  Value prefixBegin;
  /// The node's position P + depth, and the first key its mask leaves
  /// visible to that position (firstVisibleKey).
  Value position, firstKey;
  /// Runs `body(u, position of u, iters)` for the node and each ancestor u
  /// in its window, nearest first; returns the final iters.
  SmallVector<Value> eachTreeKey(
      ValueRange inits,
      function_ref<SmallVector<Value>(Value u, Value position, ValueRange)>
          body);

private:
  Value parentOf(Value u);
  Value isNode(Value u);

  KernelEmitter &e;
  Value parents, batch, node, prefixLength, depth;
  MaskKind mask;
  int64_t window;
};

/// SPEC §1.3's order of scored candidates: (scoreA, indexA) is worse than
/// (scoreB, indexB) when its score is lower, or equal with a higher index.
Value worseScored(KernelEmitter &e, Value scoreA, Value indexA, Value scoreB,
                  Value indexB);

/// SPEC §1.3's `int4` estimator reads a key as a 4-bit key cache holds it:
/// per key row, 16 levels from its lowest channel to its highest,
/// x' = lowest + floor((x - lowest) * perStep + 0.5) * step with
/// step = (highest - lowest) / 15 and perStep = 15 / (highest - lowest)
/// (0 for a constant row, which is then exact).
struct Int4Levels {
  Value lowest, step, perStep;
  /// The levels of a key row from its lowest and highest channel (scalars).
  static Int4Levels of(KernelEmitter &e, Value lowest, Value highest);
  /// The levels broadcast to the emitter's vectors.
  Int4Levels broadcast(KernelEmitter &e) const;
  /// `x` (a channel, or a vector of channels of one key, like the levels)
  /// rounded to its level.
  Value round(KernelEmitter &e, Value x) const;
};

/// One row of a per-row buffer: a 1-D scratch row on the CPU (no prefix),
/// the row [prefix..., :] of a [B, H, Lq, n] temporary in a CUDA kernel.
struct RowBuffer {
  RowBuffer(Value memref, ValueRange prefix = {})
      : memref(memref), prefix(prefix) {}
  /// The indices of entry `n`.
  SmallVector<Value> at(Value n) const {
    SmallVector<Value> indices(prefix);
    indices.push_back(n);
    return indices;
  }
  /// A float entry, widened to f32 like KernelEmitter::load.
  Value load(KernelEmitter &e, Value n) const { return e.load(memref, at(n)); }
  /// An entry as it is stored (an integer, an f64 sum).
  Value loadStored(KernelEmitter &e, Value n) const {
    return memref::LoadOp::create(e.b, memref, at(n));
  }
  void store(KernelEmitter &e, Value value, Value n) const {
    memref::StoreOp::create(e.b, value, memref, at(n));
  }

  Value memref;
  SmallVector<Value> prefix;
};

/// Clears the i8 flags of entries [0, count).
void clearFlags(KernelEmitter &e, const RowBuffer &flags, Value count);

/// Writes, in ascending order of n in [first, end), `valueOf(n)` of every
/// flagged n to out[prefix..., slot++] from `slot`; returns the next slot.
Value writeFlagged(KernelEmitter &e, const RowBuffer &flags, Value first,
                   Value end, Value out, ValueRange prefix, Value slot,
                   function_ref<Value(Value)> valueOf);

/// The most score buckets top-p cuts a row's candidates into.
constexpr int64_t kMaxTopPBuckets = 4096;

/// The buckets of a top-p row of `count` candidates:
/// max(min(count, kMaxTopPBuckets), 1).
Value topPBucketCount(KernelEmitter &e, Value count);

/// A row's scores cut into topPBucketCount equal-width buckets from its
/// highest score (bucket 0) to its lowest. The bucket is a monotone
/// function of the score, so a better score never lands in a later bucket:
/// the best m candidates are whole buckets plus the best of one bucket, and
/// only that bucket has to be sorted. A NaN score goes to bucket 0.
struct ScoreBuckets {
  /// The buckets of `count` candidates whose scores span [lowest, highest].
  ScoreBuckets(KernelEmitter &e, Value highest, Value lowest, Value count);
  /// The highest and lowest of scores [first, end) (-inf and +inf when
  /// empty); ranges of parts combine by the same max and min.
  static std::pair<Value, Value> range(KernelEmitter &e,
                                       const RowBuffer &scores, Value first,
                                       Value end);
  /// The bucket (index) of `score`.
  Value of(Value score);

  KernelEmitter &e;
  Value highest, size;

private:
  Value toF32(Value index);

  Value perScore, lastBucket;
};

/// A candidate's unnormalized top-p weight exp(s - max), widened to f64 for
/// the sums that decide how many are kept.
Value topPWeight(KernelEmitter &e, Value score, Value maxScore);

/// Where top-p selects among one row's `count` candidates.
struct TopPRow {
  /// f32 [count]: candidate n's score.
  RowBuffer scores;
  /// The i32 token of candidate n, for SPEC §1.3's tie rule.
  function_ref<Value(Value n)> tokenOf;
  /// i32 and f64 [topPBucketCount]: each bucket's candidates and weight
  /// (the weights are unused when top_p = 1).
  RowBuffer bucketSizes, bucketWeights;
  /// i32 [count]: the candidates of one bucket while it is sorted.
  RowBuffer order;
  /// i8 [count], cleared: where the kept candidates are flagged.
  RowBuffer kept;
};

/// Flags the candidates that top-p keeps: the `keep` best in SPEC §1.3's
/// order, where `keep` is the shortest best-first prefix whose weights
/// exp(s - max) / sum reach `top_p`, clamped to [min_tokens, capacity] and
/// to `count`. The scores fall into equal-width buckets from the highest;
/// the weights are summed in f64 per bucket, then in order inside the
/// bucket where the sum crosses top_p, so this costs a few passes over the
/// row and the sort of one or two buckets, not a sort of every candidate.
/// A sum that reaches top_p only within f64 rounding may keep one token
/// more or less than a walk over the sorted candidates.
void flagTopPKept(KernelEmitter &e, SelectTopPOp op, const TopPRow &row,
                  Value count, Value capacity);

/// The score scale of a selection op: its `scale`, else 1/sqrt(D).
double selectionScale(std::optional<APFloat> scale, int64_t headDim);

/// Runs `use` on the heap (KernelEmitter.h) of the i32 items of `items`,
/// ordered by `worse`.
using WorsePredicate = function_ref<Value(Value, Value)>;
void withIntHeap(KernelEmitter &e, const RowBuffer &items, WorsePredicate worse,
                 function_ref<void(const HeapStorage &)> use);

/// Whether entry `n` of the i8 `flags` is set.
Value isFlagged(KernelEmitter &e, const RowBuffer &flags, Value n);
/// Sets entry `n` of the i8 `flags`.
void setFlag(KernelEmitter &e, const RowBuffer &flags, Value n);

/// Bindings: k_cache [NP, P, Hkv, D], page_table [B, MP], seq_lens [B],
/// used [NP] (i32). One workgroup: used[p] becomes the most slots of page
/// p that a sequence holds keys in (0: no sequence uses it), what
/// attn.block_meta over a paged cache bounds. Scalar code, so also the
/// CUDA kernel (one thread): `tiling` is the target's.
func::FuncOp buildPageUseKernel(OpBuilder &builder, Location loc,
                                StringRef name, DictionaryAttr tiling,
                                TypeRange bindingTypes);

/// What attn.page_meta_update bounds: each page p that `slots` (an
/// append's: flat slots, or -1) write, once, over its slots up to the
/// highest one written. Its kernels write, for the written pages only (no
/// pass over the cache's pages), fill[p] = the highest offset written + 1
/// and leader[p] = the first token that writes p, the one that bounds it
/// (MetaBlock's AppendedPages).
struct AppendedPages {
  /// Bindings: k_cache [NP, P, Hkv, D], slots [T], fill [NP], leader [NP].
  /// One workgroup (a thread on CUDA), both steps in order: scalar code.
  static func::FuncOp buildScalarKernel(OpBuilder &builder, Location loc,
                                        StringRef name, DictionaryAttr tiling,
                                        TypeRange bindingTypes);
  /// For a kernel of a workgroup (or thread) per token `t`: the first
  /// step, fill[p] = 0 and leader[p] = T for the page p of slots[t]; the
  /// second, once the first is done for every token, fill[p] = max(fill[p],
  /// offset + 1) and leader[p] = min(leader[p], t), through `combine` (a
  /// plain read-modify-write, or an atomic one where tokens run at once).
  static void reset(KernelEmitter &e, ValueRange bindings, Value t);
  static void
  combine(KernelEmitter &e, ValueRange bindings, Value t,
          function_ref<void(arith::AtomicRMWKind, Value, Value, Value)> update);
};

/// Bindings: tokens, target, parents, path, length, bonus. Workgroup =
/// batch row. Scalar code, so also the CUDA kernel (one thread per batch
/// row): `tiling` is the target's, recorded on the kernel.
func::FuncOp buildTreeAcceptKernel(OpBuilder &builder, Location loc,
                                   StringRef name, DictionaryAttr tiling,
                                   TypeRange bindingTypes);

/// Bindings: input [B, H, T(, F)], path, length, result. Workgroup =
/// (batch, head, step), the step fastest: result row i is input row
/// path[i] for i < length, zeros after. Scalar code, so also the CUDA
/// kernel (a thread per row): `tiling` is the target's.
func::FuncOp buildPathStepsKernel(OpBuilder &builder, Location loc,
                                  StringRef name, DictionaryAttr tiling,
                                  TypeRange bindingTypes);

} // namespace mlir::attn

#endif // ATTN_PASSES_KERNELS_KEYSELECTION_H
