#!/usr/bin/env bash
# Makes a Go toolchain new enough for the franz-go test client (tests/clients/franzgo,
# whose go.mod asks for Go 1.26) available, idempotently, and prints the path of its `go`.
#
# A `go` on the PATH at that version or newer is used as it is. Otherwise the official
# toolchain is taken from the Go module proxy as the module golang.org/toolchain (the
# same module `GOTOOLCHAIN` switching downloads), with whatever older Go is at hand
# (Debian 12's golang-go 1.19 is installed if there is none), and unpacked into
# ${SLUICE_CACHE:-~/.cache/sluice}/go-<version>. Any failure exits non-zero with the
# reason: the franz-go test then fails rather than silently not running.
set -euo pipefail
want_minor=26
version=${SLUICE_GO_VERSION:-1.26.8}
cache=${SLUICE_CACHE:-$HOME/.cache/sluice}
dest=$cache/go-$version

go_minor() { "$1" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p'; }

if command -v go >/dev/null; then
    m=$(go_minor "$(command -v go)")
    if [[ -n $m && $m -ge $want_minor ]]; then command -v go; exit 0; fi
fi
if [[ -x $dest/bin/go ]]; then echo "$dest/bin/go"; exit 0; fi

boot=$(command -v go || true)
if [[ -z $boot ]]; then
    echo "install-go: installing Debian's golang-go to fetch Go $version with" >&2
    SUDO=; [[ $(id -u) -eq 0 ]] || SUDO=sudo
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends golang-go >&2
    boot=$(command -v go)
fi
echo "install-go: fetching Go $version (module golang.org/toolchain) with $("$boot" version)" >&2
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
mod=golang.org/toolchain@v0.0.1-go$version.linux-$("$boot" env GOARCH)
# A throwaway module so that old and new Go alike accept `go mod download`.
printf 'module sluice.local/fetchgo\n\ngo 1.19\n' >"$work/go.mod"
(cd "$work" && GOTOOLCHAIN=local GOFLAGS=-modcacherw GOMODCACHE="$work/mod" \
    "$boot" mod download "$mod" >&2) || { echo "install-go: could not fetch $mod" >&2; exit 1; }
mkdir -p "$cache"
rm -rf "$dest.tmp"
cp -r "$work/mod/$mod" "$dest.tmp"
chmod -R u+w "$dest.tmp"
# Module zips carry no file modes: the toolchain's programs need theirs back.
chmod +x "$dest.tmp"/bin/* "$dest.tmp"/pkg/tool/*/*
m=$(go_minor "$dest.tmp/bin/go")
[[ -n $m && $m -ge $want_minor ]] || { echo "install-go: $dest.tmp/bin/go does not run" >&2; exit 1; }
mv "$dest.tmp" "$dest"
echo "$dest/bin/go"
