#!/bin/sh
# What HTTPS between agents and the server (`server --tls-cert/--tls-key`)
# costs the server, next to plain HTTP in the same run (bench/INGEST.md,
# "TLS"). Makes a CA and a server certificate for 127.0.0.1 with the openssl
# command line, then runs bench/ingest_bench ROUNDS times each way,
# alternating (plain, tls, plain, tls, ...), each against a fresh server
# with a fresh SQLite data directory. Prints one line per run and the
# medians. The client speaks TLS through src/common/tls.c, as the agent.
#
#   make && sh bench/ingest_tls.sh [extra ingest_bench options]
set -eu

NODES=${NODES:-20}
HOURS=${HOURS:-0.1}
ROUNDS=${ROUNDS:-3}
TMPDIR=${TMPDIR:-/var/tmp}

[ -x build/flamewatch ] || { echo "run make first" >&2; exit 1; }
if [ ! -x build/ingest_bench ] || [ bench/ingest_bench.c -nt build/ingest_bench ] ||
   [ build/libflamewatch.a -nt build/ingest_bench ]; then
	gcc -O2 -g -std=gnu11 -D_GNU_SOURCE -Isrc -Ibuild -Ibuild/gen bench/ingest_bench.c \
		build/libflamewatch.a -Wl,-Bstatic -lbpf -ldw -lelf -lprotobuf-c -liberty \
		-levent_openssl -levent_extra -levent_core -lssl -lcrypto -lsqlite3 -lzstd \
		-llzma -lbz2 -lz -Wl,-Bdynamic -lpthread -ldl -lm -o build/ingest_bench
fi

dir=$(mktemp -d "$TMPDIR/fw-ingest-tls-XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
(
	cd "$dir"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-keyout ca.key -out ca.pem -subj "/CN=flamewatch bench CA" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout server.key -out server.csr -subj "/CN=flamewatch bench server" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > ext.cnf
	openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
		-extfile ext.cnf -out server.pem 2>/dev/null
)

echo "ingest_bench: $NODES nodes, $HOURS h, SQLite, $ROUNDS rounds"
echo
echo "| run | samples/s | server CPU us/batch | POST p50 ms | POST p99 ms |"
echo "|---|---|---|---|---|"
: > "$dir/results"
r=1
while [ $r -le "$ROUNDS" ]; do
	for mode in plain tls; do
		set --
		[ $mode = tls ] && set -- --tls-cert "$dir/server.pem" --tls-key "$dir/server.key" \
			--tls-ca "$dir/ca.pem"
		build/ingest_bench --nodes "$NODES" --hours "$HOURS" --pregen --reps 1 \
			--tmp "$TMPDIR" "$@" > "$dir/run.txt" 2>&1 || { cat "$dir/run.txt" >&2; exit 1; }
		grep -q ' 0 rejected' "$dir/run.txt" || { echo "$mode run $r: batches rejected" >&2; cat "$dir/run.txt" >&2; exit 1; }
		line=$(awk -v mode=$mode -v r=$r '
			/^\| wall time/ { s = $0; sub(/.*\(/, "", s); sub(/ samples.*/, "", s); rate = s }
			/^\| server CPU \(utime/ { s = $0; sub(/ us per batch.*/, "", s); sub(/.* /, "", s); us = s }
			/^\| POST latency/ { s = $0; sub(/.*p50 /, "", s); sub(/ ms.*/, "", s); p50 = s
				s = $0; sub(/.*p99 /, "", s); sub(/ ms.*/, "", s); p99 = s }
			END { printf "%s %s %s %s %s %s\n", mode, r, rate, us, p50, p99 }' "$dir/run.txt")
		echo "$line" >> "$dir/results"
		echo "$line" | awk '{ printf "| %s %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }'
	done
	r=$((r + 1))
done

echo
awk '
	function median(a, n,   i, j, t) {
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	$1 == "plain" { pr[++np] = $3; pu[np] = $4; p5[np] = $5; pp[np] = $6 }
	$1 == "tls" { tr[++nt] = $3; tu[nt] = $4; t5[nt] = $5; tp[nt] = $6 }
	END {
		a = median(pr, np); b = median(tr, nt); printf "median samples/s: plain %d, tls %d, tls/plain %.2f\n", a, b, b / a
		a = median(pu, np); b = median(tu, nt); printf "median server CPU per batch: plain %d us, tls %d us, tls/plain %.2f\n", a, b, b / a
		a = median(p5, np); b = median(t5, nt); printf "median POST p50: plain %.1f ms, tls %.1f ms, tls/plain %.2f\n", a, b, b / a
		a = median(pp, np); b = median(tp, nt); printf "median POST p99: plain %.1f ms, tls %.1f ms, tls/plain %.2f\n", a, b, b / a
	}' "$dir/results"
