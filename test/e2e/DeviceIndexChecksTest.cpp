//===- DeviceIndexChecksTest.cpp - Index inputs checked by the kernels ----===//
//
// Device calls (attn_run_device) cannot have their index inputs read on the
// host, so the CUDA kernels check them (-attn-gpu-index-checks). These
// tests run those kernels on the CPU (CompileOptions::cpuRunsCudaKernels)
// through the path device calls take (attn::test_hooks), for every value
// contract: on valid inputs, with junk where no sequence reads, the
// results equal attn_run's; on an input with one bad element, the call
// fails naming the input, the element and its value as the host's checks
// do, and neither the outputs nor the inputs updated in place change.
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeTesting.h"
#include "runtime/attn_runtime.hpp"
#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <cstring>

namespace attn::e2e {
namespace {

/// An i32 tensor of `shape` holding `values`.
Tensor ints(std::vector<int64_t> shape, std::vector<int32_t> values) {
  Tensor t(ATTN_I32, std::move(shape));
  EXPECT_EQ(values.size(), t.storage.size());
  std::copy(values.begin(), values.end(), t.i32());
  return t;
}

/// Random f32 values in [-1, 1).
Tensor randomValues(std::vector<int64_t> shape, std::mt19937_64 &rng) {
  return toRuntime(randomF32(std::move(shape), rng, -1.0, 1.0));
}

/// One element of an index input made to break its contract, and what
/// both checks (the host's and the kernels') must say.
struct Corruption {
  size_t input;
  size_t element;
  int32_t value;
  std::string message;
};

struct IndexCase {
  std::string name;
  std::string description;
  std::string entry;
  std::function<std::vector<Tensor>(std::mt19937_64 &)> inputs;
  std::vector<Corruption> corruptions;
};

void PrintTo(const IndexCase &c, std::ostream *os) { *os << c.name; }

const char *kPaged = R"({"model": "paged", "layers": [
  {"name": "attn", "type": "attention", "num_heads": 4, "num_kv_heads": 2,
   "head_dim": 16, "mask": "causal", "layout": {"page_size": 16}}]})";

const char *kRagged = R"({"model": "ragged", "layers": [
  {"name": "attn", "type": "attention", "num_heads": 4, "num_kv_heads": 2,
   "head_dim": 16, "mask": "causal", "layout": {"ragged": true}},
  {"name": "paged", "type": "attention", "num_heads": 4, "num_kv_heads": 2,
   "head_dim": 16, "mask": "causal",
   "layout": {"ragged": true, "page_size": 8}}]})";

const char *kPool = R"({"model": "pool", "layers": [
  {"name": "gdn", "type": "linear_attention", "rule": "gated_delta",
   "num_k_heads": 2, "num_v_heads": 4, "k_dim": 8, "v_dim": 8,
   "chunk_size": 16, "layout": {"ragged": true}}]})";

const char *kTree = R"({"model": "tree", "layers": [
  {"name": "attn", "type": "attention", "num_heads": 2, "num_kv_heads": 1,
   "head_dim": 16, "mask": "causal", "tree": true}],
 "speculative": {"max_tree_nodes": 16}})";

const char *kPackedTree = R"({"model": "packed_tree", "layers": [
  {"name": "attn", "type": "attention", "num_heads": 2, "num_kv_heads": 1,
   "head_dim": 16, "mask": "causal", "tree": true,
   "layout": {"ragged": true}}]})";

std::vector<IndexCase> cases() {
  std::vector<IndexCase> all;
  // Paged decode and extend: 2 sequences of 40 and 20 keys in pages of 16
  // out of 5, 3 per row; page_table[1][2] is junk (sequence 1 uses 2).
  all.push_back(
      {"paged",
       kPaged,
       "attn",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{randomValues({2, 4, 3, 16}, rng),
                                    randomValues({5, 16, 2, 16}, rng),
                                    randomValues({5, 16, 2, 16}, rng),
                                    ints({2, 3}, {4, 1, 2, 3, 0, 99}),
                                    ints({2}, {40, 20})};
       },
       {{3, 4, 9,
         "input 'page_table' (#3) of entry 'attn': page_table[1][1] = 9 "
         "must be a page in [0, 5)"},
        {3, 0, -1,
         "input 'page_table' (#3) of entry 'attn': page_table[0][0] = -1 "
         "must be a page in [0, 5)"},
        {4, 0, 49,
         "input 'seq_lens' (#4) of entry 'attn': seq_lens[0] = 49 must be in "
         "[0, 48]"},
        {4, 1, 2,
         "input 'seq_lens' (#4) of entry 'attn': seq_lens[1] = 2 must be at "
         "least the 3 queries (a causal or chunked mask places query i at "
         "seq_lens[b] - "
         "Lq + i)"}}});
  // Appending 3 tokens to the cache of 5 pages of 16: slots 5, -1, 17.
  all.push_back(
      {"cache_slots",
       kPaged,
       "attn.append",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{
             randomValues({3, 2, 16}, rng), randomValues({3, 2, 16}, rng),
             ints({3}, {5, -1, 17}), randomValues({5, 16, 2, 16}, rng),
             randomValues({5, 16, 2, 16}, rng)};
       },
       {{2, 2, 80,
         "input 'slots' (#2) of entry 'attn.append': slots[2] = 80 must be "
         "-1 or a slot of 'k_cache' in [0, 80)"},
        {2, 1, -2,
         "input 'slots' (#2) of entry 'attn.append': slots[1] = -2 must be "
         "-1 or a slot of 'k_cache' in [0, 80)"},
        {2, 2, 5,
         "input 'slots' (#2) of entry 'attn.append': slots[2] = 5 is also "
         "slots[0]: each token needs its own slot"}}});
  // A ragged batch of 3, 0 and 4 rows over 4, 2 and 5 keys.
  all.push_back(
      {"ragged_offsets",
       kRagged,
       "attn",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{
             randomValues({7, 4, 16}, rng), randomValues({11, 2, 16}, rng),
             randomValues({11, 2, 16}, rng), ints({4}, {0, 3, 3, 7}),
             ints({4}, {0, 4, 6, 11})};
       },
       {{3, 0, 1,
         "input 'cu_seqlens_q' (#3) of entry 'attn': cu_seqlens_q[0] = 1 "
         "must be 0"},
        {3, 2, 2,
         "input 'cu_seqlens_q' (#3) of entry 'attn': cu_seqlens_q[2] = 2 "
         "must be at least cu_seqlens_q[1] = 3"},
        {3, 3, 8,
         "input 'cu_seqlens_q' (#3) of entry 'attn': cu_seqlens_q[3] = 8 "
         "must be 7"},
        {4, 3, 10,
         "input 'cu_seqlens_k' (#4) of entry 'attn': cu_seqlens_k[3] = 10 "
         "must be 11"},
        {4, 1, 2,
         "input 'cu_seqlens_k' (#4) of entry 'attn': sequence 0 has 2 keys "
         "but 3 query rows"}}});
  // The same batch over a paged cache of 4 pages of 8.
  all.push_back(
      {"ragged_paged",
       kRagged,
       "paged",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{randomValues({7, 4, 16}, rng),
                                    randomValues({4, 8, 2, 16}, rng),
                                    randomValues({4, 8, 2, 16}, rng),
                                    ints({3, 2}, {3, -7, 0, 1, 2, 1}),
                                    ints({3}, {4, 0, 13}),
                                    ints({4}, {0, 3, 3, 7})};
       },
       {{3, 5, 4,
         "input 'page_table' (#3) of entry 'paged': page_table[2][1] = 4 "
         "must be a page in [0, 4)"},
        {4, 2, 17,
         "input 'seq_lens' (#4) of entry 'paged': seq_lens[2] = 17 must be "
         "in [0, 16]"},
        {4, 0, 2,
         "input 'seq_lens' (#4) of entry 'paged': seq_lens[0] = 2 must be at "
         "least the 3 queries"},
        {5, 1, 4,
         "input 'cu_seqlens_q' (#5) of entry 'paged': cu_seqlens_q[2] = 3 "
         "must be at least cu_seqlens_q[1] = 4"}}});
  // Empty sequences and a page table of no pages: the lengths are still
  // checked (a thread per sequence at least).
  all.push_back(
      {"no_pages",
       kRagged,
       "paged",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{randomValues({0, 4, 16}, rng),
                                    randomValues({4, 8, 2, 16}, rng),
                                    randomValues({4, 8, 2, 16}, rng),
                                    ints({2, 0}, {}),
                                    ints({2}, {0, 0}),
                                    ints({3}, {0, 0, 0})};
       },
       {{4, 1, 3,
         "input 'seq_lens' (#4) of entry 'paged': seq_lens[1] = 3 must be "
         "in [0, 0]"}}});
  // A ragged linear batch of 5, 0 and 12 tokens with states in a pool of 4.
  all.push_back(
      {"pool_slots",
       kPool,
       "gdn",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{
             randomValues({17, 2, 8}, rng),
             randomValues({17, 2, 8}, rng),
             randomValues({17, 4, 8}, rng),
             toRuntime(randomF32({17, 4}, rng, -0.5, 0.0)),
             toRuntime(randomF32({17, 4}, rng, 0.0, 1.0)),
             randomValues({4, 4, 8, 8}, rng),
             ints({3}, {2, 0, 3}),
             ints({4}, {0, 5, 5, 17})};
       },
       {{6, 1, 4,
         "input 'state_idx' (#6) of entry 'gdn': state_idx[1] = 4 "
         "must be a slot of 'states' in [0, 4)"},
        {6, 2, 2,
         "input 'state_idx' (#6) of entry 'gdn': state_idx[2] = 2 "
         "is also state_idx[0]: each sequence needs its own slot"},
        {7, 3, 16,
         "input 'cu_seqlens' (#7) of entry 'gdn': cu_seqlens[3] = 16 must be "
         "17"}}});
  // Trees of 6 nodes, and the accepted paths of 2 of them.
  all.push_back(
      {"tree_parents",
       kTree,
       "attn.tree",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{
             randomValues({2, 2, 6, 16}, rng), randomValues({2, 1, 9, 16}, rng),
             randomValues({2, 1, 9, 16}, rng),
             ints({2, 6}, {-1, 0, 0, 1, 1, 2, -1, 0, 1, 2, 3, 0})};
       },
       {{3, 0, 0,
         "input 'parents' (#3) of entry 'attn.tree': parents[0][0] = 0 must "
         "be -1 (the root)"},
        {3, 9, 3,
         "input 'parents' (#3) of entry 'attn.tree': parents[1][3] = 3 must "
         "be in [0, 3)"},
        {3, 11, -1,
         "input 'parents' (#3) of entry 'attn.tree': parents[1][5] = -1 must "
         "be in [0, 5)"}}});
  all.push_back(
      {"tree_path",
       kTree,
       "attn.compact",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{
             randomValues({2, 1, 9, 16}, rng), randomValues({2, 1, 9, 16}, rng),
             ints({2, 6}, {0, 2, 5, 77, 77, 77, 0, 1, -3, -3, -3, -3}),
             ints({2}, {3, 2})};
       },
       {{3, 1, 7,
         "input 'length' (#3) of entry 'attn.compact': length[1] = 7 must be "
         "in [0, 6] (the nodes of 'path')"},
        {2, 7, 6,
         "input 'path' (#2) of entry 'attn.compact': path[1][1] = 6 must be "
         "a tree node in [0, 6)"}}});
  // Trees of 4 nodes over packed keys: sequences of 9, 4 and 7 keys, each
  // holding its tree; then the accepted paths compacted within them.
  all.push_back(
      {"packed_tree_offsets",
       kPackedTree,
       "attn.tree",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{
             randomValues({3, 2, 4, 16}, rng), randomValues({20, 1, 16}, rng),
             randomValues({20, 1, 16}, rng),
             ints({3, 4}, {-1, 0, 0, 1, -1, 0, 1, 2, -1, 0, 0, 0}),
             ints({4}, {0, 9, 13, 20})};
       },
       {{4, 2, 12,
         "input 'cu_seqlens_k' (#4) of entry 'attn.tree': sequence 1 has 3 "
         "keys but 4 tree nodes in 'q' (each sequence's last T keys are its "
         "tree's)"},
        {4, 3, 19,
         "input 'cu_seqlens_k' (#4) of entry 'attn.tree': cu_seqlens_k[3] = "
         "19 must be 20"}}});
  all.push_back(
      {"packed_tree_compact",
       kPackedTree,
       "attn.compact",
       [](std::mt19937_64 &rng) {
         return std::vector<Tensor>{
             randomValues({20, 1, 16}, rng), randomValues({20, 1, 16}, rng),
             ints({3, 4}, {0, 2, -1, -1, 0, 1, 2, 3, 0, -5, -5, -5}),
             ints({3}, {2, 4, 1}), ints({4}, {0, 9, 13, 20})};
       },
       {{4, 1, 3,
         "input 'cu_seqlens_k' (#4) of entry 'attn.compact': sequence 0 has "
         "3 keys but 4 tree nodes in 'path' (each sequence's last T keys are "
         "its tree's)"},
        {2, 1, 4,
         "input 'path' (#2) of entry 'attn.compact': path[0][1] = 4 must be "
         "a tree node in [0, 4)"}}});
  // Paths of no nodes: their lengths are still checked.
  all.push_back({"empty_paths",
                 kTree,
                 "attn.compact",
                 [](std::mt19937_64 &rng) {
                   return std::vector<Tensor>{randomValues({2, 1, 9, 16}, rng),
                                              randomValues({2, 1, 9, 16}, rng),
                                              ints({2, 0}, {}),
                                              ints({2}, {0, 0})};
                 },
                 {{3, 0, 1,
                   "input 'length' (#3) of entry 'attn.compact': length[0] = "
                   "1 must be in [0, 0] (the nodes of 'path')"}}});
  return all;
}

class DeviceIndexChecks : public testing::TestWithParam<IndexCase> {};

/// Runs `entry` of `model` on `inputs` into outputs first filled with a
/// pattern; the kernels check the index inputs when `inKernels`.
Status runInto(Model &model, int32_t entry, const std::vector<Tensor> &inputs,
               std::vector<Tensor> &outputs, bool inKernels) {
  std::vector<attn_tensor> in, out;
  for (const Tensor &t : inputs)
    in.push_back(t.view());
  for (Tensor &t : outputs) {
    std::fill(t.storage.begin(), t.storage.end(), 0x7fc01234u);
    out.push_back(t.view());
  }
  attn_model *m = model.get();
  attn_status code =
      inKernels ? test_hooks::runCheckingIndicesInKernels(
                      m, entry, in.data(), static_cast<int32_t>(in.size()),
                      out.data(), static_cast<int32_t>(out.size()))
                : attn_run(m, entry, in.data(), static_cast<int32_t>(in.size()),
                           out.data(), static_cast<int32_t>(out.size()));
  return {code, code == ATTN_OK ? "" : attn_last_error()};
}

TEST_P(DeviceIndexChecks, KernelsCheckAsTheHostDoes) {
  const IndexCase &c = GetParam();
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(Backend::CudaKernelsOnCpu, c.description, 2, skip);
  ASSERT_TRUE(model);
  int32_t entry = -1;
  ASSERT_TRUE(model->findEntry(c.entry, entry).ok());
  std::mt19937_64 rng(7);
  const std::vector<Tensor> valid = c.inputs(rng);

  // Valid inputs: the same results either way (in-place inputs included).
  std::vector<Tensor> expected;
  ASSERT_TRUE(model->run(entry, valid, expected).ok());
  std::vector<Tensor> hostInputs = valid, deviceInputs = valid;
  std::vector<Tensor> hostOut = expected, deviceOut = expected;
  Status status = runInto(*model, entry, hostInputs, hostOut, false);
  ASSERT_TRUE(status.ok()) << status.message;
  status = runInto(*model, entry, deviceInputs, deviceOut, true);
  ASSERT_TRUE(status.ok()) << status.message;
  for (size_t i = 0; i < hostOut.size(); ++i)
    EXPECT_EQ(hostOut[i].storage, deviceOut[i].storage) << "output #" << i;
  for (size_t i = 0; i < valid.size(); ++i)
    EXPECT_EQ(hostInputs[i].storage, deviceInputs[i].storage) << "input #" << i;

  for (const Corruption &bad : c.corruptions) {
    SCOPED_TRACE(bad.message);
    std::vector<Tensor> inputs = valid;
    inputs[bad.input].i32()[bad.element] = bad.value;
    std::vector<Tensor> outputs = expected;
    status = runInto(*model, entry, inputs, outputs, false);
    EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
    EXPECT_NE(status.message.find(bad.message), std::string::npos)
        << "host: " << status.message;

    status = runInto(*model, entry, inputs, outputs, true);
    EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
    EXPECT_NE(status.message.find(bad.message), std::string::npos)
        << "kernels: " << status.message;
    EXPECT_NE(status.message.find("found on the device"), std::string::npos)
        << status.message;
    // Nothing written: the outputs keep their pattern, in-place inputs
    // their values.
    for (const Tensor &t : outputs)
      EXPECT_TRUE(std::all_of(t.storage.begin(), t.storage.end(),
                              [](uint32_t x) { return x == 0x7fc01234u; }));
    for (size_t i = 0; i < valid.size(); ++i)
      EXPECT_EQ(inputs[i].storage,
                i == bad.input ? inputs[i].storage : valid[i].storage)
          << "input #" << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllContracts, DeviceIndexChecks,
                         testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<IndexCase> &info) {
                           return info.param.name;
                         });

TEST(DeviceIndexChecksRefused, CpuKernelsDoNotCheckIndices) {
  std::string skip;
  std::unique_ptr<Model> model =
      compileAndLoadFor(Backend::Cpu, kPaged, 1, skip);
  ASSERT_TRUE(model);
  std::mt19937_64 rng(1);
  std::vector<Tensor> inputs = {
      randomValues({1, 4, 1, 16}, rng), randomValues({2, 16, 2, 16}, rng),
      randomValues({2, 16, 2, 16}, rng), ints({1, 1}, {7}), ints({1}, {3})};
  std::vector<Tensor> outputs = {Tensor(ATTN_F32, {1, 4, 1, 16})};
  Status status = runInto(*model, 0, inputs, outputs, true);
  EXPECT_EQ(status.code, ATTN_UNSUPPORTED);
  EXPECT_NE(status.message.find("do not check its index inputs"),
            std::string::npos)
      << status.message;
}

} // namespace
} // namespace attn::e2e
