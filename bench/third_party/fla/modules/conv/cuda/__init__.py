# Copyright (c) 2023-2026, Songlin Yang, Yu Zhang, Zhiyuan Li
#
# This source code is licensed under the MIT license found in the
# LICENSE file in the root directory of this source tree.
# For a list of all contributors, visit:
#   https://github.com/fla-org/flash-linear-attention/graphs/contributors

from .ops import FastCausalConv1dFn, causal_conv1d_cuda, fast_causal_conv1d_fn

__all__ = [
    'FastCausalConv1dFn',
    'causal_conv1d_cuda',
    'fast_causal_conv1d_fn',
]
