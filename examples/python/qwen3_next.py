"""Qwen3-Next's two attention kinds from its Hugging Face config, on torch
tensors: a prefill of a short prompt through the gated attention layer and
a Gated DeltaNet layer, then one decode step of each that continues from
the prefill (the KV cache grows by one token, the state is carried).

    PYTHONPATH=build/python python3 examples/python/qwen3_next.py
"""
import os

import torch
import torch.nn.functional as F

import attn

here = os.path.dirname(os.path.abspath(__file__))
model = attn.compile(os.path.join(here, os.pardir, "qwen3-next", "config.json"))
print(model)
for name in model.entries:
    print(" ", model.signature(name))

torch.manual_seed(0)
B, L = 1, 12
full = model.signature("full_attention")
H, Hkv, D = full.inputs[0].shape[1], full.inputs[1].shape[1], full.inputs[0].shape[3]
linear = model.signature("linear_attention")
Hk, Dk = linear.inputs[0].shape[1], linear.inputs[0].shape[3]
Hv, Dv = linear.inputs[2].shape[1], linear.inputs[2].shape[3]

# Gated attention: prefill, then one decode step over the grown cache.
q, k, v = torch.randn(B, H, L, D), torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
gate = torch.randn(B, H, L, D)
o = model["full_attention"](q, k, v, gate)
q1, k1, v1, g1 = (torch.randn(B, H, 1, D), torch.randn(B, Hkv, 1, D),
                  torch.randn(B, Hkv, 1, D), torch.randn(B, H, 1, D))
o1 = model["full_attention"](q1, torch.cat([k, k1], 2), torch.cat([v, v1], 2), g1)
print(f"full_attention: prefill o {tuple(o.shape)}, decode o {tuple(o1.shape)}")

# Gated DeltaNet: the state returned by prefill feeds the decode step.
def linear_inputs(length):
    return dict(q=torch.randn(B, Hk, length, Dk), k=torch.randn(B, Hk, length, Dk),
                v=torch.randn(B, Hv, length, Dv),
                g=F.logsigmoid(torch.randn(B, Hv, length)),
                beta=torch.rand(B, Hv, length),
                z=torch.randn(B, Hv, length, Dv))

w = torch.ones(Dv)
state = torch.zeros(B, Hv, Dk, Dv)
x = linear_inputs(L)
o, state = model["linear_attention"](x["q"], x["k"], x["v"], x["g"], x["beta"],
                                     state, x["z"], w)
x = linear_inputs(1)
o1, state = model["linear_attention"](x["q"], x["k"], x["v"], x["g"], x["beta"],
                                      state, x["z"], w)
print(f"linear_attention: prefill o {tuple(o.shape)}, decode o {tuple(o1.shape)}, "
      f"state {tuple(state.shape)}")
assert torch.isfinite(o1).all() and torch.isfinite(state).all()
