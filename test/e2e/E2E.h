//===- E2E.h - What the end-to-end tests share ------------------*- C++ -*-===//
//
// Compiling a model description in-process and loading it with the
// runtime, and moving tensors between the float64 reference and the
// runtime's f32 tensors.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEST_E2E_E2E_H
#define ATTN_TEST_E2E_E2E_H

#include "compiler/Compile.h"
#include "runtime/attn_runtime.hpp"
#include "test/reference/Reference.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

namespace attn::e2e {

inline Tensor toRuntime(const ref::Tensor &t) {
  Tensor out(ATTN_F32, t.shape());
  for (int64_t i = 0; i < t.size(); ++i)
    out.f32()[i] = static_cast<float>(t.values()[i]);
  return out;
}

inline ref::Tensor fromRuntime(const Tensor &t) {
  ref::Tensor out(t.shape);
  for (int64_t i = 0; i < out.size(); ++i)
    out.values()[i] = t.f32()[i];
  return out;
}

/// Uniform values in [lo, hi), rounded to f32 so the reference sees exactly
/// the values the compiled code sees.
inline ref::Tensor randomF32(std::vector<int64_t> shape, std::mt19937_64 &rng,
                             double lo, double hi) {
  ref::Tensor t = ref::randomTensor(std::move(shape), rng, lo, hi);
  for (double &x : t.values())
    x = static_cast<float>(x);
  return t;
}

/// Compiles `json` for the host CPU and loads it on `threads` threads; null
/// (and a test failure) if either fails.
inline std::unique_ptr<Model>
compileAndLoad(const std::string &json, int threads,
               const mlir::attn::CompileOptions &options = {}) {
  llvm::Expected<std::string> binary = mlir::attn::compileModelDescription(
      json, mlir::attn::CpuTarget::host(), options);
  EXPECT_TRUE(static_cast<bool>(binary)) << llvm::toString(binary.takeError());
  if (!binary)
    return nullptr;
  std::unique_ptr<Model> model;
  Status status =
      Model::loadMemory(binary->data(), binary->size(), threads, model);
  EXPECT_TRUE(status.ok()) << status.message;
  return model;
}

} // namespace attn::e2e

#endif // ATTN_TEST_E2E_E2E_H
