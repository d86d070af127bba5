//===- GuardedMemory.h - Buffers that end at a guard page ------*- C++ -*-===//
//
// ATTN_GUARD=1 in the environment: each CPU call runs on copies of its
// tensors, and on temporaries, in mappings of their own that end where an
// inaccessible page begins (another precedes each), the inputs it only reads
// mapped read-only. A kernel that reads or writes past the end of a buffer,
// or writes into an input, then faults at that access instead of touching a
// neighbour's bytes, which neither the tests' results nor AddressSanitizer
// (it does not instrument generated code) would show. Tensors end exactly at
// the guard, so they start at any element's alignment, as a user's slice
// may, and so do temporaries, at their own size (not rounded to a cache line
// as otherwise). For tests (test/lit.cfg.py sets it): it costs a mapping and
// a copy per tensor.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_GUARDEDMEMORY_H
#define ATTN_RUNTIME_GUARDEDMEMORY_H

#include "runtime/HostProgram.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace attn::host {

/// Whether ATTN_GUARD is set (and not "0"); read once.
bool guardEachCall();
/// ATTN_GUARD=start: each buffer starts right after the inaccessible page
/// before it instead of ending at the one after it, so that a read before
/// its first element faults (one element before it, where the default
/// catches one past its end).
bool guardAtStart();

/// `bytes` of memory that end where an inaccessible page begins, with
/// another inaccessible page before their first page; or, `atStart`, that
/// start right after that page.
class GuardedBlock {
public:
  /// Null when the mapping fails or `bytes` is 0.
  static std::unique_ptr<GuardedBlock> map(size_t bytes,
                                           bool atStart = guardAtStart());
  /// Later writes fault.
  bool makeReadOnly();
  ~GuardedBlock();
  GuardedBlock(const GuardedBlock &) = delete;
  GuardedBlock &operator=(const GuardedBlock &) = delete;

  uint8_t *data = nullptr;

private:
  GuardedBlock() = default;
  uint8_t *base = nullptr, *pages = nullptr;
  size_t mapped = 0, inside = 0;
};

/// A call's tensors moved into guarded blocks for its run: `guard` points
/// `buffers` at copies, the inputs the entry does not update read-only;
/// `restore` copies the outputs and the inputs updated in place back
/// (after a run that succeeded: a failed call writes nothing) and points
/// `buffers` at the caller's memory again.
class GuardedTensors {
public:
  attn_status guard(const Entry &e, std::vector<Buffer> &buffers);
  void restore(const Entry &e, std::vector<Buffer> &buffers, bool succeeded);

private:
  std::vector<void *> callerData;
  std::vector<std::unique_ptr<GuardedBlock>> blocks;
};

} // namespace attn::host

#endif // ATTN_RUNTIME_GUARDEDMEMORY_H
