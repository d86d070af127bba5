# RUN: %attn_python %s
# A Gated DeltaNet layer through the package: the chunked (prefill) and
# step (decode) forms against the float64 step-by-step reference, with GQA
# groups, and continuation from the returned state.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import close, gated_delta

HK, HV, DK, DV = 2, 4, 20, 12
m = attn.compile({"model": "py-linear", "layers": [
    {"name": "gdn", "type": "linear_attention", "rule": "gated_delta",
     "num_k_heads": HK, "num_v_heads": HV, "k_dim": DK, "v_dim": DV,
     "chunk_size": 16, "qk_l2norm": True}]})
sig = m.signature("gdn")
assert [a.name for a in sig.inputs] == ["q", "k", "v", "g", "beta", "S_init"]
assert [a.name for a in sig.outputs] == ["o", "S"]

rng = np.random.default_rng(3)


def inputs(B, L):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    g = -rng.uniform(0.0, 2.0, (B, HV, L)).astype(np.float32)
    beta = rng.uniform(0.05, 0.95, (B, HV, L)).astype(np.float32)
    return [f(B, HK, L, DK), f(B, HK, L, DK), f(B, HV, L, DV), g, beta,
            f(B, HV, DK, DV) * 0.1]


for L in (1, 15, 16, 17, 45):
    x = inputs(2, L)
    o, s = m["gdn"](*x)
    ref_o, ref_s = gated_delta(*x)
    close(o, ref_o, 1e-4, f"o, L={L}")
    close(s, ref_s, 1e-4, f"S, L={L}")

# Continuation: 30 steps, then 1, then 14 from the returned states equal
# 45 steps at once.
x = inputs(1, 45)
whole_o, whole_s = m["gdn"](*x)
state = x[5]
outputs = []
for begin, end in ((0, 30), (30, 31), (31, 45)):
    part = [t[:, :, begin:end].copy() for t in x[:5]] + [state]
    o, state = m["gdn"](*part)
    outputs.append(o)
close(np.concatenate(outputs, axis=2), whole_o, 1e-4, "continued o")
close(state, whole_s, 1e-4, "continued S")
print("linear: all checks passed")
