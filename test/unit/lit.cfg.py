# -*- Python -*-
# The GoogleTest unit tests: every executable named *Tests under
# build/test/unit, one lit test per GoogleTest case.
import os

import lit.formats

config.name = "attn-unit"
config.suffixes = []
config.test_source_root = os.path.join(config.attn_obj_root, "test", "unit")
config.test_exec_root = config.test_source_root
config.test_format = lit.formats.GoogleTest(".", "Tests")

# Every call fills its temporaries and outputs with NaN / -1 bytes first
# (the runtime's ATTN_POISON), so a kernel that reads what nothing wrote,
# or leaves part of an output unwritten, fails its test.
config.environment["ATTN_POISON"] = "1"

# Every call runs on copies of its tensors, and on temporaries, that end at
# an inaccessible page, the inputs it only reads read-only (the runtime's
# ATTN_GUARD), so a kernel that reads or writes past a buffer's end, or
# writes into an input, faults instead of passing.
config.environment["ATTN_GUARD"] = "1"

# The e2e cases of the CUDA kernels' bodies on the CPU
# (`*_cuda_kernels_on_cpu`) run once, in test/stressed, with their threads
# in another order and their buffers poisoned: that catches every fault the
# usual order catches and more (docs/testing.md), at a third of this
# suite's time.
config.environment["GTEST_FILTER"] = "-*cuda_kernels_on_cpu"
