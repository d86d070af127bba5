# REQUIRES: torch
# RUN: %attn_python %s
# PyTorch CPU tensors: used in place through NumPy views (no copy), outputs
# as torch tensors, out= torch buffers, f16 and bf16 storage, errors, and
# merge_states on torch tensors; CUDA tensors on a stream when there is a
# GPU.
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import attention, close

torch.manual_seed(0)
H, HKV, D = 4, 1, 32
layer = {"type": "attention", "num_heads": H, "num_kv_heads": HKV,
         "head_dim": D, "gate": "headwise", "return_lse": True}
f32 = attn.compile({"model": "t32", "layers": [dict(layer, name="full")]})
bf16 = attn.compile({"model": "t16", "dtype": "bf16",
                     "layers": [dict(layer, name="full")]})

B, LQ, LK = 2, 7, 29
q, k, v = (torch.randn(B, H, LQ, D), torch.randn(B, HKV, LK, D),
           torch.randn(B, HKV, LK, D))
gate = torch.randn(B, H, LQ, 1)
o, lse = f32["full"](q, k, v, gate)
assert isinstance(o, torch.Tensor) and o.dtype == torch.float32
assert isinstance(lse, torch.Tensor) and lse.shape == (B, H, LQ)
ref_o, ref_lse = attention(q.numpy(), k.numpy(), v.numpy(), gate=gate.numpy())
close(o.numpy(), ref_o, 1e-5, "torch o")
close(lse.numpy(), ref_lse, 1e-5, "torch lse")

# out= torch buffers are written in place (the NumPy view shares memory).
o_buf, lse_buf = torch.full_like(o, 3.0), torch.empty_like(lse)
got = f32["full"](q, k, v, gate, out=(o_buf, lse_buf))
assert got[0] is o_buf and torch.equal(o_buf, o)

# bf16 storage: torch bf16 tensors in and out.
qb, kb, vb, gb = (t.to(torch.bfloat16) for t in (q, k, v, gate))
ob, lseb = bf16["full"](qb, kb, vb, gb)
assert ob.dtype == torch.bfloat16 and lseb.dtype == torch.float32
ref_o, _ = attention(*(t.float().numpy() for t in (qb, kb, vb)),
                     gate=gb.float().numpy())
close(ob.float().numpy(), ref_o, 1e-5 + 2.0 ** -7, "bf16 o")

# Errors: a strided view, a wrong dtype, a tensor that needs grad is fine
# (read through detach), nothing written on failure.
o_buf.fill_(3.0)
for bad, needle in ((k.transpose(2, 3), "not C-contiguous"),
                    (k.double(), "expected dtype f32")):
    try:
        f32["full"](q, bad, v, gate, out=(o_buf, lse_buf))
        raise AssertionError("no error")
    except attn.Error as e:
        assert needle in str(e), str(e)
assert (o_buf == 3.0).all()
f32["full"](q.requires_grad_(), k, v, gate)

# merge_states on torch tensors.
m2 = attn.compile({"model": "m", "layers": [
    {"name": "a", "type": "attention", "num_heads": H, "num_kv_heads": HKV,
     "head_dim": D, "mask": "none", "return_lse": True}]})
whole = m2["a"](q.detach(), k, v)
parts = [m2["a"](q.detach(), k[:, :, :10].contiguous(), v[:, :, :10].contiguous()),
         m2["a"](q.detach(), k[:, :, 10:].contiguous(), v[:, :, 10:].contiguous())]
merged_o, merged_lse = attn.merge_states(parts)
assert isinstance(merged_o, torch.Tensor)
close(merged_o.numpy(), whole[0].numpy(), 1e-5, "torch merged o")
close(merged_lse.numpy(), whole[1].numpy(), 1e-5, "torch merged lse")
# ... and with attention sinks, equal to a layer that has them.
m3 = attn.compile({"model": "m", "layers": [
    {"name": "a", "type": "attention", "num_heads": H, "num_kv_heads": HKV,
     "head_dim": D, "mask": "none", "return_lse": True, "sinks": True}]})
sinks = torch.linspace(-1.0, 2.0, H)
with_sinks = m3["a"](q.detach(), k, v, sinks)
merged_o, merged_lse = attn.merge_states(parts, sinks=sinks)
close(merged_o.numpy(), with_sinks[0].numpy(), 1e-5, "torch merged o, sinks")
close(merged_lse.numpy(), with_sinks[1].numpy(), 1e-5, "torch merged lse, sinks")
# CUDA tensors (SPEC §8), when there is a GPU: used in place on torch's
# current stream, outputs on the GPU, equal to the reference; a call mixing
# CUDA and CPU tensors is refused.
if torch.cuda.is_available():
    g = attn.compile({"model": "tc", "layers": [dict(layer, name="full")]},
                     target="all")
    g.device = "cuda"
    qc, kc, vc, gc = (t.detach().cuda() for t in (q, k, v, gate))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        oc, lsec = g["full"](qc, kc, vc, gc)
    stream.synchronize()
    assert oc.is_cuda and lsec.is_cuda
    ref_o, ref_lse = attention(q.detach().numpy(), k.numpy(), v.numpy(),
                               gate=gate.numpy())
    close(oc.cpu().numpy(), ref_o, 1e-5, "CUDA o")
    close(lsec.cpu().numpy(), ref_lse, 1e-5, "CUDA lse")
    try:
        g["full"](qc, k, vc, gc)
        raise AssertionError("no error")
    except attn.Error as e:
        assert "CUDA and CPU tensors in one call" in str(e), str(e)

    # Captured in a CUDA graph with a workspace, replayed on new inputs.
    workspace = torch.empty(g["full"].workspace_bytes(qc, kc, vc, gc),
                            dtype=torch.uint8, device="cuda")
    g.set_workspace(workspace)
    out = (torch.empty_like(oc), torch.empty_like(lsec))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        g["full"](qc, kc, vc, gc, out=out)  # warm-up, outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g["full"](qc, kc, vc, gc, out=out)
    for _ in range(2):
        fresh = [torch.randn_like(t) for t in (qc, kc, vc, gc)]
        for dst, src in zip((qc, kc, vc, gc), fresh):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        ref_o, _ = attention(*(t.cpu().numpy() for t in fresh[:3]),
                             gate=fresh[3].cpu().numpy())
        close(out[0].cpu().numpy(), ref_o, 1e-5, "replayed CUDA o")
    g.set_workspace(None)

    # Index inputs in CUDA memory are checked by the kernels: a page out of
    # range is reported by check_device after a synchronisation, and the
    # call wrote nothing.
    paged = attn.compile({"model": "pc", "layers": [
        {"name": "attn", "type": "attention", "num_heads": H,
         "num_kv_heads": HKV, "head_dim": D, "layout": {"page_size": 16}}]},
        target="all")
    paged.device = "cuda"
    qp = torch.randn(2, H, 1, D, device="cuda")
    kcache, vcache = (torch.randn(5, 16, HKV, D, device="cuda")
                      for _ in range(2))
    table = torch.tensor([[4, 1, 2], [3, 0, 99]], dtype=torch.int32,
                         device="cuda")
    lengths = torch.tensor([40, 20], dtype=torch.int32, device="cuda")
    bad = table.clone()
    bad[1, 1] = 5
    op = torch.full((2, H, 1, D), 3.0, device="cuda")
    paged["attn"](qp, kcache, vcache, bad, lengths, out=(op,))
    torch.cuda.synchronize()
    try:
        paged.check_device()
        raise AssertionError("no error")
    except attn.Error as e:
        assert "page_table[1][1] = 5 must be a page in [0, 5)" in str(e), str(e)
    assert (op == 3.0).all()
    paged.check_device()  # read once: clear again
    (good,) = paged["attn"](qp, kcache, vcache, table, lengths)
    torch.cuda.synchronize()
    paged.check_device()
    paged.device = "cpu"
    (expected,) = paged["attn"](*(t.cpu() for t in (qp, kcache, vcache,
                                                    table, lengths)))
    close(good.cpu().numpy(), expected.numpy(), 1e-5, "paged CUDA o")
f32.check_device()  # a module that made no device call has nothing to report
print("torch: all checks passed")
