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
# The CUDA library beside the binary runs inside the users' processes: loaded
# under glibc 2.31 with every symbol bound at once (LD_BIND_NOW), a symbol
# version newer than 2.31 fails the load.
cudalib=$(dirname "$bin")/libflamewatch-cuda.so
if [ -f "$cudalib" ]; then
	LD_BIND_NOW=1 "$lib/ld-linux-x86-64.so.2" --library-path "$lib" --preload "$cudalib" \
		"$bin" --version >/dev/null
	echo "libflamewatch-cuda.so under glibc 2.31: loaded, every symbol bound"
fi
rm -rf "$out/data"
"$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$bin" server --listen 127.0.0.1:0 \
	--data "$out/data" 2>/dev/null & pid=$!
sleep 1
kill "$pid" && wait "$pid" || true
[ -f "$out/data/flamewatch.db" ] && echo "server under glibc 2.31: store created"
# TLS (static OpenSSL: its threads and dladdr go through the 2.31 shims): an
# HTTPS server and an agent shipping to it, verifying a test CA.
(
	cd "$out"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
		-keyout ca.key -out ca.pem -subj "/CN=glibc 2.31 test CA" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key \
		-out srv.csr -subj "/CN=glibc 2.31 test server" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1\n' > ext.cnf
	openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
		-extfile ext.cnf -out srv.pem 2>/dev/null
)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Not through run(): $! must be the process itself, not a subshell, for kill.
"$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$bin" server --listen 127.0.0.1:$port \
	--data "$out/tls-data" --tls-cert "$out/srv.pem" --tls-key "$out/srv.key" 2>/dev/null & pid=$!
sleep 1
"$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$bin" agent --server https://127.0.0.1:$port \
	--ca-file "$out/ca.pem" --node glibc231 -F 99 --interval 1s 2>"$out/agent.log" & apid=$!
sleep 8
kill "$apid" && wait "$apid" || true
now=$(date +%s)
n=$(curl -s --cacert "$out/ca.pem" "https://127.0.0.1:$port/api/v1/profile?format=json&query=%7Bnode%3D%22glibc231%22%7D&from=$((now - 60))&to=$((now + 1))" |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["total"])')
kill "$pid" && wait "$pid" || true
echo "agent -> server over HTTPS under glibc 2.31: $n samples"
[ "$n" -gt 0 ]
