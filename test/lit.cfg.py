# -*- Python -*-
# The attn regression suite: FileCheck tests of the dialect, passes and tools.
import os
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "attn"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".json", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.attn_obj_root, "test")

# Inputs, helpers and the separately configured unit-test suite.
config.excludes = [
    "CMakeLists.txt",
    "lit.cfg.py",
    "lit.site.cfg.py",
    "Inputs",
    "e2e",
    "fuzz",
    "lib",
    "reference",
    "stressed",
    "unit",
]

llvm_config.use_default_substitutions()

# Every call fills its temporaries and outputs with NaN / -1 bytes first
# (the runtime's ATTN_POISON), so a kernel that reads what nothing wrote,
# or leaves part of an output unwritten, fails its test.
config.environment["ATTN_POISON"] = "1"

# Every call runs on copies of its tensors, and on temporaries, that end at
# an inaccessible page, the inputs it only reads read-only (the runtime's
# ATTN_GUARD), so a kernel that reads or writes past a buffer's end, or
# writes into an input, faults instead of passing.
config.environment["ATTN_GUARD"] = "1"
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
config.substitutions.append(("%attn_src_root", config.attn_src_root))
config.substitutions.append(("%python", sys.executable))
# mlir-runner's printing library, for tests that run lowered IR.
config.substitutions.append(
    (
        "%mlir_c_runner_utils",
        os.path.join(
            os.path.dirname(config.llvm_tools_dir), "lib", "libmlir_c_runner_utils.so"
        ),
    )
)
llvm_config.add_tool_substitutions(
    ["attn-opt", "attnc", "attn-run", "cuda-attention-bench"],
    [config.attn_tools_dir, config.llvm_tools_dir],
)

# CUDA: the toolkit (libdevice + ptxas) lets tests build PTX and cubins;
# the driver lets them run. Neither is needed for the rest of the suite.
cuda_path = os.environ.get("ATTN_CUDA_PATH", "/usr/local/cuda")
if os.access(os.path.join(cuda_path, "bin", "ptxas"), os.X_OK) and os.path.exists(
    os.path.join(cuda_path, "nvvm", "libdevice", "libdevice.10.bc")
):
    config.available_features.add("cuda-toolkit")
config.substitutions.append(("%cuda_path", cuda_path))
try:
    import ctypes

    ctypes.CDLL("libcuda.so.1")
    config.available_features.add("cuda-driver")
except OSError:
    pass
