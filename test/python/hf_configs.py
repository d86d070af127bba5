# RUN: %attn_python %s
# Hugging Face configs of softmax models (llama, mistral, mixtral, phi3,
# olmo2, qwen2, qwen3, qwen3_moe, gemma2, gemma3_text, gemma3, llama4,
# gpt_oss, granite, deepseek_v3;
# kimi_linear's KDA and MLA layers, then the Mamba2 hybrids: mamba2,
# nemotron_h, granitemoehybrid, bamba and falcon_h1; minimax's lightning
# attention and its softmax layers): each layer
# kind's entry equals attention as transformers computes it for that config
# (eager_attention_forward: scores times the config's scaling, Gemma's logit
# softcap, transformers' causal, sliding-window and chunked masks — key kv
# visible to query q iff q - window < kv <= q, or kv <= q in the same chunk —
# gpt-oss's sinks as one more softmax column that is then dropped, and a
# float32 softmax), on random inputs of awkward sizes.
import glob
import json
import math
import os

import numpy as np

import attn

INPUTS = os.path.join(os.path.dirname(__file__), os.pardir, "attnc", "Inputs",
                      "hf")
rng = np.random.default_rng(11)


def transformers_attention(q, k, v, scaling, softcap, window, sinks=None,
                           chunk=None):
    """transformers' eager attention over [B, H, L, D] q and GQA k, v, with
    positions bottom-right aligned (a query block after a cached prefix);
    `chunk`: Llama 4's chunked causal mask (kv // chunk == q // chunk)."""
    groups = q.shape[1] // k.shape[1]
    k = np.repeat(k, groups, axis=1).astype(np.float64)
    v = np.repeat(v, groups, axis=1).astype(np.float64)
    scores = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) * scaling
    if softcap:
        scores = np.tanh(scores / softcap) * softcap
    lq, lk = q.shape[2], k.shape[2]
    query = np.arange(lk - lq, lk)[:, None]
    key = np.arange(lk)[None, :]
    visible = key <= query
    if window:
        visible &= key > query - window
    if chunk:
        visible &= key // chunk == query // chunk
    scores = np.where(visible, scores, -np.inf)
    if sinks is not None:
        # gpt-oss: each head's sink logit is appended to every row of scores;
        # after the softmax its column is dropped.
        column = np.broadcast_to(sinks.reshape(1, -1, 1, 1).astype(np.float64),
                                 scores.shape[:3] + (1,))
        combined = np.concatenate([scores, column], -1)
        weights = np.exp(combined - combined.max(-1, keepdims=True))
        return (weights / weights.sum(-1, keepdims=True))[..., :-1] @ v
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


def text_config(config):
    return config.get("text_config", config) \
        if config["model_type"] in ("gemma3", "llama4") else config


checked = []
GPT_OSS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                       "examples", "gpt-oss", "config.json")
for path in sorted(glob.glob(os.path.join(INPUTS, "*.json"))) + [GPT_OSS]:
    config = json.load(open(path))
    text = text_config(config)
    # The configs' windows (512 to 4096 keys), shrunk so that short
    # sequences cross them.
    if text.get("sliding_window"):
        text["sliding_window"] = 6
    if text.get("attention_chunk_size"):
        text["attention_chunk_size"] = 8
    m = attn.compile(config)
    for entry in m.entries:
        q_arg, k_arg = m.signature(entry).inputs[:2]
        heads, kv_heads, dim = q_arg.shape[1], k_arg.shape[1], q_arg.shape[3]
        gemma = config["model_type"].startswith("gemma")
        # Granite's scaling is its attention_multiplier.
        scaling = (text.get("query_pre_attn_scalar", 256) ** -0.5 if gemma
                   else text.get("attention_multiplier", dim ** -0.5))
        softcap = text.get("attn_logit_softcapping",
                           50.0 if config["model_type"] == "gemma2" else None)
        window = text.get("sliding_window", 4096) \
            if entry == "sliding_attention" else None
        lk = 37
        for lq in (1, 7):
            # Scores of a few units, where a softcap of 50 moves them by
            # about 1e-3.
            q = 3 * rng.standard_normal((2, heads, lq, dim), dtype=np.float32)
            k = rng.standard_normal((2, kv_heads, lk, dim), dtype=np.float32)
            v = rng.standard_normal((2, kv_heads, lk, dim), dtype=np.float32)
            inputs = [q, k, v]
            sinks = None
            if "sinks" in [a.name for a in m.signature(entry).inputs]:
                sinks = rng.uniform(-2, 4, heads).astype(np.float32)
                inputs.append(sinks)
            o = m[entry](*inputs)
            chunk = 8 if entry == "chunked_attention" else None
            want = transformers_attention(q, k, v, scaling, softcap, window,
                                          sinks, chunk)
            err = np.abs(o - want).max() / np.abs(want).max()
            assert err < 1e-5, (path, entry, lq, err)
        checked.append(f"{os.path.basename(path)}:{entry}")

# DeepSeek-V3's multi-head latent attention. transformers expands the
# compressed cache per head (kv_b_proj: k_nope = W_UK c, v = W_UV c) and
# attends with q = [q_nope, q_pe], k = [k_nope, k_pe]: full_attention must
# equal that. latent_attention attends over the cache [c, k_pe] itself with
# the absorbed queries [W_UK^T q_nope, q_pe]; its output times W_UV must
# equal it too (q . k = (W_UK^T q_nope) . c + q_pe . k_pe). The scale is
# transformers': (128 + 64)^-1/2 times YaRN's mscale^2 for factor 40.
DEEPSEEK = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                        "examples", "deepseek-v3", "config.json")
config = json.load(open(DEEPSEEK))
config["num_attention_heads"] = 16  # one tensor-parallel rank's of 128
m = attn.compile(config)
assert m.entries == ["full_attention", "latent_attention"], m.entries
heads, nope, rope, value_dim, rank = 16, 128, 64, 128, 512
mscale = 0.1 * math.log(40) + 1
scaling = (nope + rope) ** -0.5 * mscale * mscale
w_uk = rng.standard_normal((heads, nope, rank)) / math.sqrt(rank)
w_uv = rng.standard_normal((heads, value_dim, rank)) / math.sqrt(rank)
lk = 41
latent = rng.standard_normal((2, lk, rank))
k_pe = rng.standard_normal((2, lk, rope))
for lq in (1, 2, 9):
    q_nope = 2 * rng.standard_normal((2, heads, lq, nope))
    q_pe = 2 * rng.standard_normal((2, heads, lq, rope))
    k = np.concatenate([np.einsum("blr,hnr->bhln", latent, w_uk),
                        np.broadcast_to(k_pe[:, None], (2, heads, lk, rope))],
                       -1)
    v = np.einsum("blr,hvr->bhlv", latent, w_uv)
    q = np.concatenate([q_nope, q_pe], -1)
    f32 = [x.astype(np.float32) for x in (q, k, v)]
    want = transformers_attention(*f32, scaling, None, None)
    o = m["full_attention"](*f32)
    err = np.abs(o - want).max() / np.abs(want).max()
    assert err < 1e-5, ("full_attention", lq, err)
    q_absorbed = np.concatenate([np.einsum("bhqn,hnr->bhqr", q_nope, w_uk),
                                 q_pe], -1).astype(np.float32)
    kv = np.concatenate([latent, k_pe], -1)[:, None].astype(np.float32)
    o_latent = m["latent_attention"](q_absorbed, kv)
    assert o_latent.shape == (2, heads, lq, rank), o_latent.shape
    o = np.einsum("bhqr,hvr->bhqv", o_latent.astype(np.float64), w_uv)
    err = np.abs(o - want).max() / np.abs(want).max()
    assert err < 1e-5, ("latent_attention", lq, err)
checked += ["deepseek-v3:full_attention", "deepseek-v3:latent_attention"]


# Kimi Linear: its KDA layers as FLA computes them (fla.ops.kda's
# naive_recurrent_kda with use_qk_l2norm_in_kernel, [B, T, H, K] layout:
# S *= exp(g_t); S += (beta_t k_t) (v_t - k_t S)^T; o_t = (q_t K^-1/2) S)
# through FusedRMSNormGated(activation="sigmoid") with rms_norm_eps, and its
# MLA layers as DeepSeek's without YaRN: 192^-1/2.
KIMI = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                    "examples", "kimi-linear", "config.json")
config = json.load(open(KIMI))
config["linear_attn_config"]["num_heads"] = 4  # one tensor-parallel rank's
config["num_attention_heads"] = 4
m = attn.compile(config)
assert m.entries == ["linear_attention", "full_attention",
                     "latent_attention"], m.entries
B, T, H, K = 2, 75, 4, 128
eps = config["rms_norm_eps"]


def fla_l2norm(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def fla_naive_recurrent_kda(q, k, v, g, beta, s0):
    """FLA's naive_recurrent_kda in float64, [B, T, H, K] inputs."""
    q, k = fla_l2norm(q) * K ** -0.5, fla_l2norm(k)
    S = s0.copy()
    o = np.zeros_like(v)
    for i in range(q.shape[1]):
        S = S * np.exp(g[:, i])[..., None]
        predicted = (k[:, i][..., None] * S).sum(-2)
        S = S + np.einsum("bhk,bhv->bhkv", beta[:, i][..., None] * k[:, i],
                          v[:, i] - predicted)
        o[:, i] = np.einsum("bhk,bhkv->bhv", q[:, i], S)
    return o, S


q, k, v, z = (rng.standard_normal((B, T, H, K)) for _ in range(4))
g = -np.log1p(np.exp(rng.standard_normal((B, T, H, K))))  # -softplus
beta = 1 / (1 + np.exp(-rng.standard_normal((B, T, H))))
s0 = 0.1 * rng.standard_normal((B, H, K, K))
w = rng.uniform(0.5, 1.5, K)
o, s = fla_naive_recurrent_kda(q, k, v, g, beta, s0)
gated = o / np.sqrt((o * o).mean(-1, keepdims=True) + eps) * w / \
    (1 + np.exp(-z))
heads_first = lambda x: np.ascontiguousarray(  # noqa: E731
    np.moveaxis(x, 1, 2)).astype(np.float32)
o_attn, s_attn = m["linear_attention"](
    *(heads_first(x) for x in (q, k, v, g)), heads_first(beta[..., None])[..., 0],
    s0.astype(np.float32), heads_first(z), w.astype(np.float32))
want = np.moveaxis(gated, 1, 2)
err = np.abs(o_attn - want).max() / np.abs(want).max()
assert err < 1e-4, ("kimi-linear:linear_attention", err)
err = np.abs(s_attn - s).max() / np.abs(s).max()
assert err < 1e-4, ("kimi-linear:linear_attention state", err)
mla = [rng.standard_normal((1, 4, n, d)).astype(np.float32)
       for n, d in ((3, 192), (20, 192), (20, 128))]
want = transformers_attention(*mla, 192 ** -0.5, None, None)
err = np.abs(m["full_attention"](*mla) - want).max() / np.abs(want).max()
assert err < 1e-5, ("kimi-linear:full_attention", err)
checked += ["kimi-linear:linear_attention", "kimi-linear:full_attention"]

# Mamba2: its SSD as the paper computes it (Dao and Gu, "Transformers are
# SSMs", Listing 1: ssd_minimal_discrete, chunked with segment sums and no
# recurrence at all), in float64 with the mixer's tensors: x, dt =
# softplus(raw + dt_bias), A = -exp(A_log), B and C of n_groups groups.
# attn's mamba entry takes q = C, k = B, v = dt x and g = dt A.


def segsum(x):
    """Listing 1's segsum: [..., T] -> [..., T, T], -inf above the diagonal."""
    cumulative = np.cumsum(x, -1)
    sums = cumulative[..., :, None] - cumulative[..., None, :]
    return np.where(np.tril(np.ones((x.shape[-1],) * 2, bool)), sums, -np.inf)


def ssd_minimal_discrete(X, A, Bm, Cm, block, s0):
    """Listing 1 in numpy: X [b, l, h, p], A [b, l, h], B and C [b, l, h,
    n] (l a multiple of `block`), s0 [b, h, p, n]."""
    b, l, h, p = X.shape
    X, A, Bm, Cm = (x.reshape((b, l // block, block) + x.shape[2:])
                    for x in (X, A, Bm, Cm))
    A = A.transpose(0, 3, 1, 2)
    A_cumsum = np.cumsum(A, -1)
    Y_diag = np.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cm, Bm,
                       np.exp(segsum(A)), X)
    decay_states = np.exp(A_cumsum[..., -1:] - A_cumsum)
    states = np.einsum("bclhn,bhcl,bclhp->bchpn", Bm, decay_states, X)
    states = np.concatenate([s0[:, None], states], 1)
    decay_chunk = np.exp(segsum(np.pad(A_cumsum[..., -1],
                                       ((0, 0), (0, 0), (1, 0)))))
    states = np.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final = states[:, :-1], states[:, -1]
    Y_off = np.einsum("bclhn,bchpn,bhcl->bclhp", Cm, states, np.exp(A_cumsum))
    return (Y_diag + Y_off).reshape(b, l, h, p), final


def mamba_norm(y, z, w, groups, eps, norm_before_gate):
    """The gated RMSNorm ending a Mamba2 mixer over y, z [batch, steps,
    heads, head_dim], as mamba_ssm's rmsnorm_fn and transformers'
    MambaRMSNormGated / FalconH1RMSNormGated compute it: the heads' features
    of a token in `groups` groups, gated by silu(z) before the norm or
    after it, weighted per feature."""
    shape = y.shape
    y, z = (a.reshape(shape[0], shape[1], -1) for a in (y, z))
    silu = z / (1.0 + np.exp(-z))
    if not norm_before_gate:
        y = y * silu
    g = y.reshape(shape[0], shape[1], groups, -1)
    g = g / np.sqrt((g ** 2).mean(-1, keepdims=True) + eps)
    y = g.reshape(y.shape) * w
    if norm_before_gate:
        y = y * silu
    return y.reshape(shape)


def check_mamba(m, name, heads, groups, head_dim, state, batch, steps,
                norm=None, silu_gate=False):
    """m's mamba entry of `heads` heads of `head_dim`, `groups` groups of
    `state`, against ssd_minimal_discrete on `batch` sequences of `steps`
    tokens from a random state; with `norm` (its epsilon and whether it
    comes before the gate), then the skip D x and the gated RMSNorm; with
    `silu_gate`, then the skip and the gate without the norm (Falcon-H1's
    mixer without mamba_rms_norm: scan_output = y * silu(gate))."""
    x = rng.standard_normal((batch, steps, heads, head_dim))
    dt = np.log1p(np.exp(rng.standard_normal((batch, steps, heads)) - 2.0
                         + rng.uniform(-1, 1, heads)))  # softplus(raw + bias)
    A = -np.exp(rng.uniform(0, 2, heads))  # -exp(A_log)
    Bg, Cg = (rng.standard_normal((batch, steps, groups, state))
              for _ in range(2))
    s0 = 0.1 * rng.standard_normal((batch, heads, head_dim, state))
    # The paper's chunks are whole: pad to a multiple of 32 steps with
    # dt = 0 (no decay, no input), which leaves the outputs and the state
    # as they are.
    padded = -(-steps // 32) * 32
    pad = lambda a: np.concatenate(  # noqa: E731
        [a, np.zeros((batch, padded - steps) + a.shape[2:])], 1)
    per_head = lambda a: np.repeat(a, heads // groups, axis=2)  # noqa: E731
    y, final = ssd_minimal_discrete(pad(x * dt[..., None]), pad(dt * A),
                                    pad(per_head(Bg)), pad(per_head(Cg)), 32,
                                    s0)
    y = y[:, :steps]
    inputs = [heads_first(Cg), heads_first(Bg), heads_first(x * dt[..., None]),
              heads_first((dt * A)[..., None])[..., 0],
              np.ascontiguousarray(s0.transpose(0, 1, 3, 2)).astype(np.float32)]
    if norm is not None:
        z = rng.standard_normal((batch, steps, heads, head_dim))
        w = rng.uniform(0.5, 1.5, heads * head_dim)
        D = rng.uniform(-1, 1, heads)
        y = mamba_norm(y + D[:, None] * x, z, w, groups, *norm)
        inputs += [heads_first(z), w.astype(np.float32), heads_first(x),
                   D.astype(np.float32)]
    if silu_gate:
        z = rng.standard_normal((batch, steps, heads, head_dim))
        D = rng.uniform(-1, 1, heads)
        y = (y + D[:, None] * x) * (z / (1.0 + np.exp(-z)))
        inputs += [heads_first(z), heads_first(x), D.astype(np.float32)]
    o, s = m["mamba"](*inputs)
    want = np.moveaxis(y, 1, 2)
    err = np.abs(o - want).max() / np.abs(want).max()
    assert err < 1e-4, (name, err)
    want = final.transpose(0, 1, 3, 2)
    err = np.abs(s - want).max() / np.abs(want).max()
    assert err < 1e-4, (name + " state", err)


def check_gqa(m, name, heads, kv_heads, dim, scaling):
    """m's full_attention entry against transformers' eager attention with
    `scaling`."""
    gqa = [rng.standard_normal((2, h, n, dim)).astype(np.float32)
           for h, n in ((heads, 5), (kv_heads, 33), (kv_heads, 33))]
    want = transformers_attention(*gqa, scaling, None, None)
    err = np.abs(m["full_attention"](*gqa) - want).max() / np.abs(want).max()
    assert err < 1e-5, (name, err)


def example(*path):
    return os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                        *path)


config = json.load(open(example("examples", "mamba2", "config.json")))
config.update(num_heads=6, n_groups=2)  # one tensor-parallel rank's
m = attn.compile(config)
assert m.entries == ["mamba"], m.entries
check_mamba(m, "mamba2:mamba", 6, 2, config["head_dim"], config["state_size"],
            batch=2, steps=75, norm=(config["layer_norm_epsilon"], False))
checked += ["mamba2:mamba"]

# Nemotron-H: its Mamba2 mixers as above, its attention layers as
# transformers' eager attention with attention_head_dim^-1/2.
config = json.load(open(example("examples", "nemotron-h", "config.json")))
config.update(mamba_num_heads=4, n_groups=2, num_attention_heads=4,
              num_key_value_heads=2)  # one tensor-parallel rank's
m = attn.compile(config)
assert m.entries == ["mamba", "full_attention"], m.entries
check_mamba(m, "nemotron-h:mamba", 4, 2, config["mamba_head_dim"],
            config["ssm_state_size"], batch=1, steps=40,
            norm=(config["layer_norm_epsilon"], False))
check_gqa(m, "nemotron-h:full_attention", 4, 2, 128, 128 ** -0.5)
checked += ["nemotron-h:mamba", "nemotron-h:full_attention"]

# Granite 4.0-H: layer_types' "mamba" and "attention"; the attention scaled
# by attention_multiplier (GraniteMoeHybridAttention's scaling), its head
# dim hidden_size / num_attention_heads.
config = json.load(open(example("examples", "granite-4.0-h", "config.json")))
config.update(mamba_n_heads=4, num_attention_heads=4,
              num_key_value_heads=2, hidden_size=512)  # a rank's; dim 128
m = attn.compile(config)
assert m.entries == ["mamba", "full_attention"], m.entries
check_mamba(m, "granite-4.0-h:mamba", 4, 1, config["mamba_d_head"],
            config["mamba_d_state"], batch=2, steps=37,
            norm=(config["rms_norm_eps"], False))
check_gqa(m, "granite-4.0-h:full_attention", 4, 2, 128,
          config["attention_multiplier"])
checked += ["granite-4.0-h:mamba", "granite-4.0-h:full_attention"]

# Bamba (attn_layer_indices) and Falcon-H1 (a mixer and attention in every
# layer; mamba_d_head "auto": mamba_d_ssm / mamba_n_heads), head_dim^-1/2.
config = json.load(open(example("test", "attnc", "Inputs", "bamba.json")))
config.update(mamba_n_heads=8, mamba_n_groups=2)
m = attn.compile(config)
assert m.entries == ["mamba", "full_attention"], m.entries
check_mamba(m, "bamba:mamba", 8, 2, 64, 128, batch=1, steps=70,
            norm=(config["rms_norm_eps"], False))
check_gqa(m, "bamba:full_attention", 32, 8, 128, 128 ** -0.5)
config = json.load(open(example("test", "attnc", "Inputs", "falcon-h1.json")))
m = attn.compile(config)
assert m.entries == ["mamba", "full_attention"], m.entries
# Without mamba_rms_norm (its released checkpoints): the skip, then the
# gate alone.
check_mamba(m, "falcon-h1:mamba", 24, 1, 1536 // 24, 128, batch=1, steps=33,
            silu_gate=True)
# With mamba_rms_norm, its mixer ends as the others', normalized first by
# default (mamba_norm_before_gate).
config.update(mamba_rms_norm=True, mamba_n_groups=2)
m = attn.compile(config)
check_mamba(m, "falcon-h1-norm:mamba", 24, 2, 1536 // 24, 128, batch=2,
            steps=20, norm=(config["rms_norm_eps"], True))
check_gqa(m, "falcon-h1:full_attention", 8, 2, 64, 64 ** -0.5)
checked += ["bamba:mamba", "bamba:full_attention", "falcon-h1:mamba",
            "falcon-h1-norm:mamba", "falcon-h1:full_attention"]

# MiniMax-Text-01: its lightning attention as transformers'
# MiniMaxLightningAttention computes it, in float64: prefill block by block
# (the intra-block product masked by the diagonal decay, the inter-block
# one through the state with the query and key decays; blocks of 16 here,
# its block_size is a tiling) from a zero state, then decode steps through
# the cached state (S = exp(-slope) S + k^T v, o = q S). attn's
# linear_attention is the decay rule with g = -slope_rate of the layer and
# scale 1. Its softmax layers are Mixtral's GQA with head_dim^-1/2.
config = json.load(open(example("examples", "minimax-text-01", "config.json")))
config["num_attention_heads"] = 4  # one tensor-parallel rank's of 64
config["num_key_value_heads"] = 1
m = attn.compile(config)
assert m.entries == ["linear_attention", "full_attention"], m.entries
H, D, layer = 4, config["head_dim"], 13


def minimax_slope_rate(heads, layer, layers):
    """MiniMaxLightningAttention.get_slope_rate: [heads]."""
    base = 1 / (2 ** (8 / heads))
    factor = 1 - layer / (layers - 1 + 1e-5) + 1e-5
    return base ** (np.arange(heads) + 1) * factor


def minimax_lightning_prefill(q, k, v, slope, block):
    """MiniMaxLightningAttention.forward without a cache: [B, H, T, D]."""
    T = q.shape[2]
    slope = slope[:, None, None]
    steps = np.arange(block) + 1
    query_decay = np.exp(-slope * steps[:, None])
    key_decay = np.exp(-slope * (block - steps[:, None]))
    diagonal = slope * (steps[:, None] - steps[None, :])
    diagonal_decay = np.exp(np.where(diagonal >= 0, -diagonal, -np.inf))
    state = np.zeros(q.shape[:2] + (D, D))
    out = []
    for start in range(0, T, block):
        n = min(block, T - start)
        qb, kb, vb = (x[:, :, start:start + n] for x in (q, k, v))
        intra = (qb @ kb.swapaxes(-1, -2) * diagonal_decay[:, :n, :n]) @ vb
        inter = (qb * query_decay[:, :n]) @ state
        out.append(intra + inter)
        state = state * np.exp(-slope * n) + \
            (kb * key_decay[:, -n:]).swapaxes(-1, -2) @ vb
    return np.concatenate(out, 2), state


def minimax_lightning_decode(q, k, v, slope, state):
    """The same module's branch with a cached state, one step at a time."""
    ratio = np.exp(-slope)[:, None, None]
    out = []
    for t in range(q.shape[2]):
        state = ratio * state + k[:, :, t:t + 1].swapaxes(-1, -2) @ \
            v[:, :, t:t + 1]
        out.append(q[:, :, t:t + 1] @ state)
    return np.concatenate(out, 2), state


slope = minimax_slope_rate(H, layer, config["num_hidden_layers"])
B, T = 2, 75
q, k, v = (0.3 * rng.standard_normal((B, H, T + 3, D)) for _ in range(3))
want, want_state = minimax_lightning_prefill(q[:, :, :T], k[:, :, :T],
                                             v[:, :, :T], slope, 16)
want_decode, want_state = minimax_lightning_decode(
    q[:, :, T:], k[:, :, T:], v[:, :, T:], slope, want_state)
f32 = lambda x: np.ascontiguousarray(x, dtype=np.float32)  # noqa: E731
decay = lambda n: f32(np.broadcast_to(-slope[None, :, None], (B, H, n)))  # noqa: E731
o, state = m["linear_attention"](f32(q[:, :, :T]), f32(k[:, :, :T]),
                                 f32(v[:, :, :T]), decay(T),
                                 np.zeros((B, H, D, D), np.float32))
err = np.abs(o - want).max() / np.abs(want).max()
assert err < 1e-4, ("minimax:linear_attention prefill", err)
for t in range(T, T + 3):
    o, state = m["linear_attention"](f32(q[:, :, t:t + 1]), f32(k[:, :, t:t + 1]),
                                     f32(v[:, :, t:t + 1]), decay(1), state)
    step = want_decode[:, :, t - T:t - T + 1]
    err = np.abs(o - step).max() / np.abs(step).max()
    assert err < 1e-4, ("minimax:linear_attention decode", t, err)
err = np.abs(state - want_state).max() / np.abs(want_state).max()
assert err < 1e-4, ("minimax:linear_attention state", err)
check_gqa(m, "minimax:full_attention", H, 1, D, D ** -0.5)
checked += ["minimax:linear_attention", "minimax:full_attention"]

assert len(checked) == 36, checked
print("hf configs:", ", ".join(checked))
