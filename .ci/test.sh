#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. The last line is
# "tests: N passed, N failed, N skipped"; the exit status is non-zero if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash .ci/install-deps.sh || exit 1
bash .ci/build.sh build || exit 1
meson test -C build --print-errorlogs --num-processes 2
status=$?
# Then libFuzzer: each target of tests/fuzz/ fuzzed for 10 s (fixed seed) in a clang build.
bash .ci/fuzz.sh 10 || status=1
# Then ThreadSanitizer on suite 'tsan' (tests/meson.build): the in-process suites and 4-rank Gloo
# jobs (the ASan runs and the rest take hours of build on 2 cores: docs/reliability.md,
# "Sanitizers", gives their commands).
bash .ci/sanitize.sh tsan --suite tsan || status=1
python3 - build/meson-logs/testlog.junit.xml build-fuzz/meson-logs/testlog.junit.xml \
  build-tsan/meson-logs/testlog.junit.xml <<'PY'
import sys
import xml.etree.ElementTree as ET

passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"tests: could not read the junit log {path}: {e}", file=sys.stderr)
        failed += 1
        continue
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
