#!/usr/bin/python3
"""One rank of bench/launcher_startup.sh under torchrun: gloo init_process_group, the wall-clock
time at which it returned, a barrier, then that time."""
import time

import torch.distributed as dist

dist.init_process_group("gloo")
init_done = time.time_ns()
dist.barrier()
print(f"init_done_ns={init_done}", flush=True)
dist.destroy_process_group()
