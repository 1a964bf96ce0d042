#!/usr/bin/env bash
# e2e: `braid prepare-data` streams. 40 MB of text, 20 times its batch of
# text, as one file, as a directory of 40 shards and as JSON lines, is
# tokenized with a peak RSS (getrusage of the process) less than half the
# input's size above that of a 10 KB input: holding the text, or its ids, in
# memory would pass that bound. The shards give the single file's ids plus one
# end-of-text per extra document (the cuts fall on safe splits), every 20th
# shard held out for validation.
source "$(dirname "$0")/lib/common.bash" "$@"

/usr/bin/python3 - "$tmp" <<'PY'
import json, os, random, sys
d = sys.argv[1]
random.seed(7)
words = ("the of and to a in that is was he for it with as his on be at by had not are but from or have an they "
         "which one you were her all she there would their we him been has when who will more no if out so said "
         "what up its about into than them can only other new some could time these two may then do first any my "
         "now such like our over man me even most made after also did many before must through back years where "
         "much your way well down should because each just those people how too little state good very make world "
         "still own see men work long get here between both life being under never day same another know while last "
         "3.14 1,000 it's they're Café Zürich").split()
block = "".join(" ".join(random.choice(words) for _ in range(random.randint(5, 30))).capitalize() + ".\n"
                for _ in range(12000))
block = block[:block.rfind(".\n", 0, 1 << 20) + 2]   # whole lines, under 1 MiB
os.makedirs(d + "/shards")
with open(d + "/big.txt", "w") as big, open(d + "/big.jsonl", "w") as jl:
    for i in range(40):
        shard = "Shard %d.\n" % i + block
        big.write(shard)
        with open(d + "/shards/part-%03d.txt" % i, "w") as f:
            f.write(shard)
        for para in shard.split(".\n")[:-1]:
            jl.write(json.dumps({"id": i, "text": para + ".\n"}) + "\n")
with open(d + "/small.txt", "w") as f:
    f.write(block[:10000])
PY

# peak RSS (KiB) of one braid run, from wait4(2)'s rusage; its stdout goes to $tmp/NAME.out
cat > "$tmp/rss.py" <<'PY'
import os, subprocess, sys
out = open(sys.argv[1], "w")
p = subprocess.Popen(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)
_, status, ru = os.wait4(p.pid, 0)
print(ru.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
PY
rss() {  # rss NAME ARGS...
  local name="$1"; shift
  /usr/bin/python3 "$tmp/rss.py" "$tmp/$name.out" "$BRAID" prepare-data --out-dir "$tmp/out" --name "$name" "$@" \
    || { cat "$tmp/$name.out"; fail "prepare-data $name"; }
}

input_kib=$(( $(stat -c %s "$tmp/big.txt") / 1024 ))
base=$(rss small --input "$tmp/small.txt")
echo "input $input_kib KiB; peak RSS of a 10 KB input: $base KiB"
for run in "big --input $tmp/big.txt" "shards --input $tmp/shards" "jsonl --input $tmp/big.jsonl"; do
  set -- $run
  peak=$(rss "$@")
  grep "prepare-data: .* s, " "$tmp/$1.out"
  echo "$1: peak RSS $peak KiB (+$(( peak - base )) KiB)"
  (( peak - base < input_kib / 2 )) || fail "$1: peak RSS $peak KiB is not bounded (a 10 KB input: $base KiB, input $input_kib KiB)"
done

/usr/bin/python3 - "$tmp/out" <<'PY'
import struct, sys
d = sys.argv[1]
def count(name):  # the token count from the header (the reader's checks are the unit tests')
    with open(f"{d}/{name}.bin", "rb") as f:
        magic, version, vocab, n = struct.unpack("<8sIIQ", f.read(24))
    assert magic == b"BRAIDTOK" and version == 2, (name, magic, version)
    return n
big = count("big_train") + count("big_val")
shards = count("shards_train") + count("shards_val")
assert shards == big + 39, (big, shards)
assert count("jsonl_train") > 0 and count("jsonl_val") > 0
print(f"ok: {big} tokens in one file, {shards} in 40 shards")
PY
[[ $? -eq 0 ]] || fail "token counts"
grep -q "40 documents (38 train, 2 val)" "$tmp/shards.out" || { cat "$tmp/shards.out"; fail "shards: every 20th held out"; }
grep -q "validation: the last 0.05 of the tokens" "$tmp/big.out" || { cat "$tmp/big.out"; fail "one file: its tail held out"; }
ls "$tmp/out" | grep -q tmp && fail "a temporary file was left behind"
echo "PASS"
