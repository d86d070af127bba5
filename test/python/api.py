# RUN: %attn_python %s
# The SPEC §9 contract with NumPy: compile and load, entries and signatures,
# calls against the float64 reference on awkward sizes, out=, every error
# (and that nothing is written), a saved and reloaded binary, two threads
# on one model, return_lse and merge_states, a variant written as IR.
import os
import sys
import tempfile
import threading

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import attention, close

rng = np.random.default_rng(7)
H, HKV, D, DV = 4, 2, 24, 20
MODEL = {
    "model": "py-api",
    "layers": [
        {"name": "full", "type": "attention", "num_heads": H,
         "num_kv_heads": HKV, "head_dim": D, "value_dim": DV,
         "gate": "elementwise", "return_lse": True},
        {"name": "plain", "type": "attention", "num_heads": H,
         "num_kv_heads": HKV, "head_dim": D, "mask": "none",
         "return_lse": True},
    ],
}


def expect_error(fn, *needles):
    try:
        fn()
    except attn.Error as e:
        assert isinstance(e, ValueError)
        for needle in needles:
            assert needle in str(e), f"{needle!r} not in {str(e)!r}"
        return str(e)
    raise AssertionError(f"no attn.Error (expected {needles})")


def random(*shape):
    return rng.standard_normal(shape).astype(np.float32)


with tempfile.TemporaryDirectory() as tmp:
    binary = os.path.join(tmp, "model.attnb")
    m = attn.compile(MODEL, target="cpu", output=binary)
    assert os.path.exists(binary)

    # Entries and signatures.
    assert m.entries == ["full", "plain"], m.entries
    sig = m.signature("full")
    assert [a.name for a in sig.inputs] == ["q", "k", "v", "gate"]
    assert [a.name for a in sig.outputs] == ["o", "lse"]
    assert sig.inputs[0].dtype == "f32" and sig.inputs[0].shape == (None, H, None, D)
    assert sig.outputs[0].shape == (None, H, None, DV)
    assert sig.outputs[1].shape == (None, H, None)
    assert "q: f32[" in repr(sig) and "full(" in m["full"].__doc__
    assert [a.name for a in sig] == ["q", "k", "v", "gate", "o", "lse"]
    assert len(sig) == 6 and sig["gate"].dims == (None, H, None, DV)
    assert sig[5].name == "lse" and "lse" not in m and "full" in m

    # The temporaries a call needs on the module's device (SPEC §8): decode
    # splits its keys and merges them, prefill needs none; a workspace of
    # device memory is for a module on the GPU.
    decode_bytes = m["full"].workspace_bytes(
        random(2, H, 1, D), random(2, HKV, 700, D), random(2, HKV, 700, DV),
        random(2, H, 1, DV))
    assert decode_bytes > 0, decode_bytes
    assert m["full"].workspace_bytes(
        random(2, H, 40, D), random(2, HKV, 40, D), random(2, HKV, 40, DV),
        random(2, H, 40, DV)) == 0
    expect_error(lambda: m.set_workspace(None), "for a model on the GPU")
    expect_error(lambda: m.set_workspace(np.zeros(16, np.uint8)),
                 "expected a contiguous torch CUDA tensor")

    # A call on awkward sizes against the reference: decode-like Lq < Lk.
    B, LQ, LK = 3, 5, 37
    q, k, v = random(B, H, LQ, D), random(B, HKV, LK, D), random(B, HKV, LK, DV)
    gate = random(B, H, LQ, DV)
    o, lse = m["full"](q, k, v, gate)
    assert isinstance(o, np.ndarray) and o.dtype == np.float32
    ref_o, ref_lse = attention(q, k, v, gate=gate)
    close(o, ref_o, 1e-5, "o")
    close(lse, ref_lse, 1e-5, "lse")

    # out=: written in place and returned; the same result.
    o_buf = np.full_like(o, 7.0)
    lse_buf = np.empty_like(lse)
    got = m["full"](q, k, v, gate, out=(o_buf, lse_buf))
    assert got[0] is o_buf and got[1] is lse_buf
    np.testing.assert_array_equal(o_buf, o)

    # Errors name what is wrong, and nothing is written.
    o_buf[...] = 7.0
    expect_error(lambda: m["full"](q, k, v), "expected 4 inputs, got 3")
    expect_error(lambda: m["full"](q, k, v, gate.astype(np.float64),
                                   out=(o_buf, lse_buf)),
                 "input 3 (gate)", "expected dtype f32", "float64")
    # An array of the other byte order (np.load of a '>f4' file) has the
    # right kind and size but other bytes: an error, not garbage.
    expect_error(lambda: m["full"](q, k.astype(">f4"), v, gate, out=(o_buf, lse_buf)),
                 "input 1 (k)", "expected dtype f32", ">f4")
    expect_error(lambda: m["full"](q, k, v, gate, out=(o_buf, lse_buf.astype(">f4"))),
                 "output 1 (lse)", ">f4")
    expect_error(lambda: m["full"](q, k[:, :, ::2], v, gate, out=(o_buf, lse_buf)),
                 "input 1 (k)", "not C-contiguous")
    expect_error(lambda: m["full"](q, k, v[:, :, :-1], gate, out=(o_buf, lse_buf)),
                 "v")
    expect_error(lambda: m["full"](q, k, v, gate, out=(o_buf[:, :, :-1].copy(), lse_buf)),
                 "o")
    frozen = o_buf.copy()
    frozen.flags.writeable = False
    expect_error(lambda: m["full"](q, k, v, gate, out=(frozen, lse_buf)),
                 "output 0 (o)", "read-only")
    expect_error(lambda: m["full"]([1, 2], k, v, gate), "input 0 (q)",
                 "expected a NumPy array")
    assert (o_buf == 7.0).all(), "a failed call wrote its output"
    expect_error(lambda: m["missing"], "missing")
    expect_error(lambda: setattr(m, "device", "tpu"), "device must be")
    expect_error(lambda: attn.compile({"model": "x", "layers": []}),
                 "layers")
    expect_error(lambda: attn.load(os.path.join(tmp, "nothing.attnb")),
                 "nothing.attnb: cannot open: No such file")
    expect_error(lambda: attn.load(tmp), "cannot read: Is a directory")
    expect_error(lambda: attn.load(b"not a binary"))
    # A mistyped path is reported as one, not parsed as the text of a model.
    expect_error(lambda: attn.compile("configs/qwen3-next.json"),
                 "compile: configs/qwen3-next.json: no such file")
    # NumPy scalars in a model dict are the numbers they hold; an array
    # is no JSON value.
    scalars = attn.compile({"model": "np", "layers": [
        {"name": "a", "type": "attention", "num_heads": np.int64(H),
         "num_kv_heads": np.int32(HKV), "head_dim": D,
         "softcap": np.float32(30.0)}]})
    assert scalars.signature("a").inputs[0].shape == (None, H, None, D)
    expect_error(lambda: attn.compile({"model": "np", "layers": [
        {"name": "a", "type": "attention", "num_heads": np.ones(2),
         "num_kv_heads": HKV, "head_dim": D}]}),
                 "a ndarray in the model dict is not a JSON value")

    # The saved binary, from its path and from its bytes.
    for loaded in (attn.load(binary),
                   attn.load(open(binary, "rb").read(), threads=1)):
        o2, lse2 = loaded["full"](q, k, v, gate)
        np.testing.assert_array_equal(o2, o)

    # Two Python threads on one model (the GIL is released while it runs).
    inputs = [(random(2, H, 9, D), random(2, HKV, 50, D), random(2, HKV, 50, DV),
               random(2, H, 9, DV)) for _ in range(4)]
    expected = [m["full"](*x)[0] for x in inputs]
    failures = []

    def worker(index):
        for _ in range(5):
            got = m["full"](*inputs[index])[0]
            if not np.array_equal(got, expected[index]):
                failures.append(index)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures

    # merge_states: attention over two halves of the keys, merged, equals
    # attention over all of them; an empty part contributes nothing.
    B, LQ, LK = 2, 6, 41
    q, k, v = random(B, H, LQ, D), random(B, HKV, LK, D), random(B, HKV, LK, D)
    full_o, full_lse = m["plain"](q, k, v)
    parts = [m["plain"](q, k[:, :, :17].copy(), v[:, :, :17].copy()),
             m["plain"](q, k[:, :, 17:].copy(), v[:, :, 17:].copy())]
    merged_o, merged_lse = attn.merge_states(parts)
    close(merged_o, full_o, 1e-5, "merged o")
    close(merged_lse, full_lse, 1e-5, "merged lse")
    empty = (np.zeros_like(full_o), np.full_like(full_lse, -np.inf))
    merged_o, merged_lse = attn.merge_states([empty, (full_o, full_lse)])
    close(merged_o, full_o, 1e-6, "merge with an empty part")
    merged_o, merged_lse = attn.merge_states([empty, empty])
    assert (merged_o == 0).all() and np.isneginf(merged_lse).all()

    # Attention sinks: parts computed without them, merged with them, equal
    # one call of a layer with sinks (o and lse); a sink of -inf is none.
    with_sinks = attn.compile({"model": "s", "layers": [
        {"name": "s", "type": "attention", "num_heads": H,
         "num_kv_heads": HKV, "head_dim": D, "mask": "none",
         "return_lse": True, "sinks": True}]})
    sinks = rng.uniform(-1.0, 3.0, H).astype(np.float32)
    sinks[0] = -np.inf
    want_o, want_lse = with_sinks["s"](q, k, v, sinks)
    merged_o, merged_lse = attn.merge_states(parts, sinks=sinks)
    close(merged_o, want_o, 1e-5, "merged o with sinks")
    close(merged_lse, want_lse, 1e-5, "merged lse with sinks")
    merged_o, merged_lse = attn.merge_states([empty], sinks=sinks)
    assert (merged_o == 0).all()
    close(merged_lse, np.broadcast_to(sinks[None, :, None], merged_lse.shape),
          0, "lse of rows that see only the sink")
    expect_error(lambda: attn.merge_states(parts, sinks=sinks[:1]),
                 "merge_states: sinks (1,) must hold one logit per head")
    o0, lse0 = parts[0]
    expect_error(lambda: attn.merge_states([parts[0], (o0[:, :, :2],
                                                       lse0[:, :, :2])]),
                 f"merge_states: part 1: o {o0[:, :, :2].shape}, but part 0's "
                 f"is {o0.shape}")

# A variant written as IR (SPEC §7): ALiBi with slopes 2^-(h+1), compiled
# from the text of the module.
ALIBI = """
func.func @alibi(%q: tensor<?x4x?x16xf32>, %k: tensor<?x4x?x16xf32>,
                 %v: tensor<?x4x?x16xf32>) -> tensor<?x4x?x16xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %c1 = arith.constant 1 : index
        %steps = arith.addi %h, %c1 : index
        %stepsi = arith.index_cast %steps : index to i32
        %stepsf = arith.sitofp %stepsi : i32 to f32
        %exponent = arith.negf %stepsf : f32
        %slope = math.exp2 %exponent : f32
        %distance = arith.subi %qp, %kp : index
        %di = arith.index_cast %distance : index to i32
        %df = arith.sitofp %di : i32 to f32
        %penalty = arith.mulf %slope, %df : f32
        %r = arith.subf %s, %penalty : f32
        attn.yield %r : f32
      }
  return %o : tensor<?x4x?x16xf32>
}
"""
alibi = attn.compile(ALIBI)
assert alibi.entries == ["alibi"]
q, k, v = random(2, 4, 19, 16), random(2, 4, 19, 16), random(2, 4, 19, 16)
ref_o, _ = attention(q, k, v, score_mod=lambda s, h, qp, kp:
                     s - 2.0 ** -(h + 1) * (qp - kp))
close(alibi["alibi"](q, k, v), ref_o, 1e-5, "alibi")
expect_error(lambda: attn.compile("func.func @broken("), "error")
print("api: all checks passed")
