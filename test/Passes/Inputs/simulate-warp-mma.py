#!/usr/bin/env python3
"""Runs the tensor-core lowering of attn_kernel.warp_mma on a simulated warp.

    attn-opt F.mlir -attn-warp-mma-to-nvvm=chip=sm_90a -canonicalize -cse \
        | simulate-warp-mma.py F.mlir

The lowered functions (straight-line code: index arithmetic, memref and
vector loads and stores, nvgpu.ldmatrix, conversions, nvvm.mma.sync,
llvm.extractvalue) run on 32 lanes in lockstep over random operands.
nvvm.mma.sync and nvgpu.ldmatrix take and give their fragments as PTX's
ISA lays them out (written out here, apart from the lowering), with g =
lane / 4 and t = lane % 4:

  mma.m16n8k8 .tf32:  A a0 = (g, t), a1 = (g + 8, t), a2 = (g, t + 4),
                      a3 = (g + 8, t + 4); B b0 = (t, g), b1 = (t + 4, g)
  mma.m16n8k16 .bf16: A a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..),
                      a2 = (g, 2t+8..), a3 = (g + 8, 2t+8..);
                      B b0 = (2t..2t+1, g), b1 = (2t+8..2t+9, g)
  both, C and D:      c0, c1 = (g, 2t), (g, 2t + 1); c2, c3 = (g + 8, ..)
  ldmatrix:           lane 8 i + r points at row r of matrix i; lane (g, t)
                      gets (row g, columns 2t, 2t + 1) of each, or with
                      .trans (rows 2t, 2t + 1, column g)

The result is compared with the op's own definition (the
attn_kernel.warp_mma of F.mlir, in float64). An operand may be a
memref.subview of an argument; index arguments other than the row and the
lane (a view's offsets) are 8. A fragment element the
lowering placed wrongly gives a wrong sum, and an f32 product taken as
one tf32 rounding (2^-11) fails the bound below. Prints one line per
function: its name, its largest error relative to sum_l |a_il b_lj|, and
ok or FAIL.
"""

import math
import random
import re
import struct
import sys

LANES = 32
# 3xTF32 keeps about 2^-21 of each product; f32's own rounding is 2^-24.
BOUND = 2.0 ** -19


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def bf16(x):
    """x rounded to bf16 (to nearest, ties to even), as a float."""
    b = bits(x)
    return from_bits((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000)


def tf32_rna(x):
    """cvt.rna.tf32.f32: 10 fraction bits, ties away from zero (the carry
    of adding half an ulp to the magnitude's bits)."""
    return (bits(x) + 0x1000) & 0xFFFFE000


def shape_of(memref_type):
    dims = re.match(r"memref<([0-9x]+)x(f32|bf16|f16)", memref_type).group(1)
    return [int(d) for d in dims.split("x")]


def element_of(memref_type):
    return re.match(r"memref<(?:[0-9]+x)+(f32|bf16|f16)", memref_type).group(1)


class Buffer:
    def __init__(self, shape, fill):
        self.shape = shape
        self.data = {}
        for index in range(math.prod(shape)):
            self.data[index] = fill()

    def flat(self, at):
        index = 0
        for i, size in zip(at, self.shape):
            assert 0 <= i < size, f"index {at} outside {self.shape}"
            index = index * size + i
        return index

    def get(self, *at):
        return self.data[self.flat(at)]

    def set(self, value, *at):
        self.data[self.flat(at)] = value


class View:
    """memref.subview of a Buffer at `offsets` (unit strides)."""
    def __init__(self, base, offsets, shape):
        self.base, self.offsets, self.shape = base, offsets, shape

    def moved(self, at):
        for i, size in zip(at, self.shape):
            assert 0 <= i < size, f"index {at} outside the view {self.shape}"
        return [i + o for i, o in zip(at, self.offsets)]

    def get(self, *at):
        return self.base.get(*self.moved(at))

    def set(self, value, *at):
        self.base.set(value, *self.moved(at))


VIEW = re.compile(r"(%\w+) = memref\.subview (%\w+)\[([^\]]*)\] \[([^\]]*)\] \[1, 1\]")
# The value of every index argument but the row and the lane.
OFFSET = 8


def accumulator_places(g, t):
    """C's and D's (row, column) of c0..c3 (both shapes)."""
    return [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]


def mma_sync(k, place, lanes_a, lanes_b, lanes_c):
    """D = A B + C of mma.m16n8k`k` .row.col with f32 C and D for the
    warp; place(g, t, a_regs, b_regs, a, b) puts a lane's A and B registers
    into A [16 x k] and B [k x 8]."""
    a = [[0.0] * k for _ in range(16)]
    b = [[0.0] * 8 for _ in range(k)]
    c = [[0.0] * 8 for _ in range(16)]
    for lane in range(LANES):
        g, t = lane // 4, lane % 4
        place(g, t, [r[lane] for r in lanes_a], [r[lane] for r in lanes_b], a, b)
        for reg, (i, j) in enumerate(accumulator_places(g, t)):
            c[i][j] = lanes_c[reg][lane]
    d = [[f32(c[i][j] + sum(a[i][l] * b[l][j] for l in range(k))) for j in range(8)]
         for i in range(16)]
    out = [[0.0] * LANES for _ in range(4)]
    for lane in range(LANES):
        for reg, (i, j) in enumerate(accumulator_places(lane // 4, lane % 4)):
            out[reg][lane] = d[i][j]
    return out


def place_tf32(g, t, a_regs, b_regs, a, b):
    """mma.m16n8k8 .tf32: a register a tf32 (its f32 bits)."""
    for reg, (i, k) in enumerate([(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]):
        a[i][k] = from_bits(a_regs[reg])
    for reg, k in enumerate([t, t + 4]):
        b[k][g] = from_bits(b_regs[reg])


def place_bf16(g, t, a_regs, b_regs, a, b):
    """mma.m16n8k16 .bf16: a register a pair of bf16, the lower index
    first."""
    for reg, (i, k) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
        a[i][k], a[i][k + 1] = a_regs[reg]
    for reg, k in enumerate([2 * t, 2 * t + 8]):
        b[k][g], b[k + 1][g] = b_regs[reg]


def ldmatrix(buffers, addresses, tiles, transpose):
    """ldmatrix .x1/.x2/.x4 (.trans) of 16-bit elements: lane 8 i + r gives
    the address of row r of matrix i (8 consecutive elements); lane (g, t)
    gets, of each matrix, the pair (row g, columns 2t, 2t + 1), or with
    .trans (rows 2t, 2t + 1, column g)."""
    def element(i, row, column):
        buffer, at = buffers[8 * i + row], addresses[8 * i + row]
        return buffer.get(*at[:-1], at[-1] + column)
    out = []
    for lane in range(LANES):
        g, t = lane // 4, lane % 4
        if transpose:
            out.append([(element(i, 2 * t, g), element(i, 2 * t + 1, g)) for i in range(tiles)])
        else:
            out.append([(element(i, g, 2 * t), element(i, g, 2 * t + 1)) for i in range(tiles)])
    return out


def parse_source(path):
    """{function: (argument names, warp_mma attributes)} of the source."""
    ops = {}
    text = open(path).read()
    for func in re.finditer(r"func\.func @(\w+)\(([^)]*)\)\s*\{(.*?)\n\}", text, re.S):
        name, arguments, body = func.groups()
        op = re.search(r"attn_kernel\.warp_mma (%\w+), (%\w+), (%\w+) rows\((%\w+)\) "
                       r"lane\((%\w+)\) n\((\d+)\) k\((\d+)\)(?: \{([^}]*)\})?", body)
        if not op:
            continue
        flags = set(f.strip() for f in (op.group(8) or "").split(",") if f.strip())
        views = {m.group(1): (m.group(2), [x.strip() for x in m.group(3).split(",")],
                              [int(x) for x in m.group(4).split(",")])
                 for m in VIEW.finditer(body)}
        tiles = re.search(r"row_tiles = (\d+)", op.group(8) or "")
        ops[name] = {"operands": op.groups()[:5], "n": int(op.group(6)),
                     "k": int(op.group(7)), "flags": flags,
                     "tiles": int(tiles.group(1)) if tiles else 1, "views": views,
                     "arguments": re.findall(r"(%\w+): (memref<[^>]*>(?:, strided<[^>]*>)?|index)", arguments)}
    return ops


def run(lowered_body, arguments, spec, rng):
    """Runs the lowered body on 32 lanes; returns the lanes' buffers."""
    lhs, rhs, acc, row_name, lane_name = spec["operands"]
    per_lane = set()
    if "lhs_fragment" in spec["flags"]:
        per_lane.add(lhs)
    if "acc_fragment" in spec["flags"]:
        per_lane.add(acc)
    shared = {}
    lanes = [dict() for _ in range(LANES)]
    row = 16 if shape_of(dict(spec["arguments"])[lhs])[0] >= 32 and lhs not in per_lane else 0
    for name, type_text in spec["arguments"]:
        if type_text == "index":
            for lane in range(LANES):
                lanes[lane][name] = {lane_name: lane, row_name: row}.get(name, OFFSET)
            continue
        round_to = bf16 if element_of(type_text) == "bf16" else f32
        if name in per_lane:
            for lane in range(LANES):
                lanes[lane][name] = Buffer(shape_of(type_text), lambda: f32(rng.uniform(-1, 1)))
        else:
            buffer = Buffer(shape_of(type_text), lambda: round_to(rng.uniform(-1, 1)))
            for lane in range(LANES):
                lanes[lane][name] = buffer
    before = {name: [dict(lanes[lane][name].data) for lane in range(LANES)]
              for name, t in spec["arguments"] if t != "index"}
    lowered_names = re.match(r"\(([^)]*)\)", lowered_body).group(1)
    rename = {}
    for (source_name, _), lowered in zip(spec["arguments"],
                                         re.findall(r"(%\w+):", lowered_names)):
        rename[lowered] = source_name
    values = [{rename.get(k, k): v for k, v in lanes[lane].items()} for lane in range(LANES)]
    for lane in range(LANES):
        for lowered, source_name in rename.items():
            values[lane][lowered] = lanes[lane][source_name]

    def get(lane, name):
        return values[lane][name]

    def indices(lane, at):
        return [get(lane, i.strip()) for i in at.split(",")]

    def offset(lane, x):
        return int(x) if re.fullmatch(r"-?\d+", x) else get(lane, x)

    for line in lowered_body.splitlines()[1:]:
        line = line.strip()
        if not line or line.startswith("return") or line == "}":
            continue
        m = VIEW.match(line)
        if m:
            result, base, offsets, sizes = m.groups()
            for lane in range(LANES):
                values[lane][result] = View(get(lane, base),
                                            [offset(lane, x.strip()) for x in offsets.split(",")],
                                            [int(x) for x in sizes.split(",")])
            continue
        m = re.match(r"(%\w+) = arith\.constant ([-0-9.e+]+) : (\w+)", line)
        if m:
            value = int(m.group(2)) if m.group(3) in ("index", "i32", "i64") else float(m.group(2))
            for lane in range(LANES):
                values[lane][m.group(1)] = value
            continue
        m = re.match(r"(%\w+) = arith\.(divui|remui|muli|addi|subf|bitcast) (%\w+)(?:, (%\w+))?", line)
        if m:
            result, op, x, y = m.groups()
            for lane in range(LANES):
                a = get(lane, x)
                b = get(lane, y) if y else None
                values[lane][result] = {
                    "divui": lambda: a // b, "remui": lambda: a % b,
                    "muli": lambda: a * b, "addi": lambda: a + b,
                    "subf": lambda: f32(a - b), "bitcast": lambda: from_bits(a),
                }[op]()
            continue
        m = re.match(r"(%\w+) = memref\.load (%\w+)\[([^\]]*)\]", line)
        if m:
            result, buffer, at = m.groups()
            for lane in range(LANES):
                index = indices(lane, at)
                values[lane][result] = get(lane, buffer).get(*index)
            continue
        m = re.match(r"memref\.store (%\w+), (%\w+)\[([^\]]*)\]", line)
        if m:
            value, buffer, at = m.groups()
            for lane in range(LANES):
                index = indices(lane, at)
                get(lane, buffer).set(get(lane, value), *index)
            continue
        m = re.match(r"(%\w+) = nvvm\.convert\.float\.to\.tf32 (%\w+) \{rnd = #nvvm\.fp_rnd_mode<rna>\}", line)
        if m:
            for lane in range(LANES):
                values[lane][m.group(1)] = tf32_rna(get(lane, m.group(2)))
            continue
        m = re.match(r"(%\w+) = nvvm\.mma\.sync A\[([^\]]*)\]\s+B\[([^\]]*)\]\s+C\[([^\]]*)\].*"
                     r"multiplicandAPtxType = #nvvm\.mma_type<(\w+)>.*shape = #nvvm\.shape<m = 16, n = 8, k = (\d+)>", line)
        if m:
            result, *groups, ptx_type, k = m.groups()
            place = {("tf32", "8"): place_tf32, ("bf16", "16"): place_bf16}.get((ptx_type, k))
            if place is None:
                raise SystemExit(f"simulate-warp-mma: no {ptx_type} k = {k} mma: {line}")
            regs = [[[get(lane, r.strip()) for lane in range(LANES)] for r in group.split(",")]
                    for group in groups]
            out = mma_sync(int(k), place, *regs)
            for lane in range(LANES):
                values[lane][result] = [out[i][lane] for i in range(4)]
            continue
        m = re.match(r"(%\w+) = nvgpu\.ldmatrix (%\w+)\[([^\]]*)\] \{numTiles = (\d+) : i32, transpose = (true|false)\}", line)
        if m:
            result, buffer, at, tiles, transpose = m.groups()
            addresses = [indices(lane, at) for lane in range(LANES)]
            buffers = [get(lane, buffer) for lane in range(LANES)]
            out = ldmatrix(buffers, addresses, int(tiles), transpose == "true")
            for lane in range(LANES):
                values[lane][result] = out[lane]
            continue
        m = re.match(r"(%\w+) = vector\.extract (%\w+)\[(\d+)\]", line)
        if m:
            for lane in range(LANES):
                values[lane][m.group(1)] = get(lane, m.group(2))[int(m.group(3))]
            continue
        m = re.match(r"(%\w+) = vector\.bitcast (%\w+) : vector<2x(bf16|f16)> to vector<1xi32>", line)
        if m:
            for lane in range(LANES):
                values[lane][m.group(1)] = [get(lane, m.group(2))]
            continue
        m = re.match(r"(%\w+) = vector\.load (%\w+)\[([^\]]*)\] : [^,]*>, vector<2x(bf16|f16)>", line)
        if m:
            result, buffer, at = m.group(1), m.group(2), m.group(3)
            for lane in range(LANES):
                index = indices(lane, at)
                first = get(lane, buffer).get(*index)
                index[-1] += 1
                values[lane][result] = (first, get(lane, buffer).get(*index))
            continue
        m = re.match(r"(%\w+) = vector\.from_elements (%\w+), (%\w+) : vector<2x", line)
        if m:
            for lane in range(LANES):
                values[lane][m.group(1)] = (get(lane, m.group(2)), get(lane, m.group(3)))
            continue
        m = re.match(r"(%\w+) = arith\.truncf (%\w+) : f32 to bf16", line)
        if m:
            for lane in range(LANES):
                values[lane][m.group(1)] = bf16(get(lane, m.group(2)))
            continue
        m = re.match(r"(%\w+) = llvm\.extractvalue (%\w+)\[(\d+)\]", line)
        if m:
            for lane in range(LANES):
                values[lane][m.group(1)] = get(lane, m.group(2))[int(m.group(3))]
            continue
        raise SystemExit(f"simulate-warp-mma: cannot run: {line}")
    return lanes, before, row


def check(name, spec, lanes, before, row):
    """The op's definition in float64: the largest error of the lanes'
    accumulator elements, relative to sum_l |a b|."""
    lhs, rhs, acc, _, _ = spec["operands"]
    n, k, flags, tiles = spec["n"], spec["k"], spec["flags"], spec["tiles"]
    types = dict(spec["arguments"])

    def operand(name, data):
        """An argument's buffer with `data`, or a view of one."""
        if name in spec["views"]:
            base, offsets, shape = spec["views"][name]
            return View(operand(base, data),
                        [int(x) if x.isdigit() else OFFSET for x in offsets], shape)
        buffer = Buffer(shape_of(types[name]), lambda: 0.0)
        buffer.data = data[name][0]
        return buffer

    def argument(name):
        return spec["views"][name][0] if name in spec["views"] else name

    # The products' type: rhs's (fragments of f32 are rounded to it).
    product = bf16 if element_of(types[argument(rhs)]) == "bf16" else f32

    def lhs_at(tile, i, l):
        if "lhs_fragment" in flags:
            owner = 4 * (i % 8) + (l % 8) // 2
            buffer = Buffer(shape_of(types[lhs]), lambda: 0.0)
            buffer.data = before[lhs][owner]
            return product(buffer.get(tile * k // 8 + l // 8, 2 * (i // 8) + l % 2))
        buffer = Buffer(shape_of(types[lhs]), lambda: 0.0)
        buffer.data = before[lhs][0]
        return buffer.get(row + 16 * tile + i, l)

    rhs_buffer = operand(rhs, before)

    def rhs_at(l, j):
        return rhs_buffer.get(j, l) if "rhs_transposed" in flags else rhs_buffer.get(l, j)

    worst = 0.0
    elements = [(lane, tile, block, half, el) for lane in range(LANES)
                for tile in range(tiles) for block in range(n // 8)
                for half in range(2) for el in range(2)]
    for lane, tile, block, half, el in elements:
                    g, t = lane // 4, lane % 4
                    i, j = g + 8 * half, 8 * block + 2 * t + el
                    start = Buffer(shape_of(types[acc]), lambda: 0.0)
                    if "acc_fragment" in flags:
                        at = (tile * n // 8 + block, 2 * half + el)
                        start.data = before[acc][lane]
                    else:
                        at = (row + 16 * tile + i, j)
                        start.data = before[acc][0]
                    initial = start.get(*at)
                    got = lanes[lane][acc].get(*at)
                    terms = [lhs_at(tile, i, l) * rhs_at(l, j) for l in range(k)]
                    expected = sum(terms) + (initial if "accumulate" in flags else 0.0)
                    scale = sum(abs(x) for x in terms) + abs(initial)
                    worst = max(worst, abs(got - expected) / scale)
    print(f"{name}: max error {worst:.2e} of sum |a b|: {'ok' if worst <= BOUND else 'FAIL'}")


def main():
    source = parse_source(sys.argv[1])
    lowered = sys.stdin.read()
    rng = random.Random(7)
    for func in re.finditer(r"func\.func @(\w+)(\([^)]*\)) \{\n(.*?)\n  \}", lowered, re.S):
        name = func.group(1)
        if name not in source:
            continue
        body = func.group(2) + "\n" + func.group(3)
        lanes, before, row = run(body, source[name]["arguments"], source[name], rng)
        check(name, source[name], lanes, before, row)


if __name__ == "__main__":
    main()
