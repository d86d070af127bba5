#!/usr/bin/env python3
"""Compile time of a model description by its number of layers.

Qwen3-Next's two layer kinds (three Gated DeltaNet layers, then one gated
attention layer, repeated) as a model description with one entry per layer,
for 1, 4, 12 and 48 layers, each compiled three times (the median is
printed). Equal layers share their kernels, so the time grows with the
distinct layers, not with all of them.

    bench/compile-time.py [--target cpu|cuda|all] [--against ATTNC] [BUILD_DIR]

(defaults: cpu, build). With --against, another attnc runs alternately
with the build's, so that a machine's drift reaches both alike.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time


def describe(count):
    layers = []
    for i in range(count):
        if (i + 1) % 4 == 0:
            layers.append({"name": f"full{i}", "type": "attention",
                           "num_heads": 16, "num_kv_heads": 2,
                           "head_dim": 256, "mask": "causal",
                           "gate": "elementwise"})
        else:
            layers.append({"name": f"linear{i}", "type": "linear_attention",
                           "rule": "gated_delta", "num_k_heads": 16,
                           "num_v_heads": 32, "k_dim": 128, "v_dim": 128,
                           "qk_l2norm": True, "output_gate": "rmsnorm_silu"})
    return {"model": "qwen3-next-layers", "dtype": "bf16", "layers": layers}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="cpu", choices=["cpu", "cuda", "all"])
    parser.add_argument("--against", metavar="ATTNC",
                        help="another attnc (say, an older build's), run "
                             "alternately with this build's: its median "
                             "and the ratio in more columns")
    parser.add_argument("build", nargs="?", default="build")
    args = parser.parse_args()
    compilers = {"median_s": os.path.join(args.build, "bin", "attnc")}
    if args.against:
        compilers = {"against_s": args.against, **compilers}
    with open("/proc/cpuinfo") as f:
        cpu = next(l.split(":", 1)[1].strip() for l in f
                   if l.startswith("model name"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"cpu: {cpu}, {os.cpu_count()} cores; commit {commit or 'unknown'}; "
          f"--target {args.target}"
          + (f"; against {args.against}" if args.against else ""))
    columns = [f"{name:>9}" for name in compilers]
    if args.against:
        columns.append(f"{'ratio':>6}")
    print(f"{'layers':>6} {' '.join(columns)} {'bytes':>9}")
    with tempfile.TemporaryDirectory() as work:
        model = f"{work}/model.json"
        for count in (1, 4, 12, 48):
            with open(model, "w") as f:
                json.dump(describe(count), f)
            times = {name: [] for name in compilers}
            for _ in range(3):
                for name, attnc in compilers.items():
                    binary = f"{work}/{name}.attnb"
                    start = time.monotonic()
                    subprocess.run([attnc, model, "--target", args.target,
                                    "-o", binary], check=True)
                    times[name].append(time.monotonic() - start)
            medians = {name: statistics.median(t) for name, t in times.items()}
            cells = [f"{medians[name]:>9.2f}" for name in compilers]
            if args.against:
                cells.append(f"{medians['median_s'] / medians['against_s']:>6.2f}")
            size = os.path.getsize(f"{work}/median_s.attnb")
            print(f"{count:>6} {' '.join(cells)} {size:>9}")


if __name__ == "__main__":
    main()
