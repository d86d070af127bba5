"""Context-parallel attention on torch.distributed with attn.

The keys and values of a long context are sharded over the ranks of a
process group; every rank holds all queries, attends to its own shard with
attn (the layer returns lse beside o), and the ranks' partial results are
gathered and merged with attn.merge_states: the log-sum-exp combination of
SPEC §1.1, exactly attention over the whole context. Rank 0 checks the
result against single-process attention.

    PYTHONPATH=build/python python3 examples/python/context_parallel.py \
        --world-size 2

gloo on the CPU (the rendezvous is a file, so no port is opened); the same
code runs with NCCL on GPUs once device tensors are in (SPEC §8).
"""
import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import attn

HEADS, KV_HEADS, HEAD_DIM = 8, 2, 64
MODEL = {
    "model": "context-parallel",
    "layers": [{"name": "attention", "type": "attention",
                "num_heads": HEADS, "num_kv_heads": KV_HEADS,
                "head_dim": HEAD_DIM, "mask": "none", "return_lse": True}],
}


def shard(x: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s contiguous share of the keys (dim 2) of `x`."""
    bounds = [x.shape[2] * r // world for r in range(world + 1)]
    return x[:, :, bounds[rank]:bounds[rank + 1]].contiguous()


def run(rank: int, world: int, rendezvous: str, binary: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}",
                            rank=rank, world_size=world)
    model = attn.load(binary, threads=1)
    generator = torch.Generator().manual_seed(0)  # every rank: same tensors
    q = torch.randn(1, HEADS, 16, HEAD_DIM, generator=generator)
    k = torch.randn(1, KV_HEADS, 1000, HEAD_DIM, generator=generator)
    v = torch.randn(1, KV_HEADS, 1000, HEAD_DIM, generator=generator)

    o, lse = model["attention"](q, shard(k, rank, world), shard(v, rank, world))
    outputs = [torch.empty_like(o) for _ in range(world)]
    lses = [torch.empty_like(lse) for _ in range(world)]
    dist.all_gather(outputs, o)
    dist.all_gather(lses, lse)
    merged, merged_lse = attn.merge_states(zip(outputs, lses))

    if rank == 0:
        whole, whole_lse = model["attention"](q, k, v)
        error = (merged - whole).abs().max().item()
        lse_error = (merged_lse - whole_lse).abs().max().item()
        print(f"context parallel over {world} ranks: max |o - o_single| = "
              f"{error:.2e}, max |lse - lse_single| = {lse_error:.2e}")
        assert error < 1e-5 and lse_error < 1e-5, "merged result differs"
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "model.attnb")
        attn.compile(MODEL, output=binary)
        rendezvous = os.path.join(tmp, "rendezvous")
        mp.spawn(run, args=(args.world_size, rendezvous, binary),
                 nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
