"""DeepSeek-V3's multi-head latent attention (MLA) as a serving engine runs
it, from the model's Hugging Face config:

  * prefill attends over keys and values expanded per head by kv_b_proj
    (`full_attention`: 192-feature keys, 128-feature values, every head its
    own), which is the cheaper form when many queries share the keys;
  * the cache keeps only each token's compressed row, 512 latent features and
    64 rotary ones, in pages that `<layer>.append` fills;
  * decode attends over that cache itself (`latent_attention`, the absorbed
    form: one kv head of 576 features whose first 512 are also the values;
    queries are q_nope times W_UK beside q_pe, and the output goes through
    W_UV), reading 576 numbers per token instead of 128 x 320.

The decode step's output equals attention over the expanded keys and values,
which the script checks.

    PYTHONPATH=build/python python3 examples/python/deepseek_mla.py
"""
import json
import math
import os

import numpy as np

import attn

here = os.path.dirname(os.path.abspath(__file__))
config = json.load(open(os.path.join(here, os.pardir, "deepseek-v3",
                                     "config.json")))
config["num_attention_heads"] = 16  # one tensor-parallel rank's of 128
model = attn.compile(config)
print(model)
for name in model.entries:
    print(" ", model.signature(name))

H, NOPE, ROPE = 16, config["qk_nope_head_dim"], config["qk_rope_head_dim"]
RANK, DV = config["kv_lora_rank"], config["v_head_dim"]
# The scale attnc derived from the config (YaRN's mscale included), for the
# paged decode layer below.
scale = (NOPE + ROPE) ** -0.5 * (0.1 * math.log(40) + 1) ** 2
P, PAGES = 64, 8
paged = attn.compile({"model": "mla-serving", "layers": [{
    "name": "mla", "type": "attention", "num_heads": H, "num_kv_heads": 1,
    "head_dim": RANK + ROPE, "value_dim": RANK, "latent_kv": True,
    "scale": scale, "layout": {"page_size": P}}]})
print(paged)

rng = np.random.default_rng(0)
w_uk = rng.standard_normal((H, NOPE, RANK)) / math.sqrt(RANK)  # kv_b_proj
w_uv = rng.standard_normal((H, DV, RANK)) / math.sqrt(RANK)
L = 150
latent = rng.standard_normal((L + 1, RANK))  # c_kv of each token
k_pe = rng.standard_normal((L + 1, ROPE))    # its rotary key, shared by heads


def expanded(n):
    """Keys and values of the first n tokens as transformers expands them."""
    k = np.concatenate([np.einsum("lr,hnr->hln", latent[:n], w_uk),
                        np.broadcast_to(k_pe[None, :n], (H, n, ROPE))], -1)
    v = np.einsum("lr,hvr->hlv", latent[:n], w_uv)
    return k[None].astype(np.float32), v[None].astype(np.float32)


# Prefill: the prompt's L tokens over their expanded keys and values.
q_nope = rng.standard_normal((1, H, L + 1, NOPE))
q_pe = rng.standard_normal((1, H, L + 1, ROPE))
q = np.concatenate([q_nope, q_pe], -1).astype(np.float32)
k, v = expanded(L)
o_prefill = model["full_attention"](np.ascontiguousarray(q[:, :, :L]), k, v)

# The cache: every token's compressed row [c_kv, k_pe] in its page's slot.
kv_cache = np.zeros((PAGES, P, 1, RANK + ROPE), np.float32)
pages = rng.permutation(PAGES)[:3].astype(np.int32)
rows = np.concatenate([latent, k_pe], -1)[:, None].astype(np.float32)
slots = (pages[np.arange(L + 1) // P] * P + np.arange(L + 1) % P)
paged["mla.append"](rows[:L], slots[:L].astype(np.int32), kv_cache)

# Decode token L: its row appended, then attention over the latent cache
# with the absorbed query; the output leaves the latent space through W_UV.
paged["mla.append"](rows[L:], slots[L:].astype(np.int32), kv_cache)
q_absorbed = np.concatenate([np.einsum("bhqn,hnr->bhqr", q_nope[:, :, L:], w_uk),
                             q_pe[:, :, L:]], -1).astype(np.float32)
page_table = pages[None]
o_latent = paged["mla"](q_absorbed, kv_cache, page_table,
                        np.array([L + 1], np.int32))
o_decode = np.einsum("bhqr,hvr->bhqv", o_latent, w_uv)

k, v = expanded(L + 1)
want = model["full_attention"](np.ascontiguousarray(q[:, :, L:]), k, v)
error = np.abs(o_decode - want).max() / np.abs(want).max()
bytes_latent = (RANK + ROPE) * 2
bytes_expanded = H * (NOPE + ROPE + DV) * 2
print(f"prefill o {o_prefill.shape}; decode o_latent {o_latent.shape} -> o "
      f"{o_decode.shape}, max |latent - expanded| / max |o| = {error:.1e}")
print(f"cache per token in bf16: {bytes_latent} bytes (latent) vs "
      f"{bytes_expanded} (expanded, {H} heads)")
assert error < 1e-5
