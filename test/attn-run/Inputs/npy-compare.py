"""Compares two '<f4' / '<f2' .npy files of one shape (without numpy):
prints their largest difference relative to the largest magnitude of the
first, and exits 1 if it is above TOLERANCE.

usage: npy-compare.py EXPECTED.npy ACTUAL.npy TOLERANCE
"""
import ast
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    length = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + length].decode())
    code = {"<f4": "f", "<f2": "e"}[header["descr"]]
    body = data[10 + length:]
    count = len(body) // struct.calcsize(code)
    return header["shape"], struct.unpack("<%d%s" % (count, code), body)


(shape_a, a), (shape_b, b) = read(sys.argv[1]), read(sys.argv[2])
if shape_a != shape_b:
    sys.exit("shapes differ: %s vs %s" % (shape_a, shape_b))
scale = max(abs(x) for x in a) or 1.0
error = max(abs(x - y) for x, y in zip(a, b)) / scale
print("relative error %.3e" % error)
sys.exit(0 if error <= float(sys.argv[3]) else 1)
