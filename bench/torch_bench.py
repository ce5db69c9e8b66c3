#!/usr/bin/python3
"""One rank of the PyTorch (gloo backend) counterpart of bench/collective_bench.

Run with Debian's interpreter (/usr/bin/python3, torch 1.13) and GLOO_SOCKET_IFNAME=lo, started
once per rank with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (bench/compare.sh does).
Same ops, sizes, iteration counts, timing and JSON schema as collective_bench:

* every rank times each iteration (time.perf_counter, blocking call issued -> returned), the
  per-iteration times are reduced with MAX across ranks (outside the timed region), the median
  over iterations is reported; a barrier precedes every timed loop;
* sizes as nccl-tests: all_gather's size is its output, reduce_scatter's its input.

Torch 1.13's gloo group has no reduce_scatter (nor reduce_scatter_tensor, nor
all_gather_into_tensor): a user falls back to all_reduce + keeping the own block, which is what the
"reduce_scatter" line measures; its "variant" field says so. all_gather uses the list API (the
only one gloo supports in 1.13), with output tensors allocated once outside the loop.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--first-round", type=int, default=0)
    p.add_argument("--lat-iters", type=int, default=1000)
    p.add_argument("--lat-warmup", type=int, default=100)
    p.add_argument("--big-iters", type=int, default=7)
    p.add_argument("--big-warmup", type=int, default=2)
    p.add_argument("--small-bytes", type=int, default=8)
    p.add_argument("--big-bytes", type=int, default=64 << 20)
    p.add_argument("--ops", default="all_reduce,all_gather,broadcast,reduce_scatter")
    return p.parse_args()


def main():
    a = parse()
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    ops = a.ops.split(",")
    big = a.big_bytes // 4
    if big % n:
        sys.exit("--big-bytes must split evenly over the ranks in floats")
    block = big // n
    fr = float(rank + 1)
    total = float(n * (n + 1) // 2)

    small = torch.zeros(max(1, a.small_bytes // 4), dtype=torch.float32)
    big_t = torch.zeros(big, dtype=torch.float32)
    ag_in = torch.zeros(block, dtype=torch.float32)
    ag_out = [torch.zeros(block, dtype=torch.float32) for _ in range(n)]
    rs_in = torch.zeros(big, dtype=torch.float32)
    rs_out = torch.zeros(block, dtype=torch.float32)

    def rs_reset():
        for j in range(n):
            rs_in[j * block:(j + 1) * block].fill_(float(rank + 1 + j))
        rs_out.zero_()

    def rs_run():
        dist.all_reduce(rs_in)
        rs_out.copy_(rs_in[rank * block:(rank + 1) * block])

    def expect(t, want, what):
        bad = (t != want).nonzero()
        if len(bad):
            i = int(bad[0])
            return f"{what}[{i}] = {float(t[i])} but expected {want}"
        return ""

    cases = []  # (op, bytes, reset, run, check, variant)
    if "all_reduce" in ops:
        for t in (small, big_t):
            cases.append(("all_reduce", t.numel() * 4, lambda t=t: t.fill_(fr),
                          lambda t=t: dist.all_reduce(t),
                          lambda t=t: expect(t, total, "all_reduce"), None))
    if "all_gather" in ops:
        def ag_reset():
            ag_in.fill_(fr)
            for o in ag_out:
                o.zero_()

        def ag_check():
            for j, o in enumerate(ag_out):
                e = expect(o, float(j + 1), f"all_gather output block {j}")
                if e:
                    return e
            return ""
        cases.append(("all_gather", big * 4, ag_reset, lambda: dist.all_gather(ag_out, ag_in),
                      ag_check, "list API (fresh flat output per call inside torch)"))
    if "broadcast" in ops:
        cases.append(("broadcast", big * 4, lambda: big_t.fill_(fr),
                      lambda: dist.broadcast(big_t, 0), lambda: expect(big_t, 1.0, "broadcast"),
                      None))
    if "reduce_scatter" in ops:
        unsupported = ""
        try:
            dist.reduce_scatter(rs_out, [rs_in[j * block:(j + 1) * block] for j in range(n)])
        except RuntimeError as e:
            unsupported = str(e).splitlines()[0]
        cases.append(("reduce_scatter", big * 4, rs_reset, rs_run,
                      lambda: expect(rs_out, total + n * rank, "reduce_scatter output"),
                      f"all_reduce+slice ({unsupported})" if unsupported else "all_reduce+slice"))

    checked = set()
    for r in range(a.first_round, a.first_round + a.rounds):
        for op, nbytes, reset, run, check, variant in cases:
            is_small = nbytes <= a.small_bytes
            warmup = a.lat_warmup if is_small else a.big_warmup
            iters = a.lat_iters if is_small else a.big_iters
            problem = ""
            key = (op, nbytes)
            if key not in checked:
                reset()
                dist.barrier()
                run()
                problem = check()
                checked.add(key)
            reset()
            dist.barrier()
            for _ in range(warmup):
                run()
            reset()
            if is_small:
                small.zero_()
            dist.barrier()
            times = [0.0] * iters
            clock = time.perf_counter
            for i in range(iters):
                t0 = clock()
                run()
                times[i] = clock() - t0
            own_total = sum(times)
            tt = torch.tensor(times + [own_total], dtype=torch.float64)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX)
            per_iter = tt[:-1].tolist()
            t = statistics.median(per_iter)
            factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
                      "reduce_scatter": (n - 1) / n}.get(op, 1.0)
            algbw = nbytes / t / 1e9
            if rank == 0:
                rec = {"round": r, "world": n, "impl": "torch", "op": op, "bytes": nbytes,
                       "iters": iters, "warmup": warmup, "position": 0,
                       "time_us": t * 1e6, "min_us": min(per_iter) * 1e6,
                       "max_us": max(per_iter) * 1e6, "mean_us": float(tt[-1]) / iters * 1e6,
                       "algbw_gbs": algbw, "busbw_gbs": algbw * factor,
                       "timing": "median over iterations of the max across ranks",
                       "check": problem or "ok", "torch": torch.__version__}
                if variant:
                    rec["variant"] = variant
                print(json.dumps(rec), flush=True)
            if problem:
                print(f"rank {rank}: torch {op} {nbytes} B: {problem}", file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
