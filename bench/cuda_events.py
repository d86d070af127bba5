"""Timing on a CUDA device for the PyTorch-side anchors of the GPU
benchmarks (bench/torch-attention-baseline.py, bench/fla-baseline.py), as
cuda-attention-bench times attn: CUDA events around each call, the median
of `repeat` calls after a warm-up."""
import argparse
import statistics

import torch


def session_args():
    """--repeat and --quick, parsed; prints the device and the versions."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__,
          "CUDA", torch.version.cuda)
    return args


def median_ms(fn, repeat):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)
