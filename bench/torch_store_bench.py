#!/usr/bin/python3
"""PyTorch's TCPStore ops per second: the torch side of bench/store_compare.sh.

Same shape as store_ops_bench (the meshrt side): a TCPStore server (is_master=True) in this
process and N client threads, each with its own TCPStore connection, timing K sets, then K gets,
then K adds per client; a phase's rate is N x K over the time from its start (all clients released
by a barrier) to its last client's end. Prints one JSON line. Run with /usr/bin/python3 (Debian's
torch 1.13). TCPStore's calls release the GIL, so client threads overlap in the store.

What waits for the server: `add` (one round trip) and `get` (two: a wait for the key, then the
get). `set` gets no reply in torch 1.13: its rate is how fast the client writes requests.
"""
import argparse
import datetime
import json
import socket
import threading
import time

import torch.distributed as dist


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--value-bytes", type=int, default=64)
    p.add_argument("--round", type=int, default=0)
    a = p.parse_args()

    port = free_port()
    timeout = datetime.timedelta(seconds=30)
    server = dist.TCPStore("127.0.0.1", port, None, True, timeout, wait_for_workers=False)
    phases = 3
    barrier = threading.Barrier(a.clients + 1)
    errors = []

    def client(c):
        try:
            store = dist.TCPStore("127.0.0.1", port, None, False, timeout)
            key = f"bench/key{c}"
            value = b"v" * a.value_bytes
            store.set(key, value)
            barrier.wait()
            for _ in range(a.ops):
                store.set(key, value)
            barrier.wait()
            for _ in range(a.ops):
                if len(store.get(key)) != a.value_bytes:
                    raise RuntimeError("short value")
            barrier.wait()
            for _ in range(a.ops):
                store.add("bench/counter", 1)
            barrier.wait()
        except Exception as e:  # Report, and free the others from the barrier.
            errors.append(repr(e))
            barrier.abort()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    for t in threads:
        t.start()
    marks = []
    try:
        for _ in range(phases + 1):
            barrier.wait()
            marks.append(time.perf_counter())
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"torch_store_bench: a client failed: {errors[0]}")
    total = a.clients * a.ops
    rates = [total / (marks[i + 1] - marks[i]) for i in range(phases)]
    print(json.dumps({"impl": "torch", "round": a.round, "clients": a.clients, "ops": a.ops,
                      "value_bytes": a.value_bytes, "set_ops_s": round(rates[0]),
                      "get_ops_s": round(rates[1]), "add_ops_s": round(rates[2])}))
    del server


if __name__ == "__main__":
    main()
