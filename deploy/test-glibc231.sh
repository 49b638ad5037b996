#!/bin/sh
# deploy/test-glibc231.sh [BINARY]: runs the release binary (default
# dist/flamewatch) against Debian 11's glibc 2.31 — the oldest the release
# supports — without a Debian 11 machine: apt downloads bullseye's libc6 into
# a scratch directory (its own apt state, nothing installed), and the binary
# is started through that glibc's dynamic loader. Needs root (BPF) and access
# to deb.debian.org.
set -eu
bin=$(realpath "${1:-dist/flamewatch}")
work=${TMPDIR:-/tmp}/flamewatch-glibc231
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/root"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
	> "$work/sources.list"
set -- -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \
	-o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Dir::State::Status=/dev/null
if ! ls "$work"/libc6_2.31-*_amd64.deb >/dev/null 2>&1; then
	apt-get "$@" -qq update
	version=$(apt-cache "$@" madison libc6 | awk '/bullseye/ {print $3; exit}')
	(cd "$work" && apt-get "$@" -qq download "libc6:amd64=$version")
	dpkg-deb -x "$work"/libc6_2.31-*_amd64.deb "$work/root"
fi
lib=$work/root/lib/x86_64-linux-gnu
run() { "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$bin" "$@"; }
echo "== glibc: $("$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$lib/libc.so.6" | head -1)"
run --version
run check
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run record -q -d 2 -o "$out/sh.folded" -- sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'
echo "record under glibc 2.31: $(awk '{s += $NF} END {print s + 0}' "$out/sh.folded") samples"
rm -rf "$out/data"
"$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$bin" server --listen 127.0.0.1:0 \
	--data "$out/data" 2>/dev/null & pid=$!
sleep 1
kill "$pid" && wait "$pid" || true
[ -f "$out/data/flamewatch.db" ] && echo "server under glibc 2.31: store created"
