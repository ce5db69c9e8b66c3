#!/usr/bin/env bash
# Builds meshrt under a sanitizer and runs the tests there: asan (AddressSanitizer, LeakSanitizer
# and UndefinedBehaviorSanitizer) in build-asan, tsan (ThreadSanitizer) in build-tsan. Any finding
# fails the test it happens in, in the test binary or in any process it starts (they inherit the
# options below). docs/reliability.md ("Sanitizers") says what runs clean and what is excluded.
# Usage: .ci/sanitize.sh {asan|tsan} [meson test args...]
#   no args: every test but those excluded below; args (test names, --suite X, ...): exactly those.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
shift || true
supp=$PWD/.ci/sanitizers
# Every finding stops the process (so its test fails). handle_segv/sigbus/sigfpe=0 and
# use_sigaltstack=0: meshrt's own fatal-signal dump (runtime/fatal_signal.h) is installed only
# where the action is the default, and the tests check it (SIGSEGV in user code, stack overflow
# on meshrt's 256 KiB signal stack). Memory errors are still caught by the instrumentation; a
# wild SIGSEGV still fails the test.
halt="halt_on_error=1:abort_on_error=1"
signals="handle_segv=0:handle_sigbus=0:handle_sigfpe=0:use_sigaltstack=0"
# install: links a consumer without -fsanitize against the instrumented libmeshrt (ASan's runtime
# then does not come first, and refuses to start); it tests packaging, not memory.
excluded=(install)
case "$kind" in
  asan)
    sanitize=address,undefined
    # GCC's -Wmaybe-uninitialized misfires once ASan reshapes the code (Boost.Beast's parser in
    # trace/analyze/http_get.cc, std::regex in tests/exports_test.cc): a warning, not an error,
    # in this build only.
    cpp_args=-Wno-error=maybe-uninitialized
    export ASAN_OPTIONS="$halt:detect_leaks=1:print_summary=1:$signals"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="$halt:print_stacktrace=1:print_summary=1"
    # mpi runs: tests/mpi_test.cc gives its ranks the options that let lsan.supp name OpenMPI's
    # kept memory.
    ;;
  tsan)
    sanitize=thread
    # TSan does not model std::atomic_thread_fence; only Boost.Asio's handler fences use one
    # (meshrt's own code has none), and they sit behind the scheduler's mutex anyway.
    cpp_args=-Wno-tsan
    export TSAN_OPTIONS="$halt:second_deadlock_stack=1:\
suppressions=$supp/tsan.supp:print_suppressions=0:$signals"
    # mpi runs: its ranks are instrumented (mpirun passes TSAN_OPTIONS on); OpenMPI is not, and
    # reported nothing.
    ;;
  *)
    echo "usage: $0 {asan|tsan} [meson test args...]" >&2
    exit 2
    ;;
esac
build=build-$kind
if [[ ! -f "$build/build.ninja" ]]; then
  meson setup "$build" --buildtype=debugoptimized -Db_sanitize="$sanitize" -Db_lundef=false \
    -Dwerror=true -Dcpp_args="$cpp_args"
fi
if [[ $# -eq 0 ]]; then
  # Every test (GPU suite included: it skips without a device) but the excluded ones.
  ninja -C "$build" -j "${SANITIZE_JOBS:-2}"
  mapfile -t tests < <(meson test -C "$build" --list --no-rebuild 2>/dev/null |
    sed 's/^.* \/ //' | grep -vxF -f <(printf '%s\n' "${excluded[@]}"))
  set -- "${tests[@]}"
else
  # Only what the named tests and suites run (an instrumented build of everything takes hours on
  # 2 cores); any other meson test option builds everything.
  mapfile -t targets < <(python3 - "$build" "$@" <<'PY'
import json, os, subprocess, sys
build, args = sys.argv[1], sys.argv[2:]
names, suites = set(), set()
it = iter(args)
for a in it:
    if a == "--suite":
        suites.add(next(it, ""))
    elif a.startswith("-"):
        print("all")
        sys.exit(0)
    else:
        names.add(a)
def intro(what):
    out = subprocess.run(["meson", "introspect", what, build], capture_output=True, text=True)
    return json.loads(out.stdout)
files = {t["id"]: t["filename"] for t in intro("--targets")}
wanted = set()
for t in intro("--tests"):
    if t["name"] in names or suites & ({s.split(":")[-1] for s in t["suite"]} | set(t["suite"])):
        wanted.update(files[d][0] for d in t["depends"] if files.get(d))
        wanted.add(t["cmd"][0])
for f in sorted(wanted):
    if os.path.abspath(f).startswith(os.path.abspath(build) + os.sep):
        print(os.path.relpath(f, build))
PY
  )
  if [[ " ${targets[*]} " == *" all "* ]]; then targets=(); fi
  ninja -C "$build" -j "${SANITIZE_JOBS:-2}" "${targets[@]}"
fi
# -t 3: the sanitized processes run 2-15 times slower than the tests' meson timeouts assume.
exec meson test -C "$build" --no-rebuild --num-processes 2 --print-errorlogs -t 3 "$@"
