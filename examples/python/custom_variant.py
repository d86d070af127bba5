"""A user-defined variant (SPEC §7) compiled from IR text and checked
against the same math in PyTorch: attention whose scores get a learned
per-head bias that decays with distance, bias[h] * exp(-(qp - kp) / 64),
read from a [H] table passed at run time. Then the same variant as a
Python function traced by attn.score_mod, which gives the same output.

    PYTHONPATH=build/python python3 examples/python/custom_variant.py
"""
import math

import torch

import attn

H, D = 4, 32
IR = f"""
func.func @decaying_bias(%q: tensor<?x{H}x?x{D}xf32>, %k: tensor<?x{H}x?x{D}xf32>,
                         %v: tensor<?x{H}x?x{D}xf32>, %bias: tensor<{H}xf32>)
    -> tensor<?x{H}x?x{D}xf32> {{
  %o = attn.sdpa %q, %k, %v {{mask = #attn.mask<causal>}}
      : tensor<?x{H}x?x{D}xf32>, tensor<?x{H}x?x{D}xf32>, tensor<?x{H}x?x{D}xf32>
      score_mod {{
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %distance = arith.subi %qp, %kp : index
        %di = arith.index_cast %distance : index to i32
        %df = arith.sitofp %di : i32 to f32
        %scale = arith.constant -0.015625 : f32
        %x = arith.mulf %df, %scale : f32
        %decay = math.exp %x : f32
        %bh = tensor.extract %bias[%h] : tensor<{H}xf32>
        %term = arith.mulf %bh, %decay : f32
        %r = arith.addf %s, %term : f32
        attn.yield %r : f32
      }}
  return %o : tensor<?x{H}x?x{D}xf32>
}}
"""

model = attn.compile(IR)
torch.manual_seed(0)
B, L = 2, 50
q, k, v = (torch.randn(B, H, L, D) for _ in range(3))
bias = torch.randn(H)
o = model["decaying_bias"](q, k, v, bias)

# The same variant in PyTorch.
pos = torch.arange(L)
distance = (pos[:, None] - pos[None, :]).float()
scores = q @ k.transpose(-1, -2) / math.sqrt(D)
scores = scores + bias[None, :, None, None] * torch.exp(-distance / 64)
scores = scores.masked_fill(distance < 0, float("-inf"))
expected = torch.softmax(scores.double(), -1).float() @ v
error = (o - expected).abs().max().item()
print(f"decaying_bias: max |attn - torch| = {error:.2e}")
assert error < 1e-4

# The same variant as a Python function, traced into attn IR by
# attn.score_mod (as FlexAttention takes it) and given to a model
# description; `bias` becomes the entry's last input.
def decaying_bias(s, b, h, qp, kp, bias):
    return s + bias[h] * attn.exp(-(qp - kp) / 64)


traced = attn.compile({"model": "traced", "layers": [{
    "name": "attn", "type": "attention", "num_heads": H, "num_kv_heads": H,
    "head_dim": D,
    "score_mod": attn.score_mod(decaying_bias, bias=attn.Input([H]))}]})
o_traced = traced["attn"](q, k, v, bias)
difference = (o_traced - o).abs().max().item()
print(f"traced decaying_bias: max |traced - IR| = {difference:.2e}")
assert difference < 1e-5
