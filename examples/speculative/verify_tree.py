"""Verifying a draft tree through a hybrid model's two kinds of layers.

One gated attention layer and one Gated DeltaNet layer of Qwen3-Next's shape
(model.json beside this file) verify a draft tree of 12 tokens after a
48-token prefix, as a speculative-decoding engine would:

  1. full_attention.tree   attends each node to the prefix and its ancestors;
  2. linear_attention.tree runs the recurrence along each node's path from
                           the prefix's state (SPEC §10);
  3. verify.accept         greedily accepts the path the target model agrees
                           with;
  4. full_attention.compact moves the accepted tokens' K/V rows after the
                           prefix;
  5. linear_attention.commit gives the state after the accepted path.

Each token is stood for by random per-token projections (no weights here).
The script then runs the accepted tokens one at a time through the two
layers' ordinary decode entries and checks that the outputs at the accepted
nodes, the compacted cache and the committed state are the same.

    PYTHONPATH=build/python python3 examples/speculative/verify_tree.py
"""
import os

import numpy as np

import attn

here = os.path.dirname(os.path.abspath(__file__))
model = attn.compile(os.path.join(here, "model.json"))
full = model.signature("full_attention")
H, HKV, D = full.inputs[0].shape[1], full.inputs[1].shape[1], full.inputs[0].shape[3]
linear = model.signature("linear_attention")
HK, DK = linear.inputs[0].shape[1], linear.inputs[0].shape[3]
HV, DV = linear.inputs[2].shape[1], linear.inputs[2].shape[3]
P = 48

rng = np.random.default_rng(0)
w = rng.standard_normal(DV).astype(np.float32)


def projections(token):
    """A token's inputs to both layers (what its hidden state would give)."""
    r = np.random.default_rng(token)
    f = lambda *s: r.standard_normal(s).astype(np.float32)
    return {"q": f(H, D), "k": f(HKV, D), "v": f(HKV, D), "gate": f(H, D),
            "lq": f(HK, DK), "lk": f(HK, DK), "lv": f(HV, DV),
            "g": -r.uniform(0.0, 1.0, HV).astype(np.float32),
            "beta": r.uniform(0.0, 1.0, HV).astype(np.float32), "z": f(HV, DV)}


def stack(tokens, name):
    """[1, heads, len(tokens), ...] of one projection."""
    return np.ascontiguousarray(
        np.stack([projections(t)[name] for t in tokens], axis=1)[None])


# The committed prefix: its K/V cache and the linear layer's state.
prefix = list(rng.integers(1000, 50000, P))
k_cache, v_cache = stack(prefix, "k"), stack(prefix, "v")
state = np.zeros((1, HV, DK, DV), np.float32)
_, state = model["linear_attention"](
    stack(prefix, "lq"), stack(prefix, "lk"), stack(prefix, "lv"),
    stack(prefix, "g"), stack(prefix, "beta"), state, stack(prefix, "z"), w)

# A draft tree of 12 nodes. The root is the token the last round accepted
# (its bonus): committed, but its K/V rows and state update are computed
# here with the drafts'.
parents = np.array([[-1, 0, 0, 1, 1, 2, 3, 3, 4, 6, 6, 9]], np.int32)
T = parents.shape[1]
tokens = rng.integers(1000, 50000, (1, T)).astype(np.int32)
# The target model agrees with the draft along 0 -> 1 -> 3 -> 6 -> 10.
target = rng.integers(1000, 50000, (1, T)).astype(np.int32)
for parent, child in ((0, 1), (1, 3), (3, 6), (6, 10)):
    target[0, parent] = tokens[0, child]

tree = list(tokens[0])
o_attention = model["full_attention.tree"](
    stack(tree, "q"), np.concatenate([k_cache, stack(tree, "k")], 2),
    np.concatenate([v_cache, stack(tree, "v")], 2), parents, stack(tree, "gate"))
linear_inputs = [stack(tree, n) for n in ("lq", "lk", "lv", "g", "beta")]
o_linear = model["linear_attention.tree"](*linear_inputs, parents, state,
                                          stack(tree, "z"), w)
path, length, bonus = model["verify.accept"](tokens, target, parents)
accepted = list(path[0, :length[0]])
print(f"accepted path {accepted} ({length[0]} of {T} nodes), bonus token "
      f"{bonus[0]}")
k_new, v_new = model["full_attention.compact"](
    np.concatenate([k_cache, stack(tree, "k")], 2),
    np.concatenate([v_cache, stack(tree, "v")], 2), path, length)
committed = model["linear_attention.commit"](*linear_inputs, path, length, state)

# The same tokens one at a time through the ordinary decode entries.
errors = {"attention o": 0.0, "linear o": 0.0, "K/V cache": 0.0, "state": 0.0}
keys, values, s = k_cache, v_cache, state
for i, node in enumerate(accepted):
    token = [tree[node]]
    keys = np.concatenate([keys, stack(token, "k")], 2)
    values = np.concatenate([values, stack(token, "v")], 2)
    o = model["full_attention"](stack(token, "q"), keys, values,
                                stack(token, "gate"))
    errors["attention o"] = max(errors["attention o"],
                                np.abs(o[0, :, 0] - o_attention[0, :, node]).max())
    o, s = model["linear_attention"](*[stack(token, n) for n in
                                       ("lq", "lk", "lv", "g", "beta")],
                                     s, stack(token, "z"), w)
    errors["linear o"] = max(errors["linear o"],
                             np.abs(o[0, :, 0] - o_linear[0, :, node]).max())
n = P + len(accepted)
errors["K/V cache"] = max(np.abs(k_new[:, :, :n] - keys).max(),
                          np.abs(v_new[:, :, :n] - values).max())
errors["state"] = np.abs(committed - s).max()
for name, error in errors.items():
    print(f"  {name:12s} max |tree - one by one| = {error:.2e}")
assert errors["K/V cache"] == 0.0
assert max(errors["attention o"], errors["linear o"], errors["state"]) < 1e-4
print("the tree's outputs on the accepted path equal decoding the accepted "
      "tokens one by one")
