#!/usr/bin/env python3
"""Paired, interleaved comparison of two builds of one Google Benchmark binary (A B, B A, ...).

Usage: paired_gbench.py BEFORE_BIN AFTER_BIN idle|contended ROUNDS [FILTER]
  idle:      both pinned to CPU 0 (taskset -c 0), nothing else started;
  contended: unpinned, with a shell loop spinning on CPU 1 for the whole run.
Prints, per benchmark, each side's median of the per-round medians and the after/before ratio
min / median / max over the rounds, with the load average at the end. CPU time for single-thread
benchmarks, real time for those registered with UseRealTime.
"""
import json, subprocess, sys, statistics, os
before, after, mode, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
flt = sys.argv[5] if len(sys.argv) > 5 else 'BM_RecordAndComplete/[012]$'
def run(b):
    cmd = [b, f'--benchmark_filter={flt}', '--benchmark_repetitions=3',
           '--benchmark_report_aggregates_only=true', '--benchmark_format=json', '--benchmark_min_time=0.2']
    if mode == 'idle': cmd = ['taskset', '-c', '0'] + cmd
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return {x['run_name']: x['real_time'] if x['run_name'].endswith('/real_time') else x['cpu_time']
            for x in out['benchmarks'] if x.get('aggregate_name') == 'median'}
spin = None
if mode == 'contended':
    spin = subprocess.Popen(['taskset', '-c', '1', 'sh', '-c', 'while :; do :; done'])
res = {'before': [], 'after': []}
try:
    for r in range(rounds):
        order = [('before', before), ('after', after)] if r % 2 == 0 else [('after', after), ('before', before)]
        for name, b in order: res[name].append(run(b))
finally:
    if spin: spin.kill()
load = os.getloadavg()[0]
for key in res['before'][0]:
    b = [x[key] for x in res['before']]; a = [x[key] for x in res['after']]
    ratios = sorted(x / y for x, y in zip(a, b))
    print(f"{mode:9} {key:28} before {statistics.median(b):7.1f} ns  after {statistics.median(a):7.1f} ns  "
          f"after/before {ratios[0]:.2f} / {statistics.median(ratios):.2f} / {ratios[-1]:.2f}  (load {load:.2f})")
