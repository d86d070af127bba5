"""Writes a .npy file (SPEC §5: '<f4' or '<i4', and '<f2' for f16
arguments; C order) without numpy.

usage: make-npy.py OUT.npy DTYPE DIM [DIM ...]   (DTYPE: f4, f2 or i4)

Elements are a deterministic ramp in [-1, 1) (f4, f2) or 0, 1, 2, ... (i4).
"""
import struct
import sys

path, dtype, dims = sys.argv[1], sys.argv[2], [int(d) for d in sys.argv[3:]]
count = 1
for d in dims:
    count *= d
shape = "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"
header = "{'descr': '<%s', 'fortran_order': False, 'shape': %s, }" % (dtype, shape)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    ramp = [((i * 37) % 200) / 100.0 - 1.0 for i in range(count)]
    if dtype == "f4":
        f.write(struct.pack("<%df" % count, *ramp))
    elif dtype == "f2":
        f.write(struct.pack("<%de" % count, *ramp))
    else:
        f.write(struct.pack("<%di" % count, *range(count)))
