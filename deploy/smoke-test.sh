#!/bin/sh
# deploy/smoke-test.sh [DIST_DIR]: runs the release binary on this machine
# (as root) and prints what it saw, for the closing note on another
# distribution (e.g. the Ubuntu 24.04 GPU machine):
#   make dist && sudo deploy/smoke-test.sh dist
# Needs nothing but the files in DIST_DIR; prints the glibc and kernel, the
# feature check, then profiles the host for 5 s while a shell loop burns CPU.
set -eu
dir=${1:-dist}
fw=$dir/flamewatch
out=$(mktemp -d)
trap 'rm -rf "$out"; [ -n "${burner:-}" ] && kill "$burner" 2>/dev/null || true' EXIT

echo "== host"
uname -sr
(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || true
ldd --version 2>/dev/null | head -1 || true
echo "== $fw"
"$fw" --version
echo "== flamewatch check"
"$fw" check
echo "== flamewatch record -a -d 5 (a shell loop burns one CPU)"
sh -c 'while :; do :; done' &
burner=$!
"$fw" record -a -d 5 -o "$out/host.folded"
kill "$burner"; burner=
total=$(awk '{s += $NF} END {print s + 0}' "$out/host.folded")
echo "samples: $total; by process (top 10):"
awk '{split($1, f, ";"); n[f[1]] += $NF} END {for (c in n) print n[c], c}' "$out/host.folded" |
	sort -rn | head -10
echo "hottest stacks:"
awk '{print $NF, $1}' "$out/host.folded" | sort -rn | head -5 | cut -c1-300
if [ -f "$dir/libflamewatch-cuda.so" ]; then
	echo "== libflamewatch-cuda.so"
	objdump -T "$dir/libflamewatch-cuda.so" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1 || true
fi
[ "$total" -gt 0 ]
