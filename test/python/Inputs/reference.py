"""float64 references for the Python tests (SPEC §1.1, §1.2, §2), in NumPy."""
import inspect

import numpy as np


def attention(q, k, v, mask="causal", window=0, gate=None, scale=None,
              score_mod=None, mask_mod=None):
    """o [B,H,Lq,Dv] and lse [B,H,Lq] of SPEC §1.1 in float64; `gate`
    [B,H,Lq,Dv or 1] is applied as o * sigmoid(gate); `score_mod(s, h, qp,
    kp)` (or `score_mod(s, b, h, qp, kp)`) modifies scores elementwise; `mask_mod(b, h, qp, kp)` (boolean,
    broadcast over [Lq, Lk]) hides keys too (SPEC §7)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, H, Lq, D = q.shape
    Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    group = H // Hkv
    o = np.zeros((B, H, Lq, Dv))
    lse = np.full((B, H, Lq), -np.inf)
    qp = np.arange(Lq)[:, None] + (Lk - Lq)
    kp = np.arange(Lk)[None, :]
    if mask == "none":
        visible = np.ones((Lq, Lk), dtype=bool)
    elif mask == "causal":
        visible = kp <= qp
    else:
        visible = (kp <= qp) & (kp > qp - window)
    takes_batch = (score_mod is not None
                   and len(inspect.signature(score_mod).parameters) == 5)
    for b in range(B):
        for h in range(H):
            s = scale * q[b, h] @ k[b, h // group].T
            if score_mod is not None:
                s = (score_mod(s, b, h, qp, kp) if takes_batch
                     else score_mod(s, h, qp, kp))
            seen = visible if mask_mod is None else (
                visible & np.broadcast_to(mask_mod(b, h, qp, kp), visible.shape))
            s = np.where(seen, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            safe = np.where(np.isneginf(m), 0.0, m)
            p = np.exp(s - safe)
            total = p.sum(axis=1, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                o[b, h] = np.where(total > 0, (p @ v[b, h // group]) / total,
                                   0.0)
                lse[b, h] = (safe + np.log(total))[:, 0]
    if gate is not None:
        o = o / (1.0 + np.exp(-np.asarray(gate, dtype=np.float64)))
    return o, lse


def gated_delta(q, k, v, g, beta, s_init, scale=None, l2norm=True):
    """o [B,Hv,L,Dv] and the final S [B,Hv,Dk,Dv] of SPEC §2's gated_delta
    rule, step by step in float64."""
    q, k, v, g, beta, s = (np.array(x, dtype=np.float64)
                           for x in (q, k, v, g, beta, s_init))
    B, Hk, L, Dk = q.shape
    Hv, Dv = v.shape[1], v.shape[3]
    scale = 1.0 / np.sqrt(Dk) if scale is None else scale
    if l2norm:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    o = np.zeros((B, Hv, L, Dv))
    for b in range(B):
        for j in range(Hv):
            i = j // (Hv // Hk)
            for t in range(L):
                s[b, j] *= np.exp(g[b, j, t])
                u = beta[b, j, t] * (v[b, j, t] - s[b, j].T @ k[b, i, t])
                s[b, j] += np.outer(k[b, i, t], u)
                o[b, j, t] = s[b, j].T @ (scale * q[b, i, t])
    return o, s


def close(actual, expected, tolerance, what):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    finite = np.isfinite(expected)
    assert (np.isfinite(actual) == finite).all(), f"{what}: infinities differ"
    scale = max(1.0, np.abs(expected[finite]).max(initial=0.0))
    error = np.abs(actual[finite] - expected[finite]).max(initial=0.0) / scale
    assert error <= tolerance, f"{what}: relative error {error:.3g} > {tolerance}"
    assert (actual[~finite] == expected[~finite]).all(), f"{what}: infinities"


# The rules of SPEC §2 (and kda, Kimi Delta Attention), by what they read.
RULES = ("linear", "decay", "gla", "delta", "gated_delta", "kda")
FEATURE_DECAY_RULES = ("gla", "kda")
DECAY_RULES = ("decay", "gla", "gated_delta", "kda")
DELTA_RULES = ("delta", "gated_delta", "kda")


def recurrence(rule, q, k, v, g, beta, s_init, scale=None, l2norm=False,
               z=None, w=None, eps=1e-6, activation="silu"):
    """o [B,Hv,L,Dv] and S of SPEC §2 for any rule, step by step in
    float64; g is [B,Hv,L] ([B,Hv,L,Dk] for gla, kda) or None, beta [B,Hv,L] or
    None; z and w apply the rmsnorm output gate, whose activation of z is
    silu or sigmoid."""
    q, k, v, s = (np.array(x, dtype=np.float64) for x in (q, k, v, s_init))
    g = None if g is None else np.asarray(g, dtype=np.float64)
    beta = None if beta is None else np.asarray(beta, dtype=np.float64)
    B, Hk, L, Dk = q.shape
    Hv, Dv = v.shape[1], v.shape[3]
    scale = 1.0 / np.sqrt(Dk) if scale is None else scale
    if l2norm:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    o = np.zeros((B, Hv, L, Dv))
    for b in range(B):
        for j in range(Hv):
            i = j // (Hv // Hk)
            for t in range(L):
                if rule in FEATURE_DECAY_RULES:
                    s[b, j] *= np.exp(g[b, j, t])[:, None]
                elif rule in DECAY_RULES:
                    s[b, j] *= np.exp(g[b, j, t])
                u = v[b, j, t].copy()
                if rule in DELTA_RULES:
                    u = beta[b, j, t] * (u - s[b, j].T @ k[b, i, t])
                s[b, j] += np.outer(k[b, i, t], u)
                o[b, j, t] = s[b, j].T @ (scale * q[b, i, t])
    if z is not None:
        z = np.asarray(z, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        sigmoid = 1.0 / (1.0 + np.exp(-z))
        o = o / np.sqrt((o * o).mean(-1, keepdims=True) + eps) * w * \
            (sigmoid if activation == "sigmoid" else z * sigmoid)
    return o, s


def tree_recurrence(rule, q, k, v, g, beta, parents, s_init, **options):
    """o [B,Hv,T,Dv] of SPEC §10's .tree: §2 on each root-to-node path."""
    B, T = parents.shape
    Hv, Dv = v.shape[1], v.shape[3]
    o = np.zeros((B, Hv, T, Dv))
    for b in range(B):
        for t in range(T):
            path, u = [], t
            while u >= 0:
                path.append(u)
                u = parents[b, u]
            path = path[::-1]
            pick = lambda x: None if x is None else x[b:b + 1][:, :, path]
            gate = {}
            if options.get("z") is not None:
                gate = dict(z=pick(options["z"]), w=options["w"])
            rest = {key: value for key, value in options.items()
                    if key not in ("z", "w")}
            path_o, _ = recurrence(rule, pick(q), pick(k), pick(v), pick(g),
                                   pick(beta), s_init[b:b + 1], **rest, **gate)
            o[b, :, t] = path_o[0, :, -1]
    return o
