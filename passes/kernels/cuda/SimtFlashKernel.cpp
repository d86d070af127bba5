//===- SimtFlashKernel.cpp - The flash block kernel of CUDA ---------------===//
//
// Softmax attention as a block kernel (buildSimtFlashKernel for prefill and
// a large tree's prefix, buildSimtFlashDecodeKernel for FlashDecoding's
// splits and sparse decode), built one phase at a time by SimtFlashKernel:
// which rows the block takes, which keys they see, the staged q tile, and
// per key tile the scores, the online-softmax update and P V, then the
// epilogue. Variant semantics reach it only through VariantEmitter and the
// shape's mask; the block mask (a mask_mod's tile list) only changes which
// key tiles are walked and which need per-element work.
//
//===----------------------------------------------------------------------===//

#include "passes/kernels/KeySelection.h"
#include "passes/kernels/cuda/SimtKernels.h"

using namespace mlir;
using namespace mlir::attn;

namespace {

/// What a flash block kernel's block works on: `part` says which keys
/// (KeyPart::All: those the mask leaves visible, o gated and [lse] written;
/// KeyPart::TreePrefix: the tree's prefix, partials written). Query tiles
/// are 16 R W query rows of one head over their keys (R row tiles per
/// warp); decode splits (`decodeSplit`) are 16 W rows (R = 1) of one kv
/// group's (head, row) pairs over one split of the keys, partials written.
class SimtFlashKernel {
public:
  SimtFlashKernel(OpBuilder &builder, Location loc, StringRef name,
                  const SoftmaxAttentionShape &shape,
                  const SimtFlashTiling &flash, const GpuTiling &tiling,
                  TypeRange bindingTypes, KeyPart part, bool decodeSplit,
                  bool mergesSplits = false);

  /// Emits the phases in order and returns the kernel.
  func::FuncOp build();

private:
  /// A lane's rows: row g + 8 half of the warp's row tile `tile` (from row
  /// warpRow + 16 tile), whose running max and sum are at `slot`.
  struct LaneRow {
    int64_t tile, half, slot;
    Value row;
  };
  /// Which (head, query row) pairs a block's tile rows are.
  enum class RowMapping {
    /// A tile of one head's query rows (prefill, a tree's prefix).
    QueryTile,
    /// A kv group's (head, row) pairs, head-major, over one key split.
    DecodeTile,
    /// One query row over one split of its selection (sparse decode).
    SparseRow,
  };

  // The phases, in the order build() emits them.
  void bindArguments(TypeRange bindingTypes);
  /// A ragged batch: whether the block's plan entry has work.
  Value hasPlannedWork();
  void mapRows();
  /// Lk of the block's sequence and what follows from it (after mapRows
  /// has the batch).
  void findKeyLength();
  void allocateBuffers();
  void stageQueryTile();
  void findTreeNodes();
  void findKeyRange();
  /// The key tiles' loop: one k and one v buffer, each tile's copies
  /// overlapping the products before them (prefill), or two of each
  /// (flash.stages = 2, decode), a tile's copies in flight while the one
  /// before it is used.
  void walkKeyTiles();
  void walkKeyTilesInTwoStages();
  /// Warpgroup products (flash.overlapsProducts): two stages of k and v, and
  /// tile j + 1's scores and tile j's P v in flight during tile j + 1's
  /// softmax (FlashAttention-3's intra-warpgroup overlap).
  void walkKeyTilesOverlapped();
  /// The overlapped walk warp specialised (flash.producerWarpgroup): a
  /// producer warpgroup stages the tiles, the others compute, handing the
  /// k and v slots to one another through mbarriers, with no block-wide
  /// barrier in the loop (FlashAttention-3's producer and consumers).
  void walkKeyTilesWarpSpecialized();
  /// Per key tile: the scores from `keyBuffer`, the online-softmax update
  /// (with `stageValues`, the tile's v copied meanwhile; with
  /// `beforeRescale`, called before the output is rescaled), P v from
  /// `valueBuffer` (with `stageNext`, if given, each thread's copies issued
  /// meanwhile and waited for at the end).
  void scoreKeyTile(Value firstKey, Value keyBuffer);
  void updateSoftmax(Value keyTileIndex, bool stageValues,
                     function_ref<void()> beforeRescale = nullptr);
  void accumulateValues(Value valueBuffer,
                        function_ref<void(Value thread)> stageNext);
  /// The parts of those phases, in a warp's thread loop: S = q k^T into
  /// the lane's score fragment (with `async`, issued and not waited for);
  /// the lane's scores t from S and its parts of its rows' maxes (in
  /// `quad`), `interior` saying whether every row sees every key of the
  /// tile; o += P v from the warp's fragments of the register buffer
  /// `probabilities`.
  void multiplyScores(Value keyBuffer, Value warpRow, Value lane, Value thread,
                      bool async = false);
  void scoreProducts(Value firstKey, Value interior, Value warpRow, Value lane,
                     Value thread);
  void multiplyValues(Value probabilities, Value valueBuffer, Value warpRow,
                      Value lane, Value thread, bool async = false);
  /// Whether every row of the block sees every key of the tile from
  /// `firstKey` (no mask work in it).
  Value interiorTileOf(Value firstKey);
  /// The f32 `x` and `y` rounded to the storage type and back, as one pair.
  SmallVector<Value> roundPair(Value x, Value y);
  /// P (the score fragments after the softmax) copied to probRegs, where
  /// the overlapped walk's P v reads it while the next scores are made.
  void keepProbabilities();
  void storeOutputs();
  /// mergesSplits: counts the block's split done on its tile's counter
  /// and, in the block that counts the tile's last, merges the tile's
  /// rows.
  void mergeIfLastSplit();

  /// The mbarriers of the warp-specialised walk, one per slot of 2 (tile i
  /// in slot i % 2): a slot's k or v is `Full` once the producer's copies
  /// of it have landed, `Empty` once every consumer thread is done reading
  /// it.
  enum StageBarrier : int64_t { FullK = 0, FullV = 2, EmptyK = 4, EmptyV = 6 };
  static constexpr int64_t kStageBarriers = 8;
  /// Waits for stage barrier `kind` of tile `tile` (slot tile % 2): the
  /// phase of the tile's own use of the slot (a Full barrier's), or of
  /// the use before it (an Empty barrier's: the tile's slot free again).
  void waitForStage(StageBarrier kind, Value tile);
  /// Arrives at stage barrier `kind` of slot `slot` (after the thread's
  /// copies land, with `afterCopies`).
  void arriveAtStage(StageBarrier kind, Value slot, bool afterCopies = false);

  // What the phases share.
  Value lt(Value x, Value y) { return e.icmp(arith::CmpIPredicate::ult, x, y); }
  Value both(Value x, Value y) {
    return arith::AndIOp::create(b, x, y).getResult();
  }
  /// The head and query row of tile row r (< rows).
  Value headOf(Value r);
  Value rowOf(Value r);
  /// Where tile row r's q, gate, o and lse are (o: before the feature
  /// index), or its decode partials.
  SmallVector<Value> rowAt(Value r);
  /// A ragged batch: the block's entry in its plan (RaggedPlan), blocks
  /// being (entry, head) for query tiles and (entry, kv head, tile of the
  /// group's heads) for decode, the last fastest.
  Value plannedEntry();
  /// Where the variant regions see tile row r.
  Value queryPositionOf(Value r);
  /// The keys tile row r sees, [begin, end), inside [from, to).
  std::pair<Value, Value> rowKeys(Value r);
  /// The first key of the tile-th key tile the block walks: the next TK
  /// keys of the range, or with a block mask the next listed tile (whose
  /// class then says whether any mask_mod work remains).
  Value tileFirstKey(Value tile);
  /// The key at position v of the tile range [begin, end), and whether it
  /// is one (inside the range and the keys).
  std::pair<Value, Value> keyAt(Value v);
  /// The k and v rows of key tile `tile`.
  std::function<std::pair<SmallVector<Value>, Value>(Value)>
  keyRowsOf(Value tile);
  /// Copies key tile `tile`'s rows of each (global, shared) pair, as
  /// SimtEmitter::stageRows with keyRowsOf(tile).
  /// With `sharing`, the threads of that range alone copy.
  void stageKeyTile(Value thread, Value tile,
                    ArrayRef<std::pair<Value, Value>> fromTo, int64_t dim,
                    int64_t padded, ThreadRange sharing = {});
  /// Decode over a paged cache: the pages of each key tile are read two
  /// tiles ahead into `tilePages` (slot tile % 3), so that a tile's copies
  /// wait for no page table entry. Head dims up to 128 alone: at 256,
  /// ptxas keeps the rows' slot reads in 84 more registers (252, not 168,
  /// at Qwen3-Next's bf16 shape: 2 blocks per SM, not 3), so those read
  /// the table per tile until a GPU run says which is faster (at 128:
  /// 125 registers, not 140).
  bool prefetchesPages() const {
    return decodeSplit && kv->pagedBy() > 0 && !gathered && !blockMask &&
           D <= 128;
  }
  /// Thread `thread`'s loads of the entries of key tile `tile`'s pages
  /// (an entry a thread), to store with storeTilePages once they are
  /// needed; none past the last tile.
  SmallVector<Value> loadTilePages(Value thread, Value tile);
  void storeTilePages(Value thread, Value tile, ValueRange pages);
  /// The score t of the product of tile row r and `key`.
  Value scoreOf(Value product, Value r, Value key);
  /// A thread loop in which each warp works on its 16 x rowTiles rows:
  /// body(first row of the warp, lane, thread). The quad exchange and P are
  /// rows of the warp's own, so loops that only write those (and
  /// registers) may end with SimtEmitter::Sync::Warp.
  void
  eachWarp(function_ref<void(Value warpRow, Value lane, Value thread)> body,
           SimtEmitter::Sync sync = SimtEmitter::Sync::Block);
  SmallVector<LaneRow> laneRowsOf(Value warpRow, Value lane);
  /// Which part of the value columns thread `thread`'s warp holds
  /// (flash.valueParts), and its row `row`'s place in `quad`.
  Value valuePartOf(Value thread);
  Value quadRowOf(Value row, Value thread);
  /// The lane's place among the 4 that hold its rows.
  Value quadLaneOf(Value lane);
  /// The combination of the 4 parts in row `quadRow` of `quad`.
  Value combineQuad(Value quadRow, function_ref<Value(Value, Value)> combine);
  /// Fragment element `el` of lane row `at` in column block `block` (of
  /// `blocks` per row tile).
  SmallVector<Value> fragmentAt(const LaneRow &at, int64_t blocks,
                                int64_t block, int64_t el);
  void setRegisters(Value registers, int64_t blocks, double value);
  /// Waits for the thread's staging copies but those of its `pending`
  /// newest groups (and with warpgroup products makes its shared writes
  /// visible to them).
  void waitForCopies(int64_t pending = 0) {
    auto wait = AsyncWaitOp::create(b, loc);
    wait.setAsyncProxy(flash.warpgroupMma);
    wait.setPending(pending);
  }

  const SoftmaxAttentionShape &shape;
  const SimtFlashTiling &flash;
  const GpuTiling &tiling;
  const KeyPart part;
  const bool decodeSplit, mergesSplits;
  Location loc;
  OpBuilder::InsertionGuard guard;
  func::FuncOp func;
  ImplicitLocOpBuilder b;
  SimtEmitter e;
  VariantEmitter variants;

  // What the kind of block says.
  bool treePrefix, partials, treeWindow, treeDepths, gathered, blockMask;
  RowMapping mapping;
  /// The shape whose mask rowKeys applies: a tree's prefix is all visible.
  SoftmaxAttentionShape keys;

  // The bindings.
  SoftmaxBindings inputs;
  /// Where key j of the block's sequence is (findKeyLength).
  std::optional<KeyRows> kv;
  /// Where the rows of q, gate, o and lse are.
  std::optional<QueryRows> queries;
  Value q, k, v, parents, selection, gate, sinks, out, lse;
  Value tileClasses, tileList, tileCounts, workgroup;
  /// mergesSplits: the merge's bindings (partial o and lse, [gate], o,
  /// [lse]), and the counters of the tiles' splits done.
  SmallVector<Value> mergeBindings;
  Value splitCounters;

  // Tiles and constants.
  int64_t TQ, TK, D, Dv, Dp, Dvp, group, RT, keyBlocks, valueBlocks;
  Type storage;
  Value c0, c1, c32;
  Value lq, lk, firstPosition;

  // The rows (mapRows): tile row r < rows is query row rowOf(r) of head
  // headOf(r) and sees keys in [from, to) only.
  Value batch, kvHead, head, row, split, first, rows, from, to;
  /// Decode: the tile's rows are the group's (head, query row) pairs from
  /// pair `first`, each head's rows being rowBase .. rowBase +
  /// rowsPerHead - 1 (all Lq rows, or a ragged batch's planned row).
  Value rowBase, rowsPerHead;
  /// A ragged batch: the block's entry in its plan.
  Value entry;
  /// With a block mask: where the query tile's row of it is.
  SmallVector<Value> maskRow;
  /// Sparse decode: split s takes selection entries [entryFrom, entryTo),
  /// at most entriesPerSplit (split_keys keys' worth).
  int64_t entriesPerSplit = 0;
  Value entryFrom, entryTo;
  /// A windowed tree node's first prefix key, and a tree node's position
  /// for the variant regions, found once per row by walking its ancestors
  /// (rows past the end repeat the last node).
  Value rowStarts, rowPositions;
  /// Sparse decode: the split's blocks, each counted once in the row,
  /// gathered into `listed`; tiles walk their keys as one range of
  /// `listedKeys` virtual keys, v standing for key listed[v / bs] * bs +
  /// v % bs.
  Value listed, listedKeys;

  // Shared and register buffers (allocateBuffers).
  /// The k and v buffers: one of each, or two with flash.stages = 2.
  Value qs, quad, scoreRegs, outRegs, maxRegs, sumRegs;
  /// walkKeyTilesOverlapped: tile j's P while tile j + 1's scores are made.
  Value probRegs;
  /// prefetchesPages(): [3, pagesPerTile] page numbers, those of tile j in
  /// slot j % 3 (a tile's TK keys span at most pagesPerTile pages).
  Value tilePages;
  int64_t pagesPerTile = 0;
  SmallVector<Value, 2> ks, vs;
  /// flash.producerWarpgroup: the k and v slots' mbarriers (StageBarrier).
  Value stageBarriers;

  // The softmax in base 2 (see allocateBuffers).
  bool scoresScaled;
  Value exponentScale, negExponentScale, maxToNatural;

  // The key range (findKeyRange): the keys some row of the tile sees,
  // [begin, end), the keys every row sees, [allBegin, allEnd), and the key
  // tiles the block walks.
  Value begin, end, allBegin, allEnd, keyTiles;
};

SimtFlashKernel::SimtFlashKernel(OpBuilder &builder, Location loc,
                                 StringRef name,
                                 const SoftmaxAttentionShape &shape,
                                 const SimtFlashTiling &flash,
                                 const GpuTiling &tiling,
                                 TypeRange bindingTypes, KeyPart part,
                                 bool decodeSplit, bool mergesSplits)
    : shape(shape), flash(flash), tiling(tiling), part(part),
      decodeSplit(decodeSplit), mergesSplits(mergesSplits), loc(loc),
      guard(builder), func([&] {
        GpuTiling kernelTiling = tiling;
        kernelTiling.blockThreads = flash.threads();
        assert(part != KeyPart::TreeNodes &&
               "the flash kernel tiles whole ranges");
        std::string kind = std::string(decodeSplit ? "flash_decode" : "flash") +
                           (part == KeyPart::TreePrefix ? "_tree_prefix" : "");
        func::FuncOp func = createSimtKernel(builder, loc, name, bindingTypes,
                                             kernelTiling, kind);
        // The tile sizes join the launch shape in attn.tiling.
        NamedAttrList tilingAttrs(kernelTiling.toAttr(builder.getContext()));
        tilingAttrs.set("query_tile",
                        builder.getI64IntegerAttr(flash.queryTile()));
        tilingAttrs.set("key_tile", builder.getI64IntegerAttr(flash.keyTile));
        func->setAttr("attn.tiling",
                      tilingAttrs.getDictionary(builder.getContext()));
        func->setAttr(kBlockKernelAttr, builder.getUnitAttr());
        return func;
      }()),
      b(loc, builder), e(b, flash.threads()),
      variants(e, shape.variants, shape.variants.buffersOf(func)) {
  bindArguments(bindingTypes);
}

func::FuncOp SimtFlashKernel::build() {
  queries.emplace(e, inputs);
  auto attend = [&] {
    mapRows();
    allocateBuffers();
    stageQueryTile();
    findTreeNodes();
    findKeyRange();
    if (flash.producerWarpgroup)
      walkKeyTilesWarpSpecialized();
    else if (flash.overlapsProducts)
      walkKeyTilesOverlapped();
    else if (flash.stages == 2)
      walkKeyTilesInTwoStages();
    else
      walkKeyTiles();
    storeOutputs();
    if (mergesSplits)
      mergeIfLastSplit();
  };
  // Entries past a ragged batch's plan have no work: the whole block skips
  // (the condition is the block's, so its barriers stay uniform).
  if (shape.ragged)
    e.ifThen(hasPlannedWork(), attend);
  else
    attend();
  func::ReturnOp::create(b);
  return func;
}

void SimtFlashKernel::walkKeyTiles() {
  // The copies of a tile's k and v overlap the products of the one before
  // them, as in FlashAttention-2: k of the first tile is staged here; v of
  // each tile is copied while its probabilities are computed, and k of the
  // next while P v is. Each phase's copies are waited for at its end,
  // before the barrier after which the next phase reads them. (Copying v
  // during the scores too would overlap more, but its address arithmetic
  // beside the mma operands made decode with D = 256 and a small tree's
  // prefix spill 16 bytes.)
  e.eachThread([&](Value thread) {
    stageKeyTile(thread, c0, {{k, ks[0]}}, D, Dp);
    waitForCopies();
  });
  e.loop(c0, keyTiles, c1, [&](Value keyTileIndex) {
    Value nextTile = e.add(keyTileIndex, c1);
    scoreKeyTile(tileFirstKey(keyTileIndex), ks[0]);
    updateSoftmax(keyTileIndex, /*stageValues=*/true);
    accumulateValues(vs[0], [&](Value thread) {
      e.ifThen(lt(nextTile, keyTiles), [&] {
        stageKeyTile(thread, nextTile, {{k, ks[0]}}, D, Dp);
      });
    });
  });
}

void SimtFlashKernel::walkKeyTilesInTwoStages() {
  // Decode waits on memory, not on its few rows' products: each tile's k
  // and v are copied together into one of two buffers while the tile
  // before is used, so that a block always has the next tile's copies in
  // flight (the stages of FlashInfer's decode). Tile j uses buffer j % 2;
  // the loop takes the tiles two at a time so that each buffer is a fixed
  // operand of its products.
  auto stageTile = [&](Value thread, Value tile, int64_t buffer) {
    if (D == Dv && Dp == Dvp) {
      // A row's place (a paged cache's page) found once for k and v.
      stageKeyTile(thread, tile, {{k, ks[buffer]}, {v, vs[buffer]}}, D, Dp);
      return;
    }
    stageKeyTile(thread, tile, {{k, ks[buffer]}}, D, Dp);
    stageKeyTile(thread, tile, {{v, vs[buffer]}}, Dv, Dvp);
  };
  // A paged cache's pages two tiles ahead: tiles 0 and 1's here.
  if (prefetchesPages()) {
    const int64_t pageSize = kv->pagedBy();
    pagesPerTile = (TK - 1) / pageSize + 2;
    tilePages = e.shared({3, pagesPerTile}, b.getI32Type());
    e.eachThread([&](Value thread) {
      for (Value tile : {c0, c1})
        storeTilePages(thread, tile, loadTilePages(thread, tile));
    });
  }
  // Tile 0's copies are a group of their own (the wait with one pending
  // group waits for none).
  e.eachThread([&](Value thread) {
    stageTile(thread, c0, 0);
    waitForCopies(/*pending=*/1);
  });
  e.inTwoStages(keyTiles, [&](Value tile, Value nextTile, int64_t buffer) {
    // Tile j + 1's copies go into the other buffer (whose last readers,
    // tile j - 1's products, finished before the barrier that ended them),
    // then the thread waits for all but them: tile j's. Tile j + 2's pages
    // are read meanwhile into the slot of tile j - 1's (last read by the
    // copies of the loop before), stored once the wait is over.
    e.eachThread([&](Value thread) {
      Value afterNext = e.add(nextTile, c1);
      SmallVector<Value> pages;
      if (tilePages)
        pages = loadTilePages(thread, afterNext);
      e.ifThen(lt(nextTile, keyTiles),
               [&] { stageTile(thread, nextTile, 1 - buffer); });
      waitForCopies(/*pending=*/1);
      if (tilePages)
        storeTilePages(thread, afterNext, pages);
    });
    scoreKeyTile(tileFirstKey(tile), ks[buffer]);
    updateSoftmax(tile, /*stageValues=*/false);
    accumulateValues(vs[buffer], /*stageNext=*/nullptr);
  });
}

void SimtFlashKernel::walkKeyTilesOverlapped() {
  // FlashAttention-3's intra-warpgroup overlap: with P of tile j in
  // registers, a warpgroup issues tile j + 1's scores S = q k^T and then
  // tile j's o += P v, both asynchronous; it waits for the scores alone
  // (the older group) and computes tile j + 1's softmax while the tensor
  // cores still run P v, then waits for P v and rescales o. The copies go
  // a tile ahead of the products that read them: during tile j, k of tile
  // j + 2 and v of tile j + 1 (two buffers of each; tile i's in buffer
  // i % 2), each into the buffer whose last products were waited for
  // before the barrier that starts the tile. No product or wait is under
  // a condition of its own inside the loop: ptxas serializes every wgmma
  // of a kernel where the registers of one in flight are merged at the end
  // of a branch (which reads them).
  auto stageKeys = [&](Value thread, Value tile, int64_t buffer) {
    stageKeyTile(thread, tile, {{k, ks[buffer]}}, D, Dp);
  };
  auto stageValues = [&](Value thread, Value tile, int64_t buffer) {
    stageKeyTile(thread, tile, {{v, vs[buffer]}}, Dv, Dvp);
  };
  auto waitForProducts = [&](int64_t pending) {
    WarpgroupWaitOp::create(b, loc).setPending(pending);
  };
  e.ifThen(lt(c0, keyTiles), [&] {
    // Tile 0: its k and v and tile 1's k, then its scores and P.
    e.eachThread([&](Value thread) {
      stageKeys(thread, c0, 0);
      stageValues(thread, c0, 0);
      e.ifThen(lt(c1, keyTiles), [&] { stageKeys(thread, c1, 1); });
      waitForCopies();
    });
    scoreKeyTile(tileFirstKey(c0), ks[0]);
    updateSoftmax(c0, /*stageValues=*/false);
    keepProbabilities();
    // Tiles j = 0 .. n - 2: tile j + 1's scores and softmax, tile j's P v.
    Value lastTile = e.sub(keyTiles, c1);
    e.inTwoStages(lastTile, [&](Value tile, Value nextTile, int64_t buffer) {
      Value afterNext = e.add(nextTile, c1);
      e.eachThread([&](Value) { waitForCopies(); });
      e.eachThread(
          [&](Value thread) {
            e.ifThen(lt(afterNext, keyTiles),
                     [&] { stageKeys(thread, afterNext, buffer); });
            stageValues(thread, nextTile, 1 - buffer);
          },
          SimtEmitter::Sync::Warp);
      Value firstKey = tileFirstKey(nextTile);
      Value interior = interiorTileOf(firstKey);
      eachWarp(
          [&](Value warpRow, Value lane, Value thread) {
            multiplyScores(ks[1 - buffer], warpRow, lane, thread,
                           /*async=*/true);
            multiplyValues(probRegs, vs[buffer], warpRow, lane, thread,
                           /*async=*/true);
            waitForProducts(/*pending=*/1); // the scores, not P v
            scoreProducts(firstKey, interior, warpRow, lane, thread);
          },
          SimtEmitter::Sync::Warp);
      updateSoftmax(nextTile, /*stageValues=*/false,
                    [&] { waitForProducts(/*pending=*/0); });
      keepProbabilities();
    });
    // The last tile's P v (waited for), from the buffer of its parity.
    e.eachThread([&](Value) { waitForCopies(); });
    Value parity = e.rem(lastTile, e.index(2));
    for (int64_t buffer = 0; buffer < 2; ++buffer)
      e.ifThen(e.icmp(arith::CmpIPredicate::eq, parity, e.index(buffer)), [&] {
        eachWarp([&](Value warpRow, Value lane, Value thread) {
          multiplyValues(probRegs, vs[buffer], warpRow, lane, thread);
        });
      });
  });
}

void SimtFlashKernel::waitForStage(StageBarrier kind, Value tile) {
  // Tile i is use i / 2 of its slot, which completes phase i / 2 of the
  // slot's Full barrier and, once read, of its Empty one. Before staging
  // it the producer waits for the Empty phase of use i / 2 - 1: parity
  // (i / 2 + 1) % 2, for tiles 0 and 1 the phase before a fresh barrier's
  // first, which counts as complete.
  Value c2 = e.index(2);
  Value use = e.div(tile, c2);
  if (kind == EmptyK || kind == EmptyV)
    use = e.add(use, c1);
  MbarrierWaitOp::create(b, stageBarriers,
                         e.add(e.index(kind), e.rem(tile, c2)), e.rem(use, c2));
}

void SimtFlashKernel::arriveAtStage(StageBarrier kind, Value slot,
                                    bool afterCopies) {
  MbarrierArriveOp::create(b, stageBarriers, e.add(e.index(kind), slot),
                           afterCopies, /*expect_bytes=*/Value());
}

void SimtFlashKernel::walkKeyTilesWarpSpecialized() {
  // walkKeyTilesOverlapped's tiles, products and copies in the same order,
  // the copies made by a producer warpgroup of their own: while the
  // consumers compute tile j + 1's scores and tile j's P v, it stages k of
  // tile j + 2 and v of tile j + 1, each once its slot is free, arriving
  // at the slot's Full barrier as its copies land. The consumers wait for
  // the Full phases of what they read and arrive at the Empty ones when
  // their products have read it: no block-wide barrier in the loop, each
  // role running as far ahead as the mbarriers let it (on the GPU each
  // runs its own copy of the loop; see SimtEmitter::byRoles).
  const ThreadRange producer = flash.producerThreads();
  const int64_t producerThreads = producer.count;
  const int64_t productThreads = flash.productThreads().count;
  auto stageKeys = [&](Value thread, Value tile, int64_t slot) {
    waitForStage(EmptyK, tile);
    stageKeyTile(thread, tile, {{k, ks[slot]}}, D, Dp, producer);
    arriveAtStage(FullK, e.index(slot), /*afterCopies=*/true);
  };
  auto stageValues = [&](Value thread, Value tile, int64_t slot) {
    waitForStage(EmptyV, tile);
    stageKeyTile(thread, tile, {{v, vs[slot]}}, Dv, Dvp, producer);
    arriveAtStage(FullV, e.index(slot), /*afterCopies=*/true);
  };
  // The consumers read what other threads copied: their own fence makes
  // it visible to the tensor cores' async proxy, which wgmma reads
  // shared memory through.
  auto fenceForProducts = [&] { waitForCopies(); };
  auto waitForProducts = [&](int64_t pending) {
    WarpgroupWaitOp::create(b, loc).setPending(pending);
  };
  // The q tile (every thread's copies) in place, and the barriers made,
  // before any role starts.
  e.eachThread([&](Value thread) {
    waitForCopies();
    e.ifThen(e.icmp(arith::CmpIPredicate::eq, thread, c0), [&] {
      for (int64_t slot = 0; slot < 2; ++slot) {
        for (StageBarrier full : {FullK, FullV})
          MbarrierInitOp::create(b, stageBarriers, e.index(full + slot),
                                 producerThreads);
        for (StageBarrier empty : {EmptyK, EmptyV})
          MbarrierInitOp::create(b, stageBarriers, e.index(empty + slot),
                                 productThreads);
      }
    });
  });
  auto eachProducerThread = [&](function_ref<void(Value thread)> body) {
    e.eachThreadIn(producer, body, SimtEmitter::Sync::Mbarriers);
  };
  e.ifThen(lt(c0, keyTiles), [&] {
    e.byRoles([&] {
      // Tile 0: its k and v and tile 1's k, then its scores and P.
      eachProducerThread([&](Value thread) {
        stageKeys(thread, c0, 0);
        stageValues(thread, c0, 0);
        e.ifThen(lt(c1, keyTiles), [&] { stageKeys(thread, c1, 1); });
      });
      Value firstKey = tileFirstKey(c0);
      Value interior = interiorTileOf(firstKey);
      eachWarp(
          [&](Value warpRow, Value lane, Value thread) {
            waitForStage(FullK, c0);
            fenceForProducts();
            multiplyScores(ks[0], warpRow, lane, thread);
            arriveAtStage(EmptyK, c0);
            scoreProducts(firstKey, interior, warpRow, lane, thread);
          },
          SimtEmitter::Sync::Warp);
      updateSoftmax(c0, /*stageValues=*/false);
      keepProbabilities();
      // Tiles j = 0 .. n - 2: tile j + 1's scores and softmax, tile j's
      // P v.
      Value lastTile = e.sub(keyTiles, c1);
      e.inTwoStages(lastTile, [&](Value tile, Value nextTile, int64_t slot) {
        Value afterNext = e.add(nextTile, c1);
        eachProducerThread([&](Value thread) {
          e.ifThen(lt(afterNext, keyTiles),
                   [&] { stageKeys(thread, afterNext, slot); });
          stageValues(thread, nextTile, 1 - slot);
        });
        Value firstKey = tileFirstKey(nextTile);
        Value interior = interiorTileOf(firstKey);
        eachWarp(
            [&](Value warpRow, Value lane, Value thread) {
              waitForStage(FullK, nextTile);
              waitForStage(FullV, tile);
              fenceForProducts();
              multiplyScores(ks[1 - slot], warpRow, lane, thread,
                             /*async=*/true);
              multiplyValues(probRegs, vs[slot], warpRow, lane, thread,
                             /*async=*/true);
              waitForProducts(/*pending=*/1); // the scores, not P v
              arriveAtStage(EmptyK, e.index(1 - slot));
              scoreProducts(firstKey, interior, warpRow, lane, thread);
            },
            SimtEmitter::Sync::Warp);
        updateSoftmax(nextTile, /*stageValues=*/false, [&] {
          waitForProducts(/*pending=*/0);
          arriveAtStage(EmptyV, e.index(slot));
        });
        keepProbabilities();
      });
      // The last tile's P v, from the slot of its parity.
      Value lastSlot = e.rem(lastTile, e.index(2));
      for (int64_t slot = 0; slot < 2; ++slot)
        e.ifThen(
            e.icmp(arith::CmpIPredicate::eq, lastSlot, e.index(slot)), [&] {
              eachWarp(
                  [&](Value warpRow, Value lane, Value thread) {
                    waitForStage(FullV, lastTile);
                    fenceForProducts();
                    multiplyValues(probRegs, vs[slot], warpRow, lane, thread);
                  },
                  SimtEmitter::Sync::Warp);
            });
    });
  });
}

void SimtFlashKernel::keepProbabilities() {
  eachWarp(
      [&](Value, Value, Value thread) {
        Value s = e.registersOf(scoreRegs, thread);
        Value p = e.registersOf(probRegs, thread);
        for (int64_t block = 0; block < RT * keyBlocks; ++block)
          for (int64_t el = 0; el < 4; ++el) {
            SmallVector<Value> at{e.index(block), e.index(el)};
            e.store(e.load(s, at), p, at);
          }
      },
      SimtEmitter::Sync::Warp);
}

void SimtFlashKernel::bindArguments(TypeRange bindingTypes) {
  treePrefix = part == KeyPart::TreePrefix;
  partials = treePrefix || decodeSplit;
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
  // Sparse decode: the keys of the blocks a row's selection lists.
  gathered = shape.selection == KeySelectionKind::Blocks;
  assert((!gathered || decodeSplit) && "sparse attention tiles decode rows");
  selection = gathered ? args[next++] : Value();
  gate = !partials && shape.epilogue == Epilogue::SigmoidGate ? args[next++]
                                                              : Value();
  sinks = !partials && shape.withSinks ? args[next++] : Value();
  out = args[next++];
  lse = partials || shape.withLogSumExp ? args[next++] : Value();
  if (mergesSplits) {
    assert(decodeSplit && part == KeyPart::All && !shape.ragged &&
           shape.selection == KeySelectionKind::Dense &&
           "the dense decode kernel merges its splits");
    // The split's partials, then the merge's own: [gate], [sinks], o, [lse].
    mergeBindings.assign({out, lse});
    if (shape.epilogue == Epilogue::SigmoidGate)
      mergeBindings.push_back(args[next++]);
    if (shape.withSinks)
      mergeBindings.push_back(args[next++]);
    mergeBindings.push_back(args[next++]);
    if (shape.withLogSumExp)
      mergeBindings.push_back(args[next++]);
    splitCounters = args[next++];
  }
  // Prefill with a mask_mod walks the key tiles its block mask lists.
  blockMask = flashUsesBlockMask(shape, part) && !decodeSplit;
  if (blockMask) {
    tileClasses = args[next++];
    tileList = args[next++];
    tileCounts = args[next++];
  }
  workgroup = args.back();
  keys = shape;
  if (treePrefix)
    keys.mask = MaskKind::None;
  mapping = gathered      ? RowMapping::SparseRow
            : decodeSplit ? RowMapping::DecodeTile
                          : RowMapping::QueryTile;

  TQ = flash.queryTile(), TK = flash.keyTile;
  D = shape.headDim, Dv = shape.valueDim;
  Dp = flash.paddedHeadDim, Dvp = flash.paddedValueDim;
  group = shape.numHeads / shape.numKvHeads;
  RT = flash.rowTiles;
  keyBlocks = TK / WarpMmaOp::kFragmentColumns;
  // The blocks of 8 value columns of a warp's output fragment (its part of
  // the columns with flash.valueParts > 1).
  valueBlocks = flash.valueColumnsPerWarp() / WarpMmaOp::kFragmentColumns;
  storage = KernelEmitter::storageType(q);
  c0 = e.index(0), c1 = e.index(1), c32 = e.index(32);

  // A ragged batch's rows are per sequence (findKeyLength).
  if (!shape.ragged)
    lq = e.dim(q, 2);
}

Value SimtFlashKernel::plannedEntry() {
  const int64_t blocksPerEntry =
      mapping == RowMapping::DecodeTile
          ? shape.numKvHeads * llvm::divideCeil(group, TQ)
          : shape.numHeads;
  return e.div(workgroup, e.index(blocksPerEntry));
}

Value SimtFlashKernel::hasPlannedWork() {
  return e.icmp(arith::CmpIPredicate::sge,
                e.loadInt(inputs.plan, {plannedEntry(), c0}), e.i32(0));
}

void SimtFlashKernel::findKeyLength() {
  // The keys of the block's sequence: dim 2 of k, its seq_lens entry in a
  // paged cache, or the difference of its offsets in a ragged batch (whose
  // query rows are the sequence's too). Query row i sits at Lk - Lq + i
  // (the variant regions' position).
  kv.emplace(e, shape, inputs);
  kv->bind(batch);
  lk = kv->length(batch);
  if (shape.ragged) {
    queries->bind(batch);
    lq = queries->length(batch);
  }
  firstPosition = e.sub(lk, lq);
  if (treePrefix)
    lk = e.sub(lk, lq);
  from = c0, to = lk;
}

void SimtFlashKernel::mapRows() {
  switch (mapping) {
  case RowMapping::SparseRow: {
    // Workgroup order (batch, head, query row, split), the split fastest:
    // each row selects its own blocks, so a tile is one row (the warp's
    // other 15 rows are padding).
    const int64_t bs = shape.selectionBlockSize;
    entriesPerSplit = std::max<int64_t>(1, tiling.splitKeys / bs);
    Value splits = e.dim(lse, 3);
    split = e.rem(workgroup, splits);
    RowOfWorkgroup at(e, e.div(workgroup, splits), shape.numHeads, lq);
    batch = at.batch;
    findKeyLength();
    kvHead = e.div(at.head, e.index(group));
    first = at.row;
    rows = c1;
    head = at.head, row = at.row;
    // The host takes more splits than split_keys asks (fewer entries
    // each) when the rows alone would not fill the GPU; a split never
    // takes more than entriesPerSplit, the size of its shared list.
    Value entries = e.dim(selection, 3);
    Value perSplit = e.minS(e.ceilDiv(entries, splits),
                            e.index(entriesPerSplit));
    entryFrom = e.minS(entries, e.mul(split, perSplit));
    entryTo = e.minS(entries, e.add(entryFrom, perSplit));
    return;
  }
  case RowMapping::DecodeTile: {
    if (shape.ragged) {
      // The plan's entry (sequence, query row, key range): the group's
      // heads at that row make the rows.
      entry = plannedEntry();
      Value tiles = e.index(llvm::divideCeil(group, TQ));
      Value rest = e.rem(workgroup, e.mul(e.index(shape.numKvHeads), tiles));
      Value tile = e.rem(rest, tiles);
      kvHead = e.div(rest, tiles);
      auto column = [&](int64_t c) {
        return e.toIndex(e.loadInt(inputs.plan, {entry, e.index(c)}));
      };
      batch = column(0);
      findKeyLength();
      rowBase = column(1);
      rowsPerHead = c1;
      first = e.mul(tile, e.index(TQ));
      rows = e.minS(e.index(TQ), e.sub(e.index(group), first));
      from = e.minS(lk, column(2));
      to = e.minS(lk, column(3));
      return;
    }
    // Workgroup order (batch, kv head, row tile, split), the split
    // fastest. The group's (head, query row) pairs, head-major, make the
    // rows, so its heads share each staged k and v tile. A tree's last
    // split is its nodes' own keys', not the prefix's.
    Value splits = e.dim(lse, 3);
    if (treePrefix)
      splits = e.sub(splits, c1);
    Value packed = e.mul(e.index(group), lq);
    Value tiles = e.ceilDiv(packed, e.index(TQ));
    split = e.rem(workgroup, splits);
    Value rest = e.div(workgroup, splits);
    Value tile = e.rem(rest, tiles);
    rest = e.div(rest, tiles);
    kvHead = e.rem(rest, e.index(shape.numKvHeads));
    batch = e.div(rest, e.index(shape.numKvHeads));
    findKeyLength();
    rowBase = c0;
    rowsPerHead = lq;
    first = e.mul(tile, e.index(TQ));
    rows = e.minS(e.index(TQ), e.sub(packed, first));
    // The splits share the keys in whole key tiles (the host program picks
    // how many: at least one per split_keys keys, more while the GPU would
    // idle); trailing splits may hold none.
    Value splitLength =
        e.mul(e.ceilDiv(e.ceilDiv(lk, splits), e.index(TK)), e.index(TK));
    from = e.minS(lk, e.mul(split, splitLength));
    to = e.minS(lk, e.add(from, splitLength));
    return;
  }
  case RowMapping::QueryTile: {
    if (shape.ragged) {
      // The plan's entry (sequence, first row of the tile), the head
      // fastest: a kv group's heads read the same keys together.
      entry = plannedEntry();
      head = e.rem(workgroup, e.index(shape.numHeads));
      batch = e.toIndex(e.loadInt(inputs.plan, {entry, c0}));
      findKeyLength();
      kvHead = e.div(head, e.index(group));
      first = e.toIndex(e.loadInt(inputs.plan, {entry, c1}));
      rows = e.minS(e.index(TQ), e.sub(lq, first));
      return;
    }
    // Workgroup order (batch, head, query tile), the tile fastest (a
    // head's blocks run together and share its k and v in L2), the last
    // tile first: under a causal mask the later tiles see the most keys,
    // and blocks launched heaviest first leave a lighter last wave (as
    // FlashAttention-3 schedules them).
    Value tiles = e.ceilDiv(lq, e.index(TQ));
    Value tile = e.sub(e.sub(tiles, c1), e.rem(workgroup, tiles));
    Value bh = e.div(workgroup, tiles);
    head = e.rem(bh, e.index(shape.numHeads));
    batch = e.div(bh, e.index(shape.numHeads));
    findKeyLength();
    kvHead = e.div(head, e.index(group));
    first = e.mul(tile, e.index(TQ));
    rows = e.minS(e.index(TQ), e.sub(lq, first));
    if (treePrefix)
      split = c0;
    if (blockMask)
      maskRow = {shape.variants.maskModReadsBatch() ? batch : c0,
                 shape.variants.maskModReadsHead() ? head : c0, tile};
    return;
  }
  }
}

Value SimtFlashKernel::headOf(Value r) {
  if (mapping != RowMapping::DecodeTile)
    return head;
  return e.add(e.mul(kvHead, e.index(group)),
               e.div(e.add(first, r), rowsPerHead));
}

Value SimtFlashKernel::rowOf(Value r) {
  switch (mapping) {
  case RowMapping::SparseRow:
    return row;
  case RowMapping::DecodeTile:
    return e.add(rowBase, e.rem(e.add(first, r), rowsPerHead));
  case RowMapping::QueryTile:
    return e.add(first, r);
  }
  llvm_unreachable("unknown row mapping");
}

SmallVector<Value> SimtFlashKernel::rowAt(Value r) {
  // A ragged batch's partials are [entries, H, (Dv)], the entry's index
  // being its partial's.
  if (partials && shape.ragged)
    return {entry, headOf(r)};
  SmallVector<Value> at = queries->at(batch, headOf(r), rowOf(r));
  if (split)
    at.push_back(split);
  return at;
}

Value SimtFlashKernel::queryPositionOf(Value r) {
  if (rowPositions)
    return e.toIndex(e.loadInt(rowPositions, {r}));
  return e.add(firstPosition, rowOf(r));
}

std::pair<Value, Value> SimtFlashKernel::rowKeys(Value r) {
  auto [rowBegin, rowEnd] = visibleKeys(e, keys, rowOf(r), lq, lk, from, to);
  if (rowStarts) {
    rowBegin = e.maxS(rowBegin, e.toIndex(e.loadInt(rowStarts, {r})));
    rowEnd = e.maxS(rowEnd, rowBegin);
  }
  return {rowBegin, rowEnd};
}

void SimtFlashKernel::allocateBuffers() {
  // Zero padding (rows past the tile's, keys past the range, features past
  // D and Dv) keeps the products exact; padded keys are masked, padded rows
  // and features never stored.
  // With warpgroup products the tiles are core-matrix tiled (see
  // attn_kernel.warp_mma {warpgroup}).
  auto tile = [&](int64_t rows, int64_t columns) {
    const int64_t side = WarpMmaOp::kCoreMatrixSide;
    if (flash.warpgroupMma)
      return e.shared({rows / side, columns / side, side, side}, storage);
    return e.shared({rows, columns}, storage);
  };
  qs = tile(TQ, flash.headStride());
  for (int64_t stage = 0; stage < flash.stages; ++stage) {
    ks.push_back(tile(TK, flash.headStride()));
    vs.push_back(tile(TK, flash.valueStride()));
  }
  // The 4 lanes that hold a row (those of one lane / 4) exchange their parts
  // of its max and sum here: quad[row, lane % 4].
  // Warps that split a row's value columns keep parts of their own.
  quad = e.shared({flash.valueParts * TQ, SimtFlashTiling::kLanesPerRow});
  // Each lane keeps in registers its share of its warp's scores and output
  // (mma accumulator fragments: rows g and g + 8 of each of the warp's row
  // tiles of 16, two columns of every 8) and, for each of its rows, the
  // running max (the same in a row's 4 lanes) and its part of the running
  // sum.
  scoreRegs = e.registers({RT * keyBlocks, 4});
  if (flash.overlapsProducts)
    probRegs = e.registers({RT * keyBlocks, 4});
  if (flash.producerWarpgroup)
    stageBarriers = e.shared({kStageBarriers}, b.getI64Type());
  outRegs = e.registers({RT * valueBlocks, 4});
  maxRegs = e.registers({2 * RT});
  sumRegs = e.registers({2 * RT});

  // The softmax in base 2, as FlashAttention-2 takes it: a lane's scores t
  // are its products s as they are (the scores themselves with a softcap or
  // a score_mod: softcap(scale s), then score_mod), the running max m is in
  // t's units, and p = 2^(c t - c m) is one fma and one ex2 with
  // c = scale log2(e) (log2(e) for scores themselves); so
  // lse = (c ln 2) m + log l.
  scoresScaled = shape.softcap > 0.0 || variants.hasScoreMod();
  const double log2e = 1.4426950408889634;
  const double exponentScaleValue = scoresScaled ? log2e : shape.scale * log2e;
  exponentScale = e.scalar(exponentScaleValue);
  negExponentScale = e.scalar(-exponentScaleValue);
  maxToNatural = e.scalar(scoresScaled ? 1.0 : shape.scale);
}

void SimtFlashKernel::eachWarp(
    function_ref<void(Value warpRow, Value lane, Value thread)> body,
    SimtEmitter::Sync sync) {
  e.eachThreadIn(
      flash.productThreads(),
      [&](Value thread) {
        Value rowWarp = e.div(e.div(thread, c32), e.index(flash.valueParts));
        Value warpRow =
            e.mul(rowWarp, e.index(WarpMmaOp::kRows * flash.rowTiles));
        body(warpRow, e.rem(thread, c32), thread);
      },
      sync);
}

Value SimtFlashKernel::valuePartOf(Value thread) {
  return e.rem(e.div(thread, c32), e.index(flash.valueParts));
}

Value SimtFlashKernel::quadRowOf(Value row, Value thread) {
  if (flash.valueParts == 1)
    return row;
  return e.add(row, e.mul(valuePartOf(thread), e.index(TQ)));
}

SmallVector<SimtFlashKernel::LaneRow> SimtFlashKernel::laneRowsOf(Value warpRow,
                                                                  Value lane) {
  SmallVector<LaneRow> laneRows;
  for (int64_t tile = 0; tile < RT; ++tile) {
    MmaFragmentLayout layout(
        e, e.add(warpRow, e.index(tile * WarpMmaOp::kRows)), lane);
    for (int64_t half = 0; half < 2; ++half)
      laneRows.push_back({tile, half, 2 * tile + half, layout.accRow(e, half)});
  }
  return laneRows;
}

Value SimtFlashKernel::quadLaneOf(Value lane) {
  return e.rem(lane, e.index(SimtFlashTiling::kLanesPerRow));
}

Value SimtFlashKernel::combineQuad(Value quadRow,
                                   function_ref<Value(Value, Value)> combine) {
  Value all = e.load(quad, {quadRow, c0});
  for (int64_t i = 1; i < SimtFlashTiling::kLanesPerRow; ++i)
    all = combine(all, e.load(quad, {quadRow, e.index(i)}));
  return all;
}

SmallVector<Value> SimtFlashKernel::fragmentAt(const LaneRow &at,
                                               int64_t blocks, int64_t block,
                                               int64_t el) {
  return {e.index(at.tile * blocks + block), e.index(2 * at.half + el)};
}

void SimtFlashKernel::setRegisters(Value registers, int64_t blocks,
                                   double value) {
  for (int64_t block = 0; block < blocks; ++block)
    for (int64_t i = 0; i < 4; ++i)
      e.store(e.scalar(value), registers, {e.index(block), e.index(i)});
}

Value SimtFlashKernel::scoreOf(Value product, Value r, Value key) {
  if (!scoresScaled)
    return product;
  Value s = e.softcap(e.fmul(product, e.scalar(shape.scale)), shape.softcap);
  return variants.score(s, batch, headOf(r), queryPositionOf(r), key);
}

void SimtFlashKernel::stageQueryTile() {
  // Stage the q tile (waited for with the first key tile's k), clear the
  // registers.
  e.eachThread([&](Value thread) {
    e.stageRows(thread, TQ, q, qs, D, Dp,
              [&](Value r) -> std::pair<SmallVector<Value>, Value> {
                return {queries->at(batch, headOf(r), rowOf(r)), lt(r, rows)};
              });
    setRegisters(e.registersOf(outRegs, thread), RT * valueBlocks, 0.0);
    Value m = e.registersOf(maxRegs, thread),
          l = e.registersOf(sumRegs, thread);
    for (int64_t slot = 0; slot < 2 * RT; ++slot) {
      e.store(e.scalar(kNegInf), m, e.index(slot));
      e.store(e.scalar(0.0), l, e.index(slot));
    }
  });
}

void SimtFlashKernel::findTreeNodes() {
  if (!treeDepths)
    return;
  if (treeWindow)
    rowStarts = e.shared({TQ}, b.getI32Type());
  if (!shape.variants.empty())
    rowPositions = e.shared({TQ}, b.getI32Type());
  e.forAll(e.index(TQ), [&](Value r) {
    Value node = e.minS(rowOf(r), e.sub(lq, c1));
    TreeNodeKeys tree(e, parents, batch, node, lk, shape.mask, shape.window);
    if (rowStarts)
      memref::StoreOp::create(b, e.toI32(tree.prefixBegin), rowStarts, r);
    if (rowPositions)
      memref::StoreOp::create(b, e.toI32(tree.position), rowPositions, r);
  });
}

void SimtFlashKernel::findKeyRange() {
  // The keys some row of the tile sees. Query tiles of the op's mask: from
  // the first row's first to the last row's last (both grow with the row).
  // Else the union of the rows' ranges: decode rows cycle through the
  // query rows once per head, windowed tree nodes start where their depth
  // says. Key tiles inside the keys every row sees need no mask (with
  // sparse rows' gathered keys, none is taken to be).
  if (gathered) {
    const int64_t bs = shape.selectionBlockSize;
    listed = e.shared({entriesPerSplit}, b.getI32Type());
    Value listedCount = e.shared({1}, b.getI32Type());
    e.eachThread([&](Value thread) {
      e.ifThen(e.icmp(arith::CmpIPredicate::eq, thread, c0), [&] {
        Value count = forEachListedBlock(
            e, selection, {batch, headOf(c0), rowOf(c0)},
            e.ceilDiv(lk, e.index(bs)), entryFrom, entryTo, {c0},
            [&](Value block, ValueRange it) -> SmallVector<Value> {
              memref::StoreOp::create(b, e.toI32(block), listed, it[0]);
              return {e.add(it[0], c1)};
            })[0];
        memref::StoreOp::create(b, e.toI32(count), listedCount, c0);
      });
    });
    listedKeys = e.mul(e.toIndex(e.loadInt(listedCount, {c0})), e.index(bs));
    begin = c0;
    end = listedKeys;
    allBegin = allEnd = c0;
  } else if (decodeSplit || rowStarts) {
    SmallVector<Value> range =
        e.loop(c0, rows, c1, {to, from, from, to},
               [&](Value r, ValueRange it) -> SmallVector<Value> {
                 auto [rowBegin, rowEnd] = rowKeys(r);
                 return {e.minS(it[0], rowBegin), e.maxS(it[1], rowEnd),
                         e.maxS(it[2], rowBegin), e.minS(it[3], rowEnd)};
               });
    begin = range[0];
    end = e.maxS(range[1], range[0]);
    allBegin = range[2];
    allEnd = range[3];
  } else {
    auto [firstRowBegin, firstRowEnd] = rowKeys(c0);
    auto [lastRowBegin, lastRowEnd] = rowKeys(e.sub(rows, c1));
    begin = firstRowBegin;
    // The block mask's key tiles start at multiples of TK.
    if (blockMask)
      begin = e.mul(e.div(begin, e.index(TK)), e.index(TK));
    end = lastRowEnd;
    allBegin = lastRowBegin;
    allEnd = firstRowEnd;
  }
  keyTiles = e.ceilDiv(e.maxS(e.sub(end, begin), c0), e.index(TK));
  if (blockMask)
    keyTiles = e.toIndex(e.loadInt(tileCounts, maskRow));
}

Value SimtFlashKernel::tileFirstKey(Value tile) {
  if (!blockMask)
    return e.add(begin, e.mul(tile, e.index(TK)));
  Value last = e.sub(e.dim(tileList, 3), c1);
  SmallVector<Value> at(maskRow);
  at.push_back(e.minS(tile, last));
  return e.mul(e.toIndex(e.loadInt(tileList, at)), e.index(TK));
}

std::pair<Value, Value> SimtFlashKernel::keyAt(Value v) {
  if (!gathered)
    return {v, lt(v, end)};
  const int64_t bs = shape.selectionBlockSize;
  Value entry = e.minS(e.div(v, e.index(bs)), e.index(entriesPerSplit - 1));
  Value key = e.add(e.mul(e.toIndex(e.loadInt(listed, {entry})), e.index(bs)),
                    e.rem(v, e.index(bs)));
  return {key, both(lt(v, end), lt(key, lk))};
}

SmallVector<Value> SimtFlashKernel::loadTilePages(Value thread, Value tile) {
  // Entry i is the page of the tile's first key plus i, clamped to the
  // sequence's last page (the table holds no page past its keys).
  const int64_t pageSize = kv->pagedBy();
  Value size = e.index(pageSize);
  Value firstPage = e.div(tileFirstKey(tile), size);
  Value lastPage = e.div(e.sub(e.maxS(lk, c1), c1), size);
  Value zero = e.i32(0);
  SmallVector<Value> pages;
  for (int64_t pass = 0; pass * e.blockThreads < pagesPerTile; ++pass) {
    Value i = e.add(thread, e.index(pass * e.blockThreads));
    Value loads = both(lt(tile, keyTiles), lt(i, e.index(pagesPerTile)));
    pages.push_back(e.ifElse(
        loads,
        [&]() -> SmallVector<Value> {
          return {
              e.toI32(kv->page(batch, e.minS(e.add(firstPage, i), lastPage)))};
        },
        [&]() -> SmallVector<Value> { return {zero}; })[0]);
  }
  return pages;
}

void SimtFlashKernel::storeTilePages(Value thread, Value tile,
                                     ValueRange pages) {
  Value slot = e.rem(tile, e.index(3));
  for (auto [pass, page] : llvm::enumerate(pages)) {
    Value i = e.add(thread, e.index(pass * e.blockThreads));
    e.ifThen(both(lt(tile, keyTiles), lt(i, e.index(pagesPerTile))), [&] {
      memref::StoreOp::create(b, page, tilePages, ValueRange{slot, i});
    });
  }
}

std::function<std::pair<SmallVector<Value>, Value>(Value)>
SimtFlashKernel::keyRowsOf(Value tile) {
  Value firstKey = tileFirstKey(tile);
  if (tilePages) {
    Value size = e.index(kv->pagedBy());
    Value firstPage = e.div(firstKey, size);
    Value slot = e.rem(tile, e.index(3));
    return [this, firstKey, firstPage, slot,
            size](Value j) -> std::pair<SmallVector<Value>, Value> {
      auto [key, isKey] = keyAt(e.add(firstKey, j));
      // Rows past the keys read nothing: they take the tile's first page.
      Value row = e.select(isKey, key, firstKey);
      Value page = e.toIndex(
          e.loadInt(tilePages, {slot, e.sub(e.div(row, size), firstPage)}));
      return {kv->atPage(page, kvHead, row), isKey};
    };
  }
  return [this, firstKey](Value j) -> std::pair<SmallVector<Value>, Value> {
    auto [key, isKey] = keyAt(e.add(firstKey, j));
    // Rows past the keys are not read: clamp them to key 0 (a paged
    // cache's table holds no page past a sequence's keys).
    return {kv->at(batch, kvHead, e.select(isKey, key, c0)), isKey};
  };
}

void SimtFlashKernel::stageKeyTile(Value thread, Value tile,
                                   ArrayRef<std::pair<Value, Value>> fromTo,
                                   int64_t dim, int64_t padded,
                                   ThreadRange sharing) {
  auto checked = [&] {
    e.stageRows(thread, TK, fromTo, dim, padded, keyRowsOf(tile),
                /*firstColumn=*/{}, sharing);
  };
  // A tile whose keys all precede the range's end (every tile of a long
  // range but its last) copies its rows unpredicated: no compare and no
  // select of the address and the size per 16-byte copy, which were 3 of
  // the 7 instructions of each copy in prefill's key loop. The other
  // kernels keep one form of their copies, for their registers (ptxas for
  // sm_90a, bf16): decode waits on memory, not on instructions, and with
  // two forms kept 207 registers, not 192, at Qwen3-Next's shape (4
  // blocks per SM, not 5); a paged cache's rows (a page table entry each)
  // took prefill from 161 to 202 (2 blocks per SM, not 3); head dims above
  // 128 spilled 44 bytes in a ragged batch's warpgroup kernel.
  if (decodeSplit || gathered || kv->pagedBy() > 0 || Dp > 128)
    return checked();
  // Only a tile the block walks: a block mask lists none past a row's
  // tiles, and the list's entries there were never written (the first
  // tile is staged before the loop, whether or not there is one).
  Value firstKey = tileFirstKey(tile);
  Value whole =
      both(lt(tile, keyTiles), e.icmp(arith::CmpIPredicate::ule,
                                      e.add(firstKey, e.index(TK)), end));
  Value always = arith::ConstantIntOp::create(b, b.getI1Type(), 1);
  e.ifElse(
      whole,
      [&]() -> SmallVector<Value> {
        e.stageRows(
            thread, TK, fromTo, dim, padded,
            [&](Value j) -> std::pair<SmallVector<Value>, Value> {
              return {kv->at(batch, kvHead, e.add(firstKey, j)), always};
            },
            /*firstColumn=*/{}, sharing);
        return {};
      },
      [&]() -> SmallVector<Value> {
        checked();
        return {};
      });
}

Value SimtFlashKernel::interiorTileOf(Value firstKey) {
  Value interiorTile = both(
      e.icmp(arith::CmpIPredicate::sge, firstKey, allBegin),
      e.icmp(arith::CmpIPredicate::sle, e.add(firstKey, e.index(TK)), allEnd));
  if (blockMask) {
    SmallVector<Value> at(maskRow);
    at.push_back(e.div(firstKey, e.index(TK)));
    Value tileClass = memref::LoadOp::create(b, tileClasses, at);
    interiorTile =
        both(interiorTile,
             e.icmp(arith::CmpIPredicate::eq, tileClass,
                    arith::ConstantIntOp::create(b, b.getI8Type(), kFullTile)));
  }
  return interiorTile;
}

void SimtFlashKernel::scoreKeyTile(Value firstKey, Value keyBuffer) {
  // S = q k^T into the lanes' registers; each lane turns its elements into
  // scores t (softcapped, masked) and offers its part of its rows' max
  // (read by its warp alone: the warps need not wait for each other here).
  Value interior = interiorTileOf(firstKey);
  eachWarp(
      [&](Value warpRow, Value lane, Value thread) {
        multiplyScores(keyBuffer, warpRow, lane, thread);
        scoreProducts(firstKey, interior, warpRow, lane, thread);
      },
      SimtEmitter::Sync::Warp);
}

void SimtFlashKernel::multiplyScores(Value keyBuffer, Value warpRow, Value lane,
                                     Value thread, bool async) {
  Value s = e.registersOf(scoreRegs, thread);
  auto scoresOp = WarpMmaOp::create(b, qs, keyBuffer, s, warpRow, lane,
                                    /*n=*/TK, /*k=*/Dp);
  scoresOp.setRhsTransposed(true);
  scoresOp.setAccFragment(true);
  scoresOp.setRowTiles(RT);
  scoresOp.setWarpgroup(flash.warpgroupMma);
  scoresOp.setAsync(async);
}

void SimtFlashKernel::scoreProducts(Value firstKey, Value interiorTile,
                                    Value warpRow, Value lane, Value thread) {
  // Tiles whose keys every row sees skip the mask, as FlashAttention-2
  // masks only the tiles on the mask's edge.
  Value s = e.registersOf(scoreRegs, thread);
  MmaFragmentLayout layout(e, warpRow, lane);
  SmallVector<LaneRow> laneRows = laneRowsOf(warpRow, lane);
  // The scores of the lane's elements and its parts of its rows'
  // maxes.
  auto scoreTile = [&](bool masked) {
    // The keys of the lane's columns (the same in all its rows).
    SmallVector<std::pair<Value, Value>> columnKeys;
    if (masked || scoresScaled)
      for (int64_t block = 0; block < keyBlocks; ++block)
        for (int64_t el = 0; el < 2; ++el)
          columnKeys.push_back(
              keyAt(e.add(firstKey, layout.accColumn(e, e.index(block), el))));
    SmallVector<Value> partMaxes;
    for (const LaneRow &laneRow : laneRows) {
      std::pair<Value, Value> visibleRange;
      if (masked)
        visibleRange = rowKeys(laneRow.row);
      Value partMax = e.scalar(kNegInf);
      for (int64_t block = 0; block < keyBlocks; ++block)
        for (int64_t el = 0; el < 2; ++el) {
          SmallVector<Value> at = fragmentAt(laneRow, keyBlocks, block, el);
          Value key =
              columnKeys.empty() ? Value() : columnKeys[2 * block + el].first;
          Value score = scoreOf(e.load(s, at), laneRow.row, key);
          if (masked) {
            Value isKey = columnKeys[2 * block + el].second;
            Value visible = both(isKey, both(e.icmp(arith::CmpIPredicate::sge,
                                                    key, visibleRange.first),
                                             lt(key, visibleRange.second)));
            if (variants.hasMaskMod())
              visible = both(
                  visible, variants.visible(batch, headOf(laneRow.row),
                                            queryPositionOf(laneRow.row), key));
            score = e.select(visible, score, e.scalar(kNegInf));
          }
          if (masked || scoresScaled)
            e.store(score, s, at);
          partMax = e.fmax(partMax, score);
        }
      partMaxes.push_back(partMax);
    }
    return partMaxes;
  };
  // A mask_mod may hide keys of any tile but those the block mask
  // found full.
  SmallVector<Value> partMaxes =
      gathered || (variants.hasMaskMod() && !blockMask)
          ? scoreTile(/*masked=*/true)
          : e.ifElse(
                interiorTile, [&] { return scoreTile(false); },
                [&] { return scoreTile(true); });
  Value quadLane = quadLaneOf(lane);
  for (auto [laneRow, partMax] : llvm::zip(laneRows, partMaxes))
    e.store(partMax, quad, {quadRowOf(laneRow.row, thread), quadLane});
}

void SimtFlashKernel::updateSoftmax(Value keyTileIndex, bool stageValues,
                                    function_ref<void()> beforeRescale) {
  // The online-softmax update of each lane's rows: the row's new max from
  // its 4 lanes' parts; P (rounded to the storage dtype for the tensor
  // cores) to shared memory; the lane's sum and output rescaled. The sum
  // adds the probabilities as stored, so o is a weighted mean of v with
  // exactly P's weights.
  eachWarp(
      [&](Value warpRow, Value lane, Value thread) {
        if (stageValues)
          stageKeyTile(thread, keyTileIndex, {{v, vs[0]}}, Dv, Dvp);
        Value s = e.registersOf(scoreRegs, thread);
        Value o = e.registersOf(outRegs, thread);
        Value m = e.registersOf(maxRegs, thread);
        Value l = e.registersOf(sumRegs, thread);
        SmallVector<LaneRow> laneRows = laneRowsOf(warpRow, lane);
        // Each row's rescaling alpha, 1 where its max stayed; the output
        // fragment is rescaled only when some row of the lane's changed, which
        // after the first tiles is rare (a branch, not 16 Dv / 8 multiplies per
        // row on every tile).
        SmallVector<Value> rescales;
        Value anyChanged;
        for (const LaneRow &laneRow : laneRows) {
          Value r = laneRow.row, h = e.index(laneRow.slot);
          Value tileMax =
              combineQuad(quadRowOf(r, thread),
                          [&](Value x, Value y) { return e.fmax(x, y); });
          Value oldMax = e.load(m, h);
          Value newMax = e.fmax(oldMax, tileMax);
          Value safe = e.safeMax(newMax);
          Value changed = e.fcmp(arith::CmpFPredicate::UNE, oldMax, newMax);
          Value rescale = e.select(
              changed, e.exp2(e.fmul(e.fsub(oldMax, safe), exponentScale)),
              e.scalar(1.0));
          Value shift = e.fmul(safe, negExponentScale);
          Value partSum; // no 0 + x: LLVM keeps it (x may be -0)
          for (int64_t block = 0; block < keyBlocks; ++block) {
            SmallVector<Value> ats[2], ps;
            for (int64_t el = 0; el < 2; ++el) {
              ats[el] = fragmentAt(laneRow, keyBlocks, block, el);
              ps.push_back(
                  e.exp2(e.fma(e.load(s, ats[el]), exponentScale, shift)));
            }
            SmallVector<Value> rounded = roundPair(ps[0], ps[1]);
            for (int64_t el = 0; el < 2; ++el) {
              e.store(rounded[el], s, ats[el]);
              partSum = partSum ? e.fadd(partSum, rounded[el]) : rounded[el];
            }
          }
          e.store(e.fma(e.load(l, h), rescale, partSum), l, h);
          e.store(newMax, m, h);
          rescales.push_back(rescale);
          anyChanged = anyChanged ? arith::OrIOp::create(b, anyChanged, changed)
                                  : changed;
        }
        if (beforeRescale)
          beforeRescale();
        e.ifThen(anyChanged, [&] {
          for (auto [laneRow, rescale] : llvm::zip(laneRows, rescales))
            for (int64_t block = 0; block < valueBlocks; ++block)
              for (int64_t el = 0; el < 2; ++el) {
                SmallVector<Value> at =
                    fragmentAt(laneRow, valueBlocks, block, el);
                e.store(e.fmul(e.load(o, at), rescale), o, at);
              }
        });
        if (stageValues)
          waitForCopies(); // this tile's v
      },
      stageValues ? SimtEmitter::Sync::Block : SimtEmitter::Sync::Warp);
}

SmallVector<Value> SimtFlashKernel::roundPair(Value x, Value y) {
  if (storage.isF32())
    return {x, y};
  // The two elements of a fragment row pair (one 32-bit operand register
  // of the tensor cores) rounded by one packed conversion
  // (cvt.rn.bf16x2.f32), not one each: LLVM packs two rounded values that
  // form one 32-bit word, but splits a vector rounded and widened back.
  // bf16 widens by a shift of its bits (or a mask of the high half).
  Value pair = vector::FromElementsOp::create(
      b, VectorType::get({2}, storage),
      ValueRange{e.narrow(x, storage), e.narrow(y, storage)});
  if (!storage.isBF16())
    return {e.widen(vector::ExtractOp::create(b, pair, 0)),
            e.widen(vector::ExtractOp::create(b, pair, 1))};
  Value bits = vector::BitCastOp::create(
      b, VectorType::get({1}, b.getI32Type()), pair);
  Value word = vector::ExtractOp::create(b, bits, 0);
  Value low = arith::ShLIOp::create(b, word, e.i32(16));
  Value high = arith::AndIOp::create(b, word, e.i32(-65536)); // 0xffff0000
  return {arith::BitcastOp::create(b, e.f32, low).getResult(),
          arith::BitcastOp::create(b, e.f32, high).getResult()};
}

void SimtFlashKernel::accumulateValues(
    Value valueBuffer, function_ref<void(Value thread)> stageNext) {
  // o += P v into the lanes' registers, the next tile's k on its way.
  eachWarp([&](Value warpRow, Value lane, Value thread) {
    if (stageNext)
      stageNext(thread);
    multiplyValues(scoreRegs, valueBuffer, warpRow, lane, thread);
    if (stageNext)
      waitForCopies(); // the next tile's k
  });
}

void SimtFlashKernel::multiplyValues(Value probabilities, Value valueBuffer,
                                     Value warpRow, Value lane, Value thread,
                                     bool async) {
  Value out = e.registersOf(outRegs, thread);
  // The warp's part of the value columns: a view of the v tile (rows of
  // columns, as mma.sync's tiles are; decode takes no warpgroups).
  assert((flash.valueParts == 1 || !flash.warpgroupMma) &&
         "value parts of a core-matrix tile");
  const int64_t columns = flash.valueColumnsPerWarp();
  if (flash.valueParts > 1)
    valueBuffer = memref::SubViewOp::create(
        b, valueBuffer,
        ArrayRef<OpFoldResult>{b.getIndexAttr(0),
                               e.mul(valuePartOf(thread), e.index(columns))},
        ArrayRef<OpFoldResult>{b.getIndexAttr(TK), b.getIndexAttr(columns)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1)});
  auto outputOp = WarpMmaOp::create(b, e.registersOfWarp(probabilities, thread),
                                    valueBuffer, out, warpRow, lane,
                                    /*n=*/columns, /*k=*/TK);
  outputOp.setAccumulate(true);
  outputOp.setAccFragment(true);
  outputOp.setLhsFragment(true);
  outputOp.setRowTiles(RT);
  outputOp.setWarpgroup(flash.warpgroupMma);
  outputOp.setAsync(async);
}

void SimtFlashKernel::mergeIfLastSplit() {
  // Every thread's partials are ordered before the barrier after which one
  // thread counts the split done (FlashDecoding's merge, done by the
  // tile's last block instead of a kernel of its own). The counter says
  // which block is last; it alone reads the others' partials, after a
  // fence of its own.
  Value splits = e.dim(lse, 3);
  Value tile = e.div(workgroup, splits);
  e.eachThread([&](Value) { DeviceFenceOp::create(b, loc); });
  Value last = e.shared({1}, b.getI32Type());
  e.eachThread([&](Value thread) {
    e.ifThen(e.icmp(arith::CmpIPredicate::eq, thread, c0), [&] {
      Value done =
          memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, e.i32(1),
                                      splitCounters, ValueRange{tile});
      Value isLast =
          e.icmp(arith::CmpIPredicate::eq, e.toIndex(done), e.sub(splits, c1));
      memref::StoreOp::create(b,
                              arith::ExtUIOp::create(b, b.getI32Type(), isLast),
                              last, ValueRange{c0});
    });
  });
  Value isLast =
      e.icmp(arith::CmpIPredicate::ne,
             memref::LoadOp::create(b, last, ValueRange{c0}), e.i32(0));
  e.ifThen(isLast, [&] {
    e.eachThread([&](Value) { DeviceFenceOp::create(b, loc); });
    Value dv = e.index(Dv);
    e.forAll(e.mul(rows, dv), [&](Value x) {
      Value r = e.div(x, dv);
      // The merge kernel's row order: (batch, head, query row).
      Value rowIndex = e.add(
          e.mul(e.add(e.mul(batch, e.index(shape.numHeads)), headOf(r)), lq),
          rowOf(r));
      SplitKvMerge merge(e, mergeBindings, shape, rowIndex);
      emitSplitKvMerge(e, shape, merge, e.rem(x, dv));
    });
  });
}

void SimtFlashKernel::storeOutputs() {
  // Each row's sum from its 4 lanes' parts, then o = acc / l, gated, and
  // lse = m + log l (by the row's first lane), with the head's sink in the
  // denominator. The tree's prefix and decode splits: their partials,
  // ungated and without the sink (an empty range gives o = 0 and
  // lse = -inf, which the merge weighs 0).
  eachWarp(
      [&](Value warpRow, Value lane, Value thread) {
        Value l = e.registersOf(sumRegs, thread);
        Value quadLane = quadLaneOf(lane);
        for (const LaneRow &laneRow : laneRowsOf(warpRow, lane))
          e.store(e.load(l, e.index(laneRow.slot)), quad,
                  {quadRowOf(laneRow.row, thread), quadLane});
      },
      SimtEmitter::Sync::Warp);
  eachWarp([&](Value warpRow, Value lane, Value thread) {
    Value o = e.registersOf(outRegs, thread);
    Value m = e.registersOf(maxRegs, thread);
    MmaFragmentLayout layout(e, warpRow, lane);
    Value quadLane = quadLaneOf(lane);
    for (const LaneRow &laneRow : laneRowsOf(warpRow, lane)) {
      Value r = laneRow.row;
      e.ifThen(lt(r, rows), [&] {
        Value sum = combineQuad(quadRowOf(r, thread),
                                [&](Value x, Value y) { return e.fadd(x, y); });
        Value max = e.load(m, e.index(laneRow.slot));
        KernelEmitter::RowEnd end =
            e.endSoftmaxRow(e.fmul(max, maxToNatural), sum,
                            sinks ? e.load(sinks, headOf(r)) : Value());
        Value inv = end.scale;
        SmallVector<Value> at = rowAt(r);
        RowGate rowGate(e, shape, gate, at);
        // The warp's first value column (its part's).
        Value firstColumn =
            e.mul(valuePartOf(thread), e.index(flash.valueColumnsPerWarp()));
        for (int64_t block = 0; block < valueBlocks; ++block)
          for (int64_t el = 0; el < 2; ++el) {
            Value d =
                e.add(firstColumn, layout.accColumn(e, e.index(block), el));
            auto storeElement = [&] {
              Value value = rowGate.apply(
                  e.fmul(e.load(o, fragmentAt(laneRow, valueBlocks, block, el)),
                         inv),
                  d);
              SmallVector<Value> outAt(at);
              outAt.push_back(d);
              e.store(value, out, outAt);
            };
            // Blocks past Dv hold padding only; the last may hold both
            // (with parts, Dv fills every part: chooseForDecode).
            if (flash.valueParts > 1 ||
                (block + 1) * WarpMmaOp::kFragmentColumns <= Dv)
              storeElement();
            else if (block * WarpMmaOp::kFragmentColumns < Dv)
              e.ifThen(lt(d, e.index(Dv)), storeElement);
          }
        // One lane of one part writes the row's lse.
        if (lse)
          e.ifThen(
              both(e.icmp(arith::CmpIPredicate::eq, quadLane, c0),
                   e.icmp(arith::CmpIPredicate::eq, valuePartOf(thread), c0)),
              [&] { e.store(end.lse, lse, at); });
      });
    }
  });
}

} // namespace

func::FuncOp mlir::attn::buildSimtFlashKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const SimtFlashTiling &flash,
    const GpuTiling &tiling, TypeRange bindingTypes, KeyPart part) {
  return SimtFlashKernel(builder, loc, name, shape, flash, tiling, bindingTypes,
                         part, /*decodeSplit=*/false)
      .build();
}

func::FuncOp mlir::attn::buildSimtFlashDecodeKernel(
    OpBuilder &builder, Location loc, StringRef name,
    const SoftmaxAttentionShape &shape, const SimtFlashTiling &flash,
    const GpuTiling &tiling, TypeRange bindingTypes, KeyPart part,
    bool mergesSplits) {
  return SimtFlashKernel(builder, loc, name, shape, flash, tiling, bindingTypes,
                         part, /*decodeSplit=*/true, mergesSplits)
      .build();
}
