//===- CpuKernels.h - The CPU kernel builders -------------------*- C++ -*-===//
//
// The workgroup bodies that -attn-cpu-dispatches emits, read through
// AttentionOpInterface. Everything is scf + vector + memref + math, so the
// upstream conversions take it to LLVM:
//
//  * softmax attention (SoftmaxAttentionKernels.cpp): flash tiling with the
//    online-softmax state carried explicitly, split-KV partials for decode,
//    and their log-sum-exp merge;
//  * sparsity and trees (SelectionKernels.cpp, SPEC §1.3-1.4): Quest block
//    metadata, top-k block and top-p token selection, softmax attention
//    over the keys a row gathers, KV compaction. Per-row scratch whose size
//    depends on Lk is heap-allocated (memref.alloc), the rest is on the
//    stack;
//  * linear recurrences (LinearRecurrenceKernels.cpp, SPEC §2): the chunked
//    form for prefill and the step-by-step recurrence for decode, one
//    workgroup per (batch, value head, column tile), the state living in
//    the workgroup from the initial state to the final one.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_KERNELS_CPU_CPUKERNELS_H
#define ATTN_PASSES_KERNELS_CPU_CPUKERNELS_H

#include "passes/kernels/AttentionShapes.h"
#include "passes/kernels/KeySelection.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::attn {

//===----------------------------------------------------------------------===//
// Softmax attention
//===----------------------------------------------------------------------===//

/// The stored epilogue of one output row: o = acc * inv (+ the sigmoid gate
/// of `shape`), `acc` f32 at `accIndexPrefix` + feature, `gate` and `out`
/// at `outIndexPrefix` + feature, in vectors of the emitter's width.
void storeOutputRow(KernelEmitter &e, const SoftmaxAttentionShape &shape,
                    Value accRow, ValueRange accIndexPrefix, Value inv,
                    Value gate, Value out, ValueRange outIndexPrefix);

/// Kernel bindings of the flash kernel: q, k, v, [gate], o, [lse], [tile
/// classes]; for KeyPart::TreePrefix q, k, v, [parents], partial o, partial
/// lse. Every kernel that scores keys then binds the variant tensors.
func::FuncOp buildFlashAttentionKernel(OpBuilder &builder, Location loc,
                                       StringRef name,
                                       const SoftmaxAttentionShape &shape,
                                       const CpuTiling &tiling,
                                       TypeRange bindingTypes,
                                       KeyPart part = KeyPart::All);

/// Kernel bindings of the tile-class kernel: q, k, tile classes, variant
/// tensors. A workgroup per (Bm, Hm, query tile) classifies the key tiles
/// the flash kernel's tile visits.
func::FuncOp buildTileClassKernel(OpBuilder &builder, Location loc,
                                  StringRef name,
                                  const SoftmaxAttentionShape &shape,
                                  const CpuTiling &tiling,
                                  TypeRange bindingTypes);

/// Kernel bindings of the split-KV kernel: q, k, v, partial o
/// [B, H, Lq, S, Dv], partial lse [B, H, Lq, S] (KeyPart::TreePrefix: the
/// prefix in splits [0, S - 1), and [parents] after v).
func::FuncOp buildSplitKvAttentionKernel(OpBuilder &builder, Location loc,
                                         StringRef name,
                                         const SoftmaxAttentionShape &shape,
                                         const CpuTiling &tiling,
                                         TypeRange bindingTypes,
                                         KeyPart part = KeyPart::All);

/// Kernel bindings of the merge kernel: [queries' offsets, merge plan] in
/// a ragged batch, partial o, partial lse, [gate], o, [lse].
func::FuncOp buildSplitKvMergeKernel(OpBuilder &builder, Location loc,
                                     StringRef name,
                                     const SoftmaxAttentionShape &shape,
                                     const CpuTiling &tiling,
                                     TypeRange bindingTypes);

//===----------------------------------------------------------------------===//
// Sparsity and trees
//===----------------------------------------------------------------------===//

/// Rows of keys that one KV-compaction workgroup copies.
constexpr int64_t kCompactRowTile = 64;

/// Bindings and workgroups: MetaBlock's, by `layout` (the blocks of
/// attn.block_meta, with or without pages, or the pages of
/// attn.page_meta_update).
func::FuncOp buildBlockMetaKernel(OpBuilder &builder, Location loc,
                                  StringRef name, const MetaLayout &layout,
                                  const CpuTiling &tiling,
                                  TypeRange bindingTypes);

/// What a top-k kernel does of a row's selection. A selection workgroup
/// is per (batch, kv heads served, row) (kvHeadsPerCpuWorkgroup): the
/// query heads of a kv group share each block's metadata load. When those
/// are fewer than the threads (a decode call of one or two sequences), the
/// bounds are computed first in chunks of kTopKBoundsChunk blocks, each a
/// workgroup, and then the budget kept from them, so that every thread
/// reads a share of the metadata.
enum class TopKPhase {
  /// Bounds the row's candidate blocks and keeps the budget.
  Whole,
  /// Workgroup = (selection workgroup g, chunk): the bounds of the chunk's
  /// candidate blocks into bounds[g].
  Bounds,
  /// Keeps the budget from the bounds in bounds[workgroup].
  Select,
};

/// Candidate blocks a TopKPhase::Bounds workgroup bounds.
constexpr int64_t kTopKBoundsChunk = 128;

/// Bindings: q, meta, keys [Lk, 0] (a buffer that only carries the key
/// length), blocks [B, H, Lq, top_k], bounds [G, heads served, NB] (f32,
/// G the selection workgroups; [0, heads served, NB] for Whole); over a
/// paged cache q, kmeta_pages, page_table, seq_lens, [cu_seqlens_q],
/// blocks, bounds (NB: the page table's MP).
func::FuncOp buildSelectTopKKernel(OpBuilder &builder, Location loc,
                                   StringRef name, SelectTopKOp op,
                                   const CpuTiling &tiling,
                                   TypeRange bindingTypes, TopKPhase phase);

/// Bindings: q, k, [page_table, seq_lens], [blocks], tokens [B, H, Lq,
/// N]. Workgroup = (batch, head, row).
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

/// Bindings: k [T, Hkv, D], v [T, Hkv, Dv], slots [T], k_cache, v_cache
/// (written in place). Workgroup = token.
func::FuncOp buildKvAppendKernel(OpBuilder &builder, Location loc,
                                 StringRef name, const CpuTiling &tiling,
                                 TypeRange bindingTypes);

/// Bindings: k, v, path, length, k', v'. Workgroup = (batch, kv head, tile
/// of kCompactRowTile rows).
func::FuncOp buildKvCompactKernel(OpBuilder &builder, Location loc,
                                  StringRef name, const CpuTiling &tiling,
                                  TypeRange bindingTypes);

//===----------------------------------------------------------------------===//
// Linear recurrences
//===----------------------------------------------------------------------===//

/// Kernel bindings of every kernel, in this order: q, k, v, [g], [beta],
/// [parents], S_init, [z, w], o, [S] (a tree recurrence binds the parents
/// and has no final state).
///
/// The chunked form: per chunk of C steps, masked matrix products inside
/// the chunk (and for the delta rules the UT transform), then the state
/// carried to the next chunk. A workgroup owns `columns` columns of the
/// state (and of v and o): workgroups B * Hv * (padded Dv / columns),
/// (batch, value head, column tile) with the tile fastest. With whole rows
/// (`columns` = padded Dv) the rmsnorm-silu gate is fused; with column
/// tiles o is stored ungated and attn.rmsnorm_gate's kernel follows.
///
/// A tree recurrence (`shape.tree`, whole rows) is one chunk of C =
/// max_nodes steps, the tree's nodes in index order (the host has checked
/// T <= C): the decays are summed along each node's path instead of the
/// chunk, and the ancestor relation replaces the causal mask in every
/// matrix of the chunk (a node's ancestors precede it, so the matrices stay
/// lower triangular and the UT transform's forward substitution holds).
func::FuncOp buildChunkedRecurrenceKernel(OpBuilder &builder, Location loc,
                                          StringRef name,
                                          const LinearRecurrenceShape &shape,
                                          const CpuTiling &tiling,
                                          int64_t columns,
                                          TypeRange bindingTypes);

/// The tokens of a workgroup of the CPU's attn.rmsnorm_gate kernel: about
/// 16,384 elements of one row (RmsNormGateShape), 64 KiB of f32 a stream,
/// which its second pass reads again from the cache.
inline int64_t rmsNormGateTokensPerWorkgroup(const RmsNormGateShape &shape) {
  return std::max<int64_t>(1, 16384 / shape.rowFeatures());
}

/// attn.rmsnorm_gate on its own (RmsNormGateShape). Bindings: o, z, w,
/// [x, d], result (o and result [B, H, L, Dv] or packed [T, H, Dv]).
/// Workgroups: a run of rmsNormGateTokensPerWorkgroup tokens of one row
/// each, ((b, row), run) for [B, H, L, Dv], (run, row) packed: B *
/// rowsPerToken() * ceil(L / run), or ceil(T / run) * rowsPerToken().
func::FuncOp buildRmsNormGateKernel(OpBuilder &builder, Location loc,
                                    StringRef name,
                                    const RmsNormGateShape &shape,
                                    const CpuTiling &tiling,
                                    TypeRange bindingTypes);

/// The tokens of a workgroup of the CPU's attn.gate kernel: about 4,096
/// elements (16 KiB of f32 per stream), of one head vector of [B, H, L, Dv]
/// a token, or of all H of packed [T, H, Dv].
inline int64_t gateTokensPerWorkgroup(const OutputGateShape &shape) {
  const int64_t perToken =
      shape.headFeatures * (shape.packed ? shape.heads : 1);
  return std::max<int64_t>(1, 4096 / std::max<int64_t>(1, perToken));
}

/// attn.gate on its own (OutputGateShape). Bindings: o, gate, [x, d],
/// result. Workgroups: runs of gateTokensPerWorkgroup tokens, B * H * ceil(L
/// / run) of them (b, h, run) for [B, H, L, Dv], ceil(T / run) packed.
func::FuncOp buildOutputGateKernel(OpBuilder &builder, Location loc,
                                   StringRef name, const OutputGateShape &shape,
                                   const CpuTiling &tiling,
                                   TypeRange bindingTypes);

/// The recurrence one step at a time, reading S_init and writing S in
/// place (decode).
func::FuncOp buildRecurrentStepKernel(OpBuilder &builder, Location loc,
                                      StringRef name,
                                      const LinearRecurrenceShape &shape,
                                      const CpuTiling &tiling,
                                      TypeRange bindingTypes);

} // namespace mlir::attn

#endif // ATTN_PASSES_KERNELS_CPU_CPUKERNELS_H
