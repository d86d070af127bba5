/*===- attn_runtime.h - The attn runtime C API -----------------*- C -*-===*\
|*                                                                          *|
|* Loads a compiled model (.attnb, SPEC §6) and runs its entries (SPEC §4). *|
|* Every call that can fail returns an attn_status; the message of the last *|
|* failure on the calling thread is attn_last_error(). The runtime links    *|
|* neither LLVM nor MLIR, and no C++ exception leaves it.                   *|
|*                                                                          *|
|* Threads: a loaded model may be used from any number of threads at once.  *|
|* attn_run calls on one model run concurrently on the CPU (they share the  *|
|* model's thread pool; each call's workgroups are a job of their own), and *|
|* take turns on CUDA. attn_model_free must not race with other calls on    *|
|* the same model.                                                          *|
|*                                                                          *|
|* Trust: an .attnb holds native code; load only binaries you trust, as     *|
|* with a shared library. Its checksum catches corruption, not tampering.   *|
|* Within that, every signature, host program, temporary and binding is     *|
|* checked against the kernels' ABI records before anything runs.          *|
|*                                                                          *|
\*===----------------------------------------------------------------------===*/

#ifndef ATTN_RUNTIME_H
#define ATTN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_status {
  ATTN_OK = 0,
  /** A bad argument to the API itself (null pointer, bad index). */
  ATTN_INVALID_ARGUMENT = 1,
  /** The file or buffer is not a valid .attnb (truncated, corrupt, wrong
      format version). */
  ATTN_INVALID_BINARY = 2,
  /** The binary needs something this host or runtime lacks (CPU features,
      a device). */
  ATTN_UNSUPPORTED = 3,
  /** No entry of that name. */
  ATTN_NOT_FOUND = 4,
  /** Inputs or outputs do not match the entry's signature. */
  ATTN_SIGNATURE_MISMATCH = 5,
  /** Reading a file or loading the code failed. */
  ATTN_IO_ERROR = 6,
  /** The run itself failed (e.g. out of memory). */
  ATTN_RUN_ERROR = 7,
} attn_status;

/** Element types. f16 is IEEE binary16, bf16 the upper half of an f32;
    both are storage dtypes: the kernels compute in f32. */
typedef enum attn_dtype {
  ATTN_F32 = 0,
  ATTN_I32 = 1,
  ATTN_F16 = 2,
  ATTN_BF16 = 3,
} attn_dtype;

/** Bytes per element of `dtype` (0 for an unknown dtype). */
size_t attn_dtype_size(attn_dtype dtype);
/** The dtype's name ("f32", "i32", "f16", "bf16"; "?" if unknown). */
const char *attn_dtype_name(attn_dtype dtype);

/** Where attn_run executes an entry. */
typedef enum attn_device {
  /** The model's thread pool runs the CPU code (the default). */
  ATTN_DEVICE_CPU = 0,
  /** The first CUDA device runs the CUDA code; attn_run copies the inputs
      to it and the outputs back, attn_run_device takes tensors already in
      its memory. */
  ATTN_DEVICE_CUDA = 1,
} attn_device;

/** A dense row-major tensor the caller owns. */
typedef struct attn_tensor {
  attn_dtype dtype;
  int32_t rank;
  const int64_t *shape;
  void *data;
} attn_tensor;

/** The bytes a dense tensor of `dtype` and `shape` holds, into `*bytes`.
    Fails with ATTN_INVALID_ARGUMENT when the dtype is unknown, a dim is
    negative or the size does not fit in 63 bits, so callers never compute
    a size that wraps. attn_run refuses such tensors the same way. */
attn_status attn_tensor_bytes(attn_dtype dtype, int32_t rank,
                              const int64_t *shape, size_t *bytes);

/** The most threads a model's pool may have. */
#define ATTN_MAX_THREADS 1024

/** What the values of an i32 input must satisfy; attn_run checks them
    before anything runs and names the first offending element. */
typedef enum attn_value_contract {
  ATTN_CONTRACT_NONE = 0,
  /** [B, T] draft-tree parents: parents[b][0] = -1 and
      0 <= parents[b][t] < t. */
  ATTN_CONTRACT_TREE_PARENTS = 1,
  /** [B, T] accepted path whose lengths are input `contract_input`:
      0 <= length[b] <= T and 0 <= path[b][n] < T for n < length[b]. */
  ATTN_CONTRACT_TREE_PATH = 2,
  /** [B+1] offsets of a ragged batch: cu[0] = 0, non-decreasing, and
      cu[B] = dim 0 (T) of input `contract_input`; when `contract_queries`
      >= 0 (a ragged softmax batch's key offsets under a causal mask),
      each sequence has at least as many keys as the queries' offsets in
      that input give it rows, and as many offsets. */
  ATTN_CONTRACT_SEQUENCE_OFFSETS = 3,
  /** [B] slots of a state pool: distinct and in [0, N), N being dim 0 of
      input `contract_input` (the pool). */
  ATTN_CONTRACT_POOL_SLOTS = 4,
  /** [B, MP] page table of a paged KV cache, the cache [NP, P, ...] being
      input `contract_input`; checked with the key lengths. */
  ATTN_CONTRACT_PAGE_TABLE = 5,
  /** [B] key lengths of a paged cache whose page table is input
      `contract_input`: 0 <= len[b] <= MP * P, the first ceil(len[b] / P)
      entries of page_table[b] in [0, NP), and len[b] >= Lq (dim 2 of input
      `contract_queries`, or the rows its offsets give sequence b in a
      ragged batch) when that is >= 0 (a causal mask). */
  ATTN_CONTRACT_SEQUENCE_LENGTHS = 6,
  /** [T] flat slots (page * P + offset) of the paged cache in input
      `contract_input`: -1 (the token is skipped) or in [0, NP * P), the
      others distinct. */
  ATTN_CONTRACT_CACHE_SLOTS = 7,
} attn_value_contract;

/** One argument or result of an entry. `dims[i]` is the static size or -1,
    with `symbols[i]` naming a dynamic size (dims with one symbol agree).
    When `ceil_divs[i]` > 0 the size is derived: ceil(symbols[i] /
    ceil_divs[i]) (Quest's block count ceil(Lk / block_size)), capped at
    `at_mosts[i]` when that is >= 0 (a top-k selection's min(top_k,
    ceil(Lk / block_size)) slots). */
typedef struct attn_argument_info {
  const char *name;
  attn_dtype dtype;
  int32_t rank;
  const int64_t *dims;
  const char *const *symbols;
  const int64_t *ceil_divs;
  const int64_t *at_mosts;
  attn_value_contract contract;
  /** The input the contract refers to (the path lengths, the packed
      tensor, the pool); else -1. */
  int32_t contract_input;
  /** 1 for an input attn_run updates in place (a state pool, a KV cache):
      the caller's buffer is written, and it is no output. */
  int32_t in_place;
  /** Under a causal mask, the queries' input (q [B, H, Lq, D], or a
      ragged batch's query offsets) of ATTN_CONTRACT_SEQUENCE_LENGTHS and
      of a ragged batch's key offsets (ATTN_CONTRACT_SEQUENCE_OFFSETS);
      else -1. */
  int32_t contract_queries;
} attn_argument_info;

typedef struct attn_model attn_model;

/** The message of the last failing call on this thread ("" if none). */
const char *attn_last_error(void);

/** Loads a model from a file / from memory (the bytes are copied). The
    buffer is verified and the host checked for the CPU features the code
    needs before anything runs. `num_threads` <= 0 means every core; more
    than ATTN_MAX_THREADS is ATTN_INVALID_ARGUMENT. */
attn_status attn_model_load_file(const char *path, int32_t num_threads,
                                 attn_model **model);
attn_status attn_model_load_memory(const void *data, size_t size,
                                   int32_t num_threads, attn_model **model);
void attn_model_free(attn_model *model);

/** Chooses where attn_run executes. Choosing ATTN_DEVICE_CUDA opens the
    CUDA driver (dlopen of libcuda.so.1; the runtime itself never links
    CUDA) and loads the binary's cubin on the first GPU, JIT-compiling its
    PTX when the GPU is of another SM. Fails with ATTN_UNSUPPORTED and a
    message naming what is missing: CUDA code in the binary, the driver, a
    GPU. */
attn_status attn_model_set_device(attn_model *model, attn_device device);
attn_device attn_model_device(const attn_model *model);

/** The time the last successful attn_run of this model on the calling
    thread spent running the entry's host program and kernels, in
    milliseconds: on CUDA the device time between
    events recorded around the launches (the copies of inputs and outputs
    excluded), on the CPU the wall time of the host program (its
    dispatches on the thread pool). For benchmarks; fails before any run. */
attn_status attn_model_last_kernel_ms(const attn_model *model,
                                      double *milliseconds);

/** Name of the model and the threads its pool uses. */
const char *attn_model_name(const attn_model *model);
int32_t attn_model_num_threads(const attn_model *model);

int32_t attn_model_num_entries(const attn_model *model);
const char *attn_entry_name(const attn_model *model, int32_t entry);
attn_status attn_model_find_entry(const attn_model *model, const char *name,
                                  int32_t *entry);
int32_t attn_entry_num_inputs(const attn_model *model, int32_t entry);
int32_t attn_entry_num_outputs(const attn_model *model, int32_t entry);
/** Argument `index` of an entry: inputs first, then outputs. */
attn_status attn_entry_argument(const attn_model *model, int32_t entry,
                                int32_t index, attn_argument_info *info);

/** Checks the dtypes and shapes of `inputs` against the entry's signature
    (their data pointers are not read) and writes each output's shape:
    output `i` has rank `attn_entry_argument(num_inputs + i).rank` and its
    dims go to `output_shapes[i]` (arrays the caller provides). */
attn_status attn_entry_output_shapes(const attn_model *model, int32_t entry,
                                     const attn_tensor *inputs,
                                     int32_t num_inputs,
                                     int64_t *const *output_shapes);

/** Runs an entry: checks every input's and output's dtype and shape against
    the signature (dynamic dims bound consistently), then executes it on the
    model's thread pool. Outputs are buffers the caller allocated with the
    shapes of attn_entry_output_shapes. */
attn_status attn_run(attn_model *model, int32_t entry,
                     const attn_tensor *inputs, int32_t num_inputs,
                     const attn_tensor *outputs, int32_t num_outputs);

/** Device memory (SPEC §8). Runs an entry on the model's GPU (after
    attn_model_set_device(model, ATTN_DEVICE_CUDA)) with every input and
    output in that GPU's memory: each `data` is a CUDA device pointer (a
    CUdeviceptr, e.g. from cuMemAlloc, or a PyTorch CUDA tensor's
    data_ptr()). The work is enqueued on `stream` (a CUstream; NULL is the
    legacy default stream) and the call returns without waiting: no copy,
    no synchronisation. Temporaries come from the model's workspace
    (attn_model_set_workspace) when one is set, so the call allocates
    nothing and can be captured in a CUDA graph; otherwise they are
    allocated and freed on the stream (cuMemAllocAsync, cuMemFreeAsync).
    Dtypes and shapes are checked as attn_run checks them, before anything
    is enqueued; an error of the kernels themselves surfaces at the
    caller's next synchronisation, as CUDA errors do. Calls on one model
    enqueue one at a time; calls that share its workspace must be ordered
    on the device (one stream, or events between streams).

    Index inputs (ATTN_CONTRACT_* other than NONE: tree parents and paths,
    offsets, page tables, key lengths, slots) cannot be read on the host
    without a synchronisation, so their values are checked on the device:
    the entry's first kernels check every element against its contract, as
    attn_run does on the host, and when one fails they record it and no
    kernel of the call (or of a later device call of that entry, until the
    record is read) reads or writes anything through an index. What the
    dims state (B + 1 offsets for B sequences) is checked here, before
    anything is enqueued. attn_model_device_status reports the record. */
attn_status attn_run_device(attn_model *model, int32_t entry,
                            const attn_tensor *inputs, int32_t num_inputs,
                            const attn_tensor *outputs, int32_t num_outputs,
                            void *stream);

/** An index error that the model's attn_run_device calls found on the
    device: ATTN_SIGNATURE_MISMATCH with a message naming the entry, the
    input, the element and its value, as attn_run's host checks name them;
    ATTN_OK when there was none. Each entry keeps the first its calls found
    until this function reports it, which clears it; with errors in several
    entries, a call reports the first entry's, the next call the next's.
    Call it once the streams of those calls are synchronised (it reads the
    records with a synchronous copy). While an entry's error is recorded,
    its device calls enqueue kernels that skip their work, so outputs and
    in-place inputs keep their contents. */
attn_status attn_model_device_status(attn_model *model);

/** The bytes of temporaries a call of `entry` with inputs of these dtypes
    and shapes needs on the model's device (the data pointers are not
    read). A workspace of the most any of a caller's calls needs serves
    them all. */
attn_status attn_entry_workspace_bytes(const attn_model *model, int32_t entry,
                                       const attn_tensor *inputs,
                                       int32_t num_inputs, size_t *bytes);

/** Gives the model's attn_run_device calls `bytes` of the GPU's memory at
    `device_pointer` for their temporaries (NULL and 0 take it back: calls
    then allocate on their stream). The caller keeps it alive while calls
    that use it may run. A call that needs more fails before enqueuing
    anything, naming both sizes. The model must be on the GPU. */
attn_status attn_model_set_workspace(attn_model *model, void *device_pointer,
                                     size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_RUNTIME_H */
