//===- AttnbFuzzer.cpp - libFuzzer target: the .attnb loader and programs -===//
//
// An .attnb holds native code and is trusted like a shared library
// (docs/runtime.md); its checksum catches corruption, not tampering. Within
// that, the runtime must never misbehave on what it reads and interprets.
// So each input is tried twice:
//
//  1. as it is, through attn_model_load_memory (identifier, verifier,
//     version, checksum);
//  2. as a model whose checksum is made to match and whose CPU code is
//     replaced by the trusted code of the seed model of the same name
//     (nothing mutated is ever executed): loaded through the C API (every
//     signature, program and kernel ABI record checked), then each entry's
//     host program is bound to small inputs and interpreted with no kernel
//     behind its dispatches (checked arithmetic, temporaries, assertions).
//
// Any crash, sanitizer report or leak is a bug; errors are the expected
// outcome of most inputs.
//
//===----------------------------------------------------------------------===//

#include "runtime/CheckedSize.h"
#include "runtime/Checksum.h"
#include "runtime/HostProgram.h"
#include "runtime/attn_runtime.h"
#include "runtime/schemas/attnb_generated.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fb = attn::fb;

namespace {

/// The trusted CPU code of each seed model (ATTN_FUZZ_SEED_DIR, compiled by
/// attnc at build time), by model name.
std::map<std::string, std::vector<uint8_t>> &trustedCode() {
  static std::map<std::string, std::vector<uint8_t>> code = [] {
    std::map<std::string, std::vector<uint8_t>> found;
    DIR *dir = opendir(ATTN_FUZZ_SEED_DIR);
    if (!dir)
      return found;
    while (dirent *file = readdir(dir)) {
      std::string name = file->d_name;
      if (name.size() < 6 || name.substr(name.size() - 6) != ".attnb")
        continue;
      std::string path = std::string(ATTN_FUZZ_SEED_DIR) + "/" + name;
      std::ifstream in(path, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
      flatbuffers::Verifier verifier(
          reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
      if (!fb::VerifyBinaryBuffer(verifier))
        continue;
      const fb::Model *model = flatbuffers::GetRoot<fb::Model>(
          fb::GetBinary(bytes.data())->model()->data());
      if (model->name() && model->cpu() && model->cpu()->shared_object())
        found[model->name()->str()].assign(
            model->cpu()->shared_object()->begin(),
            model->cpu()->shared_object()->end());
    }
    closedir(dir);
    return found;
  }();
  return code;
}

/// The model as a file whose checksum matches it.
std::string wrap(fb::ModelT &model) {
  flatbuffers::FlatBufferBuilder inner;
  inner.Finish(fb::Model::Pack(inner, &model));
  flatbuffers::FlatBufferBuilder outer;
  outer.ForceVectorAlignment(inner.GetSize(), sizeof(uint8_t), 16);
  auto nested = outer.CreateVector(inner.GetBufferPointer(), inner.GetSize());
  outer.Finish(fb::CreateBinary(
                   outer, /*format_version=*/9, nested,
                   attn::fnv1a64(inner.GetBufferPointer(), inner.GetSize())),
               fb::BinaryIdentifier());
  return std::string(reinterpret_cast<const char *>(outer.GetBufferPointer()),
                     outer.GetSize());
}

/// Interprets each entry's CPU program on small inputs with no kernels:
/// the binding checks and the interpreter, exactly as attn_run uses them.
void interpretPrograms(const std::string &file) {
  const fb::Model *model = flatbuffers::GetRoot<fb::Model>(
      fb::GetBinary(file.data())->model()->data());
  std::map<std::string, attn::host::KernelAbi> abis;
  if (!model->cpu() || !model->entries() ||
      attn::host::readKernelAbis(model->cpu()->kernels(), "CPU", abis))
    return;
  for (const fb::Entry *fbEntry : *model->entries()) {
    attn::host::Entry entry;
    if (attn::host::readEntry(fbEntry, entry) ||
        attn::host::checkBindings(entry, entry.cpu, abis, "CPU"))
      continue;
    // Every dynamic size 3; tree inputs a chain (valid for any contract).
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<int32_t>> storage;
    std::vector<attn_tensor> inputs;
    bool small = true;
    for (const attn::host::Signature &sig : entry.inputs) {
      std::vector<int64_t> shape;
      for (size_t d = 0; d < sig.dims.size(); ++d)
        shape.push_back(sig.dims[d] >= 0 ? sig.dims[d] : 3);
      // Inputs are real memory: a mutated static dim may ask for too much.
      std::optional<int64_t> elements = attn::checkedTensorBytes(shape, 1);
      small &= elements && *elements <= (int64_t(1) << 22);
      if (!small)
        break;
      std::vector<int32_t> values(static_cast<size_t>(*elements), 0);
      if (sig.contract == ATTN_CONTRACT_TREE_PARENTS && shape.size() == 2)
        for (int64_t i = 0; i < elements; ++i)
          values[i] = static_cast<int32_t>(i % shape[1]) - 1;
      shapes.push_back(std::move(shape));
      storage.push_back(std::move(values));
    }
    if (!small)
      continue;
    for (size_t i = 0; i < entry.inputs.size(); ++i)
      inputs.push_back({entry.inputs[i].dtype,
                        static_cast<int32_t>(shapes[i].size()),
                        shapes[i].data(), storage[i].data()});
    std::map<std::string, int64_t> bound;
    if (attn::host::bindInputs(entry, inputs.data(),
                               static_cast<int32_t>(inputs.size()), bound) ||
        attn::host::checkContracts(entry, inputs.data()))
      continue;
    std::vector<attn::host::Buffer> buffers;
    for (size_t i = 0; i < entry.inputs.size(); ++i)
      buffers.push_back(
          {storage[i].data(), shapes[i],
           static_cast<size_t>(attn_dtype_size(entry.inputs[i].dtype))});
    for (const attn::host::Signature &sig : entry.outputs)
      buffers.push_back({nullptr, attn::host::outputShape(sig, bound),
                         static_cast<size_t>(attn_dtype_size(sig.dtype))});
    static int64_t dummy;
    attn::host::runProgram(
        entry, entry.cpu, buffers, /*workers=*/2, /*indexRecord=*/nullptr,
        [](size_t, void *&data) {
          data = &dummy; // sized and checked, never touched
          return ATTN_OK;
        },
        [](const attn::host::Step &, int64_t,
           const std::vector<const attn::host::Buffer *> &) {
          return ATTN_OK;
        });
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  attn_model *model = nullptr;
  if (attn_model_load_memory(data, size, 1, &model) == ATTN_OK)
    attn_model_free(model);

  flatbuffers::Verifier verifier(data, size);
  if (size < 8 || !fb::VerifyBinaryBuffer(verifier))
    return 0;
  const fb::Binary *binary = fb::GetBinary(data);
  // A model that does not start 8-byte aligned was tried as it is above
  // (the runtime reads it from a copy).
  if (!binary->model() ||
      reinterpret_cast<uintptr_t>(binary->model()->data()) % 8 != 0)
    return 0;
  flatbuffers::Verifier modelVerifier(binary->model()->data(),
                                      binary->model()->size());
  if (!modelVerifier.VerifyBuffer<fb::Model>(nullptr) ||
      !attn::host::wideVectorsAligned(
          flatbuffers::GetRoot<fb::Model>(binary->model()->data())))
    return 0;
  fb::ModelT unpacked;
  flatbuffers::GetRoot<fb::Model>(binary->model()->data())->UnPackTo(&unpacked);
  if (unpacked.cpu) {
    auto trusted = trustedCode().find(unpacked.name);
    if (trusted == trustedCode().end())
      unpacked.cpu.reset();
    else
      unpacked.cpu->shared_object = trusted->second;
  }
  std::string file = wrap(unpacked);
  if (attn_model_load_memory(file.data(), file.size(), 1, &model) != ATTN_OK)
    return 0;
  attn_model_free(model);
  interpretPrograms(file);
  return 0;
}
