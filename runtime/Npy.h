//===- Npy.h - NumPy .npy files for attn-run and tests ----------*- C++ -*-===//
//
// Reads and writes the .npy files of SPEC §5: little-endian f32 ('<f4') or
// i32 ('<i4') arrays in C order, format versions 1.0-3.0, and f16 ('<f2')
// for f16 arguments. Anything else is an error that says what was found and
// what is accepted. Part of the runtime:
// plain C++, no LLVM, no exceptions.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_NPY_H
#define ATTN_RUNTIME_NPY_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attn::npy {

enum class DType { F32, I32, F16 };

/// The .npy descriptor of a dtype: "<f4", "<i4" or "<f2".
const char *descriptor(DType dtype);
/// Bytes per element.
size_t elementSize(DType dtype);

struct Array {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// The elements in C order, little-endian.
  std::vector<uint8_t> data;

  int64_t numElements() const;
};

/// Parses a whole .npy file held in memory. On failure returns false and
/// sets `error` (without the file name).
bool parse(const uint8_t *bytes, size_t size, Array &out, std::string &error);

/// The bytes of a version 1.0 .npy file holding `array`.
std::vector<uint8_t> serialize(const Array &array);

/// Reads `path`; errors name the file.
bool readFile(const std::string &path, Array &out, std::string &error);

/// Writes `path`; errors name the file.
bool writeFile(const std::string &path, const Array &array, std::string &error);

/// "(2, 3)" / "(5,)" / "()": a shape as NumPy prints it.
std::string formatShape(const std::vector<int64_t> &shape);

} // namespace attn::npy

#endif // ATTN_RUNTIME_NPY_H
