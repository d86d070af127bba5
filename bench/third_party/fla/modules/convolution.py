# Copyright (c) 2023-2026, Songlin Yang, Yu Zhang, Zhiyuan Li
#
# This source code is licensed under the MIT license found in the
# LICENSE file in the root directory of this source tree.
# For a list of all contributors, visit:
#   https://github.com/fla-org/flash-linear-attention/graphs/contributors

from fla.modules.conv import (
    ImplicitLongConvolution,
    LongConvolution,
    PositionalEmbedding,
    ShortConvolution,
    causal_conv1d,
    fft_conv,
)
from fla.modules.conv.cp import CausalConv1dFunctionCP, causal_conv1d_cp
from fla.modules.conv.cuda import FastCausalConv1dFn, fast_causal_conv1d_fn
from fla.modules.conv.triton import (
    CausalConv1dFunction,
    causal_conv1d_bwd,
    causal_conv1d_fwd,
    causal_conv1d_update,
    causal_conv1d_update_states,
)

__all__ = [
    'CausalConv1dFunction',
    'CausalConv1dFunctionCP',
    'FastCausalConv1dFn',
    'ImplicitLongConvolution',
    'LongConvolution',
    'PositionalEmbedding',
    'ShortConvolution',
    'causal_conv1d',
    'causal_conv1d_bwd',
    'causal_conv1d_cp',
    'causal_conv1d_fwd',
    'causal_conv1d_update',
    'causal_conv1d_update_states',
    'fast_causal_conv1d_fn',
    'fft_conv',
]
