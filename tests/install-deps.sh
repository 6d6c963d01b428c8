#!/usr/bin/env bash
# Installs what Sluice's tests need, idempotently: only missing Debian packages are
# installed (apt-get update runs only then). Safe to run repeatedly, e.g. from CI.
#   kcat, librdkafka-dev   integration tests and sluice-rdk-client
#   python3                integration test scripts (standard library only)
#   maven, default-jre-headless   reference Apache Kafka (tests/reference/kafka-ref.sh)
# Set SLUICE_SKIP_KAFKA=1 to skip the Java/Maven part; set SLUICE_FETCH_KAFKA=1 to
# also download the reference Kafka jars now (otherwise on first use).
set -euo pipefail

# Build and runtime packages first (deploy/install-deps.sh), then test tools:
# Criterion for unit tests, clang for the libFuzzer target.
"$(dirname "$0")/../deploy/install-deps.sh" libcriterion-dev clang
pkgs=(kcat librdkafka-dev python3)
[[ -n "${SLUICE_SKIP_KAFKA:-}" ]] || pkgs+=(maven)
# Any Java 17+ runtime will do for Kafka 4.x; install the default only if none.
need_java=
if [[ -z "${SLUICE_SKIP_KAFKA:-}" ]]; then
    if ! command -v java >/dev/null ||
       [[ $(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1) -lt 17 ]]; then
        need_java=default-jre-headless
    fi
fi

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

if [[ -n "${SLUICE_FETCH_KAFKA:-}" && -z "${SLUICE_SKIP_KAFKA:-}" ]]; then
    "$(dirname "$0")/reference/kafka-ref.sh" install
fi
