#!/usr/bin/python3
"""meshrt-bench's loop, checks and JSON rows with PyTorch's torch.distributed (gloo).

The PyTorch side of bench/meshrt_bench_compare.sh. Run with Debian's interpreter (/usr/bin/python3,
torch 1.13) and GLOO_SOCKET_IFNAME=lo, once per rank with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set. Float sums of all_reduce, all_gather, reduce_scatter and broadcast, each size
out of place and in place, timed as meshrt-bench times them: one checked op on the bench's input
pattern (#wrong against the host's expected values), -w warmup ops, a barrier, then -n ops each
waited on; time = elapsed / n, averaged over ranks; nccl-tests' sizes, counts and bus factors.

What a torch 1.13 user writes where gloo lacks the op or the placement: all_reduce and broadcast
out of place copy into the output first; all_gather fills a list of views of one output tensor
(no allocation per call), in place from a copy of the input; reduce_scatter (absent from gloo in
1.13) is an all_reduce of the input followed by a copy of this rank's block.
"""
import argparse
import json
import os
import re
import time

import torch
import torch.distributed as dist

OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]


def size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def pattern(rank, count, offset=0):
    """meshrt-bench's input pattern (bench/meshrt_bench_check.cc, non-prod ops)."""
    k = torch.arange(offset, offset + count, dtype=torch.int64)
    return (1 + (3 * rank + k) % 4).to(torch.float32)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-b", type=size, default=32 << 20)
    p.add_argument("-e", type=size, default=32 << 20)
    p.add_argument("-f", type=int, default=2)
    p.add_argument("-w", type=int, default=1)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-r", type=int, default=0)
    p.add_argument("--coll", default="all_reduce")
    p.add_argument("--json", default="")
    a = p.parse_args()
    ops = OPS if a.coll == "all" else a.coll.split(",")
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    root = a.r

    def expected(op, c):
        if op == "all_reduce":
            return sum(pattern(r, c) for r in range(n))
        if op == "broadcast":
            return pattern(root, c)
        if op == "all_gather":
            return torch.cat([pattern(j, c) for j in range(n)])
        return sum(pattern(r, c, rank * c) for r in range(n))  # reduce_scatter

    def placement(op, c, in_place, buf):
        """(input, output, the call) of one op on views of the preallocated buffers."""
        send, recv, scratch = buf
        if op in ("all_reduce", "broadcast"):
            out = recv[:c]
            inp = out if in_place else send[:c]
            if op == "all_reduce":
                core = lambda: dist.all_reduce(out)
            else:
                core = lambda: dist.broadcast(out, root)
            if in_place:
                return inp, out, core
            return inp, out, lambda: (out.copy_(inp), core())
        if op == "all_gather":
            out = recv[: n * c]
            blocks = list(out.split(c))
            inp = blocks[rank] if in_place else send[:c]
            src = scratch[:c]
            if in_place:
                return inp, out, lambda: (src.copy_(inp), dist.all_gather(blocks, src))
            return inp, out, lambda: dist.all_gather(blocks, inp)
        # reduce_scatter
        if in_place:
            inp = recv[: n * c]
            return inp, inp[rank * c : (rank + 1) * c], lambda: dist.all_reduce(inp)
        inp, out, tmp = send[: n * c], recv[:c], scratch[: n * c]
        return inp, out, lambda: (
            tmp.copy_(inp), dist.all_reduce(tmp), out.copy_(tmp[rank * c : (rank + 1) * c]))

    words = a.e // 4 + 1
    buf = (torch.zeros(words), torch.zeros(words), torch.zeros(words))
    rows = []
    sizes = []
    s = a.b
    while s <= a.e:
        sizes.append(s)
        s *= a.f
    for op in ops:
        blocks = n if op in ("all_gather", "reduce_scatter") else 1
        factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(op, (n - 1) / n)
        for s in sizes:
            c = s // 4 // blocks
            if c == 0:
                continue
            nbytes = c * blocks * 4
            for in_place in (False, True):
                inp, out, call = placement(op, c, in_place, buf)
                out.fill_(-1)
                if op == "reduce_scatter":
                    inp.copy_(pattern(rank, n * c))
                else:
                    inp.copy_(pattern(rank, c))
                dist.barrier()
                call()
                wrong = int((out != expected(op, c)).sum())
                for _ in range(a.w):
                    call()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(a.n):
                    call()
                t_us = (time.perf_counter() - t0) / a.n * 1e6
                agg = torch.tensor([t_us, float(wrong)], dtype=torch.float64)
                dist.all_reduce(agg)
                t_us, wrong = agg[0].item() / n, int(agg[1].item())
                algbw = nbytes / t_us / 1e3
                rows.append({"op": op, "in_place": in_place, "bytes": nbytes, "count": c,
                             "type": "float", "redop": "sum" if op != "all_gather" and
                             op != "broadcast" else "none", "root": root if op == "broadcast"
                             else -1, "time_us": round(t_us, 3), "algbw_gbps": round(algbw, 4),
                             "busbw_gbps": round(algbw * factor, 4), "wrong": wrong})
                if rank == 0:
                    print(json.dumps(rows[-1]), flush=True)
    if rank == 0 and a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"tool": "torch_meshrt_bench", "impl": "torch", "backend": "gloo",
                       "torch": torch.__version__, "ranks": n, "world": n, "warmup": a.w,
                       "iters": a.n, "average": 1, "rows": rows}, f, indent=0)
        os.replace(a.json + ".tmp", a.json)
    dist.barrier()
    if any(r["wrong"] for r in rows):
        raise SystemExit("torch_meshrt_bench: wrong results")


if __name__ == "__main__":
    main()
