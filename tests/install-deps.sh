#!/usr/bin/env bash
# Installs what Sluice's tests need, idempotently: only missing Debian packages are
# installed (apt-get update runs only then). Safe to run repeatedly, e.g. from CI.
#   kcat, librdkafka-dev   integration tests and sluice-rdk-client
#   python3                integration test scripts (standard library, and:)
#   python3-prometheus-client   Prometheus' text parser, which the metrics test reads
#                          /metrics with (tests/integration/metrics.py)
#   systemd                systemd-analyze verify/security on the units (tests/integration/
#                          deploy_package.py; reads unit files, no systemd PID 1 needed)
#   ansible-core           deploy/ansible run with -c local (tests/integration/ansible_local.py)
#   iproute2, iptables     the fault campaign's --netns mode (tests/fault/: namespaces,
#                          veth, bridge, tc tbf; iptables DROP and statistic rules)
#   maven, default-jre-headless   reference Apache Kafka (tests/reference/kafka-ref.sh)
#   maven, default-jdk-headless, python3-venv
#                          real-client integration tests (tests/integration/clients.py):
#                          Kafka's Java client and tools (jars from Maven Central, a test
#                          client compiled with javac), confluent-kafka and kafka-python
#                          (PyPI, into a venv); franz-go needs Go >= 1.26, which
#                          tests/install-go.sh finds or fetches (the toolchain module
#                          from the Go module proxy; Debian's golang-go bootstraps it)
# Set SLUICE_SKIP_KAFKA=1 to skip the reference-Kafka part and SLUICE_SKIP_CLIENTS=1 to
# skip the client-test part (Java/Maven are installed if either needs them). Set
# SLUICE_FETCH_KAFKA=1 to also download the reference Kafka jars now, and
# SLUICE_FETCH_CLIENTS=1 to install every test client now (otherwise each test does it
# on first use, into ~/.cache/sluice).
set -euo pipefail

# Build and runtime packages first (deploy/install-deps.sh), then test tools:
# Criterion for unit tests, clang with its libFuzzer and sanitizer runtimes
# (libclang-rt-14-dev: without it a fuzz target does not link) for the fuzzers.
"$(dirname "$0")/../deploy/install-deps.sh" libcriterion-dev clang libclang-rt-14-dev libdpdk-dev
pkgs=(kcat librdkafka-dev python3 python3-prometheus-client iproute2 iptables iputils-ping systemd ansible-core)
want_kafka=; [[ -n "${SLUICE_SKIP_KAFKA:-}" ]] || want_kafka=1
want_clients=; [[ -n "${SLUICE_SKIP_CLIENTS:-}" ]] || want_clients=1
# Maven by command: a machine may have it from elsewhere than Debian.
if [[ -n $want_kafka$want_clients ]] && ! command -v mvn >/dev/null; then pkgs+=(maven); fi
# Any Java 17+ will do for Kafka 4.x; install the default only if none. The client
# tests compile a small program, so they need javac (a JDK), not just a runtime.
java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p; s/^javac \([0-9]*\).*/\1/p' | head -1; }
need_java=
if [[ -n $want_kafka$want_clients ]]; then
    if ! command -v java >/dev/null || [[ $(java_major java) -lt 17 ]]; then
        need_java=default-jre-headless
    fi
    if [[ -n $want_clients ]] && { ! command -v javac >/dev/null || [[ $(java_major javac) -lt 17 ]]; }; then
        need_java=default-jdk-headless
    fi
fi
# `python3 -m venv` needs ensurepip, which Debian ships separately.
if [[ -n $want_clients ]] && ! python3 -c 'import ensurepip' 2>/dev/null; then pkgs+=(python3-venv); fi

missing=()
for p in "${pkgs[@]}" $need_java; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if (( ${#missing[@]} )); then
    echo "install-deps: installing ${missing[*]}"
    SUDO=; [[ $(id -u) -eq 0 ]] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "install-deps: all packages present"
fi

if [[ -n $want_clients ]]; then
    go=$("$(dirname "$0")/install-go.sh") || { echo "install-deps: no Go >= 1.26 for the franz-go client"; exit 1; }
    echo "install-deps: Go for franz-go: $go"
fi

if [[ -n "${SLUICE_FETCH_KAFKA:-}" && -z "${SLUICE_SKIP_KAFKA:-}" ]]; then
    "$(dirname "$0")/reference/kafka-ref.sh" install
fi
if [[ -n "${SLUICE_FETCH_CLIENTS:-}" && -n $want_clients ]]; then
    python3 - "$(dirname "$0")/integration" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import clients
for what, fn in (("Kafka jars", lambda: clients.Java().lib),
                 ("Java test client", lambda: clients.Java().test_client()),
                 ("Python clients", clients.venv_python),
                 ("franz-go client", clients.franzgo)):
    try:
        print(f"install-deps: {what}: {fn()}")
    except SystemExit:
        print(f"install-deps: {what}: not installable here (the tests needing it will skip)")
PY
fi
