#!/usr/bin/env python3
"""Compile time of a model description by its number of layers.

Qwen3-Next's two layer kinds (three Gated DeltaNet layers, then one gated
attention layer, repeated) as a model description with one entry per layer,
for 1, 4, 12 and 48 layers, CPU target, each compiled three times (the
median is printed). Equal layers share their kernels, so the time grows with
the distinct layers, not with all of them.

    bench/compile-time.py [BUILD_DIR]   (default: build)
"""
import json
import os
import statistics
import subprocess
import sys
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
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    attnc = os.path.join(build, "bin", "attnc")
    with open("/proc/cpuinfo") as f:
        cpu = next(l.split(":", 1)[1].strip() for l in f
                   if l.startswith("model name"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"cpu: {cpu}, {os.cpu_count()} cores; commit {commit or 'unknown'}")
    print(f"{'layers':>6} {'median_s':>9} {'bytes':>9}")
    with tempfile.TemporaryDirectory() as work:
        model, binary = f"{work}/model.json", f"{work}/model.attnb"
        for count in (1, 4, 12, 48):
            with open(model, "w") as f:
                json.dump(describe(count), f)
            times = []
            for _ in range(3):
                start = time.monotonic()
                subprocess.run([attnc, model, "-o", binary], check=True)
                times.append(time.monotonic() - start)
            print(f"{count:>6} {statistics.median(times):>9.2f} "
                  f"{os.path.getsize(binary):>9}")


if __name__ == "__main__":
    main()
