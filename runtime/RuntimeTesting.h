//===- RuntimeTesting.h - What tests reach below the C API ------*- C++ -*-===//
//
// Not part of the runtime's interface: a way for tests to run the path that
// device calls take through index inputs without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_RUNTIME_RUNTIMETESTING_H
#define ATTN_RUNTIME_RUNTIMETESTING_H

#include "runtime/attn_runtime.h"

namespace attn::test_hooks {

/// attn_run as attn_run_device runs a call: the index inputs' shapes are
/// checked on the host and their values only by the entry's kernels, whose
/// record of index errors is reported as attn_model_device_status reports
/// it. On the CPU this needs a binary of the CUDA kernels compiled for it
/// (CompileOptions::cpuRunsCudaKernels); an entry whose kernels do not check
/// its index inputs is refused (ATTN_UNSUPPORTED), since nothing would.
attn_status runCheckingIndicesInKernels(attn_model *model, int32_t entry,
                                        const attn_tensor *inputs,
                                        int32_t numInputs,
                                        const attn_tensor *outputs,
                                        int32_t numOutputs);

} // namespace attn::test_hooks

#endif // ATTN_RUNTIME_RUNTIMETESTING_H
