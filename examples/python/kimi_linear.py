"""Kimi Linear's two kinds of layer from its Hugging Face config: Kimi Delta
Attention (KDA) in its linear layers, multi-head latent attention (MLA) in
the others (their two forms as in deepseek_mla.py).

A KDA layer keeps a state S [Dk, Dv] per head that decays per key feature
and is written by the delta rule:

    S = diag(exp(g_t)) S;  S = S + beta_t k_t (v_t - S^T k_t)^T;
    o_t = rmsnorm(S^T q_t / sqrt(Dk)) * w * sigmoid(z_t)

with q and k L2-normalized. The engine computes g (-exp(A_log) *
softplus(f_b(f_a(x)) + dt_bias)), beta (sigmoid(b_proj(x))) and z
(g_b(g_a(x))); attn runs the recurrence and the gate. The script prefills a
prompt in one chunked call, decodes one more token from the returned state,
and checks both against the recurrence run token by token in numpy.

    PYTHONPATH=build/python python3 examples/python/kimi_linear.py
"""
import json
import os

import numpy as np

import attn

here = os.path.dirname(os.path.abspath(__file__))
config = json.load(open(os.path.join(here, os.pardir, "kimi-linear",
                                     "config.json")))
config["linear_attn_config"]["num_heads"] = 8  # one tensor-parallel rank's
config["num_attention_heads"] = 8
model = attn.compile(config)
print(model)
for name in model.entries:
    print(" ", model.signature(name))

rng = np.random.default_rng(0)
kda = model.signature("linear_attention")
H, D = kda.inputs[0].shape[1], kda.inputs[0].shape[3]
eps = config["rms_norm_eps"]


def softplus(x):
    return np.log1p(np.exp(x))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def tokens(n):
    """One layer's per-token inputs for n tokens, [1, H, n, ...], as the
    engine's projections would make them."""
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    a_log = np.log(np.linspace(1, 16, H))[None, :, None, None]
    g = -np.exp(a_log) * softplus(f(1, H, n, D) - 4)
    return dict(q=f(1, H, n, D), k=f(1, H, n, D), v=f(1, H, n, D),
                g=g.astype(np.float32),
                beta=sigmoid(f(1, H, n)).astype(np.float32), z=f(1, H, n, D))


def step_by_step(x, S, w):
    """The recurrence one token at a time, in float64."""
    S = S.astype(np.float64).copy()
    q = x["q"] / np.sqrt((x["q"].astype(np.float64) ** 2).sum(-1, keepdims=True) + 1e-6)
    k = x["k"] / np.sqrt((x["k"].astype(np.float64) ** 2).sum(-1, keepdims=True) + 1e-6)
    o = np.zeros(x["v"].shape)
    for t in range(x["v"].shape[2]):
        S *= np.exp(x["g"][:, :, t])[..., None]
        predicted = np.einsum("bhk,bhkv->bhv", k[:, :, t], S)
        u = x["beta"][:, :, t, None] * (x["v"][:, :, t] - predicted)
        S += np.einsum("bhk,bhv->bhkv", k[:, :, t], u)
        o[:, :, t] = np.einsum("bhk,bhkv->bhv", q[:, :, t] / np.sqrt(D), S)
    o = o / np.sqrt((o * o).mean(-1, keepdims=True) + eps) * w * sigmoid(x["z"])
    return o, S


def call(x, S, w):
    return model["linear_attention"](x["q"], x["k"], x["v"], x["g"],
                                      x["beta"], S, x["z"], w)


w = rng.uniform(0.5, 1.5, D).astype(np.float32)
S0 = np.zeros((1, H, D, D), np.float32)
prompt, next_token = tokens(100), tokens(1)
o, S = call(prompt, S0, w)
o1, S1 = call(next_token, S, w)
want, want_S = step_by_step(prompt, S0, w)
want1, want_S1 = step_by_step(next_token, want_S, w)
for name, got, expected in (("prefill o", o, want), ("decode o", o1, want1),
                            ("state", S1, want_S1)):
    error = np.abs(got - expected).max() / np.abs(expected).max()
    print(f"linear_attention {name}: {tuple(got.shape)}, max rel. error "
          f"{error:.1e}")
    assert error < 1e-4, (name, error)
print("kda: prefill and decode equal the token-by-token recurrence")
