#!/usr/bin/env python3
"""PyTorch's ProcessGroupNCCL on the figure bench/nccl_bench measures for meshrt: the host time of
`dist.all_reduce(t)` on an 8-byte CUDA tensor (2 float32), world size 1 in this process, called
from a non-default (non-blocking) current stream as nccl_bench's caller stream is. Ops are issued
back to back in chunks of 100, the device synchronised between chunks outside the timed region;
sum and avg batches interleave over 7 rounds, order rotated each round, and the figure is the
median round. At world size 1 NCCL runs an in-place sum as a no-op (the pure host path) and an avg
as its one-rank kernel. The Python loop's own cost (~0.1 us per op) is in the figures: it is what a
trainer calling from Python pays.

    python3 bench/torch_nccl_bench.py [iterations]   (default 20000 ops per series)

Prints, on stdout:
    torch_nccl_bench device <n> "<name>" sm_<major><minor>
    torch_nccl_bench versions torch <v> cuda <v> nccl <a.b.c>
    torch_nccl_bench settings <TORCH_NCCL_* and TORCH_FR_* variables as set, or unset> ...
    torch_nccl_bench cold_ns <c> (first 200 ops after init, sum)
    torch_nccl_bench all_reduce_8B_ns <x> (min .. max .., 7 rounds x N ops; sum, in place)
    torch_nccl_bench all_reduce_avg_8B_ns <x> (...)
    torch_nccl_bench results ok          (else WRONG, exit 1)
Without CUDA (torch missing, or torch.cuda.is_available() false): "no CUDA device: <reason>" on
stderr, exit 77. A hang: Python's tracebacks on stderr and exit 1 after 60 s.
"""
import faulthandler
import os
import statistics
import sys
import time
from datetime import timedelta

ROUNDS = 7
CHUNK = 100  # Far below CUDA's pending-launch limit (~1000): no timed call blocks on the queue.
COLD_OPS = 200
WARMUP_OPS = 1000
DEADLINE_S = 60
SETTINGS = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
            "TORCH_NCCL_ENABLE_TIMING", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE",
            "TORCH_NCCL_DESYNC_DEBUG")


def skip(reason):
    print(f"no CUDA device: {reason}", file=sys.stderr)
    sys.exit(77)


def ns_per_op(torch, ops, launch):
    """Host ns per op of `ops` calls of `launch`, synchronised (untimed) after every chunk."""
    total = 0
    done = 0
    while done < ops:
        n = min(CHUNK, ops - done)
        t0 = time.perf_counter_ns()
        for _ in range(n):
            launch()
        total += time.perf_counter_ns() - t0
        torch.cuda.synchronize()
        done += n
    return total / ops


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    if iterations < ROUNDS:
        print(f"usage: torch_nccl_bench.py [iterations, >= {ROUNDS}]", file=sys.stderr)
        return 2
    # The watchdog thread of faulthandler needs no GIL: it ends a wedged CUDA call too.
    faulthandler.dump_traceback_later(DEADLINE_S, exit=True)
    try:
        import torch
        import torch.cuda.nccl
        import torch.distributed as dist
    except ImportError as e:
        skip(f"torch is not importable ({e})")
    if not torch.cuda.is_available():
        skip(f"torch.cuda.is_available() is false (torch {torch.__version__}, "
             f"built for CUDA {torch.version.cuda})")
    if not dist.is_available() or not dist.is_nccl_available():
        print(f"torch_nccl_bench: torch {torch.__version__} has CUDA but no NCCL", file=sys.stderr)
        return 1

    device = torch.device("cuda", 0)  # CUDA_VISIBLE_DEVICES picks the GPU.
    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(device)
    nccl = torch.cuda.nccl.version()
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    print(f'torch_nccl_bench device {device.index} "{props.name}" sm_{props.major}{props.minor}')
    print(f"torch_nccl_bench versions torch {torch.__version__} cuda {torch.version.cuda} "
          f"nccl {nccl}")
    per_round = max(1, iterations // ROUNDS)
    print("torch_nccl_bench settings "
          + " ".join(f"{k}={os.environ.get(k, 'unset')}" for k in SETTINGS)
          + f" iterations={per_round * ROUNDS} rounds={ROUNDS} chunk={CHUNK}", flush=True)

    # device_id makes the NCCL communicator now (eager init), not inside the first timed op.
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=device, timeout=timedelta(seconds=DEADLINE_S))
    expected = torch.tensor([1.5, -2.25], dtype=torch.float32)
    t = expected.to(device)
    torch.cuda.synchronize()  # The copy ran on the default stream; the ops run on another.
    ok = True
    with torch.cuda.stream(torch.cuda.Stream(device)):  # Non-blocking, as nccl_bench's.
        def op_sum():
            dist.all_reduce(t)

        def op_avg():
            dist.all_reduce(t, op=dist.ReduceOp.AVG)

        cold = ns_per_op(torch, COLD_OPS, op_sum)
        print(f"torch_nccl_bench cold_ns {cold:.0f} (first {COLD_OPS} ops after init, sum)",
              flush=True)
        series = {"all_reduce_8B_ns": (op_sum, []), "all_reduce_avg_8B_ns": (op_avg, [])}
        for launch, _ in series.values():
            ns_per_op(torch, WARMUP_OPS, launch)
        names = list(series)
        for r in range(ROUNDS):
            for k in range(len(names)):  # Rotated: neither series always runs first.
                launch, figures = series[names[(k + r) % len(names)]]
                figures.append(ns_per_op(torch, per_round, launch))
        torch.cuda.synchronize()
        # A sum or average over one rank leaves the values as they were, exactly.
        got = t.cpu()
        if not torch.equal(got, expected):
            print(f"torch_nccl_bench: wrong result {got.tolist()}, expected {expected.tolist()}",
                  file=sys.stderr)
            ok = False
    for name, (_, figures) in series.items():
        print(f"torch_nccl_bench {name} {statistics.median(figures):.0f} (min {min(figures):.0f} "
              f"max {max(figures):.0f}, {ROUNDS} rounds x {per_round} ops; "
              f"{'sum' if name == 'all_reduce_8B_ns' else 'avg'}, in place)")
    print(f"torch_nccl_bench results {'ok' if ok else 'WRONG'}", flush=True)
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
