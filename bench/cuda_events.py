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


def graph_median_ms(fn, repeat):
    """median_ms of `fn` captured once into a CUDA graph and replayed: the
    GPU's time for its kernels without the Python launches between them
    (Triton's launches cost tens of microseconds each, and leave the GPU
    idle when the kernels are short). The warm-ups run on a side stream
    first, as capture needs: Triton compiles and autotunes there."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return median_ms(graph.replay, repeat)
