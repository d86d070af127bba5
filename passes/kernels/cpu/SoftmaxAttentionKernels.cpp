//===- SoftmaxAttentionKernels.cpp - CPU kernels of softmax attention -----===//
//
// Three workgroup bodies:
//
//  * flash: one workgroup = (batch, head, query tile of TQ rows). It walks
//    the key tiles that the mask leaves visible to any row of the tile (so
//    causal costs half of dense and a sliding window O(TQ * W)), carrying the
//    online-softmax state (acc [TQ, Dv], running max m [TQ], running sum
//    l [TQ]) in scratch. Scores are computed transposed, S^T [TK, TQ], so
//    the softmax reductions run down the columns with one query per lane:
//    no horizontal reductions, and only q is repacked (once per workgroup).
//  * split-KV: one workgroup = (batch, kv head, key range, query row),
//    serving every query head of the kv head's group so each key block is
//    read from memory once. For decode, where one query row must use every
//    thread; it writes the normalized partial output and its log-sum-exp.
//  * merge: one workgroup = (batch, head, query row); it combines the
//    partials through their log-sum-exp and applies the epilogue.
//
// A ragged batch (SPEC §8) runs the same bodies over the entries of a plan
// made per call by a fourth, one-workgroup kernel (RaggedPlan).
//
// A row with no visible key keeps m = -inf and l = 0 and gives o = 0 and
// lse = -inf: exponentials are taken against a "safe" max that is 0 when
// the max is -inf, so no inf - inf appears.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/cpu/CpuKernels.h"

#include <cmath>
#include <optional>

using namespace mlir;
using namespace mlir::attn;

void mlir::attn::storeOutputRow(KernelEmitter &e,
                                const SoftmaxAttentionShape &shape,
                                Value accRow, ValueRange accIndexPrefix,
                                Value inv, Value gate, Value out,
                                ValueRange outIndexPrefix) {
  int64_t dv = shape.valueDim;
  Value invVec = e.broadcast(inv);
  Value headGate;
  if (gate && shape.headwiseGate) {
    SmallVector<Value> gateIndices(outIndexPrefix);
    gateIndices.push_back(e.index(0));
    headGate = e.broadcast(e.load(gate, gateIndices));
  }
  for (int64_t offset = 0; offset < dv; offset += e.width) {
    int64_t lanes = std::min(e.width, dv - offset);
    SmallVector<Value> accIndices(accIndexPrefix);
    accIndices.push_back(e.index(offset));
    Value o =
        e.fmul(vector::LoadOp::create(e.b, e.vec, accRow, accIndices), invVec);
    SmallVector<Value> outIndices(outIndexPrefix);
    outIndices.push_back(e.index(offset));
    if (gate)
      o = e.sigmoidGate(o, headGate ? headGate
                                    : e.loadVector(gate, outIndices, lanes));
    e.storeVector(o, out, outIndices, lanes);
  }
}

namespace {

/// Calls `body(first, size)` for tiles of `tile` items covering
/// [0, items): a loop over the whole tiles inside [0, loopItems) (inlined
/// when there is one), then tiles at static positions for the rest, so a
/// body can specialize on what only the last items need (a partial vector).
void forEachTile(KernelEmitter &e, int64_t loopItems, int64_t items,
                 int64_t tile, function_ref<void(Value, int64_t)> body) {
  int64_t loopTiles = loopItems / tile;
  if (loopTiles > 1)
    e.loop(e.index(0), e.index(loopTiles * tile), e.index(tile),
           [&](Value first) { body(first, tile); });
  else if (loopTiles == 1)
    body(e.index(0), tile);
  for (int64_t first = loopTiles * tile; first < items; first += tile)
    body(e.index(first), std::min(tile, items - first));
}

/// The keys some row of a flash tile sees: rows at positions firstPos ..
/// firstPos + rows - 1 (signed: Lq may exceed Lk without a mask) among
/// `lk` keys under `mask`. With a block mask the range starts at a
/// multiple of `keyTile`, where the tile classes' key tiles start.
std::pair<Value, Value> flashTileKeys(KernelEmitter &e, MaskKind mask,
                                      int64_t window, Value firstPos,
                                      Value rows, Value lk, int64_t keyTile,
                                      bool blockMask) {
  Value c0 = e.index(0), c1 = e.index(1);
  Value lastPos = e.sub(e.add(firstPos, rows), c1);
  Value begin = c0, end = lk;
  if (mask != MaskKind::None)
    end = e.maxS(c0, e.minS(lk, e.add(lastPos, c1)));
  if (masksEarlyKeys(mask))
    begin = e.minS(end, e.maxS(c0, firstVisibleKey(e, mask, window, firstPos)));
  if (blockMask)
    begin = e.mul(e.div(begin, e.index(keyTile)), e.index(keyTile));
  return {begin, end};
}

/// Where a workgroup of the flash (or tile-class) kernel finds its block
/// mask row: [bm, hm, query tile, :] of the tile classes.
SmallVector<Value> blockMaskRow(KernelEmitter &e,
                                const SoftmaxAttentionShape &shape, Value batch,
                                Value head, Value queryTile) {
  return {shape.variants.maskModReadsBatch() ? batch : e.index(0),
          shape.variants.maskModReadsHead() ? head : e.index(0), queryTile};
}

} // namespace

//===----------------------------------------------------------------------===//
// Flash kernel
//===----------------------------------------------------------------------===//

namespace {

/// The flash kernel, built one phase at a time (see the file comment):
/// the workgroup's rows and the keys they see, the transposed q tile and
/// the online-softmax state, then per key tile the scores S^T, the
/// online-softmax update and P V, then the epilogue.
class FlashKernel {
public:
  FlashKernel(OpBuilder &builder, Location loc, StringRef name,
              const SoftmaxAttentionShape &shape, const CpuTiling &tiling,
              TypeRange bindingTypes, KeyPart part);

  /// Emits the phases in order and returns the kernel.
  func::FuncOp build();

private:
  // The phases, in the order build() emits them.
  void bindArguments();
  void mapRows();
  void findKeyRange();
  void findTreeNodes();
  void allocateState();
  void stageQuery();
  void walkKeyTiles();
  /// Copies the key tile's k and v rows (its `cols` keys from k0, rounded
  /// up to a multiple of 4 by repeating the range's last key) into kTile
  /// and vTile.
  void stageKeyTile(Value k0, Value cols);
  void scoreKeyTile(Value k0, Value cols);
  /// The sums of q k^T of a register block, from `init`: keys `keyRows`
  /// (of `keys`: k, or kTile when staged) x query vectors iv0 .. iv0 + nv
  /// - 1; on f32 products (scaled, as q^T is) or on pair products
  /// (pairedScores; unscaled, from k).
  SmallVector<Value> scoreKeyProducts(Value keys,
                                      ArrayRef<SmallVector<Value>> keyRows,
                                      int64_t iv0, int64_t nv, ValueRange init);
  /// Scores of the 4 keys from j0 whose rows are `keyRows` against every
  /// query vector, into scores.
  void scoreKeyBlock(Value j0, ArrayRef<SmallVector<Value>> keyRows);
  SmallVector<Value> scoreKeyPairs(ArrayRef<SmallVector<Value>> keyRows,
                                   int64_t iv0, int64_t nv, ValueRange init);
  /// S^T of the key tile on AMX tiles (onTiles): the tile's keys staged
  /// as stored, [TK, Dt], times qT's pairs, unscaled.
  void scoreKeyTileOnTiles(Value k0);
  /// The online-softmax step of the tile's `cols` keys, in place in
  /// scores (P^T); `masked`: the tile needs its per-key tests.
  void updateSoftmax(Value k0, Value cols, Value isFull, bool masked);
  /// Whether every key of the tile at k0 is visible to every row of the
  /// query tile (onTiles: and the tile is whole), so its softmax step
  /// needs no test per key; null where that is never known (a tree's windows, a
  /// mask_mod without a block mask).
  Value showsEveryKey(Value k0, Value isFull);
  /// The online-softmax step on tiles (onTiles): P's pairs straight into
  /// pairedP from the exponentials, and each row's max raised only past
  /// kLazyMaxMargin. `masked`: the tile needs its per-key tests (mask,
  /// mask_mod, keys past the range). Returns whether the tile raised any
  /// row's max (so acc needs its rescale).
  Value updateSoftmaxOnTiles(Value k0, Value isFull, bool masked);
  /// The exponentials of query vector iv's scores of keys [0, cols) by
  /// `probability(j)` (key j's p), and their sum: P^T in place in the
  /// scores, or with pair products (pairedValues) P's bf16 pairs of keys
  /// straight into pairedP, a key past `cols` pairing with p = 0.
  Value exponentiate(int64_t iv, Value cols,
                     function_ref<Value(Value)> probability);
  /// The end of a softmax step for the rows at `col`: their new max, acc's
  /// rescale (alpha) and l = alpha l + tileSum.
  void storeSoftmaxState(Value col, Value newMax, Value rescale, Value tileSum);
  void accumulateValues(Value k0, Value cols);
  /// acc = alpha acc + P V on AMX tiles (onTiles), acc's rescale only
  /// where `anyRescaled`: P's rows from the pairs of P^T by 16 x 16
  /// transposes of their 32-bit pairs.
  void accumulateValuesOnTiles(Value k0, Value cols, Value anyRescaled);
  /// A block of up to 2 x 2 tile products, 8 tile registers at most:
  /// `result`'s 16 x 16 tile at (row + 16 r, col + 16 c) becomes the sum,
  /// over `chunks` pieces of 32 of the reduction, of `first`'s 16 x 32
  /// tile at (row + 16 r, 32 piece) times `second`'s pairs at
  /// (16 piece, 2 (col + 16 c)), plus its own value where `accumulate`.
  /// Each operand tile is loaded once. AMX renames no tile registers:
  /// products that do not depend on each other must use different ones to
  /// overlap.
  void multiplyTiles(Value first, Value second, Value result, int64_t row,
                     int64_t col, int64_t rows, int64_t cols, int64_t chunks,
                     bool accumulate);
  /// Rows toRow .. toRow + 15 of `to` from column `toCol`, seen as 32-bit
  /// words: the transpose of the 16 x 16 words of `from`'s rows
  /// `fromRows` (each a row's indices, the last dim left out) from column
  /// `fromCol` (bf16 pairs both).
  void transposeWords(Value from, ArrayRef<SmallVector<Value>> fromRows,
                      int64_t fromCol, Value to, int64_t toRow, int64_t toCol);
  /// The key tile's v rows in pairs of keys (pairedValues); on tiles the
  /// whole tile, a pair past the range repeating its last key.
  void pairValues(Value k0, Value cols);
  /// A register block's sums of P V from `init`: rows `rowIdx`, value
  /// columns off0 .. off0 + nv W - 1 (`laneCounts` of each vector); on f32
  /// products or on pair products (pairedValues).
  SmallVector<Value> accumulateValueProducts(Value k0, Value cols,
                                             ArrayRef<Value> rowIdx,
                                             int64_t off0,
                                             ArrayRef<int64_t> laneCounts,
                                             ValueRange init);
  SmallVector<Value> accumulateValuePairs(Value cols, ArrayRef<Value> rowIdx,
                                          int64_t off0, int64_t nv,
                                          ValueRange init);
  void storeOutputs();

  /// What the per-key tests of query vector iv (rows iv W .. iv W + W - 1
  /// of the tile) need: its rows' positions (queryPos), their first
  /// visible keys under the mask (firstKey, where the mask has them), a
  /// tree node's window start (rowStart) and the positions the variant
  /// regions see (regionQueryPos).
  struct QueryLanes {
    Value col, queryPos, firstKey, rowStart, regionQueryPos;
  };
  QueryLanes queryLanes(int64_t iv);
  /// The visibility of key `keyIndex` to the rows of `lanes`, or null
  /// where every key is visible: the op's mask (up to each row's
  /// position, from its `firstKey` when the mask has one), a tree node's
  /// window start and the mask_mod (none on a tile the block mask found
  /// full, `isFull`).
  Value visibleKeys(Value keyIndex, const QueryLanes &lanes, Value isFull);
  /// The score the softmax takes from the scaled product `s` of key
  /// `keyIndex`: softcapped, through the score_mod region, and -inf where
  /// `visible` (a mask or null) hides the key.
  Value transformScore(Value s, Value keyIndex, const QueryLanes &lanes,
                       Value visible);

  const SoftmaxAttentionShape &shape;
  const CpuTiling &tiling;
  const KeyPart part;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  KernelEmitter e;
  VariantEmitter variants;

  // What the kind of kernel says.
  bool treePrefix, treeWindow, treeDepths;
  /// q k^T on AVX512-BF16's pair products (bf16 q and k, an even D): q^T
  /// staged as pairs of features, unscaled, and the scale applied to the
  /// sums.
  bool pairedScores;
  /// P V on pair products (bf16 v): each key tile's P^T and v rows
  /// interleaved in pairs of keys, P rounded to bf16 (as the GPU kernels'
  /// P operand); the sums of P stay f32.
  bool pairedValues;
  /// Both products on AMX tiles (CpuTiling::amxTiles, with pairedScores
  /// and pairedValues): 16 x 16 f32 blocks of S^T = k q^T and of
  /// acc += P v, each the sum of 32-long bf16 pair products of a block of
  /// 16 rows of the first operand and 16 pairs of rows of the second. The
  /// tile operands are memory (AMX loads tiles from rows at a stride), so
  /// the key tile's rows are staged contiguous, features padded to Dt (a
  /// multiple of 32) with zeros, and P goes through memory row by row.
  bool onTiles;
  /// Over a paged cache, the products read each key tile's rows from
  /// scratch (kTile, vTile) where they are copied once per tile: read in
  /// place, each row's page lookup and address (a table load, a division
  /// and a remainder by P) sat in the products' inner loops, where LLVM
  /// kept them beside the accumulators and spilled (extend of 256 queries
  /// over 4K keys: 1.38x the instructions of contiguous keys in
  /// cachegrind, 5.6x the stores; 1.36-1.59x the time, with one page per
  /// sequence too). The pair products stage their own (pairedV) or read
  /// k in place (pairedScores).
  bool stagedKeys, stagedValues;
  /// The mask the rows' positions see: a tree's prefix is all visible.
  MaskKind mask;
  int64_t W, TQ, TK, D, Dv, DvPadded, queryVectors, group;
  /// The vectors of a register block of both products (4 keys or rows x
  /// blockVectors vectors of sums): 4 with AVX-512's 32 vector registers,
  /// where the block's operands then serve twice the products a load
  /// (0.82-0.92x the time of 2, bf16 and f32; bench/RESULTS.md); 2 with
  /// AVX2's 16.
  int64_t blockVectors;
  /// The features of a tile product (onTiles): D rounded up to 32.
  int64_t Dt;

  // The bindings.
  SoftmaxBindings inputs;
  Value q, k, v, parents, gate, sinks, out, lse, tileClasses, workgroup;
  /// Where key j of the tile's sequence is (after mapRows).
  std::optional<KeyRows> kv;
  /// Where the tile's rows are.
  std::optional<QueryRows> queries;

  Value c0, c1, c4, lq, lk;
  // The rows (mapRows): query rows q0 .. q0 + rows - 1 of one head; in a
  // ragged batch, whether the plan gives the workgroup a tile.
  Value tile, head, batch, kvHead, q0, rows, hasTile;
  // The keys the tile sees (findKeyRange): rows sit at positions
  // firstPos ...; with a block mask, where the tile's row of it is.
  Value firstPos, keyBegin, keyEnd;
  SmallVector<Value> classRow;
  /// A tree node's window start and position depend on its depth: each
  /// row's first visible prefix key and position P + depth, i32 [TQ].
  Value rowStarts, rowPositions;

  // Scratch (allocateState): q^T pre-scaled [D, TQ] (paired scores: q's
  // features in pairs [D / 2, 2 TQ], element (d, 2 i + p) being feature
  // 2 d + p of row i, unscaled), scores^T [TK, TQ],
  // and the online softmax state acc [TQ, Dv], m [TQ], l [TQ] plus the
  // rescale of the current step alpha [TQ]; paired values: the key tile's
  // P^T and v rows in pairs of keys, [TK / 2, 2 TQ] and [TK / 2, 2 Dv]
  // (element (j, 2 x + p) being key 2 j + p's).
  Value qT, scores, acc, runningMax, runningSum, alpha, pairedP, pairedV;
  /// The key tile's rows (stagedKeys, stagedValues): [TK, D], [TK, Dv].
  Value kTile, vTile;
  /// On tiles: the key tile's rows as stored, [TK, Dt], and P's rows,
  /// [TQ, TK] bf16.
  Value keyRows, pRows;
  /// Lane l of query vector iv is tile row iv * W + l.
  VectorType i32Vec;
  Value lanes;
};

FlashKernel::FlashKernel(OpBuilder &builder, Location loc, StringRef name,
                         const SoftmaxAttentionShape &shape,
                         const CpuTiling &tiling, TypeRange bindingTypes,
                         KeyPart part)
    : shape(shape), tiling(tiling), part(part), guard(builder),
      func(createKernel(builder, loc, name, bindingTypes, tiling,
                        part == KeyPart::TreePrefix ? "flash_tree_prefix"
                                                    : "flash")),
      b(loc, builder), e(b, tiling.vectorWidth),
      variants(e, shape.variants, shape.variants.buffersOf(func)) {
  assert(part != KeyPart::TreeNodes && "the flash kernel tiles whole ranges");
  bindArguments();
}

func::FuncOp FlashKernel::build() {
  c0 = e.index(0), c1 = e.index(1), c4 = e.index(4);
  queries.emplace(e, inputs);
  if (!shape.ragged)
    lq = e.dim(q, 2);
  mapRows();
  auto attend = [&] {
    if (shape.ragged)
      lq = queries->length(batch);
    queries->bind(batch);
    rows = e.minS(e.index(TQ), e.sub(lq, q0));
    kv.emplace(e, shape, inputs);
    kv->bind(batch);
    lk = kv->length(batch);
    if (treePrefix)
      lk = e.sub(lk, lq);
    findKeyRange();
    findTreeNodes();
    allocateState();
    stageQuery();
    walkKeyTiles();
    storeOutputs();
  };
  if (hasTile)
    e.ifThen(hasTile, attend);
  else
    attend();
  func::ReturnOp::create(b);
  return func;
}

void FlashKernel::bindArguments() {
  treePrefix = part == KeyPart::TreePrefix;
  W = e.width, TQ = tiling.queryTile, TK = tiling.keyTile;
  D = shape.headDim, Dv = shape.valueDim;
  DvPadded = roundUp(Dv, W);
  queryVectors = TQ / W;
  blockVectors = W >= 16 ? 4 : 2;
  group = shape.numHeads / shape.numKvHeads;

  auto args = func.getArguments();
  unsigned next = 0;
  inputs = SoftmaxBindings(func, shape, next);
  q = inputs.q, k = inputs.k, v = inputs.v;
  // The tree's prefix: the keys before the T = Lq tree keys, all visible,
  // or with a window those from each node's window start (its depth's);
  // variant regions see each node at its position P + depth.
  treeWindow = treePrefix && masksEarlyKeys(shape.mask);
  treeDepths = treePrefix && shape.treePrefixNeedsDepths();
  parents = treeDepths ? args[next++] : Value();
  gate = !treePrefix && shape.epilogue == Epilogue::SigmoidGate ? args[next++]
                                                                : Value();
  sinks = !treePrefix && shape.withSinks ? args[next++] : Value();
  out = args[next++];
  lse = treePrefix || shape.withLogSumExp ? args[next++] : Value();
  tileClasses = flashUsesBlockMask(shape, part) ? args[next++] : Value();
  workgroup = args.back();
  mask = treePrefix ? MaskKind::None : shape.mask;
  pairedScores = tiling.bf16Dot && D % 2 == 0 &&
                 KernelEmitter::storageType(q).isBF16() &&
                 KernelEmitter::storageType(k).isBF16();
  pairedValues = tiling.bf16Dot && KernelEmitter::storageType(v).isBF16();
  onTiles = tiling.amxTiles && pairedScores && pairedValues;
  assert((!onTiles || (TQ % 32 == 0 && TK % 32 == 0)) &&
         "AMX tiles take blocks of 2 x 16 rows and 32 keys");
  Dt = onTiles ? roundUp(D, 32) : D;
  stagedKeys = shape.paged() && !pairedScores;
  stagedValues = shape.paged() && !pairedValues;
}

void FlashKernel::mapRows() {
  Value numHeads = e.index(shape.numHeads);
  if (shape.ragged) {
    // Head fastest, then the plan's entry (sequence, first row): the
    // heads of a kv group read the same keys one after the other.
    Value entry = e.div(workgroup, numHeads);
    head = e.rem(workgroup, numHeads);
    Value sequence = e.loadInt(inputs.plan, {entry, c0});
    hasTile = e.icmp(arith::CmpIPredicate::sge, sequence, e.i32(0));
    batch = e.toIndex(sequence);
    q0 = e.toIndex(e.loadInt(inputs.plan, {entry, c1}));
  } else {
    Value queryTiles = e.ceilDiv(lq, e.index(TQ));
    tile = e.rem(workgroup, queryTiles);
    Value bh = e.div(workgroup, queryTiles);
    head = e.rem(bh, numHeads);
    batch = e.div(bh, numHeads);
    q0 = e.mul(tile, e.index(TQ));
  }
  kvHead = e.div(head, e.index(group));
}

void FlashKernel::findKeyRange() {
  // Visible key range of the whole tile: rows sit at positions
  // Lk - Lq + q0 ... + rows - 1.
  firstPos = e.add(e.sub(lk, lq), q0);
  std::tie(keyBegin, keyEnd) = flashTileKeys(
      e, mask, shape.window, firstPos, rows, lk, TK, tileClasses != nullptr);
  if (tileClasses)
    classRow = blockMaskRow(e, shape, batch, head, tile);
}

void FlashKernel::findTreeNodes() {
  // Rows past the end repeat the last node; the tile's keys start at the
  // smallest first key.
  if (treeDepths) {
    auto rowType = MemRefType::get({TQ}, b.getI32Type());
    rowStarts = memref::AllocaOp::create(b, rowType, b.getI64IntegerAttr(64));
    rowPositions =
        memref::AllocaOp::create(b, rowType, b.getI64IntegerAttr(64));
    Value lastNode = e.sub(lq, c1);
    keyBegin =
        e.loop(c0, e.index(TQ), c1, {keyEnd}, [&](Value i, ValueRange it) {
          Value node = e.minS(e.add(q0, i), lastNode);
          TreeNodeKeys keys(e, parents, batch, node, lk, shape.mask,
                            shape.window);
          memref::StoreOp::create(b, e.toI32(keys.prefixBegin), rowStarts, i);
          memref::StoreOp::create(b, e.toI32(keys.position), rowPositions, i);
          return SmallVector<Value>{e.minS(it[0], keys.prefixBegin)};
        })[0];
  }
  if (!treeWindow)
    rowStarts = Value();
}

void FlashKernel::allocateState() {
  qT = pairedScores ? e.scratch({Dt / 2, 2 * TQ}, b.getBF16Type())
                    : e.scratch({D, TQ});
  if (onTiles) {
    keyRows = e.scratch({TK, Dt}, b.getBF16Type());
    pRows = e.scratch({TQ, TK}, b.getBF16Type());
    // The padding features multiply each other: zeros, never rewritten.
    auto zeros = arith::ConstantOp::create(
        b, DenseElementsAttr::get(VectorType::get({32}, b.getBF16Type()),
                                  b.getFloatAttr(b.getBF16Type(), 0.0)));
    for (int64_t d2 = D / 2; d2 < Dt / 2; ++d2)
      for (int64_t col = 0; col < 2 * TQ; col += 32)
        vector::StoreOp::create(b, zeros, qT,
                                ValueRange{e.index(d2), e.index(col)});
    if (Dt != D)
      e.loop(c0, e.index(TK), c1, [&](Value r) {
        vector::StoreOp::create(b, zeros, keyRows,
                                ValueRange{r, e.index(Dt - 32)});
      });
  }
  scores = e.scratch({TK, TQ});
  acc = e.scratch({TQ, DvPadded});
  if (pairedValues) {
    pairedP = e.scratch({TK / 2, 2 * TQ}, b.getBF16Type());
    pairedV = e.scratch({TK / 2, 2 * DvPadded}, b.getBF16Type());
  }
  if (stagedKeys)
    kTile = e.scratch({TK, roundUp(D, W)});
  if (stagedValues)
    vTile = e.scratch({TK, DvPadded});
  runningMax = e.scratch({TQ});
  runningSum = e.scratch({TQ});
  alpha = e.scratch({TQ});
}

void FlashKernel::stageQuery() {
  Value scale = e.scalar(shape.scale);
  Value lastRow = e.sub(lq, c1);
  // Pairs of features are 32-bit words: qT's words [D / 2, TQ] are the
  // transpose of q's rows' [TQ, D / 2], 16 x 16 words at a time where D is
  // a multiple of 32.
  const bool byWords = pairedScores && D % 32 == 0 && TQ % 16 == 0;
  if (byWords) {
    for (int64_t i = 0; i < TQ; i += 16) {
      SmallVector<SmallVector<Value>> queryRows;
      for (int64_t r = 0; r < 16; ++r)
        queryRows.push_back(queries->at(
            batch, head, e.minS(e.add(q0, e.index(i + r)), lastRow)));
      for (int64_t d = 0; d < D; d += 32)
        transposeWords(q, queryRows, d, qT, d / 2, 2 * i);
    }
  } else {
    e.loop(c0, e.index(TQ), c1, [&](Value i) {
      // Rows past the end repeat the last row; their results are not stored.
      Value row = e.minS(e.add(q0, i), lastRow);
      SmallVector<Value> queryRow = queries->at(batch, head, row);
      e.loop(c0, e.index(D), c1, [&](Value d) {
        if (pairedScores) {
          Value feature = memref::LoadOp::create(b, q, withIndex(queryRow, d));
          Value pairColumn = e.add(e.mul(i, e.index(2)), e.rem(d, e.index(2)));
          memref::StoreOp::create(b, feature, qT,
                                  {e.div(d, e.index(2)), pairColumn});
          return;
        }
        e.store(e.fmul(e.load(q, withIndex(queryRow, d)), scale), qT, {d, i});
      });
    });
  }
  for (int64_t iv = 0; iv < queryVectors; ++iv) {
    e.storeVector(e.splat(kNegInf), runningMax, {e.index(iv * W)}, W);
    e.storeVector(e.splat(0.0), runningSum, {e.index(iv * W)}, W);
  }
  e.loop(c0, e.index(TQ), c1, [&](Value i) {
    for (int64_t off = 0; off < DvPadded; off += W)
      e.storeVector(e.splat(0.0), acc, {i, e.index(off)}, W);
  });
  i32Vec = VectorType::get({W}, b.getI32Type());
  lanes = e.laneIds();
}

void FlashKernel::walkKeyTiles() {
  // One key tile [k0, k0 + TK) of the range; `isFull` (with a block mask)
  // says the mask_mod shows every key of the tile to every row.
  auto flashTile = [&](Value k0, Value isFull) {
    Value cols = e.minS(e.index(TK), e.sub(keyEnd, k0));
    // Most tiles of a long row show every key to every row: their
    // softmax step runs without the per-key tests.
    Value everyKey = showsEveryKey(k0, isFull);
    auto withKeyTests =
        [&](function_ref<SmallVector<Value>(bool masked)> step) {
          return everyKey ? e.ifElse(
                                everyKey, [&] { return step(false); },
                                [&] { return step(true); })
                          : step(true);
        };
    if (onTiles) {
      scoreKeyTileOnTiles(k0);
      Value anyRescaled = withKeyTests([&](bool masked) -> SmallVector<Value> {
        return {updateSoftmaxOnTiles(k0, isFull, masked)};
      })[0];
      accumulateValuesOnTiles(k0, cols, anyRescaled);
      return;
    }
    stageKeyTile(k0, cols);
    scoreKeyTile(k0, cols);
    withKeyTests([&](bool masked) -> SmallVector<Value> {
      updateSoftmax(k0, cols, isFull, masked);
      return {};
    });
    accumulateValues(k0, cols);
  };
  e.loop(keyBegin, keyEnd, e.index(TK), [&](Value k0) {
    // The tile's class under the block mask: empty tiles are skipped, full
    // ones evaluate no mask_mod.
    Value isFull;
    if (tileClasses) {
      SmallVector<Value> at(classRow);
      at.push_back(e.div(k0, e.index(TK)));
      Value tileClass = memref::LoadOp::create(b, tileClasses, at);
      isFull =
          e.icmp(arith::CmpIPredicate::eq, tileClass,
                 arith::ConstantIntOp::create(b, b.getI8Type(), kFullTile));
      e.ifThen(
          e.icmp(arith::CmpIPredicate::ne, tileClass,
                 arith::ConstantIntOp::create(b, b.getI8Type(), kEmptyTile)),
          [&] { flashTile(k0, isFull); });
      return;
    }
    flashTile(k0, isFull);
  });
}

void FlashKernel::stageKeyTile(Value k0, Value cols) {
  if (!stagedKeys && !stagedValues)
    return;
  // The products read the tile's `cols` rows, the scores in blocks of 4
  // (the last block's extra rows repeat the last key): a partial tile
  // stages no more.
  Value stagedRows = e.mul(e.ceilDiv(cols, c4), c4);
  Value lastKey = e.sub(keyEnd, c1);
  auto copyRow = [&](Value from, ArrayRef<Value> row, int64_t features,
                     Value to, Value r) {
    for (int64_t off = 0; off < features; off += W)
      vector::StoreOp::create(b,
                              e.loadVector(from, withIndex(row, e.index(off)),
                                           std::min(W, features - off)),
                              to, ValueRange{r, e.index(off)});
  };
  e.loop(c0, stagedRows, c1, [&](Value r) {
    SmallVector<Value> row =
        kv->at(batch, kvHead, e.minS(e.add(k0, r), lastKey));
    if (stagedKeys)
      copyRow(k, row, D, kTile, r);
    if (stagedValues)
      copyRow(v, row, Dv, vTile, r);
  });
}

void FlashKernel::scoreKeyTile(Value k0, Value cols) {
  Value lastKey = e.sub(keyEnd, c1);
  // S^T[j, i] = sum_d k[j, d] * qT[d, i], in register blocks of 4 keys x
  // blockVectors query vectors; keys past `cols` repeat the last one and
  // are masked by updateSoftmax.
  e.loop(c0, cols, c4, [&](Value j0) {
    auto keyRowsOf = [&](bool clamped) {
      SmallVector<SmallVector<Value>> keyRows;
      for (int64_t jj = 0; jj < 4; ++jj) {
        Value j = e.add(j0, e.index(jj));
        // Staged rows past the range already repeat its last key (TK is a
        // multiple of 4).
        Value key = e.add(k0, j);
        keyRows.push_back(
            stagedKeys
                ? SmallVector<Value>{j}
                : kv->at(batch, kvHead, clamped ? e.minS(key, lastKey) : key));
      }
      return keyRows;
    };
    // A block of 4 keys in the range reads rows without the clamp, whose
    // address arithmetic LLVM otherwise repeats in the product loop.
    if (stagedKeys) {
      scoreKeyBlock(j0, keyRowsOf(false));
      return;
    }
    e.ifElse(
        e.icmp(arith::CmpIPredicate::sle, e.add(e.add(k0, j0), e.index(3)),
               lastKey),
        [&] {
          scoreKeyBlock(j0, keyRowsOf(false));
          return SmallVector<Value>{};
        },
        [&] {
          scoreKeyBlock(j0, keyRowsOf(true));
          return SmallVector<Value>{};
        });
  });
}

void FlashKernel::scoreKeyBlock(Value j0,
                                ArrayRef<SmallVector<Value>> keyRows) {
  Value keys = stagedKeys ? kTile : k;
  for (int64_t iv0 = 0; iv0 < queryVectors; iv0 += blockVectors) {
    int64_t nv = std::min<int64_t>(blockVectors, queryVectors - iv0);
    SmallVector<Value> init(4 * nv, e.splat(0.0));
    SmallVector<Value> sums =
        pairedScores ? scoreKeyPairs(keyRows, iv0, nv, init)
                     : scoreKeyProducts(keys, keyRows, iv0, nv, init);
    for (int64_t jj = 0; jj < 4; ++jj)
      for (int64_t x = 0; x < nv; ++x)
        vector::StoreOp::create(
            b,
            pairedScores ? e.fmul(sums[jj * nv + x], e.splat(shape.scale))
                         : sums[jj * nv + x],
            scores, ValueRange{e.add(j0, e.index(jj)), e.index((iv0 + x) * W)});
  }
}

SmallVector<Value>
FlashKernel::scoreKeyProducts(Value keys, ArrayRef<SmallVector<Value>> keyRows,
                              int64_t iv0, int64_t nv, ValueRange init) {
  return e.loop(c0, e.index(D), c1, init, [&](Value d, ValueRange partial) {
    SmallVector<Value> qv;
    for (int64_t x = 0; x < nv; ++x)
      qv.push_back(vector::LoadOp::create(
          b, e.vec, qT, ValueRange{d, e.index((iv0 + x) * W)}));
    SmallVector<Value> updated;
    for (int64_t jj = 0; jj < 4; ++jj) {
      Value kb = e.broadcast(e.load(keys, withIndex(keyRows[jj], d)));
      for (int64_t x = 0; x < nv; ++x)
        updated.push_back(e.fma(kb, qv[x], partial[jj * nv + x]));
    }
    return updated;
  });
}

SmallVector<Value>
FlashKernel::scoreKeyPairs(ArrayRef<SmallVector<Value>> keyRows, int64_t iv0,
                           int64_t nv, ValueRange init) {
  auto pairs = VectorType::get({2 * W}, b.getBF16Type());
  return e.loop(
      c0, e.index(D / 2), c1, init, [&](Value d2, ValueRange partial) {
        SmallVector<Value> qv;
        for (int64_t x = 0; x < nv; ++x)
          qv.push_back(vector::LoadOp::create(
              b, pairs, qT, ValueRange{d2, e.index((iv0 + x) * 2 * W)}));
        Value d = e.mul(d2, e.index(2));
        SmallVector<Value> updated;
        for (int64_t jj = 0; jj < 4; ++jj) {
          Value kb = e.broadcastPair(k, withIndex(keyRows[jj], d));
          for (int64_t x = 0; x < nv; ++x)
            updated.push_back(e.dotPairs(partial[jj * nv + x], kb, qv[x]));
        }
        return updated;
      });
}

FlashKernel::QueryLanes FlashKernel::queryLanes(int64_t iv) {
  QueryLanes lanesOf;
  lanesOf.col = e.index(iv * W);
  lanesOf.queryPos = arith::AddIOp::create(
      b,
      vector::BroadcastOp::create(
          b, i32Vec,
          arith::IndexCastOp::create(b, b.getI32Type(),
                                     e.add(firstPos, lanesOf.col))),
      lanes);
  if (masksEarlyKeys(mask))
    lanesOf.firstKey = firstVisibleKey(e, mask, shape.window, lanesOf.queryPos);
  if (rowStarts)
    lanesOf.rowStart =
        vector::LoadOp::create(b, i32Vec, rowStarts, lanesOf.col);
  lanesOf.regionQueryPos =
      rowPositions
          ? Value(vector::LoadOp::create(b, i32Vec, rowPositions, lanesOf.col))
          : lanesOf.queryPos;
  return lanesOf;
}

Value FlashKernel::visibleKeys(Value keyIndex, const QueryLanes &lanesOf,
                               Value isFull) {
  auto toI32 = [&](Value index) {
    return arith::IndexCastOp::create(b, b.getI32Type(), index);
  };
  Value key = vector::BroadcastOp::create(b, i32Vec, toI32(keyIndex));
  Value visible;
  auto narrow = [&](Value condition) {
    visible = visible ? e.andI(visible, condition) : condition;
  };
  if (lanesOf.rowStart)
    narrow(e.icmp(arith::CmpIPredicate::sge, key, lanesOf.rowStart));
  if (mask != MaskKind::None)
    narrow(e.icmp(arith::CmpIPredicate::sle, key, lanesOf.queryPos));
  if (lanesOf.firstKey)
    narrow(e.icmp(arith::CmpIPredicate::sge, key, lanesOf.firstKey));
  if (variants.hasMaskMod()) {
    auto maskMod = [&]() -> SmallVector<Value> {
      return {variants.visible(batch, head, lanesOf.regionQueryPos, keyIndex)};
    };
    // A full tile needs no mask_mod.
    narrow(isFull
               ? e.ifElse(
                     isFull,
                     [&]() -> SmallVector<Value> {
                       return {arith::ConstantOp::create(
                           b, DenseElementsAttr::get(
                                  VectorType::get({W}, b.getI1Type()), true))};
                     },
                     maskMod)[0]
               : maskMod()[0]);
  }
  return visible;
}

Value FlashKernel::transformScore(Value s, Value keyIndex,
                                  const QueryLanes &lanesOf, Value visible) {
  s = variants.score(e.softcap(s, shape.softcap), batch, head,
                     lanesOf.regionQueryPos, keyIndex);
  return visible ? e.select(visible, s, e.splat(kNegInf)) : s;
}

Value FlashKernel::showsEveryKey(Value k0, Value isFull) {
  if (rowStarts || (variants.hasMaskMod() && !isFull))
    return Value();
  // Rows sit at positions firstPos .. firstPos + TQ - 1 (rows past the end
  // included: their results are dropped, but they must stay finite).
  Value lastKey = e.add(k0, e.index(TK - 1));
  Value every;
  auto require = [&](Value condition) {
    every = every ? e.andI(every, condition) : condition;
  };
  if (onTiles)
    require(e.icmp(arith::CmpIPredicate::slt, lastKey, keyEnd));
  if (mask != MaskKind::None)
    require(e.icmp(arith::CmpIPredicate::sle, lastKey, firstPos));
  if (masksEarlyKeys(mask))
    require(e.icmp(arith::CmpIPredicate::sge, k0,
                   firstVisibleKey(e, mask, shape.window,
                                   e.add(firstPos, e.index(TQ - 1)))));
  if (variants.hasMaskMod())
    require(isFull);
  return every ? every
               : arith::ConstantIntOp::create(b, b.getI1Type(), 1).getResult();
}

void FlashKernel::updateSoftmax(Value k0, Value cols, Value isFull,
                                bool masked) {
  // Online softmax, one query per lane: mask, new max, rescale factor,
  // exponentials in place, new sum. The scores are scaled already; a
  // first pass without tests or transforms stores nothing.
  const bool transformed = shape.softcap > 0.0 || variants.hasScoreMod();
  for (int64_t iv = 0; iv < queryVectors; ++iv) {
    QueryLanes lanesOf = queryLanes(iv);
    Value col = lanesOf.col;
    Value oldMax = vector::LoadOp::create(b, e.vec, runningMax, col);
    Value tileMax =
        e.loop(c0, cols, c1, {e.splat(kNegInf)}, [&](Value j, ValueRange it) {
          Value keyIndex = e.add(k0, j);
          Value s =
              vector::LoadOp::create(b, e.vec, scores, ValueRange{j, col});
          Value visible =
              masked ? visibleKeys(keyIndex, lanesOf, isFull) : Value();
          if (transformed || visible) {
            s = transformScore(s, keyIndex, lanesOf, visible);
            vector::StoreOp::create(b, s, scores, ValueRange{j, col});
          }
          return SmallVector<Value>{e.fmax(it[0], s)};
        })[0];
    Value newMax = e.fmax(oldMax, tileMax);
    Value safe = e.safeMax(newMax);
    Value rescale = e.exp(e.fsub(oldMax, safe));
    // p = e^(s - m) = 2^((s - m) log2 e) by math.exp2, whose approximation
    // takes fewer instructions than exp's and maps -inf to exactly 0. s - m
    // first, so that large scores lose no more than e^(s - m) would.
    Value log2e = e.splat(M_LOG2E);
    Value tileSum = exponentiate(iv, cols, [&](Value j) {
      return e.exp2(e.fmul(
          e.fsub(vector::LoadOp::create(b, e.vec, scores, ValueRange{j, col}),
                 safe),
          log2e));
    });
    storeSoftmaxState(col, newMax, rescale, tileSum);
  }
}

Value FlashKernel::exponentiate(int64_t iv, Value cols,
                                function_ref<Value(Value)> probability) {
  Value col = e.index(iv * W);
  if (!pairedValues)
    return e.loop(c0, cols, c1, {e.splat(0.0)}, [&](Value j, ValueRange it) {
      Value p = probability(j);
      vector::StoreOp::create(b, p, scores, ValueRange{j, col});
      return SmallVector<Value>{e.fadd(it[0], p)};
    })[0];
  // The tile's keys are a multiple of 4: row `next` of the scores exists,
  // but past `cols` it holds another tile's, whose p is dropped.
  return e.loop(
      c0, e.ceilDiv(cols, e.index(2)), c1, {e.splat(0.0)},
      [&](Value j2, ValueRange it) {
        Value j = e.mul(j2, e.index(2));
        Value next = e.add(j, c1);
        Value p0 = probability(j);
        Value p1 = probability(next);
        if (!onTiles)
          p1 = e.select(e.icmp(arith::CmpIPredicate::slt, next, cols), p1,
                        e.splat(0.0));
        vector::StoreOp::create(
            b, e.interleavePairs(e.toPairOperand(p0), e.toPairOperand(p1)),
            pairedP, ValueRange{j2, e.index(2 * iv * W)});
        return SmallVector<Value>{e.fadd(it[0], e.fadd(p0, p1))};
      })[0];
}

void FlashKernel::storeSoftmaxState(Value col, Value newMax, Value rescale,
                                    Value tileSum) {
  Value oldSum = vector::LoadOp::create(b, e.vec, runningSum, col);
  vector::StoreOp::create(b, e.fma(oldSum, rescale, tileSum), runningSum, col);
  vector::StoreOp::create(b, newMax, runningMax, col);
  vector::StoreOp::create(b, rescale, alpha, col);
}

/// How far a tile's max may exceed a row's running max before the row
/// takes it (onTiles): e^8 ~ 3e3 bounds the probabilities and, over
/// 2^24 keys, their sum stays far from f32's range.
constexpr double kLazyMaxMargin = 8.0;

Value FlashKernel::updateSoftmaxOnTiles(Value k0, Value isFull, bool masked) {
  // The tile products' sums are unscaled. Where the softmax takes them as
  // scale * s (no softcap, no score_mod, a positive scale), the max is
  // scale times theirs and the scale goes into the exponentials'
  // argument; otherwise the first pass stores the transformed scores.
  const bool scaleOnly =
      shape.softcap <= 0.0 && !variants.hasScoreMod() && shape.scale > 0.0;
  const double log2e = M_LOG2E;
  Value anyRescaled;
  for (int64_t iv = 0; iv < queryVectors; ++iv) {
    QueryLanes lanesOf = queryLanes(iv);
    Value col = lanesOf.col;
    Value oldMax = vector::LoadOp::create(b, e.vec, runningMax, col);
    Value tileMax = e.loop(
        c0, e.index(TK), c1, {e.splat(kNegInf)}, [&](Value j, ValueRange it) {
          Value s =
              vector::LoadOp::create(b, e.vec, scores, ValueRange{j, col});
          Value keyIndex = e.add(k0, j);
          Value visible;
          if (masked) {
            // The tile's rows past the range repeat its last key.
            Value inRange = vector::BroadcastOp::create(
                b, VectorType::get({W}, b.getI1Type()),
                e.icmp(arith::CmpIPredicate::slt, keyIndex, keyEnd));
            Value tests = visibleKeys(keyIndex, lanesOf, isFull);
            visible = tests ? e.andI(tests, inRange) : inRange;
          }
          if (!scaleOnly)
            s = transformScore(e.fmul(s, e.splat(shape.scale)), keyIndex,
                               lanesOf, visible);
          else if (visible)
            s = e.select(visible, s, e.splat(kNegInf));
          if (!scaleOnly || visible)
            vector::StoreOp::create(b, s, scores, ValueRange{j, col});
          return SmallVector<Value>{e.fmax(it[0], s)};
        })[0];
    if (scaleOnly)
      tileMax = e.fmul(tileMax, e.splat(shape.scale));
    // On tiles, acc's rescale is a pass over memory: a row keeps its
    // running max until the tile's exceeds it by kLazyMaxMargin (as
    // FlashAttention 4 does), so that most key tiles rescale no row. The
    // softmax is the same for any max its terms share; probabilities up
    // to e^margin are as exact in f32 and bf16 as those up to 1.
    Value raised = e.fcmp(arith::CmpFPredicate::UGT, tileMax,
                          e.fadd(oldMax, e.splat(kLazyMaxMargin)));
    Value newMax = e.select(raised, e.fmax(oldMax, tileMax), oldMax);
    Value anyRaised =
        vector::ReductionOp::create(b, vector::CombiningKind::OR, raised);
    anyRescaled = anyRescaled ? e.orI(anyRescaled, anyRaised) : anyRaised;
    Value safe = e.safeMax(newMax);
    // exactly 1 where acc is not rescaled
    Value rescale = e.select(raised, e.exp(e.fsub(oldMax, safe)), e.splat(1.0));
    // p = e^(t - m) = 2^(x c - m log2 e), x the stored score (t, or the
    // unscaled sum with c = scale log2 e): one FMA and math.exp2, whose
    // approximation maps -inf to exactly 0. P's pairs of keys go to
    // pairedP as the second product's bf16 operand.
    Value factor = e.splat(scaleOnly ? shape.scale * log2e : log2e);
    Value bias = e.fmul(safe, e.splat(-log2e));
    Value tileSum = exponentiate(iv, e.index(TK), [&](Value j) {
      return e.exp2(
          e.fma(vector::LoadOp::create(b, e.vec, scores, ValueRange{j, col}),
                factor, bias));
    });
    storeSoftmaxState(col, newMax, rescale, tileSum);
  }
  return anyRescaled;
}

void FlashKernel::accumulateValues(Value k0, Value cols) {
  // acc[i, :] = alpha[i] * acc[i, :] + sum_j P^T[j, i] * v[j, :], in
  // register blocks of 4 rows x blockVectors vectors of Dv.
  if (pairedValues)
    pairValues(k0, cols);
  e.loop(c0, rows, c4, [&](Value i0) {
    SmallVector<Value> rowIdx, rowAlpha;
    for (int64_t ii = 0; ii < 4; ++ii) {
      rowIdx.push_back(e.add(i0, e.index(ii)));
      rowAlpha.push_back(e.broadcast(e.load(alpha, rowIdx.back())));
    }
    for (int64_t off0 = 0; off0 < Dv; off0 += blockVectors * W) {
      SmallVector<int64_t> laneCounts;
      for (int64_t off = off0; off < std::min(Dv, off0 + blockVectors * W);
           off += W)
        laneCounts.push_back(std::min(W, Dv - off));
      int64_t nv = laneCounts.size();
      SmallVector<Value> init;
      for (int64_t ii = 0; ii < 4; ++ii)
        for (int64_t x = 0; x < nv; ++x)
          init.push_back(e.fmul(
              vector::LoadOp::create(
                  b, e.vec, acc, ValueRange{rowIdx[ii], e.index(off0 + x * W)}),
              rowAlpha[ii]));
      SmallVector<Value> updated =
          pairedValues ? accumulateValuePairs(cols, rowIdx, off0, nv, init)
                       : accumulateValueProducts(k0, cols, rowIdx, off0,
                                                 laneCounts, init);
      for (int64_t ii = 0; ii < 4; ++ii)
        for (int64_t x = 0; x < nv; ++x)
          vector::StoreOp::create(
              b, updated[ii * nv + x], acc,
              ValueRange{rowIdx[ii], e.index(off0 + x * W)});
    }
  });
}

void FlashKernel::pairValues(Value k0, Value cols) {
  Value lastKey = e.sub(keyEnd, c1);
  // The tiles' products read every pair of the tile (their p past the
  // range is 0, these rows' values finite).
  Value pairs = onTiles ? e.index(TK / 2) : e.ceilDiv(cols, e.index(2));
  e.loop(c0, pairs, c1, [&](Value j2) {
    Value j = e.mul(j2, e.index(2));
    SmallVector<Value> row0 =
        kv->at(batch, kvHead, e.minS(e.add(k0, j), lastKey));
    SmallVector<Value> row1 =
        kv->at(batch, kvHead, e.minS(e.add(k0, e.add(j, c1)), lastKey));
    for (int64_t off = 0; off < Dv; off += W) {
      int64_t lanes = std::min(W, Dv - off);
      Value first = e.loadStored(v, withIndex(row0, e.index(off)), lanes);
      Value second = e.loadStored(v, withIndex(row1, e.index(off)), lanes);
      vector::StoreOp::create(b, e.interleavePairs(first, second), pairedV,
                              ValueRange{j2, e.index(2 * off)});
    }
  });
}

SmallVector<Value> FlashKernel::accumulateValueProducts(
    Value k0, Value cols, ArrayRef<Value> rowIdx, int64_t off0,
    ArrayRef<int64_t> laneCounts, ValueRange init) {
  const int64_t nv = laneCounts.size();
  Value values = stagedValues ? vTile : v;
  return e.loop(c0, cols, c1, init, [&](Value j, ValueRange partial) {
    SmallVector<Value> row = stagedValues ? SmallVector<Value>{j}
                                          : kv->at(batch, kvHead, e.add(k0, j));
    SmallVector<Value> vv;
    for (int64_t x = 0; x < nv; ++x)
      vv.push_back(e.loadVector(values, withIndex(row, e.index(off0 + x * W)),
                                laneCounts[x]));
    SmallVector<Value> next;
    for (int64_t ii = 0; ii < 4; ++ii) {
      Value p = e.broadcast(e.load(scores, {j, rowIdx[ii]}));
      for (int64_t x = 0; x < nv; ++x)
        next.push_back(e.fma(p, vv[x], partial[ii * nv + x]));
    }
    return next;
  });
}

SmallVector<Value> FlashKernel::accumulateValuePairs(Value cols,
                                                     ArrayRef<Value> rowIdx,
                                                     int64_t off0, int64_t nv,
                                                     ValueRange init) {
  auto pairs = VectorType::get({2 * W}, b.getBF16Type());
  return e.loop(
      c0, e.ceilDiv(cols, e.index(2)), c1, init,
      [&](Value j2, ValueRange partial) {
        SmallVector<Value> vv;
        for (int64_t x = 0; x < nv; ++x)
          vv.push_back(vector::LoadOp::create(
              b, pairs, pairedV, ValueRange{j2, e.index(2 * (off0 + x * W))}));
        SmallVector<Value> next;
        for (int64_t ii = 0; ii < 4; ++ii) {
          Value p =
              e.broadcastPair(pairedP, {j2, e.mul(rowIdx[ii], e.index(2))});
          for (int64_t x = 0; x < nv; ++x)
            next.push_back(e.dotPairs(partial[ii * nv + x], vv[x], p));
        }
        return next;
      });
}

void FlashKernel::scoreKeyTileOnTiles(Value k0) {
  // The key tile's rows as stored; rows past the range repeat its last key
  // (updateSoftmax masks them).
  Value lastKey = e.sub(keyEnd, c1);
  e.loop(c0, e.index(TK), c1, [&](Value r) {
    SmallVector<Value> row =
        kv->at(batch, kvHead, e.minS(e.add(k0, r), lastKey));
    for (int64_t off = 0; off < D; off += W)
      vector::StoreOp::create(
          b,
          e.loadStored(k, withIndex(row, e.index(off)), std::min(W, D - off)),
          keyRows, ValueRange{r, e.index(off)});
  });
  // S^T[keys j, queries i] = sum over d of k[j, d] q[i, d]: k's rows are
  // the tile product's first operand, q's pairs (qT) its second.
  for (int64_t j = 0; j < TK; j += 32)
    for (int64_t i = 0; i < TQ; i += 32)
      multiplyTiles(keyRows, qT, scores, j, i, 2, 2, Dt / 32,
                    /*accumulate=*/false);
}

void FlashKernel::multiplyTiles(Value first, Value second, Value result,
                                int64_t row, int64_t col, int64_t rows,
                                int64_t cols, int64_t chunks, bool accumulate) {
  assert(rows * cols + rows + cols <= 8 && "AMX has 8 tile registers");
  auto operand = amx::TileType::get({16, 32}, b.getBF16Type());
  auto block = amx::TileType::get({16, 16}, b.getF32Type());
  auto resultAt = [&](int64_t r, int64_t c) {
    return SmallVector<Value>{e.index(row + 16 * r), e.index(col + 16 * c)};
  };
  SmallVector<Value> sums;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      sums.push_back(accumulate ? Value(amx::TileLoadOp::create(
                                      b, block, result, resultAt(r, c)))
                                : Value(amx::TileZeroOp::create(b, block)));
  for (int64_t piece = 0; piece < chunks; ++piece) {
    SmallVector<Value> lhs, rhs;
    for (int64_t r = 0; r < rows; ++r)
      lhs.push_back(amx::TileLoadOp::create(
          b, operand, first,
          ValueRange{e.index(row + 16 * r), e.index(32 * piece)}));
    for (int64_t c = 0; c < cols; ++c)
      rhs.push_back(amx::TileLoadOp::create(
          b, operand, second,
          ValueRange{e.index(16 * piece), e.index(2 * (col + 16 * c))}));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        sums[r * cols + c] = amx::TileMulFOp::create(b, block, lhs[r], rhs[c],
                                                     sums[r * cols + c]);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      amx::TileStoreOp::create(b, result, resultAt(r, c), sums[r * cols + c]);
}

void FlashKernel::transposeWords(Value from,
                                 ArrayRef<SmallVector<Value>> fromRows,
                                 int64_t fromCol, Value to, int64_t toRow,
                                 int64_t toCol) {
  auto words = VectorType::get({16}, b.getI32Type());
  auto pairs = VectorType::get({32}, b.getBF16Type());
  SmallVector<Value> block;
  for (const SmallVector<Value> &fromRow : fromRows)
    block.push_back(vector::BitCastOp::create(
        b, words,
        vector::LoadOp::create(b, pairs, from,
                               withIndex(fromRow, e.index(fromCol)))));
  SmallVector<Value> transposed = e.transposeRows(block);
  for (int64_t r = 0; r < 16; ++r)
    vector::StoreOp::create(b,
                            vector::BitCastOp::create(b, pairs, transposed[r]),
                            to, ValueRange{e.index(toRow + r), e.index(toCol)});
}

void FlashKernel::accumulateValuesOnTiles(Value k0, Value cols,
                                          Value anyRescaled) {
  pairValues(k0, cols);
  // P's rows: pairedP's 32-bit pairs [TK / 2, TQ], transposed.
  for (int64_t j2 = 0; j2 < TK / 2; j2 += 16) {
    SmallVector<SmallVector<Value>> pairRows;
    for (int64_t r = 0; r < 16; ++r)
      pairRows.push_back({e.index(j2 + r)});
    for (int64_t i = 0; i < TQ; i += 16)
      transposeWords(pairedP, pairRows, 2 * i, pRows, i, 2 * j2);
  }
  // acc *= alpha where a row's max rose (alpha is 1 everywhere else),
  // then acc += P v block by block, acc's blocks loaded as the products'
  // accumulators.
  e.ifThen(anyRescaled, [&] {
    e.loop(c0, e.index(TQ), c1, [&](Value i) {
      Value rowAlpha = e.broadcast(e.load(alpha, i));
      for (int64_t off = 0; off < DvPadded; off += W)
        vector::StoreOp::create(
            b,
            e.fmul(vector::LoadOp::create(b, e.vec, acc,
                                          ValueRange{i, e.index(off)}),
                   rowAlpha),
            acc, ValueRange{i, e.index(off)});
    });
  });
  for (int64_t i = 0; i < TQ; i += 32)
    for (int64_t x = 0; x < DvPadded; x += 32)
      multiplyTiles(pRows, pairedV, acc, i, x, 2,
                    std::min<int64_t>(2, (DvPadded - x) / 16), TK / 32,
                    /*accumulate=*/true);
}

void FlashKernel::storeOutputs() {
  // o = acc / l (0 for an empty row), the gate, lse = m + log l, with the
  // head's sink in the denominator (the tree's prefix: split 0 of the
  // partials, ungated and without the sink, which the merge adds).
  Value sink = sinks ? e.load(sinks, head) : Value();
  e.loop(c0, rows, c1, [&](Value i) {
    SmallVector<Value> at = queries->at(batch, head, e.add(q0, i));
    if (treePrefix)
      at.push_back(c0);
    KernelEmitter::RowEnd end =
        e.endSoftmaxRow(e.load(runningMax, i), e.load(runningSum, i), sink);
    storeOutputRow(e, shape, acc, {i}, end.scale, gate, out, at);
    if (lse)
      e.store(end.lse, lse, at);
  });
}

} // namespace

func::FuncOp mlir::attn::buildFlashAttentionKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const CpuTiling &tiling,
    TypeRange bindingTypes, KeyPart part) {
  return FlashKernel(builder, loc, name, shape, tiling, bindingTypes, part)
      .build();
}

//===----------------------------------------------------------------------===//
// Tile-class kernel (block masks)
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildTileClassKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const CpuTiling &tiling,
    TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "tile_classes");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  const int64_t W = e.width, TQ = tiling.queryTile, TK = tiling.keyTile;
  auto args = func.getArguments();
  Value q = args[0], k = args[1], classes = args[2];
  Value workgroup = args.back();
  VariantEmitter variants(e, shape.variants, shape.variants.buffersOf(func));
  Value c0 = e.index(0), c1 = e.index(1);

  // Workgroup order (bm, hm, query tile), the tile fastest; the mask_mod
  // sees batch bm and head hm (0 for an argument it does not read).
  Value lq = e.dim(q, 2), lk = e.dim(k, 2);
  Value queryTiles = e.dim(classes, 2);
  Value tile = e.rem(workgroup, queryTiles);
  Value rest = e.div(workgroup, queryTiles);
  Value head = e.rem(rest, e.dim(classes, 1));
  Value batch = e.div(rest, e.dim(classes, 1));
  Value q0 = e.mul(tile, e.index(TQ));
  Value rows = e.minS(e.index(TQ), e.sub(lq, q0));
  Value firstPos = e.add(e.sub(lk, lq), q0);
  auto [keyBegin, keyEnd] =
      flashTileKeys(e, shape.mask, shape.window, firstPos, rows, lk, TK, true);
  SmallVector<Value> classRow = blockMaskRow(e, shape, batch, head, tile);

  // Lane l of query vector iv is row iv * W + l; rows past the tile's end
  // count for neither "some key visible" nor "every key hidden".
  auto i1Vec = VectorType::get({W}, b.getI1Type());
  auto i32Vec = VectorType::get({W}, b.getI32Type());
  Value lanes = e.laneIds();
  Value allTrue =
      arith::ConstantOp::create(b, DenseElementsAttr::get(i1Vec, true));
  Value allFalse =
      arith::ConstantOp::create(b, DenseElementsAttr::get(i1Vec, false));
  e.loop(keyBegin, keyEnd, e.index(TK), [&](Value k0) {
    Value keys = e.minS(e.index(TK), e.sub(keyEnd, k0));
    SmallVector<Value> found = e.loop(
        c0, keys, c1, {allFalse, allTrue},
        [&](Value j, ValueRange it) -> SmallVector<Value> {
          Value key = e.add(k0, j);
          Value some = it[0], every = it[1];
          for (int64_t iv = 0; iv < TQ / W; ++iv) {
            Value first = e.toI32(e.index(iv * W));
            Value row = arith::AddIOp::create(
                b, vector::BroadcastOp::create(b, i32Vec, first), lanes);
            Value valid =
                e.icmp(arith::CmpIPredicate::slt, row,
                       vector::BroadcastOp::create(b, i32Vec, e.toI32(rows)));
            Value queryPos = arith::AddIOp::create(
                b, vector::BroadcastOp::create(b, i32Vec, e.toI32(firstPos)),
                row);
            Value visible = variants.visible(batch, head, queryPos, key);
            some = e.orI(some, e.andI(visible, valid));
            every =
                e.andI(every, e.orI(visible,
                                    arith::XOrIOp::create(b, valid, allTrue)));
          }
          return {some, every};
        });
    Value any =
        vector::ReductionOp::create(b, vector::CombiningKind::OR, found[0]);
    Value all =
        vector::ReductionOp::create(b, vector::CombiningKind::AND, found[1]);
    auto i8 = [&](int64_t value) -> Value {
      return arith::ConstantIntOp::create(b, b.getI8Type(), value);
    };
    Value tileClass = e.select(
        any, e.select(all, i8(kFullTile), i8(kPartialTile)), i8(kEmptyTile));
    SmallVector<Value> at(classRow);
    at.push_back(e.div(k0, e.index(TK)));
    memref::StoreOp::create(b, tileClass, classes, at);
  });
  func::ReturnOp::create(b);
  return func;
}

//===----------------------------------------------------------------------===//
// Split-KV kernel
//===----------------------------------------------------------------------===//

namespace {

/// The split-KV kernel, built one phase at a time (see the file comment):
/// the workgroup's row, kv group and split, the keys the row sees, the
/// group's scaled query rows and online-softmax state, then per step of
/// keys the dot products, the online-softmax update and P V, then the
/// partials.
class SplitKvKernel {
public:
  SplitKvKernel(OpBuilder &builder, Location loc, StringRef name,
                const SoftmaxAttentionShape &shape, const CpuTiling &tiling,
                TypeRange bindingTypes, KeyPart part);

  /// Emits the phases in order and returns the kernel.
  func::FuncOp build();

private:
  // The phases, in the order build() emits them.
  void bindArguments();
  void mapRow();
  void findKeyRange();
  void allocateState();
  void chooseRegisterTiles();
  void walkKeySteps();
  void scoreStep(Value j0);
  void updateSoftmax(Value j0, Value count);
  void accumulateValues(Value j0);
  void storePartials();

  /// A kv head the workgroup serves: `served` is its place among them.
  struct ServedKvHead {
    Value served;
    Value kvHead;
  };
  /// A tile of `heads` of a served kv head's query heads: g0 indexes the
  /// per-head scratch, index is the tile's place among the kv head's.
  struct HeadTile {
    Value g0, index;
    int64_t heads;
  };
  /// Calls `body` for each kv head the workgroup serves, in a loop: the
  /// step's code once, not once per kv head (unrolled, the kernel over a
  /// paged cache of 8 kv heads grew to 55 KB, past the 32 KiB L1
  /// instruction cache, and missed it on every step).
  void forEachServedKvHead(function_ref<void(const ServedKvHead &)> body);
  /// Calls `body` for the tiles of `tileHeads` query heads of `kvHead`.
  void forEachHeadTile(const ServedKvHead &kvHead,
                       function_ref<void(const HeadTile &)> body);
  /// A loop over tiles (of keys or of value vectors): calls its argument
  /// with each tile's first item and size.
  using TileLoop = function_ref<void(function_ref<void(Value, int64_t)>)>;
  /// Calls `body` for each pair of a head tile of `kvHead` and a tile of
  /// `tiles`, nested as `headTilesInside` says.
  void
  forEachHeadTileAnd(const ServedKvHead &kvHead, TileLoop tiles,
                     function_ref<void(const HeadTile &, Value, int64_t)> body);

  /// The dot products of `tile`'s heads with keys jj0 .. jj0 + tileKeys - 1
  /// of the step from j0.
  void scoreTile(Value j0, const ServedKvHead &kvHead, const HeadTile &tile,
                 Value jj0);
  /// `tile`'s heads' acc += P V over the step from j0 (whose V rows are at
  /// `rows`), for `vectors` value vectors from firstVector.
  void accumulateTile(Value j0, ArrayRef<SmallVector<Value>> rows,
                      const ServedKvHead &kvHead, const HeadTile &tile,
                      Value firstVector, int64_t vectors);
  int64_t headTilesPerKvHead() const {
    return llvm::divideCeil(group, tileHeads);
  }
  int64_t headTiles() const { return kvHeadsServed * headTilesPerKvHead(); }
  /// The place, in the order of forEachHeadTileAnd's loops over the
  /// served kv heads, of the iteration of `heads` with tile `tile` of
  /// `kvHead`'s `tiles` tiles (of keys or of value vectors).
  Value iterationOf(const ServedKvHead &kvHead, const HeadTile &heads,
                    Value tile, int64_t tiles) {
    Value inKvHead =
        headTilesInside
            ? e.add(e.mul(tile, e.index(headTilesPerKvHead())), heads.index)
            : e.add(e.mul(heads.index, e.index(tiles)), tile);
    return e.add(e.mul(kvHead.served, e.index(tiles * headTilesPerKvHead())),
                 inKvHead);
  }

  /// Requests into L2 (prefetcht1) part `iteration` of `iterations` of
  /// the rows of `rows` (k or v, `features` elements each) of the step of
  /// keys from `stepStart`: the served kv heads' rows in their order in
  /// memory (key by key, then kv head), whole rows when there are fewer
  /// iterations than rows, else a part of one row's cache lines.
  void prefetchStepRows(Value rows, int64_t features, Value stepStart,
                        Value iteration, int64_t iterations);

  /// Key jj of the step from j0; lanes past the range repeat the last key
  /// (and are masked).
  Value keyAt(Value j0, Value jj) { return e.minS(e.add(j0, jj), lastKey); }

  const SoftmaxAttentionShape &shape;
  const CpuTiling &tiling;
  const KeyPart part;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  KernelEmitter e;
  VariantEmitter variants;

  bool treePrefix, treeDepths;
  /// The mask the row's position sees: a tree's prefix is all visible.
  MaskKind mask;
  int64_t W, D, Dv, DPadded, DvPadded, group;
  /// The kv heads a workgroup serves, from kvHead on, and the query heads:
  /// over a paged cache every kv head, so that each page's rows ([P, Hkv,
  /// D]) are read front to back once, key by key, instead of every other
  /// row by one workgroup per kv head; else one.
  int64_t kvHeadsServed, headsServed;

  // The bindings.
  SoftmaxBindings inputs;
  Value q, k, v, parents, partialOut, partialLse, workgroup;
  /// Where key j of the row's sequence is (after mapRow).
  std::optional<KeyRows> kv;
  /// Where the row is.
  std::optional<QueryRows> queries;

  Value c0, c1, lq, lk, splits;
  // The row (mapRow) and the keys it sees in its split (findKeyRange); in
  // a ragged batch, the plan's entry, whether it gives the workgroup a row
  // and the entry's key range.
  Value row, split, kvHead, batch, firstHead;
  Value entry, hasRow, plannedBegin, plannedEnd;
  Value pos, begin, end, lastKey;
  /// Where the variant regions see the row: its position, or a tree
  /// node's.
  Value regionQueryPos;

  // Per query head of the group (allocateState): the scaled query row
  // (zero-padded to whole vectors), acc, and the running max and sum; per
  // step of keys, the dot products (one vector per key, lanes summed
  // later), the probabilities and the rescale of acc (see stepKeysFor).
  // Paired values (AVX512-BF16, bf16 v): P V on pair products of
  // consecutive keys, the probabilities also rounded to bf16
  // (pairedProbs). The scores stay on f32 products: paired, they ran 1.2x
  // faster with K and V in the caches but 1.2-1.3x slower from DRAM (on a
  // Zen 5 VM), where the step's V prefetches (scoreStep) then go out in
  // bursts.
  bool pairedValues;
  int64_t stepVectors, stepKeys;
  Value query, acc, runningMax, runningSum, dots, probs, rescales, groupSize;
  Value pairedProbs;

  // Register tiles (chooseRegisterTiles).
  int64_t tileHeads, tileKeys, tileVectors, keyTiles, valueTiles;
  /// Whether a kv head's head tiles are the inner loop of the products,
  /// inside its key or value tiles, rather than the outer one.
  bool headTilesInside;
  VectorType i32Vec;
  Value lanes;
};

SplitKvKernel::SplitKvKernel(OpBuilder &builder, Location loc, StringRef name,
                             const SoftmaxAttentionShape &shape,
                             const CpuTiling &tiling, TypeRange bindingTypes,
                             KeyPart part)
    : shape(shape), tiling(tiling), part(part), guard(builder),
      func(createKernel(builder, loc, name, bindingTypes, tiling,
                        part == KeyPart::TreePrefix ? "split_kv_tree_prefix"
                                                    : "split_kv")),
      b(loc, builder), e(b, tiling.vectorWidth),
      variants(e, shape.variants, shape.variants.buffersOf(func)) {
  assert(part != KeyPart::TreeNodes && "split-KV splits whole ranges");
  bindArguments();
}

func::FuncOp SplitKvKernel::build() {
  mapRow();
  auto attend = [&] {
    kv.emplace(e, shape, inputs);
    kv->bind(batch);
    lk = kv->length(batch);
    queries->bind(batch);
    if (shape.ragged)
      lq = queries->length(batch);
    if (treePrefix)
      lk = e.sub(lk, lq);
    findKeyRange();
    allocateState();
    chooseRegisterTiles();
    walkKeySteps();
    storePartials();
  };
  if (hasRow)
    e.ifThen(hasRow, attend);
  else
    attend();
  func::ReturnOp::create(b);
  return func;
}

void SplitKvKernel::bindArguments() {
  treePrefix = part == KeyPart::TreePrefix;
  W = e.width;
  D = shape.headDim, Dv = shape.valueDim;
  DPadded = roundUp(D, W), DvPadded = roundUp(Dv, W);
  group = shape.numHeads / shape.numKvHeads;
  kvHeadsServed = splitKvHeadsPerWorkgroup(shape);
  headsServed = group * kvHeadsServed;

  // The tree's prefix with a window or variant regions: each node's window
  // start and position depend on its depth, read from the parents.
  treeDepths = treePrefix && shape.treePrefixNeedsDepths();
  auto args = func.getArguments();
  unsigned next = 0;
  inputs = SoftmaxBindings(func, shape, next);
  q = inputs.q, k = inputs.k, v = inputs.v;
  parents = treeDepths ? args[next++] : Value();
  partialOut = args[next++], partialLse = args[next++];
  workgroup = args.back();
  pairedValues = tiling.bf16Dot && KernelEmitter::storageType(v).isBF16();
}

void SplitKvKernel::mapRow() {
  c0 = e.index(0), c1 = e.index(1);
  mask = treePrefix ? MaskKind::None : shape.mask;
  queries.emplace(e, inputs);
  if (shape.ragged) {
    // Kv head fastest, then the plan's entry (sequence, row, key range),
    // whose index is its partial's.
    Value kvSlots = e.index(shape.numKvHeads / kvHeadsServed);
    entry = e.div(workgroup, kvSlots);
    kvHead = e.mul(e.rem(workgroup, kvSlots), e.index(kvHeadsServed));
    firstHead = e.mul(kvHead, e.index(group));
    auto column = [&](int64_t c) {
      return e.loadInt(inputs.plan, {entry, e.index(c)});
    };
    Value sequence = column(0);
    hasRow = e.icmp(arith::CmpIPredicate::sge, sequence, e.i32(0));
    batch = e.toIndex(sequence);
    row = e.toIndex(column(1));
    plannedBegin = e.toIndex(column(2));
    plannedEnd = e.toIndex(column(3));
    return;
  }
  lq = e.dim(q, 2), splits = e.dim(partialLse, 3);
  // The tree's prefix: keys before the T = Lq tree keys, all visible, in
  // every split but the last (the tree keys').
  if (treePrefix)
    splits = e.sub(splits, c1);

  // Workgroup order (batch, kv head, split, row), the row fastest. One
  // workgroup serves every query head of its kv head: each block of keys
  // is read from memory once and reused from L1 by the whole group.
  row = e.rem(workgroup, lq);
  Value rest = e.div(workgroup, lq);
  split = e.rem(rest, splits);
  rest = e.div(rest, splits);
  Value kvSlots = e.index(shape.numKvHeads / kvHeadsServed);
  kvHead = e.mul(e.rem(rest, kvSlots), e.index(kvHeadsServed));
  batch = e.div(rest, kvSlots);
  firstHead = e.mul(kvHead, e.index(group));
}

void SplitKvKernel::findKeyRange() {
  pos = e.add(e.sub(lk, lq), row);
  if (shape.ragged) {
    begin = plannedBegin;
    end = plannedEnd;
  } else {
    begin = e.mul(split, e.index(tiling.splitKeys));
    end = e.minS(lk, e.add(begin, e.index(tiling.splitKeys)));
  }
  if (mask != MaskKind::None)
    end = e.minS(end, e.add(pos, c1));
  if (masksEarlyKeys(mask))
    begin = e.maxS(begin, firstVisibleKey(e, mask, shape.window, pos));
  regionQueryPos = pos;
  if (treeDepths) {
    TreeNodeKeys node(e, parents, batch, row, lk, shape.mask, shape.window);
    begin = e.maxS(begin, node.prefixBegin);
    regionQueryPos = node.position;
  }
  end = e.maxS(end, begin);
}

/// The keys of one step of the split-KV kernel, whole vectors of W keys:
/// each step pays per head an online-softmax update (maxima, the rescale
/// of acc, sums), which 16 keys (two AVX2 vectors) halve per key, while 8
/// halve the K and V a step streams through L1 between two uses of the
/// heads' queries and acc. Over a paged cache a step holds every kv head's
/// rows (splitKvHeadsPerWorkgroup), and 8 keys win: paged decode from DRAM
/// took 0.79-0.97x the time of 16 on Zen 3 (H/Hkv/D from 8/8/128 to
/// 64/8/128). Over contiguous keys 8 won for kv groups of 2 to 4 heads
/// (0.79-0.97x) and lost for one head (1.21-1.36x: a tile of 8 keys, so
/// little work per update) and for 16 (1.06-1.15x), whose products
/// outweigh their reads; groups of 8 were even (0.94-1.05x) and keep 16
/// (bench/RESULTS.md). Longer steps measured no faster.
static int64_t stepKeysFor(int64_t group, int64_t kvHeadsServed, int64_t W) {
  bool smallStep = kvHeadsServed > 1 || (group >= 2 && group <= 4);
  return roundUp(smallStep ? 8 : 16, W);
}

void SplitKvKernel::allocateState() {
  stepKeys = stepKeysFor(group, kvHeadsServed, W);
  stepVectors = stepKeys / W;
  query = e.scratch({headsServed, DPadded});
  acc = e.scratch({headsServed, DvPadded});
  runningMax = e.scratch({headsServed});
  runningSum = e.scratch({headsServed});
  dots = e.scratch({headsServed, stepKeys, W});
  probs = e.scratch({headsServed, stepKeys});
  if (pairedValues)
    pairedProbs = e.scratch({headsServed, stepKeys}, b.getBF16Type());
  rescales = e.scratch({headsServed});
  groupSize = e.index(headsServed);
  e.loop(c0, groupSize, c1, [&](Value g) {
    Value head = e.add(firstHead, g);
    SmallVector<Value> queryRow = queries->at(batch, head, row);
    for (int64_t off = 0; off < DPadded; off += W)
      vector::StoreOp::create(
          b,
          e.fmul(e.loadVector(q, withIndex(queryRow, e.index(off)),
                              std::min(W, D - off)),
                 e.splat(shape.scale)),
          query, ValueRange{g, e.index(off)});
    for (int64_t off = 0; off < DvPadded; off += W)
      vector::StoreOp::create(b, e.splat(0.0), acc,
                              ValueRange{g, e.index(off)});
    e.store(e.scalar(kNegInf), runningMax, {g});
    e.store(e.scalar(0.0), runningSum, {g});
  });
}

void SplitKvKernel::chooseRegisterTiles() {
  // Both products work on `tileHeads` heads of the group at once, so each
  // K or V vector loaded serves all of them and each query or probability
  // broadcast serves `tileKeys` keys or `tileVectors` value vectors. The
  // accumulators of a tile take half the vector registers (8 of AVX2's 16,
  // 16 of AVX-512's 32) and its operands most of the rest; anything larger
  // spills. (With one head at a time, LLVM hoisted each step's K and V
  // vectors out of the head loop into stack slots, and the kernel was bound
  // by loads: the tiles made GQA-4 decode from cache 1.3x faster.)
  const int64_t accumulators = W >= 16 ? 16 : 8;
  tileHeads = std::min<int64_t>(group, 4);
  tileKeys = 1;
  while (tileKeys * 2 * tileHeads <= accumulators && tileKeys * 2 <= W)
    tileKeys *= 2;
  tileVectors = std::max<int64_t>(1, accumulators / tileHeads);
  keyTiles = stepKeys / tileKeys;
  valueTiles = llvm::divideCeil(DvPadded / W, tileVectors);

  // A kv head's head tiles read the same key and value tiles, in the
  // order of the loops: all of a tile's heads before the next tile (head
  // tiles inside), or one head tile's whole step before the next one's.
  // Inside, LLVM hoists the tile's K or V vectors out of the head tile
  // loop into stack slots; outside, it does the same with a head tile's
  // queries, which the whole step uses, so with contiguous keys outside
  // is the faster (inside measured 1.06-1.14x the time at H = 32, Hkv = 4,
  // D = 128). Over a paged cache the served kv heads' rows alternate
  // ([P, Hkv, D]): a kv head's rows are Hkv * D apart (2 KiB at Hkv = 2,
  // D = 256), so a step's 16 rows fill only half the sets of a 32 KiB
  // 8-way L1 (Zen 3), and outside, they are evicted before the next head
  // tile reads them again (cachegrind's model of that L1: 2.2x contiguous
  // keys' misses). Inside, paged decode of Qwen3-Next's shape from DRAM
  // (4 x 4K keys) took 0.86-0.89x the time; from the caches, no difference.
  headTilesInside = kvHeadsServed > 1 && headTilesPerKvHead() > 1;

  i32Vec = VectorType::get({W}, b.getI32Type());
  lanes = e.laneIds();
}

void SplitKvKernel::walkKeySteps() {
  // One step of keys [j0, j0 + stepKeys).
  lastKey = e.sub(end, c1);
  e.loop(begin, end, e.index(stepKeys), [&](Value j0) {
    Value count = e.sub(end, j0);
    scoreStep(j0);
    updateSoftmax(j0, count);
    accumulateValues(j0);
  });
}

void SplitKvKernel::forEachServedKvHead(
    function_ref<void(const ServedKvHead &)> body) {
  if (kvHeadsServed == 1) {
    body({c0, kvHead});
    return;
  }
  e.loop(c0, e.index(kvHeadsServed), c1, [&](Value served) {
    body({served, e.add(kvHead, served)});
  });
}

void SplitKvKernel::forEachHeadTile(const ServedKvHead &kvHead,
                                    function_ref<void(const HeadTile &)> body) {
  forEachTile(e, group, group, tileHeads, [&](Value first, int64_t heads) {
    HeadTile tile;
    tile.g0 = kvHeadsServed == 1
                  ? first
                  : e.add(first, e.mul(kvHead.served, e.index(group)));
    tile.index = e.div(first, e.index(tileHeads));
    tile.heads = heads;
    body(tile);
  });
}

void SplitKvKernel::prefetchStepRows(Value rows, int64_t features,
                                     Value stepStart, Value iteration,
                                     int64_t iterations) {
  const int64_t stepRows = stepKeys * kvHeadsServed;
  const int64_t rowsPerIteration = llvm::divideCeil(stepRows, iterations);
  const int64_t iterationsPerRow = std::max<int64_t>(1, iterations / stepRows);
  const int64_t cacheLineBits = 64 * 8;
  const int64_t perLine =
      cacheLineBits / KernelEmitter::storageType(rows).getIntOrFloatBitWidth();
  const int64_t rowLines = llvm::divideCeil(features, perLine);
  const int64_t share = llvm::divideCeil(rowLines, iterationsPerRow);
  // The last iterations, when the iterations are no multiple of the rows,
  // reach rows of the step after (or the split's last key again): harmless.
  Value firstRow = e.mul(e.div(iteration, e.index(iterationsPerRow)),
                         e.index(rowsPerIteration));
  Value firstLine =
      e.mul(e.rem(iteration, e.index(iterationsPerRow)), e.index(share));
  for (int64_t u = 0; u < rowsPerIteration; ++u) {
    Value row = e.add(firstRow, e.index(u));
    Value key = row, rowKvHead = kvHead;
    if (kvHeadsServed > 1) {
      key = e.div(row, e.index(kvHeadsServed));
      rowKvHead = e.add(kvHead, e.rem(row, e.index(kvHeadsServed)));
    }
    SmallVector<Value> at = kv->at(batch, rowKvHead, keyAt(stepStart, key));
    for (int64_t n = 0; n < share; ++n) {
      // The last part may reach past the row: it requests the last line
      // again.
      Value line = share == rowLines ? e.index(n)
                                     : e.minS(e.add(firstLine, e.index(n)),
                                              e.index(rowLines - 1));
      memref::PrefetchOp::create(b, rows,
                                 withIndex(at, e.mul(line, e.index(perLine))),
                                 /*isWrite=*/false,
                                 /*localityHint=*/tiling.prefetchLocality(),
                                 /*isDataCache=*/true);
    }
  }
}

void SplitKvKernel::forEachHeadTileAnd(
    const ServedKvHead &kvHead, TileLoop tiles,
    function_ref<void(const HeadTile &, Value, int64_t)> body) {
  if (headTilesInside) {
    tiles([&](Value first, int64_t size) {
      forEachHeadTile(kvHead,
                      [&](const HeadTile &heads) { body(heads, first, size); });
    });
    return;
  }
  forEachHeadTile(kvHead, [&](const HeadTile &heads) {
    tiles([&](Value first, int64_t size) { body(heads, first, size); });
  });
}

void SplitKvKernel::scoreStep(Value j0) {
  // Dot products: dots[g, jj] holds the lane-wise products of query g and
  // key jj, summed over D.
  forEachServedKvHead([&](const ServedKvHead &kvHead) {
    forEachHeadTileAnd(
        kvHead,
        [&](function_ref<void(Value, int64_t)> body) {
          e.loop(c0, e.index(stepKeys), e.index(tileKeys),
                 [&](Value jj0) { body(jj0, tileKeys); });
        },
        [&](const HeadTile &tile, Value jj0, int64_t) {
          scoreTile(j0, kvHead, tile, jj0);
        });
  });
}

void SplitKvKernel::scoreTile(Value j0, const ServedKvHead &kvHead,
                              const HeadTile &tile, Value jj0) {
  Value g0 = tile.g0;
  int64_t heads = tile.heads;
  SmallVector<SmallVector<Value>> keys;
  for (int64_t t = 0; t < tileKeys; ++t)
    keys.push_back(
        kv->at(batch, kvHead.kvHead, keyAt(j0, e.add(jj0, e.index(t)))));
  // The step's V rows are requested as its scores are computed, so that
  // their misses overlap the dot products instead of stalling P V, and the
  // next step's K rows during P V (accumulateTile). The requests are
  // spread evenly over the iterations of the products, in the order the
  // rows lie in memory: the core tracks only a couple of dozen outstanding
  // misses, and a kernel whose products take long (a large kv group)
  // otherwise leaves the memory idle while it computes, and the hardware
  // prefetcher cannot follow a paged cache from page to page. Measured
  // from DRAM, runs interleaved (bench/RESULTS.md): Qwen3-Next's shape (a
  // kv group of 8, D = 256) 1.4-1.8x faster than with the V rows requested
  // by the first head tile alone and K left to the hardware prefetcher;
  // GQA-4 at 0.56-0.69x memcpy with V requested with the scores against
  // 0.41-0.52x with the step's V rows requested all at once as it starts;
  // V's burst into L2 0.47-0.56x against 0.38-0.48x into L1 (Zen 5),
  // where with the requests spread, into L1 is now the faster there
  // (CpuTiling::prefetchIntoL1).
  prefetchStepRows(
      v, Dv, j0,
      iterationOf(kvHead, tile, e.div(jj0, e.index(tileKeys)), keyTiles),
      headTiles() * keyTiles);
  SmallVector<Value> sums(heads * tileKeys, e.splat(0.0));
  for (int64_t off = 0; off < D; off += W) {
    SmallVector<Value> queries;
    for (int64_t h = 0; h < heads; ++h)
      queries.push_back(vector::LoadOp::create(
          b, e.vec, query, ValueRange{e.add(g0, e.index(h)), e.index(off)}));
    for (int64_t t = 0; t < tileKeys; ++t) {
      Value key = e.loadVector(k, withIndex(keys[t], e.index(off)),
                               std::min(W, D - off));
      for (int64_t h = 0; h < heads; ++h)
        sums[h * tileKeys + t] = e.fma(queries[h], key, sums[h * tileKeys + t]);
    }
  }
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t t = 0; t < tileKeys; ++t)
      vector::StoreOp::create(
          b, sums[h * tileKeys + t], dots,
          ValueRange{e.add(g0, e.index(h)), e.add(jj0, e.index(t)), c0});
}

void SplitKvKernel::updateSoftmax(Value j0, Value count) {
  // One online-softmax step per head: the scores of the step's keys, their
  // probabilities against the new running max, and acc's rescale.
  SmallVector<Value> inRange;
  for (int64_t i = 0; i < stepVectors; ++i)
    inRange.push_back(
        e.icmp(arith::CmpIPredicate::slt, lanes,
               vector::BroadcastOp::create(
                   b, i32Vec,
                   arith::IndexCastOp::create(b, b.getI32Type(),
                                              e.sub(count, e.index(i * W))))));
  // The keys of the step's vectors, one per lane, as the variant regions
  // see them.
  SmallVector<Value> keyLanes;
  if (!shape.variants.empty())
    for (int64_t i = 0; i < stepVectors; ++i)
      keyLanes.push_back(arith::AddIOp::create(
          b,
          vector::BroadcastOp::create(b, i32Vec,
                                      e.toI32(e.add(j0, e.index(i * W)))),
          lanes));
  e.loop(c0, groupSize, c1, [&](Value g) {
    Value head = e.add(firstHead, g);
    SmallVector<Value> scores;
    Value stepMax;
    for (int64_t i = 0; i < stepVectors; ++i) {
      SmallVector<Value> keyDots;
      for (int64_t jj = i * W; jj < (i + 1) * W; ++jj)
        keyDots.push_back(vector::LoadOp::create(
            b, e.vec, dots, ValueRange{g, e.index(jj), c0}));
      Value keyPos = keyLanes.empty() ? Value() : keyLanes[i];
      Value s = variants.score(e.softcap(e.sumEach(keyDots), shape.softcap),
                               batch, head, regionQueryPos, keyPos);
      Value visible = inRange[i];
      if (variants.hasMaskMod())
        visible = e.andI(visible,
                         variants.visible(batch, head, regionQueryPos, keyPos));
      scores.push_back(e.select(visible, s, e.splat(kNegInf)));
      stepMax = stepMax ? e.fmax(stepMax, scores.back()) : scores.back();
    }
    Value oldMax = e.load(runningMax, g);
    Value newMax = e.fmax(oldMax, e.maxLanes(stepMax));
    Value safe = e.safeMax(newMax);
    Value rescale = e.exp(e.fsub(oldMax, safe));
    Value stepSum;
    for (int64_t i = 0; i < stepVectors; ++i) {
      Value p = e.exp(e.fsub(scores[i], e.broadcast(safe)));
      vector::StoreOp::create(b, p, probs, ValueRange{g, e.index(i * W)});
      if (pairedValues)
        vector::StoreOp::create(b, e.toPairOperand(p), pairedProbs,
                                ValueRange{g, e.index(i * W)});
      stepSum = stepSum ? e.fadd(stepSum, p) : p;
    }
    e.store(e.fadd(e.fmul(e.load(runningSum, g), rescale), e.sumLanes(stepSum)),
            runningSum, g);
    e.store(newMax, runningMax, g);
    e.store(rescale, rescales, g);
  });
}

void SplitKvKernel::accumulateValues(Value j0) {
  // acc = acc * rescale + P V, in tiles of heads x value vectors. Only the
  // last vector may be partial: it goes in the static last tile.
  forEachServedKvHead([&](const ServedKvHead &kvHead) {
    SmallVector<SmallVector<Value>> rows;
    for (int64_t jj = 0; jj < stepKeys; ++jj)
      rows.push_back(kv->at(batch, kvHead.kvHead, keyAt(j0, e.index(jj))));
    forEachHeadTileAnd(
        kvHead,
        [&](function_ref<void(Value, int64_t)> body) {
          forEachTile(e, Dv / W, DvPadded / W, tileVectors, body);
        },
        [&](const HeadTile &tile, Value firstVector, int64_t vectors) {
          accumulateTile(j0, rows, kvHead, tile, firstVector, vectors);
        });
  });
}

void SplitKvKernel::accumulateTile(Value j0, ArrayRef<SmallVector<Value>> rows,
                                   const ServedKvHead &kvHead,
                                   const HeadTile &tile, Value firstVector,
                                   int64_t vectors) {
  int64_t heads = tile.heads;
  SmallVector<Value> headIndex, offsets, sums;
  SmallVector<int64_t> laneCounts;
  for (int64_t h = 0; h < heads; ++h)
    headIndex.push_back(e.add(tile.g0, e.index(h)));
  std::optional<int64_t> first = getConstantIntValue(firstVector);
  for (int64_t n = 0; n < vectors; ++n) {
    offsets.push_back(e.mul(e.add(firstVector, e.index(n)), e.index(W)));
    laneCounts.push_back(first ? std::min(W, Dv - (*first + n) * W) : W);
  }
  // The next step's K rows (see scoreTile); with one query head a kv head
  // over contiguous keys the kernel is bound by bandwidth, which the
  // hardware prefetcher's stream of K rows meets: requests of its own only
  // add instructions (0.93-0.98x at D = 128).
  if (group > 1 || kvHeadsServed > 1)
    prefetchStepRows(k, D, e.add(j0, e.index(stepKeys)),
                     iterationOf(kvHead, tile,
                                 e.div(firstVector, e.index(tileVectors)),
                                 valueTiles),
                     headTiles() * valueTiles);
  for (int64_t h = 0; h < heads; ++h) {
    Value rescale = e.broadcast(e.load(rescales, headIndex[h]));
    for (int64_t n = 0; n < vectors; ++n)
      sums.push_back(
          e.fmul(vector::LoadOp::create(b, e.vec, acc,
                                        ValueRange{headIndex[h], offsets[n]}),
                 rescale));
  }
  // Paired: keys jj and jj + 1 in one product (stepKeys is even).
  for (int64_t jj = 0; pairedValues && jj < stepKeys; jj += 2) {
    SmallVector<Value> p;
    for (int64_t h = 0; h < heads; ++h)
      p.push_back(e.broadcastPair(pairedProbs, {headIndex[h], e.index(jj)}));
    for (int64_t n = 0; n < vectors; ++n) {
      Value value = e.interleavePairs(
          e.loadStored(v, withIndex(rows[jj], offsets[n]), laneCounts[n]),
          e.loadStored(v, withIndex(rows[jj + 1], offsets[n]), laneCounts[n]));
      for (int64_t h = 0; h < heads; ++h)
        sums[h * vectors + n] = e.dotPairs(sums[h * vectors + n], value, p[h]);
    }
  }
  for (int64_t jj = 0; !pairedValues && jj < stepKeys; ++jj) {
    SmallVector<Value> p;
    for (int64_t h = 0; h < heads; ++h)
      p.push_back(e.broadcast(e.load(probs, {headIndex[h], e.index(jj)})));
    for (int64_t n = 0; n < vectors; ++n) {
      Value value =
          e.loadVector(v, withIndex(rows[jj], offsets[n]), laneCounts[n]);
      for (int64_t h = 0; h < heads; ++h)
        sums[h * vectors + n] = e.fma(p[h], value, sums[h * vectors + n]);
    }
  }
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t n = 0; n < vectors; ++n)
      vector::StoreOp::create(b, sums[h * vectors + n], acc,
                              ValueRange{headIndex[h], offsets[n]});
}

void SplitKvKernel::storePartials() {
  // The normalized partials and their log-sum-exp (0 and -inf when empty).
  e.loop(c0, groupSize, c1, [&](Value g) {
    Value head = e.add(firstHead, g);
    Value m = e.load(runningMax, g), l = e.load(runningSum, g);
    Value invVec = e.broadcast(e.reciprocalOrZero(l));
    // [B, H, Lq, S], or in a ragged batch [entries, H].
    SmallVector<Value> at{batch, head, row, split};
    if (shape.ragged)
      at = {entry, head};
    for (int64_t off = 0; off < Dv; off += W)
      e.storeVector(e.fmul(vector::LoadOp::create(b, e.vec, acc,
                                                  ValueRange{g, e.index(off)}),
                           invVec),
                    partialOut, withIndex(at, e.index(off)),
                    std::min(W, Dv - off));
    e.store(e.logSumExp(m, l), partialLse, at);
  });
}

} // namespace

func::FuncOp mlir::attn::buildSplitKvAttentionKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const CpuTiling &tiling,
    TypeRange bindingTypes, KeyPart part) {
  return SplitKvKernel(builder, loc, name, shape, tiling, bindingTypes, part)
      .build();
}

//===----------------------------------------------------------------------===//
// Merge kernel
//===----------------------------------------------------------------------===//

func::FuncOp mlir::attn::buildSplitKvMergeKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const CpuTiling &tiling,
    TypeRange bindingTypes) {
  OpBuilder::InsertionGuard guard(builder);
  func::FuncOp func =
      createKernel(builder, loc, name, bindingTypes, tiling, "merge");
  ImplicitLocOpBuilder b(loc, builder);
  KernelEmitter e(b, tiling.vectorWidth);
  const int64_t W = e.width, Dv = shape.valueDim;
  const int64_t DvPadded = roundUp(Dv, W);

  SplitKvMerge merge(e, func, shape);
  Value c0 = e.index(0), c1 = e.index(1);
  auto mergeRow = [&] {
    // lse = log sum_s exp(lse_s); o = sum_s exp(lse_s - lse) o_s. Partials
    // of empty ranges have lse_s = -inf and weigh 0.
    Value safe = merge.maxLse();
    Value acc = e.scratch({DvPadded});
    for (int64_t off = 0; off < DvPadded; off += W)
      vector::StoreOp::create(b, e.splat(0.0), acc, e.index(off));
    Value total = e.loop(
        c0, merge.splits, c1, {e.scalar(0.0)}, [&](Value s, ValueRange it) {
          SmallVector<Value> at = merge.partialAt(s);
          Value weight = e.exp(e.fsub(e.load(merge.partialLse, at), safe));
          Value wv = e.broadcast(weight);
          for (int64_t off = 0; off < Dv; off += W)
            vector::StoreOp::create(
                b,
                e.fma(wv,
                      e.loadVector(merge.partialOut,
                                   withIndex(at, e.index(off)),
                                   std::min(W, Dv - off)),
                      vector::LoadOp::create(b, e.vec, acc, e.index(off))),
                acc, e.index(off));
          return SmallVector<Value>{e.fadd(it[0], weight)};
        })[0];
    SmallVector<Value> at = merge.rowAt();
    KernelEmitter::RowEnd end = e.endSoftmaxRow(safe, total, merge.sink());
    storeOutputRow(e, shape, acc, {}, end.scale, merge.gate, merge.out, at);
    if (merge.lse)
      e.store(end.lse, merge.lse, at);
  };
  if (merge.hasRow)
    e.ifThen(merge.hasRow, mergeRow);
  else
    mergeRow();
  func::ReturnOp::create(b);
  return func;
}
