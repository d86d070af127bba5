//===- VariantRegions.h - score_mod / mask_mod inside kernels ---*- C++ -*-===//
//
// The one place where a softmax-attention op's variant regions (SPEC §7)
// become kernel code, on every target: each kernel hands VariantEmitter its
// scores and positions, as scalars (a CUDA lane, a CPU loop over one query)
// or as vectors of lanes (CPU rows or keys), and gets back the modified
// scores and mask_mod's verdicts. No kernel builder looks at what a region
// computes.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_KERNELS_VARIANTREGIONS_H
#define ATTN_PASSES_KERNELS_VARIANTREGIONS_H

#include "passes/kernels/KernelEmitter.h"

#include "Attn/AttnOps.h"

namespace mlir::attn {

/// The variant regions of a softmax-attention op, as its kernels see them.
struct VariantRegions {
  Region *scoreMod = nullptr, *maskMod = nullptr;
  /// The tensors the regions read (getVariantTensors): every kernel that
  /// evaluates a region binds their buffers last, in this order.
  SmallVector<Value> tensors;

  static VariantRegions of(AttentionOpInterface op);
  bool empty() const { return !scoreMod && !maskMod; }
  /// Whether the mask_mod reads its batch (`b`) or head (`h`) argument:
  /// a block mask is kept per batch row or head only when it does.
  bool maskModReadsBatch() const {
    return maskMod && !maskMod->getArgument(0).use_empty();
  }
  bool maskModReadsHead() const {
    return maskMod && !maskMod->getArgument(1).use_empty();
  }
  /// The kernel arguments holding `tensors`: the last ones before the
  /// workgroup id.
  ValueRange buffersOf(func::FuncOp kernel) const;
};

/// Evaluates the variant regions in a kernel being built. Positions and the
/// batch and head are `index` scalars, or vectors of i32 lanes (the kernels'
/// positions; inside a vectorized region every index value is an i32 lane,
/// so positions and indices must stay below 2^31, as docs/limits.md bounds
/// them). The score is an f32 scalar or a vector of the emitter's width.
class VariantEmitter {
public:
  VariantEmitter(KernelEmitter &e, const VariantRegions &regions,
                 ValueRange buffers);

  bool hasScoreMod() const { return regions.scoreMod; }
  bool hasMaskMod() const { return regions.maskMod; }

  /// score_mod(s, b, h, qp, kp), or `s` without one; a vector when `s` is.
  Value score(Value s, Value batch, Value head, Value queryPos, Value keyPos);
  /// mask_mod(b, h, qp, kp): a vector of i1 of the emitter's width (an i1
  /// when its width is 1). Only with a mask_mod.
  Value visible(Value batch, Value head, Value queryPos, Value keyPos);

private:
  /// Emits `region` with `args` for its block arguments; returns the
  /// yielded value (a scalar when every argument it depends on is one).
  Value emit(Region &region, ArrayRef<Value> args);

  KernelEmitter &e;
  const VariantRegions &regions;
  /// Tensor read by a region -> its buffer in the kernel.
  llvm::DenseMap<Value, Value> bufferOf;
};

} // namespace mlir::attn

#endif // ATTN_PASSES_KERNELS_VARIANTREGIONS_H
