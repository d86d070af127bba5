#!/usr/bin/env bash
# CPU linear-recurrence prefill compiled by two attnc builds, side by side
# in one run (as bench/prefill-compilers.sh for softmax attention): every
# rule at B = 1, 8 heads, dims 128, chunks of 64, f32, L tokens, rounds
# interleaving the builds. Prints medians over rounds of `attn-run
# --repeat 9` medians and the fastest run of each, with new / old: the
# recurrence kernels' runs are bimodal on these VMs, so both are given.
#
#   bench/recurrence-compilers.sh OLD_ATTNC NEW_ATTNC [ROUNDS] [L] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1
new=$2
rounds=${3:-5}
length=${4:-4096}
threads=${5:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rules=(linear decay gated_delta delta gla kda)
for rule in "${rules[@]}"; do
  printf '{"model": "bench", "dtype": "f32", "layers": [{"name": "lin", "type": "linear_attention", "rule": "%s", "num_k_heads": 8, "num_v_heads": 8, "k_dim": 128, "v_dim": 128, "chunk_size": 64}]}\n' \
    "$rule" >"$work/$rule.json"
  "$old" "$work/$rule.json" -o "$work/$rule-old.attnb"
  "$new" "$work/$rule.json" -o "$work/$rule-new.attnb"
done
declare -A medians fastest
for ((round = 0; round < rounds; ++round)); do
  for rule in "${rules[@]}"; do
    for build in old new; do
      line=$(build/bin/attn-run "$work/$rule-$build.attnb" --entry lin \
        --random "B=1,L=$length" --repeat 9 --threads "$threads" | tail -1)
      median=${line#median_ms=}
      least=${line#*min_ms=}
      medians["$rule|$build"]+="${median%% *} "
      fastest["$rule|$build"]+="${least%% *} "
    done
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
least() { tr ' ' '\n' | grep . | sort -g | head -1; }
echo "| rule (B = 1, H = 8, dims 128, C = 64, f32, L = $length, $threads threads) | old (ms) | new (ms) | new / old | old fastest (ms) | new fastest (ms) | new / old |"
echo "|---|---|---|---|---|---|---|"
for rule in "${rules[@]}"; do
  a=$(median <<<"${medians["$rule|old"]}")
  b=$(median <<<"${medians["$rule|new"]}")
  c=$(least <<<"${fastest["$rule|old"]}")
  d=$(least <<<"${fastest["$rule|new"]}")
  awk -v r="$rule" -v a="$a" -v b="$b" -v c="$c" -v d="$d" \
    'BEGIN {printf "| %s | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f |\n", r, a, b, b / a, c, d, d / c}'
done
