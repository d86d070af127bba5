"""Mamba2's SSD from its Hugging Face config, as attn's decay rule.

A Mamba2 mixer keeps a state h [head_dim, state_size] per head:

    h_t = exp(dt_t A) h_{t-1} + (dt_t x_t) B_t^T;   y_t = h_t C_t + D x_t

with dt = softplus(dt_raw + dt_bias), A = -exp(A_log), and B, C shared by
the heads of each of n_groups groups. That is attn's `decay` recurrence
S_t = exp(g_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t with S = h^T:
q = C, k = B, v = dt x, g = dt A and scale 1. The mixer then gates y by
silu(z) and normalizes it over n_groups groups of the heads' features
(its norm.weight per feature), which attn's entry does too: it takes z,
that weight, x and D after the state. The engine keeps the projections
and the convolution. The script prefills a prompt in one chunked call,
decodes one more token from the returned state, and checks both against
the recurrence run token by token in numpy (float64), then the norm.

    PYTHONPATH=build/python python3 examples/python/mamba2.py
"""
import json
import os

import numpy as np

import attn

here = os.path.dirname(os.path.abspath(__file__))
config = json.load(open(os.path.join(here, os.pardir, "mamba2",
                                     "config.json")))
config["num_heads"] = 16  # one tensor-parallel rank's
model = attn.compile(config)
print(model)
print(" ", model.signature("mamba"))

rng = np.random.default_rng(0)
H, G = config["num_heads"], config["n_groups"]
P, N = config["head_dim"], config["state_size"]
A = -np.exp(rng.uniform(0, 2, H))  # -exp(A_log)
dt_bias = rng.uniform(-3, -1, H)
D = rng.uniform(0.5, 1.5, H)
norm_weight = rng.uniform(0.5, 1.5, H * P)


def tokens(n):
    """The mixer's tensors for n tokens after its projection and
    convolution, as attn's inputs [1, heads, n, ...]."""
    x = rng.standard_normal((1, H, n, P))
    dt = np.log1p(np.exp(rng.standard_normal((1, H, n)) + dt_bias[:, None]))
    B, C = (rng.standard_normal((1, G, n, N)) for _ in range(2))
    z = rng.standard_normal((1, H, n, P))
    f32 = lambda a: a.astype(np.float32)  # noqa: E731
    return dict(q=f32(C), k=f32(B), v=f32(x * dt[..., None]),
                g=f32(dt * A[:, None]), z=f32(z), x=f32(x))


def step_by_step(x, S):
    """The mixer's recurrence one token at a time, in float64 (h = S^T)."""
    h = S.astype(np.float64).transpose(0, 1, 3, 2).copy()
    per_head = lambda a: np.repeat(a.astype(np.float64), H // G, axis=1)  # noqa: E731
    B, C = per_head(x["k"]), per_head(x["q"])
    y = np.zeros(x["v"].shape)
    for t in range(x["v"].shape[2]):
        h = np.exp(x["g"][:, :, t])[..., None, None] * h + \
            np.einsum("bhp,bhn->bhpn", x["v"][:, :, t], B[:, :, t])
        y[:, :, t] = np.einsum("bhpn,bhn->bhp", h, C[:, :, t])
    return gated_norm(y + D[:, None, None] * x["x"], x["z"]), \
        h.transpose(0, 1, 3, 2)


def gated_norm(y, z):
    """y silu(z), normalized over G groups of a token's H * P features and
    weighted per feature (norm_before_gate false, as Mamba2's)."""
    n = y.shape[2]
    tokens = lambda a: a.transpose(0, 2, 1, 3).reshape(1, n, G, -1)  # noqa: E731
    y = tokens(y * (z / (1.0 + np.exp(-z.astype(np.float64)))))
    y = y / np.sqrt((y ** 2).mean(-1, keepdims=True)
                    + config["layer_norm_epsilon"])
    y = y.reshape(1, n, H * P) * norm_weight
    return y.reshape(1, n, H, P).transpose(0, 2, 1, 3)


def call(x, S):
    return model["mamba"](x["q"], x["k"], x["v"], x["g"], S, x["z"],
                          norm_weight.astype(np.float32), x["x"],
                          D.astype(np.float32))


S0 = np.zeros((1, H, N, P), np.float32)
prompt, next_token = tokens(100), tokens(1)
y, S = call(prompt, S0)
y1, S1 = call(next_token, S)
want, want_S = step_by_step(prompt, S0)
want1, want_S1 = step_by_step(next_token, want_S)
for name, got, expected in (("prefill y", y, want), ("decode y", y1, want1),
                            ("state", S1, want_S1)):
    error = np.abs(got - expected).max() / np.abs(expected).max()
    print(f"mamba {name}: {tuple(got.shape)}, max rel. error {error:.1e}")
    assert error < 1e-4, (name, error)
print("mamba2: prefill and decode equal the token-by-token scan, skip and norm")
