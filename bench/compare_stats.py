#!/usr/bin/python3
"""Markdown table from the JSON lines of collective_bench and torch_bench.py (bench/compare.sh).

    compare_stats.py results.jsonl

Per world size and (op, size): the median over rounds of each implementation's per-round figure
(latency in us for sizes <= 64 B, busbw in GB/s otherwise), and the paired time ratios
meshrt/raw-Gloo and meshrt/torch, each ratio formed within one round (min / median / max over
rounds), and for latencies the paired difference meshrt - raw Gloo in us. A ratio below 1 means
meshrt took less time. Implementations other than meshrt, gloo,
gloo_hd and torch (collective_bench --handoff-experiment) get a second table, paired with raw
Gloo and meshrt.
"""
import collections
import json
import os
import statistics
import sys


def size_name(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}"
    return f"{b} B"


def fmt_ratio(rs):
    if not rs:
        return "n/a"
    return f"{min(rs):.2f} / **{statistics.median(rs):.2f}** / {max(rs):.2f}"


def fmt_diff(ds):
    if not ds:
        return "n/a"
    return f"{min(ds):+.1f} / **{statistics.median(ds):+.1f}** / {max(ds):+.1f} us"


def main(path):
    recs = [json.loads(line) for line in open(path) if line.startswith("{")]
    bad = [r for r in recs if r.get("check") != "ok"]
    # (world, op, bytes) -> round -> impl -> record
    by = collections.defaultdict(lambda: collections.defaultdict(dict))
    for r in recs:
        by[(r["world"], r["op"], r["bytes"])][r["round"]][r["impl"]] = r
    variants = {}
    for r in recs:
        if r["impl"] == "torch" and "variant" in r:
            variants[r["op"]] = r["variant"]

    rows_for = collections.defaultdict(list)
    for (world, op, nbytes), rounds in sorted(by.items()):
        latency = nbytes <= 64
        def fig(rec):
            return rec["time_us"] if latency else rec["busbw_gbs"]
        baselines = [("gloo", "torch")]
        if op == "reduce_scatter":
            baselines.append(("gloo_hd", None))
        for gl, tl in baselines:
            def med(impl):
                xs = [fig(rr[impl]) for rr in rounds.values() if impl in rr]
                return (statistics.median(xs), len(xs)) if xs else (None, 0)
            def ratios(other):
                return [rr["meshrt"]["time_us"] / rr[other]["time_us"]
                        for rr in rounds.values() if "meshrt" in rr and other in rr]
            def diffs(other):
                return [rr["meshrt"]["time_us"] - rr[other]["time_us"]
                        for rr in rounds.values() if "meshrt" in rr and other in rr]
            m, nm = med("meshrt")
            g, ng = med(gl)
            t, nt = med(tl) if tl else (None, 0)
            unit = "us" if latency else "GB/s"
            def cell(v):
                if v is None:
                    return "n/a"
                return f"{v:.1f} {unit}" if latency else f"{v:.3f} {unit}"
            label = op
            if op == "reduce_scatter":
                label += (" (gloo: all_reduce+slice; torch: all_reduce+slice, no reduce_scatter in"
                          " 1.13 gloo)" if gl == "gloo" else " (gloo: ReduceScatterHalvingDoubling)")
            elif op == "all_gather" and "all_gather" in variants:
                label += " (torch: list API)"
            rows_for[world].append(
                f"| {label} | {size_name(nbytes)} | {'latency' if latency else 'busbw'} | "
                f"{cell(m)} | {cell(g)} | {cell(t) if tl else 'n/a'} | "
                f"{fmt_ratio(ratios(gl))} | {fmt_diff(diffs(gl)) if latency else '-'} | "
                f"{fmt_ratio(ratios(tl)) if tl else 'n/a'} | {len(ratios(gl))} |")
    for world in sorted(rows_for):
        # meshrt's ranks share this host: unless MESHRT_GLOO_SHM_SLOT_BYTES=0 was set, its
        # collectives went through shared memory.
        shm = os.environ.get("MESHRT_GLOO_SHM_SLOT_BYTES") != "0"
        transport = ("meshrt: shared memory; raw gloo and torch: TCP over loopback" if shm else
                     "every impl: Gloo TCP over loopback (MESHRT_GLOO_SHM_SLOT_BYTES=0)")
        print(f"\n### {world} ranks (127.0.0.1; {transport})\n")
        print("| op | size | figure | meshrt | raw gloo | torch | time ratio meshrt/gloo "
              "(min / **med** / max) | extra time meshrt - gloo (min / **med** / max) | "
              "time ratio meshrt/torch (min / **med** / max) | rounds |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for row in rows_for[world]:
            print(row)
    known = {"meshrt", "gloo", "gloo_hd", "torch"}
    extra = []
    for (world, op, nbytes), rounds in sorted(by.items()):
        impls = sorted({i for rr in rounds.values() for i in rr} - known)
        for impl in impls + (["meshrt"] if impls else []):
            xs = [rr[impl]["time_us"] for rr in rounds.values() if impl in rr]
            vs_g = [rr[impl]["time_us"] / rr["gloo"]["time_us"] for rr in rounds.values()
                    if impl in rr and "gloo" in rr]
            vs_m = [rr[impl]["time_us"] / rr["meshrt"]["time_us"] for rr in rounds.values()
                    if impl in rr and "meshrt" in rr]
            extra.append(f"| {world} | {impl} | {op} | {size_name(nbytes)} | "
                         f"{statistics.median(xs):.1f} us | {fmt_ratio(vs_g)} | "
                         f"{fmt_ratio(vs_m) if impl != 'meshrt' else '1'} | {len(vs_g)} |")
    if extra:
        print("\n### Other implementations (time, paired with raw gloo and meshrt in the same round)\n")
        print("| ranks | impl | op | size | median time | time ratio impl/gloo (min / **med** / max)"
              " | time ratio impl/meshrt (min / **med** / max) | rounds |")
        print("|---|---|---|---|---|---|---|---|")
        for row in extra:
            print(row)
    print("\nFigures: median over rounds of each round's value; a round's value is the median over"
          " iterations of the per-iteration time, max across ranks. busbw = bytes/time x"
          " (all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast 1), GB = 1e9 B."
          " Ratios are meshrt's time over the other's time in the same round: < 1 = meshrt faster.")
    if bad:
        print(f"\n**{len(bad)} records failed their correctness check:**")
        for r in bad:
            print(f"- round {r['round']} world {r['world']} {r['impl']} {r['op']}: {r['check']}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
