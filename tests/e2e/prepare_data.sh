#!/usr/bin/env bash
# e2e: `braid prepare-data --input FILE` writes <out>/<name>_{train,val}.bin with
# a valid header, ~5% of the tokens in val, the EOT first, and (when node and
# the gpt-3-encoder package are there) exactly the ids of the JS encoder.
# Usage: bash prepare_data.sh <path-to-braid> <source-dir>
set -euo pipefail
BRAID=${1:?usage: prepare_data.sh <braid> <source-dir>}
SRC=${2:?usage: prepare_data.sh <braid> <source-dir>}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# A few KB of mixed text: paragraphs, contractions, digits, non-ASCII.
{
  for i in $(seq 1 40); do
    printf "Paragraph %d: It's a test of the tokenizer -- they're checking 3.14 and 1,000 items.\n" "$i"
    printf "Café, Zürich, 東京, Привет! \"Quoted\" (parens) and    spaces\ttabs.\n\n"
  done
} > "$TMP/sample.txt"

"$BRAID" prepare-data --input "$TMP/sample.txt" --out-dir "$TMP/out" --name sample --val-fraction 0.1 \
  > "$TMP/stdout" 2> "$TMP/stderr"
cat "$TMP/stdout"
for f in sample_train.bin sample_val.bin; do
  [[ -s "$TMP/out/$f" ]] || { echo "FAIL: $TMP/out/$f missing or empty"; exit 1; }
done
ls "$TMP/out" | grep -q tmp && { echo "FAIL: temp file left behind"; exit 1; }

python3 - "$TMP/out/sample_train.bin" "$TMP/out/sample_val.bin" "$TMP/ids.json" "$SRC/tools" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[4])
import token_file  # the independent reader: checks every checksum with zlib
ids = []
for path in sys.argv[1:3]:
    vocab, version, toks = token_file.read(path)
    assert version == 2, (path, version)
    assert vocab == 50257, (path, vocab)
    ids.append(toks)
train, val = ids
assert train[0] == 50256, "document must start with <|endoftext|>"
total = len(train) + len(val)
assert abs(len(val) - round(0.1 * total)) <= 1, (len(train), len(val))
json.dump(train[1:] + val, open(sys.argv[3], "w"))
print("ok: %d train + %d val tokens" % (len(train), len(val)))
PY

if command -v node > /dev/null && [[ -f "$SRC/third_party/npm/node_modules/gpt-3-encoder/Encoder.js" ]]; then
  node "$SRC/tools/encode_oracle.js" "$TMP/sample.txt" "$SRC/third_party/npm/node_modules" > "$TMP/oracle.json"
  python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); \
assert a == b, 'ids differ from the JS oracle'; print('ok: ids match the JS oracle')" "$TMP/ids.json" "$TMP/oracle.json"
else
  echo "skip: node or gpt-3-encoder missing, not comparing with the JS oracle"
fi

# A missing input is a clear error, not a crash.
if "$BRAID" prepare-data --input "$TMP/nope.txt" --out-dir "$TMP/out2" 2> "$TMP/err"; then
  echo "FAIL: missing --input succeeded"; exit 1
fi
grep -q "nope.txt" "$TMP/err" || { echo "FAIL: error does not name the file:"; cat "$TMP/err"; exit 1; }
echo "PASS"
