#!/usr/bin/env bash
# Runs every Sluice test, from a fresh Debian 12 machine if need be:
#   1. installs what is missing (Debian packages),
#   2. builds with warnings as errors (build/) and again with AddressSanitizer
#      and UndefinedBehaviorSanitizer (build-asan/),
#   3. runs the Criterion unit tests in both builds, the integration tests
#      (real kcat / librdkafka clients against the real broker binary) in the
#      normal build, and the request-decoder fuzzer for a bounded time (clang).
# Ends with one line "N passed, N failed, N skipped" and exits non-zero on
# any failure. A suite that does not build or run, and a test that skips (a
# client that could not be installed, a tool missing), count as failures and
# are named above that line: nothing is left out silently. Benchmarks are not run here: see docs/benchmarks.md.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SLUICE_SKIP_KAFKA=${SLUICE_SKIP_KAFKA-1} ./tests/install-deps.sh || { echo "run-all: dependency installation failed"; exit 1; }

fail=0
setup() { # dir, options...
    local dir=$1; shift
    if [[ ! -f $dir/build.ninja ]]; then
        meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
    else
        meson configure "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
    fi
    ninja -C "$dir" || return 1
}

# Every suite below must build and run: a suite that did not is a failure, named here
# and counted in the closing line, never a silent gap. Unit tests and test clients are
# required (not 'auto'), so a missing Criterion or librdkafka stops the build loudly.
broken=()
setup build -Dtests=enabled -Dclients=enabled || broken+=("build (warnings as errors)")
setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dtests=enabled -Dclients=enabled \
    || broken+=("sanitizer build")
if ! command -v clang >/dev/null; then
    broken+=("fuzzer build: clang is not installed")
elif ! CC=clang setup build-fuzz -Dfuzz=true -Db_lundef=false -Dtests=disabled -Dclients=disabled; then
    broken+=("fuzzer build (clang with libFuzzer: Debian's clang and libclang-rt-14-dev)")
fi
# Each suite's results go to their own log (meson-logs/run-all-<suite>.json), so that a
# later suite in the same build directory does not hide an earlier one's, and none is
# left from an earlier run to be counted again.
for d in build build-asan build-fuzz; do rm -f "$d"/meson-logs/run-all-*.json; done

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
run_suite() { # dir, suite, options...
    local dir=$1 suite=$2; shift 2
    [[ -f $dir/build.ninja ]] || return 0 # its build failure is already counted
    meson test -C "$dir" --suite "$suite" --print-errorlogs --logbase "run-all-$suite" "$@" || fail=1
    [[ -s $dir/meson-logs/run-all-$suite.json ]] || broken+=("$suite tests in $dir: none ran")
}
run_suite build unit --num-processes 2
run_suite build-asan unit --num-processes 2
run_suite build integration --num-processes 1
# Integration tests that matter most under AddressSanitizer (connection lifetimes, the
# budgets' bookkeeping) run again with build-asan's broker.
run_suite build-asan asan --num-processes 1
run_suite build-fuzz fuzz

# One closing line over every meson run above.
# A skipped test is a check that could not run (a client that could not be installed, a
# tool missing): it fails the run too, and is listed by name.
python3 - "$ROOT" "${broken[@]}" <<'PY'
import glob, json, os, sys
root, broken = sys.argv[1], sys.argv[2:]
p = f = s = 0
skipped = []
logs = [(d, log) for d in ("build", "build-asan", "build-fuzz")
        for log in sorted(glob.glob(os.path.join(root, d, "meson-logs", "run-all-*.json")))]
for d, log in logs:
    for line in open(log):
        r = json.loads(line)
        res = r.get("result")
        if res in ("OK", "EXPECTEDFAIL"): p += 1
        elif res == "SKIP":
            s += 1
            skipped.append(f"{d}: {r.get('name')}")
        else: f += 1
for b in broken:
    print(f"run-all: FAILED TO BUILD OR RUN: {b}")
for k in skipped:
    print(f"run-all: SKIPPED (counted as a failure: the check did not run): {k}")
print(f"{p} passed, {f + len(broken) + s} failed, {s} skipped")
sys.exit(1 if broken or skipped or f else 0)
PY
summary=$?
(( fail == 0 && summary == 0 ))
