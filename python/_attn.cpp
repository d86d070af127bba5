//===- _attn.cpp - The native half of the attn Python package -------------===//
//
// A thin layer over the runtime's C API (runtime/attn_runtime.h): a loaded
// model, its entries and signatures, and `run`, which hands NumPy arrays
// and PyTorch CPU tensors (by their data pointers) to attn_run in place,
// and PyTorch CUDA tensors to attn_run_device on torch's current stream;
// the package turns other DLPack producers into NumPy views first, without
// copying. Everything the
// runtime checks it also reports: its message becomes attn.Error. The GIL
// is released while an entry runs, so Python threads may call one model at
// once (the runtime allows it).
//
// pybind11 rather than nanobind: Debian 12 packages pybind11 (2.10) but not
// nanobind, and scripts/setup.sh installs from Debian only. NumPy arrays
// and torch tensors are read in place; other DLPack producers become NumPy
// views of the same memory in the Python half.
//
//===----------------------------------------------------------------------===//

#include "runtime/attn_runtime.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

/// attn.Error: a ValueError carrying the runtime's message.
struct AttnError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(attn_status status) {
  if (status != ATTN_OK)
    throw AttnError(attn_last_error());
}

/// The attn dtype a NumPy array of `dtype` holds, for an argument of
/// `expected`: bf16 has no NumPy dtype, so a bf16 argument takes its bit
/// patterns as 2-byte integers or ml_dtypes' bfloat16. An array of the other
/// byte order (`>f4` on this little-endian host, as np.load gives for such
/// a file) holds none of them: read as is, its values would be garbage.
std::optional<attn_dtype> dtypeOf(const py::dtype &dtype, attn_dtype expected) {
  if (!dtype.attr("isnative").cast<bool>())
    return std::nullopt;
  const char kind = dtype.kind();
  const py::ssize_t size = dtype.itemsize();
  if (kind == 'f' && size == 4)
    return ATTN_F32;
  if (kind == 'f' && size == 2)
    return ATTN_F16;
  if (kind == 'i' && size == 4)
    return ATTN_I32;
  if (expected == ATTN_BF16 && size == 2 &&
      (kind == 'i' || kind == 'u' ||
       py::str(dtype.attr("name")).cast<std::string>() == "bfloat16"))
    return ATTN_BF16;
  return std::nullopt;
}

/// One argument's description, from attn_entry_argument.
struct Argument {
  std::string name;
  attn_dtype dtype;
  std::vector<std::optional<int64_t>> dims;
  std::vector<std::string> symbols;
  /// Per dim: > 0 when the size is ceil(symbol / ceilDiv), capped at
  /// atMost when that is >= 0 (attn_argument_info).
  std::vector<int64_t> ceilDivs, atMosts;
  /// An input the call updates in place (SPEC §8: a state pool).
  bool inPlace = false;
};

class Model {
public:
  static std::unique_ptr<Model> fromFile(const std::string &path, int threads) {
    attn_model *model = nullptr;
    check(attn_model_load_file(path.c_str(), threads, &model));
    return std::unique_ptr<Model>(new Model(model));
  }
  static std::unique_ptr<Model> fromBytes(const py::bytes &data, int threads) {
    std::string_view bytes = data;
    attn_model *model = nullptr;
    check(attn_model_load_memory(bytes.data(), bytes.size(), threads, &model));
    return std::unique_ptr<Model>(new Model(model));
  }
  ~Model() { attn_model_free(model); }
  Model(const Model &) = delete;
  Model &operator=(const Model &) = delete;

  std::string name() const { return attn_model_name(model); }
  int threads() const { return attn_model_num_threads(model); }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (int32_t i = 0, e = attn_model_num_entries(model); i < e; ++i)
      names.push_back(attn_entry_name(model, i));
    return names;
  }

  std::string device() const {
    return attn_model_device(model) == ATTN_DEVICE_CUDA ? "cuda" : "cpu";
  }
  void setDevice(const std::string &device) {
    if (device != "cpu" && device != "cuda")
      throw AttnError("device must be \"cpu\" or \"cuda\", got \"" + device +
                      "\"");
    check(attn_model_set_device(model, device == "cuda" ? ATTN_DEVICE_CUDA
                                                        : ATTN_DEVICE_CPU));
  }

  /// (inputs, outputs) of `entry`, each a list of Arguments.
  std::pair<std::vector<Argument>, std::vector<Argument>>
  signature(const std::string &entry) const {
    int32_t index = find(entry);
    std::pair<std::vector<Argument>, std::vector<Argument>> result;
    int32_t inputs = attn_entry_num_inputs(model, index);
    int32_t outputs = attn_entry_num_outputs(model, index);
    for (int32_t i = 0; i < inputs + outputs; ++i)
      (i < inputs ? result.first : result.second).push_back(argument(index, i));
    return result;
  }

  /// The shapes of `entry`'s outputs for `inputs`.
  std::vector<std::vector<int64_t>> outputShapes(const std::string &entry,
                                                 const py::list &inputs) {
    int32_t index = find(entry);
    Call call = prepare(index, inputs, py::list(), /*withOutputs=*/false);
    return shapesOfOutputs(index, call.inputs);
  }

  /// The bytes of temporaries a call of `entry` on `inputs` needs on the
  /// model's device (attn_entry_workspace_bytes).
  size_t workspaceBytes(const std::string &entry, const py::list &inputs) {
    int32_t index = find(entry);
    Call call = prepare(index, inputs, py::list(), /*withOutputs=*/false);
    size_t bytes = 0;
    check(attn_entry_workspace_bytes(model, index, call.inputs.data(),
                                     static_cast<int32_t>(call.inputs.size()),
                                     &bytes));
    return bytes;
  }

  /// Device calls' workspace: `bytes` of GPU memory at `pointer` (0, 0:
  /// none) (attn_model_set_workspace).
  void setWorkspace(std::uintptr_t pointer, size_t bytes) {
    check(attn_model_set_workspace(model, reinterpret_cast<void *>(pointer),
                                   bytes));
  }

  /// Raises the first index error that the kernels of device calls found
  /// (attn_model_device_status), after the caller synchronised them.
  void checkDevice() {
    attn_status status;
    {
      py::gil_scoped_release release;
      status = attn_model_device_status(model);
    }
    check(status);
  }

  /// The shapes of `entry`'s outputs for inputs of these shapes and dtypes
  /// ("f32", "i32", "f16", "bf16"), with no data (torch's Meta kernels).
  std::vector<std::vector<int64_t>>
  outputShapesOf(const std::string &entry,
                 const std::vector<std::vector<int64_t>> &shapes,
                 const std::vector<std::string> &dtypes) {
    int32_t index = find(entry);
    if (shapes.size() != dtypes.size())
      throw AttnError("output_shapes_of: one dtype per shape");
    std::vector<attn_tensor> inputs;
    for (size_t i = 0; i < shapes.size(); ++i) {
      attn_dtype dtype = ATTN_F32;
      for (attn_dtype d : {ATTN_F32, ATTN_I32, ATTN_F16, ATTN_BF16})
        if (dtypes[i] == attn_dtype_name(d))
          dtype = d;
      if (dtypes[i] != attn_dtype_name(dtype))
        throw AttnError("output_shapes_of: unknown dtype '" + dtypes[i] + "'");
      inputs.push_back({dtype, static_cast<int32_t>(shapes[i].size()),
                        shapes[i].data(), nullptr});
    }
    return shapesOfOutputs(index, inputs);
  }

  /// Runs `entry` on `inputs`, writing `outputs` in place; the GIL is
  /// released while it runs. CUDA tensors are enqueued on torch's current
  /// stream of their device, with no copy and no synchronisation (SPEC §8).
  void run(const std::string &entry, const py::list &inputs,
           const py::list &outputs) {
    int32_t index = find(entry);
    Call call = prepare(index, inputs, outputs, /*withOutputs=*/true);
    void *stream = nullptr;
    if (call.onDevice)
      stream = reinterpret_cast<void *>(py::module_::import("torch")
                                            .attr("cuda")
                                            .attr("current_stream")(call.device)
                                            .attr("cuda_stream")
                                            .cast<std::uintptr_t>());
    attn_status status;
    {
      py::gil_scoped_release release;
      status = call.onDevice
                   ? attn_run_device(model, index, call.inputs.data(),
                                     static_cast<int32_t>(call.inputs.size()),
                                     call.outputs.data(),
                                     static_cast<int32_t>(call.outputs.size()),
                                     stream)
                   : attn_run(model, index, call.inputs.data(),
                              static_cast<int32_t>(call.inputs.size()),
                              call.outputs.data(),
                              static_cast<int32_t>(call.outputs.size()));
    }
    check(status);
  }

  /// The C API's own time per call: `repeat` calls of attn_run in a C++
  /// loop, in microseconds (bench/python-overhead.py sets it beside the
  /// Python call's).
  double runMicroseconds(const std::string &entry, const py::list &inputs,
                         const py::list &outputs, int repeat) {
    int32_t index = find(entry);
    Call call = prepare(index, inputs, outputs, /*withOutputs=*/true);
    py::gil_scoped_release release;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeat; ++i)
      if (attn_run(model, index, call.inputs.data(),
                   static_cast<int32_t>(call.inputs.size()),
                   call.outputs.data(),
                   static_cast<int32_t>(call.outputs.size())) != ATTN_OK) {
        py::gil_scoped_acquire acquire;
        check(ATTN_RUN_ERROR);
      }
    std::chrono::duration<double, std::micro> elapsed =
        std::chrono::steady_clock::now() - start;
    return elapsed.count() / repeat;
  }

private:
  explicit Model(attn_model *model) : model(model) {}

  /// The attn_tensors of one call, and the shapes they point to.
  struct Call {
    std::vector<std::vector<int64_t>> shapes;
    std::vector<attn_tensor> inputs, outputs;
    /// CUDA tensors (all of the call's): their torch device.
    bool onDevice = false, onHost = false;
    py::object device;
  };

  /// The output shapes of entry `index` for `inputs` (the runtime's
  /// attn_entry_output_shapes).
  std::vector<std::vector<int64_t>>
  shapesOfOutputs(int32_t index, const std::vector<attn_tensor> &inputs) {
    int32_t outputs = attn_entry_num_outputs(model, index);
    int32_t numInputs = attn_entry_num_inputs(model, index);
    std::vector<std::vector<int64_t>> shapes(outputs);
    std::vector<int64_t *> pointers;
    for (int32_t i = 0; i < outputs; ++i) {
      shapes[i].resize(argument(index, numInputs + i).dims.size());
      pointers.push_back(shapes[i].data());
    }
    check(attn_entry_output_shapes(model, index, inputs.data(),
                                   static_cast<int32_t>(inputs.size()),
                                   pointers.data()));
    return shapes;
  }

  int32_t find(const std::string &entry) const {
    int32_t index = -1;
    check(attn_model_find_entry(model, entry.c_str(), &index));
    return index;
  }

  Argument argument(int32_t entry, int32_t index) const {
    attn_argument_info info;
    check(attn_entry_argument(model, entry, index, &info));
    Argument arg{info.name, info.dtype, {}, {}, {}, {}, info.in_place != 0};
    for (int32_t d = 0; d < info.rank; ++d) {
      arg.dims.push_back(info.dims[d] >= 0 ? std::optional(info.dims[d])
                                           : std::nullopt);
      arg.symbols.push_back(info.symbols[d] ? info.symbols[d] : "");
      arg.ceilDivs.push_back(info.ceil_divs ? info.ceil_divs[d] : 0);
      arg.atMosts.push_back(info.at_mosts ? info.at_mosts[d] : -1);
    }
    return arg;
  }

  /// Checks what the C API cannot see (a NumPy array, C-contiguous, of the
  /// argument's dtype, writable outputs) and describes each array to it.
  Call prepare(int32_t entry, const py::list &inputs, const py::list &outputs,
               bool withOutputs) {
    const int32_t numInputs = attn_entry_num_inputs(model, entry);
    const int32_t numOutputs = attn_entry_num_outputs(model, entry);
    const std::string entryName = attn_entry_name(model, entry);
    if (static_cast<int32_t>(inputs.size()) != numInputs)
      throw AttnError(entryName + ": expected " + std::to_string(numInputs) +
                      " inputs, got " + std::to_string(inputs.size()));
    if (withOutputs && static_cast<int32_t>(outputs.size()) != numOutputs)
      throw AttnError(entryName + ": expected " + std::to_string(numOutputs) +
                      " outputs, got " + std::to_string(outputs.size()));
    Call call;
    call.shapes.reserve(inputs.size() + outputs.size());
    auto describe = [&](py::handle object, int32_t index, bool isOutput) {
      attn_argument_info info;
      check(attn_entry_argument(model, entry, index, &info));
      std::string what = entryName + ": " + (isOutput ? "output" : "input") +
                         " " +
                         std::to_string(isOutput ? index - numInputs : index) +
                         " (" + info.name + ")";
      if (isTorchTensor(object)) {
        describeTorch(object, info, what, call, isOutput);
        return;
      }
      if (!py::isinstance<py::array>(object))
        throw AttnError(
            what + ": expected an array, got " +
            py::str(py::type::of(object).attr("__name__")).cast<std::string>());
      auto array = py::reinterpret_borrow<py::array>(object);
      call.onHost = true;
      if (call.onDevice)
        throw AttnError(what + ": CUDA and CPU tensors in one call; pass all "
                               "of them on one device");
      std::optional<attn_dtype> dtype = dtypeOf(array.dtype(), info.dtype);
      if (!dtype || *dtype != info.dtype)
        throw AttnError(what + ": expected dtype " +
                        attn_dtype_name(info.dtype) + ", got " +
                        py::str(array.dtype()).cast<std::string>());
      if (!(array.flags() & py::array::c_style))
        throw AttnError(what + ": not C-contiguous (a strided view); pass a "
                               "contiguous tensor");
      if ((isOutput || info.in_place) && !array.writeable())
        throw AttnError(what + ": the buffer is read-only" +
                        (isOutput ? "" : " (the call updates it in place)"));
      std::vector<int64_t> &shape =
          call.shapes.emplace_back(array.shape(), array.shape() + array.ndim());
      attn_tensor tensor{*dtype, static_cast<int32_t>(array.ndim()),
                         shape.data(), const_cast<void *>(array.data())};
      (isOutput ? call.outputs : call.inputs).push_back(tensor);
    };
    for (int32_t i = 0; i < numInputs; ++i)
      describe(inputs[i], i, false);
    if (withOutputs)
      for (int32_t i = 0; i < numOutputs; ++i)
        describe(outputs[i], numInputs + i, true);
    return call;
  }

  /// A torch.Tensor, recognized without importing torch: its type's
  /// module and name.
  static bool isTorchTensor(py::handle object) {
    py::handle type = py::type::handle_of(object);
    return py::hasattr(type, "__module__") &&
           py::str(type.attr("__module__")).cast<std::string>() == "torch" &&
           py::hasattr(object, "data_ptr");
  }

  /// Describes a torch tensor by its own data pointer: reading data_ptr,
  /// shape and dtype costs far less than a NumPy view of it. A call's
  /// tensors are all on the CPU or all on the GPU the model runs on (the
  /// first, cuda:0).
  void describeTorch(py::handle tensor, const attn_argument_info &info,
                     const std::string &what, Call &call, bool isOutput) {
    const bool cuda = tensor.attr("is_cuda").cast<bool>();
    if (!cuda && !tensor.attr("is_cpu").cast<bool>())
      throw AttnError(
          what + ": a " +
          py::str(tensor.attr("device").attr("type")).cast<std::string>() +
          " tensor; attn takes CPU and CUDA tensors");
    if (cuda) {
      py::object device = tensor.attr("device");
      py::object index = device.attr("index");
      if (!index.is_none() && index.cast<int64_t>() != 0)
        throw AttnError(what + ": a tensor on " +
                        py::str(device).cast<std::string>() +
                        "; attn runs on the first GPU (cuda:0)");
      call.device = device;
    }
    (cuda ? call.onDevice : call.onHost) = true;
    if (call.onDevice && call.onHost)
      throw AttnError(what + ": CUDA and CPU tensors in one call; pass all "
                             "of them on one device");
    std::string dtypeName = py::str(tensor.attr("dtype")).cast<std::string>();
    std::optional<attn_dtype> dtype;
    if (dtypeName == "torch.float32")
      dtype = ATTN_F32;
    else if (dtypeName == "torch.int32")
      dtype = ATTN_I32;
    else if (dtypeName == "torch.float16")
      dtype = ATTN_F16;
    else if (dtypeName == "torch.bfloat16")
      dtype = ATTN_BF16;
    if (!dtype || *dtype != info.dtype)
      throw AttnError(what + ": expected dtype " + attn_dtype_name(info.dtype) +
                      ", got " + dtypeName);
    if (!tensor.attr("is_contiguous")().cast<bool>())
      throw AttnError(what + ": not C-contiguous (a strided view); pass a "
                             "contiguous tensor");
    std::vector<int64_t> &shape = call.shapes.emplace_back(
        tensor.attr("shape").cast<std::vector<int64_t>>());
    auto data = reinterpret_cast<void *>(
        tensor.attr("data_ptr")().cast<std::uintptr_t>());
    attn_tensor described{*dtype, static_cast<int32_t>(shape.size()),
                          shape.data(), data};
    (isOutput ? call.outputs : call.inputs).push_back(described);
  }

  attn_model *model;
};

} // namespace

PYBIND11_MODULE(_attn, m) {
  m.doc() = "The native half of the attn package: the runtime's C API.";
  py::register_exception<AttnError>(m, "Error", PyExc_ValueError);

  py::class_<Argument>(m, "Argument")
      .def_readonly("name", &Argument::name)
      .def_property_readonly("dtype",
                             [](const Argument &a) {
                               return std::string(attn_dtype_name(a.dtype));
                             })
      .def_readonly("dims", &Argument::dims)
      .def_readonly("symbols", &Argument::symbols)
      .def_readonly("ceil_divs", &Argument::ceilDivs)
      .def_readonly("at_mosts", &Argument::atMosts)
      .def_readonly("in_place", &Argument::inPlace);

  py::class_<Model>(m, "Model")
      .def_static("from_file", &Model::fromFile, py::arg("path"),
                  py::arg("threads") = 0)
      .def_static("from_bytes", &Model::fromBytes, py::arg("data"),
                  py::arg("threads") = 0)
      .def_property_readonly("name", &Model::name)
      .def_property_readonly("threads", &Model::threads)
      .def_property_readonly("entries", &Model::entries)
      .def_property("device", &Model::device, &Model::setDevice)
      .def("signature", &Model::signature, py::arg("entry"))
      .def("output_shapes", &Model::outputShapes, py::arg("entry"),
           py::arg("inputs"))
      .def("workspace_bytes", &Model::workspaceBytes, py::arg("entry"),
           py::arg("inputs"))
      .def("set_workspace", &Model::setWorkspace, py::arg("pointer"),
           py::arg("bytes"))
      .def("check_device", &Model::checkDevice)
      .def("output_shapes_of", &Model::outputShapesOf, py::arg("entry"),
           py::arg("shapes"), py::arg("dtypes"))
      .def("run", &Model::run, py::arg("entry"), py::arg("inputs"),
           py::arg("outputs"))
      .def("run_microseconds", &Model::runMicroseconds, py::arg("entry"),
           py::arg("inputs"), py::arg("outputs"), py::arg("repeat"));
}
