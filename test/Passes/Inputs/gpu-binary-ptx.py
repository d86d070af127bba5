"""Prints the PTX of the first gpu.binary in the MLIR on standard input
(the `assembly` of `mlir-opt -gpu-module-to-binary=format=isa`), so that
ptxas can check it."""

import re
import sys

text = sys.stdin.read()
start = text.find('assembly = "')
if start < 0:
    sys.exit("no gpu.binary with PTX assembly in the input")
start += len('assembly = "')
end = start
while text[end] != '"':
    end += 3 if text[end] == "\\" else 1
sys.stdout.write(
    re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text[start:end])
)
