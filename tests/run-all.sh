#!/usr/bin/env bash
# Runs every Sluice test, from a fresh Debian 12 machine if need be:
#   1. installs what is missing (Debian packages),
#   2. builds with warnings as errors (build/) and again with AddressSanitizer
#      and UndefinedBehaviorSanitizer (build-asan/),
#   3. runs the Criterion unit tests in both builds, the integration tests
#      (real kcat / librdkafka clients against the real broker binary) in the
#      normal build, and the request-decoder fuzzer for a bounded time (clang).
# Ends with one line "N passed, N failed[, N skipped]" and exits non-zero on
# any failure. Benchmarks are not run here: see docs/benchmarks.md.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SLUICE_SKIP_KAFKA=${SLUICE_SKIP_KAFKA-1} ./tests/install-deps.sh || { echo "run-all: dependency installation failed"; exit 1; }

fail=0
setup() { # dir, options...
    local dir=$1; shift
    if [[ ! -f $dir/build.ninja ]]; then
        meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
    fi
    ninja -C "$dir" || return 1
}

setup build || { echo "run-all: build failed"; echo "0 passed, 1 failed"; exit 1; }
setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
    || { echo "run-all: sanitizer build failed"; echo "0 passed, 1 failed"; exit 1; }
fuzz_ok=
if command -v clang >/dev/null; then
    CC=clang setup build-fuzz -Dfuzz=true -Db_lundef=false -Dtests=disabled -Dclients=disabled && fuzz_ok=1
fi

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
meson test -C build --suite unit --print-errorlogs --num-processes 2 || fail=1
meson test -C build-asan --suite unit --print-errorlogs --num-processes 2 || fail=1
meson test -C build --suite integration --print-errorlogs --num-processes 1 || fail=1
if [[ -n $fuzz_ok ]]; then
    meson test -C build-fuzz --suite fuzz --print-errorlogs || fail=1
fi

# One closing line over every meson run above.
python3 - "$ROOT" <<'PY'
import json, os, sys
root = sys.argv[1]
p = f = s = 0
for d in ("build", "build-asan", "build-fuzz"):
    log = os.path.join(root, d, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        continue
    for line in open(log):
        r = json.loads(line)
        res = r.get("result")
        if res in ("OK", "EXPECTEDFAIL"): p += 1
        elif res == "SKIP": s += 1
        else: f += 1
print(f"{p} passed, {f} failed, {s} skipped")
PY
exit $fail
