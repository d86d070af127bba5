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

/// The output files of one call, written all or none (SPEC §5: a failed
/// call writes no output file). `create` makes a temporary file beside
/// each destination, `write` fills one, `commit` renames them all into
/// place (in order: a destination given twice gets the last). Until the
/// commit, destinations keep what they held, and the temporaries are
/// removed when the object goes away.
class OutputFiles {
public:
  OutputFiles() = default;
  OutputFiles(const OutputFiles &) = delete;
  OutputFiles &operator=(const OutputFiles &) = delete;
  ~OutputFiles();

  /// Errors name the destination.
  bool create(const std::vector<std::string> &paths, std::string &error);
  bool write(size_t index, const Array &array, std::string &error);
  bool commit(std::string &error);

private:
  std::vector<std::string> paths, temporaries;
};

/// "(2, 3)" / "(5,)" / "()": a shape as NumPy prints it.
std::string formatShape(const std::vector<int64_t> &shape);

} // namespace attn::npy

#endif // ATTN_RUNTIME_NPY_H
