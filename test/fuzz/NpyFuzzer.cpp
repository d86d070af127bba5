//===- NpyFuzzer.cpp - libFuzzer target: the .npy reader ------------------===//
//
// Any bytes: the reader either refuses them with a message or returns an
// array whose shape and dtype account for exactly its data, and writing
// that array back reads as the same array.
//
//===----------------------------------------------------------------------===//

#include "runtime/CheckedSize.h"
#include "runtime/Npy.h"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace attn::npy;
  Array array;
  std::string error;
  if (!parse(data, size, array, error)) {
    if (error.empty())
      std::abort(); // refused without saying why
    return 0;
  }
  std::optional<int64_t> bytes = attn::checkedTensorBytes(
      array.shape, static_cast<int64_t>(elementSize(array.dtype)));
  if (!bytes || static_cast<size_t>(*bytes) != array.data.size())
    std::abort(); // the shape does not describe the data
  std::vector<uint8_t> written = serialize(array);
  Array again;
  if (!parse(written.data(), written.size(), again, error) ||
      again.dtype != array.dtype || again.shape != array.shape ||
      again.data != array.data)
    std::abort(); // what was read does not write back
  return 0;
}
