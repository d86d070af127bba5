//===- EntryLowering.h - Entries to host programs + kernels -----*- C++ -*-===//
//
// The target-independent half of -attn-cpu-dispatches and
// -attn-gpu-dispatches: an entry function on tensors becomes a host
// function on buffers in destination-passing style (inputs, then one
// buffer per result, each argument's symbolic shape in `attn.shape`) whose
// body is index arithmetic, temporaries and `attn_kernel.dispatch` ops. What
// each attention op dispatches is the target's: a subclass lowers one op at a
// time and creates its kernels before the entry.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_PASSES_ENTRYLOWERING_H
#define ATTN_PASSES_ENTRYLOWERING_H

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <string>

namespace mlir::attn {

struct RaggedPlan;
struct RmsNormGateShape;
struct SoftmaxAttentionShape;

/// The index arithmetic host programs are made of (sizes, workgroup
/// counts), on one builder.
struct HostIndexMath {
  ImplicitLocOpBuilder &b;

  Value index(int64_t v) const { return arith::ConstantIndexOp::create(b, v); }
  Value add(Value x, Value y) const { return arith::AddIOp::create(b, x, y); }
  Value sub(Value x, Value y) const { return arith::SubIOp::create(b, x, y); }
  Value mul(Value x, Value y) const { return arith::MulIOp::create(b, x, y); }
  Value div(Value x, Value y) const { return arith::DivUIOp::create(b, x, y); }
  Value ceilDiv(Value x, Value y) const {
    return arith::CeilDivUIOp::create(b, x, y);
  }
  Value maxS(Value x, Value y) const { return arith::MaxSIOp::create(b, x, y); }
  Value minS(Value x, Value y) const { return arith::MinSIOp::create(b, x, y); }
  Value select(Value c, Value x, Value y) const {
    return arith::SelectOp::create(b, c, x, y);
  }
  /// Dim `d` of a buffer, at run time.
  Value dim(Value buffer, int64_t d) const {
    return memref::DimOp::create(b, buffer, d);
  }
  /// Dim `d` of a buffer's type (dynamic dims are ShapedType::kDynamic).
  static int64_t staticDim(Value buffer, int64_t d) {
    return cast<MemRefType>(buffer.getType()).getDimSize(d);
  }
};

/// The tokens of rows [B, H, L, F] (B L) or packed [T, H, F] (T).
Value tokensOf(const HostIndexMath &m, Value rows, bool packed);

/// The rows (RmsNormGateShape) of a gate over `output`, [B, H, L, Dv] or
/// packed [T, H, Dv]: its tokens times the rows of a token.
Value rmsNormGateRows(const HostIndexMath &m, const RmsNormGateShape &shape,
                      Value output);

class EntryLowering {
public:
  /// `target` names the target in diagnostics ("CPU", "CUDA").
  EntryLowering(func::FuncOp entry, StringRef target)
      : entry(entry), target(target) {}
  virtual ~EntryLowering() = default;

  /// Replaces `entry` by its host function (same name).
  LogicalResult run();

  /// The entry functions of `module`: every defined func.func that is
  /// neither a kernel nor an already lowered host function.
  static SmallVector<func::FuncOp> entriesOf(ModuleOp module);

protected:
  /// Emit the host side of a softmax attention op / a linear recurrence
  /// at `b` (its results' buffers, then its dispatches) and create its
  /// kernels. Ops reach them only after their shape (SoftmaxAttentionShape,
  /// LinearRecurrenceShape) was read for this target without error.
  virtual LogicalResult lowerSoftmax(ImplicitLocOpBuilder &b,
                                     AttentionOpInterface op) = 0;
  virtual LogicalResult lowerRecurrence(ImplicitLocOpBuilder &b,
                                        AttentionOpInterface op) = 0;
  /// Dispatches the kernels of `op`, an op that is not attention but has
  /// kernels of its own (isKernelOp: SPEC §1.3-1.4's block_meta,
  /// select_topk, select_topp, tree_accept, kv_compact, path_steps, §8's
  /// kv_append, and an rmsnorm_gate no recurrence took), at `b`. lowerOp has
  /// bound its buffers and checked its sizes: `bindings` are its operands'
  /// buffers, then its results' (select_topk: q, meta, a [key_length x 0]
  /// buffer that carries the key length, blocks). block_meta over a paged
  /// cache: k_cache, the pages' used slots (buildPageUseKernel, which lowerOp
  /// dispatches first), kmeta_pages.
  virtual void dispatchOp(ImplicitLocOpBuilder &b, Operation *op,
                          ValueRange bindings) = 0;
  /// The tiling attribute of the target's scalar kernels (one workgroup
  /// or thread running code shared by both targets).
  virtual DictionaryAttr scalarTiling(MLIRContext *context) const = 0;
  /// The plan kernel of a ragged batch (RaggedPlan): by default the scalar
  /// one, a workgroup walking every sequence.
  virtual func::FuncOp buildRaggedPlan(OpBuilder &builder, Location loc,
                                       StringRef name,
                                       const SoftmaxAttentionShape &shape,
                                       const RaggedPlan &plan,
                                       TypeRange bindingTypes);
  /// Stops the call at run time with `message` unless `condition` holds
  /// (a cf.assert in the host program).
  void assertAtRunTime(ImplicitLocOpBuilder &b, Value condition,
                       const Twine &message);
  /// Under a causal `mask`, stops the call unless `lq` <= `lk` (SPEC §1.1).
  void assertCausalRowsFit(ImplicitLocOpBuilder &b, MaskAttr mask, Value lq,
                           Value lk, StringRef opName);

  /// An in-place argument's `update` is the argument itself or the state
  /// output of the recurrence it is the state of, its only use.
  LogicalResult checkInPlaceUpdate(BlockArgument arg, Value update);
  /// A ragged recurrence's state pool is an in-place argument updated by
  /// the op (its kernels write only the batch's slots).
  LogicalResult checkStatePoolInPlace(AttentionOpInterface op);
  /// attn.kv_append's caches are in-place arguments it updates.
  LogicalResult checkCachesInPlace(KvAppendOp op);
  /// Checks that each (input, update) pair with an input is an entry
  /// argument marked attn.in_place and returned as that update: `op`'s
  /// kernels write into the argument's buffer. `what` names the inputs in
  /// the error.
  LogicalResult checkUpdatedInPlace(Operation *op, StringRef what,
                                    ArrayRef<std::pair<Value, Value>> updates);
  /// attn.gate's kernels are built for its head count, features and kind
  /// of gate (elementwise or headwise): they must be static.
  LogicalResult checkGateLowerable(GateOp op);
  /// Whether `slice` takes the leading features of every row of its source
  /// (offsets 0, strides 1, every dim but the last whole) and only feeds the
  /// keys or values of softmax attention. Such a slice is a view: its buffer
  /// is the source's. The kernels index key and value rows by position and
  /// read features below their static count, so a wider row is nothing to
  /// them; one latent cache thus serves as keys and values (DeepSeek's MLA)
  /// without a copy. A strided memref would say the same, but the kernels'
  /// calling convention passes identity layouts only.
  LogicalResult checkLeadingFeatureView(tensor::ExtractSliceOp slice);

  /// The buffer of `result`: the output argument it is returned through, or
  /// a new allocation with `dynamicSizes` (host index values, one per
  /// dynamic dim).
  Value bufferFor(ImplicitLocOpBuilder &b, Value result,
                  ArrayRef<Value> dynamicSizes);
  /// Builds a kernel with `build` (given the bindings' types) before the
  /// entry and dispatches it over `workgroups` with `bindings` at `b`.
  void dispatchKernel(ImplicitLocOpBuilder &b, Value workgroups,
                      ValueRange bindings,
                      function_ref<func::FuncOp(OpBuilder &, TypeRange)> build);
  /// A kernel name unique in the module: `<entry>__<kind><n>`.
  std::string kernelName(StringRef kind);

  /// The host side of a softmax attention op, which every target's kernels
  /// bind the same way.
  struct SoftmaxBuffers {
    Value q, k, v, gate, out, lse; // gate, lse: null when absent
    /// The attention sinks [H], which the kernels that end rows (write o)
    /// bind after the gate; null when absent.
    Value sinks;
    /// A paged cache's page table and key lengths (null otherwise), which
    /// kernels bind after v.
    Value pageTable, keyLengths;
    /// A ragged batch's offsets of the queries and (unless paged) of the
    /// keys, which kernels bind after those (null otherwise).
    Value queryOffsets, keyOffsets;
    /// B, Lq, Lk as host index values; with a paged cache, Lk is the most
    /// keys the page table holds (MP * P), what splits are planned for. In
    /// a ragged batch Lq is T, the rows of all sequences, and Lk Tk (or
    /// MP * P).
    Value batch, lq, lk;
    /// The split-KV partials: o [B, H, Lq, S, Dv] and lse [B, H, Lq, S].
    Value partialOut, partialLse;
    /// Sparse and tree attention: the block or token selection, or the
    /// tree's parents (null for dense attention).
    Value selection;
    /// The buffers of the tensors the variant regions read, which every
    /// kernel that scores keys binds last.
    SmallVector<Value> variantTensors;

    /// [gate], [sinks], o, [lse]: what a kernel that ends rows binds after
    /// its inputs.
    SmallVector<Value> rowOutputs() const;
    /// keyBindings, rowOutputs, variant tensors: a kernel that writes whole
    /// rows.
    SmallVector<Value> rowBindings(Value plan = Value()) const;
    /// keyBindings, partial o, partial lse, variant tensors.
    SmallVector<Value> splitBindings(Value plan = Value()) const;
    /// q, k, v, then with a paged cache the page table and key lengths,
    /// then in a ragged batch the offsets and the kernel's `plan`.
    SmallVector<Value> keyBindings(Value plan = Value()) const;
    /// `bindings` followed by the variant tensors.
    SmallVector<Value> withVariantTensors(SmallVector<Value> bindings) const;
    /// [queries' offsets, plan] (a ragged batch's merge plan, when given),
    /// partial o, partial lse, rowOutputs.
    SmallVector<Value> mergeBindings(Value plan = Value()) const;
  };
  /// Looks up the buffers of `op`'s operands (the gate when `gated`, the
  /// key selection of sparse and tree attention, whose sizes it checks at
  /// run time) and creates its results' buffers.
  SoftmaxBuffers bindSoftmax(ImplicitLocOpBuilder &b, AttentionOpInterface op,
                             bool gated);
  /// The host side of a linear recurrence: the bindings of its kernels,
  /// q, k, v, [g], [beta], S_init, [z, w], o, S (o and S created), and B, L.
  struct RecurrenceBuffers {
    SmallVector<Value> bindings;
    Value batch, length;
  };
  RecurrenceBuffers bindRecurrence(ImplicitLocOpBuilder &b,
                                   AttentionOpInterface op);

  /// Allocates the split-KV partials of `buffers` for `batch` x `numHeads`
  /// x `rows` x `splits` (all 0 on calls that do not decode).
  void allocateSplitPartials(ImplicitLocOpBuilder &b, SoftmaxBuffers &buffers,
                             int64_t numHeads, int64_t valueDim, Value batch,
                             Value rows, Value splits);

  /// A ragged batch's work (RaggedPlan): its three tables, sized from the
  /// dims, with the split partials ([entries, H, Dv] and [entries, H]), and
  /// the plan kernel that fills them dispatched at `b`.
  struct RaggedWork {
    Value flashPlan, splitPlan, mergePlan;
    Value flashEntries, splitEntries, mergeEntries;
  };
  RaggedWork planRaggedBatch(ImplicitLocOpBuilder &b, AttentionOpInterface op,
                             const SoftmaxAttentionShape &shape,
                             const RaggedPlan &plan, SoftmaxBuffers &s);

  func::FuncOp entry;
  StringRef target;
  func::FuncOp host;
  /// Tensor value -> buffer (host argument or allocation); dim results ->
  /// host index values.
  IRMapping buffers;

private:
  /// The ops dispatchOp takes: not attention, with kernels of their own.
  static bool isKernelOp(Operation *op);
  /// Binds the buffers of such an op, checks its sizes at run time, creates
  /// its results' buffers and calls dispatchOp.
  void lowerOp(ImplicitLocOpBuilder &b, Operation *op);
  /// Whether `op` can be lowered, with an error saying why not; called on
  /// every attention op before anything is built.
  LogicalResult checkLowerable(AttentionOpInterface op);
  /// Marks the entry inputs whose values kernels index with (tree parents,
  /// accepted paths) with the contract the runtime checks them against.
  LogicalResult addValueContracts(SmallVectorImpl<DictionaryAttr> &argAttrs);
  /// Sets an input's value contract: (argument, contract, the input it is
  /// checked against, the queries' input).
  using ContractSetter =
      function_ref<void(BlockArgument, StringRef, std::optional<unsigned>,
                        std::optional<unsigned>)>;
  /// The contracts of the page table and key lengths of a block_meta,
  /// select_topk or select_topp over a paged cache.
  LogicalResult addPagedSelectionContracts(Operation *op,
                                           ContractSetter setContract);
  /// A paged cache's page table (against the cache's pages) and key
  /// lengths (against the table, and with `checkQueries` each sequence's
  /// query rows in `queries`: q, or a ragged batch's offsets).
  LogicalResult setPageTableContracts(Operation *op, Value pageTable,
                                      Value seqLens, Value cache,
                                      BlockArgument queries, bool checkQueries,
                                      ContractSetter setContract);

  /// Result value -> output argument index of the host function.
  llvm::DenseMap<Value, unsigned> returnedAt;
  unsigned numInputs = 0, numOutputs = 0;
  unsigned kernelCount = 0;
};

} // namespace mlir::attn

#endif // ATTN_PASSES_ENTRYLOWERING_H
