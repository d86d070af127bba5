//===- Checksum.h - The checksum of the code in an .attnb -------*- C++ -*-===//
//
// FNV-1a (64 bit) of the nested model buffer of an .attnb: the Flatbuffers
// verifier checks the structure of a buffer, this catches a corrupted
// value (a size, a constant of a host program, a byte of code) before
// anything is loaded. Shared by the writer (compiler) and the loader
// (runtime).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_CHECKSUM_H
#define ATTN_RUNTIME_CHECKSUM_H

#include <cstddef>
#include <cstdint>

namespace attn {

inline uint64_t fnv1a64(const uint8_t *data, size_t size) {
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

} // namespace attn

#endif // ATTN_RUNTIME_CHECKSUM_H
