# Copyright (c) 2023-2026, Songlin Yang, Yu Zhang, Zhiyuan Li
#
# This source code is licensed under the MIT license found in the
# LICENSE file in the root directory of this source tree.
# For a list of all contributors, visit:
#   https://github.com/fla-org/flash-linear-attention/graphs/contributors

from .ops import (
    CausalConv1dFunction,
    causal_conv1d_bwd,
    causal_conv1d_fwd,
    causal_conv1d_update,
    causal_conv1d_update_states,
    compute_dh0_triton,
)

__all__ = [
    'CausalConv1dFunction',
    'causal_conv1d_bwd',
    'causal_conv1d_fwd',
    'causal_conv1d_update',
    'causal_conv1d_update_states',
    'compute_dh0_triton',
]
