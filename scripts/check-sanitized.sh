#!/usr/bin/env bash
# The sanitizer and fuzzing checks (docs/testing.md):
#   1. builds build-sanitize with clang-22, AddressSanitizer +
#      UndefinedBehaviorSanitizer on every target of ours, and the libFuzzer
#      targets of test/fuzz;
#   2. runs the unit tests and every end-to-end case that needs no GPU under
#      them (the e2e cases compile in-process, so the frontend, the passes,
#      the compiler and the runtime all run instrumented);
#   3. runs each fuzzer for FUZZ_SECONDS seconds (default 60) on its seed
#      corpus: the .npy reader, the frontend, the .attnb loader with the
#      host-program interpreter, and attn IR through the compiler.
# With --quick (what CI runs after the README's test command, .ci/run): only
# the readers of untrusted input, which build without the compiler: the .npy
# reader's unit tests and the three fuzzers, the .attnb seeds compiled by
# the uninstrumented build's attnc (build/bin/attnc, or $ATTNC).
# Any sanitizer report, failing test or fuzzer finding fails the script; a
# fuzzer's reproducer is left in build-sanitize/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-sanitize
seconds=${FUZZ_SECONDS:-60}

quick=false
if [ "${1:-}" = "--quick" ]; then
  quick=true
elif [ $# -gt 0 ]; then
  echo "usage: $0 [--quick]" >&2
  exit 2
fi

seed_attnc=
if $quick; then
  seed_attnc=$(realpath "${ATTNC:-build/bin/attnc}")
fi
cmake -G Ninja -S . -B "$build" -DCMAKE_C_COMPILER=clang-22 \
  -DCMAKE_CXX_COMPILER=clang++-22 -DATTN_SANITIZE=ON -DATTN_FUZZERS=ON \
  -DATTN_PYTHON=OFF -DATTN_FUZZ_SEED_ATTNC="$seed_attnc"
if $quick; then
  ninja -C "$build" AttnFuzzers AttnNpyTests
else
  ninja -C "$build" AttnFuzzers attn-fuzz-compile AttnNpyTests \
    AttnFrontendTests AttnReferenceTests AttnE2ETests
fi

# allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons its slabs when
# compiled with ASan, and our instrumented code shares MLIR's allocators
# with Debian's uninstrumented libMLIR, which then writes to memory our
# copy of the allocator poisoned (a false use-after-poison).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Temporaries and outputs filled with NaN / -1 bytes before each call
# (docs/testing.md): the kernels JIT-compiled by the tests are not
# instrumented, so a read of what nothing wrote shows only this way.
export ATTN_POISON=1
# And each call's buffers ending at an inaccessible page (ATTN_GUARD): the
# same kernels' accesses past a buffer's end fault.
export ATTN_GUARD=1
fuzz() {
  local fuzzer=$1
  shift
  local corpus
  corpus=$(mktemp -d)
  echo "fuzzing with $fuzzer for $seconds s"
  "$build/bin/$fuzzer" -max_total_time="$seconds" -timeout=60 \
    -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz/$fuzzer-" "$corpus" "$@"
  rm -rf "$corpus"
}
mkdir -p "$build/fuzz"
fuzz_all() {
  fuzz attn-fuzz-npy test/fuzz/corpus/npy
  fuzz attn-fuzz-model test/fuzz/corpus/model examples examples/qwen3-next \
    examples/gpt-oss examples/deepseek-v3 examples/kimi-linear \
    examples/mamba2 examples/nemotron-h examples/granite-4.0-h \
    test/attnc/Inputs test/attnc/Inputs/hf
  fuzz attn-fuzz-attnb "$build/fuzz/attnb-seeds" test/fuzz/corpus/attnb
}

if $quick; then
  "$build/test/unit/AttnNpyTests" --gtest_brief=1
  fuzz_all
  echo "check-sanitized --quick: passed"
  exit 0
fi

for tests in AttnNpyTests AttnFrontendTests AttnReferenceTests; do
  "$build/test/unit/$tests" --gtest_brief=1
done
# The CUDA backend's cases need a GPU; their kernels run on the CPU in the
# cuda_kernels_on_cpu cases. About a shard a core, but an odd count: the
# suites' instances alternate between the CPU kernels and the CUDA kernels'
# CPU bodies (several times slower), and GoogleTest deals tests to shards
# in turn, so an even count put every CUDA body in one shard (2 shards: 29
# and 9 minutes).
shards=$(($(nproc) | 1))
pids=()
for ((shard = 0; shard < shards; ++shard)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard \
    "$build/test/unit/AttnE2ETests" --gtest_brief=1 \
    --gtest_filter='-*_cuda:*/cuda:*OnCuda' &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid"
done

fuzz_all
fuzz attn-fuzz-compile -dict=test/fuzz/attn-ir.dict "$build/fuzz/mlir-seeds" \
  test/fuzz/corpus/mlir examples/variants
echo "check-sanitized: passed"
