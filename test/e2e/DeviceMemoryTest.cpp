//===- DeviceMemoryTest.cpp - SPEC §8's device memory and streams ---------===//
//
// attn_run_device runs an entry on tensors already in the GPU's memory,
// enqueued on the caller's stream, its temporaries from the model's
// workspace (attn_model_set_workspace) or allocated on the stream. On a
// machine with a GPU: the results equal attn_run's on host copies of the
// same inputs, a call captured in a CUDA graph replays on new inputs, and a
// workspace too small is refused before anything is enqueued. Everywhere:
// the workspace a call needs, and the errors of calls that cannot run
// (a model on the CPU, index inputs of the wrong shapes, bad arguments).
// On a GPU, index inputs in device memory that break their contracts are
// found by the kernels and reported by attn_model_device_status.
//
//===----------------------------------------------------------------------===//

#include "runtime/attn_runtime.hpp"
#include "test/e2e/E2E.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstring>

namespace attn::e2e {
namespace {

const char *kDense = R"({"model": "device", "layers": [
  {"name": "attn", "type": "attention", "num_heads": 4, "num_kv_heads": 2,
   "head_dim": 32, "mask": "causal", "gate": "headwise"}]})";

/// Descriptions of q, k, v, gate for B = 2, Lq, Lk (the data is not read
/// by the workspace query).
std::vector<attn_tensor> denseShapes(int64_t lq, int64_t lk,
                                     std::vector<std::vector<int64_t>> &dims) {
  dims = {{2, 4, lq, 32}, {2, 2, lk, 32}, {2, 2, lk, 32}, {2, 4, lq, 1}};
  std::vector<attn_tensor> tensors;
  for (const std::vector<int64_t> &shape : dims)
    tensors.push_back(
        {ATTN_F32, static_cast<int32_t>(shape.size()), shape.data(), nullptr});
  return tensors;
}

std::unique_ptr<Model> loadOnCpu(const char *json) {
  std::string skip;
  std::unique_ptr<Model> model = compileAndLoadFor(Backend::Cpu, json, 1, skip);
  EXPECT_TRUE(model);
  return model;
}

TEST(DeviceMemory, WorkspaceBytesFollowTheCall) {
  std::unique_ptr<Model> model = loadOnCpu(kDense);
  ASSERT_TRUE(model);
  std::vector<std::vector<int64_t>> dims;
  size_t decode = 0, longDecode = 0, prefill = 0;
  // Decode splits its keys and merges the partials: temporaries that grow
  // with the keys. Prefill writes o directly.
  ASSERT_TRUE(model->workspaceBytes(0, denseShapes(1, 700, dims), decode).ok());
  ASSERT_TRUE(
      model->workspaceBytes(0, denseShapes(1, 7000, dims), longDecode).ok());
  ASSERT_TRUE(
      model->workspaceBytes(0, denseShapes(300, 300, dims), prefill).ok());
  EXPECT_GT(decode, 0u);
  EXPECT_GT(longDecode, decode);
  EXPECT_EQ(prefill, 0u);
  // Partials o [B, H, Lq, S, Dv] and lse [B, H, Lq, S], each padded to
  // 64 bytes: S = ceil(700 / split_keys) splits.
  EXPECT_EQ(decode % 64, 0u);

  // The shapes are checked as attn_run checks them.
  std::vector<attn_tensor> wrong = denseShapes(1, 700, dims);
  dims[1][3] = 31;
  size_t bytes = 0;
  Status status = model->workspaceBytes(0, wrong, bytes);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_NE(status.message.find("input 'k' (#1)"), std::string::npos)
      << status.message;
  EXPECT_EQ(
      attn_entry_workspace_bytes(model->get(), 0, wrong.data(), 4, nullptr),
      ATTN_INVALID_ARGUMENT);
}

TEST(DeviceMemory, DeviceCallsNeedTheGpu) {
  std::unique_ptr<Model> model = loadOnCpu(kDense);
  ASSERT_TRUE(model);
  std::vector<std::vector<int64_t>> dims;
  std::vector<attn_tensor> inputs = denseShapes(1, 9, dims);
  float data[4096] = {};
  for (attn_tensor &t : inputs)
    t.data = data;
  std::vector<int64_t> outDims{2, 4, 1, 32};
  std::vector<attn_tensor> outputs{{ATTN_F32, 4, outDims.data(), data}};
  Status status = model->runDevice(0, inputs, outputs, nullptr);
  EXPECT_EQ(status.code, ATTN_UNSUPPORTED);
  EXPECT_NE(status.message.find("attn_model_set_device(ATTN_DEVICE_CUDA)"),
            std::string::npos)
      << status.message;
  // Checked first: the signature, so that nothing else is reported first.
  outDims[3] = 8;
  status = model->runDevice(0, inputs, outputs, nullptr);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH) << status.message;

  status = model->setWorkspace(data, sizeof(data));
  EXPECT_EQ(status.code, ATTN_UNSUPPORTED);
  EXPECT_NE(status.message.find("for a model on the GPU"), std::string::npos)
      << status.message;
  EXPECT_EQ(model->setWorkspace(nullptr, 16).code, ATTN_INVALID_ARGUMENT);
  EXPECT_EQ(attn_model_set_workspace(nullptr, nullptr, 0),
            ATTN_INVALID_ARGUMENT);
}

TEST(DeviceMemory, IndexShapesAreCheckedBeforeTheDevice) {
  // Index values are the kernels' to check on the device; what the dims
  // state is checked before anything is enqueued.
  std::unique_ptr<Model> model = loadOnCpu(R"({"model": "ragged", "layers": [
    {"name": "attn", "type": "attention", "num_heads": 4, "num_kv_heads": 2,
     "head_dim": 32, "mask": "causal",
     "layout": {"ragged": true, "page_size": 16}}]})");
  ASSERT_TRUE(model);
  float data[8192] = {};
  // q, k_cache, v_cache, page_table, seq_lens, cu_seqlens_q; o.
  std::vector<std::vector<int64_t>> dims{
      {5, 4, 32}, {2, 16, 2, 32}, {2, 16, 2, 32}, {2, 1}, {2}, {4}, {5, 4, 32}};
  std::vector<attn_tensor> tensors;
  for (size_t i = 0; i < dims.size(); ++i)
    tensors.push_back({i >= 3 && i <= 5 ? ATTN_I32 : ATTN_F32,
                       static_cast<int32_t>(dims[i].size()), dims[i].data(),
                       data});
  std::vector<attn_tensor> inputs(tensors.begin(), tensors.end() - 1);
  std::vector<attn_tensor> outputs{tensors.back()};
  Status status = model->runDevice(0, inputs, outputs, nullptr);
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_NE(status.message.find("input 'cu_seqlens_q' (#5) of entry 'attn' "
                                "must hold B + 1 = 3 offsets for the B "
                                "sequences of 'seq_lens' (#4), got 4"),
            std::string::npos)
      << status.message;
  // With matching offsets the call gets as far as the device.
  dims[5] = {3};
  status = model->runDevice(0, inputs, outputs, nullptr);
  EXPECT_EQ(status.code, ATTN_UNSUPPORTED) << status.message;
  // A model that made no device call has no index error to report.
  EXPECT_EQ(attn_model_device_status(model->get()), ATTN_OK);
  EXPECT_EQ(attn_model_device_status(nullptr), ATTN_INVALID_ARGUMENT);
}

//===----------------------------------------------------------------------===//
// On a GPU
//===----------------------------------------------------------------------===//

/// The few CUDA driver calls the GPU tests make themselves, as the runtime
/// declares them (runtime/CudaDriver.cpp): memory, a stream, a graph.
struct TestDriver {
  using CUresult = int;
  using CUdeviceptr = unsigned long long;
  void *library = nullptr;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
  CUresult (*cuCtxSetCurrent)(void *);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
  CUresult (*cuStreamCreate)(void **, unsigned);
  CUresult (*cuStreamDestroy_v2)(void *);
  CUresult (*cuStreamSynchronize)(void *);
  CUresult (*cuStreamBeginCapture_v2)(void *, int);
  CUresult (*cuStreamEndCapture)(void *, void **);
  CUresult (*cuGraphInstantiateWithFlags)(void **, void *, unsigned long long);
  CUresult (*cuGraphLaunch)(void *, void *);
  CUresult (*cuGraphExecDestroy)(void *);
  CUresult (*cuGraphDestroy)(void *);

  bool open() {
    library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library)
      return false;
    bool all = true;
    auto resolve = [&](auto &function, const char *name) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(
          dlsym(library, name));
      all = all && function;
    };
    resolve(cuInit, "cuInit");
    resolve(cuDeviceGet, "cuDeviceGet");
    resolve(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    resolve(cuCtxSetCurrent, "cuCtxSetCurrent");
    resolve(cuMemAlloc_v2, "cuMemAlloc_v2");
    resolve(cuMemFree_v2, "cuMemFree_v2");
    resolve(cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2");
    resolve(cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2");
    resolve(cuStreamCreate, "cuStreamCreate");
    resolve(cuStreamDestroy_v2, "cuStreamDestroy_v2");
    resolve(cuStreamSynchronize, "cuStreamSynchronize");
    resolve(cuStreamBeginCapture_v2, "cuStreamBeginCapture_v2");
    resolve(cuStreamEndCapture, "cuStreamEndCapture");
    resolve(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    resolve(cuGraphLaunch, "cuGraphLaunch");
    resolve(cuGraphExecDestroy, "cuGraphExecDestroy");
    resolve(cuGraphDestroy, "cuGraphDestroy");
    int device = 0;
    void *context = nullptr;
    return all && cuInit(0) == 0 && cuDeviceGet(&device, 0) == 0 &&
           cuDevicePrimaryCtxRetain(&context, device) == 0 &&
           cuCtxSetCurrent(context) == 0;
  }
};

/// A tensor's bytes on the device, freed with it.
struct DeviceTensor {
  TestDriver &driver;
  Tensor host;
  TestDriver::CUdeviceptr pointer = 0;

  DeviceTensor(TestDriver &driver, const Tensor &tensor)
      : driver(driver), host(tensor) {
    EXPECT_EQ(driver.cuMemAlloc_v2(&pointer, bytes()), 0);
    upload();
  }
  ~DeviceTensor() { driver.cuMemFree_v2(pointer); }
  size_t bytes() const { return host.storage.size() * sizeof(uint32_t); }
  void upload() {
    EXPECT_EQ(driver.cuMemcpyHtoD_v2(pointer, host.storage.data(), bytes()), 0);
  }
  Tensor download() {
    Tensor copy = host;
    EXPECT_EQ(driver.cuMemcpyDtoH_v2(copy.storage.data(), pointer, bytes()), 0);
    return copy;
  }
  attn_tensor view() {
    attn_tensor t = host.view();
    t.data = reinterpret_cast<void *>(pointer);
    return t;
  }
};

class DeviceMemoryOnGpu : public testing::Test {
protected:
  void SetUp() override {
    std::string skip;
    model = compileAndLoadFor(Backend::Cuda, kDense, 1, skip);
    if (!skip.empty())
      GTEST_SKIP() << skip;
    ASSERT_TRUE(model);
    ASSERT_TRUE(driver.open()) << "the CUDA driver's test entry points";
    ASSERT_EQ(driver.cuStreamCreate(&stream, 0), 0);
  }
  void TearDown() override {
    if (stream)
      driver.cuStreamDestroy_v2(stream);
  }

  /// q, k, v, gate of random values.
  std::vector<Tensor> randomInputs(int64_t lq, int64_t lk, uint64_t seed) {
    std::mt19937_64 rng(seed);
    return {toRuntime(ref::randomTensor({2, 4, lq, 32}, rng)),
            toRuntime(ref::randomTensor({2, 2, lk, 32}, rng)),
            toRuntime(ref::randomTensor({2, 2, lk, 32}, rng)),
            toRuntime(ref::randomTensor({2, 4, lq, 1}, rng))};
  }
  /// attn_run's output on host copies.
  Tensor hostRun(const std::vector<Tensor> &inputs) {
    std::vector<Tensor> outputs = runEntry(*model, "attn", inputs);
    return outputs.at(0);
  }

  std::unique_ptr<Model> model;
  TestDriver driver;
  void *stream = nullptr;
};

TEST_F(DeviceMemoryOnGpu, StreamCallsEqualHostCalls) {
  // Decode (split-KV, temporaries) and prefill, allocating on the stream.
  for (auto [lq, lk] : {std::pair<int64_t, int64_t>{1, 900}, {70, 90}}) {
    std::vector<Tensor> inputs = randomInputs(lq, lk, 11);
    std::vector<std::unique_ptr<DeviceTensor>> device;
    std::vector<attn_tensor> in;
    for (const Tensor &t : inputs) {
      device.push_back(std::make_unique<DeviceTensor>(driver, t));
      in.push_back(device.back()->view());
    }
    DeviceTensor out(driver, Tensor(ATTN_F32, {2, 4, lq, 32}));
    Status status = model->runDevice(0, in, {out.view()}, stream);
    ASSERT_TRUE(status.ok()) << status.message;
    ASSERT_EQ(driver.cuStreamSynchronize(stream), 0);
    EXPECT_EQ(ref::maxRelativeError(fromRuntime(out.download()),
                                    fromRuntime(hostRun(inputs))),
              0.0)
        << "Lq = " << lq;
  }
}

TEST_F(DeviceMemoryOnGpu, GraphReplaysOnNewInputs) {
  std::vector<Tensor> first = randomInputs(1, 900, 1);
  std::vector<std::unique_ptr<DeviceTensor>> device;
  std::vector<attn_tensor> in;
  for (const Tensor &t : first) {
    device.push_back(std::make_unique<DeviceTensor>(driver, t));
    in.push_back(device.back()->view());
  }
  DeviceTensor out(driver, Tensor(ATTN_F32, {2, 4, 1, 32}));
  size_t bytes = 0;
  ASSERT_TRUE(model->workspaceBytes(0, in, bytes).ok());
  ASSERT_GT(bytes, 0u);
  TestDriver::CUdeviceptr workspace = 0;
  ASSERT_EQ(driver.cuMemAlloc_v2(&workspace, bytes), 0);

  // Too small a workspace is refused before anything is enqueued.
  ASSERT_TRUE(
      model->setWorkspace(reinterpret_cast<void *>(workspace), bytes - 256)
          .ok());
  Status status = model->runDevice(0, in, {out.view()}, stream);
  EXPECT_EQ(status.code, ATTN_INVALID_ARGUMENT);
  EXPECT_NE(status.message.find("needs " + std::to_string(bytes) + " bytes"),
            std::string::npos)
      << status.message;

  // Captured with a workspace (no allocation), then replayed.
  ASSERT_TRUE(
      model->setWorkspace(reinterpret_cast<void *>(workspace), bytes).ok());
  const int kGlobalCapture = 0;
  ASSERT_EQ(driver.cuStreamBeginCapture_v2(stream, kGlobalCapture), 0);
  status = model->runDevice(0, in, {out.view()}, stream);
  void *graph = nullptr, *exec = nullptr;
  ASSERT_EQ(driver.cuStreamEndCapture(stream, &graph), 0);
  ASSERT_TRUE(status.ok()) << status.message;
  ASSERT_EQ(driver.cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
  for (uint64_t seed : {2, 3}) {
    std::vector<Tensor> next = randomInputs(1, 900, seed);
    for (size_t i = 0; i < next.size(); ++i) {
      device[i]->host = next[i];
      device[i]->upload();
    }
    ASSERT_EQ(driver.cuGraphLaunch(exec, stream), 0);
    ASSERT_EQ(driver.cuStreamSynchronize(stream), 0);
    EXPECT_EQ(ref::maxRelativeError(fromRuntime(out.download()),
                                    fromRuntime(hostRun(next))),
              0.0)
        << "replay " << seed;
  }
  driver.cuGraphExecDestroy(exec);
  driver.cuGraphDestroy(graph);
  ASSERT_TRUE(model->setWorkspace(nullptr, 0).ok());
  driver.cuMemFree_v2(workspace);
}

TEST_F(DeviceMemoryOnGpu, KernelsFindBadIndicesInDeviceMemory) {
  std::string skip;
  std::unique_ptr<Model> paged =
      compileAndLoadFor(Backend::Cuda, R"({"model": "paged", "layers": [
        {"name": "attn", "type": "attention", "num_heads": 4,
         "num_kv_heads": 2, "head_dim": 32, "layout": {"page_size": 16}}]})",
                        1, skip);
  ASSERT_TRUE(paged) << skip;
  std::mt19937_64 rng(5);
  Tensor table(ATTN_I32, {2, 3}), lengths(ATTN_I32, {2});
  const int32_t pages[] = {4, 1, 2, 3, 0, 99};
  std::copy(pages, pages + 6, table.i32());
  lengths.i32()[0] = 40;
  lengths.i32()[1] = 20;
  std::vector<Tensor> inputs = {
      toRuntime(ref::randomTensor({2, 4, 1, 32}, rng)),
      toRuntime(ref::randomTensor({5, 16, 2, 32}, rng)),
      toRuntime(ref::randomTensor({5, 16, 2, 32}, rng)), table, lengths};
  std::vector<std::unique_ptr<DeviceTensor>> device;
  std::vector<attn_tensor> in;
  for (const Tensor &t : inputs) {
    device.push_back(std::make_unique<DeviceTensor>(driver, t));
    in.push_back(device.back()->view());
  }
  Tensor pattern(ATTN_F32, {2, 4, 1, 32});
  std::fill(pattern.storage.begin(), pattern.storage.end(), 0x7fc01234u);
  DeviceTensor out(driver, pattern);

  // A page out of range in a page the sequence uses: the call is enqueued,
  // its kernels find it and write nothing.
  device[3]->host.i32()[4] = 5;
  device[3]->upload();
  Status status = paged->runDevice(0, in, {out.view()}, stream);
  ASSERT_TRUE(status.ok()) << status.message;
  ASSERT_EQ(driver.cuStreamSynchronize(stream), 0);
  status = paged->deviceStatus();
  EXPECT_EQ(status.code, ATTN_SIGNATURE_MISMATCH);
  EXPECT_NE(status.message.find("input 'page_table' (#3) of entry 'attn': "
                                "page_table[1][1] = 5 must be a page in [0, "
                                "5)"),
            std::string::npos)
      << status.message;
  EXPECT_EQ(out.download().storage, pattern.storage);
  // Read once: the record is clear again.
  EXPECT_TRUE(paged->deviceStatus().ok());

  // Fixed, the call runs and equals the host call; junk past a sequence's
  // pages is not read.
  device[3]->host = table;
  device[3]->upload();
  status = paged->runDevice(0, in, {out.view()}, stream);
  ASSERT_TRUE(status.ok()) << status.message;
  ASSERT_EQ(driver.cuStreamSynchronize(stream), 0);
  EXPECT_TRUE(paged->deviceStatus().ok());
  std::vector<Tensor> expected = runEntry(*paged, "attn", inputs);
  EXPECT_EQ(out.download().storage, expected.at(0).storage);
}

} // namespace
} // namespace attn::e2e
