# RUN: %attn_python %s
# SPEC §10's .tree and .commit entries of a linear layer, for every rule: random trees,
# chains (equal to the layer's own prefill), stars, T = 1 and trees of
# exactly max_nodes, Hv/Hk groups, the rmsnorm-silu gate, batches with
# different trees, against running §2 on every root-to-node path in
# float64; a tree past max_nodes and parents that are no tree are errors.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import (DECAY_RULES, DELTA_RULES, FEATURE_DECAY_RULES, RULES,
                       close, recurrence, tree_recurrence)

HK, HV, DK, DV = 2, 4, 20, 12
MAX_NODES = 40
rng = np.random.default_rng(11)


def compile_layer(rule, gate):
    layer = {"name": "lin", "type": "linear_attention", "rule": rule,
             "num_k_heads": HK, "num_v_heads": HV, "k_dim": DK, "v_dim": DV,
             "chunk_size": 16, "qk_l2norm": True, "tree": True}
    if gate:
        layer["output_gate"] = "rmsnorm_silu"
    return attn.compile({"model": f"tree-{rule}", "layers": [layer],
                         "speculative": {"max_tree_nodes": MAX_NODES}})


def inputs(rule, B, T, gate):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    x = {"q": f(B, HK, T, DK), "k": f(B, HK, T, DK), "v": f(B, HV, T, DV),
         "g": None, "beta": None, "s0": f(B, HV, DK, DV) * 0.1,
         "z": None, "w": None}
    if rule in FEATURE_DECAY_RULES:
        x["g"] = -rng.uniform(0.0, 1.0, (B, HV, T, DK)).astype(np.float32)
    elif rule in DECAY_RULES:
        x["g"] = -rng.uniform(0.0, 2.0, (B, HV, T)).astype(np.float32)
    if rule in DELTA_RULES:
        x["beta"] = rng.uniform(0.05, 0.95, (B, HV, T)).astype(np.float32)
    if gate:
        x["z"], x["w"] = f(B, HV, T, DV), f(DV)
    return x


def arguments(x, between):
    args = [x["q"], x["k"], x["v"]]
    args += [a for a in (x["g"], x["beta"]) if a is not None]
    args += between + [x["s0"]]
    args += [a for a in (x["z"], x["w"]) if a is not None]
    return args


def random_parents(B, T, shape):
    parents = np.full((B, T), -1, np.int32)
    for b in range(B):
        for t in range(1, T):
            parents[b, t] = {"chain": t - 1, "star": 0,
                             "random": rng.integers(0, t)}[shape]
    return parents


for rule in RULES:
    for gate in (False, True):
        m = compile_layer(rule, gate)
        names = [a.name for a in m.signature("lin.tree").inputs]
        assert names[names.index("parents") + 1] == "S_init", names
        for T, shape in ((1, "random"), (9, "random"), (MAX_NODES, "random"),
                         (17, "chain"), (13, "star")):
            x = inputs(rule, 2, T, gate)
            parents = random_parents(2, T, shape)
            o = m["lin.tree"](*arguments(x, [parents]))
            expected = tree_recurrence(rule, x["q"], x["k"], x["v"], x["g"],
                                       x["beta"], parents, x["s0"],
                                       l2norm=True, z=x["z"], w=x["w"])
            close(o, expected, 1e-4, f"{rule} gate={gate} T={T} {shape}")
            if shape == "chain":
                # A chain is the layer's own prefill.
                prefill, _ = m["lin"](*arguments(x, []))
                close(o, prefill, 1e-5, f"{rule} chain vs prefill")

# .commit: the state after an accepted path (a root-to-node walk, padded
# with -1 like attn.tree_accept's), equal to §2 over the path's nodes; the
# root alone and an empty path (S_init back) included.
def random_path(parents, b, length):
    T = parents.shape[1]
    children = {u: [t for t in range(T) if parents[b, t] == u] for u in range(T)}
    path = [0]
    while len(path) < length and children[path[-1]]:
        path.append(children[path[-1]][rng.integers(len(children[path[-1]]))])
    return path


for rule in RULES:
    m = compile_layer(rule, gate=True)
    names = [a.name for a in m.signature("lin.commit").inputs]
    assert names[-3:] == ["path", "length", "S_init"], names
    for T, shape, wanted in ((9, "random", (3, 1)), (30, "chain", (30, 0)),
                             (25, "random", (6, 25))):
        B = len(wanted)
        x = inputs(rule, B, T, False)
        parents = random_parents(B, T, shape)
        path = np.full((B, T), -1, np.int32)
        length = np.zeros(B, np.int32)
        expected = np.array(x["s0"], dtype=np.float64)
        for b in range(B):
            nodes = random_path(parents, b, wanted[b]) if wanted[b] else []
            path[b, :len(nodes)] = nodes
            length[b] = len(nodes)
            if nodes:
                pick = lambda a: None if a is None else a[b:b + 1][:, :, nodes]
                _, s = recurrence(rule, pick(x["q"]), pick(x["k"]),
                                  pick(x["v"]), pick(x["g"]), pick(x["beta"]),
                                  x["s0"][b:b + 1], l2norm=True)
                expected[b] = s[0]
        state = m["lin.commit"](*arguments(x, [path, length]))
        close(state, expected, 1e-4, f"{rule} commit T={T} lengths={list(length)}")

# Trees around and above a 64-step chunk, up to the 256 nodes the kernels
# take, as in Qwen3-Next's speculative decoding.
MAX_NODES = 256
m = compile_layer("gated_delta", True)
for T, shape in ((63, "random"), (64, "random"), (65, "random"),
                 (200, "random"), (256, "random"), (100, "chain")):
    x = inputs("gated_delta", 1, T, True)
    parents = random_parents(1, T, shape)
    o = m["lin.tree"](*arguments(x, [parents]))
    expected = tree_recurrence("gated_delta", x["q"], x["k"], x["v"], x["g"],
                               x["beta"], parents, x["s0"], l2norm=True,
                               z=x["z"], w=x["w"])
    close(o, expected, 1e-4, f"gated_delta T={T} {shape}")

MAX_NODES = 40
m = compile_layer("gated_delta", False)
x = inputs("gated_delta", 1, 4, False)
for path, length in (([0, 4, -1, -1], 2), ([0, 1, 2, 3], 5)):
    try:
        m["lin.commit"](*arguments(x, [np.array([path], np.int32),
                                       np.array([length], np.int32)]))
        raise AssertionError("no error for a path outside the tree")
    except attn.Error as e:
        assert "path" in str(e) or "length" in str(e), str(e)
x = inputs("gated_delta", 1, MAX_NODES + 1, False)
try:
    m["lin.tree"](*arguments(x, [random_parents(1, MAX_NODES + 1, "random")]))
    raise AssertionError("no error for a tree past max_nodes")
except attn.Error as e:
    assert f"max_nodes = {MAX_NODES}" in str(e), str(e)
x = inputs("gated_delta", 1, 5, False)
bad = random_parents(1, 5, "random")
bad[0, 3] = 3
try:
    m["lin.tree"](*arguments(x, [bad]))
    raise AssertionError("no error for parents that are no tree")
except attn.Error as e:
    assert "parents" in str(e), str(e)
print("tree recurrence: all checks passed")
