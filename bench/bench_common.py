"""Helpers shared by the benchmark table scripts (zero_table.py, tp_table.py):
formatting, the ledger lines `braid train` prints, and per-step metrics."""
import json
import re
import statistics

MIB = 1024.0 * 1024.0
ALIGN = 16  # floats: every tensor of the flat parameter buffer starts at a multiple


def align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def mib(b, d=1):
    return "%.*f" % (d, b / MIB)


def num(b):
    return "{:,}".format(int(round(b)))


def parse_size(s):
    """'12.5 MiB' -> bytes (as braid's format_bytes prints them)."""
    v, unit = s.split()
    return float(v) * {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": MIB * 1024, "TiB": MIB * MIB}[unit]


def parse_ledger_line(line):
    """'params=1.0 MiB grads=...' -> {category: bytes}."""
    return {k: parse_size(v) for k, v in re.findall(r"(\w+)=([\d.]+ \w+)", line)}


def peak_lines(path):
    """{rank: ledger line} from the 'peak memory rank R: ...' lines of a train log."""
    lines = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"peak memory rank (\d+): (.*)$", line.strip())
            if m:
                lines[int(m.group(1))] = m.group(2).strip()
    return lines


def parse_metrics(path):
    """Per-step rows of a --metrics-out file, summarised over steps >= 2 (step 1
    carries the warm-up): median bytes sent, tokens/s and ms; peak memory; losses."""
    rows = []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if "comm_bytes_sent" in d:
                rows.append(d)
    use = [r for r in rows if r["step"] >= 2] or rows
    return {
        "sent": statistics.median(r["comm_bytes_sent"] for r in use),
        "sent_all": [r["comm_bytes_sent"] for r in rows],
        "tok_s": statistics.median(r["tokens_per_sec"] for r in use),
        "ms": statistics.median(r["ms"] for r in use),
        "peak_mem": max(r["peak_mem_bytes"] for r in rows),
        "losses": [r["loss"] for r in rows],
        "steps_used": [r["step"] for r in use],
    }
