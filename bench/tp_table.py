"""Markdown tables for bench/tp_table.sh (run with /usr/bin/python3).

Reads the work folder the shell script filled (runs.tsv, <tag>.plan from
`braid plan`, and for training runs <tag>.log and <tag>.jsonl) and prints:
  (a) memory per rank by category from the run's "peak memory rank R" lines,
      checked against `braid plan` for every rank, with the parameter count per
      TP rank and the activation memory split by what TP and SP shard;
  (b) bytes sent per rank per step (rank 0's metrics, median over steps 2..S)
      against a prediction that replays the collectives GPT::forward /
      GPT::backward (src/braid/model/gpt.cpp) and the trainer issue, with the
      algorithm each collective dispatches to (src/braid/comm/algorithms);
  (c) tokens/s.
The parameter table mirrors model::build_param_table (tensors aligned to 16
floats) and the activation / workspace sizes mirror model::memory_plan.
"""
import argparse
import math
import os
import re
import statistics
import sys

from bench_common import align, mib, num, parse_metrics, peak_lines

F32 = 4
CATS = ["params", "master_params", "grads", "optimizer", "activations", "comm", "workspace"]
SHOW = ["params", "grads", "optimizer", "activations", "workspace"]
NAMES = {"tp1": "TP=1", "tp2": "TP=2", "tp2sp": "TP=2 + SP", "tp4": "TP=4", "tp4sp": "TP=4 + SP",
         "dp2tp2": "DP=2 × TP=2", "dp2tp2z1": "DP=2 × TP=2, ZeRO-1"}





# ---------------------------------------------------------------- parsing

def parse_plan(text):
    p = {}
    m = re.search(r"model (\S+) \(L=(\d+) H=(\d+) C=(\d+) V=(\d+)->(\d+)", text)
    p["model"] = m.group(1)
    p["L"], p["H"], p["C"], p["V"], p["Vp"] = (int(m.group(i)) for i in range(2, 7))
    m = re.search(r"bucket ([\d.]+) MiB", text)
    p["bucket_mb"] = float(m.group(1))
    ranks = [int(x) for x in re.findall(r"rank (\d+)", text.split("\n", 3)[2])]
    p["ranks"] = ranks
    p["bytes"] = {}  # category -> [bytes per rank]
    for c in CATS + ["total"]:
        m = re.search(r"^%s\s+(.*)$" % c, text, re.M)
        p["bytes"][c] = [int(x) for x in re.findall(r"(\d+) \(", m.group(1))]
    p["ledger_lines"] = dict((int(r), line.strip()) for r, line in
                             re.findall(r"as `braid train` prints it, rank (\d+): (.*)$", text, re.M))
    m = re.search(r"Psi = (\d+) elements.*?N = (\d+) sharding ranks\): (.*?) = (\d+) bytes", text)
    p["psi"], p["formula_N"], p["formula_text"], p["formula_bytes"] = (
        int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)))
    m = re.search(r"ranks (\d+) \(dp=(\d+).*?\| batch (\d+) = (\d+) x (\d+) x (\d+) accum", text)
    p["hdr_dp"], p["hdr_accum"] = int(m.group(2)), int(m.group(6))
    return p




# ---------------------------------------------------------------- model

class Model:
    """GPT-2 sizes and the TP parameter table (model::build_param_table)."""

    def __init__(self, plan1):
        self.L, self.H, self.C, self.V, self.Vp = plan1["L"], plan1["H"], plan1["C"], plan1["V"], plan1["Vp"]
        # block_size from Ψ at TP = 1 (the plan prints L, H, C, V, not the context).
        rest, _, _ = self.table(1, block_size=0)
        bs = (plan1["psi_tp1"] - rest) / self.C
        assert bs == int(bs) and bs > 0, "cannot derive block_size from Ψ=%d" % plan1["psi_tp1"]
        self.bs = int(bs)

    def tensors(self, block_size):
        C, L = self.C, self.L
        t = [("wte", self.Vp * C, 0), ("wpe", block_size * C, -1)]
        for _ in range(L):
            t += [("ln_1.w", C, -1), ("ln_1.b", C, -1), ("c_attn.w", 3 * C * C, 0), ("c_attn.b", 3 * C, 0),
                  ("attn.c_proj.w", C * C, 1), ("attn.c_proj.b", C, -1), ("ln_2.w", C, -1), ("ln_2.b", C, -1),
                  ("c_fc.w", 4 * C * C, 0), ("c_fc.b", 4 * C, 0), ("mlp.c_proj.w", 4 * C * C, 1),
                  ("mlp.c_proj.b", C, -1)]
        t += [("ln_f.w", C, -1), ("ln_f.b", C, -1)]
        return t

    def table(self, P, block_size=None):
        """(Ψ per TP rank incl. alignment, split elements per rank, replicated elements)."""
        bs = self.bs if block_size is None else block_size
        psi = split = repl = 0
        for _, n, dim in self.tensors(bs):
            local = n // P if dim >= 0 else n
            psi += align(local)
            if dim >= 0:
                split += local
            else:
                repl += local
        return psi, split, repl

    def acts(self, P, sp, B, T):
        """model::memory_plan activations (floats) split by what shards them, plus tokens (bytes)."""
        C, L, NH = self.C, self.L, self.H
        BT = B * T
        rows = BT // P if sp else BT
        parts = {
            "rows": L * (6 * rows * C + 4 * rows) + 2 * rows * C + 2 * rows,  # LN/residual/proj outputs
            "split": L * 15 * BT * C // P,                 # qkv, qkvr, atty, fch, fch_gelu
            "att": L * B * (NH // P) * T * T,              # attention probabilities
            "logits": BT * self.Vp // P,
            "loss": 2 * BT,                                # lse, losses
        }
        tokens = 2 * BT * 4 * 2  # GPT's tokens/targets + the trainer's
        return parts, sum(parts.values()) * F32 + tokens

    def workspace(self, P, sp, B, T, dropout=0.0):
        C, NH = self.C, self.H
        BT = B * T
        rows = BT // P if sp else BT
        Cl, NHl = C // P, NH // P
        att = max(B * T * Cl, B * NHl * T * T + 4 * B * T * Cl)
        f = rows * C + BT * C + BT * Cl * 8 + BT * self.Vp // P + att
        if P > 1:
            f += 3 * BT
        if sp:
            f += BT * C
        if dropout > 0:
            f += rows * C
        return f * F32


def zero1_shard(psi, n, bucket_mb):
    """GradBuckets::make_buckets (reduce_scatter): buckets of a multiple of N from the end; a rank owns ceil(len/N) of each."""
    per = max(int(bucket_mb * 1024 * 1024) // F32 // n, 1) * n
    hi, tot = psi, 0
    while hi > 0:
        lo = max(hi - per, 0)
        tot += (hi - lo + n - 1) // n
        hi = lo
    return tot


# ---------------------------------------------------------------- traffic

def ar_sent(n, count, esz=F32):
    """Bytes one rank sends in Communicator::all_reduce (comm/algorithms/selector.cpp's choice)."""
    b = count * esz
    if n == 1 or count == 0:
        return 0, ""
    pow2 = n & (n - 1) == 0
    if pow2 and b <= (4 << 20 if n == 2 else 128 << 10):
        return int(math.log2(n)) * b, "doubling"
    if pow2 and n > 2 and b <= (1 << 20) and count >= n:
        return 2 * (n - 1) * b // n, "halving-doubling"
    assert count % n == 0, "uneven ring segments not modelled"
    return 2 * (n - 1) * b // n, "ring"


def ag_sent(n, count_local, esz=F32):
    """All-gather (doubling, direct or ring): (n-1) blocks."""
    return (n - 1) * count_local * esz


def rs_sent(n, count_local, esz=F32):
    return (n - 1) * count_local * esz


def predict(m, P, dp, sp, zero, B, T, accum, bucket_mb):
    """Bytes rank 0 sends per step, by source, replaying gpt.cpp and trainer.cpp."""
    C, L, BT = m.C, m.L, B * T
    out = {}
    if P > 1:
        if not sp:
            # forward: embedding sum + 2 row-parallel outputs per block; backward: the
            # head's input gradient + 2 column-parallel input gradients per block.
            s, algo = ar_sent(P, BT * C)
            out["tp_act"] = (4 * L + 2) * s * accum
            out["tp_act_algo"] = algo
        else:
            rows = BT // P
            ag, rs = ag_sent(P, rows * C), rs_sent(P, rows * C)
            # forward: RS(embedding), per block AG ln1, RS attproj, AG ln2, RS fcproj; AG lnf (head)
            fwd = rs + L * (2 * ag + 2 * rs) + ag
            # backward: AG lnf (re-gather) + RS dlnf; per block AG dfcproj, AG ln2 (re-gather),
            # RS dln2, AG dattproj, AG ln1 (re-gather), RS dln1; AG denc (embedding)
            bwd = ag + rs + L * (4 * ag + 2 * rs) + ag
            out["tp_act"] = (fwd + bwd) * accum
            out["tp_regather"] = (2 * L + 1) * ag * accum  # part of tp_act: the LN re-gathers
            # replicated-parameter gradients are partial under SP: ln_1/ln_2 (4 C per block),
            # ln_f (2 C) and wpe (block_size x C) all-reduced, each tensor separately
            # (once per step with owned gradients: tp_grad_sync on the last micro-batch)
            out["tp_repl"] = (4 * L * ar_sent(P, C)[0] + 2 * ar_sent(P, C)[0] + ar_sent(P, m.bs * C)[0])
        # vocab-parallel cross-entropy: max (BT) then sum-exp + target logit (2 BT)
        out["tp_ce"] = (ar_sent(P, BT)[0] + ar_sent(P, 2 * BT)[0]) * accum
    psi = m.table(P)[0]
    if dp > 1:
        per = int(bucket_mb * 1024 * 1024) // F32
        if zero == 0:  # GradBuckets (all_reduce): buckets of `per` from the end, all-reduce each
            hi, tot = psi, 0
            while hi > 0:
                lo = max(hi - per, 0)
                tot += ar_sent(dp, hi - lo)[0]
                hi = lo
        else:  # GradBuckets (reduce_scatter): buckets a multiple of N, reduce-scatter + all-gather of ceil(len/N)
            per = max(per // dp, 1) * dp
            hi, tot = psi, 0
            while hi > 0:
                lo = max(hi - per, 0)
                c = (hi - lo + dp - 1) // dp
                tot += rs_sent(dp, c) + ag_sent(dp, c)
                hi = lo
        out["dp_grads"] = tot
        out["scalars"] = ar_sent(dp, 1)[0]  # the loss average over DP
    world = P * dp
    # global norm: one double (2 f32) per rank all-gathered over the world
    out["scalars"] = out.get("scalars", 0) + (ag_sent(world, 2) if world > 1 else 0)
    out["total"] = sum(v for k, v in out.items() if k in ("tp_act", "tp_repl", "tp_ce", "dp_grads", "scalars"))
    return out


# ---------------------------------------------------------------- tables

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--micro", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    a = ap.parse_args()
    B, T = a.micro, a.seq

    runs = []
    with open(os.path.join(a.out, "runs.tsv")) as f:
        for line in f:
            tag, n, dp, flags, batch, trained = line.rstrip("\n").split("\t")
            fl = flags.split()
            r = {"tag": tag, "N": int(n), "dp": int(dp), "flags": flags, "batch": int(batch),
                 "trained": trained == "1", "P": int(fl[fl.index("--tp") + 1]),
                 "sp": "--sequence-parallel" in fl,
                 "zero": int(fl[fl.index("--zero") + 1]) if "--zero" in fl else 0}
            with open(os.path.join(a.out, tag + ".plan")) as pf:
                r["plan"] = parse_plan(pf.read())
            if r["trained"]:
                r["ledger"] = peak_lines(os.path.join(a.out, tag + ".log"))
                r["metrics"] = parse_metrics(os.path.join(a.out, tag + ".jsonl"))
            runs.append(r)
    problems = []
    notes = []
    base = next((r for r in runs if r["P"] == 1 and r["dp"] == 1), runs[0])
    assert base["P"] == 1, "the TP=1 layout is needed for the model's Ψ"
    p1 = dict(base["plan"], psi_tp1=base["plan"]["psi"])
    m = Model(p1)
    trained_any = any(r["trained"] for r in runs)

    psi1 = m.table(1)[0]
    print("### TP table: model %s (L=%d, H=%d, C=%d, V=%d→%d, block %d), Ψ = %s elements at TP=1" %
          (a.model, m.L, m.H, m.C, m.V, m.Vp, m.bs, num(psi1)))
    print("micro-batch %d × T=%d per rank (one micro-batch per step), fp32, `--backend local`, "
          "OMP_NUM_THREADS=1%s" % (B, T, ", %d steps per run" % a.steps if a.steps else "; `braid plan` only"))
    print()

    # ---- (a) memory
    print("#### (a) memory per rank by category (MiB; rank 0%s)" %
          (", from the run's \"peak memory rank R\" lines" if trained_any else ", `braid plan`"))
    print()
    hdr = ["layout", "ranks", "Ψ per rank", "params", "grads", "optimizer", "activations", "workspace",
           "total", "total vs TP=1", "check"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + " --- |" * len(hdr))
    tot1 = base["plan"]["bytes"]["total"][0]
    for r in runs:
        p = r["plan"]
        P, sp, dp = r["P"], r["sp"], r["dp"]
        psi, split, repl = m.table(P)
        if psi != p["psi"]:
            problems.append("%s: Ψ per rank %d from the parameter table != braid plan's %d" % (r["tag"], psi, p["psi"]))
        # plan categories against our formulas
        bad = []
        exp_states = {"params": F32 * psi, "grads": F32 * psi,
                      "optimizer": 2 * F32 * (psi if r["zero"] == 0 else zero1_shard(psi, dp, p["bucket_mb"]))}
        _, exp_act = m.acts(P, sp, B, T)
        exp = dict(exp_states, activations=exp_act, workspace=m.workspace(P, sp, B, T), master_params=0,
                   comm=0 if r["zero"] == 0 or zero1_shard(psi, dp, p["bucket_mb"]) * dp == psi else None)
        for c, v in exp.items():
            for rank, got in enumerate(p["bytes"][c]):
                if v is not None and got != v:
                    bad.append("%s rank %d: plan %d vs formula %d" % (c, rank, got, v))
        if bad:
            problems.append("%s: %s" % (r["tag"], "; ".join(bad)))
        # header / formula lines of `braid plan` under TP
        if p["hdr_dp"] != dp or p["hdr_accum"] != r["batch"] // (dp * B):
            notes.append("%s: `braid plan` header says dp=%d and %d accum (expected dp=%d, %d accum)" %
                         (r["tag"], p["hdr_dp"], p["hdr_accum"], dp, r["batch"] // (dp * B)))
        if r["zero"] == 1 and p["formula_N"] != dp:
            notes.append("%s: `braid plan`'s ZeRO formula line uses N = %d sharding ranks (the world) "
                         "instead of the DP degree %d: %s = %d B, %+d B from the plan's own categories" %
                         (r["tag"], p["formula_N"], dp, p["formula_text"], p["formula_bytes"],
                          sum(p["bytes"][c][0] for c in CATS[:4]) - p["formula_bytes"]))
        check = []
        if r["trained"]:
            led = r["ledger"]
            if sorted(led) != list(range(r["N"])):
                check.append("ranks %s in log" % sorted(led))
            for rank, line in sorted(led.items()):
                if line != p["ledger_lines"].get(rank):
                    check.append("rank %d: log `%s` vs plan `%s`" % (rank, line, p["ledger_lines"].get(rank)))
            if r["metrics"]["peak_mem"] != p["bytes"]["total"][0]:
                check.append("peak_mem_bytes %d vs plan %d" % (r["metrics"]["peak_mem"], p["bytes"]["total"][0]))
            if check:
                problems.append("%s: ledger vs plan: %s" % (r["tag"], "; ".join(check)))
            # The log prints 0.1 MiB (0.1 GiB above 1 GiB); it equals the plan at that precision, so
            # the cells show the plan's exact bytes and the total the run's exact peak_mem_bytes.
            cells = [mib(p["bytes"][c][0]) for c in SHOW] + [mib(r["metrics"]["peak_mem"])]
            ck = "MISMATCH" if check else "= plan (%d rank%s)" % (r["N"], "s" if r["N"] > 1 else "")
        else:
            cells = [mib(p["bytes"][c][0]) for c in SHOW] + [mib(p["bytes"]["total"][0])]
            ck = "plan only"
        ratio = "%.3f" % (p["bytes"]["total"][0] / tot1)
        print("| %s | %d | %s | %s | %s | %s |" % (
            NAMES.get(r["tag"], r["tag"]), r["N"], num(psi), " | ".join(cells), ratio, ck))
    print()
    print("Ψ per rank = this rank's flat parameter buffer (elements, incl. 16-float alignment gaps); "
          "params/grads 4Ψ, optimizer 8Ψ (AdamW m, v; ZeRO-1: 8Ψ/DP); master and comm are 0 in every row. "
          "check: every category of every rank's \"peak memory rank R\" line (printed to 0.1 MiB, the total "
          "to 0.1 GiB above 1 GiB) equals `braid plan`'s line for that rank, and rank 0's `peak_mem_bytes` "
          "(the total column) equals the plan's total to the byte; the categories are the plan's exact "
          "bytes, which also equal the formulas below to the byte.")
    print()

    # parameters split vs replicated
    print("#### parameters per TP rank: split over TP vs replicated")
    print()
    print("| TP | split elements per rank | replicated elements | Ψ per rank | Ψ·TP / Ψ(TP=1) |")
    print("| --- | --- | --- | --- | --- |")
    for P in sorted({r["P"] for r in runs}):
        psi, split, repl = m.table(P)
        print("| %d | %s | %s | %s | %.4f |" % (P, num(split), num(repl), num(psi), psi * P / psi1))
    print()
    _, s1, r1 = m.table(1)
    print("split: wte (vocab rows), c_attn and c_fc weights and biases (output rows), attn/mlp c_proj "
          "weights (input columns) = %s elements at TP=1; replicated on every TP rank: wpe (%d×%d), "
          "ln_1, ln_2, ln_f and the c_proj biases = %s elements (%.2f %% of Ψ)." %
          (num(s1), m.bs, m.C, num(r1), 100.0 * r1 / psi1))
    print()

    # activations breakdown
    print("#### activations per rank by what shards them (MiB, `model::memory_plan`)")
    print()
    print("| layout | token-row tensors | head/column-split tensors | attention probabilities | logits | "
          "loss + tokens | activations |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    seen = set()
    for r in runs:
        key = (r["P"], r["sp"])
        if key in seen:
            continue
        seen.add(key)
        parts, total = m.acts(r["P"], r["sp"], B, T)
        other = parts["loss"] * F32 + 2 * B * T * 4 * 2
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            NAMES.get(r["tag"], r["tag"]).split(",")[0].replace("DP=2 × ", ""),
            mib(parts["rows"] * F32, 2), mib(parts["split"] * F32, 2), mib(parts["att"] * F32, 2),
            mib(parts["logits"] * F32, 2), mib(other, 3), mib(total, 2)))
    print()

    # ---- (b) traffic
    if trained_any:
        print("#### (b) bytes sent per rank per step (rank 0's `comm_bytes_sent`, median of steps 2..%d)" % a.steps)
        print()
        hdr = ["layout", "TP activations", "= × U", "of which LN re-gathers", "SP: replicated grads",
               "CE stats", "DP gradients", "scalars", "predicted", "measured", "measured − predicted"]
        print("| " + " | ".join(hdr) + " |")
        print("|" + " --- |" * len(hdr))
        u = B * T * m.C * F32
        for r in runs:
            if not r["trained"]:
                continue
            accum = r["batch"] // (r["dp"] * B)
            pr = predict(m, r["P"], r["dp"], r["sp"], r["zero"], B, T, accum, r["plan"]["bucket_mb"])
            sent = r["metrics"]["sent"]
            if len(set(r["metrics"]["sent_all"])) > 1:
                problems.append("%s: bytes sent differ between steps: %s" % (r["tag"], r["metrics"]["sent_all"]))
            if sent != pr["total"]:
                problems.append("%s: sent %d vs predicted %d" % (r["tag"], sent, pr["total"]))
            g = lambda k: num(pr[k]) if k in pr else "—"
            P, L = r["P"], m.L
            if P == 1:
                units = "—"
            elif r["sp"]:
                units = "(10L+5)(P−1)/P = %g" % ((10 * L + 5) * (P - 1) / P)
            else:
                units = "(4L+2)·2(P−1)/P = %g" % ((4 * L + 2) * 2 * (P - 1) / P)
            if "tp_act" in pr:
                assert pr["tp_act"] == round(float(units.split("= ")[1]) * u * accum), units
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %+d |" % (
                NAMES.get(r["tag"], r["tag"]), g("tp_act"), units, g("tp_regather"), g("tp_repl"), g("tp_ce"),
                g("dp_grads"), g("scalars"), num(pr["total"]), num(sent), sent - pr["total"]))
        print()
        print("Per step with one micro-batch, U = B·T·C·4 B = %s B (one activation tensor of the "
              "residual stream):" % num(u))
        print()
        print("- no SP: (4L+2) all-reduces of U (forward: embedding + 2 per block; backward: the head's "
              "input gradient + 2 per block) = (4L+2)·2(TP−1)/TP·U = %d·2(TP−1)/TP·U;" % (4 * m.L + 2))
        print("- SP: each of those becomes a reduce-scatter + all-gather pair ((TP−1)/TP·U each: same "
              "volume), plus 2L+1 all-gathers that re-gather the sharded LayerNorm outputs (ln_1, ln_2 per "
              "block, ln_f) for the weight gradients in backward: (10L+5)·(TP−1)/TP·U = %d·(TP−1)/TP·U, "
              "%.3f× the no-SP volume; plus all-reduces of the replicated parameters' partial gradients: "
              "ln_1/ln_2 (4 tensors of C per block), ln_f (2 of C) and the whole wpe (block_size × C = "
              "%s B), each tensor separately;" % (10 * m.L + 5, (10 * m.L + 5) / (8 * m.L + 4),
                                                  num(m.bs * m.C * F32)))
        print("- vocab-parallel cross-entropy: all-reduce of the row maxima (B·T floats) and of the "
              "sum-exp + target logit (2·B·T floats);")
        print("- DP > 1: the gradient all-reduce (DDP, 4 MiB buckets) or reduce-scatter + all-gather "
              "(ZeRO-1) of this TP rank's Ψ over the DP group, 2(DP−1)/DP·4Ψ, and the loss average;")
        print("- scalars: the global gradient norm, one double per rank all-gathered over the world "
              "((W−1)·8 B).")
        print()
        print("All-reduces of at most 4 MiB with 2 ranks, and of at most 128 KiB with 4 ranks, use "
              "recursive doubling, which sends log2(N) × the buffer (2× at TP=4 instead of the ring's "
              "1.5×: the cross-entropy statistics, the LayerNorm gradients, the loss); 128 KiB–1 MiB at 4 ranks "
              "halving-doubling (the ring's volume). All-gathers send (N−1) blocks whatever the algorithm.")
        print()

        # ---- (c) throughput
        print("#### (c) tokens/s (all ranks together; median of steps 2..%d; 2 shared cores, ranks as "
              "threads with OMP_NUM_THREADS=1: noisy)" % a.steps)
        print()
        print("| layout | ranks | global batch | ms per step | tokens/s | loss after %d steps |" % a.steps)
        print("| --- | --- | --- | --- | --- | --- |")
        for r in runs:
            if not r["trained"]:
                print("| %s | %d | %d | — | — | — |" % (NAMES.get(r["tag"], r["tag"]), r["N"], r["batch"]))
                continue
            mt = r["metrics"]
            print("| %s | %d | %d | %.0f | %.0f | %.4f |" % (
                NAMES.get(r["tag"], r["tag"]), r["N"], r["batch"], mt["ms"], mt["tok_s"], mt["losses"][-1]))
        print()
        # parity: TP layouts of the same global batch give the same losses
        by_batch = {}
        for r in runs:
            if r["trained"]:
                by_batch.setdefault(r["batch"], []).append(r)
        for batch, rs in sorted(by_batch.items()):
            l0 = rs[0]["metrics"]["losses"]
            worst = max(max(abs(x - y) / abs(y) for x, y in zip(q["metrics"]["losses"], l0)) for q in rs)
            print("Losses per step of the %d layouts with global batch %d agree within relative %.1e." %
                  (len(rs), batch, worst))
            if worst > 1e-5:
                problems.append("global batch %d: losses differ by relative %.2e across layouts" % (batch, worst))
        print()

    for n in notes:
        print("note: " + n)
    if notes:
        print()
    if problems:
        print("PROBLEMS:")
        for p in problems:
            print("- " + p)
    else:
        print("no mismatches (plan = formulas%s)" %
              (", ledger = plan on every rank, traffic = prediction to the byte" if trained_any else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
