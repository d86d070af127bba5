# Copyright (c) 2023-2026, Songlin Yang, Yu Zhang, Zhiyuan Li
#
# This source code is licensed under the MIT license found in the
# LICENSE file in the root directory of this source tree.
# For a list of all contributors, visit:
#   https://github.com/fla-org/flash-linear-attention/graphs/contributors

from .chunk import chunk_linear_attn
from .fused_chunk import fused_chunk_linear_attn
from .fused_recurrent import fused_recurrent_linear_attn

__all__ = [
    'chunk_linear_attn',
    'fused_chunk_linear_attn',
    'fused_recurrent_linear_attn',
]
