//===- LinearRecurrenceKernels.h - CPU kernels of linear recurrences -*- C++
//-*-===//
//
// The workgroup bodies that -attn-cpu-dispatches emits for an attention op
// whose normalizer is a recurrent state (SPEC §2), read through
// AttentionOpInterface: the chunked form for prefill and the step-by-step
// recurrence for decode. One workgroup = one (batch, value head): the state
// [Dk, Dv] lives in the workgroup from the initial state to the final one.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_LINEARRECURRENCEKERNELS_H
#define ATTN_PASSES_LINEARRECURRENCEKERNELS_H

#include "Attn/AttnOps.h"
#include "passes/KernelEmitter.h"

namespace mlir::attn {

/// The static facts a recurrence kernel is specialized on.
struct LinearRecurrenceShape {
  RecurrenceRule rule = RecurrenceRule::Linear;
  int64_t numKeyHeads = 0, numValueHeads = 0, keyDim = 0, valueDim = 0;
  int64_t chunkSize = 64;
  double scale = 1.0;
  bool normalizeQueryKey = false;
  /// The rmsnorm-silu output gate, fused into the kernels' epilogue.
  bool rmsNormGate = false;
  double gateEpsilon = 0.0;

  /// A scalar log-decay per step (decay, gated_delta).
  bool scalarDecay() const {
    return rule == RecurrenceRule::Decay || rule == RecurrenceRule::GatedDelta;
  }
  /// A log-decay per step and key feature (gla).
  bool featureDecay() const { return rule == RecurrenceRule::Gla; }
  bool hasDecay() const { return scalarDecay() || featureDecay(); }
  /// A delta rule: a write strength per step and the WY / UT form.
  bool isDelta() const {
    return rule == RecurrenceRule::Delta || rule == RecurrenceRule::GatedDelta;
  }

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

/// A recurrence kernel's arguments, in binding order (below).
struct RecurrenceBindings {
  Value q, k, v, g, beta, initialState, z, w, out, finalState, workgroup;

  RecurrenceBindings(func::FuncOp func, const LinearRecurrenceShape &shape) {
    auto args = func.getArguments();
    unsigned next = 0;
    q = args[next++];
    k = args[next++];
    v = args[next++];
    if (shape.hasDecay())
      g = args[next++];
    if (shape.isDelta())
      beta = args[next++];
    initialState = args[next++];
    if (shape.rmsNormGate) {
      z = args[next++];
      w = args[next++];
    }
    out = args[next++];
    finalState = args[next++];
    workgroup = args.back();
  }
};

/// Kernel bindings of every kernel, in this order: q, k, v, [g], [beta],
/// S_init, [z, w], o, S.
///
/// The chunked form: per chunk of C steps, masked matrix products inside
/// the chunk (and for the delta rules the UT transform), then the state
/// carried to the next chunk. A workgroup owns `columns` columns of the
/// state (and of v and o): workgroups B * Hv * (padded Dv / columns),
/// (batch, value head, column tile) with the tile fastest. With whole rows
/// (`columns` = padded Dv) the rmsnorm-silu gate is fused; with column
/// tiles o is stored ungated and the gate kernel follows.
func::FuncOp buildChunkedRecurrenceKernel(OpBuilder &builder, Location loc,
                                          StringRef name,
                                          const LinearRecurrenceShape &shape,
                                          const CpuTiling &tiling,
                                          int64_t columns,
                                          TypeRange bindingTypes);

/// The rmsnorm-silu gate applied in place to o, after the column-tiled
/// chunked kernel: workgroups B * Hv * ceil(L / C), C rows of one head each.
func::FuncOp buildRecurrenceGateKernel(OpBuilder &builder, Location loc,
                                       StringRef name,
                                       const LinearRecurrenceShape &shape,
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

#endif // ATTN_PASSES_LINEARRECURRENCEKERNELS_H
