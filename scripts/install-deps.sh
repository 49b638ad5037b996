#!/bin/sh
# Installs the Debian packages flamewatch builds and tests with, if any are
# missing. Non-interactive; needs root (or sudo). Prints nothing when all is
# there, so `make` stays quiet on a machine that is already set up.
set -eu

PKGS="clang llvm make gcc g++ pkg-config bpftool libbpf-dev libelf-dev libdw-dev
libiberty-dev zlib1g-dev libzstd-dev liblzma-dev libbz2-dev libsqlite3-dev
libevent-dev libssl-dev libprotobuf-c-dev protobuf-c-compiler libcmocka-dev
python3 python3-pytest systemtap-sdt-dev golang-go linux-perf procps time
libc6-dbg prometheus libclang-rt-14-dev bpftrace chromium firefox-esr python3-yaml
clickhouse-server clickhouse-client ruby clang-format cppcheck"

# The web UI is built with npm (esbuild) and tested with headless Chromium
# (playwright-core) and headless Firefox ESR (puppeteer-core, WebDriver BiDi).
# A Node.js that is already on the PATH (for example from another packager)
# is kept; otherwise Debian's nodejs and npm are installed.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	PKGS="$PKGS nodejs npm"
fi

# The Rust workload needs a rustc; Debian's is fine when rustup's is absent.
if ! command -v rustc >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/rustc" ]; then
	PKGS="$PKGS rustc"
fi

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed'; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

echo "flamewatch: installing missing Debian packages:$missing" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		echo "flamewatch: need root (or sudo) to install:$missing" >&2
		exit 1
	fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
