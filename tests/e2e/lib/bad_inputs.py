"""The bad-input table: every row runs the braid CLI on one bad input and must
exit with the row's code (2: configuration error, 3: data error) and a message
naming the value and the fix; never a signal, an abort, a sanitizer report or
an uncaught exception's text; every file the user had is unchanged (SHA-256
before and after).  Usage: bad_inputs.py BRAID TMPDIR [--markdown FILE]
(TMPDIR holds t_train.bin, t_val.bin and text.txt from make_tokens; with
--markdown the table of inputs, exit codes and messages is written to FILE)."""
import hashlib, json, os, shutil, struct, subprocess, sys, zlib

braid, d = sys.argv[1], sys.argv[2]
markdown = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--markdown" else None
T, V = os.path.join(d, "t_train.bin"), os.path.join(d, "t_val.bin")
p = lambda name: os.path.join(d, name)
base = ["--model", "tiny", "--train-data", T, "--val-data", V, "--seq-len", "32", "--batch", "4",
        "--micro-batch", "2", "--steps", "2", "--quiet"]


def write(name, data):
    with open(p(name), "wb") as f:
        f.write(data)
    return p(name)


def run(args, timeout=120):
    return subprocess.run([braid] + args, capture_output=True, text=True, errors="replace", timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


# Fixtures: a good checkpoint, a checkpoint of another model, damaged copies.
ok = run(["train"] + base + ["--save", p("ck"), "--checkpoint-format", "file"])
assert ok.returncode == 0, ok.stdout + ok.stderr
CK = p("ck/step_2.ckpt")
other = run(["train"] + base + ["--n-layer", "1", "--save", p("ck_other"), "--checkpoint-format", "file"])
assert other.returncode == 0, other.stderr
good_ck, good_tok = open(CK, "rb").read(), open(T, "rb").read()
flip = lambda b, at: b[:at] + bytes([b[at] ^ 0x04]) + b[at + 1:]
write("ck_trunc.ckpt", good_ck[: len(good_ck) // 2])
write("ck_flip.ckpt", flip(good_ck, len(good_ck) - 100))
write("ck_empty.ckpt", b"")
write("ck_magic.ckpt", b"NOTACKPT" + good_ck[8:])
hlen = struct.unpack_from("<Q", good_ck, 12)[0]
hdr = json.loads(good_ck[24:24 + hlen])
hdr["seed"] = "1337"
h2 = json.dumps(hdr).encode()
write("ck_field.ckpt", good_ck[:12] + struct.pack("<QI", len(h2), zlib.crc32(h2)) + h2 + good_ck[24 + hlen:])
hdr = json.loads(good_ck[24:24 + hlen])
hdr["n_layer"] = 3  # an edit under a matching checksum: damage, not another model
h3 = json.dumps(hdr).encode()
write("ck_layers.ckpt", good_ck[:12] + struct.pack("<QI", len(h3), zlib.crc32(h3)) + h3 + good_ck[24 + hlen:])
# Sharded: a good directory, one with a flipped piece byte, one whose metadata is missing.
sh = run(["train"] + base + ["--save", p("sh")])
assert sh.returncode == 0, sh.stdout + sh.stderr
SH = p("sh/step_2")
shutil.copytree(SH, p("sh_flip"))
piece = sorted(f for f in os.listdir(p("sh_flip")) if f.endswith(".bin"))[0]
data = open(os.path.join(p("sh_flip"), piece), "rb").read()
write(os.path.join("sh_flip", piece), flip(data, 4000))
shutil.copytree(SH, p("step_9"))
os.remove(os.path.join(p("step_9"), "metadata"))
write("tok_trunc.bin", good_tok[: len(good_tok) // 2 + 1])
write("tok_flip.bin", flip(good_tok, len(good_tok) - 7))
write("tok_empty.bin", b"")
write("tok_magic.bin", b"NOTATOKN" + good_tok[8:])
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools"))
import token_file  # noqa: E402  (the independent writer: a well-formed file of another vocabulary)
token_file.write(p("tok_vocab.bin"), [i % 1000 for i in range(5000)], 1000)
write("empty.txt", b"")
write("binary.txt", bytes(range(256)) * 8)
write("bad_utf8.txt", b"The jury said \xff\xfe\xc3 that the election was fair.\n" * 20)
write("tiny.txt", b"The jury said.\n")
write("bad.jsonl", b'{"text": "The jury said."}\n{"text": "cut short\n')
write("a_file", b"I am a file, not a directory\n")

tr = lambda *a: ["train"] + base + list(a)
# (name, args, exit code, text the message must contain)
CASES = [
    # token files
    ("token file truncated", tr("--train-data", p("tok_trunc.bin")), 3, "tok_trunc.bin is corrupt"),
    ("token file bit-flipped", tr("--train-data", p("tok_flip.bin")), 3, "tok_flip.bin is corrupt"),
    ("token file empty", tr("--train-data", p("tok_empty.bin")), 3, "tok_empty.bin is corrupt"),
    ("token file wrong magic", tr("--train-data", p("tok_magic.bin")), 3, "no known magic"),
    ("token file of another vocabulary", tr("--train-data", p("tok_vocab.bin")), 3, "vocabulary of 1000"),
    ("token file missing", tr("--train-data", p("nope.bin")), 2, "nope.bin' not found"),
    ("validation file damaged", tr("--val-data", p("tok_flip.bin")), 3, "tok_flip.bin is corrupt"),
    ("eval: sequence-parallel windows TP cannot split",
     ["eval", "--checkpoint", CK, "--data", V, "--seq-len", "31", "--max-windows", "3", "--tp", "2",
      "--sequence-parallel", "--backend", "local", "--ranks", "2"], 2, "--seq-len divisible by 2"),
    # checkpoints
    ("checkpoint truncated", tr("--resume", p("ck_trunc.ckpt")), 3, "ck_trunc.ckpt is damaged"),
    ("checkpoint bit-flipped", tr("--resume", p("ck_flip.ckpt"), "--steps", "4"), 3, "checksum of its AdamW v does not match"),
    ("checkpoint empty", tr("--resume", p("ck_empty.ckpt")), 3, "ck_empty.ckpt is not a braid checkpoint"),
    ("checkpoint wrong magic", tr("--resume", p("ck_magic.ckpt")), 3, "no \"BRAIDCKP\" magic"),
    ("checkpoint header field of the wrong type", tr("--resume", p("ck_field.ckpt")), 3, "header field 'seed'"),
    ("checkpoint header's n_layer edited under a matching checksum", tr("--resume", p("ck_layers.ckpt"), "--steps", "4"), 3,
     "need 3373632 parameters but its n_params is 3323648"),
    ("sharded checkpoint with a flipped byte", tr("--resume", p("sh_flip"), "--steps", "4"), 3, "written by rank 0, does not match"),
    ("sharded checkpoint without its metadata (an interrupted save)", tr("--resume", p("step_9"), "--steps", "4"), 2,
     "has no metadata file"),
    ("braid verify of a damaged sharded checkpoint", ["verify", p("sh_flip")], 3, "sh_flip is damaged"),
    ("checkpoint of another model", tr("--resume", p("ck_other/step_2.ckpt"), "--steps", "4"), 2, "--n-layer 1"),
    ("checkpoint of another vocabulary", tr("--resume", CK, "--vocab-size", "60000", "--steps", "4"), 2, "--vocab-size"),
    ("checkpoint with nothing left to train", tr("--resume", CK), 2, "pass a larger --steps"),
    ("checkpoint of another model, before allocating a model of --n-embd 4096",
     tr("--resume", CK, "--n-embd", "4096", "--n-head", "32", "--steps", "4"), 2, "saved with --n-head 4 --n-embd 64 but this run has --n-head 32 --n-embd 4096"),
    ("checkpoint with another seed", tr("--resume", CK, "--seed", "7", "--steps", "4"), 2, "--seed"),
    ("checkpoint missing", tr("--resume", p("missing.ckpt")), 2, "missing.ckpt not found"),
    ("--resume an empty directory", tr("--resume", d + "/empty_dir"), 2, "holds no checkpoint (step_<N> or step_<N>.ckpt)"),
    ("braid verify of a damaged file", ["verify", p("ck_flip.ckpt")], 3, "ck_flip.ckpt is damaged"),
    ("braid verify of a missing path", ["verify", p("nothing_here")], 2, "nothing_here not found"),
    # sizes and degrees
    ("--steps 0", tr("--steps", "0"), 2, "--steps"),
    ("--steps negative", tr("--steps", "-3"), 2, "--steps"),
    ("--batch 0", tr("--batch", "0"), 2, "--batch"),
    ("--micro-batch 0", tr("--micro-batch", "0"), 2, "--micro-batch"),
    ("--micro-batch negative", tr("--micro-batch", "-2"), 2, "--micro-batch"),
    ("--seq-len past the context", tr("--seq-len", "100000"), 2, "--seq-len"),
    ("--seq-len negative", tr("--seq-len", "-1"), 2, "--seq-len"),
    ("--tp that does not divide the heads", tr("--backend", "local", "--ranks", "3", "--tp", "3", "--batch", "2",
                                               "--micro-batch", "2"), 2, "--tp 3"),
    ("--pp past the layers", tr("--backend", "local", "--ranks", "3", "--pp", "3", "--batch", "6",
                                "--micro-batch", "2"), 2, "--pp 3"),
    ("--dp that does not divide the ranks", tr("--backend", "local", "--ranks", "2", "--dp", "3"), 2, "--dp 3"),
    ("--zero 4", tr("--zero", "4"), 2, "--zero"),
    ("--ranks 0", tr("--backend", "local", "--ranks", "0"), 2, "--ranks 0"),
    ("--lr negative", tr("--lr", "-1"), 2, "--lr"),
    ("--grad-clip negative", tr("--grad-clip", "-1"), 2, "--grad-clip"),
    ("--warmup negative", tr("--warmup", "-5"), 2, "--warmup"),
    ("--dropout 1", tr("--dropout", "1"), 2, "--dropout"),
    ("--comm-timeout 0", tr("--comm-timeout", "0"), 2, "--comm-timeout"),
    ("--max-memory 0", tr("--max-memory", "0"), 2, "--max-memory"),
    ("--max-memory too small", tr("--max-memory", "1KiB"), 2, "but has 1.0 KiB (--max-memory"),
    ("--save-every negative", tr("--save", p("s1"), "--save-every", "-1"), 2, "--save-every"),
    ("--keep-last negative", tr("--save", p("s2"), "--keep-last", "-1"), 2, "--keep-last"),
    # names that are not known
    ("--model unknown", tr("--model", "huge"), 2, "huge"),
    ("--precision unknown", tr("--precision", "fp8"), 2, "fp8"),
    ("--reduce-dtype unknown", tr("--precision", "bf16", "--reduce-dtype", "fp8"), 2, "'fp8' is not one of"),
    ("--reduce-dtype half under fp32", tr("--reduce-dtype", "bf16"), 2, "use --reduce-dtype fp32"),
    ("--reduce-dtype of another precision", tr("--precision", "bf16", "--reduce-dtype", "fp16"), 2, "--reduce-dtype bf16"),
    ("--schedule unknown", tr("--schedule", "zigzag"), 2, "zigzag"),
    ("--recompute unknown", tr("--recompute", "some"), 2, "some"),
    ("--backend unknown", tr("--backend", "carrier-pigeon"), 2, "carrier-pigeon"),
    ("--comm-algo unknown", tr("--comm-algo", "telepathy"), 2, "telepathy"),
    ("an unknown flag", tr("--learning-rate", "1"), 2, "--learning-rate"),
    # sampling
    ("--top-k 0", tr("--sample-tokens", "4", "--top-k", "0"), 2, "--top-k"),
    ("--temperature 0", tr("--sample-tokens", "4", "--temperature", "0"), 2, "--temperature"),
    ("--temperature negative", tr("--sample-tokens", "4", "--temperature", "-1"), 2, "--temperature"),
    ("--sample-tokens negative", tr("--sample-tokens", "-4"), 2, "--sample-tokens"),
    # flags that would do nothing
    ("--top-k without --sample-tokens", tr("--top-k", "5"), 2, "--sample-tokens"),
    ("--save-every without --save", tr("--save-every", "2"), 2, "without --save"),
    ("--keep-last without --save", tr("--keep-last", "2"), 2, "without --save"),
    ("--resume auto without --save", tr("--resume", "auto"), 2, "--save DIR"),
    ("--virtual-stages without interleaved", tr("--virtual-stages", "2"), 2, "--virtual-stages"),
    ("--staleness without --ps-async", tr("--staleness", "2"), 2, "--staleness"),
    ("--fsdp-shard-size without --fsdp", tr("--fsdp-shard-size", "2"), 2, "--fsdp-shard-size"),
    ("--ranks without --backend local", tr("--ranks", "2"), 2, "under mpirun use -np"),
    ("--inject-save-fault that never fires", tr("--save", p("s3"), "--inject-save-fault", "1:before-rename"), 2,
     "never fire"),
    # outputs
    ("--save a file", tr("--save", p("a_file")), 2, "a_file is a file"),
    ("--save into a used directory", tr("--save", p("ck")), 2, "already holds"),
    ("--metrics-out under a file", tr("--metrics-out", p("a_file") + "/m.jsonl"), 2, "--metrics-out"),
    ("--trace-out under a file", tr("--trace-out", p("a_file") + "/trace.json"), 2, "--trace-out"),
    ("--metrics-out a directory", tr("--metrics-out", d), 2, "--metrics-out"),
    # prepare-data
    ("prepare-data of a missing input", ["prepare-data", "--input", p("no.txt"), "--out-dir", p("pd")], 2, "no.txt"),
    ("prepare-data of an empty input", ["prepare-data", "--input", p("empty.txt"), "--out-dir", p("pd")], 3,
     "empty.txt"),
    ("prepare-data of a binary input", ["prepare-data", "--input", p("binary.txt"), "--out-dir", p("pd")], 3,
     "binary.txt"),
    ("prepare-data of invalid UTF-8", ["prepare-data", "--input", p("bad_utf8.txt"), "--out-dir", p("pd")], 3,
     "UTF-8"),
    ("prepare-data of an input too small to split", ["prepare-data", "--input", p("tiny.txt"), "--out-dir",
                                                      p("pd")], 3, "too small"),
    ("prepare-data into a file", ["prepare-data", "--input", p("text.txt"), "--out-dir", p("a_file")], 2,
     "a_file"),
    ("prepare-data of a pattern matching nothing", ["prepare-data", "--input", p("*.nothing"), "--out-dir", p("pd")],
     2, "matches no file"),
    ("prepare-data of a bad JSON line", ["prepare-data", "--input", p("bad.jsonl"), "--out-dir", p("pd")], 3,
     "bad.jsonl:2"),
    ("prepare-data of a JSON line without the field", ["prepare-data", "--input", p("bad.jsonl"), "--text-field",
                                                       "body", "--out-dir", p("pd")], 3, "--text-field"),
    # braid run (refused before anything is launched)
    ("run without a command", ["run"], 2, "command is required"),
    ("run --elastic of a command that is not an MPI launch", ["run", "--elastic", "--", "srun", braid, "train"], 2,
     "must be an MPI launcher"),
    ("run --elastic of a program that is not braid train", ["run", "--elastic", "--", "mpirun", "-np", "2", "python3",
                                                            "x.py"], 2, "no 'braid train'"),
    ("run --elastic without the hosts", ["run", "--elastic", "--", "mpirun", "-np", "2", braid, "train"] + base +
     ["--save", p("el")], 2, "needs the job's hosts"),
    ("run --elastic without --save", ["run", "--elastic", "--", "mpirun", "--host", "a,b", braid, "train"] + base, 2,
     "--save DIR"),
    ("run --elastic with a hostfile that cannot be read", ["run", "--elastic", "--", "mpirun", "--hostfile",
                                                           p("no_hosts"), braid, "train"] + base, 2,
     "cannot read the hostfile"),
    ("run --elastic with a bad train flag", ["run", "--elastic", "--", "mpirun", "--host", "a,b", braid, "train",
                                             "--tp", "x"], 2, "--tp"),
    ("run --elastic --min-nodes above the hosts", ["run", "--elastic", "--min-nodes", "3", "--", "mpirun", "--host",
                                                   "a,b", braid, "train"] + base + ["--save", p("el")], 2,
     "names 2 hosts"),
    ("run --max-restarts without --elastic", ["run", "--max-restarts", "2", "--", "mpirun", "true"], 2,
     "add --elastic"),
]

os.makedirs(d + "/empty_dir", exist_ok=True)
def digests():
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            q = os.path.join(root, f)
            out[q] = hashlib.sha256(open(q, "rb").read()).hexdigest()
    return out

before = digests()
bad = []
rows = ["| bad input | command (beside the common flags) | exit | message |", "| --- | --- | --- | --- |"]
names = set()
for name, args, code, needle in CASES:
    assert name not in names, name
    names.add(name)
    r = run(args)
    out = r.stdout + r.stderr
    why = []
    if r.returncode != code:
        why.append(f"exit code {r.returncode}, want {code}")
    if r.returncode < 0 or r.returncode >= 128:
        why.append("killed by a signal")
    for marker in ("Sanitizer", "runtime error", "terminate called", "Aborted", "std::", "json.exception",
                   "check `"):
        if marker in out:
            why.append(f"output has '{marker}'")
    if needle not in out:
        why.append(f"message lacks '{needle}'")
    if why:
        bad.append(f"{name}: {'; '.join(why)}\n    braid {' '.join(args)}\n    {out.strip()[-600:]}")
    msg = next((l for l in out.splitlines() if "error" in l.lower()), out.strip().splitlines()[-1] if out.strip() else "")
    extra = args[1 + len(base):] if args[1:1 + len(base)] == base else args[1:]
    shown = [args[0]] + [a.replace(d, "$tmp") for a in extra]
    rows.append(f"| {name} | `braid {' '.join(shown)}` | {r.returncode} | {msg.replace(d, '$tmp').replace('|', '/')[:220]} |")
after = digests()
changed = [q for q, h in before.items() if after.get(q) != h]
if changed:
    bad.append("files changed or removed by a refused run: " + ", ".join(changed))
if markdown:
    open(markdown, "w").write("\n".join(rows) + "\n")
print(f"{len(CASES) - len(bad)} passed, {len(bad)} failed")
for b in bad:
    print("FAIL", b)
sys.exit(1 if bad else 0)
