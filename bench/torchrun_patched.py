#!/usr/bin/python3
"""torchrun from Debian's python3-torch 1.13, made to work on Python 3.11 (bench only).

torchrun's default --redirects/--tee value "0" parses to None in Std.from_str, because Python
3.11 skips zero-valued IntFlag members when iterating; the agent then fails with
"'NoneType' object has no attribute 'get'". This maps such values back with Std(int(value))
and runs torch.distributed.run.main() with the same arguments as torchrun.
"""
import sys

from torch.distributed import run
from torch.distributed.elastic.multiprocessing import api

_from_str = api.Std.from_str.__func__


def _fixed_from_str(cls, vm):
    parsed = _from_str(cls, vm)
    if isinstance(parsed, dict):
        values = dict(item.split(":") for item in vm.split(","))
        return {i: cls(int(values[str(i)])) if s is None else s for i, s in parsed.items()}
    return cls(int(vm)) if parsed is None else parsed


api.Std.from_str = classmethod(_fixed_from_str)

if __name__ == "__main__":
    sys.exit(run.main())
