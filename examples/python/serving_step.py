"""A serving engine's steps over a hybrid model's two layer kinds (SPEC §8).

Requests arrive and decode over two steps, packed token-major each step
(prefills and decodes in one call):

  * the gated attention layer keeps its keys and values in a paged cache the
    engine owns: each step `attn.append` writes the step's new rows into
    their pages' slots, then `attn` attends over each request's pages;
  * the Gated DeltaNet layer keeps each request's state in a pool slot:
    `gdn` advances the step's requests from their slots, in place.

Each request's outputs over the two steps equal one dense call over its
whole sequence (`attn_dense`, `gdn_dense`), which the script checks.

    PYTHONPATH=build/python python3 examples/python/serving_step.py
"""
import numpy as np

import attn

H, HKV, D, P = 4, 2, 32, 16           # attention: heads, kv heads, dims, page
HK, HV = 2, 4                          # Gated DeltaNet: key and value heads
attention = {"type": "attention", "num_heads": H, "num_kv_heads": HKV,
             "head_dim": D, "gate": "elementwise"}
delta = {"type": "linear_attention", "rule": "gated_delta", "num_k_heads": HK,
         "num_v_heads": HV, "k_dim": D, "v_dim": D, "qk_l2norm": True}
m = attn.compile({"model": "serving", "layers": [
    dict(attention, name="attn", layout={"ragged": True, "page_size": P}),
    dict(delta, name="gdn", layout={"ragged": True}),
    dict(attention, name="attn_dense"),
    dict(delta, name="gdn_dense")]})
print(m)

rng = np.random.default_rng(0)
NUM_PAGES, POOL = 32, 8
k_cache = np.zeros((NUM_PAGES, P, HKV, D), np.float32)
v_cache = np.zeros_like(k_cache)
states = np.zeros((POOL, HV, D, D), np.float32)
free_pages = list(rng.permutation(NUM_PAGES))


class Request:
    """A request's pages, its keys so far, its state slot, and every token's
    inputs (kept to check against a dense call at the end)."""

    def __init__(self, slot):
        self.pages, self.length, self.slot = [], 0, slot
        self.tokens = []  # per token: q, k, v, gate, gq, gk, gv, g, beta
        self.outputs = []  # per token: attention o, Gated DeltaNet o


def token_inputs():
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    return (f(H, D), f(HKV, D), f(HKV, D), f(H, D),            # attention
            f(HK, D), f(HK, D), f(HV, D),                       # delta q, k, v
            -np.abs(f(HV)) * 0.1, 1 / (1 + np.exp(-f(HV))))     # g, beta


def step(batch):
    """One engine step: `batch` is [(request, new tokens)]."""
    tokens = [(r, token_inputs()) for r, n in batch for _ in range(n)]
    stack = lambda i: np.ascontiguousarray(np.stack([t[i] for _, t in tokens]))
    q, k, v, gate, gq, gk, gv, g, beta = (stack(i) for i in range(9))
    # Each new token's slot in its request's pages, allocating pages.
    slots = []
    for r, n in batch:
        for j in range(r.length, r.length + n):
            if j // P == len(r.pages):
                r.pages.append(free_pages.pop())
            slots.append(r.pages[j // P] * P + j % P)
        r.length += n
    cu = np.concatenate([[0], np.cumsum([n for _, n in batch])]).astype(np.int32)
    table = np.full((len(batch), max(len(r.pages) for r, _ in batch)), -1,
                    np.int32)
    for b, (r, _) in enumerate(batch):
        table[b, :len(r.pages)] = r.pages
    seq_lens = np.array([r.length for r, _ in batch], np.int32)
    slot_of = np.array([r.slot for r, _ in batch], np.int32)

    m["attn.append"](k, v, np.array(slots, np.int32), k_cache, v_cache)
    o = m["attn"](q, k_cache, v_cache, table, seq_lens, gate, cu)
    o_delta = m["gdn"](gq, gk, gv, g, beta, states, slot_of, cu)
    for t, (r, inputs) in enumerate(tokens):
        r.tokens.append(inputs)
        r.outputs.append((o[t], o_delta[t]))


a, b, c = Request(slot=5), Request(slot=2), Request(slot=7)
step([(a, 37), (b, 1)])            # a prefills 37 tokens, b its first one
step([(a, 1), (b, 1), (c, 20)])    # a and b decode, c arrives

worst = 0.0
for r in (a, b, c):
    # The dense layers over the request's whole sequence, [1, heads, L, F].
    seq = lambda i: np.ascontiguousarray(
        np.stack([t[i] for t in r.tokens], axis=-2)[None])
    q, k, v, gate, gq, gk, gv = (seq(i) for i in range(7))
    g = np.ascontiguousarray(np.stack([t[7] for t in r.tokens], -1)[None])
    beta = np.ascontiguousarray(np.stack([t[8] for t in r.tokens], -1)[None])
    o = m["attn_dense"](q, k, v, gate)
    o_delta, state = m["gdn_dense"](gq, gk, gv, g, beta,
                                    np.zeros((1, HV, D, D), np.float32))
    for i, (o_step, o_delta_step) in enumerate(r.outputs):
        worst = max(worst, np.abs(o_step - o[0, :, i]).max(),
                    np.abs(o_delta_step - o_delta[0, :, i]).max())
    worst = max(worst, np.abs(states[r.slot] - state[0]).max())
print(f"two engine steps over pages and a state pool: max |step - dense| = "
      f"{worst:.1e}")
assert worst < 1e-4, worst
