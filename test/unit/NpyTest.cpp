//===- NpyTest.cpp - .npy reading and writing -----------------------------===//

#include "runtime/Npy.h"
#include "runtime/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
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

TEST(Npy, RoundTripsFloat16) {
  Array array;
  array.dtype = DType::F16;
  array.shape = {3, 5};
  for (int64_t i = 0; i < array.numElements(); ++i) {
    uint16_t half = attn::floatToHalf(0.25f * static_cast<float>(i) - 1.0f);
    array.data.push_back(uint8_t(half));
    array.data.push_back(uint8_t(half >> 8));
  }
  std::vector<uint8_t> bytes = serialize(array);
  Array back;
  std::string error;
  ASSERT_TRUE(parse(bytes.data(), bytes.size(), back, error)) << error;
  EXPECT_EQ(back.dtype, DType::F16);
  EXPECT_EQ(back.shape, array.shape);
  EXPECT_EQ(back.data, array.data);
  // 15 f16 elements are 30 bytes: one more is trailing data.
  bytes.push_back(0);
  EXPECT_EQ(parseError(bytes),
            "trailing data: shape (3, 5) of <f2 needs 30 bytes, found 31");
}

// The storage dtypes' conversions (runtime/Float16.h), against values
// whose encodings are known.
TEST(Float16, ConvertsExactValuesAndSpecials) {
  EXPECT_EQ(attn::floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(attn::floatToHalf(-2.5f), 0xc100);
  EXPECT_EQ(attn::floatToHalf(65504.0f), 0x7bff);     // largest finite
  EXPECT_EQ(attn::floatToHalf(65519.0f), 0x7bff);     // rounds down
  EXPECT_EQ(attn::floatToHalf(65520.0f), 0x7c00);     // rounds to inf
  EXPECT_EQ(attn::floatToHalf(0x1p-24f), 0x0001);     // smallest subnormal
  EXPECT_EQ(attn::floatToHalf(0x1p-25f), 0x0000);     // tie to even: 0
  EXPECT_EQ(attn::floatToHalf(0x1.8p-24f), 0x0002);   // tie to even: 2
  EXPECT_EQ(attn::floatToHalf(0x1.ffcp-15f), 0x0400); // to the smallest normal
  EXPECT_EQ(attn::floatToHalf(1.0f + 0x1p-11f), 0x3c00); // tie to even
  EXPECT_EQ(attn::floatToHalf(1.0f + 0x3p-11f), 0x3c02); // tie to even
  EXPECT_EQ(attn::floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(attn::floatToHalf(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(attn::halfToFloat(attn::floatToHalf(NAN))));
  EXPECT_EQ(attn::halfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(attn::halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(attn::halfToFloat(0xfc00), -INFINITY);

  EXPECT_EQ(attn::floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(attn::floatToBf16(1.0f + 0x1p-8f), 0x3f80); // tie to even
  EXPECT_EQ(attn::floatToBf16(1.0f + 0x3p-8f), 0x3f82); // tie to even
  EXPECT_EQ(attn::floatToBf16(-3.0f), 0xc040);
  EXPECT_EQ(attn::floatToBf16(0x1.ffp127f), 0x7f80); // overflows to inf
  EXPECT_TRUE(std::isnan(attn::bf16ToFloat(attn::floatToBf16(NAN))));
  EXPECT_EQ(attn::bf16ToFloat(0xc040), -3.0f);
}

// Every f16 and bf16 value survives the trip through f32.
TEST(Float16, RoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t value = static_cast<uint16_t>(bits);
    if (!std::isnan(attn::halfToFloat(value)))
      EXPECT_EQ(attn::floatToHalf(attn::halfToFloat(value)), value)
          << std::hex << bits;
    if (!std::isnan(attn::bf16ToFloat(value)))
      EXPECT_EQ(attn::floatToBf16(attn::bf16ToFloat(value)), value)
          << std::hex << bits;
  }
}

// Any f32 in f16's range rounds to the nearer of its f16 neighbours.
TEST(Float16, RoundsToTheNearestHalf) {
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    // Magnitudes from 2^-30 to 2^16, both signs.
    float x = std::ldexp(1.0f + (state >> 9) * 0x1p-23f,
                         static_cast<int>(state % 47) - 30);
    if (state & 0x100)
      x = -x;
    if (std::fabs(x) >= 65504.0f)
      continue;
    uint16_t half = attn::floatToHalf(x);
    double error = std::fabs(double(attn::halfToFloat(half)) - x);
    for (int step : {-1, 1}) {
      uint16_t neighbour = static_cast<uint16_t>(half + step);
      float other = attn::halfToFloat(neighbour);
      if ((neighbour & 0x7fff) < 0x7c00 &&
          (neighbour & 0x8000) == (half & 0x8000))
        EXPECT_LE(error, std::fabs(double(other) - x)) << x;
    }
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
            "unsupported dtype '<f8': expected '<f4' (float32), '<i4' "
            "(int32) or '<f2' (float16)");
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

// A shape whose byte count wraps 64 bits is refused instead of matching a
// short file: 4 x 1048577 x 1099510579201 elements of 4 bytes are 2^64 + 16
// bytes, which wrapped to the 16 bytes given.
TEST(Npy, ShapeWhoseSizeWraps) {
  std::vector<uint8_t> sixteen(16, 0);
  EXPECT_EQ(parseError(numpyFile("{'descr': '<f4', 'fortran_order': False, "
                                 "'shape': (4, 1048577, 1099510579201), }",
                                 sixteen)),
            "shape (4, 1048577, 1099510579201) of <f4 holds more than 2^63 "
            "bytes");
  // Huge dims around a zero hold nothing, and nothing wraps.
  std::vector<uint8_t> bytes = numpyFile(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (281474976710656, "
      "281474976710656, 0), }",
      {});
  Array out;
  std::string error;
  EXPECT_TRUE(parse(bytes.data(), bytes.size(), out, error)) << error;
  EXPECT_EQ(out.numElements(), 0);
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
