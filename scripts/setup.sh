#!/usr/bin/env bash
# Installs what attn needs to build and test on Debian 12 (bookworm), and
# nothing that is already there. Safe to run again. Run as root (or with sudo
# available).
#
#   LLVM/MLIR 22  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
#                 (lit and FileCheck live in llvm-22-tools) clang-22 lld-22
#   Flatbuffers   libflatbuffers-dev flatbuffers-compiler
#   compiler-rt   libclang-rt-22-dev (the builtins linked into the CPU code;
#                 ASan, UBSan and libFuzzer for clang-22:
#                 scripts/check-sanitized.sh)
#   build         cmake ninja-build ccache g++
#   tests         libgtest-dev python3
#   Python        python3-dev pybind11-dev python3-numpy (the attn package,
#                 build/python/attn; Debian packages pybind11, not nanobind)
#   benchmarks    libopenblas-dev (the sgemm ceiling), python3-matplotlib
#                 (bench/plot.py)
set -euo pipefail

packages=(
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools clang-22 lld-22
  libflatbuffers-dev flatbuffers-compiler
  libclang-rt-22-dev
  cmake ninja-build ccache g++ make
  libgtest-dev python3
  python3-dev pybind11-dev python3-numpy
  libopenblas-dev python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root to install: ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
