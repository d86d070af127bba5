# -*- Python -*-
# The e2e tests' CUDA kernels run on the CPU (`*_cuda_kernels_on_cpu`; the
# unit suite leaves them out), as a GPU may run them at their least
# convenient (ATTN_STRESS_CUDA_KERNELS): their asynchronous copies landing
# as late as their waits allow, their targets NaN until then
# (-attn-defer-async-copies), so that a tile read before the wait for its
# copies is not there yet, and the results of asynchronous warpgroup
# products appearing only at their waits, NaN where their operands changed
# in flight (-attn-defer-warpgroup-products); their threads in
# another order
# (even blocks: each thread loop last thread first, warp-synchronized loops
# warp by warp, last warp first; odd blocks first to last:
# -attn-reorder-thread-loops), so that a race reads something else, and
# their shared and register buffers starting as NaN
# (-attn-poison-kernel-buffers), so that a read of what nothing wrote gives
# NaN.
import os

import lit.formats

config.name = "attn-stressed"
config.suffixes = []
config.test_source_root = os.path.join(config.attn_obj_root, "test", "unit")
config.test_exec_root = os.path.join(config.attn_obj_root, "test", "stressed")
config.test_format = lit.formats.GoogleTest(".", "E2ETests")

config.environment["ATTN_POISON"] = "1"
config.environment["ATTN_GUARD"] = "1"
config.environment["ATTN_STRESS_CUDA_KERNELS"] = "1"
config.environment["GTEST_FILTER"] = "*cuda_kernels_on_cpu"
