# Copyright (c) 2023-2026, Songlin Yang, Yu Zhang, Zhiyuan Li
#
# This source code is licensed under the MIT license found in the
# LICENSE file in the root directory of this source tree.
# For a list of all contributors, visit:
#   https://github.com/fla-org/flash-linear-attention/graphs/contributors

from .causal_conv1d import causal_conv1d
from .long_conv import ImplicitLongConvolution, LongConvolution, PositionalEmbedding, fft_conv
from .short_conv import ShortConvolution

__all__ = [
    'ImplicitLongConvolution',
    'LongConvolution',
    'PositionalEmbedding',
    'ShortConvolution',
    'causal_conv1d',
    'fft_conv',
]
