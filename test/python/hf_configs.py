# RUN: %attn_python %s
# Hugging Face configs of softmax models (llama, mistral, qwen2, qwen3,
# gemma2, gemma3_text, gemma3, llama4, gpt_oss): each layer kind's entry equals
# attention as transformers computes it for that config
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
        scaling = (text.get("query_pre_attn_scalar", 256) ** -0.5 if gemma
                   else dim ** -0.5)
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

assert len(checked) == 15, checked
print("hf configs:", ", ".join(checked))
