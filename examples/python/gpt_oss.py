"""gpt-oss's attention from its Hugging Face config, on torch tensors: the
sliding-window layers (128 keys) and the full layers, each with the layer's
learned attention sinks (one logit per query head that joins the softmax's
denominator and carries no value). A prefill of a prompt longer than the
window, then one decode step over the grown cache, each checked against
gpt-oss's attention as transformers computes it (the sinks appended to the
scores as one more softmax column, which is dropped after the softmax).

    PYTHONPATH=build/python python3 examples/python/gpt_oss.py
"""
import os

import torch

import attn

here = os.path.dirname(os.path.abspath(__file__))
model = attn.compile(os.path.join(here, os.pardir, "gpt-oss", "config.json"))
print(model)
for name in model.entries:
    print(" ", model.signature(name))


def gpt_oss_attention(q, k, v, sinks, window):
    """transformers' eager attention of a gpt-oss layer, with its causal or
    sliding-window mask (key j visible to query i iff i - window < j <= i,
    positions bottom-right aligned)."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.transpose(2, 3) * q.shape[-1] ** -0.5
    lq, lk = q.shape[2], k.shape[2]
    query = torch.arange(lk - lq, lk)[:, None]
    key = torch.arange(lk)[None, :]
    visible = key <= query
    if window:
        visible &= key > query - window
    scores = scores.masked_fill(~visible, float("-inf"))
    column = sinks.reshape(1, -1, 1, 1).expand(*scores.shape[:3], 1)
    weights = torch.softmax(torch.cat([scores, column], -1), -1)[..., :-1]
    return weights @ v


torch.manual_seed(0)
signature = model.signature("full_attention")
H, Hkv, D = (signature.inputs[0].shape[1], signature.inputs[1].shape[1],
             signature.inputs[0].shape[3])
B, L = 1, 200
for entry, window in (("sliding_attention", 128), ("full_attention", None)):
    sinks = torch.randn(H)  # the layer's self_attn.sinks
    q, k, v = torch.randn(B, H, L, D), torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
    o = model[entry](q, k, v, sinks)
    prefill_error = (o - gpt_oss_attention(q, k, v, sinks, window)).abs().max()
    q1 = torch.randn(B, H, 1, D)
    k2, v2 = torch.cat([k, torch.randn(B, Hkv, 1, D)], 2), torch.cat([v, torch.randn(B, Hkv, 1, D)], 2)
    o1 = model[entry](q1, k2, v2, sinks)
    decode_error = (o1 - gpt_oss_attention(q1, k2, v2, sinks, window)).abs().max()
    print(f"{entry}: prefill o {tuple(o.shape)}, decode o {tuple(o1.shape)}, "
          f"max |attn - transformers| = {max(prefill_error, decode_error):.1e}")
    assert prefill_error < 1e-5 and decode_error < 1e-5
