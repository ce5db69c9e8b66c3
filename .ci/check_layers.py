#!/usr/bin/env python3
"""Fails the build when an #include points the wrong way between meshrt's layers.

    meshrt_trace  <-  meshrt_store  <-  meshrt (runtime/ + mesh/)  <-  examples
         ^                 ^
    meshrt_analyze      meshrun (launcher/)

Inside the runtime, the collectives layer (runtime/collectives/) is a floor below the backends and
the communicator: it sees ops, buffers, dtypes, reductions and errors, never a backend.

Each source file belongs to the first layer whose prefix matches its path; it may include only
the paths that layer allows (quoted includes, resolved against the file's own folder first, then
the source root, as the compiler does). Angle-bracket includes are system headers and not checked.

Usage: check_layers.py --root SRC [--stamp FILE] [FILE ...]   (default: every file under SRC)
Exit status 0 when every include is allowed, 1 otherwise (one line per offence).
"""
import argparse
import os
import re
import sys

TRACE = ("trace/", "meshrt_config.h")
STORE = ("runtime/store/", "runtime/error.h", "runtime/timeout.h")
RUNTIME = ("runtime/",)
COLLECTIVES = ("runtime/collectives/", "runtime/op.h", "runtime/buffer.h", "runtime/dtype.h",
               "runtime/reduce_op.h", "runtime/error.h")
MESH = ("mesh/",)

# (layer, path prefixes that belong to it, include prefixes it may use, prefixes it may not use
# even though an allowed prefix matches). The first matching layer wins, so the more specific
# folders come first.
LAYERS = [
    ("analyze", ("trace/analyze/",), TRACE, ()),
    ("trace", ("trace/",), TRACE, ("trace/analyze/",)),
    ("store", ("runtime/store/", "runtime/error."), TRACE + STORE, ("trace/analyze/",)),
    ("collectives", ("runtime/collectives/",), TRACE + COLLECTIVES, ("trace/analyze/",)),
    ("runtime", ("runtime/",), TRACE + RUNTIME, ("trace/analyze/",)),
    ("mesh", ("mesh/",), TRACE + RUNTIME + MESH, ("trace/analyze/",)),
    ("launcher", ("launcher/",), ("launcher/", "trace/atomic_file.h", "trace/env.h",
                                  "trace/live_metrics.h", "trace/op_kind.h",
                                  "trace/logging.h", "meshrt_config.h") + STORE, ()),
    ("examples", ("examples/",), TRACE + RUNTIME + MESH, ("trace/analyze/",)),
    ("bench", ("bench/",), TRACE + RUNTIME + MESH + ("bench/", "launcher/"), ()),
    ("tests", ("tests/",), TRACE + RUNTIME + MESH + ("tests/", "launcher/"), ()),
]
SOURCE_SUFFIXES = (".h", ".cc", ".cpp", ".hpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def layer_of(path):
    for name, members, allowed, denied in LAYERS:
        if path.startswith(members):
            return name, allowed, denied
    return None


def resolve(root, path, target):
    """The root-relative path the compiler would open for `#include "target"` in `path`."""
    local = os.path.normpath(os.path.join(os.path.dirname(path), target))
    if os.path.exists(os.path.join(root, local)):
        return local
    return os.path.normpath(target)


def check(root, files):
    problems = []
    for path in files:
        layer = layer_of(path)
        if layer is None:
            continue
        name, allowed, denied = layer
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for match in INCLUDE.finditer(text):
            target = resolve(root, path, match.group(1))
            if target.startswith(allowed) and not target.startswith(denied):
                continue
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{path}:{line}: layer '{name}' may not include \"{match.group(1)}\" "
                            f"({target}); see the layer picture in docs/architecture.md")
    return problems


def all_sources(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "build"))]
        for name in filenames:
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.normpath(os.path.join(rel, name))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--stamp")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    files = args.files or sorted(all_sources(args.root))
    problems = check(args.root, files)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} include(s) point the wrong way", file=sys.stderr)
        return 1
    if args.stamp:
        with open(args.stamp, "w") as f:
            f.write(f"{len(files)} files checked\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
