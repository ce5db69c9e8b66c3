#!/usr/bin/env python3
"""Writes the hostile flight-recorder dumps of docs/reliability.md ("Memory on hostile dumps"):
one file `fr_0` per case, under OUT/<case>/, each MIB MiB of bulk tiny items, for measuring
meshtrace's peak memory against its input:

  bench/hostile_dumps.py OUT [MIB]
  for d in OUT/*/; do /usr/bin/time -v build/meshtrace analyze --allow-incomplete-ranks "$d"; done
"""
import os
import struct
import sys


def pickle_str(text):
    b = text.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def fill(path, head, unit, last, tail, size):
    """head, then `unit` repeated up to `size` bytes, then `last` + `tail`."""
    with open(path, "wb") as f:
        f.write(head)
        count = max(0, (size - len(head) - len(last) - len(tail)) // len(unit))
        chunk = unit * 4096
        for _ in range(count // 4096):
            f.write(chunk)
        f.write(unit * (count % 4096))
        f.write(last + tail)


def numbered(path, head, pattern, last, tail, size):
    """head, then `pattern % i` for i = 0, 1, ... up to `size` bytes: distinct items."""
    with open(path, "wb") as f:
        f.write(head)
        written, i, parts = len(head), 0, []
        while written < size:
            item = pattern % i
            parts.append(item)
            written += len(item)
            i += 1
            if len(parts) == 100000:
                f.write(b"".join(parts))
                parts = []
        f.write(b"".join(parts) + last + tail)


def main():
    out = sys.argv[1]
    size = int(sys.argv[2] if len(sys.argv) > 2 else 16) << 20
    group = b'{"version":"2.10","pg_config":{"g":{"ranks":"[0]"}},"entries":['
    entry = b'{"process_group":["g"],"profiling_name":"a"'
    cases = {
        "json_empty_entries": lambda p: fill(
            p, b'{"version":"2.10","pg_config":{"":{}},"entries":[', b"{},", b"{}", b"]}", size),
        "json_tiny_groups": lambda p: numbered(
            p, b'{"version":"2.10","pg_config":{', b'"%x":{},', b'"z":{}', b"}}", size),
        "json_distinct_strings": lambda p: numbered(
            p, group + entry + b',"input_dtypes":[', b'"%x",', b'"z"', b"]}]}", size),
        "json_minimal_entries": lambda p: fill(p, group, entry + b"},", entry + b"}", b"]}", size),
        "json_empty_shapes": lambda p: fill(
            p, group + entry + b',"input_sizes":[', b"[],", b"[]", b"]}]}", size),
        "json_nested_arrays": lambda p: fill(
            p, b'{"version":"2.10","pg_config":{},"x":[', b"[" * 250 + b"]" * 250 + b",", b"[]",
            b"]}", size),
        "pickle_empty_dicts": lambda p: fill(
            p, b"\x80\x02}(" + pickle_str("version") + pickle_str("2.10") +
            pickle_str("pg_config") + b"}(" + pickle_str("") + b"}u" + pickle_str("entries") +
            b"](", b"}", b"", b"eu.", size),
        "pickle_nones": lambda p: fill(
            p, b"\x80\x02}(" + pickle_str("version") + pickle_str("2.10") +
            pickle_str("pg_config") + b"}" + pickle_str("junk") + b"](", b"N", b"", b"eu.", size),
        "pickle_small_ints": lambda p: fill(
            p, b"\x80\x02}(" + pickle_str("version") + pickle_str("2.10") +
            pickle_str("pg_config") + b"}" + pickle_str("junk") + b"](", b"K\x07", b"", b"eu.",
            size),
    }
    for name, write in cases.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        path = os.path.join(out, name, "fr_0")
        write(path)
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
