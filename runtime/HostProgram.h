//===- HostProgram.h - Entries and host programs of a binary ----*- C++ -*-===//
//
// What the runtime reads of a binary's entries (signatures, host dispatch
// programs, kernel ABI records) and checks before anything runs, the checks
// that bind a call's tensors to a signature, and the interpreter of host
// programs. Kept apart from the loader (Runtime.cpp) so that the .attnb
// fuzzer reads and runs programs through exactly this code, with no kernels
// behind the dispatches.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_HOSTPROGRAM_H
#define ATTN_RUNTIME_HOSTPROGRAM_H

#include "runtime/attn_runtime.h"
#include "runtime/schemas/attnb_generated.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace attn::host {

/// The i32 fields of the record of index errors (attn::fb::IndexError).
constexpr int64_t kIndexRecordFields = 8;

/// The workers a host program's WorkerCount gives per multiprocessor of a
/// GPU: how many blocks the CUDA runtime counts on keeping busy at once
/// there (decode splits its keys until it has that many; the compiler's
/// host programs divide by it to count multiprocessors).
constexpr int64_t kCudaWorkersPerMultiprocessor = 4;

/// Records `message` as the calling thread's last error (attn_last_error)
/// and returns `status`.
attn_status fail(attn_status status, const std::string &message);
/// The calling thread's last error message.
const char *lastErrorMessage();

using KernelFn = void (*)(void *const *buffers, const int64_t *dims,
                          int64_t workgroup);

struct Signature {
  std::string name;
  attn_dtype dtype;
  std::vector<int64_t> dims;        // -1 for dynamic
  std::vector<std::string> symbols; // "" for static
  /// > 0: the dim is ceil(symbol / ceilDiv), not a symbol of its own,
  /// capped at atMosts[d] when that is >= 0.
  std::vector<int64_t> ceilDivs, atMosts;
  /// What users see of each dim: the symbol, or "ceil(Lk/16)".
  std::vector<std::string> displaySymbols;
  std::vector<const char *> symbolPtrs;
  attn_value_contract contract = ATTN_CONTRACT_NONE;
  int32_t contractInput = -1;
  /// An input the entry writes (a state pool, a KV cache).
  bool inPlace = false;
  int32_t contractQueries = -1;
};

struct Step {
  enum Kind { Int, Temp, Dispatch, Assert } kind;
  // Int
  attn::fb::IntOpKind op;
  int32_t a = 0, b = 0, c = 0;
  int64_t value = 0;
  // Temp
  attn::fb::DType tempDtype = attn::fb::DType::f32;
  size_t elementBytes = 0;
  std::vector<int32_t> dims;
  /// Not allocated: the runtime's record of index errors (i32 [8]).
  bool indexStatus = false;
  // Dispatch
  KernelFn kernel = nullptr;
  std::string kernelName;
  int32_t workgroups = 0;
  std::vector<int32_t> bindings;
  /// What the kernel was compiled to bind (set when the binary is loaded).
  const struct KernelAbi *abi = nullptr;
  // Assert: fails with `message` unless register `a` is non-zero.
  std::string message;
};

/// What a kernel binds: per binding the dtype and dims (-1: dynamic).
struct KernelAbi {
  std::string name;
  std::vector<attn::fb::DType> dtypes;
  std::vector<std::vector<int64_t>> dims;
};

/// A host program: its steps and how many temporaries it allocates.
struct Program {
  std::vector<Step> steps;
  int32_t numTemps = 0;
  /// Whether its kernels check the index inputs (it binds the record of
  /// index errors).
  bool checksIndices = false;
};

struct Entry {
  std::string name;
  std::vector<Signature> inputs, outputs;
  Program cpu, cuda;

  /// Whether a call writes its buffer `buffer` (inputs, then outputs): an
  /// output, or an input updated in place.
  bool writes(size_t buffer) const {
    return buffer >= inputs.size() || inputs[buffer].inPlace;
  }
};

/// A buffer of the running program: data and shape.
struct Buffer {
  void *data = nullptr;
  std::vector<int64_t> shape;
  size_t elementBytes = 4;

  size_t bytes() const {
    size_t elements = 1;
    for (int64_t size : shape)
      elements *= static_cast<size_t>(size);
    return elements * elementBytes;
  }
};

/// The runtime dtype of a binary's; false for one this runtime does not
/// know.
bool dtypeOf(attn::fb::DType stored, attn_dtype &dtype);
/// Bytes per element of a temporary's dtype; 0 for one this runtime does
/// not know.
size_t temporaryElementBytes(attn::fb::DType stored);
/// "[2, 3]".
std::string formatDims(const std::vector<int64_t> &dims);

/// Whether every vector of 8-byte elements in `model` (the kernel ABI
/// records' dims) is 8-byte aligned. Flatbuffers 2.0's verifier checks a
/// vector's 4-byte length only, and reading a misaligned int64 is undefined
/// behaviour: a binary that fails this is corrupt.
bool wideVectorsAligned(const attn::fb::Model *model);

/// Reads an entry's signatures and both host programs, checking that every
/// program reads only registers and buffers that exist.
attn_status readEntry(const attn::fb::Entry *fbEntry, Entry &entry);
/// Reads a code's kernel ABI records (`target` names the code in errors).
attn_status readKernelAbis(
    const flatbuffers::Vector<flatbuffers::Offset<attn::fb::KernelAbi>> *list,
    const char *target, std::map<std::string, KernelAbi> &abis);
/// Checks that every dispatch of `program` binds buffers of the dtypes and
/// ranks (and the static dims the signatures fix) its kernel was compiled
/// for, and points each dispatch at its kernel's record.
attn_status checkBindings(Entry &entry, Program &program,
                          const std::map<std::string, KernelAbi> &abis,
                          const char *target);

/// Checks `inputs` against the entry's signature, binding its symbols.
attn_status bindInputs(const Entry &entry, const attn_tensor *inputs,
                       int32_t numInputs,
                       std::map<std::string, int64_t> &bound);
/// Checks one tensor against its signature, binding dynamic dims; derived
/// dims only with `derived` (once every input has bound its symbols).
attn_status checkTensor(const Entry &entry, const char *role, size_t index,
                        const Signature &sig, const attn_tensor &tensor,
                        std::map<std::string, int64_t> &bound,
                        bool derived = true);
/// Checks the value contracts of the inputs (tree parents, accepted
/// paths, offsets, slots, page tables), naming the first offending element.
/// Checks checkContractShapes first.
attn_status checkContracts(const Entry &entry, const attn_tensor *inputs);
/// The part of the value contracts that the dims state (B + 1 offsets for
/// B sequences, at least one offset), which calls whose index values are
/// checked on the device check on the host; the data is not read.
attn_status checkContractShapes(const Entry &entry, const attn_tensor *inputs);
/// The error an index check of `entry`'s CUDA kernels recorded in `record`
/// (i32 [8], attn::fb::IndexError's layout), naming the input and the
/// element; ATTN_OK for a clear record.
attn_status indexRecordError(const Entry &entry, const int32_t *record);
/// The shape of an argument once its symbols are bound.
std::vector<int64_t> outputShape(const Signature &sig,
                                 const std::map<std::string, int64_t> &bound);

/// Evaluates `program` over `buffers` (the entry's inputs and outputs, on
/// the device that runs it), appending its temporaries, which `allocate`
/// provides, and handing each dispatch with a positive count to
/// `dispatch` after checking its bindings' static dims against the
/// kernel's ABI record. Integer arithmetic is checked: an overflow, a
/// division by zero or a temporary whose size does not fit is an error.
/// `indexRecord` is the record of index errors bound where the program
/// asks for it (TempBuffer.index_status; null in a dry run).
attn_status runProgram(
    const Entry &e, const Program &program, std::vector<Buffer> &buffers,
    int64_t workers, int32_t *indexRecord,
    const std::function<attn_status(size_t bytes, void *&data)> &allocate,
    const std::function<attn_status(const Step &step, int64_t count,
                                    const std::vector<const Buffer *> &)>
        &dispatch);

} // namespace attn::host

#endif // ATTN_RUNTIME_HOSTPROGRAM_H
