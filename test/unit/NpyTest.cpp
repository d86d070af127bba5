//===- NpyTest.cpp - .npy reading and writing -----------------------------===//

#include "runtime/Npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

using namespace attn::npy;

namespace {

Array floats(std::vector<int64_t> shape) {
  Array array;
  array.dtype = DType::F32;
  array.shape = std::move(shape);
  for (int64_t i = 0; i < array.numElements(); ++i) {
    float x = 0.5f * static_cast<float>(i) - 3.0f;
    const uint8_t *p = reinterpret_cast<const uint8_t *>(&x);
    array.data.insert(array.data.end(), p, p + 4);
  }
  return array;
}

/// A .npy file as NumPy 1.x/2.x writes it: header padded to 64 bytes.
std::vector<uint8_t> numpyFile(const std::string &dict,
                               const std::vector<uint8_t> &data,
                               uint8_t major = 1) {
  std::string header = dict;
  size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
  bytes.push_back(uint8_t(header.size()));
  bytes.push_back(uint8_t(header.size() >> 8));
  if (major != 1) {
    bytes.push_back(0);
    bytes.push_back(0);
  }
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::string parseError(const std::vector<uint8_t> &bytes) {
  Array out;
  std::string error;
  EXPECT_FALSE(parse(bytes.data(), bytes.size(), out, error));
  return error;
}

TEST(Npy, RoundTripsOddShapes) {
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{3, 1, 7, 5}, {13}, {}, {0, 4}, {2, 0}}) {
    Array array = floats(shape);
    std::vector<uint8_t> bytes = serialize(array);
    EXPECT_EQ((bytes.size() - array.data.size()) % 64, 0u);
    Array back;
    std::string error;
    ASSERT_TRUE(parse(bytes.data(), bytes.size(), back, error)) << error;
    EXPECT_EQ(back.shape, shape);
    EXPECT_EQ(back.dtype, DType::F32);
    EXPECT_EQ(back.data, array.data);
  }
}

TEST(Npy, ReadsWhatNumpyWrites) {
  std::vector<uint8_t> data(2 * 3 * 4, 0);
  int32_t seven = 7;
  std::memcpy(data.data() + 4, &seven, 4);
  for (uint8_t major : {1, 2, 3}) {
    std::vector<uint8_t> bytes =
        numpyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }",
                  data, major);
    Array out;
    std::string error;
    ASSERT_TRUE(parse(bytes.data(), bytes.size(), out, error)) << error;
    EXPECT_EQ(out.dtype, DType::I32);
    EXPECT_EQ(out.shape, (std::vector<int64_t>{2, 3}));
    int32_t second;
    std::memcpy(&second, out.data.data() + 4, 4);
    EXPECT_EQ(second, 7);
  }
}

TEST(Npy, RejectsWhatSpecDoesNotAllow) {
  std::vector<uint8_t> sixBytes(24, 0);
  EXPECT_EQ(parseError(numpyFile(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                sixBytes)),
            "unsupported dtype '<f8': expected '<f4' (float32) or '<i4' "
            "(int32)");
  EXPECT_EQ(parseError(numpyFile(
                "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                sixBytes)),
            "array is in Fortran order: expected C order (numpy's default; "
            "use np.ascontiguousarray)");
  EXPECT_EQ(parseError(numpyFile(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }",
                sixBytes)),
            "truncated data: shape (7,) of <f4 needs 28 bytes, found 24");
  EXPECT_EQ(parseError(numpyFile(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
                sixBytes)),
            "trailing data: shape (5,) of <f4 needs 20 bytes, found 24");
  EXPECT_EQ(parseError({'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0}),
            "not a .npy file (no \\x93NUMPY magic)");
  std::vector<uint8_t> version4 = numpyFile("{}", {});
  version4[6] = 4;
  EXPECT_EQ(parseError(version4),
            "unsupported .npy format version 4.0 (expected 1.0, 2.0 or 3.0)");
  std::vector<uint8_t> cut = numpyFile(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", {});
  cut.resize(30);
  EXPECT_EQ(parseError(cut),
            "truncated .npy header: it claims 118 bytes, the file has 20");
  EXPECT_EQ(
      parseError(numpyFile(
          "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", {})),
      "malformed .npy header (expected a tuple of non-negative integers for "
      "'shape'): {'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }");
}

TEST(Npy, FileErrorsNameTheFile) {
  Array out;
  std::string error;
  EXPECT_FALSE(readFile("/nonexistent/x.npy", out, error));
  EXPECT_EQ(error, "/nonexistent/x.npy: cannot open: No such file or "
                   "directory");
  std::string path = ::testing::TempDir() + "/attn-npy-roundtrip.npy";
  Array array = floats({2, 5});
  ASSERT_TRUE(writeFile(path, array, error)) << error;
  ASSERT_TRUE(readFile(path, out, error)) << error;
  EXPECT_EQ(out.data, array.data);
}

} // namespace
