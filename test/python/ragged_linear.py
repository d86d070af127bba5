# RUN: %attn_python %s
# A linear layer over a ragged batch (SPEC §8): sequences of 0 to 45 steps
# packed token-major in one call, their states in a pool updated in place,
# for every rule and the output gate, against the float64 step-by-step
# reference run on each sequence alone, continued over a second call; the
# pool's other slots stay as they were, and bad offsets or slots are errors
# that name the index and leave the pool untouched.
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import (DECAY_RULES, DELTA_RULES, FEATURE_DECAY_RULES, RULES,
                       close, recurrence)

HK, HV, DK, DV, POOL = 2, 4, 20, 12, 7
rng = np.random.default_rng(8)


def model(rule, gate=False):
    layer = {"name": "lin", "type": "linear_attention", "rule": rule,
             "num_k_heads": HK, "num_v_heads": HV, "k_dim": DK, "v_dim": DV,
             "chunk_size": 16, "qk_l2norm": True, "layout": {"ragged": True}}
    if gate:
        layer["output_gate"] = "rmsnorm_silu"
    return attn.compile({"model": "ragged", "layers": [layer]})


def steps(rule, T):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    x = {"q": f(T, HK, DK), "k": f(T, HK, DK), "v": f(T, HV, DV),
         "beta": rng.uniform(0.05, 0.95, (T, HV)).astype(np.float32),
         "z": f(T, HV, DV)}
    x["g"] = (-rng.uniform(0, 1, (T, HV, DK)) if rule in FEATURE_DECAY_RULES
              else -rng.uniform(0, 2, (T, HV))).astype(np.float32)
    return x


def per_sequence(x, first, n):
    """Rows [first, first + n) of a packed [T, H(, F)] array as
    [1, H, n(, F)], the reference's layout."""
    return np.moveaxis(x[first:first + n], 0, 1)[None]


def check(rule, gate, calls):
    m = model(rule, gate)
    sig = m.signature("lin")
    names = [a.name for a in sig.inputs]
    expected = ["q", "k", "v"] + (["g"] if rule in DECAY_RULES else []) \
        + (["beta"] if rule in DELTA_RULES else []) \
        + ["states", "state_idx"] + (["z", "w"] if gate else []) + ["cu_seqlens"]
    assert names == expected, names
    assert [a.name for a in sig.outputs] == ["o"]
    assert [a.in_place for a in sig.inputs] == [n == "states" for n in names]
    assert "(updated in place)" in repr(sig["states"])

    B = len(calls[0])
    slots = np.array([(POOL - 1 - 2 * b) % POOL for b in range(B)], np.int32)
    pool = (rng.standard_normal((POOL, HV, DK, DV)) * 0.1).astype(np.float32)
    initial = pool.copy()
    w = rng.standard_normal(DV).astype(np.float32)
    history = [None] * B
    for lengths in calls:
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        x = steps(rule, int(cu[-1]))
        args = [x[n] for n in names[:names.index("states")]] + [pool, slots]
        if gate:
            args += [x["z"], w]
        o = m["lin"](*args, cu)
        expected_pool = initial.copy()
        for b in range(B):
            now = {n: per_sequence(x[n], cu[b], lengths[b]) for n in x}
            history[b] = now if history[b] is None else {
                n: np.concatenate([history[b][n], now[n]], axis=2) for n in x}
            h = history[b]
            ref_o, ref_s = recurrence(
                rule, h["q"], h["k"], h["v"],
                h["g"] if "g" in names else None,
                h["beta"] if "beta" in names else None,
                initial[slots[b]][None], l2norm=True,
                z=h["z"] if gate else None, w=w if gate else None)
            n = lengths[b]
            if n:
                close(o[cu[b]:cu[b + 1]],
                      np.moveaxis(ref_o[0, :, ref_o.shape[2] - n:], 0, 1),
                      1e-4, f"{rule} o of sequence {b}")
            expected_pool[slots[b]] = ref_s[0]
        close(pool, expected_pool, 1e-4, f"{rule} pool")
    return m


for rule in RULES:
    check(rule, False, [[0, 1, 3, 37, 1, 45], [5, 1, 0, 1, 20, 1]])
m = check("gated_delta", True, [[2, 1, 33], [1, 1, 1]])

# Bad offsets and slots name the index; nothing is written.
x = steps("gated_delta", 6)
pool = np.zeros((3, HV, DK, DV), np.float32)
z, w = x["z"], np.ones(DV, np.float32)


def call(slots, cu, pool=pool):
    return m["lin"](x["q"], x["k"], x["v"], x["g"], x["beta"], pool,
                    np.array(slots, np.int32), z, w, np.array(cu, np.int32))


def expect_error(fragment, *args, **kwargs):
    before = pool.copy()
    try:
        call(*args, **kwargs)
    except attn.Error as e:
        assert fragment in str(e), str(e)
        assert np.array_equal(pool, before), "a failed call wrote the pool"
        return
    raise AssertionError(f"no error: {fragment}")


expect_error("cu_seqlens[0] = 2 must be 0", [0, 1], [2, 4, 6])
expect_error("cu_seqlens[2] = 2 must be at least cu_seqlens[1] = 4", [0, 1],
             [0, 4, 2])
expect_error("cu_seqlens[2] = 5 must be 6, the tokens of 'q'", [0, 1], [0, 2, 5])
expect_error("state_idx[1] = 3 must be a slot of 'states' in [0, 3)", [0, 3], [0, 2, 6])
expect_error("state_idx[1] = 0 is also state_idx[0]", [0, 0], [0, 2, 6])
expect_error("'cu_seqlens' must hold B + 1 offsets", [0, 1], [0, 2, 4, 6])
frozen = pool.copy()
frozen.setflags(write=False)
expect_error("read-only (the call updates it in place)", [0, 1], [0, 2, 6],
             pool=frozen)
call([2, 0], [0, 6, 6])  # a sequence of no steps keeps its slot
print("ragged linear: ok")
