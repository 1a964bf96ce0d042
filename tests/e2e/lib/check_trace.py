"""Checks a --trace-out file: every rank present, each lane's spans nest (a
timeline Perfetto draws without breaking), and the spans a layout must show.

usage: check_trace.py TRACE RANKS [LANE:NAME_PREFIX ...]
Each LANE:NAME_PREFIX must match at least one span on every rank (LANE "main",
"comm dp", ...; a prefix ending in '@GROUP' also needs 'group GROUP' in its detail).
"""
import json
import sys


def lanes_of(events):
    names = {}
    for e in events:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    return names


def check_nesting(spans, where):
    # Sorted by start (longer first on ties), each span must end inside the open one.
    stack = []
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
            stack.pop()
        if stack:
            outer = stack[-1]
            assert e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 1.0, (
                f"{where}: '{e['name']}' [{e['ts']:.1f}, +{e['dur']:.1f}] overlaps "
                f"'{outer['name']}' [{outer['ts']:.1f}, +{outer['dur']:.1f}] without nesting")
        stack.append(e)


def main():
    path, ranks, wants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    events = json.load(open(path))["traceEvents"]
    lanes = lanes_of(events)
    spans = [e for e in events if e.get("ph") == "X"]
    assert {e["pid"] for e in spans} == set(range(ranks)), sorted({e["pid"] for e in spans})
    by_lane = {}
    for e in spans:
        assert e["dur"] >= 0 and e["ts"] >= 0, e
        by_lane.setdefault((e["pid"], lanes[(e["pid"], e["tid"])]), []).append(e)
    for (pid, lane), es in by_lane.items():
        check_nesting(es, f"rank {pid} lane '{lane}'")
    for want in wants:
        lane, _, prefix = want.partition(":")
        prefix, _, group = prefix.partition("@")
        for r in range(ranks):
            found = [e for e in by_lane.get((r, lane), []) if e["name"].startswith(prefix)
                     and (not group or f"group {group} " in e.get("args", {}).get("detail", ""))]
            assert found, f"rank {r}: no span '{prefix}'{' on group ' + group if group else ''} on lane '{lane}' " \
                          f"(lanes: {sorted(l for p, l in by_lane if p == r)})"
    print(f"{path}: {len(spans)} spans on {len(by_lane)} lanes nest; {len(wants)} kinds present on {ranks} ranks")


main()
