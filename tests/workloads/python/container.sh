#!/bin/sh
# Runs tests/workloads/python/chain.py under a pyenv CPython inside a
# container of its own: new pid and mount namespaces, a root of its own
# (a temporary directory with /usr, /lib, /lib64 and the interpreter's
# prefix bound in), the interpreter at /py, not at its host path.
#   container.sh PREFIX SCRIPT SECONDS      (root)
set -eu
PY=$1
SCRIPT=$2
SECS=$3
TOP=$(mktemp -d "${TMPDIR:-/tmp}/fw-container.XXXXXX")
trap 'rm -rf "$TOP"' EXIT
R=$TOP/root
mkdir -p "$R/usr" "$R/lib" "$R/lib64" "$R/py" "$R/proc" "$R/w"
cp "$SCRIPT" "$R/w/chain.py"
unshare --fork --pid --mount sh -c "mount --make-rprivate / &&
	mount --bind /usr '$R/usr' && mount --bind /lib '$R/lib' && mount --bind /lib64 '$R/lib64' &&
	mount --bind '$PY' '$R/py' && mount -t proc proc '$R/proc' &&
	exec chroot '$R' /usr/bin/env LD_LIBRARY_PATH=/py/lib PYTHONHOME=/py \
		/py/bin/$(basename "$(ls "$PY"/bin/python3.* | grep -E 'python3\.[0-9]+$' | head -1)") \
		/w/chain.py chain $SECS"
