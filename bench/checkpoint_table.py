"""Checkpoint save and load figures (docs/BENCHMARKS.md, "Checkpoints at scale").

For `gpt2` fp32 with AdamW on 4 ranks (DDP, ZeRO-3, TP 2 x PP 2), one run per
form: no saves (the baseline), rank 0's single file, the sharded directory and
the sharded directory with --async-save, each saving every --every steps of
--steps. Beside them, the disk's raw rate: one stream of 1 GiB written and
fsync'd in the same directory, in the same invocation. Reported per layout:
the median save time of each form (the job's: from the call to the commit on
rank 0), the bytes each rank wrote (sharded), how far rank 0's resident memory
rose during a save (its peak RSS over its RSS before, as braid train prints it)
and the async staging buffer (the ledger's), and the async save's training
stall: the time the step loop was blocked plus the extra time of the steps that
overlapped the write (their step time over the no-save run's median). Then
resuming the DDP run's checkpoint into ZeRO-3 and TP 2 x PP 2: load time, the
bytes rank 0 read and how far its resident memory rose, sharded against the
single file.

Usage: /usr/bin/python3 bench/checkpoint_table.py [--out DIR] [--steps N] [--every K]
(env BRAID: the binary, default build/braid)."""
import argparse, json, os, re, shutil, statistics, subprocess, sys, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
braid = os.environ.get("BRAID", os.path.join(root, "build", "braid"))
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(root, "out", "checkpoint_table"))
ap.add_argument("--steps", type=int, default=7)
ap.add_argument("--every", type=int, default=3)
ap.add_argument("--model", default="gpt2")
ap.add_argument("--stall-rounds", type=int, default=0,
                help="only the async stall: this many alternated rounds of a sharded sync run and an async run per layout")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
env = dict(os.environ, OMP_NUM_THREADS="1")
if os.geteuid() == 0:
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPI = ["mpirun", "--oversubscribe", "--bind-to", "none", "--tag-output", "-np", "4"]
COMMON = ["train", "--model", args.model, "--batch", "4", "--micro-batch", "1", "--seq-len", "64",
          "--val-every", "0", "--warmup", "1"]
LAYOUTS = {"DDP": [], "ZeRO-3": ["--zero", "3"], "TP 2 x PP 2": ["--tp", "2", "--pp", "2"]}
MiB = 1 << 20


def cpu():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()


def disk_rate(path, size=1 << 30, chunk=8 << 20):
    """Bytes/s of one stream written and fsync'd (what a single writer gets)."""
    buf = os.urandom(chunk)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(size // chunk):
        os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
    dt = time.perf_counter() - t0
    os.remove(path)
    return size / dt


def run(name, flags):
    """One job under mpirun: (rank 0's output, its metrics rows)."""
    metrics = os.path.join(args.out, name + ".jsonl")
    p = subprocess.run(MPI + [braid] + COMMON + flags + ["--metrics-out", metrics], env=env, capture_output=True, text=True)
    open(os.path.join(args.out, name + ".txt"), "w").write(p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"{name} failed ({p.returncode}); see {args.out}/{name}.txt")
    out = "\n".join(re.sub(r"^\[\d+,0\]<stdout>:\s?", "", l) for l in p.stdout.splitlines() if ",0]<stdout>" in l)
    rows = [json.loads(l) for l in open(metrics) if l.startswith("{") and '"ms"' in l]
    return out, rows


def piece_bytes(ckpt):
    meta = open(os.path.join(ckpt, "metadata"), "rb").read()
    files = json.loads(meta[24:])["files"]
    return sorted((f["rank"], f["bytes"]) for f in files)


def median_of(pattern, text):
    return statistics.median(float(x) for x in re.findall(pattern, text))


def stall_rounds(rounds):
    """The async stall against the same saves made synchronously: per round, the
    async run's steps after the first save minus the sync run's (the same I/O,
    no overlap), per save, plus the time the step loop was blocked."""
    print("| layout | blocked, ms | extra step time per save, ms (rounds) | stall, ms | sharded sync save, ms | stall / sync save |")
    print("|---|---:|---|---:|---:|---:|")
    saves = max(1, len(range(args.every, args.steps, args.every)))
    for lname, lflags in LAYOUTS.items():
        tag = lname.replace(" ", "").lower()
        extras, blocked, sync_ms = [], [], []
        for r in range(rounds):
            got = {}
            for form, extra in (("sharded", []), ("async", ["--async-save"])):
                d = os.path.join(args.out, f"stall_{tag}_{form}")
                shutil.rmtree(d, ignore_errors=True)
                got[form] = run(f"stall_{tag}_{form}_r{r}", lflags + ["--steps", str(args.steps), "--save", d,
                                                            "--save-every", str(args.every), "--keep-last", "1"] + extra)
                shutil.rmtree(d, ignore_errors=True)
            after = lambda rows: sum(x["ms"] for x in rows if x["step"] > args.every)
            extras.append((after(got["async"][1]) - after(got["sharded"][1])) / saves)
            blocked += [float(x) for x in re.findall(r"training blocked ([0-9.]+) ms", got["async"][0])][:saves]
            sync_ms += [float(x) for x in re.findall(r"saved in ([0-9.]+) ms", got["sharded"][0])]
        b, e, sv = statistics.median(blocked), statistics.median(extras), statistics.median(sync_ms)
        print(f"| {lname} | {b:.0f} | {e:.0f} ({', '.join(f'{x:.0f}' for x in extras)}) | {b + e:.0f} | {sv:.0f} | "
              f"{(b + e) / sv * 100:.1f} % |")


print(f"cpu: {cpu()}; {os.cpu_count()} cores")
if args.stall_rounds > 0:
    stall_rounds(args.stall_rounds)
    sys.exit(0)
rate = disk_rate(os.path.join(args.out, "disk_probe.bin"))
print(f"disk: one stream, 1 GiB written and fsync'd: {rate / MiB:.0f} MiB/s\n")
# Only the newest checkpoint of each run is kept (the loads below need the DDP
# run's): three forms x three layouts of every save would fill a disk.
save_every = ["--save-every", str(args.every), "--keep-last", "1"]
rows_out, stall_out, loads = [], [], []
for lname, lflags in LAYOUTS.items():
    tag = lname.replace(" ", "").lower()
    _, base_rows = run(f"{tag}_nosave", lflags + ["--steps", str(args.steps)])
    base_ms = statistics.median(r["ms"] for r in base_rows[1:])
    res = {}
    for form, extra in (("file", ["--checkpoint-format", "file"]), ("sharded", []), ("async", ["--async-save"])):
        d = os.path.join(args.out, f"{tag}_{form}")
        shutil.rmtree(d, ignore_errors=True)
        out, rows = run(f"{tag}_{form}", lflags + ["--steps", str(args.steps), "--save", d] + save_every + extra)
        res[form] = (out, rows, d)
    save_ms = {f: median_of(r"saved in ([0-9.]+) ms", res[f][0]) for f in ("file", "sharded")}
    rose = {f: median_of(r"resident memory rose ([0-9.]+) MiB", res[f][0]) for f in ("file", "sharded")}
    staging = float(re.search(r"peak memory rank 0: .*staging=([0-9.]+) MiB", res["async"][0]).group(1))
    blocked = [float(x) for x in re.findall(r"training blocked ([0-9.]+) ms", res["async"][0])]
    written = [float(x) for x in re.findall(r"written in ([0-9.]+) ms", res["async"][0])]
    # Saves left in flight (all but the last, which the run's end waits for):
    # the steps after each start overlap the write until the next save.
    starts = list(range(args.every, args.steps, args.every))
    extra = sum(max(0.0, r["ms"] - base_ms) for r in res["async"][1] if r["step"] > starts[0]) if starts else 0.0
    stall = (sum(blocked[:len(starts)]) + extra) / max(1, len(starts))
    per_rank = piece_bytes(os.path.join(res["sharded"][2], f"step_{args.steps}"))
    rows_out.append(f"| {lname} | {save_ms['file'] / 1e3:.2f} | {save_ms['sharded'] / 1e3:.2f} "
                    f"| {save_ms['sharded'] / save_ms['file']:.3f} | "
                    f"{' / '.join(f'{b / MiB:.0f}' for _, b in per_rank)} | {rose['file']:.0f} | "
                    f"{rose['sharded']:.0f} | {staging:.0f} |")
    stall_out.append(f"| {lname} | {base_ms:.0f} | {statistics.median(blocked[:max(1, len(starts))]):.0f} | "
                     f"{statistics.median(written):.0f} | {stall:.0f} | {save_ms['sharded']:.0f} | "
                     f"{stall / save_ms['sharded'] * 100:.1f} % |")
    if lname == "DDP":
        src = res
    else:
        for form in res:
            shutil.rmtree(res[form][2], ignore_errors=True)
print("Save (median of the run's saves; rank 0's resident memory rise during a save, MiB):\n")
print("| layout | single file, s | sharded, s | sharded / file | bytes written per rank 0/1/2/3, MiB | rank 0 rise, file | rank 0 rise, sharded | async staging, rank 0 |")
print("|---|---:|---:|---:|---|---|---|---|")
print("\n".join(rows_out))
print("\nAsync stall (ms): blocked = the step loop inside the save call; stall = blocked + the overlapping steps' extra time, per save:\n")
print("| layout | step, no saves | blocked | background write | stall | sharded sync save | stall / sync save |")
print("|---|---:|---:|---:|---:|---:|---:|")
print("\n".join(stall_out))

# Resume the DDP run's checkpoints into other layouts.
print("\nResume DDP's step-" + str(args.steps) + " checkpoint into another layout (rank 0):\n")
print("| into | form | load, s | read, MiB | resident memory rise, MiB |")
print("|---|---|---:|---:|---:|")
for lname in ("ZeRO-3", "TP 2 x PP 2"):
    tag = lname.replace(" ", "").lower()
    for form, d in (("single file", os.path.join(src["file"][2], f"step_{args.steps}.ckpt")),
                    ("sharded", os.path.join(src["sharded"][2], f"step_{args.steps}"))):
        out, _ = run(f"{tag}_load_{form.split()[0]}", LAYOUTS[lname] + ["--steps", str(args.steps + 1), "--resume", d])
        m = re.search(r"loaded in ([0-9.]+) s \(rank 0 read ([0-9.]+) MiB; its resident memory rose ([0-9.]+) MiB\)", out)
        print(f"| {lname} | {form} | {float(m.group(1)):.2f} | {float(m.group(2)):.0f} | {float(m.group(3)):.0f} |")
for form in src:
    shutil.rmtree(src[form][2], ignore_errors=True)
