//===- RuntimeErrorsTest.cpp - bad binaries and bad arguments -------------===//
//
// The runtime never crashes and never answers silently wrong: a truncated
// or corrupted .attnb, an unknown entry, or arguments that do not match an
// entry's signature each give a status and a message that says what is
// wrong.
//
//===----------------------------------------------------------------------===//

#include "compiler/Compile.h"
#include "runtime/Checksum.h"
#include "runtime/attn_runtime.hpp"
#include "runtime/schemas/attnb_generated.h"
#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <thread>

using namespace attn;

namespace {

const char *kModel = R"({"model": "errors", "dtype": "f32", "layers": [
  {"name": "layer", "type": "attention", "num_heads": 4, "num_kv_heads": 2,
   "head_dim": 16, "mask": "causal", "gate": "headwise"}]})";

class RuntimeErrors : public testing::Test {
protected:
  static void SetUpTestSuite() {
    llvm::Expected<std::string> bytes =
        mlir::attn::compileModelDescription(kModel, e2e::testCpu());
    ASSERT_TRUE(static_cast<bool>(bytes)) << llvm::toString(bytes.takeError());
    binary = new std::string(std::move(*bytes));
  }
  static void TearDownTestSuite() { delete binary; }

  static Status load(const std::string &bytes, std::unique_ptr<Model> &model) {
    return Model::loadMemory(bytes.data(), bytes.size(), 1, model);
  }

  /// q, k, v, gate for B=1, Lq=5, Lk=7.
  static std::vector<Tensor> goodInputs() {
    std::vector<Tensor> inputs{
        Tensor(ATTN_F32, {1, 4, 5, 16}), Tensor(ATTN_F32, {1, 2, 7, 16}),
        Tensor(ATTN_F32, {1, 2, 7, 16}), Tensor(ATTN_F32, {1, 4, 5, 1})};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (Tensor &t : inputs)
      for (int64_t i = 0; i < t.numElements(); ++i)
        t.f32()[i] = uniform(rng);
    return inputs;
  }

  /// The C API's views of `tensors`.
  static std::vector<attn_tensor> views(const std::vector<Tensor> &tensors) {
    std::vector<attn_tensor> out;
    for (const Tensor &t : tensors)
      out.push_back(t.view());
    return out;
  }

  /// Loads the model and runs its entry on `inputs`.
  static Status loadAndRun(const std::vector<Tensor> &inputs) {
    std::unique_ptr<Model> model;
    Status status = load(*binary, model);
    if (!status.ok())
      return status;
    std::vector<Tensor> outputs;
    return model->run(0, inputs, outputs);
  }

  static std::string *binary;
};

std::string *RuntimeErrors::binary = nullptr;

TEST_F(RuntimeErrors, LoadsAndRuns) {
  std::unique_ptr<Model> model;
  Status status = load(*binary, model);
  ASSERT_TRUE(status.ok()) << status.message;
  std::vector<Tensor> outputs;
  status = model->run(0, goodInputs(), outputs);
  ASSERT_TRUE(status.ok()) << status.message;
  EXPECT_EQ(outputs[0].shape, (std::vector<int64_t>{1, 4, 5, 16}));
}

// The kernel time of the last run, for benchmarks: refused before any run,
// then positive and within the run's wall time (on CUDA it leaves out the
// copies; on the CPU it is the host program).
void checkKernelTime(Model &model, const std::vector<Tensor> &inputs) {
  double ms = 0;
  Status status = model.lastKernelMs(ms);
  EXPECT_EQ(status.code, ATTN_INVALID_ARGUMENT);
  EXPECT_EQ(status.message, "attn_model_last_kernel_ms: no entry of this "
                            "model has run on this thread yet");
  std::vector<Tensor> outputs;
  auto begin = std::chrono::steady_clock::now();
  status = model.run(0, inputs, outputs);
  double wallMs = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - begin)
                      .count();
  ASSERT_TRUE(status.ok()) << status.message;
  status = model.lastKernelMs(ms);
  ASSERT_TRUE(status.ok()) << status.message;
  EXPECT_GT(ms, 0.0);
  EXPECT_LE(ms, wallMs);
  // The time is the calling thread's: another thread has run nothing.
  std::thread([&] {
    double other = 0;
    EXPECT_EQ(model.lastKernelMs(other).code, ATTN_INVALID_ARGUMENT);
  }).join();
}

TEST_F(RuntimeErrors, KernelTimeOnCpu) {
  std::unique_ptr<Model> model;
  Status status = load(*binary, model);
  ASSERT_TRUE(status.ok()) << status.message;
  checkKernelTime(*model, goodInputs());
}

TEST_F(RuntimeErrors, KernelTimeOnCuda) {
  std::string skip;
  std::unique_ptr<Model> model =
      attn::e2e::compileAndLoadFor(attn::e2e::Backend::Cuda, kModel, 1, skip);
  if (!skip.empty())
    GTEST_SKIP() << skip;
  ASSERT_TRUE(model);
  checkKernelTime(*model, goodInputs());
}

// Cutting the file short is caught, except where only trailing alignment
// padding goes: then nothing that runs changed.
TEST_F(RuntimeErrors, TruncatedBinary) {
  for (size_t size : {size_t(0), size_t(3), size_t(8), size_t(64),
                      binary->size() / 2, binary->size() - 16}) {
    std::unique_ptr<Model> model;
    Status status = load(binary->substr(0, size), model);
    EXPECT_EQ(status.code, ATTN_INVALID_BINARY) << "size " << size;
    EXPECT_FALSE(status.message.empty());
  }
  std::unique_ptr<Model> reference;
  ASSERT_TRUE(load(*binary, reference).ok());
  std::vector<Tensor> inputs = goodInputs(), expected;
  ASSERT_TRUE(reference->run(0, inputs, expected).ok());
  for (size_t cut = 1; cut < 16; ++cut) {
    std::unique_ptr<Model> model;
    Status status = load(binary->substr(0, binary->size() - cut), model);
    if (!status.ok()) {
      EXPECT_EQ(status.code, ATTN_INVALID_BINARY) << status.message;
      continue;
    }
    std::vector<Tensor> outputs;
    ASSERT_TRUE(model->run(0, inputs, outputs).ok());
    EXPECT_EQ(outputs[0].storage, expected[0].storage) << "cut " << cut;
  }
}

TEST_F(RuntimeErrors, NotAnAttnbFile) {
  std::string bytes = *binary;
  std::memcpy(&bytes[4], "ELF!", 4);
  std::unique_ptr<Model> model;
  Status status = load(bytes, model);
  EXPECT_EQ(status.code, ATTN_INVALID_BINARY);
  EXPECT_NE(status.message.find("not an .attnb file"), std::string::npos)
      << status.message;
}

// A flipped bit anywhere is either caught at load time or changed nothing
// that runs (padding): the output stays bit-identical.
TEST_F(RuntimeErrors, CorruptedBytes) {
  std::unique_ptr<Model> reference;
  ASSERT_TRUE(load(*binary, reference).ok());
  std::vector<Tensor> inputs = goodInputs(), expected;
  ASSERT_TRUE(reference->run(0, inputs, expected).ok());

  size_t caught = 0, tried = 0;
  size_t step = std::max<size_t>(1, binary->size() / 400);
  for (size_t pos = 0; pos < binary->size(); pos += step) {
    std::string bytes = *binary;
    bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (pos % 8)));
    ++tried;
    std::unique_ptr<Model> model;
    Status status = load(bytes, model);
    if (!status.ok()) {
      EXPECT_EQ(status.code, ATTN_INVALID_BINARY)
          << "byte " << pos << ": " << status.message;
      ++caught;
      continue;
    }
    std::vector<Tensor> outputs;
    status = model->run(0, inputs, outputs);
    ASSERT_TRUE(status.ok()) << "byte " << pos << ": " << status.message;
    EXPECT_EQ(outputs[0].storage, expected[0].storage) << "byte " << pos;
  }
  // Nearly every byte is covered by the checksum or the verifier.
  EXPECT_GT(caught, tried * 9 / 10);
}

TEST_F(RuntimeErrors, UnknownFormatVersion) {
  const auto *file = attn::fb::GetBinary(binary->data());
  flatbuffers::FlatBufferBuilder builder;
  auto nested =
      builder.CreateVector(file->model()->data(), file->model()->size());
  builder.Finish(
      attn::fb::CreateBinary(builder, 99, nested, file->model_fnv1a64()),
      attn::fb::BinaryIdentifier());
  std::string bytes(reinterpret_cast<const char *>(builder.GetBufferPointer()),
                    builder.GetSize());
  std::unique_ptr<Model> model;
  Status status = load(bytes, model);
  EXPECT_EQ(status.code, ATTN_INVALID_BINARY);
  EXPECT_EQ(status.message, ".attnb format version 99 is not supported; this "
                            "runtime reads version 9");
}

TEST_F(RuntimeErrors, UnknownEntry) {
  std::unique_ptr<Model> model;
  ASSERT_TRUE(load(*binary, model).ok());
  int32_t entry;
  Status status = model->findEntry("nope", entry);
  EXPECT_EQ(status.code, ATTN_NOT_FOUND);
  EXPECT_EQ(status.message, "no entry named 'nope'; the model has: layer");
}

TEST_F(RuntimeErrors, WrongArgumentCount) {
  std::vector<Tensor> inputs = goodInputs();
  inputs.pop_back();
  Status status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "entry 'layer' takes 4 inputs (q, k, v, gate), got 3");
  inputs = goodInputs();
  inputs.push_back(inputs.back());
  status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "entry 'layer' takes 4 inputs (q, k, v, gate), got 5");
}

TEST_F(RuntimeErrors, WrongDtype) {
  std::vector<Tensor> inputs = goodInputs();
  inputs[2].dtype = ATTN_I32;
  Status status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "input 'v' (#2) of entry 'layer': expected dtype f32, got i32");
}

TEST_F(RuntimeErrors, WrongStaticDim) {
  std::vector<Tensor> inputs = goodInputs();
  inputs[1] = Tensor(ATTN_F32, {1, 3, 7, 16});
  Status status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "input 'k' (#1) of entry 'layer': expected shape [B=1, 2, Lk, "
            "16], got [1, 3, 7, 16] (dim 1 must be 2)");
}

TEST_F(RuntimeErrors, InconsistentDynamicDims) {
  std::vector<Tensor> inputs = goodInputs();
  inputs[2] = Tensor(ATTN_F32, {1, 2, 6, 16});
  Status status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "input 'v' (#2) of entry 'layer': expected shape [B=1, 2, Lk=7, "
            "16], got [1, 2, 6, 16] (dim 2 is Lk, which an earlier argument "
            "set to 7)");
}

TEST_F(RuntimeErrors, WrongRank) {
  std::vector<Tensor> inputs = goodInputs();
  inputs[3] = Tensor(ATTN_F32, {1, 4, 5});
  Status status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "input 'gate' (#3) of entry 'layer': expected shape [B=1, 4, "
            "Lq=5, 1], got [1, 4, 5] (rank 3, expected 4)");
}

TEST_F(RuntimeErrors, WrongOutputBuffer) {
  std::unique_ptr<Model> model;
  ASSERT_TRUE(load(*binary, model).ok());
  std::vector<Tensor> inputs = goodInputs();
  std::vector<attn_tensor> in = views(inputs);
  Tensor wrong(ATTN_F32, {1, 4, 6, 16});
  attn_tensor out = wrong.view();
  attn_status code = attn_run(model->get(), 0, in.data(), 4, &out, 1);
  EXPECT_EQ(code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_STREQ(attn_last_error(),
               "output 'o' (#0) of entry 'layer': expected shape [B=1, 4, "
               "Lq=5, 16], got [1, 4, 6, 16] (dim 2 is Lq, which an earlier "
               "argument set to 5)");
}

// Misuse of the C API's pointers and counts is an error that says which
// argument is wrong, never a read of memory the caller does not hold: a
// rank past any attn tensor's is reported without reading its shape.
TEST_F(RuntimeErrors, CApiMisuse) {
  std::unique_ptr<Model> model;
  ASSERT_TRUE(load(*binary, model).ok());
  std::vector<Tensor> inputs = goodInputs();
  std::vector<attn_tensor> in = views(inputs);
  Tensor o(ATTN_F32, {1, 4, 5, 16});
  attn_tensor out = o.view();
  auto expect = [](attn_status code, attn_status expected,
                   const char *message) {
    EXPECT_EQ(code, expected) << message;
    EXPECT_STREQ(attn_last_error(), message);
  };
  attn_model *m = model->get();
  expect(attn_run(nullptr, 0, in.data(), 4, &out, 1), ATTN_INVALID_ARGUMENT,
         "attn_run: the model is null");
  expect(attn_run(m, 3, in.data(), 4, &out, 1), ATTN_INVALID_ARGUMENT,
         "attn_run: no entry #3 (the model has 1)");
  expect(attn_run(m, 0, nullptr, 4, &out, 1), ATTN_INVALID_ARGUMENT,
         "entry 'layer': inputs is null");
  expect(attn_run(m, 0, in.data(), 4, nullptr, 1), ATTN_INVALID_ARGUMENT,
         "entry 'layer': outputs is null");
  std::vector<attn_tensor> bad = in;
  bad[0].shape = nullptr;
  expect(attn_run(m, 0, bad.data(), 4, &out, 1), ATTN_INVALID_ARGUMENT,
         "input 'q' (#0) of entry 'layer': shape is null (rank 4)");
  for (int32_t rank : {-1, 1 << 30}) {
    bad[0] = in[0];
    bad[0].rank = rank;
    std::string message =
        "input 'q' (#0) of entry 'layer': expected shape [B, 4, Lq, 16], got "
        "a tensor of rank " +
        std::to_string(rank);
    expect(attn_run(m, 0, bad.data(), 4, &out, 1), ATTN_SIGNATURE_MISMATCH,
           message.c_str());
  }
  int64_t *noShape = nullptr;
  expect(attn_entry_output_shapes(m, 0, in.data(), 4, &noShape),
         ATTN_INVALID_ARGUMENT,
         "attn_entry_output_shapes: output_shapes[0] is null");
  expect(attn_entry_output_shapes(m, 0, in.data(), 4, nullptr),
         ATTN_INVALID_ARGUMENT,
         "attn_entry_output_shapes: output_shapes is null");
  expect(attn_entry_workspace_bytes(m, 0, in.data(), 4, nullptr),
         ATTN_INVALID_ARGUMENT, "attn_entry_workspace_bytes: bytes is null");
  attn_argument_info info;
  expect(attn_entry_argument(nullptr, 0, 0, &info), ATTN_INVALID_ARGUMENT,
         "attn_entry_argument: the model is null");
  expect(attn_entry_argument(m, -1, 0, &info), ATTN_INVALID_ARGUMENT,
         "attn_entry_argument: no entry #-1 (the model has 1)");
  expect(attn_entry_argument(m, 0, 0, nullptr), ATTN_INVALID_ARGUMENT,
         "attn_entry_argument: info is null");
  // The model is as it was.
  EXPECT_EQ(attn_run(m, 0, in.data(), 4, &out, 1), ATTN_OK);
}

// Sizes whose byte count wraps 64 bits are refused before anything reads
// them (attn::Tensor leaves them without storage, attn_run names them).
TEST_F(RuntimeErrors, ShapeWhoseSizeWraps) {
  const int64_t shape[] = {int64_t(1) << 40, 4, int64_t(1) << 40, 16};
  size_t bytes = 0;
  EXPECT_EQ(attn_tensor_bytes(ATTN_F32, 4, shape, &bytes),
            ATTN_INVALID_ARGUMENT);
  EXPECT_STREQ(attn_last_error(),
               "a tensor of f32 [1099511627776, 4, 1099511627776, 16] holds "
               "more than 2^63 bytes");
  std::vector<Tensor> inputs = goodInputs();
  inputs[0].shape = {int64_t(1) << 40, 4, 5, int64_t(1) << 40};
  Status status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "input 'q' (#0) of entry 'layer': expected shape [B=1099511627776, "
            "4, Lq=5, 16], got [1099511627776, 4, 5, 1099511627776] (dim 3 "
            "must be 16)");
  inputs = goodInputs();
  for (Tensor &t : inputs)
    t.shape[0] = int64_t(1) << 60;
  status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "input 'q' (#0) of entry 'layer': expected shape "
            "[B=1152921504606846976, 4, Lq=5, 16], got [1152921504606846976, "
            "4, 5, 16] (its size in bytes does not fit in 64 bits)");
}

TEST_F(RuntimeErrors, TooManyThreads) {
  std::unique_ptr<Model> model;
  Status status =
      Model::loadMemory(binary->data(), binary->size(), 100000, model);
  EXPECT_EQ(status.code, ATTN_INVALID_ARGUMENT);
  EXPECT_EQ(status.message, "num_threads = 100000: a pool of 100000 threads "
                            "was asked for; at most 1024 are allowed");
}

// A causal mask places query i at Lk - Lq + i: more queries than keys is
// refused (SPEC §1.1), with nothing written.
TEST_F(RuntimeErrors, CausalWithMoreQueriesThanKeys) {
  std::vector<Tensor> inputs = goodInputs();
  inputs[0] = Tensor(ATTN_F32, {1, 4, 8, 16});
  inputs[3] = Tensor(ATTN_F32, {1, 4, 8, 1});
  Status status = loadAndRun(inputs);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_EQ(status.message,
            "entry 'layer': attn.sdpa: a causal mask needs at most as many "
            "query rows as keys (Lq <= Lk: query i sits at position Lk - Lq "
            "+ i)");
}

/// `bytes` with its model changed by `edit` and the checksum recomputed:
/// what a corrupted file whose checksum was made to match looks like.
std::string rewriteModel(const std::string &bytes,
                         const std::function<void(fb::ModelT &)> &edit) {
  const fb::Binary *file = fb::GetBinary(bytes.data());
  fb::ModelT model;
  flatbuffers::GetRoot<fb::Model>(file->model()->data())->UnPackTo(&model);
  edit(model);
  flatbuffers::FlatBufferBuilder inner;
  inner.Finish(fb::Model::Pack(inner, &model));
  flatbuffers::FlatBufferBuilder outer;
  outer.ForceVectorAlignment(inner.GetSize(), sizeof(uint8_t), 16);
  auto nested = outer.CreateVector(inner.GetBufferPointer(), inner.GetSize());
  outer.Finish(
      fb::CreateBinary(outer, file->format_version(), nested,
                       fnv1a64(inner.GetBufferPointer(), inner.GetSize())),
      fb::BinaryIdentifier());
  return std::string(reinterpret_cast<const char *>(outer.GetBufferPointer()),
                     outer.GetSize());
}

/// Appends `ops` (integer steps whose operands are relative: -1 is the
/// step before) to the CPU program of entry 0.
void appendIntOps(fb::ModelT &model, std::vector<fb::IntOpT> ops) {
  auto &program = model.entries[0]->program;
  for (fb::IntOpT op : ops) {
    int32_t self = static_cast<int32_t>(program.size());
    op.a += self;
    op.b += self;
    fb::StepUnion step;
    step.Set(op);
    program.push_back(std::move(step));
  }
}

fb::IntOpT constant(int64_t value) {
  fb::IntOpT op;
  op.kind = fb::IntOpKind::Constant;
  op.value = value;
  return op;
}
fb::IntOpT twoOperands(fb::IntOpKind kind) {
  fb::IntOpT op;
  op.kind = kind;
  op.a = -2;
  op.b = -1;
  return op;
}

/// Loads `bytes` and runs entry 0 on the good inputs.
Status loadAndRunBytes(const std::string &bytes) {
  std::unique_ptr<Model> model;
  Status status = Model::loadMemory(bytes.data(), bytes.size(), 1, model);
  if (!status.ok())
    return status;
  std::vector<Tensor> inputs{
      Tensor(ATTN_F32, {1, 4, 5, 16}), Tensor(ATTN_F32, {1, 2, 7, 16}),
      Tensor(ATTN_F32, {1, 2, 7, 16}), Tensor(ATTN_F32, {1, 4, 5, 1})};
  std::vector<Tensor> outputs;
  return model->run(0, inputs, outputs);
}

// The host program's integer ops are checked: no signed overflow, no
// INT64_MIN / -1, no temporary whose size wraps.
TEST_F(RuntimeErrors, HostProgramArithmeticIsChecked) {
  struct Case {
    std::vector<fb::IntOpT> ops;
    const char *message;
  } cases[] = {
      {{constant(INT64_MAX), constant(2), twoOperands(fb::IntOpKind::Mul)},
       "integer overflow: 9223372036854775807 * 2"},
      {{constant(INT64_MAX), constant(1), twoOperands(fb::IntOpKind::Add)},
       "integer overflow: 9223372036854775807 + 1"},
      {{constant(INT64_MIN), constant(1), twoOperands(fb::IntOpKind::Sub)},
       "integer overflow: -9223372036854775808 - 1"},
      {{constant(INT64_MIN), constant(-1), twoOperands(fb::IntOpKind::DivS)},
       "integer overflow: -9223372036854775808 / -1"},
      {{constant(INT64_MIN), constant(-1), twoOperands(fb::IntOpKind::RemS)},
       "integer overflow: -9223372036854775808 / -1"},
      {{constant(7), constant(0), twoOperands(fb::IntOpKind::CeilDivU)},
       "division by zero"},
  };
  for (const Case &c : cases) {
    std::string bytes =
        rewriteModel(*binary, [&](fb::ModelT &m) { appendIntOps(m, c.ops); });
    Status status = loadAndRunBytes(bytes);
    EXPECT_EQ(status.code, ATTN_RUN_ERROR);
    EXPECT_NE(status.message.find(c.message), std::string::npos)
        << status.message;
  }
  std::string bytes = rewriteModel(*binary, [](fb::ModelT &m) {
    appendIntOps(m, {constant(int64_t(1) << 62)});
    auto &program = m.entries[0]->program;
    fb::TempBufferT temp;
    temp.dtype = fb::DType::f32;
    int32_t size = static_cast<int32_t>(program.size()) - 1;
    temp.dims = {size, size};
    fb::StepUnion step;
    step.Set(temp);
    program.push_back(std::move(step));
  });
  Status status = loadAndRunBytes(bytes);
  EXPECT_EQ(status.code, ATTN_RUN_ERROR);
  EXPECT_NE(status.message.find("a temporary [4611686018427387904, "
                                "4611686018427387904] has a negative or too "
                                "large size"),
            std::string::npos)
      << status.message;
}

// Flatbuffers 2.0's verifier checks a vector's 4-byte length, not that its
// 8-byte elements are aligned; a kernel ABI record whose dims are not was
// read with misaligned int64 loads (undefined behaviour; the .attnb fuzzer
// found it). The fuzzer's reproducer, its checksum made to match, is now
// refused.
TEST(Runtime, MisalignedWideVectorIsCorrupt) {
  std::ifstream in(std::string(ATTN_SOURCE_DIR) +
                       "/test/fuzz/corpus/attnb/misaligned-kernel-abi-dims.bin",
                   std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 64u);
  const fb::Binary *file = fb::GetBinary(bytes.data());
  uint64_t stored = file->model_fnv1a64();
  uint64_t actual = fnv1a64(file->model()->data(), file->model()->size());
  size_t at = bytes.find(
      std::string(reinterpret_cast<const char *>(&stored), sizeof(stored)));
  ASSERT_NE(at, std::string::npos);
  std::memcpy(&bytes[at], &actual, sizeof(actual));
  std::unique_ptr<Model> model;
  Status status = Model::loadMemory(bytes.data(), bytes.size(), 1, model);
  EXPECT_EQ(status.code, ATTN_INVALID_BINARY);
  EXPECT_EQ(status.message, "corrupt .attnb: a kernel ABI record's dims are "
                            "not 8-byte aligned");
}

/// The first dispatch step of entry 0's CPU program.
fb::DispatchT &firstDispatch(fb::ModelT &model) {
  for (fb::StepUnion &step : model.entries[0]->program)
    if (fb::DispatchT *dispatch = step.AsDispatch())
      return *dispatch;
  ADD_FAILURE() << "no dispatch";
  static fb::DispatchT none;
  return none;
}

// Every dispatch binds what its kernel was compiled for (the kernel ABI
// records), checked when the binary is loaded, or, for dims the signature
// leaves dynamic, before the kernel runs.
TEST_F(RuntimeErrors, BindingsAgreeWithTheKernels) {
  // q's binding replaced by the headwise gate: [B, 4, Lq, 1] where the
  // kernel takes [B, 4, Lq, 16].
  Status status = loadAndRunBytes(rewriteModel(
      *binary, [](fb::ModelT &m) { firstDispatch(m).bindings[0] = 3; }));
  EXPECT_EQ(status.code, ATTN_INVALID_BINARY);
  EXPECT_NE(status.message.find("binds buffer 3 as binding #0, whose dim 3 "
                                "is 1; the kernel was compiled for 16"),
            std::string::npos)
      << status.message;
  // A binding too few.
  status = loadAndRunBytes(rewriteModel(
      *binary, [](fb::ModelT &m) { firstDispatch(m).bindings.pop_back(); }));
  EXPECT_EQ(status.code, ATTN_INVALID_BINARY);
  EXPECT_NE(status.message.find("buffers; the kernel takes"), std::string::npos)
      << status.message;
  // The ABI record of another rank than the signature.
  status = loadAndRunBytes(rewriteModel(*binary, [](fb::ModelT &m) {
    for (auto &abi : m.cpu->kernels)
      abi->bindings[0]->dims.push_back(-1);
  }));
  EXPECT_EQ(status.code, ATTN_INVALID_BINARY);
  EXPECT_NE(status.message.find("with another dtype or rank than the "
                                "kernel's"),
            std::string::npos)
      << status.message;
  // q's head dim made dynamic in the signature: the kernel still takes 16,
  // and a call with 8 is stopped before it runs.
  std::string dynamic = rewriteModel(*binary, [](fb::ModelT &m) {
    auto &dim = m.entries[0]->inputs[0]->dims[3];
    dim->size = -1;
    dim->symbol = "D";
  });
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::loadMemory(dynamic.data(), dynamic.size(), 1, model).ok());
  std::vector<Tensor> inputs = goodInputs(), outputs;
  inputs[0] = Tensor(ATTN_F32, {1, 4, 5, 8});
  status = model->run(0, inputs, outputs);
  EXPECT_EQ(status.code, ATTN_INVALID_BINARY);
  EXPECT_NE(status.message.find("[1, 4, 5, 8] as binding #0"),
            std::string::npos)
      << status.message;
  EXPECT_NE(status.message.find("which was compiled for dim 3 = 16"),
            std::string::npos)
      << status.message;
}

} // namespace

namespace {

// Equal layers share their kernels (compiled once): a model of two equal
// layers and a third with another mask has the kernels of two layers, and
// every entry still computes its own layer.
TEST(Runtime, EqualLayersShareKernels) {
  auto layer = [](const char *name, const char *mask) {
    return std::string(R"({"name": ")") + name +
           R"(", "type": "attention", "num_heads": 2, "num_kv_heads": 1, )"
           R"("head_dim": 8, "mask": )" +
           mask + "}";
  };
  auto kernelsOf = [](const std::string &json) -> size_t {
    llvm::Expected<std::string> bytes =
        mlir::attn::compileModelDescription(json, e2e::testCpu());
    EXPECT_TRUE(static_cast<bool>(bytes)) << llvm::toString(bytes.takeError());
    if (!bytes)
      return 0;
    const fb::Binary *file = fb::GetBinary(bytes->data());
    return flatbuffers::GetRoot<fb::Model>(file->model()->data())
        ->cpu()
        ->kernels()
        ->size();
  };
  const std::string head = R"({"model": "equal", "dtype": "f32", "layers": [)";
  std::string one = head + layer("a", "\"causal\"") + "]}";
  std::string three = head + layer("a", "\"causal\"") + ", " +
                      layer("b", "{\"sliding_window\": 3}") + ", " +
                      layer("c", "\"causal\"") + "]}";
  std::string twoKinds = head + layer("a", "\"causal\"") + ", " +
                         layer("b", "{\"sliding_window\": 3}") + "]}";
  EXPECT_EQ(kernelsOf(three), kernelsOf(twoKinds));
  EXPECT_LT(kernelsOf(three), 3 * kernelsOf(one));

  std::unique_ptr<Model> model = e2e::compileAndLoad(three, 2);
  ASSERT_TRUE(model);
  std::mt19937_64 rng(5);
  ref::Tensor q = e2e::randomF32({1, 2, 6, 8}, rng, -2.0, 2.0);
  ref::Tensor k = e2e::randomF32({1, 1, 9, 8}, rng, -2.0, 2.0);
  ref::Tensor v = e2e::randomF32({1, 1, 9, 8}, rng, -1.0, 1.0);
  std::vector<Tensor> inputs{e2e::toRuntime(q), e2e::toRuntime(k),
                             e2e::toRuntime(v)};
  for (auto [entry, mask] : {std::pair{"a", ref::Mask::causal()},
                             std::pair{"b", ref::Mask::slidingWindow(3)},
                             std::pair{"c", ref::Mask::causal()}}) {
    int32_t index = -1;
    ASSERT_TRUE(model->findEntry(entry, index).ok());
    std::vector<Tensor> outputs;
    Status status = model->run(index, inputs, outputs);
    ASSERT_TRUE(status.ok()) << status.message;
    EXPECT_LE(ref::maxRelativeError(e2e::fromRuntime(outputs[0]),
                                    ref::sdpa(q, k, v, mask).output),
              1e-5)
        << entry;
  }
}

// Two models alive at once whose kernels have the same names (same model
// and entry names, different masks) each run their own code. The CPU code
// is loaded through /proc/self/fd/N, and the dynamic loader hands back an
// already loaded library for a path it has seen: a model whose code fd was
// closed (and the number reused) ran the other model's kernels.
// CPU code on AMX tiles needs their state from Linux (arch_prctl
// ARCH_REQ_XCOMP_PERM) before its first tile instruction. Where Linux
// refuses it (here a seccomp filter makes arch_prctl fail with EPERM, in a
// child process), loading the binary is an error naming the refusal, not a
// SIGILL at the first call.
TEST(Runtime, RefusedAmxTileStateIsAnError) {
  if (!__builtin_cpu_supports("amx-tile") ||
      !__builtin_cpu_supports("amx-bf16"))
    GTEST_SKIP() << "this CPU has no AMX tiles";
  llvm::Expected<mlir::attn::CpuTarget> amx =
      mlir::attn::CpuTarget::forLevel("x86-64-v4+avx512bf16+amx-bf16");
  ASSERT_TRUE(static_cast<bool>(amx)) << llvm::toString(amx.takeError());
  llvm::Expected<std::string> bytes = mlir::attn::compileModelDescription(
      R"({"model": "amx", "dtype": "bf16", "layers": [{"name": "layer",
          "type": "attention", "num_heads": 2, "head_dim": 32,
          "mask": "causal"}]})",
      *amx);
  ASSERT_TRUE(static_cast<bool>(bytes)) << llvm::toString(bytes.takeError());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // In the child: refuse arch_prctl, load, exit 0 with the message if the
  // load failed.
  auto loadWithoutArchPrctl = [&] {
    sock_filter refuseArchPrctl[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_arch_prctl, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    sock_fprog program{4, refuseArchPrctl};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
      std::exit(2);
    std::unique_ptr<Model> model;
    Status status = Model::loadMemory(bytes->data(), bytes->size(), 1, model);
    std::fprintf(stderr, "%s\n", status.message.c_str());
    std::exit(status.ok() ? 1 : 0);
  };
  EXPECT_EXIT(
      loadWithoutArchPrctl(), testing::ExitedWithCode(0),
      "the CPU code uses AMX tiles, and Linux refused this process their "
      "state \\(arch_prctl ARCH_REQ_XCOMP_PERM: Operation not permitted\\)");
}

TEST(Runtime, ModelsLoadedTogetherRunTheirOwnCode) {
  auto json = [](const char *mask) {
    return std::string(R"({"model": "twins", "dtype": "f32", "layers": [)") +
           R"({"name": "layer", "type": "attention", "num_heads": 2, )" +
           R"("num_kv_heads": 1, "head_dim": 8, "mask": ")" + mask + R"("}]})";
  };
  std::unique_ptr<Model> causal = e2e::compileAndLoad(json("causal"), 1);
  std::unique_ptr<Model> dense = e2e::compileAndLoad(json("none"), 1);
  ASSERT_TRUE(causal && dense);
  std::mt19937_64 rng(7);
  ref::Tensor q = e2e::randomF32({1, 2, 5, 8}, rng, -2.0, 2.0);
  ref::Tensor k = e2e::randomF32({1, 1, 5, 8}, rng, -2.0, 2.0);
  ref::Tensor v = e2e::randomF32({1, 1, 5, 8}, rng, -1.0, 1.0);
  std::vector<Tensor> inputs{e2e::toRuntime(q), e2e::toRuntime(k),
                             e2e::toRuntime(v)};
  for (auto [model, mask] : {std::pair{dense.get(), ref::Mask::none()},
                             std::pair{causal.get(), ref::Mask::causal()}}) {
    std::vector<Tensor> outputs;
    Status status = model->run(0, inputs, outputs);
    ASSERT_TRUE(status.ok()) << status.message;
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_LE(ref::maxRelativeError(e2e::fromRuntime(outputs[0]),
                                    ref::sdpa(q, k, v, mask).output),
              1e-5);
  }
}

} // namespace
