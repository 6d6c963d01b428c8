#!/usr/bin/env bash
# Builds Sluice and runs a single-node broker on 127.0.0.1:9092 with its data
# under ./data (override with SLUICE_DATA=dir). Installs missing Debian
# packages first. Runs in the foreground; Ctrl-C (SIGINT) or SIGTERM stops it
# cleanly. Extra arguments go to the broker, e.g. --override num.partitions=6.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
if [[ ! -d build-release ]]; then
    meson setup build-release --buildtype=release -Db_ndebug=false -Dtests=disabled >/dev/null
fi
ninja -C build-release dataplane/sluice-broker
data=${SLUICE_DATA:-$PWD/data}
mkdir -p "$data"
echo "sluice: starting on 127.0.0.1:9092, data in $data/sluice-logs (Ctrl-C to stop)"
exec ./build-release/dataplane/sluice-broker deploy/single-node.properties \
    --override "log.dirs=$data/sluice-logs" "$@"
