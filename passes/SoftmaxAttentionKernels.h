//===- SoftmaxAttentionKernels.h - CPU kernels of softmax attention -*- C++
//-*-===//
//
// The workgroup bodies that -attn-cpu-dispatches emits for an attention op
// read through AttentionOpInterface: flash tiling with the online-softmax
// state carried explicitly, split-KV partials for decode, and their
// log-sum-exp merge. Everything is scf + vector + memref + math, so the
// upstream conversions take it to LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_SOFTMAXATTENTIONKERNELS_H
#define ATTN_PASSES_SOFTMAXATTENTIONKERNELS_H

#include "Attn/AttnOps.h"
#include "passes/KernelEmitter.h"
#include "passes/VariantRegions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace mlir::attn {

/// The static facts a softmax-attention kernel is specialized on, read from
/// an AttentionOpInterface op.
struct SoftmaxAttentionShape {
  int64_t numHeads = 0, numKvHeads = 0, headDim = 0, valueDim = 0;
  double scale = 1.0, softcap = 0.0;
  MaskKind mask = MaskKind::None;
  int64_t window = 0;
  /// None, or a sigmoid gate that is elementwise (gate dim 3 == Dv) or
  /// headwise (gate dim 3 == 1).
  Epilogue epilogue = Epilogue::None;
  bool headwiseGate = false;
  bool withLogSumExp = false;
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
    return mask == MaskKind::SlidingWindow || !variants.empty();
  }

  /// Reads the shape of `op`, or says why the kernels of `target` ("CPU",
  /// "CUDA") cannot run it.
  static FailureOr<SoftmaxAttentionShape> get(AttentionOpInterface op,
                                              StringRef target = "CPU");
};

/// The stored epilogue of one output row: o = acc * inv (+ the sigmoid gate
/// of `shape`), `acc` f32 at `accIndexPrefix` + feature, `gate` and `out`
/// at `outIndexPrefix` + feature, in vectors of the emitter's width.
void storeOutputRow(KernelEmitter &e, const SoftmaxAttentionShape &shape,
                    Value accRow, ValueRange accIndexPrefix, Value inv,
                    Value gate, Value out, ValueRange outIndexPrefix);

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

/// Kernel bindings of the flash kernel: q, k, v, [gate], o, [lse], [tile
/// classes]; for KeyPart::TreePrefix q, k, v, [parents], partial o, partial
/// lse. Every kernel that scores keys then binds the variant tensors.
func::FuncOp buildFlashAttentionKernel(OpBuilder &builder, Location loc,
                                       StringRef name,
                                       const SoftmaxAttentionShape &shape,
                                       const CpuTiling &tiling,
                                       TypeRange bindingTypes,
                                       KeyPart part = KeyPart::All);

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
inline bool flashUsesBlockMask(const SoftmaxAttentionShape &shape,
                               KeyPart part) {
  return shape.variants.maskMod && part == KeyPart::All;
}

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

/// Kernel bindings of the merge kernel: partial o, partial lse, [gate], o,
/// [lse].
func::FuncOp buildSplitKvMergeKernel(OpBuilder &builder, Location loc,
                                     StringRef name,
                                     const SoftmaxAttentionShape &shape,
                                     const CpuTiling &tiling,
                                     TypeRange bindingTypes);

/// What every target's merge kernel starts from: its arguments in binding
/// order (partial o, partial lse, [gate], o, [lse], workgroup), the query
/// row it merges, `rowIndex` (by default the workgroup; row fastest, then
/// head, then batch), and the largest partial lse of that row made safe to
/// exponentiate against (KernelEmitter::safeMax: 0 for a row whose ranges
/// are all empty).
struct SplitKvMerge {
  Value partialOut, partialLse, gate, out, lse;
  Value batch, head, row, splits;
  Value maxLse;

  SplitKvMerge(KernelEmitter &e, func::FuncOp kernel,
               const SoftmaxAttentionShape &shape, Value rowIndex = Value());
};

} // namespace mlir::attn

#endif // ATTN_PASSES_SOFTMAXATTENTIONKERNELS_H
