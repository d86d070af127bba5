//===- GuardedMemoryTest.cpp - ATTN_GUARD's buffers fault where they should
//===//
//
// The guard of runtime/GuardedMemory.h is what makes a generated kernel's
// access past a buffer fail a test: these check that each access it is
// meant to catch faults, and that what a call may touch does not.
//
//===----------------------------------------------------------------------===//

#include "runtime/GuardedMemory.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace attn::host;

namespace {

uint8_t readByte(const uint8_t *p) {
  return *static_cast<const volatile uint8_t *>(p);
}
void writeByte(uint8_t *p, uint8_t value) {
  *static_cast<volatile uint8_t *>(p) = value;
}

/// An odd size: the block's data then starts at no particular alignment.
constexpr size_t kBytes = 3 * 4096 + 13;

TEST(GuardedMemory, EveryByteOfTheBlockCanBeReadAndWritten) {
  std::unique_ptr<GuardedBlock> block = GuardedBlock::map(kBytes);
  ASSERT_TRUE(block);
  std::memset(block->data, 7, kBytes);
  EXPECT_EQ(readByte(block->data), 7);
  EXPECT_EQ(readByte(block->data + kBytes - 1), 7);
}

TEST(GuardedMemory, NoBlockOfNoBytes) { EXPECT_FALSE(GuardedBlock::map(0)); }

TEST(GuardedMemoryDeathTest, ReadingOneBytePastTheEndFaults) {
  std::unique_ptr<GuardedBlock> block =
      GuardedBlock::map(kBytes, /*atStart=*/false);
  ASSERT_TRUE(block);
  EXPECT_DEATH(readByte(block->data + kBytes), "");
}

TEST(GuardedMemoryDeathTest, WritingOneBytePastTheEndFaults) {
  std::unique_ptr<GuardedBlock> block = GuardedBlock::map(64, false);
  ASSERT_TRUE(block);
  EXPECT_DEATH(writeByte(block->data + 64, 1), "");
}

TEST(GuardedMemoryDeathTest, ReadingBeforeTheFirstPageFaults) {
  std::unique_ptr<GuardedBlock> block = GuardedBlock::map(kBytes, false);
  ASSERT_TRUE(block);
  // The data starts 4096 - 13 bytes into its first page.
  const size_t slack = 4 * 4096 - kBytes;
  EXPECT_EQ(readByte(block->data - slack), 0);
  EXPECT_DEATH(readByte(block->data - slack - 1), "");
}

TEST(GuardedMemoryDeathTest, AtStartReadingOneByteBeforeTheStartFaults) {
  std::unique_ptr<GuardedBlock> block =
      GuardedBlock::map(kBytes, /*atStart=*/true);
  ASSERT_TRUE(block);
  EXPECT_EQ(readByte(block->data), 0);
  EXPECT_EQ(readByte(block->data + kBytes - 1), 0);
  EXPECT_DEATH(readByte(block->data - 1), "");
}

TEST(GuardedMemoryDeathTest, WritingIntoAReadOnlyBlockFaults) {
  std::unique_ptr<GuardedBlock> block = GuardedBlock::map(kBytes);
  ASSERT_TRUE(block);
  writeByte(block->data + 5, 9);
  ASSERT_TRUE(block->makeReadOnly());
  EXPECT_EQ(readByte(block->data + 5), 9);
  EXPECT_DEATH(writeByte(block->data + 5, 1), "");
}

/// An entry of three inputs, the second updated in place, and one output.
Entry threeInputsOneOutput() {
  Entry e;
  e.name = "layer";
  e.inputs.resize(3);
  e.inputs[1].inPlace = true;
  e.outputs.resize(1);
  return e;
}

struct Call {
  std::vector<float> read = {1, 2, 3}, updated = {4, 5}, empty,
                     out = {0, 0, 0, 0};
  std::vector<Buffer> buffers;
  Call() {
    for (std::vector<float> *tensor : {&read, &updated, &empty, &out})
      buffers.push_back(Buffer{tensor->empty() ? nullptr : tensor->data(),
                               {static_cast<int64_t>(tensor->size())},
                               4});
  }
};

TEST(GuardedMemory, TheCallRunsOnCopiesThatEndAtTheGuard) {
  Entry e = threeInputsOneOutput();
  Call call;
  GuardedTensors guarded;
  ASSERT_EQ(guarded.guard(e, call.buffers), ATTN_OK);
  for (int i : {0, 1, 3}) {
    EXPECT_NE(call.buffers[i].data, nullptr);
    const auto start = reinterpret_cast<uintptr_t>(call.buffers[i].data);
    EXPECT_EQ((guardAtStart() ? start : start + call.buffers[i].bytes()) % 4096,
              0u);
  }
  EXPECT_NE(call.buffers[0].data, call.read.data());
  EXPECT_EQ(call.buffers[2].data, nullptr);
  EXPECT_EQ(static_cast<float *>(call.buffers[0].data)[2], 3.0f);
  EXPECT_EQ(static_cast<float *>(call.buffers[1].data)[1], 5.0f);
  guarded.restore(e, call.buffers, /*succeeded=*/true);
  EXPECT_EQ(call.buffers[0].data, call.read.data());
  EXPECT_EQ(call.buffers[3].data, call.out.data());
}

/// Runs `call` of threeInputsOneOutput as a run that writes 40 into the
/// in-place input and 30 into the output, then ends as `succeeded` says.
void runWritingCall(Call &call, bool succeeded) {
  Entry e = threeInputsOneOutput();
  GuardedTensors guarded;
  EXPECT_EQ(guarded.guard(e, call.buffers), ATTN_OK);
  static_cast<float *>(call.buffers[1].data)[0] = 40;
  static_cast<float *>(call.buffers[3].data)[3] = 30;
  guarded.restore(e, call.buffers, succeeded);
  EXPECT_EQ(call.buffers[1].data, call.updated.data());
  EXPECT_EQ(call.buffers[3].data, call.out.data());
}

TEST(GuardedMemory, OutputsAndInPlaceInputsComeBackAfterASuccess) {
  Call call;
  runWritingCall(call, /*succeeded=*/true);
  EXPECT_EQ(call.updated, (std::vector<float>{40, 5}));
  EXPECT_EQ(call.out, (std::vector<float>{0, 0, 0, 30}));
  EXPECT_EQ(call.read, (std::vector<float>{1, 2, 3}));
}

TEST(GuardedMemory, AFailedCallWritesNothing) {
  Call call;
  runWritingCall(call, /*succeeded=*/false);
  EXPECT_EQ(call.updated, (std::vector<float>{4, 5}));
  EXPECT_EQ(call.out, (std::vector<float>{0, 0, 0, 0}));
}

TEST(GuardedMemoryDeathTest, AnInputTheEntryOnlyReadsIsReadOnly) {
  Entry e = threeInputsOneOutput();
  Call call;
  GuardedTensors guarded;
  ASSERT_EQ(guarded.guard(e, call.buffers), ATTN_OK);
  EXPECT_DEATH(static_cast<volatile float *>(call.buffers[0].data)[0] = 1, "");
  static_cast<float *>(call.buffers[1].data)[0] = 1; // in place: writable
  guarded.restore(e, call.buffers, /*succeeded=*/false);
}

} // namespace
