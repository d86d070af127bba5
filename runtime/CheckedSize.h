//===- CheckedSize.h - Tensor sizes that cannot wrap ------------*- C++ -*-===//
//
// Every size the runtime, attn-run and the .npy reader compute from a
// shape someone gave them goes through here, so none wraps 64 bits.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_CHECKEDSIZE_H
#define ATTN_RUNTIME_CHECKEDSIZE_H

#include <cstdint>
#include <optional>
#include <vector>

namespace attn {

/// The bytes of a dense tensor of `shape` with `elementBytes` per element,
/// or nothing when a dim is negative or the size does not fit in a signed
/// 64-bit offset (what kernels index with). A zero dim makes any shape
/// empty.
inline std::optional<int64_t>
checkedTensorBytes(const std::vector<int64_t> &shape, int64_t elementBytes) {
  for (int64_t size : shape) {
    if (size < 0)
      return std::nullopt;
    if (size == 0)
      return 0;
  }
  int64_t bytes = elementBytes;
  for (int64_t size : shape)
    if (__builtin_mul_overflow(bytes, size, &bytes))
      return std::nullopt;
  return bytes;
}

} // namespace attn

#endif // ATTN_RUNTIME_CHECKEDSIZE_H
