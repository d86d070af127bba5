#!/usr/bin/env bash
# Packs what the GPU checks need into DIR, for a CUDA machine that has a
# driver, a CUDA toolkit (ptxas) and PyTorch but no LLVM/MLIR 22: build here,
# run there.
#
#   scripts/gpu-bundle.sh DIR        # after `ninja -C build`
#   (on the GPU machine, from the repository root)
#   bash DIR/run.sh info e2e profile bench torch fla python wgmma
#
# The e2e tests and the bench compile models in-process, so they need
# libMLIR.so and libLLVM.so (and ld.lld, which links a binary's host code);
# those travel xz-compressed (~45 MB). libLLVM.so also names libz3.so.4 and
# libxml2.so.2, which attn never calls into; run.sh uses the machine's own
# where it has them, else stand-ins whose every function traps. attn-run and
# the runtime need none of this: a model compiled here runs there as is.
#
# run.sh's steps, in the order given:
#   info   the GPU, the driver, ptxas, missing libraries
#   e2e    every _cuda e2e case and every case that needs a GPU
#          ($E2E_FILTER; $E2E_SHARDS shards in parallel, 8 by default), log
#          in $OUT/e2e.log, but the warpgroup products'
#   wgmma  those (prefill on sm_90a's wgmma, not yet default), log in
#          $OUT/e2e-wgmma.log, then the bench's prefill table on them
#          (cuda-attention-bench --wgmma): last and in processes of their
#          own, so that a fault of an untried kernel costs no other result
#   profile  Nsight Compute's time per kernel of Gated DeltaNet prefill
#          and decode step, softmax decode, top-k sparse decode, and causal prefill on mma.sync and
#          on wgmma (models compiled here into DIR/models), a table per
#          call in $OUT/gpu.log, then their largest stall reasons per
#          kernel (WarpStateStats), the CSVs in $OUT
#   bench  build/bin/cuda-attention-bench ($BENCH_ARGS)
#   memcheck  the drawn _cuda cases (every kernel family, $MEMCHECK_FILTER)
#          under compute-sanitizer's memcheck (accesses out of bounds or
#          misaligned, in global and shared memory: the GPU side of the CPU's
#          ATTN_GUARD), then fewer under racecheck (hazards between a
#          block's threads on shared memory: a missing barrier),
#          $RACECHECK_FILTER; logs in $OUT/memcheck.log, $OUT/racecheck.log
# (each step's timeout: E2E_TIMEOUT, WGMMA_TIMEOUT, PROFILE_TIMEOUT, BENCH_TIMEOUT,
# TORCH_TIMEOUT, FLA_TIMEOUT, SANITIZER_TIMEOUT; the Python baselines take TORCH_ARGS and
# FLA_ARGS, e.g. --quick)
#   torch  bench/torch-attention-baseline.py (PyTorch's SDPA backends,
#          FlexAttention, the copy bandwidth)
#   fla    bench/fla-baseline.py (flash-linear-attention's Gated DeltaNet
#          kernels, from bench/third_party)
#   python the Python package's CUDA tests (test/python/torch_*.py) when the
#          bundle has an extension module for the machine's python3
#          ($BUNDLE_PYTHONS when bundling) and it has NumPy and PyTorch
# bench, torch and fla append their tables to $OUT/gpu.log under one
# header (date, commit, device, driver, steps): the raw log that
# bench/logs/gpu-<date>.txt keeps and bench/plot.py draws.
set -euo pipefail

dir=${1:?usage: scripts/gpu-bundle.sh DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
llvm=/usr/lib/llvm-22
mkdir -p "$dir/bin"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

for binary in test/unit/AttnE2ETests bin/cuda-attention-bench bin/attnc \
              bin/attn-run; do
  strip -o "$dir/bin/$(basename $binary)" "$root/build/$binary"
done
# The profile step's models (compiled here: the GPU machine has no LLVM),
# named .model because .attnb files are ignored and would not travel.
rm -rf "$dir/models"
mkdir -p "$dir/models"
"$root/build/bin/attnc" "$root/test/attnc/Inputs/gdn-bf16.json" --target=cuda \
  -o "$dir/models/gdn.model"
"$root/build/bin/attnc" "$root/bench/profile-decode.json" --target=cuda \
  -o "$dir/models/decode.model"
"$root/build/bin/attnc" "$root/bench/profile-decode.json" --target=cuda \
  --cuda-warpgroups=1 -o "$dir/models/wgmma.model"
"$root/build/bin/attnc" "$root/bench/profile-sparse.json" --target=cuda \
  -o "$dir/models/sparse.model"
rm -rf "$dir/python"
cp -r "$root/build/python" "$dir/python"
rm -rf "$dir/python/CMakeFiles" "$dir/python/attn/__pycache__"
# The GPU machine's python3 is 3.12 (PyTorch's venv), this machine's 3.11:
# the extension module is compiled again for each interpreter in
# $BUNDLE_PYTHONS (default: a python3.12 here, from PATH or pyenv), from the
# build's own compile command with that interpreter's headers, and linked
# with the same runtime library. Python loads the module whose suffix
# (_attn.cpython-312-...so) names its version.
bundle_pythons=${BUNDLE_PYTHONS-$( { python3.12 -c 'import sys; print(sys.executable)' ||
  ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3; } 2>/dev/null | head -1)}
for python in $bundle_pythons; do
  include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  compile=$(python3 - "$root/build/compile_commands.json" "$include" "$stage/_attn.o" <<'PY'
import json, re, sys
commands, include, obj = sys.argv[1:]
for entry in json.load(open(commands)):
    if entry["file"].endswith("python/_attn.cpp"):
        command = re.sub(r"-isystem \S*/python3\.\d+", "-isystem " + include, entry["command"])
        print(re.sub(r" -o \S+", " -o " + obj, command))
PY
)
  (cd "$root/build" && eval "$compile")
  c++ -shared -flto -Wl,-z,nodelete -o "$dir/python/attn/_attn$suffix" "$stage/_attn.o" \
    "$root/build/runtime/libAttnRuntime.a" -ldl
  echo "gpu-bundle: the Python extension for $("$python" --version 2>&1) (_attn$suffix)"
done
{ git -C "$root" rev-parse HEAD
  git -C "$root" diff --quiet HEAD || echo "(with uncommitted changes)"
} | paste -sd' ' > "$dir/commit"

mkdir -p "$stage/libs" "$stage/fallback"
cp -L "$llvm/lib/libLLVM.so.22.1" "$llvm/lib/libMLIR.so.22.1" \
      "$llvm/bin/ld.lld" "$stage/libs/"
# The compiler-rt builtins that CPU binaries link (e2e cases compile some).
builtins=lib/clang/22/lib/linux/libclang_rt.builtins-x86_64.a
cp -L "$llvm/$builtins" "$stage/libs/"
# Small libraries a GPU image may lack, copied from this machine.
for lib in libedit.so.2 libbsd.so.0 libmd.so.0 libtinfo.so.6 libffi.so.8; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$stage/fallback/"
done
# Stand-ins for libz3 and libxml2: every symbol libLLVM.so imports from
# them, as a function that traps, with libxml2's symbol versions.
imports() { objdump -T "$llvm/lib/libLLVM.so.22.1" | grep '\*UND\*' |
            grep "$1" | awk '{print $NF}'; }
trap_each() { sed 's/.*/void &(void) { __builtin_trap(); }/'; }
imports 'Z3_' | trap_each > "$stage/z3.c"
imports 'LIBXML2_2.4.30' > "$stage/xml24"
imports 'LIBXML2_2.6.0' > "$stage/xml26"
cat "$stage/xml24" "$stage/xml26" | trap_each > "$stage/xml2.c"
{
  echo "LIBXML2_2.4.30 { global: $(sed 's/$/;/' "$stage/xml24" | tr '\n' ' ') local: *; };"
  echo "LIBXML2_2.6.0 { global: $(sed 's/$/;/' "$stage/xml26" | tr '\n' ' ') } LIBXML2_2.4.30;"
} > "$stage/xml2.map"
cc -shared -fPIC -o "$stage/fallback/libz3.so.4" -Wl,-soname,libz3.so.4 \
   "$stage/z3.c"
cc -shared -fPIC -o "$stage/fallback/libxml2.so.2" -Wl,-soname,libxml2.so.2 \
   -Wl,--version-script="$stage/xml2.map" "$stage/xml2.c"
tar -C "$stage" -cf - libs fallback | xz -T2 -9 > "$dir/bundle.tar.xz"

cat > "$dir/run.sh" <<'EOF'
#!/bin/bash
# Made by scripts/gpu-bundle.sh; run from the repository root.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/attn-gpu-out}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
llvm=/usr/lib/llvm-22
if [ ! -e $llvm/lib/libMLIR.so.22.1 ]; then
  mkdir -p $llvm/lib $llvm/bin /tmp/attn-bundle
  if command -v xz >/dev/null; then tar -C /tmp/attn-bundle -xJf "$here/bundle.tar.xz"
  else python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$here/bundle.tar.xz" /tmp/attn-bundle; fi
  cp /tmp/attn-bundle/libs/lib*.so.22.1 $llvm/lib/
  cp /tmp/attn-bundle/libs/ld.lld $llvm/bin/
  mkdir -p $llvm/lib/clang/22/lib/linux
  cp /tmp/attn-bundle/libs/libclang_rt.builtins-x86_64.a $llvm/lib/clang/22/lib/linux/
  for lib in /tmp/attn-bundle/fallback/*; do
    name=$(basename "$lib")
    ldconfig -p | grep -q "^\s*$name " || { echo "using the bundle's $name"; cp "$lib" $llvm/lib/; }
  done
fi
export LD_LIBRARY_PATH=$llvm/lib
bin=$here/bin
chmod +x "$bin"/*
# The session's raw log: one header, then each bench step's tables.
if [ ! -s "$out/gpu.log" ]; then
  { echo "# attn GPU session (scripts/gpu-bundle.sh run.sh)"
    echo "# date: $(date -u)"
    echo "# commit: $(cat "$here/commit")"
    echo "# device: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1), $(ptxas --version | tail -1)"
    echo "# command: run.sh $*"
  } > "$out/gpu.log"
fi
log_step() { echo; echo "## $1"; } >> "$out/gpu.log"
for step in "$@"; do
  echo "== $step, $(date -u +%T)"
  case $step in
  info)
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    ptxas --version | tail -1
    ldd "$bin/AttnE2ETests" | grep "not found";;
  e2e)
    shards=${E2E_SHARDS:-8}
    for i in $(seq 0 $((shards - 1))); do
      ATTN_POISON=1 GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout ${E2E_TIMEOUT:-300} "$bin/AttnE2ETests" \
        --gtest_filter="${E2E_FILTER:-*_cuda:*/cuda:*OnCuda*:*OnGpu*-*Warpgroups*}" > "$out/e2e$i.log" 2>&1 &
    done
    wait
    for i in $(seq 0 $((shards - 1))); do cat "$out/e2e$i.log"; done > "$out/e2e.log"
    rm "$out"/e2e[0-9]*.log
    grep -E "^\[  (FAILED|PASSED|SKIPPED) " "$out/e2e.log" | sort | uniq -c;;
  profile)
    # Nsight Compute's time per kernel (no clock control, caches flushed
    # between kernels) of Gated DeltaNet prefill (B = 1 and 8, L = 4K, with
    # the rmsnorm-silu gate: the chain's narrow and wide blocks) and decode
    # step (B = 32), softmax decode (B = 1, H = 32, Hkv = 8, 4K and 32K keys),
    # top-k sparse decode of the same layer (64 blocks of 16 over 32K keys;
    # random block bounds) and its causal prefill (L = 4K) on mma.sync and
    # on wgmma: where each call's time goes, beside the bench's per-call
    # time.
    log_step "profile (ncu, us per kernel)"
    metrics=gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
    prefill="B=1,Lq=4096,Lk=4096"
    for run in "gdn gdn B=1,L=4096" "gdn gdn B=8,L=4096" "gdn gdn B=32,L=1" \
               "decode attn B=1,Lq=1,Lk=4096" \
               "decode attn B=1,Lq=1,Lk=32768" "sparse attn B=1,Lq=1,Lk=32768" \
               "decode attn $prefill" "wgmma attn $prefill"; do
      set -- $run
      csv="$out/ncu-$1-$(echo "$3" | tr -c 'A-Za-z0-9\n' '_').csv"
      timeout ${PROFILE_TIMEOUT:-60} ncu --clock-control none --csv \
        --metrics $metrics "$bin/attn-run" "$here/models/$1.model" \
        --entry $2 --random $3 --device cuda > "$csv" 2>&1
      echo "### $1 $3 (ncu exit $?)" >> "$out/gpu.log"
      grep '^"' "$csv" | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
head = rows[0]
name, metric, value = (head.index(k) for k in ("Kernel Name", "Metric Name", "Metric Value"))
print("| kernel | grid | registers | us | sm % | dram % | warps active % |")
print("|---|---|---|---|---|---|---|")
kernels = {}
for row in rows[1:]:
    kernels.setdefault((row[0], row[name]), {})[row[metric]] = row[value].replace(",", "")
for (_, kernel), m in kernels.items():
    print("| %s | %s | %s | %.1f | %s | %s | %s |" % (kernel,
          m["launch__grid_size"], m["launch__registers_per_thread"],
          float(m["gpu__time_duration.sum"]) / 1000,
          m["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
          m["dram__throughput.avg.pct_of_peak_sustained_elapsed"],
          m["sm__warps_active.avg.pct_of_peak_sustained_active"]))
' 2>&1 | tee -a "$out/gpu.log"
    done
    # Why the Gated DeltaNet kernels, decode's split kernel and the prefill
    # kernels wait: the warp states (stall reasons, cycles per issued
    # instruction) of Nsight Compute's WarpStateStats section, the largest
    # five per kernel.
    for run in "gdn gdn B=1,L=4096" "gdn gdn B=32,L=1" \
               "decode attn B=1,Lq=1,Lk=32768" "sparse attn B=1,Lq=1,Lk=32768" \
               "decode attn $prefill" "wgmma attn $prefill"; do
      set -- $run
      csv="$out/ncu-stalls-$1-$(echo "$3" | tr -c 'A-Za-z0-9\n' '_').csv"
      timeout ${PROFILE_TIMEOUT:-60} ncu --clock-control none --csv --page raw \
        --section WarpStateStats "$bin/attn-run" "$here/models/$1.model" \
        --entry $2 --random $3 --device cuda > "$csv" 2>&1
      echo "### stalls: $1 $3 (ncu exit $?; cycles a warp waits per issued instruction)" >> "$out/gpu.log"
      grep '^"' "$csv" | python3 -c '
import csv, re, sys
rows = list(csv.reader(sys.stdin))
if len(rows) < 3:
    sys.exit("no rows")
head = rows[0]
name = head.index("Kernel Name")
stall = re.compile(r"smsp__average_warps?_issue_stalled_(.+)_per_issue_active\.ratio$")
columns = [(i, stall.match(h).group(1)) for i, h in enumerate(head) if stall.match(h)]
print("| kernel | largest stalls (cycles per issued instruction) |")
print("|---|---|")
for row in rows[2:]:
    values = []
    for i, reason in columns:
        try:
            values.append((float(row[i].replace(",", "")), reason))
        except ValueError:
            pass
    top = sorted(values, reverse=True)[:5]
    print("| %s | %s |" % (row[name], ", ".join("%s %.1f" % (r, v) for v, r in top)))
' 2>&1 | tee -a "$out/gpu.log"
    done;;
  memcheck)
    # Each tool over its cases in $E2E_SHARDS shards (a process each); an
    # error the tool reports fails the case's process with exit code 97.
    shards=${E2E_SHARDS:-8}
    for tool in memcheck racecheck; do
      if [ $tool = memcheck ]; then filter=${MEMCHECK_FILTER:-Random/*_cuda}
      else filter=${RACECHECK_FILTER:-Random/SoftmaxAttention*_cuda:Random/LinearRecurrence*_cuda:Random/SparseAttention*_cuda}; fi
      for i in $(seq 0 $((shards - 1))); do
        ( ATTN_POISON=1 GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout ${SANITIZER_TIMEOUT:-400} \
            compute-sanitizer --tool $tool --error-exitcode 97 --print-limit 20 \
            "$bin/AttnE2ETests" --gtest_filter="$filter" > "$out/$tool$i.log" 2>&1
          echo "$tool shard $i: exit $?" >> "$out/$tool$i.log" ) &
      done
      wait
      for i in $(seq 0 $((shards - 1))); do cat "$out/$tool$i.log"; done > "$out/$tool.log"
      rm "$out/$tool"[0-9]*.log
      echo "$tool ($filter): $(grep -c '^\[       OK \]' "$out/$tool.log") cases passed," \
        "$(grep -c '^\[  SKIPPED \] .*)$' "$out/$tool.log") skipped; failures and reports:"
      grep -E "^\[  FAILED  \] .*\)$|ERROR SUMMARY: [1-9]|shard [0-9]+: exit [1-9]" "$out/$tool.log"
    done;;
  bench)
    log_step "cuda-attention-bench ${BENCH_ARGS:-}"
    timeout ${BENCH_TIMEOUT:-300} "$bin/cuda-attention-bench" ${BENCH_ARGS:-} 2>&1 | tee -a "$out/gpu.log";;
  torch)
    log_step "bench/torch-attention-baseline.py ${TORCH_ARGS:-}"
    PYTHONUNBUFFERED=1 timeout ${TORCH_TIMEOUT:-300} python3 bench/torch-attention-baseline.py ${TORCH_ARGS:-} 2>&1 | tee -a "$out/gpu.log";;
  fla)
    log_step "bench/fla-baseline.py ${FLA_ARGS:-}"
    PYTHONUNBUFFERED=1 timeout ${FLA_TIMEOUT:-200} python3 bench/fla-baseline.py ${FLA_ARGS:-} 2>&1 | tee -a "$out/gpu.log";;
  python)
    suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    if [ ! -e "$here/python/attn/_attn$suffix" ]; then
      echo "python: skipped: no extension module _attn$suffix in the bundle (it has $(cd "$here/python/attn" && ls _attn.*.so | paste -sd' '))"
      continue
    fi
    missing=$(python3 -c 'import importlib.util as u; print(" ".join(m for m in ("numpy", "torch") if not u.find_spec(m)))')
    if [ -n "$missing" ]; then echo "python: skipped: python3 lacks $missing"; continue; fi
    for test in test/python/torch_tensors.py test/python/torch_ops.py; do
      PYTHONPATH=$here/python ATTN_ATTNC=$bin/attnc timeout 200 python3 "$test" \
        > "$out/$(basename "$test" .py).log" 2>&1
      echo "$test: exit $? (log in \$OUT/$(basename "$test" .py).log)"
    done;;
  wgmma)
    ATTN_POISON=1 timeout ${WGMMA_TIMEOUT:-300} "$bin/AttnE2ETests" --gtest_filter='*Warpgroups*_cuda' \
      > "$out/e2e-wgmma.log" 2>&1
    grep -E "^\[  (FAILED|PASSED|SKIPPED) " "$out/e2e-wgmma.log" | sort | uniq -c
    log_step "cuda-attention-bench --wgmma ${BENCH_ARGS:-}"
    timeout ${BENCH_TIMEOUT:-300} "$bin/cuda-attention-bench" --wgmma ${BENCH_ARGS:-} 2>&1 | tee -a "$out/gpu.log";;
  *) echo "run.sh: unknown step '$step' (info, e2e, profile, bench, memcheck, torch, fla, python, wgmma)"; exit 2;;
  esac
done
echo "== done, $(date -u +%T)"
EOF
chmod +x "$dir/run.sh"
du -sh "$dir"
