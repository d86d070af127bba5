//===- HostProgram.cpp - Entries and host programs of a binary ------------===//

#include "runtime/HostProgram.h"

#include "runtime/CheckedSize.h"

#include <algorithm>
#include <cstdint>
#include <optional>

namespace attn::host {

namespace {

/// Whether an integer op reads operand registers (a, b; Select also c).
bool readsRegisters(attn::fb::IntOpKind op) {
  using K = attn::fb::IntOpKind;
  return op != K::Constant && op != K::BufferDim && op != K::WorkerCount;
}

thread_local std::string lastError;

} // namespace

attn_status fail(attn_status status, const std::string &message) {
  lastError = message;
  return status;
}

const char *lastErrorMessage() { return lastError.c_str(); }

/// The runtime dtype of a binary's, false for one this runtime does not
/// know.
bool dtypeOf(attn::fb::DType stored, attn_dtype &dtype) {
  switch (stored) {
  case attn::fb::DType::f32:
    dtype = ATTN_F32;
    return true;
  case attn::fb::DType::i32:
    dtype = ATTN_I32;
    return true;
  case attn::fb::DType::f16:
    dtype = ATTN_F16;
    return true;
  case attn::fb::DType::bf16:
    dtype = ATTN_BF16;
    return true;
  default:
    return false;
  }
}

/// Bytes per element of a temporary of dtype `stored`, which may also be
/// one of the dtypes for temporaries only; 0 for one this runtime does not
/// know.
size_t temporaryElementBytes(attn::fb::DType stored) {
  switch (stored) {
  case attn::fb::DType::f64:
    return 8;
  case attn::fb::DType::i8:
    return 1;
  default:
    attn_dtype dtype;
    return dtypeOf(stored, dtype) ? attn_dtype_size(dtype) : 0;
  }
}

std::string formatDims(const std::vector<int64_t> &dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

/// The size of dynamic dim `d` of `sig` when its symbol is `symbolValue`.
int64_t dimSize(const Signature &sig, size_t d, int64_t symbolValue) {
  int64_t divisor = sig.ceilDivs[d];
  if (divisor <= 0)
    return symbolValue;
  int64_t blocks = symbolValue / divisor + (symbolValue % divisor != 0);
  return sig.atMosts[d] >= 0 ? std::min(blocks, sig.atMosts[d]) : blocks;
}

/// "[B=2, 8, Lq, 64]": the signature with the symbols bound so far.
std::string formatSignature(const Signature &sig,
                            const std::map<std::string, int64_t> &bound) {
  std::string text = "[";
  for (size_t i = 0; i < sig.dims.size(); ++i) {
    text += i ? ", " : "";
    if (sig.dims[i] >= 0) {
      text += std::to_string(sig.dims[i]);
      continue;
    }
    text += sig.displaySymbols[i];
    auto it = bound.find(sig.symbols[i]);
    if (it != bound.end())
      text += "=" + std::to_string(dimSize(sig, i, it->second));
  }
  return text + "]";
}

bool wideVectorsAligned(const attn::fb::Model *model) {
  auto aligned = [](const auto *abis) {
    if (!abis)
      return true;
    for (const attn::fb::KernelAbi *abi : *abis)
      if (abi && abi->bindings())
        for (const attn::fb::BindingAbi *binding : *abi->bindings())
          if (binding && binding->dims() &&
              reinterpret_cast<uintptr_t>(binding->dims()->data()) %
                      alignof(int64_t) !=
                  0)
            return false;
    return true;
  };
  return (!model->cpu() || aligned(model->cpu()->kernels())) &&
         (!model->cuda() || aligned(model->cuda()->abis()));
}

/// Reads one of an entry's host programs (`target` names it in errors).
attn_status
readProgram(const Entry &entry,
            const flatbuffers::Vector<attn::fb::Step> *types,
            const flatbuffers::Vector<flatbuffers::Offset<void>> *steps,
            const char *target, Program &program);

attn_status readEntry(const attn::fb::Entry *fbEntry, Entry &entry) {
  auto bad = [&](const std::string &why) {
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: entry '" + entry.name + "': " + why);
  };
  if (!fbEntry->name() || !fbEntry->inputs() || !fbEntry->outputs())
    return fail(ATTN_INVALID_BINARY,
                "corrupt .attnb: an entry lacks its name or signature");
  entry.name = fbEntry->name()->str();
  auto readSignatures = [&](const auto *list, std::vector<Signature> &out) {
    for (const attn::fb::TensorSignature *fbSig : *list) {
      Signature sig;
      if (!fbSig->name() || !fbSig->dims())
        return false;
      sig.name = fbSig->name()->str();
      if (!dtypeOf(fbSig->dtype(), sig.dtype))
        return false;
      for (const attn::fb::Dim *dim : *fbSig->dims()) {
        if (dim->size() >= 0) {
          sig.dims.push_back(dim->size());
          sig.symbols.push_back("");
          sig.displaySymbols.push_back("");
        } else if (dim->symbol() && dim->symbol()->size() > 0) {
          sig.dims.push_back(-1);
          sig.symbols.push_back(dim->symbol()->str());
          sig.displaySymbols.push_back(sig.symbols.back());
        } else {
          return false;
        }
        if (dim->ceil_div() < 0 || (dim->ceil_div() > 0 && dim->size() >= 0) ||
            dim->at_most() < -1 ||
            (dim->at_most() >= 0 && dim->ceil_div() == 0))
          return false;
        sig.ceilDivs.push_back(dim->ceil_div());
        sig.atMosts.push_back(dim->at_most());
        if (dim->ceil_div() > 0)
          sig.displaySymbols.back() = "ceil(" + sig.symbols.back() + "/" +
                                      std::to_string(dim->ceil_div()) + ")";
        if (dim->at_most() >= 0)
          sig.displaySymbols.back() = "min(" + std::to_string(dim->at_most()) +
                                      ", " + sig.displaySymbols.back() + ")";
      }
      switch (fbSig->contract()) {
      case attn::fb::ValueContract::none:
        break;
      case attn::fb::ValueContract::tree_parents:
        sig.contract = ATTN_CONTRACT_TREE_PARENTS;
        break;
      case attn::fb::ValueContract::tree_path:
        sig.contract = ATTN_CONTRACT_TREE_PATH;
        break;
      case attn::fb::ValueContract::sequence_offsets:
        sig.contract = ATTN_CONTRACT_SEQUENCE_OFFSETS;
        break;
      case attn::fb::ValueContract::pool_slots:
        sig.contract = ATTN_CONTRACT_POOL_SLOTS;
        break;
      case attn::fb::ValueContract::page_table:
        sig.contract = ATTN_CONTRACT_PAGE_TABLE;
        break;
      case attn::fb::ValueContract::sequence_lengths:
        sig.contract = ATTN_CONTRACT_SEQUENCE_LENGTHS;
        break;
      case attn::fb::ValueContract::cache_slots:
        sig.contract = ATTN_CONTRACT_CACHE_SLOTS;
        break;
      default:
        return false;
      }
      sig.contractInput = fbSig->contract_input();
      sig.inPlace = fbSig->in_place();
      sig.contractQueries = fbSig->contract_queries();
      out.push_back(std::move(sig));
    }
    return true;
  };
  if (!readSignatures(fbEntry->inputs(), entry.inputs) ||
      !readSignatures(fbEntry->outputs(), entry.outputs))
    return bad("a signature has no name, a bad dtype or a dim that is "
               "neither static nor named");
  // Every symbol must be bound by a plain dynamic dim of an input, so that
  // derived dims (of inputs too) and output dims can be computed.
  auto boundByInputs = [&](const std::string &symbol) {
    for (const Signature &in : entry.inputs)
      for (size_t d = 0; d < in.symbols.size(); ++d)
        if (in.symbols[d] == symbol && in.ceilDivs[d] == 0)
          return true;
    return false;
  };
  for (std::vector<Signature> *list : {&entry.inputs, &entry.outputs})
    for (Signature &sig : *list) {
      for (size_t d = 0; d < sig.symbols.size(); ++d) {
        sig.symbolPtrs.push_back(sig.symbols[d].c_str());
        if (!sig.symbols[d].empty() && !boundByInputs(sig.symbols[d]))
          return bad("'" + sig.name + "' has a dim '" + sig.displaySymbols[d] +
                     "' that no input binds");
      }
      if (sig.inPlace && list != &entry.inputs)
        return bad("output '" + sig.name + "' is marked in place");
      if (sig.contract == ATTN_CONTRACT_NONE)
        continue;
      // A ragged batch's query offsets, which other contracts compare
      // with: an input of the plain offsets contract (checkContracts checks
      // those first).
      auto queryOffsets = [&](int32_t input) {
        if (input < 0 || input >= static_cast<int32_t>(entry.inputs.size()))
          return false;
        const Signature &offsets = entry.inputs[input];
        return offsets.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS &&
               offsets.contractQueries < 0 && offsets.dims.size() == 1;
      };
      // The contract's other input, where it has one, and the ranks both
      // must have.
      const Signature *other =
          sig.contractInput >= 0 &&
                  sig.contractInput < static_cast<int32_t>(entry.inputs.size())
              ? &entry.inputs[sig.contractInput]
              : nullptr;
      bool fits = false;
      switch (sig.contract) {
      case ATTN_CONTRACT_TREE_PARENTS:
        fits = sig.dims.size() == 2;
        break;
      case ATTN_CONTRACT_TREE_PATH:
        fits = sig.dims.size() == 2 && other && other->dims.size() == 1 &&
               other->dtype == ATTN_I32;
        break;
      case ATTN_CONTRACT_SEQUENCE_OFFSETS: {
        // A draft tree's q [B, H, T, D] or path [B, T].
        auto tree = [&](int32_t input) {
          return input >= 0 &&
                 input < static_cast<int32_t>(entry.inputs.size()) &&
                 (entry.inputs[input].dims.size() == 4 ||
                  entry.inputs[input].dims.size() == 2);
        };
        fits = sig.dims.size() == 1 && other && !other->dims.empty() &&
               (sig.contractQueries < 0 || queryOffsets(sig.contractQueries) ||
                tree(sig.contractQueries));
        break;
      }
      case ATTN_CONTRACT_POOL_SLOTS:
        fits = sig.dims.size() == 1 && other && !other->dims.empty();
        break;
      case ATTN_CONTRACT_PAGE_TABLE:
        fits = sig.dims.size() == 2 && other && other->dims.size() == 4;
        break;
      case ATTN_CONTRACT_CACHE_SLOTS:
        fits = sig.dims.size() == 1 && other && other->dims.size() == 4;
        break;
      case ATTN_CONTRACT_SEQUENCE_LENGTHS: {
        bool queries =
            sig.contractQueries < 0 ||
            (sig.contractQueries < static_cast<int32_t>(entry.inputs.size()) &&
             entry.inputs[sig.contractQueries].dims.size() == 4) ||
            queryOffsets(sig.contractQueries);
        fits = sig.dims.size() == 1 && other &&
               other->contract == ATTN_CONTRACT_PAGE_TABLE && queries;
        break;
      }
      default:
        break;
      }
      if (list != &entry.inputs || sig.dtype != ATTN_I32 || !fits)
        return bad("'" + sig.name +
                   "' has a value contract that does not "
                   "fit it");
    }

  if (attn_status status = readProgram(entry, fbEntry->program_type(),
                                       fbEntry->program(), "CPU", entry.cpu))
    return status;
  return readProgram(entry, fbEntry->cuda_program_type(),
                     fbEntry->cuda_program(), "CUDA", entry.cuda);
}

attn_status
readProgram(const Entry &entry,
            const flatbuffers::Vector<attn::fb::Step> *types,
            const flatbuffers::Vector<flatbuffers::Offset<void>> *steps,
            const char *target, Program &program) {
  auto bad = [&](const std::string &why) {
    return fail(ATTN_INVALID_BINARY, "corrupt .attnb: entry '" + entry.name +
                                         "', " + target + " program: " + why);
  };
  if (!types != !steps)
    return bad("program step types and steps differ in count");
  if (!steps)
    return ATTN_OK;
  if (types->size() != steps->size())
    return bad("program step types and steps differ in count");
  int32_t numBuffers =
      static_cast<int32_t>(entry.inputs.size() + entry.outputs.size());
  std::vector<bool> isRegister;
  auto checkRegister = [&](int32_t r) {
    return r >= 0 && r < static_cast<int32_t>(isRegister.size()) &&
           isRegister[r];
  };
  for (uint32_t i = 0; i < steps->size(); ++i) {
    Step step;
    switch (static_cast<attn::fb::Step>(types->Get(i))) {
    case attn::fb::Step::IntOp: {
      const auto *op = static_cast<const attn::fb::IntOp *>(steps->Get(i));
      step.kind = Step::Int;
      step.op = op->kind();
      step.a = op->a();
      step.b = op->b();
      step.c = op->c();
      step.value = op->value();
      using K = attn::fb::IntOpKind;
      if (step.op > K::MAX)
        return bad("unknown integer op at step " + std::to_string(i));
      if (step.op == K::BufferDim) {
        if (step.a < 0 || step.a >= numBuffers + program.numTemps)
          return bad("step " + std::to_string(i) + " reads a dim of buffer " +
                     std::to_string(step.a) + ", which does not exist");
        // Ranks are checked when the program runs.
      } else if (readsRegisters(step.op)) {
        if (!checkRegister(step.a) || !checkRegister(step.b) ||
            (step.op == K::Select && !checkRegister(step.c)))
          return bad("step " + std::to_string(i) +
                     " reads a register no earlier step wrote");
      }
      isRegister.push_back(true);
      break;
    }
    case attn::fb::Step::TempBuffer: {
      const auto *temp =
          static_cast<const attn::fb::TempBuffer *>(steps->Get(i));
      step.kind = Step::Temp;
      if (!temp->dims())
        return bad("a temporary has no dims");
      step.tempDtype = temp->dtype();
      step.elementBytes = temporaryElementBytes(temp->dtype());
      if (!step.elementBytes)
        return bad("a temporary has an unknown dtype");
      step.indexStatus = temp->index_status();
      if (step.indexStatus &&
          (temp->dtype() != attn::fb::DType::i32 || temp->dims()->size() != 1))
        return bad("the record of index errors is not an i32 [8]");
      program.checksIndices |= step.indexStatus;
      for (int32_t r : *temp->dims()) {
        if (!checkRegister(r))
          return bad("a temporary's size reads a register no earlier step "
                     "wrote");
        step.dims.push_back(r);
      }
      ++program.numTemps;
      isRegister.push_back(false);
      break;
    }
    case attn::fb::Step::Dispatch: {
      const auto *dispatch =
          static_cast<const attn::fb::Dispatch *>(steps->Get(i));
      step.kind = Step::Dispatch;
      if (!dispatch->kernel() || !dispatch->bindings())
        return bad("a dispatch has no kernel or bindings");
      step.kernelName = dispatch->kernel()->str();
      step.workgroups = dispatch->workgroups();
      if (!checkRegister(step.workgroups))
        return bad("dispatch of " + step.kernelName +
                   " reads its workgroup count from a register no earlier "
                   "step wrote");
      for (int32_t binding : *dispatch->bindings()) {
        if (binding < 0 || binding >= numBuffers + program.numTemps)
          return bad("dispatch of " + step.kernelName + " binds buffer " +
                     std::to_string(binding) + ", which does not exist");
        step.bindings.push_back(binding);
      }
      isRegister.push_back(false);
      break;
    }
    case attn::fb::Step::Assert: {
      const auto *check = static_cast<const attn::fb::Assert *>(steps->Get(i));
      step.kind = Step::Assert;
      step.a = check->condition();
      if (!checkRegister(step.a) || !check->message())
        return bad("an assertion reads a register no earlier step wrote or "
                   "has no message");
      step.message = check->message()->str();
      isRegister.push_back(false);
      break;
    }
    default:
      return bad("unknown program step at " + std::to_string(i));
    }
    program.steps.push_back(std::move(step));
  }
  return ATTN_OK;
}

/// The binary's dtype of a signature's.
attn::fb::DType storedDtype(attn_dtype dtype) {
  switch (dtype) {
  case ATTN_I32:
    return attn::fb::DType::i32;
  case ATTN_F16:
    return attn::fb::DType::f16;
  case ATTN_BF16:
    return attn::fb::DType::bf16;
  case ATTN_F32:
    break;
  }
  return attn::fb::DType::f32;
}

attn_status readKernelAbis(
    const flatbuffers::Vector<flatbuffers::Offset<attn::fb::KernelAbi>> *list,
    const char *target, std::map<std::string, KernelAbi> &abis) {
  auto bad = [&](const std::string &why) {
    return fail(ATTN_INVALID_BINARY, std::string("corrupt .attnb: the ") +
                                         target + " code's kernel ABI " + why);
  };
  if (!list)
    return bad("records are missing");
  for (const attn::fb::KernelAbi *record : *list) {
    if (!record->name() || !record->bindings())
      return bad("record has no name or bindings");
    KernelAbi abi;
    abi.name = record->name()->str();
    for (const attn::fb::BindingAbi *binding : *record->bindings()) {
      if (!temporaryElementBytes(binding->dtype()) || !binding->dims())
        return bad("of '" + abi.name +
                   "' has a binding of unknown dtype or "
                   "without dims");
      std::vector<int64_t> dims(binding->dims()->begin(),
                                binding->dims()->end());
      for (int64_t size : dims)
        if (size < -1)
          return bad("of '" + abi.name + "' has a negative dim");
      abi.dtypes.push_back(binding->dtype());
      abi.dims.push_back(std::move(dims));
    }
    std::string name = abi.name;
    if (!abis.emplace(name, std::move(abi)).second)
      return bad("names '" + name + "' twice");
  }
  return ATTN_OK;
}

attn_status checkBindings(Entry &entry, Program &program,
                          const std::map<std::string, KernelAbi> &abis,
                          const char *target) {
  // The dtype and dims of every buffer a program can bind: the
  // signatures, then the temporaries in order.
  std::vector<attn::fb::DType> dtypes;
  std::vector<std::vector<int64_t>> dims;
  for (const std::vector<Signature> *list : {&entry.inputs, &entry.outputs})
    for (const Signature &sig : *list) {
      dtypes.push_back(storedDtype(sig.dtype));
      dims.push_back(sig.dims);
    }
  for (const Step &step : program.steps)
    if (step.kind == Step::Temp) {
      dtypes.push_back(step.tempDtype);
      dims.push_back(std::vector<int64_t>(step.dims.size(), -1));
    }
  for (Step &step : program.steps) {
    if (step.kind != Step::Dispatch)
      continue;
    auto bad = [&](const std::string &why) {
      return fail(ATTN_INVALID_BINARY, "corrupt .attnb: entry '" + entry.name +
                                           "', " + target +
                                           " program: the dispatch of '" +
                                           step.kernelName + "' " + why);
    };
    auto it = abis.find(step.kernelName);
    if (it == abis.end())
      return bad("names a kernel without an ABI record");
    const KernelAbi &abi = it->second;
    if (step.bindings.size() != abi.dtypes.size())
      return bad("binds " + std::to_string(step.bindings.size()) +
                 " buffers; the kernel takes " +
                 std::to_string(abi.dtypes.size()));
    for (size_t i = 0; i < step.bindings.size(); ++i) {
      int32_t buffer = step.bindings[i];
      const std::vector<int64_t> &expected = abi.dims[i];
      if (dtypes[buffer] != abi.dtypes[i] ||
          dims[buffer].size() != expected.size())
        return bad("binds buffer " + std::to_string(buffer) + " as binding #" +
                   std::to_string(i) +
                   " with another dtype or rank than the kernel's");
      for (size_t d = 0; d < expected.size(); ++d)
        if (expected[d] >= 0 && dims[buffer][d] >= 0 &&
            dims[buffer][d] != expected[d])
          return bad(
              "binds buffer " + std::to_string(buffer) + " as binding #" +
              std::to_string(i) + ", whose dim " + std::to_string(d) + " is " +
              std::to_string(dims[buffer][d]) +
              "; the kernel was compiled for " + std::to_string(expected[d]));
    }
    step.abi = &abi;
  }
  return ATTN_OK;
}

attn_status checkTensor(const Entry &entry, const char *role, size_t index,
                        const Signature &sig, const attn_tensor &tensor,
                        std::map<std::string, int64_t> &bound, bool derived) {
  std::string what = std::string(role) + " '" + sig.name + "' (#" +
                     std::to_string(index) + ") of entry '" + entry.name + "'";
  if (tensor.dtype != sig.dtype)
    return fail(ATTN_SIGNATURE_MISMATCH,
                what + ": expected dtype " + attn_dtype_name(sig.dtype) +
                    ", got " + attn_dtype_name(tensor.dtype));
  if (tensor.rank > 0 && !tensor.shape)
    return fail(ATTN_INVALID_ARGUMENT, what + ": shape is null (rank " +
                                           std::to_string(tensor.rank) + ")");
  // A rank far from any attn tensor's is reported without reading the
  // shape: its dims would lie past what the caller holds.
  constexpr int32_t kMostRankShown = 8;
  if (tensor.rank < 0 || tensor.rank > kMostRankShown)
    return fail(ATTN_SIGNATURE_MISMATCH,
                what + ": expected shape " + formatSignature(sig, bound) +
                    ", got a tensor of rank " + std::to_string(tensor.rank));
  std::vector<int64_t> actual(tensor.shape, tensor.shape + tensor.rank);
  auto mismatch = [&](const std::string &why) {
    return fail(ATTN_SIGNATURE_MISMATCH,
                what + ": expected shape " + formatSignature(sig, bound) +
                    ", got " + formatDims(actual) + " (" + why + ")");
  };
  if (actual.size() != sig.dims.size())
    return mismatch("rank " + std::to_string(actual.size()) + ", expected " +
                    std::to_string(sig.dims.size()));
  for (size_t d = 0; d < sig.dims.size(); ++d) {
    if (actual[d] < 0)
      return mismatch("dim " + std::to_string(d) + " is negative");
    if (sig.dims[d] >= 0) {
      if (actual[d] != sig.dims[d])
        return mismatch("dim " + std::to_string(d) + " must be " +
                        std::to_string(sig.dims[d]));
      continue;
    }
    if (sig.ceilDivs[d] > 0) {
      if (!derived)
        continue;
      int64_t expected = dimSize(sig, d, bound.at(sig.symbols[d]));
      if (actual[d] != expected)
        return mismatch("dim " + std::to_string(d) + " must be " +
                        sig.displaySymbols[d] + " = " +
                        std::to_string(expected));
      continue;
    }
    auto [it, inserted] = bound.emplace(sig.symbols[d], actual[d]);
    if (!inserted && it->second != actual[d])
      return mismatch("dim " + std::to_string(d) + " is " + sig.symbols[d] +
                      ", which an earlier argument set to " +
                      std::to_string(it->second));
  }
  std::optional<int64_t> bytes = attn::checkedTensorBytes(
      actual, static_cast<int64_t>(attn_dtype_size(tensor.dtype)));
  if (!bytes)
    return mismatch("its size in bytes does not fit in 64 bits");
  if (!tensor.data && *bytes != 0)
    return fail(ATTN_INVALID_ARGUMENT, what + ": data is null");
  return ATTN_OK;
}

attn_status bindInputs(const Entry &entry, const attn_tensor *inputs,
                       int32_t numInputs,
                       std::map<std::string, int64_t> &bound) {
  if (numInputs > 0 && !inputs)
    return fail(ATTN_INVALID_ARGUMENT,
                "entry '" + entry.name + "': inputs is null");
  if (numInputs != static_cast<int32_t>(entry.inputs.size())) {
    std::string names;
    for (size_t i = 0; i < entry.inputs.size(); ++i)
      names += (i ? ", " : "") + entry.inputs[i].name;
    return fail(ATTN_SIGNATURE_MISMATCH,
                "entry '" + entry.name + "' takes " +
                    std::to_string(entry.inputs.size()) + " inputs (" + names +
                    "), got " + std::to_string(numInputs));
  }
  for (bool derived : {false, true})
    for (int32_t i = 0; i < numInputs; ++i)
      if (attn_status status = checkTensor(entry, "input", i, entry.inputs[i],
                                           inputs[i], bound, derived))
        return status;
  return ATTN_OK;
}

/// Checks the contract of a rank-1 index input against dim 0 of its
/// other input: the offsets of a ragged batch or the slots of a state pool.
/// The query rows of sequence `b` by the (checked) offsets in input
/// `offsets`.
static int64_t rowsOf(const attn_tensor *inputs, int32_t offsets, int64_t b) {
  const auto *cu = static_cast<const int32_t *>(inputs[offsets].data);
  return static_cast<int64_t>(cu[b + 1]) - cu[b];
}

/// Whether the query offsets in input `offsets` number `batch` + 1, or
/// the error that names both inputs.
static attn_status checkBatchOfOffsets(const Entry &entry,
                                       const attn_tensor *inputs,
                                       int32_t offsets, size_t i,
                                       int64_t batch) {
  if (inputs[offsets].shape[0] == batch + 1)
    return ATTN_OK;
  const Signature &sig = entry.inputs[i];
  return fail(ATTN_SIGNATURE_MISMATCH,
              "input '" + entry.inputs[offsets].name + "' (#" +
                  std::to_string(offsets) + ") of entry '" + entry.name +
                  "' must hold B + 1 = " + std::to_string(batch + 1) +
                  " offsets for the B sequences of '" + sig.name + "' (#" +
                  std::to_string(i) + "), got " +
                  std::to_string(inputs[offsets].shape[0]));
}

/// Whether key offsets' `contract_queries` input is a draft tree's q [B, H,
/// T, D] or path [B, T] rather than the queries' offsets.
static bool treeQueries(const Entry &entry, const Signature &sig) {
  return entry.inputs[sig.contractQueries].contract !=
         ATTN_CONTRACT_SEQUENCE_OFFSETS;
}

/// A draft tree's T nodes: dim 2 of q [B, H, T, D], dim 1 of path [B, T].
static int64_t treeNodesOf(const attn_tensor &tree) {
  return tree.rank == 4 ? tree.shape[2] : tree.shape[1];
}

/// What is wrong with sequence `b` of key offsets `sig` that holds `keys`
/// keys for its `rows` query rows or tree nodes: the host's checks and the
/// device's record say it alike.
static std::string fewerKeysThanQueries(const Entry &entry,
                                        const Signature &sig, int64_t b,
                                        int64_t keys, int64_t rows) {
  const std::string &queries = entry.inputs[sig.contractQueries].name;
  return "sequence " + std::to_string(b) + " has " + std::to_string(keys) +
         " keys but " + std::to_string(rows) +
         (treeQueries(entry, sig)
              ? " tree nodes in '" + queries +
                    "' (each sequence's last T keys are its tree's)"
              : " query rows in '" + queries +
                    "' (a causal or chunked mask places query i at Lk - Lq "
                    "+ i, so it needs Lq <= Lk)");
}

/// Checks a ragged batch's (checked) key offsets in input `i` against their
/// queries: under a causal mask the query offsets (as many sequences, and
/// each with at least as many keys as query rows); for a draft tree over
/// packed keys each sequence holds at least the tree's T nodes, its last T
/// keys.
static attn_status checkKeyOffsets(const Entry &entry,
                                   const attn_tensor *inputs, size_t i) {
  const Signature &sig = entry.inputs[i];
  const int64_t batch = inputs[i].shape[0] - 1;
  const bool tree = treeQueries(entry, sig);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t keys = rowsOf(inputs, static_cast<int32_t>(i), b);
    const int64_t rows = tree ? treeNodesOf(inputs[sig.contractQueries])
                              : rowsOf(inputs, sig.contractQueries, b);
    if (keys < rows)
      return fail(ATTN_SIGNATURE_MISMATCH,
                  "input '" + sig.name + "' (#" + std::to_string(i) +
                      ") of entry '" + entry.name +
                      "': " + fewerKeysThanQueries(entry, sig, b, keys, rows));
  }
  return ATTN_OK;
}

static attn_status checkIndexList(const Entry &entry, const attn_tensor *inputs,
                                  size_t i) {
  const Signature &sig = entry.inputs[i];
  const Signature &other = entry.inputs[sig.contractInput];
  const auto *values = static_cast<const int32_t *>(inputs[i].data);
  const int64_t count = inputs[i].shape[0];
  const int64_t limit = inputs[sig.contractInput].shape[0];
  auto bad = [&](int64_t n, const std::string &why) {
    return fail(ATTN_SIGNATURE_MISMATCH,
                "input '" + sig.name + "' (#" + std::to_string(i) +
                    ") of entry '" + entry.name + "': " + sig.name + "[" +
                    std::to_string(n) + "] = " + std::to_string(values[n]) +
                    " " + why);
  };
  if (sig.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS) {
    if (values[0] != 0)
      return bad(0, "must be 0");
    for (int64_t n = 1; n < count; ++n)
      if (values[n] < values[n - 1])
        return bad(n, "must be at least " + sig.name + "[" +
                          std::to_string(n - 1) +
                          "] = " + std::to_string(values[n - 1]));
    if (values[count - 1] != limit)
      return bad(count - 1, "must be " + std::to_string(limit) +
                                ", the tokens of '" + other.name + "'");
    if (sig.contractQueries >= 0)
      return checkKeyOffsets(entry, inputs, i);
    return ATTN_OK;
  }
  // Pool or cache slots: in range and distinct (two writers of one slot
  // would race); a cache slot may be -1, a token not written.
  const bool cache = sig.contract == ATTN_CONTRACT_CACHE_SLOTS;
  const int64_t slotsOf =
      cache ? limit * inputs[sig.contractInput].shape[1] : limit;
  // (slot, index) sorted by slot: a repeated slot sits next to its first
  // use. Sorting the T entries costs less than a table of every slot.
  std::vector<std::pair<int32_t, int64_t>> used;
  for (int64_t n = 0; n < count; ++n) {
    int32_t slot = values[n];
    if (cache && slot == -1)
      continue;
    if (slot < 0 || slot >= slotsOf)
      return bad(n, "must be " + std::string(cache ? "-1 or " : "") +
                        "a slot of '" + other.name + "' in [0, " +
                        std::to_string(slotsOf) + ")");
    used.push_back({slot, n});
  }
  std::sort(used.begin(), used.end());
  for (size_t u = 1; u < used.size(); ++u)
    if (used[u].first == used[u - 1].first)
      return bad(used[u].second,
                 "is also " + sig.name + "[" +
                     std::to_string(used[u - 1].second) + "]: " +
                     (cache ? "each token needs its own slot"
                            : "each sequence needs its own slot"));
  return ATTN_OK;
}

/// Checks the key lengths of a paged cache (input `i`) and the pages of its
/// page table they use.
static attn_status checkKeyLengths(const Entry &entry,
                                   const attn_tensor *inputs, size_t i) {
  const Signature &sig = entry.inputs[i];
  const int32_t tableInput = sig.contractInput;
  const Signature &tableSig = entry.inputs[tableInput];
  const attn_tensor &table = inputs[tableInput];
  const attn_tensor &cache = inputs[tableSig.contractInput];
  const auto *lengths = static_cast<const int32_t *>(inputs[i].data);
  const auto *pages = static_cast<const int32_t *>(table.data);
  const int64_t batch = inputs[i].shape[0], perRow = table.shape[1];
  const int64_t numPages = cache.shape[0], pageSize = cache.shape[1];
  // The queries: q [B, H, Lq, D], or a ragged batch's offsets.
  const bool raggedQueries =
      sig.contractQueries >= 0 && entry.inputs[sig.contractQueries].contract ==
                                      ATTN_CONTRACT_SEQUENCE_OFFSETS;
  auto queriesOf = [&](int64_t b) -> int64_t {
    if (sig.contractQueries < 0)
      return 0;
    return raggedQueries ? rowsOf(inputs, sig.contractQueries, b)
                         : inputs[sig.contractQueries].shape[2];
  };
  auto where = [&](const Signature &s, int32_t index) {
    return "input '" + s.name + "' (#" + std::to_string(index) +
           ") of entry '" + entry.name + "': ";
  };
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = lengths[b];
    std::string value =
        sig.name + "[" + std::to_string(b) + "] = " + std::to_string(length);
    if (length < 0 || length > perRow * pageSize)
      return fail(ATTN_SIGNATURE_MISMATCH,
                  where(sig, static_cast<int32_t>(i)) + value +
                      " must be in [0, " + std::to_string(perRow * pageSize) +
                      "] (the " + std::to_string(perRow) + " pages of " +
                      std::to_string(pageSize) + " keys of '" + tableSig.name +
                      "')");
    const int64_t queries = queriesOf(b);
    if (length < queries)
      return fail(ATTN_SIGNATURE_MISMATCH,
                  where(sig, static_cast<int32_t>(i)) + value +
                      " must be at least the " + std::to_string(queries) +
                      " queries (a causal or chunked mask places query i at " +
                      sig.name + "[b] - Lq + i)");
    for (int64_t p = 0; p * pageSize < length; ++p) {
      int32_t page = pages[b * perRow + p];
      if (page < 0 || page >= numPages)
        return fail(ATTN_SIGNATURE_MISMATCH,
                    where(tableSig, tableInput) + tableSig.name + "[" +
                        std::to_string(b) + "][" + std::to_string(p) +
                        "] = " + std::to_string(page) +
                        " must be a page in [0, " + std::to_string(numPages) +
                        ") (it holds keys of " + value + ")");
    }
  }
  return ATTN_OK;
}

/// Checks the value contracts of the inputs (tree parents, accepted
/// paths, ragged offsets, pool slots), naming the first offending element.
attn_status checkContractShapes(const Entry &entry, const attn_tensor *inputs) {
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const Signature &sig = entry.inputs[i];
    const int64_t count = inputs[i].shape[0];
    if (sig.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS && count < 1)
      return fail(ATTN_SIGNATURE_MISMATCH,
                  "input '" + sig.name + "' (#" + std::to_string(i) +
                      ") of entry '" + entry.name +
                      "' must hold B + 1 >= 1 offsets, got none");
    // The query offsets that key offsets or key lengths are checked with
    // are one per sequence of theirs.
    const bool withQueryOffsets =
        sig.contractQueries >= 0 &&
        (sig.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS ||
         sig.contract == ATTN_CONTRACT_SEQUENCE_LENGTHS) &&
        entry.inputs[sig.contractQueries].contract ==
            ATTN_CONTRACT_SEQUENCE_OFFSETS;
    if (!withQueryOffsets)
      continue;
    const int64_t batch =
        sig.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS ? count - 1 : count;
    if (attn_status status =
            checkBatchOfOffsets(entry, inputs, sig.contractQueries, i, batch))
      return status;
  }
  // Key offsets of draft trees: one per tree, and one more.
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const Signature &sig = entry.inputs[i];
    if (sig.contract != ATTN_CONTRACT_SEQUENCE_OFFSETS ||
        sig.contractQueries < 0 || !treeQueries(entry, sig))
      continue;
    const int64_t trees = inputs[sig.contractQueries].shape[0];
    if (inputs[i].shape[0] != trees + 1)
      return fail(ATTN_SIGNATURE_MISMATCH,
                  "input '" + sig.name + "' (#" + std::to_string(i) +
                      ") of entry '" + entry.name + "' must hold B + 1 = " +
                      std::to_string(trees + 1) + " offsets for the B trees " +
                      "of '" + entry.inputs[sig.contractQueries].name + "' (#" +
                      std::to_string(sig.contractQueries) + "), got " +
                      std::to_string(inputs[i].shape[0]));
  }
  return ATTN_OK;
}

attn_status checkContracts(const Entry &entry, const attn_tensor *inputs) {
  if (attn_status status = checkContractShapes(entry, inputs))
    return status;
  // A ragged batch's query offsets first: the other contracts read them.
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const Signature &sig = entry.inputs[i];
    if (sig.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS &&
        sig.contractQueries < 0)
      if (attn_status status = checkIndexList(entry, inputs, i))
        return status;
  }
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const Signature &sig = entry.inputs[i];
    if (sig.contract == ATTN_CONTRACT_NONE ||
        (sig.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS &&
         sig.contractQueries < 0))
      continue;
    const auto *values = static_cast<const int32_t *>(inputs[i].data);
    // A page table is checked with its key lengths.
    if (sig.contract == ATTN_CONTRACT_PAGE_TABLE)
      continue;
    if (sig.contract == ATTN_CONTRACT_SEQUENCE_LENGTHS) {
      if (attn_status status = checkKeyLengths(entry, inputs, i))
        return status;
      continue;
    }
    if (sig.contract == ATTN_CONTRACT_SEQUENCE_OFFSETS ||
        sig.contract == ATTN_CONTRACT_POOL_SLOTS ||
        sig.contract == ATTN_CONTRACT_CACHE_SLOTS) {
      if (attn_status status = checkIndexList(entry, inputs, i))
        return status;
      continue;
    }
    const int64_t rows = inputs[i].shape[0], cols = inputs[i].shape[1];
    auto bad = [&](int64_t b, int64_t t, const std::string &why) {
      return fail(ATTN_SIGNATURE_MISMATCH,
                  "input '" + sig.name + "' (#" + std::to_string(i) +
                      ") of entry '" + entry.name + "': " + sig.name + "[" +
                      std::to_string(b) + "][" + std::to_string(t) + "] = " +
                      std::to_string(values[b * cols + t]) + " " + why);
    };
    for (int64_t b = 0; b < rows; ++b) {
      if (sig.contract == ATTN_CONTRACT_TREE_PARENTS) {
        for (int64_t t = 0; t < cols; ++t) {
          int32_t parent = values[b * cols + t];
          if (t == 0 && parent != -1)
            return bad(b, t, "must be -1 (the root)");
          if (t > 0 && (parent < 0 || parent >= t))
            return bad(b, t, "must be in [0, " + std::to_string(t) + ")");
        }
        continue;
      }
      const Signature &lengthSig = entry.inputs[sig.contractInput];
      int32_t length =
          static_cast<const int32_t *>(inputs[sig.contractInput].data)[b];
      if (length < 0 || length > cols)
        return fail(ATTN_SIGNATURE_MISMATCH,
                    "input '" + lengthSig.name + "' (#" +
                        std::to_string(sig.contractInput) + ") of entry '" +
                        entry.name + "': " + lengthSig.name + "[" +
                        std::to_string(b) + "] = " + std::to_string(length) +
                        " must be in [0, " + std::to_string(cols) +
                        "] (the nodes of '" + sig.name + "')");
      for (int64_t n = 0; n < length; ++n)
        if (values[b * cols + n] < 0 || values[b * cols + n] >= cols)
          return bad(b, n,
                     "must be a tree node in [0, " + std::to_string(cols) +
                         ") (it is within " + lengthSig.name + "[" +
                         std::to_string(b) + "] = " + std::to_string(length) +
                         ")");
    }
  }
  return ATTN_OK;
}

attn_status indexRecordError(const Entry &entry, const int32_t *record) {
  if (record[0] == 0)
    return ATTN_OK;
  using attn::fb::IndexError;
  const auto error = static_cast<IndexError>(record[1]);
  const int32_t input = record[2];
  const int32_t i = record[3], j = record[4], value = record[5],
                limit = record[6];
  if (input < 0 || input >= static_cast<int32_t>(entry.inputs.size()))
    return fail(ATTN_RUN_ERROR, "entry '" + entry.name +
                                    "': its index checks left a record "
                                    "naming no input (#" +
                                    std::to_string(input) + ")");
  const Signature &sig = entry.inputs[input];
  const std::string &name = sig.name;
  auto n = [](int32_t x) { return std::to_string(x); };
  // The input the contract names (a slot's pool or cache).
  auto other = [&]() -> std::string {
    if (sig.contractInput < 0 ||
        sig.contractInput >= static_cast<int32_t>(entry.inputs.size()))
      return "its other input";
    return "'" + entry.inputs[sig.contractInput].name + "'";
  };
  const bool cache = sig.contract == ATTN_CONTRACT_CACHE_SLOTS;
  std::string element = name + "[" + n(i) + "]";
  if (error == IndexError::page_out_of_range ||
      error == IndexError::parent_not_root ||
      error == IndexError::parent_not_earlier ||
      error == IndexError::path_node_out_of_range)
    element += "[" + n(j) + "]";
  std::string why;
  switch (error) {
  case IndexError::offsets_not_zero:
    why = "must be 0";
    break;
  case IndexError::offsets_decrease:
    why = "must be at least " + name + "[" + n(i - 1) + "] = " + n(limit);
    break;
  case IndexError::offsets_not_total:
    why = "must be " + n(limit) + ", the tokens of its rows";
    break;
  case IndexError::fewer_keys_than_queries:
    // value: the keys of sequence i, limit: its query rows or tree nodes.
    if (sig.contractQueries < 0 ||
        sig.contractQueries >= static_cast<int32_t>(entry.inputs.size()))
      return fail(ATTN_RUN_ERROR, "entry '" + entry.name +
                                      "': its index checks left a record "
                                      "of keys with no queries");
    element = fewerKeysThanQueries(entry, sig, i, value, limit);
    break;
  case IndexError::slot_out_of_range:
    why = "must be " + std::string(cache ? "-1 or " : "") + "a slot of " +
          other() + " in [0, " + n(limit) + ")";
    break;
  case IndexError::slot_repeated:
    why = "is also " + name + "[" + n(j) + "]: " +
          (cache ? "each token needs its own slot"
                 : "each sequence needs its own slot");
    break;
  case IndexError::length_out_of_range:
    why = "must be in [0, " + n(limit) + "] (the keys its pages hold)";
    break;
  case IndexError::length_below_queries:
    why = "must be at least the " + n(limit) +
          " queries (a causal or chunked mask places query i at " + name +
          "[b] - Lq + i)";
    break;
  case IndexError::page_out_of_range:
    why = "must be a page in [0, " + n(limit) + ")";
    break;
  case IndexError::parent_not_root:
    why = "must be -1 (the root)";
    break;
  case IndexError::parent_not_earlier:
    why = "must be in [0, " + n(j) + ")";
    break;
  case IndexError::path_length_out_of_range: {
    // The path whose lengths these are.
    std::string path = "the path";
    for (const Signature &s : entry.inputs)
      if (s.contract == ATTN_CONTRACT_TREE_PATH && s.contractInput == input)
        path = "'" + s.name + "'";
    why = "must be in [0, " + n(limit) + "] (the nodes of " + path + ")";
    break;
  }
  case IndexError::path_node_out_of_range:
    why = "must be a tree node in [0, " + n(limit) + ")";
    break;
  default:
    return fail(ATTN_RUN_ERROR, "entry '" + entry.name +
                                    "': its index checks left a record of "
                                    "unknown error " +
                                    n(record[1]));
  }
  if (error != IndexError::fewer_keys_than_queries)
    element += " = " + n(value);
  return fail(ATTN_SIGNATURE_MISMATCH,
              "input '" + name + "' (#" + n(input) + ") of entry '" +
                  entry.name + "': " + element +
                  (why.empty() ? "" : " " + why) +
                  " (found on the device by the entry's index checks; its "
                  "kernels wrote nothing)");
}

std::vector<int64_t> outputShape(const Signature &sig,
                                 const std::map<std::string, int64_t> &bound) {
  std::vector<int64_t> shape;
  for (size_t d = 0; d < sig.dims.size(); ++d)
    shape.push_back(sig.dims[d] >= 0
                        ? sig.dims[d]
                        : dimSize(sig, d, bound.at(sig.symbols[d])));
  return shape;
}

attn_status evalInt(const Entry &entry, size_t index, const Step &step,
                    const std::vector<int64_t> &regs,
                    const std::vector<Buffer> &buffers, int64_t workers,
                    int64_t &result) {
  using K = attn::fb::IntOpKind;
  int64_t a = readsRegisters(step.op) ? regs[step.a] : 0;
  int64_t b = readsRegisters(step.op) ? regs[step.b] : 0;
  auto bad = [&](const std::string &why) {
    return fail(ATTN_RUN_ERROR, "entry '" + entry.name + "', step " +
                                    std::to_string(index) + ": " + why);
  };
  bool divides = step.op == K::DivU || step.op == K::CeilDivU ||
                 step.op == K::RemU || step.op == K::DivS ||
                 step.op == K::CeilDivS || step.op == K::FloorDivS ||
                 step.op == K::RemS;
  if (divides && b == 0)
    return bad("division by zero");
  // The one signed quotient that does not fit in 64 bits.
  bool signedDivides = step.op == K::DivS || step.op == K::CeilDivS ||
                       step.op == K::FloorDivS || step.op == K::RemS;
  if (signedDivides && a == INT64_MIN && b == -1)
    return bad("integer overflow: " + std::to_string(a) + " / -1");
  auto overflow = [&](const char *op) {
    return bad("integer overflow: " + std::to_string(a) + " " + op + " " +
               std::to_string(b));
  };
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (step.op) {
  case K::Constant:
    result = step.value;
    break;
  case K::WorkerCount:
    result = workers;
    break;
  case K::BufferDim: {
    const Buffer &buffer = buffers[step.a];
    if (step.b < 0 || step.b >= static_cast<int32_t>(buffer.shape.size()))
      return bad("reads dim " + std::to_string(step.b) + " of a rank-" +
                 std::to_string(buffer.shape.size()) + " buffer");
    result = buffer.shape[step.b];
    break;
  }
  case K::Add:
    if (__builtin_add_overflow(a, b, &result))
      return overflow("+");
    break;
  case K::Sub:
    if (__builtin_sub_overflow(a, b, &result))
      return overflow("-");
    break;
  case K::Mul:
    if (__builtin_mul_overflow(a, b, &result))
      return overflow("*");
    break;
  case K::DivU:
    result = static_cast<int64_t>(ua / ub);
    break;
  case K::CeilDivU:
    result = static_cast<int64_t>(ua / ub + (ua % ub != 0));
    break;
  case K::RemU:
    result = static_cast<int64_t>(ua % ub);
    break;
  case K::DivS:
    result = a / b;
    break;
  case K::CeilDivS:
    result = a / b + ((a % b != 0) && ((a < 0) == (b < 0)));
    break;
  case K::FloorDivS:
    result = a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
    break;
  case K::RemS:
    result = a % b;
    break;
  case K::MinU:
    result = ua < ub ? a : b;
    break;
  case K::MaxU:
    result = ua > ub ? a : b;
    break;
  case K::MinS:
    result = a < b ? a : b;
    break;
  case K::MaxS:
    result = a > b ? a : b;
    break;
  case K::Select:
    result = a ? b : regs[step.c];
    break;
  case K::CmpEq:
    result = a == b;
    break;
  case K::CmpNe:
    result = a != b;
    break;
  case K::CmpSlt:
    result = a < b;
    break;
  case K::CmpSle:
    result = a <= b;
    break;
  case K::CmpSgt:
    result = a > b;
    break;
  case K::CmpSge:
    result = a >= b;
    break;
  case K::CmpUlt:
    result = ua < ub;
    break;
  case K::CmpUle:
    result = ua <= ub;
    break;
  case K::CmpUgt:
    result = ua > ub;
    break;
  case K::CmpUge:
    result = ua >= ub;
    break;
  }
  return ATTN_OK;
}

/// Evaluates `program` over `buffers` (the entry's inputs and outputs, on
/// the device that runs it), appending its temporaries, which `allocate`
/// provides, and handing each dispatch with a positive count to
/// `dispatch`.
attn_status runProgram(
    const Entry &e, const Program &program, std::vector<Buffer> &buffers,
    int64_t workers, int32_t *indexRecord,
    const std::function<attn_status(size_t bytes, void *&data)> &allocate,
    const std::function<attn_status(const Step &step, int64_t count,
                                    const std::vector<const Buffer *> &)>
        &dispatch) {
  std::vector<int64_t> regs(program.steps.size(), 0);
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const Step &step = program.steps[i];
    switch (step.kind) {
    case Step::Int:
      if (attn_status status =
              evalInt(e, i, step, regs, buffers, workers, regs[i]))
        return status;
      break;
    case Step::Temp: {
      Buffer buffer;
      buffer.elementBytes = step.elementBytes;
      for (int32_t r : step.dims)
        buffer.shape.push_back(regs[r]);
      if (step.indexStatus) {
        if (buffer.shape[0] != kIndexRecordFields)
          return fail(ATTN_INVALID_BINARY,
                      "corrupt .attnb: entry '" + e.name +
                          "' binds a record of index errors of " +
                          std::to_string(buffer.shape[0]) + " fields, not " +
                          std::to_string(kIndexRecordFields));
        buffer.data = indexRecord;
        buffers.push_back(std::move(buffer));
        break;
      }
      std::optional<int64_t> bytes = attn::checkedTensorBytes(
          buffer.shape, static_cast<int64_t>(step.elementBytes));
      if (!bytes)
        return fail(ATTN_RUN_ERROR, "entry '" + e.name + "', step " +
                                        std::to_string(i) + ": a temporary " +
                                        formatDims(buffer.shape) +
                                        " has a negative or too large size");
      if (attn_status status =
              allocate(static_cast<size_t>(*bytes), buffer.data))
        return status;
      buffers.push_back(std::move(buffer));
      break;
    }
    case Step::Assert:
      if (!regs[step.a])
        return fail(ATTN_SIGNATURE_MISMATCH,
                    "entry '" + e.name + "': " + step.message);
      break;
    case Step::Dispatch: {
      int64_t count = regs[step.workgroups];
      if (count < 0)
        return fail(ATTN_RUN_ERROR, "entry '" + e.name + "': dispatch of " +
                                        step.kernelName +
                                        " has a negative workgroup count");
      if (count == 0)
        break;
      std::vector<const Buffer *> bindings;
      for (size_t b = 0; b < step.bindings.size(); ++b) {
        int32_t binding = step.bindings[b];
        if (binding >= static_cast<int32_t>(buffers.size()))
          return fail(ATTN_RUN_ERROR, "entry '" + e.name +
                                          "': a dispatch binds a temporary "
                                          "before it is allocated");
        // The static dims the kernel was compiled for (ranks were checked
        // at load time).
        if (!step.abi)
          return fail(ATTN_INVALID_BINARY,
                      "corrupt .attnb: entry '" + e.name + "' dispatches '" +
                          step.kernelName + "', which has no ABI record");
        const Buffer &buffer = buffers[binding];
        const std::vector<int64_t> &expected = step.abi->dims[b];
        for (size_t d = 0; d < expected.size(); ++d)
          if (expected[d] >= 0 && buffer.shape[d] != expected[d])
            return fail(ATTN_INVALID_BINARY,
                        "corrupt .attnb: entry '" + e.name + "' binds " +
                            formatDims(buffer.shape) + " as binding #" +
                            std::to_string(b) + " of '" + step.kernelName +
                            "', which was compiled for dim " +
                            std::to_string(d) + " = " +
                            std::to_string(expected[d]));
        bindings.push_back(&buffer);
      }
      if (attn_status status = dispatch(step, count, bindings))
        return status;
      break;
    }
    }
  }
  return ATTN_OK;
}

} // namespace attn::host
