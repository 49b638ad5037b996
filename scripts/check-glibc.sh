#!/bin/sh
# check-glibc.sh FILE MAX: fails when FILE needs a glibc symbol version newer
# than MAX (e.g. 2.31), naming the symbols.
set -eu
file=$1 max=$2
too_new=$(objdump -T "$file" | awk -v max="$max" '
	function newer(v, m,   a, b, i) {
		split(v, a, "."); split(m, b, ".")
		for (i = 1; i <= 3; i++) {
			if ((a[i] + 0) > (b[i] + 0)) return 1
			if ((a[i] + 0) < (b[i] + 0)) return 0
		}
		return 0
	}
	{
		for (i = 1; i <= NF; i++)
			if (match($i, /GLIBC_[0-9.]+/)) {
				v = substr($i, RSTART + 6, RLENGTH - 6)
				if (newer(v, max)) print $NF " (GLIBC_" v ")"
			}
	}' | sort -u)
if [ -n "$too_new" ]; then
	echo "$file needs glibc newer than $max:" >&2
	echo "$too_new" | sed 's/^/  /' >&2
	exit 1
fi
