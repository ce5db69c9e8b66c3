#!/usr/bin/env bash
# Packs, from a built meshrt tree, what a GPU machine with no -dev packages and no network needs to
# verify the NCCL backend in one call (issue 26, docs/gpu.md): stripped binaries in bin/,
# libmeshrt* and every non-system library they need in lib/, run.sh (.ci/gpu_run.sh) and
# torch_nccl_bench.py. libnccl.so.2 (208 MB), libcuda, glibc, libstdc++ and libgcc_s stay the
# machine's. Then checks that every ELF in the carry finds each NEEDED library in lib/ or in that
# system set (libnccl.so.2 included), and that the carry stays under 56 MiB.
#
#   .ci/gpu_carry.sh [BUILD_DIR [CARRY_DIR]]     (defaults: build, build-gpu-carry, in the repo)
#   on the GPU machine, from the repo root:     OUT=<dir> bash build-gpu-carry/run.sh
set -euo pipefail

# Binaries, relative to the build dir; meshrun, meshtrace and meshrt-monitor sit in the build root.
# In the carry they all go to bin/: meshrun finds meshtrace beside itself and libmeshrt finds
# meshrt-monitor in ../bin/ (runtime/monitor_process.cc).
REQUIRED=(tests/gpu_test tests/gpu_hang_worker tests/nccl_unit_test bench/nccl_bench
  bench/cuda_cost_bench examples/tp_mlp_train meshrun meshtrace meshrt-monitor)
# Packed when built, else left out with a warning (run.sh then records the step as skipped).
OPTIONAL=()
# Sonames that never travel: the machine's own (glibc family, the C++ runtime, the driver, NCCL).
SYSTEM_RE='^(linux-vdso\.so|ld-linux[-_a-z0-9.]*\.so|lib(c|m|mvec|pthread|dl|rt|resolv|util|anl)\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnccl\.so\.2$)'
MAX_MIB=56

src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"  # Relative paths are from the repository root, as in .ci/build.sh.
build=$(realpath "${1:-build}")
carry=${2:-build-gpu-carry}
die() { echo "gpu_carry: $*" >&2; exit 1; }
[ -f "$build/build.ninja" ] || die "$build is not a meson build dir"

missing=()
for b in "${REQUIRED[@]}"; do [ -x "$build/$b" ] || missing+=("$b"); done
[ ${#missing[@]} -eq 0 ] || die "not built in $build: ${missing[*]} (ninja -C $build ${missing[*]})"
bins=("${REQUIRED[@]}")
for b in "${OPTIONAL[@]}"; do
  if [ -x "$build/$b" ]; then bins+=("$b"); else echo "gpu_carry: warning: $b not built: left out"; fi
done

rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/lib"
carry=$(realpath "$carry")

# Debug info goes, the symbol table stays (function names in crash stacks); system libraries
# are already stripped and are copied as they are.
for b in "${bins[@]}"; do strip --strip-debug -o "$carry/bin/$(basename "$b")" "$build/$b"; done

# The libraries: ldd's closure of every binary, by soname, less the system set.
declare -A seen=()
for b in "${bins[@]}"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ $name =~ $SYSTEM_RE ]] && continue
    [ -n "${seen[$name]:-}" ] && continue
    [ "$path" != "not" ] || die "$b: $name not found here: the build cannot run here either"
    seen[$name]=1
    if [[ $(realpath "$path") == "$build"/* ]]; then
      strip --strip-debug -o "$carry/lib/$name" "$path"
    else
      cp -L "$path" "$carry/lib/$name"
    fi
  done < <(ldd "$build/$b")
done

cp "$src/.ci/gpu_run.sh" "$carry/run.sh"
chmod +x "$carry/run.sh"
built_from=$(sed -n 's/.*"directories": *{"source": *"\([^"]*\)".*/\1/p' "$build/meson-info/meson-info.json")
for d in "$src" "$built_from" ""; do
  [ -n "$d" ] || echo "gpu_carry: warning: bench/torch_nccl_bench.py not found: left out (its step will skip)"
  [ -f "$d/bench/torch_nccl_bench.py" ] && cp "$d/bench/torch_nccl_bench.py" "$carry/" && break
done
# What was packed: the build's source commit (the binaries), the scripts' commit (run.sh).
commit() { git -C "$1" describe --always --dirty 2>/dev/null || echo "$1 (no git)"; }
{
  echo "packed $(date -u +%FT%TZ) on $(hostname): binaries from $built_from at $(commit "$built_from"), run.sh at $(commit "$src")"
  echo "binaries: ${bins[*]}"
} >"$carry/info.txt"

# Self-check: every NEEDED of every ELF here is in lib/ or a system soname, whatever rpath the
# build left in it (on the GPU machine the build's paths do not exist).
bad=0
while IFS= read -r -d '' f; do
  head -c4 "$f" | grep -q 'ELF' || continue
  while read -r need; do
    [ -f "$carry/lib/$need" ] || [[ $need =~ $SYSTEM_RE ]] || {
      echo "gpu_carry: $f needs $need, which the carry lacks" >&2
      bad=1
    }
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done < <(find "$carry" -type f -print0)
[ $bad -eq 0 ] || die "self-check failed"
# ... and the loader agrees: with only lib/ added, nothing is missing but libnccl.so.2.
for f in "$carry"/bin/*; do
  if LD_LIBRARY_PATH=$carry/lib ldd "$f" | grep 'not found' | grep -v '^\s*libnccl\.so\.2 '; then
    die "self-check failed: $f has unresolved libraries (above)"
  fi
done
echo "gpu_carry: self-check passed: every library resolves from lib/ or the system set"

kib=$(du -sk "$carry" | cut -f1)
echo "gpu_carry: $carry: $((kib / 1024)) MiB ($kib KiB): ${#bins[@]} binaries, ${#seen[@]} libraries"
[ "$kib" -le $((MAX_MIB * 1024)) ] || die "the carry is over $MAX_MIB MiB"
