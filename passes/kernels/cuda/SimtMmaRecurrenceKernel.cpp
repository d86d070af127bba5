//===- SimtMmaRecurrenceKernel.cpp - Linear recurrences on tensor cores ---===//
//
// The chunked linear recurrence (SPEC §2) with the chunk's matrix products
// on attn_kernel.warp_mma: tensor cores (mma.sync) for f16 / bf16 storage,
// three tf32 products a step for f32 (WarpMma.cpp). The algebra is the SIMT
// kernel's (SimtRecurrenceKernels.cpp) and fla's chunk_gated_delta_rule, in
// fla's three parts: what each chunk needs from its own steps, all chunks at
// once; the chain of chunks, which carries the state and nothing else; the
// outputs, all chunks at once again. Only the chain is sequential, and on
// the GPU it has few blocks (a value head's state at B = 1), so it does as
// little as the state needs. With G the cumulative log-decay inside a
// chunk of C steps, q^ = scale q / |q| and k^ = k / |k| (or scale q and k
// without qk_l2norm):
//
// 1. What each chunk needs from its own steps (ChunkMmaKernel::Local), a
//    block per (sequence, value head, chunk), all chunks at once: per step
//    G and 1 / |k|, and for the delta rules the WY form
//
//      (I + A) [W | U] = [beta exp(G) k^ | beta v],
//      A[t, s] = beta_t k^_t . k^_s exp(G_t - G_s) for s < t,
//
//    so that the chunk's new values are V' = U - W S (for the rules
//    without delta, V' = V). As fla's chunk_scaled_dot_kkt, solve_tril and
//    recompute_w_u:
//
//      gram:    A from K K^T  [K K^T], k as stored;
//      invert:  T = (I + A)^-1 in blocks of 16 steps: the diagonal blocks
//               by forward substitution (a thread per column), the others
//               nearest the diagonal first, T_ij = -T_ii sum_k A_ik T_kj;
//      solve:   W = T diag(beta exp(G) / |k|) K and U = T diag(beta) V
//               [T' K, T' V], k and v as stored.
//
// 2. The chain (ChunkMmaKernel::States), a block per (sequence, value
//    head, tile of `columns` state columns), G = keyGroups warps per 16 of
//    them (2; 4 in the narrow form for few blocks). Its tile of the state
//    is kept transposed, S^T [columns, Dk] in f32, as mma accumulator
//    fragments in the warps' registers (warp w holds state columns 16 (w %
//    T) .. 16 (w % T) + 15 of the T tiles of 16, their features in range w
//    / T of G equal ranges of the padded Dk) from S_init to the final
//    state, and as a copy in shared memory for the products that read it.
//    The chain is sequential and runs on few blocks (a value head's tile
//    at B = 1), so each warp's dependent products are kept short: G warps
//    share each product's work, and each SM sub-partition has several
//    warps to hide each other's latency. Each chunk's starting state goes
//    to a temporary (ChunkTemporaries). Per chunk:
//
//      stage:   chunk j + 1's k rows as stored, W's rows, G and 1 / |k|,
//               and the tile's columns of U (or v), copied into one of
//               two stages while chunk j's products use the other;
//      values:  V' = U - W S  [W S]; V' goes to its temporary, and
//               U'^T = (exp(G_last - G_s) V'_s / |k_s|)^T goes to shared
//               memory (for the rules without delta, from V);
//      update:  S^T = exp(G_last) S^T + U'^T K  [U'^T K].
//
// 3. The outputs (ChunkMmaKernel::Outputs), a block per (sequence, value
//    head, chunk, column tile), all chunks at once, from the chunk's
//    starting state and V':
//
//      stage:   q and k rows as stored, S^T and V' as the chain's parts
//               (all copies in flight at once), G and 1 / |k| (the local
//               kernel's), scale / |q|;
//      score:   O = exp(G_t) q^_t S  [Q S], and P = q^_t . k^_s
//               exp(G_t - G_s) for s <= t  [Q K^T] in the warps' registers;
//      finish:  O += P V', stored.
//
// Nothing on the chain solves a system (the solves, 64 dependent steps per
// column, run in the first kernel), sums a norm or a decay, or computes an
// output, and it waits for no load but copies issued a chunk earlier.
//
// The products read q and k as stored and scale their results:
// (q / |q|) . (k / |k|) = (q . k) / (|q| |k|), so that bf16 rows are exact
// tensor-core operands. Operands computed in f32 (the state, W, P, V', U'^T)
// would lose up to 2^-9 of their value rounded to bf16: they go into the
// products as two bf16 parts, hi = bf16(x) and lo = bf16(x - hi), and a
// product of two such operands is hi hi + hi lo + lo hi (lo lo is below
// f32's rounding), which keeps about 16 bits: enough for SPEC's 1e-4 on
// the f32 state over hundreds of chunks, which one rounded product (fla's
// bf16 kernels) would not keep. f16 rows are two exact bf16 parts; f32
// storage computes in f32, one part each. W, V' and the chunks' starting
// states pass between the kernels as the very parts the products take:
// the kernel that computes one splits it as it stores it, and the kernels
// that read it copy it into shared memory as it is (cp.async).
//
// A decay per key feature (gla, kda) makes G_t a vector, and puts
// exp(G_t,i - G_s,i) inside the sums of A and P, feature by feature. As
// fla's chunk_gla and chunk_kda, those sums go by blocks of 16 steps, with
// every factor at most 1:
//
//   s in t's block (the diagonal blocks): per entry, in f32, a lane per
//     entry (decayedDiagonalBlocks);
//   s in an earlier block J, whose last step is e: exp(G_t - G_s) =
//     exp(G_t - G_e) exp(G_e - G_s), so the block's sums are the product
//     [x_t exp(G_t - G_e)] [k_s exp(G_e - G_s)]^T on warp_mma, one per J
//     (decayedBlockProducts), x being k (A) or q (P).
//
// The other products take the decays on an operand: W = T diag(beta_s /
// |k_s|) (k_s exp(G_s)); the local kernel stores G and the keys decayed to
// the chunk's last step, k_s exp(G_last - G_s), so that the chain's
// update is S^T = exp(G_last) S^T (feature by feature) + U'^T K' with K'
// those keys; and O = (q_t exp(G_t)) S.
//
// A draft tree (SPEC §10) is one chunk whose ancestor relation takes the
// causal mask's place: the local and outputs kernels mark each node's path
// (markAncestors), which masks A and P and sums G along it; the chain makes
// V' and stores S_init as the chunk's starting state, and nothing else (no
// final state). Trees with decays per feature take the SIMT kernel.
//
// Decays appear only as exp(G_t - G_s) with t >= s or exp(G_t) with
// G_t <= 0, so nothing overflows (the masked entries select 0 whatever
// their exponent). A call whose sequences are a step each (decode) takes
// the SIMT kernel, which carries a column per thread without products of
// 16 padded rows (GpuDispatches.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cuda/SimtKernels.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>

using namespace mlir;
using namespace mlir::attn;

ChunkTemporaries::ChunkTemporaries(func::FuncOp kernel,
                                   const LinearRecurrenceShape &shape) {
  // After the recurrence's bindings, before the workgroup: read from the
  // last.
  unsigned next = kernel.getNumArguments() - 1;
  auto previous = [&] { return kernel.getArgument(--next); };
  states = previous();
  scales = previous();
  if (shape.featureDecay()) {
    decayedKeys = previous();
    featureLogDecays = previous();
  }
  if (shape.isDelta()) {
    projected = previous();
    u = previous();
    w = previous();
  }
}

namespace {

/// An operand of the products: its parts, hi first (see the file comment).
using Parts = SmallVector<Value, 2>;

/// Stores `x` into a temporary [parts, at...] as the products take it:
/// hi = x rounded to the temporary's type, then lo = x - hi when there are
/// two parts.
void storeTemporaryParts(SimtEmitter &e, Value x, Value temporary,
                         ValueRange at) {
  auto type = cast<MemRefType>(temporary.getType());
  auto partAt = [&](int64_t part) {
    SmallVector<Value> index{e.index(part)};
    llvm::append_range(index, at);
    return index;
  };
  e.store(x, temporary, partAt(0));
  if (type.getDimSize(0) == 2)
    e.store(e.fsub(x, e.widen(e.narrow(x, type.getElementType()))), temporary,
            partAt(1));
}

/// stageRows' rows of a per-step tensor of `seq` at `head` (with `part`, of
/// a temporary [parts, ..]): row t is step first + t, which exists below
/// `n` (zeros past the chunk's steps).
std::function<std::pair<SmallVector<Value>, Value>(Value)>
stepRows(SimtEmitter &e, const RecurrenceSequence &seq, Value head, Value first,
         Value n, std::optional<int64_t> part = std::nullopt) {
  return [&e, &seq, head, first, n,
          part](Value t) -> std::pair<SmallVector<Value>, Value> {
    SmallVector<Value> at;
    if (part)
      at.push_back(e.index(*part));
    llvm::append_range(at, seq.step(head, e.add(first, t)));
    return {at, e.icmp(arith::CmpIPredicate::ult, t, n)};
  };
}

/// Where chunk `chunk` of sequence `batch` keeps its starting state in
/// ChunkTemporaries::states: slot batch * ceil(L / C) + chunk, or in a
/// ragged batch floor(o_b / C) + b + chunk with o_b = cu_seqlens[b]. The
/// ragged slots are distinct and below ceil(T / C) + B: sequence b's last,
/// floor(o_b / C) + b + ceil(n_b / C) - 1, is at most floor(o_{b+1} / C) +
/// b, below sequence b + 1's first.
Value chunkStateSlot(SimtEmitter &e, const LinearRecurrenceShape &shape,
                     const RecurrenceBindings &args, Value batch, Value chunk) {
  Value steps = e.index(shape.chunkSize);
  if (!shape.ragged)
    return e.add(e.mul(batch, e.ceilDiv(e.dim(args.q, 2), steps)), chunk);
  Value offset = e.toIndex(e.loadInt(args.offsets, {batch}));
  return e.add(e.add(e.div(offset, steps), batch), chunk);
}

/// The chunk of a block of the kernels with a block per (sequence, value
/// head, chunk): its batch row, value head, chunk of the sequence, first
/// step and steps (0 for a block past the last chunk).
struct BlockChunk {
  Value batch, hv, index, first, n;
};

/// Maps block `block` (the local kernel's order) to its chunk and
/// emplaces `seq` for its sequence.
BlockChunk mapChunkBlock(SimtEmitter &e, const LinearRecurrenceShape &shape,
                         const RecurrenceBindings &args, Value block,
                         std::optional<RecurrenceSequence> &seq) {
  Value c0 = e.index(0), c1 = e.index(1);
  Value heads = e.index(shape.numValueHeads), chunk = e.index(shape.chunkSize);
  auto lt = [&](Value x, Value y) {
    return e.icmp(arith::CmpIPredicate::ult, x, y);
  };
  BlockChunk found;
  if (!shape.ragged) {
    // Block order (batch, value head, chunk), the chunk fastest.
    Value chunks = e.maxS(e.ceilDiv(e.dim(args.q, 2), chunk), c1);
    found.index = e.rem(block, chunks);
    Value rest = e.div(block, chunks);
    found.hv = e.rem(rest, heads);
    found.batch = e.div(rest, heads);
    seq.emplace(e, shape, args, found.batch);
    found.first = e.mul(found.index, chunk);
    found.n = e.maxS(e.minS(chunk, e.sub(seq->length, found.first)), c0);
    return found;
  }
  // Block order (chunk slot, value head): slot j is the j-th chunk of the
  // batch, sequence by sequence; slots past the last have none.
  found.hv = e.rem(block, heads);
  Value slot = e.div(block, heads);
  Value sequences = e.sub(e.dim(args.offsets, 0), c1);
  auto chunksOf = [&](Value seqIndex) {
    Value begin = e.toIndex(e.loadInt(args.offsets, {seqIndex}));
    Value end = e.toIndex(e.loadInt(args.offsets, {e.add(seqIndex, c1)}));
    return e.ceilDiv(e.sub(end, begin), chunk);
  };
  SmallVector<Value> walked = e.whileLoop(
      {c0, slot},
      [&](ValueRange it) {
        Value inBatch = lt(it[0], sequences);
        // Only read a sequence's offsets while it exists.
        Value past = e.ifElse(
            inBatch,
            [&]() -> SmallVector<Value> {
              return {
                  e.icmp(arith::CmpIPredicate::uge, it[1], chunksOf(it[0]))};
            },
            [&]() -> SmallVector<Value> {
              return {arith::ConstantIntOp::create(e.b, e.b.getI1Type(), 0)};
            })[0];
        return e.andI(inBatch, past);
      },
      [&](ValueRange it) -> SmallVector<Value> {
        return {e.add(it[0], c1), e.sub(it[1], chunksOf(it[0]))};
      });
  Value exists = lt(walked[0], sequences);
  found.batch = e.select(exists, walked[0], c0);
  found.index = e.select(exists, walked[1], c0);
  seq.emplace(e, shape, args, found.batch);
  found.first = e.mul(found.index, chunk);
  found.n =
      e.select(exists, e.minS(chunk, e.sub(seq->length, found.first)), c0);
  return found;
}

/// One of the lane's elements of an accumulator fragment: its row and
/// column in the product, its place in the lane's register buffer, and
/// whether the lane's warp stores it (null: always).
struct FragmentElement {
  Value row, column;
  SmallVector<Value, 2> at;
  Value owned;
};

/// The lane's two elements of an accumulator fragment in one row, at
/// columns `column` (even) and `column` + 1: what a lane reads of a row of
/// f32 at them takes one 8-byte access.
struct FragmentPair {
  Value row, column;
  std::array<SmallVector<Value, 2>, 2> at;
  Value owned;
};

/// A chunk's staged inputs in shared memory: its k rows as stored (zero
/// rows past its steps and zero features past Dk; in the chain of a rule
/// with a decay per key feature the keys decayed to the chunk's last step,
/// as the parts), W's rows (the chain of a delta rule), G and 1 / |k| per
/// step ([C, 2], f32), the chain's values for its column tile ([C, columns
/// + valuePadding]: U in f32 for the delta rules, else v as stored) and, the
/// chain of a decay per key feature, G of the chunk's last step as copied, then
/// exp(G) ([1, Dkp], f32: exponentiateLastDecay).
struct ChunkStage {
  Parts keys, w;
  Value scales, values, lastDecay;
};

/// The least row width of at least `least` elements that is `residue`
/// modulo `modulus`.
int64_t widthAt(int64_t least, int64_t residue, int64_t modulus) {
  return least + ((residue - least % modulus) % modulus + modulus) % modulus;
}

/// The local kernel's f32 A, [C, transformWidth(C)]. Where A also holds
/// T diag(w)'s one f32 part (allocateLocalBuffers), a product's operand
/// whose tf32 fragments are read a lane an element, the accumulator
/// fragments' scalar stores (lane l at row l / 4, column 2 (l % 4)) meet 2
/// lanes a bank at a stride of 4 modulo 8 banks, the least scalar stores
/// can (an even stride leaves 16 banks to 32 lanes, an odd one the same
/// on odd rows). Elsewhere a lane stores its two columns at once
/// (`pairedStores`, 8 bytes), and a stride of 8 modulo 16 banks puts a
/// phase's 4 rows on 32 banks. Either way the substitution's two blocks in
/// a warp, 16 rows and columns apart, meet none (16 (W + 1) banks apart: W
/// even), and rows are 16-byte pieces.
int64_t transformWidth(int64_t chunkSize, bool pairedStores) {
  return pairedStores ? widthAt(chunkSize + 1, 8, 16)
                      : widthAt(chunkSize + 1, 4, 8);
}

/// A tree's ancestor marks, [C, ancestryWidth(C)] bytes: rows of an odd
/// number of words, so that threads reading a row each (the decays summed
/// along a path) or a fragment's rows meet different banks.
int64_t ancestryWidth(int64_t chunkSize) { return widthAt(chunkSize, 4, 8); }

/// The local kernel's T, [C, inverseWidth(C)]: the block sums' stores put
/// two rows of 16 columns in a warp, which a stride of 16 modulo 32 banks
/// keeps apart, and the column walks' two blocks in a warp, 16 rows and
/// columns apart, need an even stride.
int64_t inverseWidth(int64_t chunkSize) {
  return widthAt(chunkSize + 1, 16, 32);
}

/// The chain (ChunkMmaKernel::States) or the outputs
/// (ChunkMmaKernel::Outputs) of the file comment: the two share the
/// staged chunk's layout, the fragments' geometry and the products.
class SimtMmaRecurrenceKernel {
public:
  SimtMmaRecurrenceKernel(OpBuilder &builder, Location loc, StringRef name,
                          const LinearRecurrenceShape &shape,
                          const SimtMmaRecurrenceTiling &mma,
                          ChunkMmaKernel kind, const GpuTiling &tiling,
                          TypeRange bindingTypes);

  /// Emits the kernel's phases in order and returns it.
  func::FuncOp build();

private:
  // The local kernel, in the order buildLocal() emits its phases.
  void buildLocal();
  /// The chunk's k rows as the products' operand (zeros past its steps
  /// and past Dk), its g and beta (zero past its steps).
  void stageLocalChunk(Value first, Value n);
  /// Thread `thread`'s copies of the chunk's v rows as the products'
  /// operand (the delta rules' U), in flight until an async_wait.
  void stageValueRows(Value thread, Value first, Value n);
  /// Per step G and 1 / |k|, in shared memory and the temporaries.
  void storeStepScales(Value first, Value n);
  /// A[t, s] = beta_t k^_t . k^_s exp(G_t - G_s) below the diagonal, 0 on
  /// and above it  [K K^T].
  void computeTransform();
  /// T = (I + A)^-1, in blocks of 16 steps.
  void invertTransform();
  /// W (`keyColumns`) or U = T diag(weights) rows  [T' K or T' V], stored
  /// for the chunk's steps.
  void solveByProduct(bool keyColumns, Value first, Value n);
  /// T's entries of row block `rowBlock` and column block `columnBlock`
  /// ([16 x 16]) times the rows of `right` from `rightRow`: element (r, c)
  /// of T[rowBlock] x right[.., column], summed over `blocks` blocks of 16.
  Value blockRowSum(Value left, Value leftRow, Value leftColumn, Value right,
                    Value rightColumn, int64_t terms);

  // The chain, in the order buildStates() emits its phases.
  void buildStates();
  void loadInitialState(Value chunks);
  /// Thread `thread`'s copies of chunk `chunk`'s inputs into `stage`.
  void stageChunk(Value thread, Value chunk, const ChunkStage &stage);
  void projectValues(const ChunkStage &stage, Value first, Value n,
                     Value last);
  void prepareUpdate(const ChunkStage &stage, Value last);
  /// With a decay per key feature, the stage's G_last into exp(G_last),
  /// thread `thread`'s share.
  void exponentiateLastDecay(const ChunkStage &stage, Value thread);
  void updateState(const ChunkStage &stage, Value last);
  void storeFinalState();
  /// A warp of the chain (keyGroups warps per 16 state columns): its 16
  /// state columns (S^T's rows from `stateRow`, tile `tile` of the
  /// columns) and their state rows from `keyFirst` (keyRange of them); in
  /// W S its row tiles (chunkRow(tile)) and the columns from `columnFirst`
  /// (columnRange of them).
  struct ChainWarp {
    Value tile, stateRow, keyFirst, columnFirst;
  };
  ChainWarp chainWarp(Value warp);
  /// Thread `thread`'s share of storing the state's shared copy (its
  /// parts) as the starting state of chunk `chunk`.
  void storeChunkState(Value thread, Value chunk);

  // The outputs, in the order buildOutputs() emits its phases.
  void buildOutputs();
  void stageOutputInputs(Value slot, Value first, Value n);
  void convertQueryKeyRows(Value first, Value n);
  void convertValues(Value first, Value n);
  void stageScales(Value first, Value n);
  void scoreChunk();
  void finishOutputs(Value first, Value n);

  // A decay per key feature (gla, kda): the products whose sums carry
  // exp(G_t - G_s) feature by feature (see the file comment).
  /// The local kernel's G per step and feature: g's sums, in place.
  void sumFeatureDecays();
  /// The local kernel's G and keys decayed to the chunk's last step into
  /// their temporaries, for the chunk's steps.
  void storeFeatureDecays(Value first, Value n);
  /// The outputs' copy of the local kernel's G (steps past the chunk's
  /// as its last, so that no decay grows).
  void stageFeatureDecays(Value first, Value n);
  /// decayedRows[s] = keys[s] exp(G_e - G_s), e the last step of s's
  /// block of 16 steps.
  void decayKeysToBlockEnd(ArrayRef<Value> keys);
  /// Warp `warp`'s share: the diagonal blocks of its row tiles, sum_i
  /// lhs[t, i] rhs[s, i] exp(G_t,i - G_s,i) for s <= t in t's block of
  /// 16, into its rows of `diagonal` (entries above the diagonal are not
  /// written: the callers' masks drop them).
  void decayedDiagonalBlocks(Value warp, Value lane, ArrayRef<Value> lhs,
                             ArrayRef<Value> rhs);
  /// The same sums for s in the blocks before t's, into the warps'
  /// fragments `accRegs` (C columns; 0 in and after t's block), a product
  /// per block J on warp_mma.
  void decayedBlockProducts(ArrayRef<Value> lhs, Value accRegs);
  /// Element x of those sums (a fragment of `acc`, the warp's): the
  /// products' before t's block, the diagonal's in it, 0 after.
  Value decayedEntry(const FragmentElement &x, Value acc, Value warp);
  /// The buffers of the sums (decayedRows, lhsScratch, diagonal).
  void allocateDecayedProductBuffers();
  /// Rows of lhsScratch and diagonal: a region per warp.
  int64_t scratchRows() const {
    return mma.warps * tilesPerWarp * WarpMmaOp::kRows;
  }
  /// The first row of warp `warp`'s region.
  Value scratchRow(Value warp) {
    return e.mul(warp, e.index(tilesPerWarp * WarpMmaOp::kRows));
  }
  // Trees (SPEC §10): the whole tree is one chunk, whose ancestor relation
  // takes the causal mask's place.
  /// ancestry[t, s] = 1 where node s is t or an ancestor of t, else 0,
  /// for the block's tree: each node's path walked up, a thread per node.
  void markAncestors(Value n);
  /// Whether node s is t or an ancestor of t (for a chain, s <= t).
  Value isAncestorOrSelf(Value s, Value t);
  Value featureLogDecayOf(Value t, Value i) {
    return e.load(featureLogDecay, {t, i});
  }

  // Both.
  void allocateBuffers();
  /// The buffers of a chunk's stage (ChunkStage).
  ChunkStage allocateStage();

  /// Runs `body(warp, lane, thread)` on every thread of the block.
  void eachWarp(function_ref<void(Value warp, Value lane, Value thread)> body,
                SimtEmitter::Sync sync = SimtEmitter::Sync::Block);
  /// The first row of warp `warp`'s row tiles in the products over the
  /// chunk's steps: tile min(w T, C / 16 - T) of T per warp, so that
  /// every warp has whole tiles of the chunk when there are fewer tiles
  /// than warps (it then repeats another warp's, which stores them).
  Value chunkRow(Value warp);
  /// Runs `body` for each of the lane's elements of an accumulator
  /// fragment of `tiles` row tiles from `firstRow` and `n` columns. With
  /// `warp`, an element is owned by the warp whose own tiles hold its row
  /// (chunkRow); without, always.
  void eachFragmentElement(Value firstRow, Value lane, int64_t tiles, int64_t n,
                           Value warp,
                           function_ref<void(const FragmentElement &)> body);
  /// eachFragmentElement by the lane's pairs of adjacent elements.
  void eachFragmentPair(Value firstRow, Value lane, int64_t tiles, int64_t n,
                        Value warp,
                        function_ref<void(const FragmentPair &)> body);
  /// acc (+)= lhs rhs over the parts, smaller terms first: lo hi, hi lo,
  /// hi hi. The accumulator is the lane's fragment; `lhsFragments`: lhs
  /// parts are the warp's fragments (register buffers).
  void multiply(ArrayRef<Value> lhs, ArrayRef<Value> rhs, Value acc, Value row,
                Value lane, int64_t n, int64_t k, bool rhsTransposed,
                bool accumulate, int64_t rowTiles, bool lhsFragments = false);
  /// Thread `thread`'s share of copying `count` rows of `dim` features of
  /// `from` into the operand `parts` ([count, padded + ...], zeros past the
  /// rows rowAt says exist and past `dim`): by cp.async where one part is
  /// the rows as stored, else converted (f16 into two bf16 parts, loads
  /// the thread waits for).
  void stageOperandRows(
      Value thread, int64_t count, Value from, ArrayRef<Value> parts,
      int64_t dim, int64_t padded,
      function_ref<std::pair<SmallVector<Value>, Value>(Value)> rowAt);
  /// Stores `x` into `parts` at `at`: hi = x rounded to the parts' type,
  /// then lo = x - hi when there are two.
  void storeParts(Value x, ArrayRef<Value> parts, ValueRange at);
  /// The buffers of `count` parts of shape `shape` in shared memory.
  Parts sharedParts(int64_t count, ArrayRef<int64_t> shape);
  /// Each part's view of rows (`dim` 0) or columns (`dim` 1) [first, first
  /// + count) of a 2-D operand, as a product's operand (attn_kernel.warp_mma:
  /// `first` keeps the rows' 16-byte alignment).
  Parts sliceParts(ArrayRef<Value> parts, int64_t dim, Value first,
                   int64_t count);

  /// G_t and 1 / |k_t| of a stage's scales.
  Value logDecayOf(Value scales, Value t) {
    return e.load(scales, {t, e.index(0)});
  }
  Value keyScaleOf(Value scales, Value t) {
    return e.load(scales, {t, e.index(1)});
  }
  /// exp(G_t - G_s) (1 without decay).
  Value decayBetween(Value scales, Value t, Value s);
  /// exp(G_t) (1 without decay).
  Value decayTo(Value scales, Value t);
  /// Whether state column `c` of the tile exists (is below Dv).
  Value isColumn(Value c) { return lt(columnOf(c), e.index(Dv)); }
  Value columnOf(Value c) { return e.add(col0, c); }
  /// The block's first state column in its tile order (the tile fastest
  /// in both kernels' block order); returns the rest of the block index.
  Value mapColumnTile(Value block);
  Value lt(Value x, Value y) { return e.icmp(arith::CmpIPredicate::ult, x, y); }
  Value both(Value x, Value y) { return e.andI(x, y); }
  void ifOwned(Value owned, function_ref<void()> body) {
    if (owned)
      e.ifThen(owned, body);
    else
      body();
  }
  bool outputs() const { return kind == ChunkMmaKernel::Outputs; }
  bool local() const { return kind == ChunkMmaKernel::Local; }
  /// 1 / |k_t| of the local kernel (1 without qk_l2norm).
  Value localKeyScale(Value t) {
    return keyScales ? e.load(keyScales, {t}) : e.scalar(1.0);
  }
  /// G_t of the local kernel (0 without decay).
  Value localLogDecay(Value t) {
    return logDecay ? e.load(logDecay, {t}) : e.scalar(0.0);
  }
  /// The local kernel's shared buffers (allocateBuffers).
  void allocateLocalBuffers();

  const LinearRecurrenceShape &shape;
  const SimtMmaRecurrenceTiling &mma;
  const ChunkMmaKernel kind;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  SimtEmitter e;
  RecurrenceBindings args;
  ChunkTemporaries temporaries;
  const int64_t C, Dk, Dv, Dkp, columns, tilesPerWarp, threads;
  // The chain's warps' ranges of the padded Dk (their state) and of the
  // columns (their share of W S): ChainWarp.
  const int64_t keyRange, columnRange;
  const bool scalarDecay, featureDecay, delta;

  Value c0, c1, c16, batch, hv, hk, col0;
  std::optional<RecurrenceSequence> seq;
  // Shared: the chunk's inputs (the chain's in two stages: chunk j's used
  // while chunk j + 1's are copied), the products' operands and (outputs)
  // q's row scales.
  SmallVector<ChunkStage, 2> stages;
  Parts queries, stateCopy, valueOperand, updateOperand;
  Value queryScale;
  // Registers: the state's tile (S^T, the chain), a product over the
  // state (W S in the chain, the outputs in the other), the scores over
  // the chunk's steps (hi part) and their lo part.
  Value stateRegs, outRegs, pairRegs, scoreLoRegs;
  // The local kernel's: shared k and (delta) v rows as the products'
  // operands; per step g, G, 1 / |k| and beta; A, T = (I + A)^-1; T
  // diag(weights) as the products' parts.
  // Registers: K K^T, W and U.
  Parts localKeys, localValues, weighted;
  Value gates, logDecay, keyScales, betas, transform, inverse;
  Value gramRegs, keyRegs, valueRegs;
  int64_t Dvp = 0;
  // A decay per key feature (local and outputs kernels): G per step and
  // feature [C, Dkp + 1] (f32); the key rows decayed to their block's last
  // step [C, Dkp] (the products' rhs, as the parts); each warp's lhs rows
  // [16 tilesPerWarp, Dkp] (as the parts) and diagonal blocks [16
  // tilesPerWarp, 17] (f32); in registers a product's fragment of 16
  // columns.
  Value featureLogDecay, diagonal, blockRegs;
  Parts decayedRows, lhsScratch;
  // Trees (local and outputs kernels): the ancestor relation [C, C], i8.
  Value ancestry;
};

SimtMmaRecurrenceKernel::SimtMmaRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const SimtMmaRecurrenceTiling &mma,
    ChunkMmaKernel kind, const GpuTiling &tiling, TypeRange bindingTypes)
    : shape(shape), mma(mma), kind(kind), guard(builder), func([&] {
        GpuTiling kernelTiling = tiling;
        kernelTiling.blockThreads = mma.threads(kind);
        func::FuncOp func = createSimtKernel(
            builder, loc, name, bindingTypes, kernelTiling,
            kind == ChunkMmaKernel::Local    ? "chunk_local"
            : kind == ChunkMmaKernel::States ? "chunk_states"
                                             : "chunk_outputs");
        func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
        return func;
      }()),
      b(loc, builder), e(b, mma.threads(kind)), args(func, shape),
      temporaries(func, shape), C(shape.chunkSize), Dk(shape.keyDim),
      Dv(shape.valueDim), Dkp(mma.paddedKeyDim), columns(mma.columns),
      tilesPerWarp(mma.rowTiles), threads(mma.threads(kind)),
      keyRange(Dkp / mma.keyGroups), columnRange(columns / mma.keyGroups),
      scalarDecay(shape.scalarDecay()), featureDecay(shape.featureDecay()),
      delta(shape.isDelta()),
      Dvp(roundUp(shape.valueDim, WarpMmaOp::kReductionStep)) {}

func::FuncOp SimtMmaRecurrenceKernel::build() {
  c0 = e.index(0), c1 = e.index(1), c16 = e.index(WarpMmaOp::kRows);
  if (local())
    buildLocal();
  else if (outputs())
    buildOutputs();
  else
    buildStates();
  func::ReturnOp::create(b);
  return func;
}

Value SimtMmaRecurrenceKernel::mapColumnTile(Value block) {
  Value tiles = e.index(llvm::divideCeil(Dv, columns));
  col0 = e.mul(e.rem(block, tiles), e.index(columns));
  return e.div(block, tiles);
}

//===----------------------------------------------------------------------===//
// The local kernel
//===----------------------------------------------------------------------===//

void SimtMmaRecurrenceKernel::buildLocal() {
  BlockChunk chunk = mapChunkBlock(e, shape, args, args.workgroup, seq);
  batch = chunk.batch, hv = chunk.hv;
  hk = e.div(hv, e.index(shape.numValueHeads / shape.numKeyHeads));
  allocateBuffers();
  stageLocalChunk(chunk.first, chunk.n);
  if (ancestry)
    markAncestors(chunk.n);
  if (featureDecay)
    sumFeatureDecays();
  storeStepScales(chunk.first, chunk.n);
  if (featureDecay)
    storeFeatureDecays(chunk.first, chunk.n);
  if (!delta)
    return;
  // v's rows are copied while A, T and W are made.
  e.eachThread(
      [&](Value thread) { stageValueRows(thread, chunk.first, chunk.n); });
  computeTransform();
  invertTransform();
  solveByProduct(/*keyColumns=*/true, chunk.first, chunk.n);
  e.eachThread([&](Value) { AsyncWaitOp::create(b); });
  solveByProduct(/*keyColumns=*/false, chunk.first, chunk.n);
}

void SimtMmaRecurrenceKernel::allocateLocalBuffers() {
  const int64_t pad = mma.rowPadding();
  // k's rows only where something reads k (its norms, A, W, the decayed
  // keys).
  if (shape.normalizeQueryKey || delta || featureDecay)
    localKeys = sharedParts(mma.rawParts, {C, Dkp + pad});
  if (delta)
    localValues = sharedParts(mma.rawParts, {C, Dvp + pad});
  if (scalarDecay) {
    gates = e.shared({C});
    logDecay = e.shared({C});
  }
  if (shape.normalizeQueryKey)
    keyScales = e.shared({C});
  if (featureDecay)
    featureLogDecay = e.shared({C, Dkp + 1});
  // A tree's paths mask A and sum the decays; the linear rule has neither
  // here.
  if (shape.tree && (scalarDecay || delta))
    ancestry = e.shared({C, ancestryWidth(C)}, b.getI8Type());
  if (!delta)
    return;
  betas = e.shared({C});
  const bool shareA = mma.weightedInTransform();
  transform = e.shared({C, transformWidth(C, /*pairedStores=*/!shareA)});
  inverse = e.shared({C, inverseWidth(C)});
  weighted =
      shareA ? Parts{transform} : sharedParts(mma.computedParts, {C, C + pad});
  const int64_t fragmentColumns = WarpMmaOp::kFragmentColumns;
  gramRegs = e.registers({tilesPerWarp * C / fragmentColumns, 4});
  keyRegs = e.registers({tilesPerWarp * Dkp / fragmentColumns, 4});
  valueRegs = e.registers({tilesPerWarp * Dvp / fragmentColumns, 4});
  if (featureDecay)
    allocateDecayedProductBuffers();
}

void SimtMmaRecurrenceKernel::stageOperandRows(
    Value thread, int64_t count, Value from, ArrayRef<Value> parts, int64_t dim,
    int64_t padded,
    function_ref<std::pair<SmallVector<Value>, Value>(Value)> rowAt) {
  if (parts.size() == 1)
    return e.stageRows(thread, count, from, parts[0], dim, padded, rowAt);
  Value width = e.index(padded);
  e.loop(thread, e.index(count * padded), e.index(threads), [&](Value x) {
    Value row = e.div(x, width), i = e.rem(x, width);
    auto [at, exists] = rowAt(row);
    at.push_back(i);
    storeParts(e.loadOrZero(both(exists, lt(i, e.index(dim))), from, at), parts,
               {row, i});
  });
}

void SimtMmaRecurrenceKernel::stageLocalChunk(Value first, Value n) {
  e.eachThread([&](Value thread) {
    if (!localKeys.empty())
      stageOperandRows(thread, C, args.k, localKeys, Dk, Dkp,
                       stepRows(e, *seq, hk, first, n));
    if (featureLogDecay) {
      Value width = e.index(Dkp);
      e.loop(thread, e.index(C * Dkp), e.index(threads), [&](Value x) {
        Value t = e.div(x, width), i = e.rem(x, width);
        e.store(e.loadOrZero(both(lt(t, n), lt(i, e.index(Dk))), args.g,
                             seq->stepFeature(hv, e.add(first, t), i)),
                featureLogDecay, {t, i});
      });
    }
    if (gates || betas)
      e.loop(thread, e.index(C), e.index(threads), [&](Value t) {
        Value exists = lt(t, n);
        SmallVector<Value> at = seq->step(hv, e.add(first, t));
        if (gates)
          e.store(e.loadOrZero(exists, args.g, at), gates, {t});
        if (betas)
          e.store(e.loadOrZero(exists, args.beta, at), betas, {t});
      });
    AsyncWaitOp::create(b);
  });
}

void SimtMmaRecurrenceKernel::stageValueRows(Value thread, Value first,
                                             Value n) {
  stageOperandRows(thread, C, args.v, localValues, Dv, Dvp,
                   stepRows(e, *seq, hv, first, n));
}

void SimtMmaRecurrenceKernel::storeStepScales(Value first, Value n) {
  e.forAll(e.index(C), [&](Value t) {
    Value keyScale = e.scalar(1.0);
    if (keyScales) {
      keyScale = sharedRowNormInverse(e, localKeys, t, Dk);
      e.store(keyScale, keyScales, {t});
    }
    Value logDecayTo = e.scalar(0.0);
    if (logDecay) {
      // Over the steps up to t; in a tree over t's path.
      logDecayTo = e.sumOver(c0, e.add(t, c1), [&](Value s) {
        Value g = e.load(gates, {s});
        return shape.tree ? e.select(isAncestorOrSelf(s, t), g, e.scalar(0.0))
                          : g;
      });
      e.store(logDecayTo, logDecay, {t});
    }
    e.ifThen(lt(t, n), [&] {
      Value step = e.add(first, t);
      e.store(logDecayTo, temporaries.scales, seq->stepFeature(hv, step, c0));
      e.store(keyScale, temporaries.scales, seq->stepFeature(hv, step, c1));
    });
  });
}

void SimtMmaRecurrenceKernel::computeTransform() {
  // k as stored is exact in the products: the entries are scaled after.
  // Past the chunk's steps beta is 0, so their rows of A are 0. Decays per
  // key feature are inside the sums, which take products by blocks.
  if (featureDecay) {
    decayKeysToBlockEnd(localKeys);
    eachWarp(
        [&](Value warp, Value lane, Value) {
          decayedDiagonalBlocks(warp, lane, localKeys, localKeys);
        },
        SimtEmitter::Sync::Warp);
    decayedBlockProducts(localKeys, gramRegs);
  }
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value row = chunkRow(warp);
    Value gram = e.registersOf(gramRegs, thread);
    if (!featureDecay)
      multiply(localKeys, localKeys, gram, row, lane, /*n=*/C, /*k=*/Dkp,
               /*rhsTransposed=*/true, /*accumulate=*/false, tilesPerWarp);
    // A[t, s] of a lane's fragment element.
    auto entryOf = [&](const FragmentElement &x) {
      Value t = x.row, s = x.column;
      Value scale = e.fmul(e.load(betas, {t}),
                           e.fmul(localKeyScale(t), localKeyScale(s)));
      if (scalarDecay)
        scale =
            e.fmul(scale, e.exp(e.fsub(localLogDecay(t), localLogDecay(s))));
      Value sum =
          featureDecay ? decayedEntry(x, gram, warp) : e.load(gram, x.at);
      Value below = both(lt(s, t), isAncestorOrSelf(s, t));
      return e.select(below, e.fmul(sum, scale), e.scalar(0.0));
    };
    // A holding T diag(w)'s f32 part has the stride of scalar stores
    // (transformWidth).
    if (mma.weightedInTransform()) {
      eachFragmentElement(row, lane, tilesPerWarp, C, warp,
                          [&](const FragmentElement &x) {
                            ifOwned(x.owned, [&] {
                              e.store(entryOf(x), transform, {x.row, x.column});
                            });
                          });
      return;
    }
    eachFragmentPair(
        row, lane, tilesPerWarp, C, warp, [&](const FragmentPair &x) {
          ifOwned(x.owned, [&] {
            SmallVector<Value, 2> pair;
            for (int64_t el = 0; el < 2; ++el)
              pair.push_back(
                  entryOf({x.row, el ? e.add(x.column, c1) : x.column, x.at[el],
                           x.owned}));
            vector::StoreOp::create(
                b,
                vector::FromElementsOp::create(
                    b, VectorType::get({2}, b.getF32Type()), pair),
                transform, ValueRange{x.row, x.column}, /*nontemporal=*/false,
                llvm::MaybeAlign(8));
          });
        });
  });
}

Value SimtMmaRecurrenceKernel::blockRowSum(Value left, Value leftRow,
                                           Value leftColumn, Value right,
                                           Value rightColumn, int64_t terms) {
  // Four partial sums: four independent chains of multiply-adds.
  SmallVector<Value, 4> sums(4, e.scalar(0.0));
  for (int64_t u = 0; u < terms; ++u) {
    Value m = e.add(leftColumn, e.index(u));
    sums[u % 4] = e.fma(e.load(left, {leftRow, m}),
                        e.load(right, {m, rightColumn}), sums[u % 4]);
  }
  return e.fadd(e.fadd(sums[0], sums[1]), e.fadd(sums[2], sums[3]));
}

void SimtMmaRecurrenceKernel::invertTransform() {
  // T = (I + A)^-1 is unit lower triangular, as I + A is. Its diagonal
  // blocks of 16 steps are inverted by forward substitution, a thread per
  // column (16 dependent steps, not C); then, for blocks i > j at distance
  // d = i - j = 1, 2, ..., T_ij = -T_ii sum_{k=j}^{i-1} A_ik T_kj, which
  // needs only blocks nearer the diagonal (fla's solve_tril takes the
  // same blocks). Only T's blocks on and below the diagonal are written.
  const int64_t side = WarpMmaOp::kRows, blocks = C / side;
  e.forAll(e.index(blocks * side), [&](Value x) {
    Value first = e.mul(e.div(x, c16), c16), c = e.rem(x, c16);
    // x_r = [r == c] - sum_{m < r} A[r, m] x_m, x_m = 0 for m < c.
    SmallVector<Value> column;
    for (int64_t r = 0; r < side; ++r) {
      Value row = e.add(first, e.index(r));
      Value solved = e.select(e.icmp(arith::CmpIPredicate::eq, c, e.index(r)),
                              e.scalar(1.0), e.scalar(0.0));
      for (int64_t m = 0; m < r; ++m)
        solved = e.fsub(
            solved, e.fmul(e.load(transform, {row, e.add(first, e.index(m))}),
                           column[m]));
      column.push_back(solved);
      e.store(solved, inverse, {row, e.add(first, c)});
    }
  });
  const int64_t entries = side * side;
  for (int64_t distance = 1; distance < blocks; ++distance) {
    // Block (i, j = i - distance) for each i in [distance, blocks).
    auto blockOf = [&](Value x, int64_t size) {
      Value i = e.add(e.div(x, e.index(size)), e.index(distance));
      return std::pair{e.mul(i, c16), e.mul(e.sub(i, e.index(distance)), c16)};
    };
    // M_ij = sum_{k=j}^{i-1} A_ik T_kj, into T_ij's place (not yet T).
    e.forAll(e.index((blocks - distance) * entries), [&](Value x) {
      auto [firstI, firstJ] = blockOf(x, entries);
      Value row = e.add(firstI, e.div(e.rem(x, e.index(entries)), c16));
      Value column = e.add(firstJ, e.rem(x, c16));
      e.store(
          blockRowSum(transform, row, firstJ, inverse, column, distance * side),
          inverse, {row, column});
    });
    // T_ij = -T_ii M_ij, a thread per column of the block: it reads the
    // column of M whole before writing T's over it.
    e.forAll(e.index((blocks - distance) * side), [&](Value x) {
      auto [firstI, firstJ] = blockOf(x, side);
      Value column = e.add(firstJ, e.rem(x, c16));
      SmallVector<Value> sums;
      for (int64_t m = 0; m < side; ++m)
        sums.push_back(e.load(inverse, {e.add(firstI, e.index(m)), column}));
      for (int64_t r = 0; r < side; ++r) {
        Value row = e.add(firstI, e.index(r));
        Value solved = e.scalar(0.0);
        for (int64_t m = 0; m <= r; ++m)
          solved = e.fsub(
              solved, e.fmul(e.load(inverse, {row, e.add(firstI, e.index(m))}),
                             sums[m]));
        e.store(solved, inverse, {row, column});
      }
    });
  }
}

void SimtMmaRecurrenceKernel::solveByProduct(bool keyColumns, Value first,
                                             Value n) {
  // (I + A) x = [beta exp(G) k^ | beta v]: x = T diag(w) [k | v] as
  // stored, w_s = beta_s exp(G_s) / |k_s| for W and beta_s for U; T
  // diag(w) goes to the products as its parts. A decay per key feature
  // is no weight of a step: W = T diag(beta_s / |k_s|) (k_s exp(G_s)),
  // those rows as the parts in place of k's.
  const bool decayedKeyColumns = keyColumns && featureDecay;
  if (decayedKeyColumns) {
    Value features = e.index(Dkp);
    e.forAll(e.index(C * Dkp), [&](Value x) {
      Value s = e.div(x, features), i = e.rem(x, features);
      storeParts(e.fmul(storedElement(e, localKeys, s, i),
                        e.exp(featureLogDecayOf(s, i))),
                 decayedRows, {s, i});
    });
  }
  Value width = e.index(C);
  e.forAll(e.index(C * C), [&](Value x) {
    Value t = e.div(x, width), s = e.rem(x, width);
    Value weight = e.load(betas, {s});
    if (keyColumns) {
      weight = e.fmul(weight, localKeyScale(s));
      if (scalarDecay)
        weight = e.fmul(weight, e.exp(localLogDecay(s)));
    }
    Value entry =
        e.loadOrZero(e.icmp(arith::CmpIPredicate::ule, s, t), inverse, {t, s});
    storeParts(e.fmul(entry, weight), weighted, {t, s});
  });
  const int64_t dim = keyColumns ? Dk : Dv, padded = keyColumns ? Dkp : Dvp;
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value row = chunkRow(warp);
    Value solved = e.registersOf(keyColumns ? keyRegs : valueRegs, thread);
    multiply(weighted,
             decayedKeyColumns ? decayedRows
                               : (keyColumns ? localKeys : localValues),
             solved, row, lane,
             /*n=*/padded, /*k=*/C, /*rhsTransposed=*/false,
             /*accumulate=*/false, tilesPerWarp);
    eachFragmentElement(
        row, lane, tilesPerWarp, padded, warp, [&](const FragmentElement &x) {
          ifOwned(x.owned, [&] {
            Value t = x.row, c = x.column;
            e.ifThen(both(lt(t, n), lt(c, e.index(dim))), [&] {
              Value value = e.load(solved, x.at);
              SmallVector<Value> feature =
                  seq->stepFeature(hv, e.add(first, t), c);
              if (keyColumns)
                storeTemporaryParts(e, value, temporaries.w, feature);
              else
                e.store(value, temporaries.u, feature);
            });
          });
        });
  });
}

//===----------------------------------------------------------------------===//
// The chain
//===----------------------------------------------------------------------===//

void SimtMmaRecurrenceKernel::buildStates() {
  // Block order (batch, value head, column tile), the tile fastest.
  Value rest = mapColumnTile(args.workgroup);
  hv = e.rem(rest, e.index(shape.numValueHeads));
  batch = e.div(rest, e.index(shape.numValueHeads));
  hk = e.div(hv, e.index(shape.numValueHeads / shape.numKeyHeads));
  seq.emplace(e, shape, args, batch);
  allocateBuffers();
  Value length = seq->length;
  Value chunks = e.ceilDiv(length, e.index(C));
  // Nothing on the chain waits for memory but the state's own products:
  // chunk j + 1's inputs are copied into one stage while chunk j's are
  // used from the other (as the decode kernel's key tiles).
  loadInitialState(chunks);
  e.inTwoStages(chunks, [&](Value chunk, Value next, int64_t at) {
    Value first = e.mul(chunk, e.index(C));
    Value n = e.minS(e.index(C), e.sub(length, first));
    Value last = e.sub(n, c1);
    // Chunk j + 1's copies go into the other stage (whose last readers,
    // chunk j - 1's products, finished before the barrier that ended
    // them); then the thread waits for all but them.
    // Chunk j's starting state, in the shared copy, goes out meanwhile.
    e.eachThread([&](Value thread) {
      e.ifThen(lt(next, chunks),
               [&] { stageChunk(thread, next, stages[1 - at]); });
      storeChunkState(thread, chunk);
      AsyncWaitOp::create(b).setPending(1);
    });
    // A tree is one chunk, whose final state no entry returns: the chain
    // makes its V' and stores S_init as its starting state.
    if (delta)
      projectValues(stages[at], first, n, last);
    if (shape.tree)
      return;
    if (!delta)
      prepareUpdate(stages[at], last);
    updateState(stages[at], last);
  });
  if (!shape.tree)
    storeFinalState();
}

void SimtMmaRecurrenceKernel::stageChunk(Value thread, Value chunk,
                                         const ChunkStage &stage) {
  Value first = e.mul(chunk, e.index(C));
  Value n = e.minS(e.index(C), e.sub(seq->length, first));
  // k as stored is the products' operand unless it is f16 (two bf16
  // parts, converted here: loads that the chain waits for); with a decay
  // per key feature, the keys decayed to the chunk's last step as the
  // local kernel stored them, and that step's G.
  if (featureDecay) {
    for (auto [part, keys] : llvm::enumerate(stage.keys))
      e.stageRows(thread, C, temporaries.decayedKeys, keys, Dk, Dkp,
                  stepRows(e, *seq, hv, first, n, part));
    e.stageRows(thread, 1, temporaries.featureLogDecays, stage.lastDecay, Dk,
                Dkp, [&](Value) -> std::pair<SmallVector<Value>, Value> {
                  return {seq->step(hv, e.add(first, e.sub(n, c1))), lt(c0, n)};
                });
  } else {
    stageOperandRows(thread, C, args.k, stage.keys, Dk, Dkp,
                     stepRows(e, *seq, hk, first, n));
  }
  // W's parts as the local kernel stored them; G and 1 / |k|.
  for (auto [part, w] : llvm::enumerate(stage.w))
    e.stageRows(thread, C, temporaries.w, w, Dk, Dkp,
                stepRows(e, *seq, hv, first, n, part));
  e.stageRows(thread, C, temporaries.scales, stage.scales, 2, 2,
              stepRows(e, *seq, hv, first, n));
  // The tile's columns of U (f32) or v (as stored).
  e.stageRows(thread, C, delta ? temporaries.u : args.v, stage.values, Dv,
              columns, stepRows(e, *seq, hv, first, n), col0);
}

void SimtMmaRecurrenceKernel::storeChunkState(Value thread, Value chunk) {
  // From the shared copy's parts, 16 bytes a store where rows allow (a
  // lane's fragment elements were 2-byte stores, 128 a thread a chunk).
  Value slot = chunkStateSlot(e, shape, args, batch, chunk);
  for (auto [part, copy] : llvm::enumerate(stateCopy)) {
    Value partIndex = e.index(part);
    e.storeRows(thread, columns, copy, temporaries.states, Dk,
                [&](Value c) -> std::pair<SmallVector<Value>, Value> {
                  return {{partIndex, slot, hv, columnOf(c)}, isColumn(c)};
                });
  }
}

void SimtMmaRecurrenceKernel::loadInitialState(Value chunks) {
  // Lane element (row c, column i) of warp w's fragment is S_init[i, c] of
  // state column c = 16 w + ...; zeros past Dk and Dv. It is the first
  // chunk's starting state, when there is a chunk, whose inputs are
  // copied meanwhile (a group of their own: the wait with one pending
  // group waits for none).
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value state = e.registersOf(stateRegs, thread);
    ChainWarp w = chainWarp(warp);
    eachFragmentElement(
        w.stateRow, lane, 1, keyRange, Value(), [&](const FragmentElement &x) {
          Value feature = e.add(w.keyFirst, x.column);
          Value exists = both(isColumn(x.row), lt(feature, e.index(Dk)));
          Value s =
              e.loadOrZero(exists, args.initialState,
                           seq->stateElement(hv, feature, columnOf(x.row)));
          e.store(s, state, x.at);
          storeParts(s, stateCopy, {x.row, feature});
        });
    e.ifThen(lt(c0, chunks), [&] { stageChunk(thread, c0, stages[0]); });
    AsyncWaitOp::create(b).setPending(1);
  });
}

void SimtMmaRecurrenceKernel::projectValues(const ChunkStage &stage,
                                            Value first, Value n, Value last) {
  // V' = U - W S. The lane that owns V'[t, c] stores it (as the parts),
  // for the outputs, and its U'^T[c, t] = exp(G_last - G_t) V'[t, c] / |k_t|
  // for the update (past the chunk's steps, 1 / |k| is 0).
  eachWarp([&](Value warp, Value lane, Value thread) {
    exponentiateLastDecay(stage, thread);
    ChainWarp w = chainWarp(warp);
    Value row = chunkRow(w.tile);
    Value projected = e.registersOf(outRegs, thread);
    multiply(stage.w, sliceParts(stateCopy, 0, w.columnFirst, columnRange),
             projected, row, lane, /*n=*/columnRange, /*k=*/Dkp,
             /*rhsTransposed=*/true, /*accumulate=*/false, tilesPerWarp);
    eachFragmentPair(
        row, lane, tilesPerWarp, columnRange, w.tile,
        [&](const FragmentPair &x) {
          ifOwned(x.owned, [&] {
            Value t = x.row, firstColumn = e.add(w.columnFirst, x.column);
            // U's two columns in one 8-byte load: U's rows, 8 or 24 banks
            // apart (valuePadding), give each 16 lanes 32 banks.
            Value u = vector::LoadOp::create(
                b, VectorType::get({2}, b.getF32Type()), stage.values,
                ValueRange{t, firstColumn}, /*nontemporal=*/false,
                llvm::MaybeAlign(8));
            for (int64_t el = 0; el < 2; ++el) {
              Value c = e.add(firstColumn, e.index(el));
              Value value = e.fsub(vector::ExtractOp::create(b, u, el),
                                   e.load(projected, x.at[el]));
              e.ifThen(both(lt(t, n), isColumn(c)), [&] {
                storeTemporaryParts(
                    e, value, temporaries.projected,
                    seq->stepFeature(hv, e.add(first, t), columnOf(c)));
              });
              Value update =
                  e.fmul(value, e.fmul(decayBetween(stage.scales, last, t),
                                       keyScaleOf(stage.scales, t)));
              storeParts(update, updateOperand, {c, t});
            }
          });
        });
  });
}

void SimtMmaRecurrenceKernel::prepareUpdate(const ChunkStage &stage,
                                            Value last) {
  // The rules without delta: U'^T [columns, C], U'_t = exp(G_last - G_t)
  // V_t / |k_t| (the chunk's contribution to the state is U'^T K, k as
  // stored; past the chunk's steps, 1 / |k| is 0).
  if (featureDecay)
    e.eachThread([&](Value thread) { exponentiateLastDecay(stage, thread); });
  e.forAllTransposing(
      C, columns, stage.values, updateOperand[0], [&](Value t, Value c) {
        Value v = e.load(stage.values, {t, c});
        Value u = e.fmul(v, e.fmul(decayBetween(stage.scales, last, t),
                                   keyScaleOf(stage.scales, t)));
        storeParts(u, updateOperand, {c, t});
      });
}

void SimtMmaRecurrenceKernel::exponentiateLastDecay(const ChunkStage &stage,
                                                    Value thread) {
  // In a thread loop before the update's, which then reads exp(G_last)
  // (the copies of G_last are complete and visible there): the exps leave
  // the update, whose registers are the chain's most.
  if (!featureDecay)
    return;
  e.loop(thread, e.index(Dkp), e.index(threads), [&](Value i) {
    e.store(e.exp(e.load(stage.lastDecay, {c0, i})), stage.lastDecay, {c0, i});
  });
}

void SimtMmaRecurrenceKernel::updateState(const ChunkStage &stage,
                                          Value last) {
  // S^T = exp(G_last) S^T + U'^T K, and its shared copy for the next
  // chunk's products (and its starting state). With a decay per key
  // feature, exp(G_last) scales S^T's columns (the features) and K is the
  // keys decayed to the last step.
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value state = e.registersOf(stateRegs, thread);
    ChainWarp w = chainWarp(warp);
    if (scalarDecay) {
      Value decay = decayTo(stage.scales, last);
      eachFragmentElement(w.stateRow, lane, 1, keyRange, Value(),
                          [&](const FragmentElement &x) {
                            e.store(e.fmul(e.load(state, x.at), decay), state,
                                    x.at);
                          });
    }
    if (featureDecay) {
      // An exp per feature of the lane's (2 a block of 8), for both rows.
      MmaFragmentLayout layout(e, w.stateRow, lane);
      for (int64_t block = 0; block < keyRange / WarpMmaOp::kFragmentColumns;
           ++block)
        for (int64_t el = 0; el < 2; ++el) {
          Value feature =
              e.add(w.keyFirst, layout.accColumn(e, e.index(block), el));
          Value decay = e.load(stage.lastDecay, {c0, feature});
          for (int64_t half = 0; half < 2; ++half) {
            SmallVector<Value> at{e.index(block), e.index(2 * half + el)};
            e.store(e.fmul(e.load(state, at), decay), state, at);
          }
        }
    }
    multiply(updateOperand, sliceParts(stage.keys, 1, w.keyFirst, keyRange),
             state, w.stateRow, lane, /*n=*/keyRange, /*k=*/C,
             /*rhsTransposed=*/false, /*accumulate=*/true, /*rowTiles=*/1);
    eachFragmentElement(w.stateRow, lane, 1, keyRange, Value(),
                        [&](const FragmentElement &x) {
                          storeParts(e.load(state, x.at), stateCopy,
                                     {x.row, e.add(w.keyFirst, x.column)});
                        });
  });
}

void SimtMmaRecurrenceKernel::storeFinalState() {
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value state = e.registersOf(stateRegs, thread);
    ChainWarp w = chainWarp(warp);
    eachFragmentElement(
        w.stateRow, lane, 1, keyRange, Value(), [&](const FragmentElement &x) {
          Value feature = e.add(w.keyFirst, x.column);
          e.ifThen(both(isColumn(x.row), lt(feature, e.index(Dk))), [&] {
            e.store(e.load(state, x.at), args.finalState,
                    seq->stateElement(hv, feature, columnOf(x.row)));
          });
        });
  });
}

//===----------------------------------------------------------------------===//
// The outputs
//===----------------------------------------------------------------------===//

void SimtMmaRecurrenceKernel::buildOutputs() {
  // Block order (the local kernel's chunk blocks, column tile), the tile
  // fastest.
  BlockChunk chunk = mapChunkBlock(e, shape, args,
                                   mapColumnTile(args.workgroup), seq);
  batch = chunk.batch, hv = chunk.hv;
  hk = e.div(hv, e.index(shape.numValueHeads / shape.numKeyHeads));
  allocateBuffers();
  stageOutputInputs(chunkStateSlot(e, shape, args, batch, chunk.index),
                    chunk.first, chunk.n);
  stageScales(chunk.first, chunk.n);
  if (shape.tree)
    markAncestors(chunk.n);
  if (featureDecay)
    stageFeatureDecays(chunk.first, chunk.n);
  scoreChunk();
  finishOutputs(chunk.first, chunk.n);
}

void SimtMmaRecurrenceKernel::stageOutputInputs(Value slot, Value first,
                                                Value n) {
  // Copied as stored, all of a thread's copies in flight at once: the
  // chunk's starting state S^T [columns, Dk] and V' [C, columns] (the
  // chain's parts) or v, and q's and k's rows, where they are the products'
  // operands as stored (f16 is converted into two bf16 parts first). Rows
  // past the chunk's steps and features past Dk and Dv are zeros.
  const bool operandsAsStored = stages[0].keys.size() == 1;
  if (!operandsAsStored) {
    convertQueryKeyRows(first, n);
    if (!delta)
      convertValues(first, n);
  }
  e.eachThread([&](Value thread) {
    if (operandsAsStored) {
      e.stageRows(thread, C, args.q, queries[0], Dk, Dkp,
                  stepRows(e, *seq, hk, first, n));
      e.stageRows(thread, C, args.k, stages[0].keys[0], Dk, Dkp,
                  stepRows(e, *seq, hk, first, n));
    }
    for (auto [part, to] : llvm::enumerate(stateCopy)) {
      Value partIndex = e.index(part);
      e.stageRows(thread, columns, temporaries.states, to, Dk, Dkp,
                  [&](Value c) -> std::pair<SmallVector<Value>, Value> {
                    return {{partIndex, slot, hv, columnOf(c)}, isColumn(c)};
                  });
    }
    if (delta) {
      for (auto [part, to] : llvm::enumerate(valueOperand))
        e.stageRows(thread, C, temporaries.projected, to, Dv, columns,
                    stepRows(e, *seq, hv, first, n, part), col0);
    } else if (operandsAsStored) {
      e.stageRows(thread, C, args.v, valueOperand[0], Dv, columns,
                  stepRows(e, *seq, hv, first, n), col0);
    }
    AsyncWaitOp::create(b);
  });
}

void SimtMmaRecurrenceKernel::convertQueryKeyRows(Value first, Value n) {
  // f16 q and k as two bf16 parts each (zero rows past the chunk's steps,
  // zero features past Dk), feature fastest (coalesced reads), 4 elements
  // a thread at a time, their loads first.
  Value dkp = e.index(Dkp);
  const Parts &keys = stages[0].keys;
  e.forAllBatched(
      e.index(C * Dkp), /*batch=*/4,
      [&](Value x, Value inRange) -> SmallVector<Value> {
        Value t = e.div(x, dkp), i = e.rem(x, dkp);
        Value exists = both(inRange, both(lt(t, n), lt(i, e.index(Dk))));
        SmallVector<Value> at = seq->stepFeature(hk, e.add(first, t), i);
        return {e.loadOrZero(exists, args.q, at),
                e.loadOrZero(exists, args.k, at)};
      },
      [&](Value x, ValueRange loaded) {
        Value t = e.div(x, dkp), i = e.rem(x, dkp);
        storeParts(loaded[0], queries, {t, i});
        storeParts(loaded[1], keys, {t, i});
      });
}

void SimtMmaRecurrenceKernel::convertValues(Value first, Value n) {
  // f16 v [C, columns] as two bf16 parts (the rules without delta).
  Value width = e.index(columns);
  e.forAllBatched(
      e.index(C * columns), /*batch=*/4,
      [&](Value x, Value inRange) -> SmallVector<Value> {
        Value t = e.div(x, width), c = e.rem(x, width);
        return {
            e.loadOrZero(both(inRange, both(lt(t, n), isColumn(c))), args.v,
                         seq->stepFeature(hv, e.add(first, t), columnOf(c)))};
      },
      [&](Value x, ValueRange loaded) {
        storeParts(loaded[0], valueOperand,
                   {e.div(x, width), e.rem(x, width)});
      });
}

void SimtMmaRecurrenceKernel::stageScales(Value first, Value n) {
  // Per step: G and 1 / |k| as the local kernel stored them, scale / |q|
  // (0 past the chunk's steps, so those rows add nothing; G past them is
  // G of the last, so that no decay grows).
  Value scales = stages[0].scales;
  e.forAll(e.index(C), [&](Value t) {
    Value exists = lt(t, n), zero = e.scalar(0.0);
    Value step = e.add(first, e.minS(t, e.maxS(e.sub(n, c1), c0)));
    e.store(e.loadOrZero(lt(c0, n), temporaries.scales,
                         seq->stepFeature(hv, step, c0)),
            scales, {t, c0});
    e.store(e.loadOrZero(exists, temporaries.scales,
                         seq->stepFeature(hv, step, c1)),
            scales, {t, c1});
    Value scale = e.scalar(shape.scale);
    if (shape.normalizeQueryKey)
      scale = e.fmul(scale, sharedRowNormInverse(e, queries, t, Dk));
    e.store(e.select(exists, scale, zero), queryScale, {t});
  });
}

void SimtMmaRecurrenceKernel::scoreChunk() {
  // O = exp(G_t) q^_t S into the output fragments, and P = q^_t . k^_s
  // exp(G_t - G_s) for s <= t in the warp's registers as parts (the hi
  // part in place of q k^T), which only the warp reads. A decay per key
  // feature is inside the sums: O's lhs is q_t exp(G_t), the warp's rows
  // in lhsScratch, and P takes products by blocks.
  const ChunkStage &stage = stages[0];
  if (featureDecay) {
    decayKeysToBlockEnd(stage.keys);
    eachWarp(
        [&](Value warp, Value lane, Value) {
          Value width = e.index(Dkp), first = chunkRow(warp);
          e.loop(lane, e.index(tilesPerWarp * WarpMmaOp::kRows * Dkp),
                 e.index(WarpMmaOp::kWarpLanes), [&](Value x) {
                   Value r = e.div(x, width), i = e.rem(x, width);
                   Value t = e.add(first, r);
                   storeParts(e.fmul(storedElement(e, queries, t, i),
                                     e.exp(featureLogDecayOf(t, i))),
                              lhsScratch, {e.add(scratchRow(warp), r), i});
                 });
          decayedDiagonalBlocks(warp, lane, queries, stage.keys);
        },
        SimtEmitter::Sync::Warp);
  }
  auto storeScores = [&](Value warp, Value lane, Value thread) {
    Value row = chunkRow(warp);
    Value scores = e.registersOf(pairRegs, thread);
    Value scoresLo = scoreLoRegs ? e.registersOf(scoreLoRegs, thread) : Value();
    eachFragmentElement(
        row, lane, tilesPerWarp, C, Value(), [&](const FragmentElement &x) {
          Value t = x.row, s = x.column;
          Value sum = featureDecay ? decayedEntry(x, scores, warp)
                                   : e.load(scores, x.at);
          Value p = e.fmul(e.fmul(sum, e.load(queryScale, {t})),
                           e.fmul(keyScaleOf(stage.scales, s),
                                  decayBetween(stage.scales, t, s)));
          p = e.select(isAncestorOrSelf(s, t), p, e.scalar(0.0));
          if (!scoresLo) {
            e.store(p, scores, x.at);
            return;
          }
          // Both parts rounded here as the tensor cores would round
          // them, so that the CPU's loops compute what they do.
          Value hi = e.widen(e.narrow(p, mma.product));
          e.store(hi, scores, x.at);
          e.store(e.widen(e.narrow(e.fsub(p, hi), mma.product)), scoresLo,
                  x.at);
        });
  };
  eachWarp(
      [&](Value warp, Value lane, Value thread) {
        Value row = chunkRow(warp);
        Value out = e.registersOf(outRegs, thread);
        if (featureDecay)
          multiply(lhsScratch, stateCopy, out, scratchRow(warp), lane,
                   /*n=*/columns, /*k=*/Dkp, /*rhsTransposed=*/true,
                   /*accumulate=*/false, tilesPerWarp);
        else
          multiply(queries, stateCopy, out, row, lane, /*n=*/columns,
                   /*k=*/Dkp, /*rhsTransposed=*/true, /*accumulate=*/false,
                   tilesPerWarp);
        eachFragmentElement(
            row, lane, tilesPerWarp, columns, Value(),
            [&](const FragmentElement &x) {
              Value factor = e.fmul(decayTo(stage.scales, x.row),
                                    e.load(queryScale, {x.row}));
              e.store(e.fmul(e.load(out, x.at), factor), out, x.at);
            });
        if (featureDecay)
          return;
        multiply(queries, stage.keys, e.registersOf(pairRegs, thread), row,
                 lane, /*n=*/C, /*k=*/Dkp, /*rhsTransposed=*/true,
                 /*accumulate=*/false, tilesPerWarp);
        storeScores(warp, lane, thread);
      },
      SimtEmitter::Sync::Warp);
  if (!featureDecay)
    return;
  decayedBlockProducts(queries, pairRegs);
  eachWarp([&](Value warp, Value lane,
               Value thread) { storeScores(warp, lane, thread); },
           SimtEmitter::Sync::Warp);
}

void SimtMmaRecurrenceKernel::finishOutputs(Value first, Value n) {
  // O += P V', stored.
  eachWarp([&](Value warp, Value lane, Value thread) {
    Value row = chunkRow(warp);
    Value out = e.registersOf(outRegs, thread);
    Parts scores{e.registersOfWarp(pairRegs, thread)};
    if (scoreLoRegs)
      scores.push_back(e.registersOfWarp(scoreLoRegs, thread));
    multiply(scores, valueOperand, out, row, lane, /*n=*/columns, /*k=*/C,
             /*rhsTransposed=*/false, /*accumulate=*/true, tilesPerWarp,
             /*lhsFragments=*/true);
    eachFragmentElement(
        row, lane, tilesPerWarp, columns, warp, [&](const FragmentElement &x) {
          Value t = x.row, c = x.column;
          ifOwned(x.owned, [&] {
            e.ifThen(both(lt(t, n), isColumn(c)), [&] {
              e.store(e.load(out, x.at), args.out,
                      seq->stepFeature(hv, e.add(first, t), columnOf(c)));
            });
          });
        });
  });
}

//===----------------------------------------------------------------------===//
// A decay per key feature
//===----------------------------------------------------------------------===//

void SimtMmaRecurrenceKernel::sumFeatureDecays() {
  // G_t = g_1 + ... + g_t, a thread per feature (g is 0 past the chunk's
  // steps, so G stays G of its last there).
  e.forAll(e.index(Dkp), [&](Value i) {
    e.loop(c0, e.index(C), c1, {e.scalar(0.0)},
           [&](Value t, ValueRange sum) -> SmallVector<Value> {
             Value logDecay = e.fadd(sum[0], featureLogDecayOf(t, i));
             e.store(logDecay, featureLogDecay, {t, i});
             return {logDecay};
           });
  });
}

void SimtMmaRecurrenceKernel::storeFeatureDecays(Value first, Value n) {
  // G, and the chain's update operand k_t exp(G_last - G_t) (k as stored:
  // the chain scales its values by 1 / |k|), as the parts.
  Value width = e.index(Dk), last = e.index(C - 1);
  e.forAll(e.index(C * Dk), [&](Value x) {
    Value t = e.div(x, width), i = e.rem(x, width);
    e.ifThen(lt(t, n), [&] {
      SmallVector<Value> at = seq->stepFeature(hv, e.add(first, t), i);
      Value logDecay = featureLogDecayOf(t, i);
      e.store(logDecay, temporaries.featureLogDecays, at);
      Value decay = e.exp(e.fsub(featureLogDecayOf(last, i), logDecay));
      storeTemporaryParts(e, e.fmul(storedElement(e, localKeys, t, i), decay),
                          temporaries.decayedKeys, at);
    });
  });
}

void SimtMmaRecurrenceKernel::stageFeatureDecays(Value first, Value n) {
  Value width = e.index(Dkp);
  Value lastStep = e.add(first, e.maxS(e.sub(n, c1), c0));
  auto rowAndFeature = [&](Value x) {
    return std::pair{e.div(x, width), e.rem(x, width)};
  };
  e.forAllBatched(
      e.index(C * Dkp), /*batch=*/4,
      [&](Value x, Value inRange) -> SmallVector<Value> {
        auto [t, i] = rowAndFeature(x);
        Value step = e.minS(e.add(first, t), lastStep);
        Value exists = both(inRange, both(lt(c0, n), lt(i, e.index(Dk))));
        return {e.loadOrZero(exists, temporaries.featureLogDecays,
                             seq->stepFeature(hv, step, i))};
      },
      [&](Value x, ValueRange loaded) {
        auto [t, i] = rowAndFeature(x);
        e.store(loaded[0], featureLogDecay, {t, i});
      });
}

void SimtMmaRecurrenceKernel::decayKeysToBlockEnd(ArrayRef<Value> keys) {
  // exp(G_e - G_s) <= 1: e >= s, and G falls step by step.
  Value width = e.index(Dkp), lastOfBlock = e.index(WarpMmaOp::kRows - 1);
  e.forAll(e.index(C * Dkp), [&](Value x) {
    Value s = e.div(x, width), i = e.rem(x, width);
    Value end = e.add(e.mul(e.div(s, c16), c16), lastOfBlock);
    Value decay =
        e.exp(e.fsub(featureLogDecayOf(end, i), featureLogDecayOf(s, i)));
    storeParts(e.fmul(storedElement(e, keys, s, i), decay), decayedRows,
               {s, i});
  });
}

void SimtMmaRecurrenceKernel::decayedDiagonalBlocks(Value warp, Value lane,
                                                    ArrayRef<Value> lhs,
                                                    ArrayRef<Value> rhs) {
  // A block's 136 entries on and below its diagonal, spread evenly over the
  // lanes: rows r and 15 - r together have 17, so entry p is in the pair
  // of rows p / 17. Each is a sum over the features in f32 (the decays
  // exp(G_t - G_s) <= 1 elementwise, as fla's diagonal sub-chunks).
  const int64_t side = WarpMmaOp::kRows, lanes = WarpMmaOp::kWarpLanes;
  const int64_t pairs = side / 2, perPair = side + 1;
  for (int64_t tile = 0; tile < tilesPerWarp; ++tile) {
    Value first = e.add(chunkRow(warp), e.index(tile * side));
    Value region = e.add(scratchRow(warp), e.index(tile * side));
    for (int64_t m = 0; m * lanes < pairs * perPair; ++m) {
      Value p = e.add(lane, e.index(m * lanes));
      e.ifThen(lt(p, e.index(pairs * perPair)), [&] {
        Value pair = e.div(p, e.index(perPair));
        Value q = e.rem(p, e.index(perPair));
        Value upper = e.sub(e.index(side - 1), pair);
        Value inLower = e.icmp(arith::CmpIPredicate::ule, q, pair);
        Value r = e.select(inLower, pair, upper);
        Value c = e.select(inLower, q, e.sub(q, e.add(pair, c1)));
        Value t = e.add(first, r), s = e.add(first, c);
        const int64_t unroll = 4;
        SmallVector<Value> sums(unroll, e.scalar(0.0));
        sums = e.loop(c0, e.index(Dkp), e.index(unroll), sums,
                      [&](Value i0, ValueRange partial) -> SmallVector<Value> {
                        SmallVector<Value> next;
                        for (int64_t u = 0; u < unroll; ++u) {
                          Value i = e.add(i0, e.index(u));
                          Value decay = e.exp(e.fsub(featureLogDecayOf(t, i),
                                                     featureLogDecayOf(s, i)));
                          next.push_back(
                              e.fma(e.fmul(storedElement(e, lhs, t, i),
                                           storedElement(e, rhs, s, i)),
                                    decay, partial[u]));
                        }
                        return next;
                      });
        e.store(e.fadd(e.fadd(sums[0], sums[1]), e.fadd(sums[2], sums[3])),
                diagonal, {e.add(region, r), c});
      });
    }
  }
}

void SimtMmaRecurrenceKernel::decayedBlockProducts(ArrayRef<Value> lhs,
                                                   Value accRegs) {
  // For t in block I and s in block J < I, with e the last step of J:
  // exp(G_t - G_s) = exp(G_t - G_e) exp(G_e - G_s), both <= 1, so the
  // block's sums are the product of lhs_t exp(G_t - G_e) (the warp's rows,
  // made per J) and decayedRows' block J (fla's chunk_gla / chunk_kda
  // intra-chunk sub-blocks take the same factors).
  const int64_t side = WarpMmaOp::kRows, blocks = C / side;
  const int64_t fragmentBlocks = C / WarpMmaOp::kFragmentColumns;
  Value width = e.index(Dkp);
  for (int64_t block = 0; block < blocks; ++block) {
    const bool lastBlock = block + 1 == blocks;
    Value blockFirst = e.index(block * side);
    Value blockEnd = e.index(block * side + side - 1);
    // Whether row tile `first` is after block J.
    auto after = [&](Value first) { return lt(blockFirst, first); };
    if (!lastBlock) {
      eachWarp(
          [&](Value warp, Value lane, Value) {
            for (int64_t tile = 0; tile < tilesPerWarp; ++tile) {
              Value first = e.add(chunkRow(warp), e.index(tile * side));
              Value region = e.add(scratchRow(warp), e.index(tile * side));
              e.ifThen(after(first), [&] {
                e.loop(lane, e.index(side * Dkp),
                       e.index(WarpMmaOp::kWarpLanes), [&](Value x) {
                         Value r = e.div(x, width), i = e.rem(x, width);
                         Value t = e.add(first, r);
                         Value decay =
                             e.exp(e.fsub(featureLogDecayOf(t, i),
                                          featureLogDecayOf(blockEnd, i)));
                         storeParts(e.fmul(storedElement(e, lhs, t, i), decay),
                                    lhsScratch, {e.add(region, r), i});
                       });
              });
            }
          },
          SimtEmitter::Sync::Warp);
    }
    // The product into a fragment of 16 columns, then into block J's
    // columns of the warp's fragments (0 where the tile is not after J).
    eachWarp(
        [&](Value warp, Value lane, Value thread) {
          Value acc = e.registersOf(accRegs, thread);
          Value product = e.registersOf(blockRegs, thread);
          for (int64_t tile = 0; tile < tilesPerWarp; ++tile) {
            Value first = e.add(chunkRow(warp), e.index(tile * side));
            Value isAfter = after(first);
            // warp_mma runs in no branch: a tile not after J takes a
            // product of whatever its rows hold, and drops it.
            if (!lastBlock)
              multiply(lhsScratch, sliceParts(decayedRows, 0, blockFirst, side),
                       product, e.add(scratchRow(warp), e.index(tile * side)),
                       lane, /*n=*/side, /*k=*/Dkp, /*rhsTransposed=*/true,
                       /*accumulate=*/false, /*rowTiles=*/1);
            for (int64_t half = 0; half < 2; ++half)
              for (int64_t el = 0; el < 4; ++el) {
                Value value =
                    lastBlock ? e.scalar(0.0)
                              : e.select(isAfter,
                                         e.load(product,
                                                {e.index(half), e.index(el)}),
                                         e.scalar(0.0));
                e.store(value, acc,
                        {e.index(tile * fragmentBlocks + 2 * block + half),
                         e.index(el)});
              }
          }
        },
        SimtEmitter::Sync::Warp);
  }
}

Value SimtMmaRecurrenceKernel::decayedEntry(const FragmentElement &x, Value acc,
                                            Value warp) {
  Value rowBlock = e.div(x.row, c16), columnBlock = e.div(x.column, c16);
  Value inRegion = e.add(scratchRow(warp), e.sub(x.row, chunkRow(warp)));
  Value onDiagonal = e.load(diagonal, {inRegion, e.rem(x.column, c16)});
  Value inBlock = e.icmp(arith::CmpIPredicate::eq, rowBlock, columnBlock);
  return e.select(lt(columnBlock, rowBlock), e.load(acc, x.at),
                  e.select(inBlock, onDiagonal, e.scalar(0.0)));
}

void SimtMmaRecurrenceKernel::allocateDecayedProductBuffers() {
  const int64_t pad = mma.rowPadding();
  decayedRows = sharedParts(mma.computedParts, {C, Dkp + pad});
  lhsScratch = sharedParts(mma.computedParts, {scratchRows(), Dkp + pad});
  diagonal = e.shared({scratchRows(), WarpMmaOp::kRows + 1});
  blockRegs = e.registers({WarpMmaOp::kRows / WarpMmaOp::kFragmentColumns, 4});
}

void SimtMmaRecurrenceKernel::markAncestors(Value n) {
  // The runtime checked that parents form a tree (each parent before its
  // child), so every walk ends at a root.
  auto byte = [&](int64_t value) {
    return arith::ConstantIntOp::create(b, b.getI8Type(), value);
  };
  Value width = e.index(C);
  e.forAll(e.index(C * C), [&](Value x) {
    memref::StoreOp::create(b, byte(0), ancestry,
                            ValueRange{e.div(x, width), e.rem(x, width)});
  });
  e.forAll(e.index(C), [&](Value t) {
    e.ifThen(lt(t, n), [&] {
      e.whileLoop(
          {t},
          [&](ValueRange it) {
            return e.icmp(arith::CmpIPredicate::ne, it[0], e.index(-1));
          },
          [&](ValueRange it) -> SmallVector<Value> {
            memref::StoreOp::create(b, byte(1), ancestry, ValueRange{t, it[0]});
            return {e.toIndex(e.loadInt(args.parents, {batch, it[0]}))};
          });
    });
  });
}

Value SimtMmaRecurrenceKernel::isAncestorOrSelf(Value s, Value t) {
  if (!shape.tree)
    return e.icmp(arith::CmpIPredicate::ule, s, t);
  Value mark = memref::LoadOp::create(b, ancestry, ValueRange{t, s});
  return e.icmp(arith::CmpIPredicate::ne, mark,
                arith::ConstantIntOp::create(b, b.getI8Type(), 0));
}

//===----------------------------------------------------------------------===//
// Both
//===----------------------------------------------------------------------===//

Parts SimtMmaRecurrenceKernel::sharedParts(int64_t count,
                                           ArrayRef<int64_t> shape) {
  Parts parts;
  for (int64_t i = 0; i < count; ++i)
    parts.push_back(e.shared(shape, mma.product));
  return parts;
}

ChunkStage SimtMmaRecurrenceKernel::allocateStage() {
  const int64_t pad = mma.rowPadding();
  ChunkStage stage;
  const bool decayedKeys = !outputs() && featureDecay;
  stage.keys = sharedParts(decayedKeys ? mma.computedParts : mma.rawParts,
                           {C, Dkp + pad});
  if (!outputs() && delta)
    stage.w = sharedParts(mma.computedParts, {C, Dkp + pad});
  stage.scales = e.shared({C, 2});
  if (!outputs()) {
    Type element =
        delta ? b.getF32Type()
              : cast<MemRefType>(args.v.getType()).getElementType();
    stage.values = e.shared(
        {C, columns + mma.valuePadding(shape)}, element);
  }
  if (decayedKeys)
    stage.lastDecay = e.shared({1, Dkp});
  return stage;
}

void SimtMmaRecurrenceKernel::allocateBuffers() {
  // In the order SimtMmaRecurrenceTiling::sharedBytes counts them.
  if (local())
    return allocateLocalBuffers();
  const int64_t pad = mma.rowPadding();
  for (int64_t stage = 0; stage < (outputs() ? 1 : 2); ++stage)
    stages.push_back(allocateStage());
  if (outputs())
    queries = sharedParts(mma.rawParts, {C, Dkp + pad});
  stateCopy = sharedParts(mma.computedParts, {columns, Dkp + pad});
  if (outputs()) {
    valueOperand = sharedParts(delta ? mma.computedParts : mma.rawParts,
                               {C, columns + pad});
    queryScale = e.shared({C});
    if (shape.tree)
      ancestry = e.shared({C, ancestryWidth(C)}, b.getI8Type());
    if (featureDecay) {
      featureLogDecay = e.shared({C, Dkp + 1});
      allocateDecayedProductBuffers();
    }
  } else {
    updateOperand = sharedParts(mma.computedParts, {columns, C + pad});
  }
  const int64_t fragmentColumns = WarpMmaOp::kFragmentColumns;
  if (!outputs())
    stateRegs = e.registers({keyRange / fragmentColumns, 4});
  if (outputs() || delta)
    outRegs = e.registers(
        {tilesPerWarp * (outputs() ? columns : columnRange) / fragmentColumns,
         4});
  if (outputs()) {
    const int64_t chunkBlocks = tilesPerWarp * C / fragmentColumns;
    pairRegs = e.registers({chunkBlocks, 4});
    if (mma.computedParts == 2)
      scoreLoRegs = e.registers({chunkBlocks, 4});
  }
}

void SimtMmaRecurrenceKernel::eachWarp(
    function_ref<void(Value warp, Value lane, Value thread)> body,
    SimtEmitter::Sync sync) {
  Value c32 = e.index(WarpMmaOp::kWarpLanes);
  e.eachThread(
      [&](Value thread) {
        body(e.div(thread, c32), e.rem(thread, c32), thread);
      },
      sync);
}

Value SimtMmaRecurrenceKernel::chunkRow(Value warp) {
  Value tile = e.minS(e.mul(warp, e.index(tilesPerWarp)),
                      e.index(C / WarpMmaOp::kRows - tilesPerWarp));
  return e.mul(tile, c16);
}

SimtMmaRecurrenceKernel::ChainWarp
SimtMmaRecurrenceKernel::chainWarp(Value warp) {
  Value tiles = e.index(columns / WarpMmaOp::kRows);
  Value tile = e.rem(warp, tiles), group = e.div(warp, tiles);
  return {tile, e.mul(tile, c16), e.mul(group, e.index(keyRange)),
          e.mul(group, e.index(columnRange))};
}

Parts SimtMmaRecurrenceKernel::sliceParts(ArrayRef<Value> parts, int64_t dim,
                                          Value first, int64_t count) {
  Parts views;
  for (Value part : parts) {
    ArrayRef<int64_t> shape = cast<MemRefType>(part.getType()).getShape();
    SmallVector<OpFoldResult> offsets(2, b.getIndexAttr(0)),
        sizes{b.getIndexAttr(shape[0]), b.getIndexAttr(shape[1])},
        strides(2, b.getIndexAttr(1));
    // A constant offset as an attribute: the view's type is then static,
    // with no cast for canonicalization to put between it and the product.
    offsets[dim] = getAsOpFoldResult(first);
    sizes[dim] = b.getIndexAttr(count);
    views.push_back(
        memref::SubViewOp::create(b, part, offsets, sizes, strides));
  }
  return views;
}

void SimtMmaRecurrenceKernel::eachFragmentElement(
    Value firstRow, Value lane, int64_t tiles, int64_t n, Value warp,
    function_ref<void(const FragmentElement &)> body) {
  eachFragmentPair(firstRow, lane, tiles, n, warp, [&](const FragmentPair &x) {
    for (int64_t el = 0; el < 2; ++el)
      body({x.row, el ? e.add(x.column, c1) : x.column, x.at[el], x.owned});
  });
}

void SimtMmaRecurrenceKernel::eachFragmentPair(
    Value firstRow, Value lane, int64_t tiles, int64_t n, Value warp,
    function_ref<void(const FragmentPair &)> body) {
  const int64_t blocks = n / WarpMmaOp::kFragmentColumns;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    Value tileRow = e.add(firstRow, e.index(tile * WarpMmaOp::kRows));
    Value owned;
    if (warp)
      owned = e.icmp(arith::CmpIPredicate::eq,
                     e.div(e.div(tileRow, c16), e.index(tilesPerWarp)), warp);
    MmaFragmentLayout layout(e, tileRow, lane);
    for (int64_t block = 0; block < blocks; ++block)
      for (int64_t half = 0; half < 2; ++half) {
        Value fragment = e.index(tile * blocks + block);
        body({layout.accRow(e, half),
              layout.accColumn(e, e.index(block), 0),
              {SmallVector<Value, 2>{fragment, e.index(2 * half)},
               SmallVector<Value, 2>{fragment, e.index(2 * half + 1)}},
              owned});
      }
  }
}

void SimtMmaRecurrenceKernel::multiply(ArrayRef<Value> lhs, ArrayRef<Value> rhs,
                                       Value acc, Value row, Value lane,
                                       int64_t n, int64_t k, bool rhsTransposed,
                                       bool accumulate, int64_t rowTiles,
                                       bool lhsFragments) {
  for (auto [i, j] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{0, 0}}) {
    if (i >= static_cast<int>(lhs.size()) || j >= static_cast<int>(rhs.size()))
      continue;
    auto op = WarpMmaOp::create(b, lhs[i], rhs[j], acc, row, lane, n, k);
    op.setRhsTransposed(rhsTransposed);
    op.setAccFragment(true);
    op.setLhsFragment(lhsFragments);
    op.setRowTiles(rowTiles);
    op.setAccumulate(accumulate);
    accumulate = true;
  }
}

void SimtMmaRecurrenceKernel::storeParts(Value x, ArrayRef<Value> parts,
                                         ValueRange at) {
  e.store(x, parts[0], at);
  if (parts.size() == 2)
    e.store(e.fsub(x, e.widen(e.narrow(x, mma.product))), parts[1], at);
}

Value SimtMmaRecurrenceKernel::decayBetween(Value scales, Value t, Value s) {
  if (!scalarDecay)
    return e.scalar(1.0);
  return e.exp(e.fsub(logDecayOf(scales, t), logDecayOf(scales, s)));
}

Value SimtMmaRecurrenceKernel::decayTo(Value scales, Value t) {
  return scalarDecay ? e.exp(logDecayOf(scales, t)) : e.scalar(1.0);
}

} // namespace

int64_t SimtMmaRecurrenceTiling::rowPadding() const {
  return 16 / (product.getIntOrFloatBitWidth() / 8);
}

int64_t
SimtMmaRecurrenceTiling::valuePadding(const LinearRecurrenceShape &shape) const {
  // U (f32) is read by fragment pairs (projectValues), whose 16 lanes of a
  // phase take rows 0-3 of 8 words each: rows 8 (or 24) banks apart, as
  // columns, a multiple of 16, plus 8 make them. v as stored is read by
  // forAllTransposing, which fits its tiles to the width.
  return shape.isDelta() ? 8 : 16 / storageBytes;
}

int64_t SimtMmaRecurrenceTiling::sharedBytes(const LinearRecurrenceShape &shape,
                                             ChunkMmaKernel kernel) const {
  // The buffers SimtMmaRecurrenceKernel::allocateBuffers allocates, in its
  // order, each rounded to 16 bytes.
  const int64_t C = shape.chunkSize, pad = rowPadding();
  const int64_t elementBytes = product.getIntOrFloatBitWidth() / 8;
  const bool delta = shape.isDelta(), featureDecay = shape.featureDecay();
  const bool outputs = kernel == ChunkMmaKernel::Outputs;
  auto buffer = [](int64_t elements, int64_t bytes) {
    return roundUp(elements * bytes, 16);
  };
  auto operand = [&](int64_t parts, int64_t rows, int64_t width) {
    return parts * buffer(rows * (width + pad), elementBytes);
  };
  // A decay per key feature: G per step and feature; the decayed key rows,
  // the warps' lhs rows and diagonal blocks.
  const int64_t featureLogDecays = buffer(C * (paddedKeyDim + 1), 4);
  const int64_t scratchRows = warps * rowTiles * WarpMmaOp::kRows;
  const int64_t decayedProducts =
      operand(computedParts, C, paddedKeyDim) +
      operand(computedParts, scratchRows, paddedKeyDim) +
      buffer(scratchRows * (WarpMmaOp::kRows + 1), 4);
  if (kernel == ChunkMmaKernel::Local) {
    // k's (and v's) rows, per step g and G, 1 / |k|, per step and feature
    // G, beta; A, T; T diag(w); the decayed products' buffers.
    int64_t total = 0;
    if (shape.normalizeQueryKey || delta || featureDecay)
      total += operand(rawParts, C, paddedKeyDim);
    if (delta)
      total += operand(rawParts, C,
                       roundUp(shape.valueDim, WarpMmaOp::kReductionStep));
    if (shape.scalarDecay())
      total += 2 * buffer(C, 4);
    if (shape.normalizeQueryKey)
      total += buffer(C, 4);
    if (featureDecay)
      total += featureLogDecays;
    if (shape.tree)
      total += buffer(C * ancestryWidth(C), 1);
    if (delta && featureDecay)
      total += decayedProducts;
    const bool shareA = weightedInTransform();
    if (delta)
      total += buffer(C, 4) +
               buffer(C * transformWidth(C, /*pairedStores=*/!shareA), 4) +
               buffer(C * inverseWidth(C), 4);
    if (delta && !shareA)
      total += operand(computedParts, C, C);
    return total;
  }
  // A stage (ChunkStage): k (decayed, as the parts, in the chain of a
  // decay per key feature), W's rows (the chain of a delta rule), G and
  // 1 / |k|, the chain's values, G of the last step (the chain of a decay
  // per key feature); the chain has two.
  const bool decayedKeys = !outputs && featureDecay;
  int64_t stage =
      operand(decayedKeys ? computedParts : rawParts, C, paddedKeyDim) +
      buffer(2 * C, 4);
  if (!outputs && delta)
    stage += operand(computedParts, C, paddedKeyDim);
  if (!outputs)
    stage += buffer(C * (columns + valuePadding(shape)),
                    delta ? 4 : storageBytes);
  if (decayedKeys)
    stage += buffer(paddedKeyDim, 4);
  int64_t total = (outputs ? 1 : 2) * stage;
  // q's rows (outputs), S^T, then V' and q's scales (outputs) or U'^T.
  if (outputs)
    total += operand(rawParts, C, paddedKeyDim);
  total += operand(computedParts, columns, paddedKeyDim);
  if (outputs)
    total += operand(delta ? computedParts : rawParts, C, columns) +
             buffer(C, 4);
  if (outputs && shape.tree)
    total += buffer(C * ancestryWidth(C), 1);
  if (outputs && featureDecay)
    total += featureLogDecays + decayedProducts;
  else if (!outputs)
    total += operand(computedParts, columns, C);
  return total;
}

std::optional<SimtMmaRecurrenceTiling>
SimtMmaRecurrenceTiling::choose(const LinearRecurrenceShape &shape,
                                Type storage, const GpuTiling &tiling) {
  const int64_t rows = WarpMmaOp::kRows;
  // A tree's decays per feature would need, for s in an earlier block of
  // 16 nodes, the block's last node on the path from s to t
  // (decayedBlockProducts), which index order does not give.
  if ((shape.tree && shape.featureDecay()) || shape.chunkSize % rows != 0)
    return std::nullopt;
  SimtMmaRecurrenceTiling mma;
  mma.paddedKeyDim = roundUp(shape.keyDim, WarpMmaOp::kReductionStep);
  const bool f32 = storage.isF32();
  mma.product = f32 ? storage : BFloat16Type::get(storage.getContext());
  mma.rawParts = storage.isF16() ? 2 : 1;
  mma.storageBytes = storage.getIntOrFloatBitWidth() / 8;
  mma.computedParts = f32 ? 1 : 2;
  // The chain's warps split the padded Dk and the columns in two: ranges
  // of Dkp / 2 and columns / 2 are whole fragment blocks of 8.
  mma.keyGroups = 2;
  // Widest first, from the narrowest power of 2 that holds Dv (at least a
  // warp's 16, at most 64: 4 warps). Wider tiles share the chunk's q k^T
  // and k k^T among more warps, fewer rows each, and so keep fewer
  // registers: at Dk = Dv = 128, C = 64 in bf16, 64 columns take 141 KiB
  // of shared memory (one block per SM, 4 warps) and 32 columns 98 KiB (two
  // blocks of 2 warps), whose warps hold twice the scores' rows and spill
  // (255 registers, ptxas for sm_90a).
  const int64_t widest =
      std::clamp<int64_t>(llvm::PowerOf2Ceil(shape.valueDim), rows, 64);
  for (int64_t columns = widest; columns >= rows; columns /= 2) {
    mma.columns = columns;
    mma.warps = columns / rows;
    mma.rowTiles = llvm::divideCeil(shape.chunkSize / rows, mma.warps);
    if (std::max({mma.sharedBytes(shape, ChunkMmaKernel::Local),
                  mma.sharedBytes(shape, ChunkMmaKernel::States),
                  mma.sharedBytes(shape, ChunkMmaKernel::Outputs)}) <=
        tiling.maxSharedBytes)
      return mma;
  }
  return std::nullopt;
}

std::optional<SimtMmaRecurrenceTiling>
SimtMmaRecurrenceTiling::narrowChain(const LinearRecurrenceShape &shape,
                                     const GpuTiling &tiling) const {
  const int64_t rows = WarpMmaOp::kRows, blockColumns = 8;
  if (columns / 2 < rows)
    return std::nullopt;
  SimtMmaRecurrenceTiling narrow = *this;
  narrow.columns = columns / 2;
  narrow.warps = narrow.columns / rows;
  narrow.rowTiles = llvm::divideCeil(shape.chunkSize / rows, narrow.warps);
  const int64_t moreGroups = 2 * keyGroups;
  if (paddedKeyDim % (moreGroups * blockColumns) == 0 &&
      narrow.columns % (moreGroups * blockColumns) == 0)
    narrow.keyGroups = moreGroups;
  if (narrow.sharedBytes(shape, ChunkMmaKernel::States) > tiling.maxSharedBytes)
    return std::nullopt;
  return narrow;
}

func::FuncOp mlir::attn::buildSimtMmaRecurrenceKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const LinearRecurrenceShape &shape, const SimtMmaRecurrenceTiling &mma,
    ChunkMmaKernel kind, const GpuTiling &tiling, TypeRange bindingTypes) {
  return SimtMmaRecurrenceKernel(builder, loc, name, shape, mma, kind, tiling,
                                 bindingTypes)
      .build();
}
