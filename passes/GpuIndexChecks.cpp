//===- GpuIndexChecks.cpp - Index inputs checked by the CUDA kernels ------===//
//
// On the CPU and for host tensors, the runtime checks the values of every
// index input (page tables, offsets, slots, tree parents and paths) against
// its value contract before anything runs. Tensors in device memory cannot
// be read on the host without a synchronisation, so on CUDA each entry with
// index inputs checks them itself: its first dispatches are check kernels,
// one per index input, that record the first element breaking its contract
// in the runtime's record (attn_kernel.index_status), and every other kernel
// of the entry runs its body only while that record is clear. A bad index
// so never reaches a load or a store; the runtime reports the record at the
// next synchronisation.
//
// The checks are the runtime's (runtime/HostProgram.cpp, checkContracts),
// stated per element so that a thread checks one: the two must agree, which
// test/e2e/DeviceIndexChecksTest.cpp checks on every contract. The shapes
// the contracts relate (B + 1 offsets for B sequences) are dims, which the
// runtime checks on the host for every call.
//
//===----------------------------------------------------------------------===//

#include "AttnKernel/AttnKernelOps.h"
#include "passes/Passes.h"
#include "passes/kernels/KernelEmitter.h"
#include "passes/kernels/cuda/SimtKernels.h"
#include "runtime/schemas/attnb_generated.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>

namespace mlir::attn {
#define GEN_PASS_DEF_ATTNGPUINDEXCHECKS
#include "passes/Passes.h.inc"
} // namespace mlir::attn

using namespace mlir;
using namespace mlir::attn;

namespace {

using ::attn::fb::IndexError;

/// The value contract of an entry argument, as EntryLowering records it
/// (attn.contract, attn.contract_input, attn.contract_queries).
struct IndexContract {
  StringRef kind;
  unsigned input;
  std::optional<unsigned> other, queries;

  static std::optional<IndexContract> of(func::FuncOp host, unsigned arg) {
    auto kind = host.getArgAttrOfType<StringAttr>(arg, "attn.contract");
    if (!kind)
      return std::nullopt;
    IndexContract contract{kind.getValue(), arg, std::nullopt, std::nullopt};
    if (auto other =
            host.getArgAttrOfType<IntegerAttr>(arg, "attn.contract_input"))
      contract.other = static_cast<unsigned>(other.getInt());
    if (auto queries =
            host.getArgAttrOfType<IntegerAttr>(arg, "attn.contract_queries"))
      contract.queries = static_cast<unsigned>(queries.getInt());
    return contract;
  }
};

/// Builds a check kernel's body: the element checks of one contract, each
/// recording its error in the record when it fails.
struct CheckEmitter {
  KernelEmitter &e;
  Value record;

  /// Records `error` at element (i, j) of input `input` when `failed`
  /// holds, unless an error was recorded first: field 0 is the flag, set
  /// atomically, and the thread that set it writes the rest.
  void check(Value failed, IndexError error, int64_t input, Value i, Value j,
             Value value, Value limit) {
    e.ifThen(failed, [&] {
      Value wasSet =
          memref::AtomicRMWOp::create(e.b, arith::AtomicRMWKind::maxs, e.i32(1),
                                      record, ValueRange{e.index(0)});
      Value first = e.icmp(arith::CmpIPredicate::eq, wasSet, e.i32(0));
      e.ifThen(first, [&] {
        Value fields[] = {
            e.i32(static_cast<int32_t>(error)), e.i32(input), asI32(i),
            j ? asI32(j) : e.i32(-1),           asI32(value), asI32(limit)};
        for (auto [f, field] : llvm::enumerate(fields))
          memref::StoreOp::create(e.b, field, record,
                                  ValueRange{e.index(f + 1)});
      });
    });
  }

  Value asI32(Value v) { return v.getType().isIndex() ? e.toI32(v) : v; }
  Value lt(Value x, Value y) { return e.icmp(arith::CmpIPredicate::slt, x, y); }
  Value ne(Value x, Value y) { return e.icmp(arith::CmpIPredicate::ne, x, y); }
  Value eq(Value x, Value y) { return e.icmp(arith::CmpIPredicate::eq, x, y); }
  /// Whether the i32 `v` lies outside [0, limit) (an index `limit`).
  Value outside(Value v, Value limit) {
    Value index = e.toIndex(v);
    return e.orI(lt(v, e.i32(0)),
                 e.icmp(arith::CmpIPredicate::sge, index, limit));
  }
  Value not_(Value flag) {
    return arith::XOrIOp::create(
        e.b, flag, arith::ConstantIntOp::create(e.b, e.b.getI1Type(), 1));
  }
  /// The row and column of thread `id` over rows of `columns` threads, at
  /// least one (see perRow).
  std::pair<Value, Value> rowAndColumn(Value id, Value columns) {
    Value width = e.maxS(columns, e.index(1));
    return {e.div(id, width), e.rem(id, width)};
  }
  /// Offsets' rows of sequence `seq`: cu[seq + 1] - cu[seq] (i32).
  Value rowsOf(Value cu, Value seq) {
    return arith::SubIOp::create(e.b, e.loadInt(cu, {e.add(seq, e.index(1))}),
                                 e.loadInt(cu, {seq}));
  }
};

/// One check kernel: its bindings in the host and how many threads run it.
struct CheckPlan {
  SmallVector<Value> bindings;
  Value threads;
  /// Builds the body for thread `id` given the kernel's arguments in the
  /// order of `bindings`.
  std::function<void(CheckEmitter &, ValueRange args, Value id)> body;
};

/// The check of `contract`, or std::nullopt for a contract checked with
/// another (a page table, with its key lengths).
FailureOr<std::optional<CheckPlan>>
planCheck(func::FuncOp host, const IndexContract &c, OpBuilder &hostBuilder) {
  ImplicitLocOpBuilder b(host.getLoc(), hostBuilder);
  auto arg = [&](unsigned index) { return host.getArgument(index); };
  auto dim = [&](Value memref, int64_t d) -> Value {
    return memref::DimOp::create(b, memref, d);
  };
  const int64_t input = c.input;
  // A thread per element of `table`'s rows, at least one per row of
  // `rows` (dim 0 of both).
  auto perRow = [&](Value rows, Value table) -> Value {
    return arith::MulIOp::create(
        b, dim(rows, 0),
        arith::MaxSIOp::create(b, dim(table, 1),
                               arith::ConstantIndexOp::create(b, 1)));
  };
  CheckPlan plan;
  auto needOther = [&]() -> LogicalResult {
    if (c.other)
      return success();
    return host.emitError()
           << "the index contract '" << c.kind << "' of argument #" << c.input
           << " names no input it is checked against";
  };

  if (c.kind == "sequence_offsets") {
    if (failed(needOther()))
      return failure();
    // Thread n checks cu[n]: 0 first, non-decreasing, the tokens last;
    // and against the query offsets, sequence n's keys and query rows.
    plan.bindings = {arg(input), arg(*c.other)};
    if (c.queries)
      plan.bindings.push_back(arg(*c.queries));
    plan.threads = dim(arg(input), 0);
    bool withQueries = c.queries.has_value();
    plan.body = [input, withQueries](CheckEmitter &k, ValueRange args,
                                     Value n) {
      KernelEmitter &e = k.e;
      Value cu = args[0], tokens = e.dim(args[1], 0);
      Value last = e.sub(e.dim(cu, 0), e.index(1));
      Value v = e.loadInt(cu, {n});
      Value zero = e.index(0);
      Value isFirst = e.icmp(arith::CmpIPredicate::eq, n, zero);
      k.check(e.andI(isFirst, k.ne(v, e.i32(0))), IndexError::offsets_not_zero,
              input, n, Value(), v, e.i32(0));
      e.ifThen(e.icmp(arith::CmpIPredicate::ugt, n, zero), [&] {
        Value before = e.loadInt(cu, {e.sub(n, e.index(1))});
        k.check(k.lt(v, before), IndexError::offsets_decrease, input, n,
                Value(), v, before);
      });
      Value isLast = e.icmp(arith::CmpIPredicate::eq, n, last);
      k.check(e.andI(isLast, k.ne(e.toIndex(v), tokens)),
              IndexError::offsets_not_total, input, n, Value(), v, tokens);
      if (!withQueries)
        return;
      // The queries: their offsets, or a draft tree's q [B, H, T, D] or
      // path [B, T], whose T nodes each sequence holds.
      Value queries = args[2];
      const int64_t rank = cast<ShapedType>(queries.getType()).getRank();
      e.ifThen(e.icmp(arith::CmpIPredicate::ult, n, last), [&] {
        Value keys = k.rowsOf(cu, n);
        Value rows = rank == 1 ? k.rowsOf(queries, n)
                               : e.toI32(e.dim(queries, rank == 4 ? 2 : 1));
        k.check(k.lt(keys, rows), IndexError::fewer_keys_than_queries, input, n,
                Value(), keys, rows);
      });
    };
    return std::optional<CheckPlan>(std::move(plan));
  }

  if (c.kind == "pool_slots" || c.kind == "cache_slots") {
    if (failed(needOther()))
      return failure();
    // Thread n checks slots[n]: in range (a cache slot may be -1, a token
    // not written) and not one of slots[0 .. n).
    bool cache = c.kind == "cache_slots";
    plan.bindings = {arg(input), arg(*c.other)};
    plan.threads = dim(arg(input), 0);
    plan.body = [input, cache](CheckEmitter &k, ValueRange args, Value n) {
      KernelEmitter &e = k.e;
      Value slots = args[0];
      Value limit = e.dim(args[1], 0);
      if (cache)
        limit = e.mul(limit, e.dim(args[1], 1));
      Value v = e.loadInt(slots, {n});
      Value skipped = cache ? k.eq(v, e.i32(-1)) : Value();
      Value bad = k.outside(v, limit);
      if (skipped)
        bad = e.andI(bad, k.not_(skipped));
      k.check(bad, IndexError::slot_out_of_range, input, n, Value(), v, limit);
      Value none = e.index(-1);
      Value earlier = e.loop(
          e.index(0), n, e.index(1), {none}, [&](Value m, ValueRange it) {
            Value same =
                e.andI(k.eq(e.loadInt(slots, {m}), v), k.eq(it[0], none));
            return SmallVector<Value>{e.select(same, m, it[0])};
          })[0];
      Value repeated = k.ne(earlier, none);
      if (skipped)
        repeated = e.andI(repeated, k.ne(v, e.i32(-1)));
      k.check(repeated, IndexError::slot_repeated, input, n, earlier, v, v);
    };
    return std::optional<CheckPlan>(std::move(plan));
  }

  if (c.kind == "page_table")
    return std::optional<CheckPlan>();

  if (c.kind == "sequence_lengths") {
    if (failed(needOther()))
      return failure();
    // The page table and, through its contract, the cache's pages.
    std::optional<IndexContract> table = IndexContract::of(host, *c.other);
    if (!table || table->kind != "page_table" || !table->other)
      return host.emitError()
             << "the key lengths of argument #" << c.input
             << " must be checked against a page table with its cache";
    // The queries: a ragged batch's offsets, or q [B, H, Lq, D].
    bool raggedQueries = false;
    if (c.queries) {
      std::optional<IndexContract> queries =
          IndexContract::of(host, *c.queries);
      raggedQueries = queries && queries->kind == "sequence_offsets";
    }
    plan.bindings = {arg(input), arg(*c.other), arg(*table->other)};
    if (c.queries)
      plan.bindings.push_back(arg(*c.queries));
    // A thread per page-table entry (at least one per sequence, so that a
    // table of no pages still has its lengths checked): thread b * MP + p
    // checks page p of sequence b when the sequence uses it, and thread
    // b * MP checks the length.
    plan.threads = perRow(arg(input), arg(*c.other));
    const int64_t tableInput = *c.other;
    const bool withQueries = c.queries.has_value();
    plan.body = [=](CheckEmitter &k, ValueRange args, Value id) {
      KernelEmitter &e = k.e;
      Value lengths = args[0], pages = args[1], cache = args[2];
      Value pageSize = e.dim(cache, 1), numPages = e.dim(cache, 0);
      Value perSequence = e.dim(pages, 1);
      auto [seq, p] = k.rowAndColumn(id, perSequence);
      Value limit = e.mul(perSequence, pageSize);
      Value length = e.loadInt(lengths, {seq});
      Value bad =
          e.orI(k.lt(length, e.i32(0)),
                e.icmp(arith::CmpIPredicate::sgt, e.toIndex(length), limit));
      Value first = e.icmp(arith::CmpIPredicate::eq, p, e.index(0));
      k.check(e.andI(first, bad), IndexError::length_out_of_range, input, seq,
              Value(), length, limit);
      if (withQueries) {
        Value queries =
            raggedQueries ? k.rowsOf(args[3], seq) : e.toI32(e.dim(args[3], 2));
        k.check(e.andI(e.andI(first, k.not_(bad)), k.lt(length, queries)),
                IndexError::length_below_queries, input, seq, Value(), length,
                queries);
      }
      // Page p holds keys [p P, (p + 1) P) of the sequence.
      Value used =
          e.andI(k.not_(bad), e.icmp(arith::CmpIPredicate::ult,
                                     e.mul(p, pageSize), e.toIndex(length)));
      e.ifThen(used, [&] {
        Value page = e.loadInt(pages, {seq, p});
        k.check(k.outside(page, numPages), IndexError::page_out_of_range,
                tableInput, seq, p, page, numPages);
      });
    };
    return std::optional<CheckPlan>(std::move(plan));
  }

  if (c.kind == "tree_parents") {
    // Thread b * T + t checks parents[b][t]: -1 for the root, else an
    // earlier node.
    plan.bindings = {arg(input)};
    Value parents = arg(input);
    plan.threads = arith::MulIOp::create(b, dim(parents, 0), dim(parents, 1));
    plan.body = [input](CheckEmitter &k, ValueRange args, Value id) {
      KernelEmitter &e = k.e;
      Value parents = args[0];
      Value nodes = e.dim(parents, 1);
      Value tree = e.div(id, nodes), t = e.rem(id, nodes);
      Value parent = e.loadInt(parents, {tree, t});
      Value isRoot = e.icmp(arith::CmpIPredicate::eq, t, e.index(0));
      k.check(e.andI(isRoot, k.ne(parent, e.i32(-1))),
              IndexError::parent_not_root, input, tree, t, parent, e.i32(-1));
      Value notRoot = e.icmp(arith::CmpIPredicate::ne, t, e.index(0));
      k.check(e.andI(notRoot, k.outside(parent, t)),
              IndexError::parent_not_earlier, input, tree, t, parent, t);
    };
    return std::optional<CheckPlan>(std::move(plan));
  }

  if (c.kind == "tree_path") {
    if (failed(needOther()))
      return failure();
    // A thread per path node (at least one per path): thread b * T + n
    // checks node n of path b when the path holds it, and thread b * T the
    // length.
    plan.bindings = {arg(input), arg(*c.other)};
    plan.threads = perRow(arg(*c.other), arg(input));
    const int64_t lengthInput = *c.other;
    plan.body = [=](CheckEmitter &k, ValueRange args, Value id) {
      KernelEmitter &e = k.e;
      Value path = args[0], lengths = args[1];
      Value nodes = e.dim(path, 1);
      auto [seq, n] = k.rowAndColumn(id, nodes);
      Value length = e.loadInt(lengths, {seq});
      Value bad =
          e.orI(k.lt(length, e.i32(0)),
                e.icmp(arith::CmpIPredicate::sgt, e.toIndex(length), nodes));
      Value first = e.icmp(arith::CmpIPredicate::eq, n, e.index(0));
      k.check(e.andI(first, bad), IndexError::path_length_out_of_range,
              lengthInput, seq, Value(), length, nodes);
      Value held = e.andI(
          k.not_(bad), e.icmp(arith::CmpIPredicate::ult, n, e.toIndex(length)));
      e.ifThen(held, [&] {
        Value node = e.loadInt(path, {seq, n});
        k.check(k.outside(node, nodes), IndexError::path_node_out_of_range,
                input, seq, n, node, nodes);
      });
    };
    return std::optional<CheckPlan>(std::move(plan));
  }

  return host.emitError() << "argument #" << c.input
                          << " has the unknown index contract '" << c.kind
                          << "'";
}

/// Makes `kernel` take the record as its binding before the workgroup and
/// run its body only while the record is clear. Its allocations stay at
/// the top (launch shapes count shared buffers there).
void guardKernel(func::FuncOp kernel, MLIRContext *context) {
  Type recordType =
      MemRefType::get({IndexStatusOp::kFields}, IntegerType::get(context, 32));
  unsigned position = kernel.getNumArguments() - 1;
  (void)kernel.insertArgument(position, recordType, DictionaryAttr(),
                              kernel.getLoc());
  Value record = kernel.getArgument(position);
  Block &body = kernel.getBody().front();
  SmallVector<Operation *> work;
  for (Operation &op : body.without_terminator())
    if (!isa<memref::AllocaOp>(op))
      work.push_back(&op);
  ImplicitLocOpBuilder b(kernel.getLoc(), body.getTerminator());
  Value c0 = arith::ConstantIndexOp::create(b, 0);
  Value flag;
  if (kernel->hasAttr(kBlockKernelAttr)) {
    // A block's threads must agree, or their barriers would diverge: a
    // check of a concurrent call (on another stream) may set the record
    // while they read it. One thread reads it into shared memory; the
    // thread loop's barrier publishes it to all.
    FailureOr<SimtLaunch> launch = SimtLaunch::get(kernel);
    SimtEmitter e(b, launch->blockThreads);
    Value seen = e.shared({1}, b.getI32Type());
    e.eachThread([&](Value thread) {
      e.ifThen(e.icmp(arith::CmpIPredicate::eq, thread, c0), [&] {
        memref::StoreOp::create(b, memref::LoadOp::create(b, record, c0), seen,
                                c0);
      });
    });
    flag = memref::LoadOp::create(b, seen, c0);
  } else {
    flag = memref::LoadOp::create(b, record, c0);
  }
  Value clear =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, flag,
                            arith::ConstantIntOp::create(b, b.getI32Type(), 0));
  auto guard = scf::IfOp::create(b, clear, /*withElseRegion=*/false);
  for (Operation *op : work)
    op->moveBefore(guard.thenBlock()->getTerminator());
}

struct AttnGpuIndexChecks final
    : mlir::attn::impl::AttnGpuIndexChecksBase<AttnGpuIndexChecks> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    // The entry that dispatches each kernel (null: more than one).
    module.walk([&](DispatchOp dispatch) {
      auto kernel = symbols.lookup<func::FuncOp>(dispatch.getKernel());
      auto host = dispatch->getParentOfType<func::FuncOp>();
      auto [it, inserted] = dispatchers.try_emplace(kernel, host);
      if (!inserted && it->second != host)
        it->second = nullptr;
    });
    for (auto host : llvm::to_vector(module.getOps<func::FuncOp>()))
      if (host->hasAttr("attn.entry") && failed(addChecks(host, symbols)))
        return signalPassFailure();
  }

  llvm::DenseMap<Operation *, Operation *> dispatchers;

  LogicalResult addChecks(func::FuncOp host, SymbolTable &symbols) {
    // A ragged batch's query offsets first, as the runtime checks them:
    // the other checks read them.
    SmallVector<IndexContract> contracts;
    for (unsigned arg = 0; arg < host.getNumArguments(); ++arg)
      if (std::optional<IndexContract> contract = IndexContract::of(host, arg))
        contracts.push_back(*contract);
    std::stable_partition(contracts.begin(), contracts.end(),
                          [](const IndexContract &c) {
                            return c.kind == "sequence_offsets" && !c.queries;
                          });
    if (contracts.empty())
      return success();
    MLIRContext *context = &getContext();
    auto dispatches = llvm::to_vector(host.getOps<DispatchOp>());
    if (dispatches.empty())
      return success();

    // Every kernel of the entry runs only while the record is clear.
    OpBuilder hostBuilder(host.getBody().front().begin()->getBlock(),
                          host.getBody().front().begin());
    Value record =
        IndexStatusOp::create(hostBuilder, host.getLoc(),
                              MemRefType::get({IndexStatusOp::kFields},
                                              IntegerType::get(context, 32)));
    DictionaryAttr tiling;
    llvm::SmallPtrSet<Operation *, 8> guarded;
    for (DispatchOp dispatch : dispatches) {
      auto kernel = symbols.lookup<func::FuncOp>(dispatch.getKernel());
      if (!kernel)
        return dispatch.emitError("dispatches a kernel that is not here");
      if (!tiling)
        tiling = kernel->getAttrOfType<DictionaryAttr>("attn.tiling");
      if (guarded.insert(kernel).second) {
        if (dispatchers.lookup(kernel) != host)
          return dispatch.emitError() << "kernel " << dispatch.getKernelAttr()
                                      << " is dispatched by another entry too";
        guardKernel(kernel, context);
      }
      dispatch.getBindingsMutable().append(record);
    }

    // Then the checks, first, in the order of the inputs.
    OpBuilder kernelBuilder(host);
    for (const IndexContract &contract : contracts) {
      FailureOr<std::optional<CheckPlan>> plan =
          planCheck(host, contract, hostBuilder);
      if (failed(plan))
        return failure();
      if (!*plan)
        continue;
      SmallVector<Value> bindings = (*plan)->bindings;
      bindings.push_back(record);
      // As EntryLowering names kernels: symbols PTX accepts.
      std::string name;
      for (char c : host.getSymName())
        name.push_back(llvm::isAlnum(c) ? c : '_');
      name += "__index_check" + std::to_string(contract.input);
      func::FuncOp kernel =
          createKernel(kernelBuilder, host.getLoc(), name,
                       ValueRange(bindings).getTypes(), tiling, "index_check");
      symbols.insert(kernel);
      {
        ImplicitLocOpBuilder b(host.getLoc(), kernelBuilder);
        KernelEmitter e(b, /*vectorWidth=*/1);
        CheckEmitter checks{e, kernel.getArgument(bindings.size() - 1)};
        (*plan)->body(checks, kernel.getArguments(),
                      kernel.getArguments().back());
        func::ReturnOp::create(b);
      }
      kernelBuilder.setInsertionPoint(host);
      DispatchOp::create(hostBuilder, host.getLoc(),
                         FlatSymbolRefAttr::get(kernel.getSymNameAttr()),
                         (*plan)->threads, bindings);
    }
    return success();
  }
};

} // namespace
