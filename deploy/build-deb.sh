#!/usr/bin/env bash
# Builds sluice_<version>_<arch>.deb from this tree: a release build (assertions kept,
# as in every Sluice build) installed with `meson install` under a staging root
# (DESTDIR, prefix /usr), the systemd units, example configuration and documentation
# added, the runtime dependencies found by dpkg-shlibdeps from the binaries themselves,
# and `dpkg-deb --build --root-owner-group`. Starts nothing and installs nothing on this
# machine; the package, once installed (apt install ./sluice_*.deb), has:
#   /usr/bin/sluice-broker, /usr/bin/sluice-controller, /usr/bin/sluice
#   /lib/systemd/system/sluice-broker.service, sluice-controller.service (not enabled)
#   /etc/sluice/server.properties, /etc/sluice/controller.properties (conffiles: an
#     operator's edits survive upgrades)
#   /usr/share/doc/sluice/ (docs/*.md)
# and its postinst creates the system user and group `sluice` the units run as.
#
#   deploy/build-deb.sh [--build-dir DIR] [--out DIR] [--dpdk auto|enabled|disabled]
#       --build-dir  the meson build directory to use (default: build-deb; set up as a
#                    release build with prefix /usr if it is not one yet; reused after)
#       --out        where the .deb goes (default: the build directory)
#       --dpdk       the dpdk transport (default auto: when libdpdk-dev is installed;
#                    then the package also depends on DPDK's runtime libraries)
# Environment: SLUICE_DEB_VERSION overrides the version (default: meson's project version
# + git's commit date and hash, e.g. 0.1.0+git20261203.8c5a4b6), SLUICE_DEB_MAINTAINER
# the Maintainer field.
# The last line printed is the .deb's path.
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-deb
OUT=
DPDK=auto
die() { echo "build-deb: $*" >&2; exit 1; }
say() { echo "build-deb: $*" >&2; }
while (($#)); do
    case $1 in
    --build-dir) BUILD=${2:?--build-dir needs a directory}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --dpdk) DPDK=${2:?--dpdk needs auto, enabled or disabled}; shift 2 ;;
    *) die "unknown argument '$1' (--help)" ;;
    esac
done
[[ $DPDK =~ ^(auto|enabled|disabled)$ ]] || die "--dpdk must be auto, enabled or disabled, not '$DPDK'"
[[ $BUILD = /* ]] || BUILD=$PWD/$BUILD
OUT=${OUT:-$BUILD}
[[ $OUT = /* ]] || OUT=$PWD/$OUT
"$ROOT/deploy/install-deps.sh" >&2
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
    command -v $tool >/dev/null || die "$tool not found (Debian's dpkg-dev, which build-essential brings)"
done

# ------------------------------------------------------------------ build and install
# The test clients and perf tools stay out (-Dclients=disabled: sluice-perf would be
# installed too), and so do the unit tests.
opts=(--buildtype=release -Db_ndebug=false --prefix=/usr -Dtests=disabled -Dclients=disabled -Ddpdk="$DPDK")
if [[ -f $BUILD/build.ninja ]]; then
    meson configure "$BUILD" "${opts[@]}" >/dev/null
else
    say "setting up $BUILD (release build, prefix /usr)"
    meson setup "$BUILD" "$ROOT" "${opts[@]}" >/dev/null
fi
ninja -C "$BUILD" dataplane/sluice-broker control/sluice-controller tools/sluice >&2 ||
    die "the build in $BUILD failed (run: ninja -C $BUILD)"

WORK=$BUILD/deb
# dpkg-shlibdeps expects the binaries under debian/<package>/ and a debian/control.
STAGE=$WORK/debian/sluice
rm -rf "$WORK"
mkdir -p "$STAGE/DEBIAN"
: >"$WORK/debian/control"
meson install -C "$BUILD" --destdir "$STAGE" --no-rebuild --quiet >&2
for bin in sluice-broker sluice-controller sluice; do
    [[ -x $STAGE/usr/bin/$bin ]] || die "meson install put no usr/bin/$bin under $STAGE"
done
for f in "$STAGE"/usr/bin/*; do
    case ${f##*/} in
    sluice-broker | sluice-controller | sluice) ;;
    *) die "meson install put more than the three binaries in usr/bin: ${f##*/} (set up $BUILD with -Dclients=disabled)" ;;
    esac
done
install -D -m 0644 "$ROOT/deploy/systemd/sluice-broker.service" "$STAGE/lib/systemd/system/sluice-broker.service"
install -D -m 0644 "$ROOT/deploy/systemd/sluice-controller.service" "$STAGE/lib/systemd/system/sluice-controller.service"
install -D -m 0644 "$ROOT/deploy/debian/server.properties" "$STAGE/etc/sluice/server.properties"
install -D -m 0644 "$ROOT/deploy/debian/controller.properties" "$STAGE/etc/sluice/controller.properties"
install -d -m 0755 "$STAGE/usr/share/doc/sluice"
install -m 0644 "$ROOT"/docs/*.md "$ROOT/README.md" "$STAGE/usr/share/doc/sluice/"
cat >"$STAGE/usr/share/doc/sluice/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: sluice

Files: *
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF

# ------------------------------------------------------------------ control files
version=${SLUICE_DEB_VERSION:-}
if [[ -z $version ]]; then
    version=$(meson introspect --projectinfo "$BUILD" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
    if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
        version+="+git$(git -C "$ROOT" log -1 --format=%cd --date=format:%Y%m%d).$(git -C "$ROOT" rev-parse --short HEAD)"
    fi
fi
[[ $version =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "version '$version' is not a Debian version"
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
shlibs=$(cd "$WORK" && dpkg-shlibdeps -O -e"$STAGE/usr/bin/sluice-broker" -e"$STAGE/usr/bin/sluice-controller" \
    -e"$STAGE/usr/bin/sluice")
depends=${shlibs#shlibs:Depends=}
[[ $depends != "$shlibs" && -n $depends ]] || die "dpkg-shlibdeps found no dependencies: $shlibs"
size_kb=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
cat >"$STAGE/DEBIAN/control" <<EOF
Package: sluice
Version: $version
Architecture: $arch
Maintainer: ${SLUICE_DEB_MAINTAINER:-Sluice developers <sluice@localhost>}
Installed-Size: $size_kb
Depends: adduser, $depends
Section: net
Priority: optional
Description: Kafka-compatible commit-log broker
 Sluice speaks Apache Kafka's protocol: Kafka's clients and tools work against it
 unchanged. This package has the broker (sluice-broker, io_uring; DPDK when built
 with it), the controller quorum (sluice-controller), the sluice command-line tool,
 and systemd units for both servers (installed, not enabled).
EOF
printf '%s\n' /etc/sluice/server.properties /etc/sluice/controller.properties >"$STAGE/DEBIAN/conffiles"
cat >"$STAGE/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# The units run as the system user sluice; they are installed, not enabled or started
# (the example configuration is a single node on loopback: edit it first).
set -e
if [ "$1" = configure ]; then
    if ! getent passwd sluice >/dev/null; then
        adduser --system --group --home /var/lib/sluice --no-create-home --quiet sluice
    fi
fi
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
exit 0
EOF
cat >"$STAGE/DEBIAN/postrm" <<'EOF'
#!/bin/sh
# Data (/var/lib/sluice) and the user stay, even on purge: a broker's logs are not
# removed by a package manager.
set -e
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
exit 0
EOF
cat >"$STAGE/DEBIAN/prerm" <<'EOF'
#!/bin/sh
# Removal stops the services (their binaries are going). An upgrade restarts nothing:
# restart brokers one at a time (docs/operations.md, "Rolling restarts").
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl --system stop sluice-broker.service sluice-controller.service >/dev/null 2>&1 || true
fi
exit 0
EOF
chmod 0755 "$STAGE/DEBIAN/postinst" "$STAGE/DEBIAN/postrm" "$STAGE/DEBIAN/prerm"

mkdir -p "$OUT"
deb=$OUT/sluice_${version}_${arch}.deb
dpkg-deb --build --root-owner-group "$STAGE" "$deb" >&2
say "built $deb"
echo "$deb"
