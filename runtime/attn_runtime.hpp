//===- attn_runtime.hpp - Thin C++ wrapper of the runtime C API -*- C++ -*-===//
//
// RAII ownership of a model and tensors that own their data. Errors come
// back as a Status carrying the C status and message; nothing throws.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_HPP
#define ATTN_RUNTIME_HPP

#include "runtime/CheckedSize.h"
#include "runtime/attn_runtime.h"

#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace attn {

/// A C status with its message ("" when ok).
struct Status {
  attn_status code = ATTN_OK;
  std::string message;

  bool ok() const { return code == ATTN_OK; }
  static Status fromC(attn_status code) {
    return {code, code == ATTN_OK ? std::string() : attn_last_error()};
  }
};

/// A dense row-major tensor that owns its elements (zeroed), in 4-byte
/// words.
struct Tensor {
  attn_dtype dtype = ATTN_F32;
  std::vector<int64_t> shape;
  std::vector<uint32_t> storage;

  Tensor() = default;
  /// For shapes known to be small (tests). A shape whose size does not fit
  /// (attn_tensor_bytes) gets no storage, and attn_run refuses it; use
  /// allocate() for shapes that come from users.
  Tensor(attn_dtype dtype, std::vector<int64_t> shape)
      : dtype(dtype), shape(std::move(shape)) {
    size_t bytes = 0;
    if (attn_tensor_bytes(dtype, static_cast<int32_t>(this->shape.size()),
                          this->shape.data(), &bytes) == ATTN_OK)
      storage.assign((bytes + 3) / 4, 0);
  }
  /// A tensor of `dtype` and `shape` into `out`, or an error naming the
  /// shape when its size does not fit or memory runs out.
  static Status allocate(attn_dtype dtype, std::vector<int64_t> shape,
                         Tensor &out) {
    size_t bytes = 0;
    Status status = Status::fromC(attn_tensor_bytes(
        dtype, static_cast<int32_t>(shape.size()), shape.data(), &bytes));
    if (!status.ok())
      return status;
    out.dtype = dtype;
    out.shape = std::move(shape);
#if defined(__cpp_exceptions)
    try {
      out.storage.assign((bytes + 3) / 4, 0);
    } catch (const std::bad_alloc &) {
      out.storage.clear();
      return {ATTN_RUN_ERROR, "out of memory for a tensor of " +
                                  std::to_string(bytes) + " bytes"};
    }
#else
    out.storage.assign((bytes + 3) / 4, 0);
#endif
    return {};
  }
  /// The elements, when the shape's size fits (else 0).
  int64_t numElements() const {
    return checkedTensorBytes(shape, 1).value_or(0);
  }
  float *f32() { return reinterpret_cast<float *>(storage.data()); }
  const float *f32() const {
    return reinterpret_cast<const float *>(storage.data());
  }
  int32_t *i32() { return reinterpret_cast<int32_t *>(storage.data()); }
  /// The raw bits of f16 and bf16 elements.
  uint16_t *bits16() { return reinterpret_cast<uint16_t *>(storage.data()); }
  const uint16_t *bits16() const {
    return reinterpret_cast<const uint16_t *>(storage.data());
  }
  /// The C view; valid while this tensor lives and is not resized.
  attn_tensor view() const {
    return {dtype, static_cast<int32_t>(shape.size()), shape.data(),
            const_cast<uint32_t *>(storage.data())};
  }
};

/// A loaded model.
class Model {
public:
  static Status loadFile(const std::string &path, int threads,
                         std::unique_ptr<Model> &out) {
    attn_model *raw = nullptr;
    Status status =
        Status::fromC(attn_model_load_file(path.c_str(), threads, &raw));
    if (status.ok())
      out.reset(new Model(raw));
    return status;
  }
  static Status loadMemory(const void *data, size_t size, int threads,
                           std::unique_ptr<Model> &out) {
    attn_model *raw = nullptr;
    Status status =
        Status::fromC(attn_model_load_memory(data, size, threads, &raw));
    if (status.ok())
      out.reset(new Model(raw));
    return status;
  }
  ~Model() { attn_model_free(model); }
  Model(const Model &) = delete;
  Model &operator=(const Model &) = delete;

  attn_model *get() const { return model; }
  int numEntries() const { return attn_model_num_entries(model); }

  /// Where run() executes (see attn_model_set_device).
  Status setDevice(attn_device device) {
    return Status::fromC(attn_model_set_device(model, device));
  }

  /// Milliseconds the last run() spent in its kernels (see
  /// attn_model_last_kernel_ms).
  Status lastKernelMs(double &milliseconds) const {
    return Status::fromC(attn_model_last_kernel_ms(model, &milliseconds));
  }

  Status findEntry(const std::string &name, int32_t &entry) const {
    return Status::fromC(attn_model_find_entry(model, name.c_str(), &entry));
  }

  /// Allocates the outputs for `inputs` and runs `entry`.
  Status run(int32_t entry, const std::vector<Tensor> &inputs,
             std::vector<Tensor> &outputs) const {
    std::vector<attn_tensor> in;
    for (const Tensor &t : inputs)
      in.push_back(t.view());
    int32_t numInputs = static_cast<int32_t>(in.size());
    int32_t numOutputs = attn_entry_num_outputs(model, entry);
    if (numOutputs < 0)
      return {ATTN_INVALID_ARGUMENT, "no entry #" + std::to_string(entry)};
    outputs.assign(static_cast<size_t>(numOutputs), Tensor());
    std::vector<std::vector<int64_t>> shapes(static_cast<size_t>(numOutputs));
    std::vector<int64_t *> shapePtrs;
    // Output i is argument (the entry's inputs) + i, whatever count of
    // inputs was given: attn_entry_output_shapes reports a wrong count.
    const int32_t entryInputs = attn_entry_num_inputs(model, entry);
    for (int32_t i = 0; i < numOutputs; ++i) {
      attn_argument_info info;
      Status status = Status::fromC(
          attn_entry_argument(model, entry, entryInputs + i, &info));
      if (!status.ok())
        return status;
      shapes[i].resize(static_cast<size_t>(info.rank));
      shapePtrs.push_back(shapes[i].data());
      outputs[i].dtype = info.dtype;
    }
    Status status = Status::fromC(attn_entry_output_shapes(
        model, entry, in.data(), numInputs, shapePtrs.data()));
    if (!status.ok())
      return status;
    std::vector<attn_tensor> out;
    for (int32_t i = 0; i < numOutputs; ++i) {
      status = Tensor::allocate(outputs[i].dtype, shapes[i], outputs[i]);
      if (!status.ok())
        return status;
      out.push_back(outputs[i].view());
    }
    return Status::fromC(
        attn_run(model, entry, in.data(), numInputs, out.data(), numOutputs));
  }

  /// Runs `entry` on tensors in the GPU's memory, enqueued on `stream`
  /// (see attn_run_device).
  Status runDevice(int32_t entry, const std::vector<attn_tensor> &inputs,
                   const std::vector<attn_tensor> &outputs,
                   void *stream) const {
    return Status::fromC(attn_run_device(
        model, entry, inputs.data(), static_cast<int32_t>(inputs.size()),
        outputs.data(), static_cast<int32_t>(outputs.size()), stream));
  }
  /// The temporaries' bytes of a call (see attn_entry_workspace_bytes).
  Status workspaceBytes(int32_t entry, const std::vector<attn_tensor> &inputs,
                        size_t &bytes) const {
    return Status::fromC(attn_entry_workspace_bytes(
        model, entry, inputs.data(), static_cast<int32_t>(inputs.size()),
        &bytes));
  }
  /// See attn_model_set_workspace.
  Status setWorkspace(void *devicePointer, size_t bytes) {
    return Status::fromC(attn_model_set_workspace(model, devicePointer, bytes));
  }
  /// attn_model_device_status: the first index error the kernels of
  /// runDevice calls found, once their streams are synchronised.
  Status deviceStatus() {
    return Status::fromC(attn_model_device_status(model));
  }

private:
  explicit Model(attn_model *model) : model(model) {}
  attn_model *model;
};

} // namespace attn

#endif // ATTN_RUNTIME_HPP
