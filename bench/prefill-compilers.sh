#!/usr/bin/env bash
# CPU prefill compiled by two attnc builds, side by side in one run: for
# judging a change to the flash kernel on this machine, whose speed drifts
# too much between runs for separate ones to compare. Each case is one
# layer (B = 1, Lq = Lk = L) compiled by both builds for the same CPU
# level; rounds interleave the builds so that the VM's drifts hit both
# alike. Prints a Markdown table of medians (ms) over rounds of
# `attn-run --repeat` medians, and new / old.
#
#   bench/prefill-compilers.sh OLD_ATTNC NEW_ATTNC [ROUNDS] [THREADS] [CPU]
#
# CPU is attnc's --cpu (default: the host). Build the old compiler in a
# worktree of the old commit (`git worktree add /tmp/old COMMIT`, then the
# README's build there).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1
new=$2
rounds=${3:-3}
threads=${4:-2}
cpu=${5:-host}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# label | layer keys beyond the type | dtype | L | repeat
cases=("causal, 8 / 2 / 128|\"num_heads\": 8, \"num_kv_heads\": 2, \"head_dim\": 128, \"mask\": \"causal\"|f32|2048|5"
       "causal, 8 / 2 / 128|\"num_heads\": 8, \"num_kv_heads\": 2, \"head_dim\": 128, \"mask\": \"causal\"|bf16|2048|5"
       "causal, 8 / 2 / 128|\"num_heads\": 8, \"num_kv_heads\": 2, \"head_dim\": 128, \"mask\": \"causal\"|bf16|8192|3"
       "causal, 16 / 2 / 256|\"num_heads\": 16, \"num_kv_heads\": 2, \"head_dim\": 256, \"mask\": \"causal\"|bf16|2048|3"
       "dense, 8 / 8 / 64|\"num_heads\": 8, \"num_kv_heads\": 8, \"head_dim\": 64, \"mask\": \"none\"|f32|2048|5"
       "window 512, softcap 30, 8 / 2 / 128|\"num_heads\": 8, \"num_kv_heads\": 2, \"head_dim\": 128, \"mask\": {\"sliding_window\": 512}, \"softcap\": 30.0|f32|4096|5")

compile() { # attnc index
  local attnc=$1 index=$2 c=${cases[$2]}
  IFS='|' read -r label layer dtype length repeat <<<"$c"
  printf '{"model": "bench", "dtype": "%s", "layers": [{"name": "attn", "type": "attention", %s}]}\n' \
    "$dtype" "$layer" >"$work/$index.json"
  local flags=()
  [[ $cpu == host ]] || flags+=("--cpu=$cpu")
  "$attnc" "$work/$index.json" "${flags[@]}" -o "$work/$index-$3.attnb"
}
for index in "${!cases[@]}"; do
  compile "$old" "$index" old
  compile "$new" "$index" new
done

declare -A times
for ((round = 0; round < rounds; ++round)); do
  for index in "${!cases[@]}"; do
    IFS='|' read -r label layer dtype length repeat <<<"${cases[$index]}"
    for build in old new; do
      line=$(build/bin/attn-run "$work/$index-$build.attnb" --entry attn \
        --random "B=1,Lq=$length,Lk=$length" --repeat "$repeat" \
        --threads "$threads" | tail -1)
      median=${line#median_ms=}
      times["$index|$build"]+="${median%% *} "
    done
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "| prefill ($threads threads, H / Hkv / D) | dtype | L | old (ms) | new (ms) | new / old |"
echo "|---|---|---|---|---|---|"
for index in "${!cases[@]}"; do
  IFS='|' read -r label layer dtype length repeat <<<"${cases[$index]}"
  a=$(median <<<"${times["$index|old"]}")
  b=$(median <<<"${times["$index|new"]}")
  awk -v l="$label" -v d="$dtype" -v n="$length" -v a="$a" -v b="$b" \
    'BEGIN {printf "| %s | %s | %d | %.3f | %.3f | %.2f |\n", l, d, n, a, b, b / a}'
done
