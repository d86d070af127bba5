# REQUIRES: torch
# RUN: %attn_python %s
# Entries as PyTorch operators (Module.register_torch_ops): the CPU kernel
# equals calling the entry, the Meta kernel gives the outputs' shapes and
# dtypes without running anything, torch.fx traces a module that calls one
# as a single node, in-place inputs are updated through the operator, and
# errors are attn.Error; with a PyTorch that has torch.compile, a module
# and a mutating call compiled as one graph each, and with dynamic shapes
# one graph for several key lengths.
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import attention, close

torch.manual_seed(1)
H, HKV, D, P = 4, 2, 16, 8
m = attn.compile({"model": "ops", "layers": [
    {"name": "full", "type": "attention", "num_heads": H, "num_kv_heads": HKV,
     "head_dim": D, "gate": "headwise", "return_lse": True},
    {"name": "paged", "type": "attention", "num_heads": H,
     "num_kv_heads": HKV, "head_dim": D, "layout": {"page_size": P}}]})
ops = m.register_torch_ops("attn_test_ops")
assert ops is torch.ops.attn_test_ops

# The CPU kernel: the entry's outputs, as torch tensors.
B, LQ, LK = 2, 5, 19
q, k, v = (torch.randn(B, H, LQ, D), torch.randn(B, HKV, LK, D),
           torch.randn(B, HKV, LK, D))
gate = torch.randn(B, H, LQ, 1)
o, lse = ops.full(q, k, v, gate)
o_direct, lse_direct = m["full"](q, k, v, gate)
assert torch.equal(o, o_direct) and torch.equal(lse, lse_direct)
ref_o, ref_lse = attention(q.numpy(), k.numpy(), v.numpy(), gate=gate.numpy())
close(o.numpy(), ref_o, 1e-5, "op o")

# The Meta kernel: shapes and dtypes from the signature, nothing run.
meta = [t.to("meta") for t in (q, k, v, gate)]
o_meta, lse_meta = ops.full(*meta)
assert o_meta.device.type == "meta" and o_meta.shape == (B, H, LQ, D)
assert lse_meta.shape == (B, H, LQ) and lse_meta.dtype == torch.float32
try:
    ops.full(meta[0], meta[1][:, :, :, :8], meta[2], meta[3])
    raise AssertionError("no error")
except attn.Error as e:
    assert "input 'k' (#1)" in str(e), str(e)

# Traced by torch.fx as one call of the operator (what torch.compile's
# graph capture needs of a custom op), and the graph runs it.
class Layer(torch.nn.Module):
    def forward(self, q, k, v, gate):
        # Indexed, not unpacked: fx cannot unpack a proxy on Python 3.11.
        return ops.full(q, k, v, gate)[0] * 2


graph = torch.fx.symbolic_trace(Layer())
calls = [n for n in graph.graph.nodes if n.op == "call_function"
         and "attn_test_ops" in str(n.target)]
assert len(calls) == 1, graph.graph
assert torch.equal(graph(q, k, v, gate), o_direct * 2)

# torch.compile (PyTorch 2; Debian's 1.13 has none, the GPU machine's
# PyTorch has): the module captured as one graph (fullgraph=True raises at
# a graph break) on fake tensors through the Meta kernel, and run by
# aot_eager, which generates no code and so needs no C compiler.
if hasattr(torch, "compile"):
    compiled = torch.compile(Layer(), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v, gate), o_direct * 2)
    print("torch ops: torch.compile", torch.__version__, "took the operator")

    # Dynamic shapes: the Meta kernel keeps the key length symbolic, so
    # one graph serves every length (a size made concrete would recompile
    # for each).
    graphs = []

    def counting_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    dynamic = torch.compile(Layer(), fullgraph=True, dynamic=True,
                            backend=counting_backend)
    for lk in (LK, 23, 40):
        k_lk, v_lk = torch.randn(B, HKV, lk, D), torch.randn(B, HKV, lk, D)
        assert torch.equal(dynamic(q, k_lk, v_lk, gate),
                           m["full"](q, k_lk, v_lk, gate)[0] * 2)
    assert len(graphs) == 1, f"{len(graphs)} graphs for 3 key lengths"
    print("torch ops: torch.compile(dynamic=True): one graph for 3 key lengths")

# In-place inputs: `.append` writes the caches through the operator, whose
# schema marks them mutable.
schema = str(torch.ops.attn_test_ops.paged_append.default._schema)
assert "Tensor(a3!) k_cache, Tensor(a4!) v_cache) -> ()" in schema, schema
k_cache, v_cache = torch.zeros(3, P, HKV, D), torch.zeros(3, P, HKV, D)
k_new, v_new = torch.randn(2, HKV, D), torch.randn(2, HKV, D)
slots = torch.tensor([9, -1], dtype=torch.int32)
assert ops.paged_append(k_new, v_new, slots, k_cache, v_cache) is None
assert torch.equal(k_cache[1, 1], k_new[0]) and torch.equal(v_cache[1, 1], v_new[0])
assert int((k_cache != 0).sum()) == HKV * D, "only slot 9 was written"

# The mutating operator in a compiled function: functionalized by
# torch.compile, the caches still updated in place.
if hasattr(torch, "compile"):
    def append_then_read(k_new, v_new, slots, k_cache, v_cache):
        ops.paged_append(k_new, v_new, slots, k_cache, v_cache)
        return k_cache[2, 0] + v_cache[2, 0]

    compiled_append = torch.compile(append_then_read, fullgraph=True,
                                    backend="aot_eager")
    read = compiled_append(k_new, v_new,
                           torch.tensor([-1, 16], dtype=torch.int32),
                           k_cache, v_cache)
    assert torch.equal(k_cache[2, 0], k_new[1]), "slot 16 written in place"
    assert torch.equal(read, k_new[1] + v_new[1])

# Errors: attn.Error with the runtime's message, nothing written.
try:
    ops.paged_append(k_new, v_new, torch.tensor([9, 9], dtype=torch.int32),
                     k_cache, v_cache)
    raise AssertionError("no error")
except attn.Error as e:
    assert "slots" in str(e), str(e)
print("torch ops: all checks passed")
