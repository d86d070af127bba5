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

/// Fills out[prefix..., from .. to) with -1 (a selection's padding).
void padWithMinusOne(KernelEmitter &e, Value out, ValueRange prefix, Value from,
                     Value to);

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
/// length), blocks [B, H, Lq, top_k]. Workgroup = (batch, head, row).
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

/// Softmax attention over the keys each row gathers: `shape.selection` is
/// Blocks (sparse_sdpa) or Tree (tree_sdpa, `window` from the op's mask).
/// Bindings: q, k, v, selection or parents, [gate], o, [lse]. Workgroup =
/// (batch, head, row).
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
