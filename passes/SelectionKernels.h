//===- SelectionKernels.h - CPU kernels of sparsity and trees ---*- C++ -*-===//
//
// The workgroup bodies of SPEC §1.3-1.4 that -attn-cpu-dispatches emits:
// Quest block metadata, top-k block and top-p token selection, softmax
// attention over the keys a row gathers (selected blocks; a draft tree's
// prefix and ancestors), greedy tree acceptance and KV compaction. Like the
// other CPU kernels they are scf + vector + memref + math; per-row scratch
// whose size depends on Lk is heap-allocated (memref.alloc), the rest is on
// the stack.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_SELECTIONKERNELS_H
#define ATTN_PASSES_SELECTIONKERNELS_H

#include "passes/SoftmaxAttentionKernels.h"

namespace mlir::attn {

/// The (batch, head, row) of a per-row workgroup (or thread) over
/// [B, H, Lq].
struct RowOfWorkgroup {
  Value batch, head, row;
  RowOfWorkgroup(KernelEmitter &e, Value workgroup, int64_t numHeads,
                 Value rows);
};

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
  /// Runs `body(u, iters)` for the node and each ancestor u in its window,
  /// nearest first; returns the final iters.
  SmallVector<Value>
  eachTreeKey(ValueRange inits,
              function_ref<SmallVector<Value>(Value u, ValueRange)> body);

private:
  Value parentOf(Value u);
  Value isNode(Value u);

  KernelEmitter &e;
  Value parents, batch, node, depth;
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

/// How many of `count` candidates top-p keeps: the shortest prefix of the
/// best-first order whose weights exp(s - max) / sum reach `top_p`, summed
/// in f64 in that order (so that top_p = 1 keeps every candidate), clamped
/// to [min_tokens, capacity] and to `count`. `sortedScoreAt(n)` is the
/// score of the n-th best candidate.
Value topPKeepCount(KernelEmitter &e, SelectTopPOp op, Value count,
                    Value capacity, function_ref<Value(Value)> sortedScoreAt);

/// The score scale of a selection op: its `scale`, else 1/sqrt(D).
double selectionScale(std::optional<APFloat> scale, int64_t headDim);

/// Rows of keys that one KV-compaction workgroup copies.
constexpr int64_t kCompactRowTile = 64;

/// Bindings: k [B, Hkv, Lk, D], meta [B, Hkv, NB, 2, D]. Workgroup =
/// (batch, kv head, block).
func::FuncOp buildBlockMetaKernel(OpBuilder &builder, Location loc,
                                  StringRef name, BlockMetaOp op,
                                  const CpuTiling &tiling,
                                  TypeRange bindingTypes);

/// Bindings: q, meta, keys [Lk, 0] (a buffer that only carries the key
/// length), blocks [B, H, Lq, top_k]. Workgroup = (batch, kv head, row):
/// the query heads of a kv group share each block's metadata load.
func::FuncOp buildSelectTopKKernel(OpBuilder &builder, Location loc,
                                   StringRef name, SelectTopKOp op,
                                   const CpuTiling &tiling,
                                   TypeRange bindingTypes);

/// Bindings: q, k, [blocks], tokens [B, H, Lq, N]. Workgroup = (batch,
/// head, row).
func::FuncOp buildSelectTopPKernel(OpBuilder &builder, Location loc,
                                   StringRef name, SelectTopPOp op,
                                   const CpuTiling &tiling,
                                   TypeRange bindingTypes);

/// Softmax attention over the keys each row gathers. `shape.selection` is
/// Blocks (sparse_sdpa; bindings q, k, v, selection, [gate], o, [lse]) or
/// Tree (tree_sdpa's KeyPart::TreeNodes: each node's own and ancestors'
/// keys inside its window, into the last split of the partials; bindings
/// q, k, v, parents, partial o, partial lse). Workgroup = (batch, head,
/// row).
func::FuncOp buildGatheredAttentionKernel(OpBuilder &builder, Location loc,
                                          StringRef name,
                                          const SoftmaxAttentionShape &shape,
                                          const CpuTiling &tiling,
                                          TypeRange bindingTypes);

/// Bindings: tokens, target, parents, path, length, bonus. Workgroup =
/// batch row. Scalar code, so also the CUDA kernel (one thread per batch
/// row): `tiling` is the target's, recorded on the kernel.
func::FuncOp buildTreeAcceptKernel(OpBuilder &builder, Location loc,
                                   StringRef name, DictionaryAttr tiling,
                                   TypeRange bindingTypes);

/// Bindings: k, v, path, length, k', v'. Workgroup = (batch, kv head, tile
/// of kCompactRowTile rows).
func::FuncOp buildKvCompactKernel(OpBuilder &builder, Location loc,
                                  StringRef name, const CpuTiling &tiling,
                                  TypeRange bindingTypes);

} // namespace mlir::attn

#endif // ATTN_PASSES_SELECTIONKERNELS_H
