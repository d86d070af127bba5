#!/usr/bin/env python3
"""What each CUDA kernel of a model takes from an SM, without a GPU.

For every kernel attnc builds for a model: its threads per block, the
registers and spilled bytes ptxas reports, the dynamic shared memory of its
`attn.shared` buffers (each rounded to 16 bytes, as SimtLaunch lays them
out), how many of its blocks fit on one SM and what limits them, and its
machine code's length in SASS instructions (its `.text` section of the
cubin ptxas writes, 16 bytes an instruction on sm_70 and newer: a measure
of what ptxas made of the PTX, without a disassembler). The numbers the
PTX-level work in bench/RESULTS.md quotes come from here.

    scripts/kernel-resources.py MODEL.json [MODEL.json ...] [-- ATTNC OPTIONS]

e.g. `scripts/kernel-resources.py test/attnc/Inputs/gdn-bf16.json` or, for
the warpgroup prefill, `... bench/profile-decode.json -- --cuda-warpgroups=1`.
Blocks per SM use an H100's (sm_90) limits: 65,536 registers allocated per
warp in units of 256, 228 KiB of shared memory with 1 KiB reserved per
block, 2,048 threads and 32 blocks.
"""

import argparse
import pathlib
import re
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
ELEMENT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4,
                 "i16": 2, "i8": 1, "i1": 1, "index": 8}
SM_REGISTERS, SM_SHARED, SM_THREADS, SM_BLOCKS = 65536, 228 * 1024, 2048, 32
RESERVED_SHARED_PER_BLOCK = 1024


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"kernel-resources: {' '.join(map(str, command))} failed:\n"
                 f"{result.stderr}")
    return result.stdout + result.stderr


def kernel_launches(dispatch_ir):
    """name -> (threads, shared bytes) of the block kernels."""
    kernels, current = {}, None
    for line in dispatch_ir.splitlines():
        header = re.search(r"func\.func private @(\w+)\(.*block_threads = "
                           r"(\d+)", line)
        if header:
            current = header.group(1) if "attn.block_kernel" in line else None
            if current:
                kernels[current] = [int(header.group(2)), 0]
            continue
        shared = re.search(r"attn\.shared\} : memref<((?:\d+x)*)(\w+)>", line)
        if shared and current:
            count = 1
            for dim in filter(None, shared.group(1).split("x")):
                count *= int(dim)
            size = count * ELEMENT_BYTES[shared.group(2)]
            kernels[current][1] += (size + 15) // 16 * 16
    return kernels


def ptxas_report(ptxas_log):
    """name -> (registers, spilled bytes)."""
    report, current = {}, None
    for line in ptxas_log.splitlines():
        entry = re.search(r"Compiling entry function '(\w+)'", line)
        if entry:
            current = entry.group(1)
            report[current] = [0, 0]
        spill = re.search(r"(\d+) bytes spill stores", line)
        if spill and current:
            report[current][1] = int(spill.group(1))
        used = re.search(r"Used (\d+) registers", line)
        if used and current:
            report[current][0] = int(used.group(1))
    return report


def sass_instructions(cubin):
    """name -> SASS instructions of each kernel's `.text.<name>` section of
    the ELF64 `cubin` (sm_70+: 16 bytes each)."""
    data = pathlib.Path(cubin).read_bytes()
    section_offset, = struct.unpack_from("<Q", data, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)

    def section(index):  # (name offset, byte offset, size)
        fields = struct.unpack_from("<IIQQQQ", data,
                                    section_offset + index * entry_size)
        return fields[0], fields[4], fields[5]

    names = section(names_index)[1]
    counts = {}
    for index in range(count):
        name_offset, _, size = section(index)
        start = names + name_offset
        name = data[start:data.index(b"\0", start)].decode()
        if name.startswith(".text."):
            counts[name[len(".text."):]] = size // 16
    return counts


def blocks_per_sm(threads, registers, shared):
    warps = (threads + 31) // 32
    registers_per_warp = (registers * 32 + 255) // 256 * 256
    limits = {
        "registers": SM_REGISTERS // (registers_per_warp * warps)
        if registers else SM_BLOCKS,
        "shared": SM_SHARED // (shared + RESERVED_SHARED_PER_BLOCK),
        "threads": SM_THREADS // threads,
        "blocks": SM_BLOCKS,
    }
    limit = min(limits, key=limits.get)
    return limits[limit], limit


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s MODEL.json [MODEL.json ...] [-- ATTNC OPTIONS]")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--attnc", default=str(ROOT / "build/bin/attnc"))
    parser.add_argument("--ptxas", default="/usr/local/cuda/bin/ptxas")
    parser.add_argument("--sm", default="sm_90a")
    arguments, attnc_options = sys.argv[1:], []
    if "--" in arguments:
        split = arguments.index("--")
        arguments, attnc_options = arguments[:split], arguments[split + 1:]
    args = parser.parse_args(arguments)

    print(f"{'model':24} {'kernel':40} {'threads':>7} {'regs':>4} "
          f"{'spilled':>7} {'shared':>9} {'blocks/SM':>9} {'SASS':>6}  limit")
    with tempfile.TemporaryDirectory() as scratch:
        ptx, cubin = f"{scratch}/k.ptx", f"{scratch}/k.cubin"
        for model in args.models:
            compile_for = [args.attnc, model, "--target=cuda",
                           f"--sm={args.sm}", *attnc_options]
            launches = kernel_launches(
                run(compile_for + ["--emit=dispatch", "-o", "-"]))
            run(compile_for + ["--emit=ptx", "-o", ptx])
            report = ptxas_report(
                run([args.ptxas, f"-arch={args.sm}", "-v", ptx, "-o", cubin]))
            sass = sass_instructions(cubin)
            for name, (threads, shared) in launches.items():
                registers, spilled = report.get(name, (0, 0))
                blocks, limit = blocks_per_sm(threads, registers, shared)
                print(f"{pathlib.Path(model).name:24} {name:40} {threads:7} "
                      f"{registers:4} {spilled:7} {shared / 1024:8.1f}K "
                      f"{blocks:9} {sass.get(name, 0):6}  {limit}")


if __name__ == "__main__":
    main()
