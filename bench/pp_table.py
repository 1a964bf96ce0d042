"""Markdown tables for bench/pp_table.sh (run with /usr/bin/python3).

Reads the work folder the shell script filled (runs.tsv; per run <tag>.log,
<tag>.jsonl, <tag>.trace.json and, for part (b), <tag>.plan; per schedule
sched_p<P>_m<m>_<S>.sched from `braid schedule`) and prints:
  (a) the bubble per schedule (naive, GPipe, 1F1B, ZB-H1, interleaved): theory,
      `braid schedule`'s simulation with unit costs (F=1, B=2, b=W=1; /v per
      chunk), the trainer's measured `bubble` (median of steps 2..S), and a
      decomposition from the trace: the same schedule simulated with each
      stage's measured F/B/b/W times (per chunk), the idle share of the
      forward/backward phase, and the share of the step after it (tied
      embedding / DP sync, gradient norm, AdamW);
  (b) activation memory per rank against the schedule's activation slots and
      `braid plan`;
  (c) tokens/s of the 3D layouts of 4 ranks.
`--make-data SRC DST V` instead writes a copy of a token file with every id
taken modulo V (for the balanced run with a small vocabulary; the header keeps
the tokenizer's vocabulary size, which `braid train` checks).
"""
import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import token_file  # noqa: E402  (braid token files, read and written independently)

MIB = 1024.0 * 1024.0
SCHEDS = ["naive", "gpipe", "1f1b", "zb-h1", "interleaved"]
SNAME = {"naive": "naive", "gpipe": "GPipe", "1f1b": "1F1B", "zb-h1": "ZB-H1", "interleaved": "interleaved (v=2)"}
# Cells of `braid schedule`'s table and span names of --trace-out, per action:
# F forward, B full backward, b backward_input (trace "Bi"), W backward_weight.
TRACE_OP = {"F": "F", "B": "B", "Bi": "b", "W": "W"}


def sname(S, v):
    return "interleaved (v=%d)" % v if S == "interleaved" else SNAME[S]


def vstages(r):
    """Model chunks per rank of a run (--virtual-stages, 1 without)."""
    m = re.search(r"--virtual-stages (\d+)", r["flags"])
    return int(m.group(1)) if m else 1


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(x, d=1):
    return "—" if x is None or x != x else "%.*f %%" % (d, 100.0 * x)


def num(b):
    return "{:,}".format(int(round(b)))


# ---------------------------------------------------------------- data

def make_data(src, dst, vocab):
    hdr_vocab, _, ids = token_file.read(src)
    # The header keeps the tokenizer's vocabulary (braid train insists on GPT-2's 50257);
    # the ids themselves are below `vocab`, which is what the model's check needs.
    token_file.write(dst, [i % vocab for i in ids], hdr_vocab)


# ---------------------------------------------------------------- parsing

def parse_size(s):
    m = re.match(r"([\d.]+) (B|KiB|MiB|GiB)$", s)
    k = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": MIB * 1024}[m.group(2)]
    return float(m.group(1)) * k


def parse_ledger_line(line):
    return dict((k, parse_size(v)) for k, v in re.findall(r"(\w+)=([\d.]+ (?:B|KiB|MiB|GiB))", line))


def parse_log(path):
    peaks, err = {}, None
    if not os.path.exists(path):
        return peaks, "no log"
    with open(path) as f:
        for line in f:
            m = re.match(r"peak memory rank (\d+): (.*)$", line.strip())
            if m:
                peaks[int(m.group(1))] = (m.group(2).strip(), parse_ledger_line(m.group(2)))
            if "error" in line:
                err = line.strip()
    return peaks, err


def parse_metrics(path, steps):
    rows = []
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if "tokens_per_sec" in d:
                rows.append(d)
    if not rows:
        return None
    use = [r for r in rows if r["step"] >= 2] or rows
    return {
        "bubble": med([r["bubble"] for r in use if "bubble" in r]) if "bubble" in rows[0] else None,
        "bubbles": [r.get("bubble") for r in rows],
        "tok_s": med([r["tokens_per_sec"] for r in use]),
        "ms": med([r["ms"] for r in use]),
        "mfu": med([r["mfu"] for r in use]) if "mfu" in rows[0] else None,
        "sent": med([r["comm_bytes_sent"] for r in use]),
        "peak": max(r["peak_mem_bytes"] for r in rows),
        "losses": [r["loss"] for r in rows],
    }


def parse_header(path):
    """Model sizes and the matmul ceiling from `braid train`'s header lines; model FLOPs per token
    6N + 12·L·C·T with N the matmul weights, the head over the padded vocabulary (PaLM, app. B)."""
    if not os.path.exists(path):
        return None
    text = open(path).read()
    m = re.search(r"\(L=(\d+) H=(\d+) C=(\d+) V=(\d+)->(\d+).*?\| T=(\d+)\s+matmul ceiling per rank: \S+ \S+ ([\d.]+) GFLOP/s",
                  text)
    if not m:
        return None
    L, _, C, _, Vp, T = (int(m.group(i)) for i in range(1, 7))
    n = L * 12 * C * C + Vp * C
    return {"flops_per_token": 6 * n + 12 * L * C * T, "peak": float(m.group(7)) * 1e9}


def trace_skew(path):
    """Spread of the ranks' step-2 start times in trace time (ms). Every pipeline step
    ends with an all-reduce over the stages, so in real time the next step starts
    together on every rank; a spread here is a difference of the ranks' trace origins."""
    if not os.path.exists(path):
        return None
    st = [e["ts"] for e in json.load(open(path))["traceEvents"] if e.get("cat") == "step" and e["name"] == "step 2"]
    return (max(st) - min(st)) / 1000.0 if len(st) > 1 else None


def parse_plan(path):
    """`braid plan`: exact bytes per category and rank, and the ledger lines as train prints them."""
    if not os.path.exists(path):
        return None
    text = open(path).read()
    p = {"bytes": {}, "lines": {}}
    for c in ["activations", "total"]:
        m = re.search(r"^%s\s+(.*)$" % c, text, re.M)
        p["bytes"][c] = [int(x) for x in re.findall(r"(\d+) \(", m.group(1))]
    for r, line in re.findall(r"as `braid train` prints it, rank (\d+): (.*)$", text, re.M):
        p["lines"][int(r)] = line.strip()
    m = re.search(r"ranks (\d+) \((.*?)\) \| batch (\d+) = (\d+) x (\d+) x (\d+) accum", text)
    p["header"] = m.group(0) if m else ""
    return p


def parse_schedule(path):
    """`braid schedule`'s table: per stage the list of actions (op, micro, chunk), op in F B b W;
    cells "F3", "b3", "W3", with v > 1 "F3.1" (chunk 1); "." idle; an action spanning several
    columns repeats its cell. Also the makespan, the bubble, the peak alive micro-batches per
    stage (summed over chunks) and, with v > 1, per stage and chunk."""
    text = open(path).read()
    orders = []
    for line in text.splitlines():
        m = re.match(r"stage (\d+) \|(.*)$", line)
        if not m:
            continue
        seq = []
        for tok in m.group(2).split():
            if tok == ".":
                continue
            c = re.match(r"([FBbW])(\d+)(?:\.(\d+))?$", tok)
            if not c:
                raise ValueError("%s: unknown cell %r" % (path, tok))
            a = (c.group(1), int(c.group(2)), int(c.group(3) or 0))
            if a not in seq:  # a backward spans two columns
                seq.append(a)
        orders.append(seq)
    m = re.search(r"makespan ([\d.]+) \| bubble ([\d.]+)%", text)
    v = re.search(r"v=(\d+) chunks per stage", text)
    alive = re.search(r"peak micro-batches alive per stage[^:]*: ([\d ]+)$", text, re.M)
    chunk = re.search(r"peak per chunk \(stage: chunk 0, 1, \.\.\.\): (.*)$", text, re.M)
    per_chunk = None
    if chunk:
        per_chunk = [[int(x) for x in item.split(":")[1].split(",")] for item in chunk.group(1).split()]
    return {"orders": orders, "makespan": float(m.group(1)), "bubble": float(m.group(2)) / 100.0,
            "v": int(v.group(1)) if v else 1,
            "alive": [int(x) for x in alive.group(1).split()] if alive else None, "alive_chunk": per_chunk}


SPAN = re.compile(r"(F|B|Bi|W)(\d+)(?:\.c(\d+))?$")


def parse_trace(path, per_stage, steps):
    """Per stage: median durations (ms) over steps >= 2 per action kind (op, chunk), op in
    F B b W (trace spans "F<j>", "B<j>", "Bi<j>", "W<j>", with ".c<chunk>" when v > 1), and per
    step the time from the rank's step start to the end of its last forward/backward span,
    the step's duration and the compute inside it. `per_stage` maps pid -> stage (ranks of
    one stage are averaged: with TP/DP every rank of a stage runs the same program)."""
    if not os.path.exists(path):
        return None
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    by_pid = {}
    for e in ev:
        by_pid.setdefault(e["pid"], []).append(e)
    st = {}
    for pid, es in by_pid.items():
        s = per_stage(pid)
        steps_sp = sorted((e for e in es if e.get("cat") == "step"), key=lambda e: e["ts"])
        for sp in steps_sp:
            n = int(sp["name"].split()[1])
            if n < 2 and len(steps_sp) > 1:
                continue
            a, b = sp["ts"], sp["ts"] + sp["dur"]
            inside = [e for e in es if e.get("cat") != "step" and a - 1 <= e["ts"] <= b + 1]
            d = st.setdefault(s, {"cost": {}, "steps": {}})
            fb = []
            for e in inside:
                mm = SPAN.match(e["name"])
                if not mm:
                    continue
                fb.append(e)
                d["cost"].setdefault((TRACE_OP[mm.group(1)], int(mm.group(3) or 0)), []).append(e["dur"])
            last_b = max(e["ts"] + e["dur"] for e in fb) if fb else a
            d["steps"].setdefault(n, []).append({"wall": sp["dur"], "compute": sum(e["dur"] for e in fb),
                                                 "phase": last_b - a})
    out = {"cost": {}, "per_step": {}}
    for s, d in st.items():
        out["cost"][s] = {k: med(x) / 1000.0 for k, x in d["cost"].items()}
        for n, lst in d["steps"].items():
            out["per_step"].setdefault(n, {})[s] = {k: statistics.mean(x[k] for x in lst) / 1000.0
                                                    for k in ("wall", "compute", "phase")}
    return out


# ---------------------------------------------------------------- schedule simulation

def unit_costs(P, v):
    """`braid schedule`'s costs: per chunk F = 1/v, B = 2/v, b = W = 1/v."""
    c = {}
    for k in range(v):
        c.update({("F", k): 1.0 / v, ("B", k): 2.0 / v, ("b", k): 1.0 / v, ("W", k): 1.0 / v})
    return [dict(c) for _ in range(P)]


def simulate(orders, cost):
    """Run each stage's action list (op, micro, chunk) in order on virtual stages
    q = chunk·P + stage (Q = v·P of them): F(q, j) waits for F(q−1, j); B or b (q, j)
    for F(q, j) and for B/b(q+1, j) (the gradient from the next virtual stage); W(q, j)
    for b(q, j) on the same stage. cost[s][(op, chunk)] is the duration of an action of
    stage s. Returns (makespan, busy time summed over stages): the dependency model of
    parallel::check_schedule, with per-stage and per-chunk costs."""
    P = len(orders)
    v = 1 + max((c for o in orders for _, _, c in o), default=0)
    Q = v * P
    end, t, idx = {}, [0.0] * P, [0] * P
    total = sum(len(o) for o in orders)
    done, busy = 0, 0.0
    while done < total:
        moved = False
        for s in range(P):
            while idx[s] < len(orders[s]):
                op, j, c = orders[s][idx[s]]
                q = c * P + s
                if op == "F":
                    deps = [("F", q - 1, j)] if q > 0 else []
                elif op in ("B", "b"):
                    deps = [("F", q, j)] + ([("G", q + 1, j)] if q < Q - 1 else [])
                else:  # W
                    deps = [("G", q, j)]
                if any(d not in end for d in deps):
                    break
                start = max([t[s]] + [end[d] for d in deps])
                d = cost[s][(op, c)]
                t[s] = start + d
                busy += d
                end[("F" if op == "F" else "G" if op in ("B", "b") else "W", q, j)] = t[s]
                idx[s] += 1
                done += 1
                moved = True
        if not moved:
            raise RuntimeError("schedule deadlocks in the simulation")
    return max(t), busy


def theory(sched, P, m, v=1):
    if sched == "naive":
        return (P - 1) / P
    if sched == "zb-h1":
        return (P - 1) / (3 * m + P - 1)
    if sched == "interleaved":
        return (P - 1) / (v * m + P - 1)
    return (P - 1) / (m + P - 1)


def cost_text(S, c, v):
    """Per micro-batch on one stage (ms): F + B, ZB-H1 F + b + W, interleaved per chunk ("c0; c1")."""
    ops = ["F", "b", "W"] if S == "zb-h1" else ["F", "B"]
    return "; ".join(" + ".join("%.1f" % c.get((op, k), float("nan")) for op in ops) for k in range(v))


# ---------------------------------------------------------------- tables

def load_runs(out):
    runs = []
    with open(os.path.join(out, "runs.tsv")) as f:
        for line in f:
            c = line.rstrip("\n").split("\t")
            runs.append({"tag": c[0], "part": c[1], "ranks": int(c[2]), "tp": int(c[3]), "dp": int(c[4]),
                         "pp": int(c[5]), "sched": c[6], "m": int(c[7]), "vocab": int(c[8]), "rep": int(c[9]),
                         "rc": int(c[10]), "flags": c[11]})
    return runs


def table(head, rows):
    print("| " + " | ".join(head) + " |")
    print("| " + " | ".join("---" for _ in head) + " |")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    print()


def part_a(out, runs, steps, notes):
    sim_checked = []
    for vocab in sorted({r["vocab"] for r in runs if r["part"] == "a"}):
        if vocab == 0:
            print("#### (a) bubble, `small` as preset (V = 50257 → 50304): the last stage also runs the LM head\n")
        else:
            print("#### (a) bubble, `small` with `--vocab-size %d` (Brown ids mod %d): stages close to balanced\n"
                  % (vocab, vocab))
        rows = []
        for r in runs:
            if r["part"] != "a" or r["vocab"] != vocab:
                continue
            P, m, S, v = r["pp"], r["m"], r["sched"], vstages(r)
            sc = parse_schedule(os.path.join(out, "sched_p%d_m%d_%s.sched" % (P, m, S)))
            if sc["v"] != v:
                notes.append("%s: the schedule table has v=%d, the run v=%d" % (r["tag"], sc["v"], v))
            unit, _ = simulate(sc["orders"], unit_costs(P, v))
            same = abs(unit - sc["makespan"]) < 1e-4 * sc["makespan"]  # printed to 6 digits
            sim_checked.append(same)
            if not same:
                notes.append("%s: simulated makespan %g, `braid schedule` %g" % (r["tag"], unit, sc["makespan"]))
            met = parse_metrics(os.path.join(out, r["tag"] + ".jsonl"), steps)
            if r["rc"] != 0 or met is None:
                rows.append([sname(S, v), P, m, pct(theory(S, P, m, v)), pct(sc["bubble"]),
                             "failed (rc %d)" % r["rc"], "", "", "", "", ""])
                continue
            tr = parse_trace(os.path.join(out, r["tag"] + ".trace.json"), lambda pid: pid, steps)
            M, busy = simulate(sc["orders"], [tr["cost"][s] for s in range(P)])
            sim_meas = 1.0 - busy / (P * M)
            idle_fb, after, trace_bub = [], [], []
            for n, per in tr["per_step"].items():
                if len(per) != P:
                    continue
                phase = max(per[s]["phase"] for s in range(P))
                wall = statistics.mean(per[s]["wall"] for s in range(P))
                comp = statistics.mean(per[s]["compute"] for s in range(P))
                idle_fb.append(1.0 - comp / phase)
                after.append(1.0 - phase / wall)
                trace_bub.append(statistics.mean(1.0 - per[s]["compute"] / per[s]["wall"] for s in range(P)))
            stage_txt = " / ".join(cost_text(S, tr["cost"][s], v) for s in range(P))
            rows.append([sname(S, v), P, m, pct(theory(S, P, m, v)), pct(sc["bubble"]), "**%s**" % pct(met["bubble"]),
                         pct(sim_meas), pct(med(idle_fb)), pct(med(after)), "%.0f" % met["ms"], stage_txt])
            if abs(med(trace_bub) - met["bubble"]) > 0.05:
                notes.append("%s: the trace's idle fraction %.3f differs from the metric's bubble %.3f"
                             % (r["tag"], med(trace_bub), met["bubble"]))
        table(["schedule", "P", "m", "theory", "simulated (unit costs)", "measured bubble",
               "simulated, measured stage times", "idle in F/B phase", "step after F/B phase",
               "ms per step", "F + B per micro-batch by stage (ms; ZB-H1: F + b + W; interleaved: chunk 0; chunk 1)"], rows)
    if sim_checked:
        print("simulated (unit costs): `braid schedule --pp P --micro-batches m --schedule S "
              "[--virtual-stages v]` with F = 1, B = 2, b = W = 1 per stage (each divided by v per chunk); "
              "this script's own simulation of the printed tables (actions on virtual stages q = chunk·P + "
              "stage) gives the same makespan in %d of %d cases. "
              "theory: (P−1)/P for naive, (P−1)/(m+P−1) for GPipe and 1F1B, (P−1)/(3m+P−1) for ZB-H1, "
              "(P−1)/(v·m+P−1) for interleaved. "
              "measured bubble: the trainer's `bubble` metric (1 − time inside forward/backward / step wall "
              "time, mean over stages), median of steps 2..%d. From the trace (--trace-out), per stage and "
              "step: simulated, measured stage times = the same table simulated with each stage's median "
              "duration of every action kind (F, B, b, W, per chunk; their sums in the last column); idle "
              "in F/B phase = 1 − mean stage compute / time from step start to the last forward/backward "
              "span; step after F/B phase = the share of the step spent after it (tied-embedding "
              "all-reduce, DP sync, loss broadcast, gradient norm, AdamW). measured ≈ 1 − (1 − idle in F/B "
              "phase) × (1 − after).\n"
              % (sum(sim_checked), len(sim_checked), steps))


def part_b(out, runs, notes):
    print("#### (b) activation memory per rank (MiB; \"peak memory rank R\" lines of the m = 8 runs of (a), "
          "preset vocabulary)\n")
    rows = []
    for P in (2, 4):
        base = {}
        for S in SCHEDS:
            r = next((x for x in runs if x["part"] == "a" and x["vocab"] == 0 and x["pp"] == P and x["m"] == 8
                      and x["sched"] == S), None)
            if r is None:
                continue
            peaks, err = parse_log(os.path.join(out, r["tag"] + ".log"))
            plan = parse_plan(os.path.join(out, r["tag"] + ".plan"))
            m, v = r["m"], vstages(r)
            sc = parse_schedule(os.path.join(out, "sched_p%d_m%d_%s.sched" % (P, m, S)))
            for s in range(P):
                if s not in peaks:
                    rows.append([P, sname(S, v), s, "", "", "run failed: %s" % err, "", "", "", ""])
                    continue
                line, cats = peaks[s]
                # Slots: the peak micro-batches alive on the stage in `braid schedule`'s table
                # (forward to the backward, or to backward_weight when split); per chunk when v > 1,
                # whose slots differ in size (each chunk holds its own layers).
                if sc["alive_chunk"]:
                    slots_txt = " + ".join(str(x) for x in sc["alive_chunk"][s])
                    slots = None
                else:
                    slots = sc["alive"][s] if sc["alive"] else (1 if S == "naive" else (m if S == "gpipe" else min(P - s, m)))
                    slots_txt = str(slots)
                act_plan = plan["bytes"]["activations"][s] if plan else None
                if S == "naive":
                    base[s] = act_plan
                per_slot = act_plan / slots / MIB if act_plan is not None and slots else float("nan")
                scal = ""
                if s in base and base[s] is not None and act_plan is not None:
                    scal = "%.3f" % (act_plan / base[s])
                chk = "—"
                if plan and s in plan["lines"]:
                    chk = "= plan" if plan["lines"][s] == line else "MISMATCH"
                    if chk != "= plan":
                        notes.append("P=%d %s rank %d: train `%s` vs plan `%s`" % (P, S, s, line, plan["lines"][s]))
                rows.append([P, sname(S, v), s, slots_txt, "%.1f" % (cats["activations"] / MIB),
                             "%.2f" % per_slot if per_slot == per_slot else "—",
                             scal, "%.1f" % (cats["workspace"] / MIB), "%.1f" % (cats["total"] / MIB), chk])
    table(["P", "schedule", "rank = stage", "activation slots (peak alive in `braid schedule`; interleaved: "
           "chunk 0 + chunk 1)",
           "activations", "per slot (plan bytes / slots)", "activations / naive's", "workspace", "total",
           "check"], rows)
    print("m = 8 micro-batches of 1 × 128 tokens; activation slots: naive 1, GPipe m, 1F1B min(P−s, m), "
          "ZB-H1 and interleaved as `braid schedule` counts them (a slot lives from the forward to the "
          "backward, or to the backward_weight pass when the backward is split). check: the rank's ledger "
          "line equals `braid plan --pp P --schedule S [--virtual-stages v]` for that rank, every category. "
          "The last stage's slot (interleaved: its last chunk's) holds the logits (B·T·Vp·4 B = 24.6 MiB) "
          "besides its blocks.\n")


def part_c(out, runs, steps, notes):
    print("#### (c) tokens/s of the 3D layouts of 4 ranks (global batch 8 × 128 tokens, median of steps 2..%d; "
          "4 threads on 2 shared cores)\n" % steps)
    cr = [r for r in runs if r["part"] == "c"]
    names = []
    for r in cr:
        key = (r["tp"], r["dp"], r["pp"])
        if key not in names:
            names.append(key)
    reps = sorted({r["rep"] for r in cr})
    rows, losses = [], {}
    for key in names:
        tp, dp, pp = key
        row = ["%d × %d × %d" % key]
        first = None
        for rep in reps:
            r = next(x for x in cr if (x["tp"], x["dp"], x["pp"]) == key and x["rep"] == rep)
            met = parse_metrics(os.path.join(out, r["tag"] + ".jsonl"), steps)
            if first is None:
                first = (r, met)
            row += ["%.0f" % met["tok_s"] if met else "failed", "%.0f" % met["ms"] if met else ""]
            if met:
                losses.setdefault(key, []).append(met["losses"])
        r, met = first
        flags = r["flags"].replace("--model small --batch 8 ", "")
        peaks, _ = parse_log(os.path.join(out, r["tag"] + ".log"))
        big = max((c["total"] for _, c in peaks.values()), default=0)
        mb = re.search(r"--micro-batch (\d+)", r["flags"]).group(1)
        mfu_all = None
        hdr = parse_header(os.path.join(out, r["tag"] + ".log"))
        if met and hdr:
            mfu_all = hdr["flops_per_token"] * met["tok_s"] / (hdr["peak"] * r["ranks"])
        row = row[:1] + ["`%s`" % flags, "%s × %d" % (mb, r["m"])] + row[1:] + [
            pct(met["bubble"]) if met and met["bubble"] is not None else "—",
            "%.1f" % (big / MIB), pct(met["mfu"]) if met else "", pct(mfu_all) if mfu_all is not None else "",
            num(met["sent"]) if met else "", "%.4f" % met["losses"][-1] if met else ""]
        rows.append(row)
    head = ["TP × DP × PP", "flags", "micro-batch × per pipeline"]
    for rep in reps:
        head += ["tokens/s run %d" % rep, "ms run %d" % rep]
    head += ["bubble (run 1)", "peak memory, largest rank (MiB)", "MFU as printed", "MFU over 4 ranks (run 1)",
             "rank 0 comm_bytes_sent", "loss after %d steps" % steps]
    table(head, rows)
    allL = [l for ls in losses.values() for l in ls]
    if allL:
        ref = allL[0]
        rel = max(abs(a - b) / abs(b) for l in allL for a, b in zip(l, ref))
        print("Losses per step of all %d runs (global batch 8) agree within relative %.1e.\n" % (len(allL), rel))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-data", nargs=3, metavar=("SRC", "DST", "VOCAB"))
    ap.add_argument("--out")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--parts", default="a b c")
    a = ap.parse_args()
    if a.make_data:
        make_data(a.make_data[0], a.make_data[1], int(a.make_data[2]))
        return
    runs = load_runs(a.out)
    parts = a.parts.split()
    notes = []
    print("### Pipeline table: model small (L=4, H=4, C=256, T=%d), fp32, `--backend local`, OMP_NUM_THREADS=1, "
          "%d steps per run\n" % (a.seq, a.steps))
    if "a" in parts:
        part_a(a.out, runs, a.steps, notes)
    if "b" in parts or "a" in parts:
        if any(r["part"] == "a" and r["m"] == 8 and r["vocab"] == 0 for r in runs):
            part_b(a.out, runs, notes)
    if "c" in parts:
        part_c(a.out, runs, a.steps, notes)
    skews = [(trace_skew(os.path.join(a.out, r["tag"] + ".trace.json")), r["tag"]) for r in runs if r["pp"] > 1]
    skews = [x for x in skews if x[0] is not None]
    if skews and max(skews)[0] > 50:
        notes.append("--trace-out: the ranks' \"step 2\" spans start up to %.0f ms apart in trace time (%s), although "
                     "every pipeline step ends with an all-reduce over the stages (so they start together): each "
                     "rank's trace origin is its own start of Trainer::run, and the timelines of different ranks "
                     "are shifted against each other" % max(skews))
    mfu_bad, mfu_ok = [], []
    for r in runs:
        if r["part"] != "c" or r["rep"] != 1:
            continue
        met = parse_metrics(os.path.join(a.out, r["tag"] + ".jsonl"), a.steps)
        hdr = parse_header(os.path.join(a.out, r["tag"] + ".log"))
        if met and hdr and met["mfu"]:
            mine = hdr["flops_per_token"] * met["tok_s"] / (hdr["peak"] * r["ranks"])
            (mfu_bad if r["pp"] > 1 else mfu_ok).append("%d×%d×%d: %.2f" % (r["tp"], r["dp"], r["pp"], met["mfu"] / mine))
    if any(abs(float(x.split(": ")[1]) - 1) > 0.02 for x in mfu_bad):
        notes.append("MFU as printed over MFU over all ranks (6N + 12·L·C·T FLOPs per token, the run's matmul "
                     "peak × ranks): PP layouts " + ", ".join(mfu_bad) + "; others " + ", ".join(mfu_ok) +
                     " (the printed MFU divides by dp·tp ranks, not dp·tp·pp)")
    plan_hdr = None
    for r in runs:
        p = parse_plan(os.path.join(a.out, r["tag"] + ".plan"))
        if p and r["pp"] > 1 and "dp=%d x" % r["dp"] not in p["header"]:
            plan_hdr = "`braid plan --ranks %d --pp %d` prints `%s` (the DP degree is %d)" % (
                r["ranks"], r["pp"], p["header"], r["dp"])
            break
    if plan_hdr:
        notes.append(plan_hdr)
    for n in notes:
        print("note: " + n)
    if not notes:
        print("no notes")


if __name__ == "__main__":
    sys.exit(main())
