#!/usr/bin/env bash
# bf16 softmax attention on the CPU with AVX512-BF16's pair products
# (vdpbf16ps; attnc's host target when the CPU has them, or
# --cpu=x86-64-v4+avx512bf16) beside the same model compiled for x86-64-v4
# (bf16 widened to f32 as loaded, f32 products) and beside f32 tensors, in
# one run: prefill (causal) and decode, rounds interleaved so that the VM's
# drifts hit every column alike. On a CPU with AMX-BF16 a first column
# compiles for --cpu=x86-64-v4+avx512bf16+amx-bf16 (flash attention's
# products on AMX tiles; decode keeps the pair products), and prefill's
# rate is given as a fraction of the tile unit's peak (build/bin/amx-peak,
# measured on the same threads each round). Prints a Markdown table of
# medians (ms) over rounds of `attn-run --repeat` medians, and the
# speed-ups.
#
#   bench/cpu-bf16-dot.sh [ROUNDS] [THREADS]      (after the README's build)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-2}
if ! grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "cpu-bf16-dot: this CPU has no AVX512-BF16; nothing to compare" >&2
  exit 1
fi
variants=(dot widened f32)
if grep -qw amx_bf16 /proc/cpuinfo; then
  variants=(amx "${variants[@]}")
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name heads kv_heads head_dim
shapes=("d128 8 2 128" "d256 16 2 256")
for shape in "${shapes[@]}"; do
  read -r name heads kv dim <<<"$shape"
  for dtype in bf16 f32; do
    printf '{"model": "bench", "dtype": "%s", "layers": [{"name": "attn", "type": "attention", "num_heads": %d, "num_kv_heads": %d, "head_dim": %d, "mask": "causal"}]}\n' \
      "$dtype" "$heads" "$kv" "$dim" >"$work/$name-$dtype.json"
  done
  if [[ ${variants[0]} == amx ]]; then
    build/bin/attnc "$work/$name-bf16.json" --cpu=x86-64-v4+avx512bf16+amx-bf16 -o "$work/$name-amx.attnb"
  fi
  build/bin/attnc "$work/$name-bf16.json" --cpu=x86-64-v4+avx512bf16 -o "$work/$name-dot.attnb"
  build/bin/attnc "$work/$name-bf16.json" --cpu=x86-64-v4 -o "$work/$name-widened.attnb"
  build/bin/attnc "$work/$name-f32.json" --cpu=x86-64-v4 -o "$work/$name-f32.attnb"
done

# label shape sizes repeat
calls=("prefill, L = 2048|d128|B=1,Lq=2048,Lk=2048|5"
       "prefill, L = 8192|d128|B=1,Lq=8192,Lk=8192|3"
       "prefill, L = 2048|d256|B=1,Lq=2048,Lk=2048|5"
       "decode, Lk = 4096|d128|B=1,Lq=1,Lk=4096|300"
       "decode, Lk = 32768|d128|B=1,Lq=1,Lk=32768|100")
declare -A times
peaks=""
for ((round = 0; round < rounds; ++round)); do
  if [[ ${variants[0]} == amx ]]; then
    line=$(build/bin/amx-peak "$threads")
    value=${line#amx_bf16_gflops=}
    peaks+="${value%% *} "
  fi
  for call in "${calls[@]}"; do
    IFS='|' read -r label name sizes repeat <<<"$call"
    for variant in "${variants[@]}"; do
      line=$(build/bin/attn-run "$work/$name-$variant.attnb" --entry attn \
        --random "$sizes" --repeat "$repeat" --threads "$threads" | tail -1)
      median=${line#median_ms=}
      times["$label|$name|$variant"]+="${median%% *} "
    done
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
if [[ ${variants[0]} == amx ]]; then
  peak=$(median <<<"$peaks")
  echo "AMX bf16 peak on $threads threads: $peak GFLOP/s (build/bin/amx-peak, median of $rounds)"
  echo
  echo "| call ($threads threads, H / Hkv / D) | bf16, AMX tiles (ms) | bf16, pair products (ms) | bf16 widened to f32 (ms) | f32 (ms) | AMX x pair products | AMX x f32 | AMX GFLOP/s | x AMX peak |"
  echo "|---|---|---|---|---|---|---|---|---|"
else
  echo "| call ($threads threads, H / Hkv / D) | bf16, pair products (ms) | bf16 widened to f32 (ms) | f32 (ms) | x widened | x f32 |"
  echo "|---|---|---|---|---|---|"
fi
for call in "${calls[@]}"; do
  IFS='|' read -r label name sizes repeat <<<"$call"
  dot=$(median <<<"${times["$label|$name|dot"]}")
  widened=$(median <<<"${times["$label|$name|widened"]}")
  f32=$(median <<<"${times["$label|$name|f32"]}")
  shape=$(sed 's/^d128$/8 \/ 2 \/ 128/; s/^d256$/16 \/ 2 \/ 256/' <<<"$name")
  if [[ ${variants[0]} == amx ]]; then
    tiles=$(median <<<"${times["$label|$name|amx"]}")
    # Causal prefill's visible work: 4 D flops per (row, visible key) pair.
    read -r heads dim <<<"$(sed 's/^d128$/8 128/; s/^d256$/16 256/' <<<"$name")"
    length=$(sed -n 's/.*Lq=\([0-9]*\),.*/\1/p' <<<"$sizes")
    awk -v l="$label, $shape" -v a="$tiles" -v d="$dot" -v w="$widened" -v f="$f32" \
      -v h="$heads" -v dim="$dim" -v n="$length" -v peak="$peak" \
      'BEGIN {
         gflops = 4 * dim * h * n * (n + 1) / 2 / (a / 1e3) / 1e9
         rate = n > 1 ? sprintf("%.0f | %.2f", gflops, gflops / peak) : "- | -"
         printf "| %s | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %s |\n", l, a, d, w, f, d / a, f / a, rate
       }'
  else
    awk -v l="$label, $shape" -v d="$dot" -v w="$widened" -v f="$f32" \
      'BEGIN {printf "| %s | %.3f | %.3f | %.3f | %.2f | %.2f |\n", l, d, w, f, w / d, f / d}'
  fi
done
