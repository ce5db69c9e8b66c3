#!/usr/bin/python3
"""Paired ratios and the busbw plot of a bench/meshrt_bench_compare.sh run.

    bench/meshrt_bench_stats.py OUT_DIR [--plot PNG]

Reads OUT_DIR/IMPL.wWORLD.rROUND.PASS.json (meshrt-bench's and torch_meshrt_bench.py's --json),
pairs the impls of each round, prints a markdown table of medians and ratios (min / median / max)
and ends with one line per comparison:
    ratio meshrt/raw-gloo all_reduce busbw @64MiB, 2 ranks: 0.98 (min 0.95, max 1.01, 7 rounds)
Busbw ratios above 1 and time ratios below 1 favour meshrt. Each op is taken in the placement
meshrt runs natively (all_reduce and broadcast in place, the others out of place). Exits 1 when
any result was wrong or a group left no JSON.
"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys

IN_PLACE = {"all_reduce": True, "broadcast": True, "all_gather": False, "reduce_scatter": False}
NAMES = {"gloo": "raw-gloo", "torch": "torch"}


def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return f"{b}B"


def spread(values):
    v = sorted(values)
    return f"{statistics.median(v):.2f} (min {v[0]:.2f}, max {v[-1]:.2f}, {len(v)} rounds)"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--plot", default="")
    a = p.parse_args()
    # (impl, world, round, op, bytes) -> row
    rows, wrong = {}, []
    for path in sorted(glob.glob(os.path.join(a.out, "*.json"))):
        m = re.fullmatch(r"(\w+)\.w(\d+)\.r(\d+)\.(\w+)\.json", os.path.basename(path))
        if not m:
            continue
        impl, world, rnd = m.group(1), int(m.group(2)), int(m.group(3))
        for r in json.load(open(path))["rows"]:
            if r["wrong"]:
                wrong.append((path, r))
            if r["in_place"] == IN_PLACE.get(r["op"]):
                rows[(impl, world, rnd, r["op"], r["bytes"])] = r
    if not rows:
        sys.exit("meshrt_bench_stats: no results in " + a.out)
    keys = sorted({(w, op, b) for (_, w, _, op, b) in rows}, key=lambda k: (k[0], list(IN_PLACE).index(k[1]), k[2]))
    rounds = sorted({k[2] for k in rows})

    def paired(world, op, b, other, field):
        out = []
        for rnd in rounds:
            x, y = rows.get(("meshrt", world, rnd, op, b)), rows.get((other, world, rnd, op, b))
            if x and y and x[field] > 0 and y[field] > 0:
                out.append(x[field] / y[field])
        return out

    def med(impl, world, op, b, field):
        v = [rows[k][field] for k in rows if k[0] == impl and k[1] == world and k[3] == op and k[4] == b]
        return statistics.median(v) if v else float("nan")

    print("| ranks | op | size | meshrt busbw | raw-gloo busbw | torch busbw | meshrt time | "
          "meshrt/raw-gloo busbw | meshrt/torch busbw |")
    print("|---|---|---|---|---|---|---|---|---|")
    for world, op, b in keys:
        cells = [f"{med(i, world, op, b, 'busbw_gbps'):.3f} GB/s" for i in ("meshrt", "gloo", "torch")]
        ratios = []
        for other in ("gloo", "torch"):
            r = sorted(paired(world, op, b, other, "busbw_gbps"))
            ratios.append(f"{r[0]:.2f} / **{statistics.median(r):.2f}** / {r[-1]:.2f}" if r else "")
        print(f"| {world} | {op} | {human(b)} | " + " | ".join(cells) +
              f" | {med('meshrt', world, op, b, 'time_us'):.1f} µs | " + " | ".join(ratios) + " |")
    print()
    for world in sorted({k[0] for k in keys}):
        sizes = sorted({k[2] for k in keys if k[0] == world})
        for op in IN_PLACE:
            for other in ("gloo", "torch"):
                lat = paired(world, op, sizes[0], other, "time_us")
                if lat:
                    print(f"ratio meshrt/{NAMES[other]} {op} time @{human(sizes[0])}, {world} ranks: "
                          f"{spread(lat)}")
                bw = paired(world, op, sizes[-1], other, "busbw_gbps")
                if bw:
                    print(f"ratio meshrt/{NAMES[other]} {op} busbw @{human(sizes[-1])}, {world} ranks: "
                          f"{spread(bw)}")
    for path, r in wrong:
        print(f"WRONG: {path}: {r}", file=sys.stderr)
    if a.plot:
        plot(rows, min(k[0] for k in keys), a.plot, a.out)
    return 1 if wrong else 0


def plot(rows, world, png, out):
    """busbw against size, one panel per op, medians over rounds (gnuplot, pngcairo)."""
    ops = list(IN_PLACE)
    # The bandwidth pass's sizes; the 8-byte latency point would squeeze the axis.
    sizes = sorted({k[4] for k in rows if k[1] == world and k[4] >= 1024})
    dat = os.path.join(out, f"busbw.w{world}.dat")
    with open(dat, "w") as f:
        for op in ops:
            f.write(f"# {op}\n")
            for b in sizes:
                vals = []
                for impl in ("meshrt", "gloo", "torch"):
                    v = [rows[k]["busbw_gbps"] for k in rows
                         if k[0] == impl and k[1] == world and k[3] == op and k[4] == b]
                    vals.append(f"{statistics.median(v):.5f}" if v else "NaN")
                f.write(f"{b} " + " ".join(vals) + "\n")
            f.write("\n\n")
    # meshrt's ranks share the host: its collectives go through shared memory unless
    # MESHRT_GLOO_SHM_SLOT_BYTES=0.
    transport = ("meshrt through shared memory, the others over TCP"
                 if os.environ.get("MESHRT_GLOO_SHM_SLOT_BYTES") != "0" else "all over TCP")
    script = [
        f"set terminal pngcairo size 1200,800 font 'sans,10'",
        f"set output '{png}'",
        "set termoption noenhanced",
        f"set multiplot layout 2,2 title 'busbw against size, {world} ranks on one host, {transport} "
        f"(medians of paired rounds; meshrt-bench, bench/meshrt_bench_compare.sh)'",
        "set logscale x 2", "set format x '%.0b%B'", "set xlabel 'size (bytes)'",
        "set ylabel 'busbw (GB/s)'", "set key top left", "set grid",
    ]
    for i, op in enumerate(ops):
        place = "in place" if IN_PLACE[op] else "out of place"
        script.append(f"set title '{op} ({place})'")
        script.append(
            f"plot '{dat}' index {i} using 1:2 with linespoints title 'meshrt', "
            f"'' index {i} using 1:3 with linespoints title 'raw libgloo', "
            f"'' index {i} using 1:4 with linespoints title 'PyTorch 1.13 gloo'")
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)
    print(f"plot: {png}")


if __name__ == "__main__":
    sys.exit(main())
