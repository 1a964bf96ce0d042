#!/usr/bin/env bash
# The Llama-family block's parts alone (docs/BENCHMARKS.md, "Llama-family block
# parts"): RMSNorm, rotary positions on q and k, SwiGLU and grouped-query
# attention, forward + backward in fp32, one sequence (B = 1), at llama-small's
# widths (C 256, 4 heads, 2 key/value heads, SwiGLU 688) and Llama 3.1 8B's
# (C 4096, 32 heads of 128, 8 key/value heads, SwiGLU 14336), T = 128 and 2,048,
# braid's kernels against PyTorch's eager compositions (bench/torch_block_parts.py,
# bench/torch_attention.py), each in a process of its own, alternated ROUNDS
# times; the table gives the medians over rounds.
# Usage: bench/block_parts_table.sh [rounds]   (env: BRAID, THREADS, OUT)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
braid="${BRAID:-$root/build/braid}"
rounds="${1:-3}"
threads="${THREADS:-2}"
out="${OUT:-$root/out/block_parts_table}"
mkdir -p "$out"
: >"$out/runs.jsonl"
grep -m1 "model name" /proc/cpuinfo | sed 's/^model name\s*: /cpu: /'
# name width hidden heads kv_heads
shapes=("llama-small 256 688 4 2" "llama-8B 4096 14336 32 8")
# The peer runs with OpenBLAS at its full speed, and with glibc keeping freed
# memory: by default each large tensor PyTorch frees goes back to the system and
# the next is faulted in afresh, which on this machine's virtualised page faults
# made an 8M-element multiply take 64 ms instead of 1.
torch_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS="$threads" MALLOC_MMAP_THRESHOLD_=17179869184
           MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=1073741824 /usr/bin/python3)
for r in $(seq 1 "$rounds"); do
  for s in "${shapes[@]}"; do
    read -r name C H NH NKV <<<"$s"
    for T in 128 2048; do
      dims=(--batch 1 --seq-len "$T" --width "$C" --hidden "$H" --heads "$NH" --kv-heads "$NKV" --threads "$threads")
      OMP_NUM_THREADS="$threads" "$braid" bench-block-parts "${dims[@]}" --reps 5 |
        sed "s/^{/{\"shape\":\"$name\",\"peer\":\"braid\",/" | tee -a "$out/runs.jsonl"
      "${torch_env[@]}" "$root/bench/torch_block_parts.py" "${dims[@]}" --reps 5 |
        sed "s/^{/{\"shape\":\"$name\",/" | tee -a "$out/runs.jsonl"
      att=(--seq-len "$T" --heads "$NH" --kv-heads "$NKV" --head-dim $((C / NH)) --threads "$threads" --reps 3)
      OMP_NUM_THREADS="$threads" "$braid" bench-attention --kernel fused "${att[@]}" |
        sed "s/^{/{\"shape\":\"$name\",\"part\":\"gqa attention\",\"peer\":\"braid\",/" | tee -a "$out/runs.jsonl"
      "${torch_env[@]}" "$root/bench/torch_attention.py" "${att[@]}" |
        sed "s/^{/{\"shape\":\"$name\",\"part\":\"gqa attention\",\"peer\":\"torch\",/" | tee -a "$out/runs.jsonl"
    done
  done
done
/usr/bin/python3 - "$out/runs.jsonl" <<'PY' | tee "$out/table.md"
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    runs[(j["shape"], j["T"], j["part"], j["peer"])].append(j["forward_ms"] + j["backward_ms"])
print("| shape | T | part | braid fwd+bwd ms | PyTorch eager ms | PyTorch / braid |")
print("| --- | ---: | --- | ---: | ---: | ---: |")
for (shape, T, part, peer), v in sorted(runs.items()):
    if peer != "braid":
        continue
    b, t = statistics.median(v), statistics.median(runs[(shape, T, part, "torch")])
    print(f"| {shape} | {T} | {part} | {b:.2f} | {t:.2f} | {t / b:.2f}x |")
PY
