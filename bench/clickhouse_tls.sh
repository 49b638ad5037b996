#!/bin/sh
# What TLS to ClickHouse (--store clickhouse://...?secure=1) costs the
# flamewatch server and clickhouse-server, next to plain HTTP in the same
# run (bench/CLICKHOUSE.md, "TLS"). Starts its own clickhouse-server
# (Debian's) serving both http_port and https_port, with a CA and server
# certificate made here by the openssl command line, then plays the same
# simulated agents through bench/ingest_bench ROUNDS times against a server
# on each port, alternating (plain, tls, plain, tls, ...), each run into a
# fresh database. Prints one line per run and the medians.
#
#   make && sh bench/clickhouse_tls.sh [extra ingest_bench options]
#
# Run from the repository root as root. Needs clickhouse-server, curl, openssl.
set -eu

NODES=${NODES:-50}
CPUS=${CPUS:-16}
HZ=${HZ:-19}
HOURS=${HOURS:-0.0833333}	# 5 minutes
ROUNDS=${ROUNDS:-3}
TMPDIR=${TMPDIR:-/var/tmp}
CH=${CLICKHOUSE_SERVER:-/usr/sbin/clickhouse-server}

[ -x build/flamewatch ] || { echo "run make first" >&2; exit 1; }
if [ ! -x build/ingest_bench ] || [ bench/ingest_bench.c -nt build/ingest_bench ]; then
	gcc -O2 -g -std=gnu11 -D_GNU_SOURCE -Isrc -Ibuild -Ibuild/gen bench/ingest_bench.c \
		build/libflamewatch.a -Wl,-Bstatic -lbpf -ldw -lelf -lprotobuf-c -liberty \
		-levent_openssl -levent_extra -levent_core -lssl -lcrypto -lsqlite3 -lzstd \
		-llzma -lbz2 -lz -Wl,-Bdynamic -lpthread -ldl -lm -o build/ingest_bench
fi

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

dir=$(mktemp -d "$TMPDIR/fw-ch-tls-XXXXXX")
http=$(free_port)
https=$(free_port)
tcp=$(free_port)
mkdir -p "$dir/data" "$dir/tmp" "$dir/log" "$dir/fmt" "$dir/pki"
(
	cd "$dir/pki"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-keyout ca.key -out ca.pem -subj "/CN=flamewatch bench CA" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-keyout server.key -out server.csr -subj "/CN=flamewatch bench clickhouse" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > ext.cnf
	openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
		-extfile ext.cnf -out server.pem 2>/dev/null
)
cat > "$dir/users.xml" <<EOF
<?xml version="1.0"?><yandex><profiles><default></default></profiles>
<users><default><password></password><networks><ip>127.0.0.1</ip></networks>
<profile>default</profile><quota>default</quota></default></users>
<quotas><default></default></quotas></yandex>
EOF
cat > "$dir/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$dir/log/server.log</log><errorlog>$dir/log/err.log</errorlog></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>$http</http_port>
  <https_port>$https</https_port>
  <tcp_port>$tcp</tcp_port>
  <openSSL><server>
    <certificateFile>$dir/pki/server.pem</certificateFile>
    <privateKeyFile>$dir/pki/server.key</privateKeyFile>
    <verificationMode>none</verificationMode>
    <loadDefaultCAFile>false</loadDefaultCAFile>
    <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
  </server></openSSL>
  <path>$dir/data/</path>
  <tmp_path>$dir/tmp/</tmp_path>
  <format_schema_path>$dir/fmt/</format_schema_path>
  <mark_cache_size>5368709120</mark_cache_size>
  <users_config>$dir/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
</yandex>
EOF
"$CH" --config-file="$dir/config.xml" > "$dir/log/stdout" 2>&1 &
chpid=$!
cleanup() {
	kill "$chpid" 2>/dev/null || true
	wait "$chpid" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
i=0
until [ "$(curl -s --cacert "$dir/pki/ca.pem" "https://127.0.0.1:$https/?query=SELECT%201" || true)" = 1 ]; do
	i=$((i + 1))
	[ $i -lt 300 ] || { echo "clickhouse-server did not start" >&2; cat "$dir/log/err.log" >&2; exit 1; }
	sleep 0.2
done

cpu() {	# utime + stime of a process, in clock ticks
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}
hz=$(getconf CLK_TCK)

echo "ClickHouse $(curl -s "http://127.0.0.1:$http/?query=SELECT%20version()"): $NODES nodes x $CPUS CPUs x $HZ Hz, $HOURS h, $ROUNDS rounds"
echo
echo "| run | samples/s | server CPU us/batch | POST p99 ms | clickhouse-server CPU s |"
echo "|---|---|---|---|---|"
: > "$dir/results"
r=1
while [ $r -le "$ROUNDS" ]; do
	for mode in plain tls; do
		if [ $mode = plain ]; then
			uri="clickhouse://127.0.0.1:$http/plain_$r"
		else
			uri="clickhouse://127.0.0.1:$https/tls_$r?secure=1&ca=$dir/pki/ca.pem"
		fi
		c0=$(cpu "$chpid")
		build/ingest_bench --store "$uri" --nodes "$NODES" --cpus "$CPUS" --hz "$HZ" \
			--hours "$HOURS" --pregen --procs 2 --stacks 30 --reps 1 --tmp "$TMPDIR" "$@" \
			> "$dir/run.txt" 2>&1 || { cat "$dir/run.txt" >&2; exit 1; }
		c1=$(cpu "$chpid")
		grep -q ' 0 rejected' "$dir/run.txt" || { echo "$mode run $r: batches rejected" >&2; cat "$dir/run.txt" >&2; exit 1; }
		line=$(awk -v mode=$mode -v r=$r -v c0="$c0" -v c1="$c1" -v hz="$hz" '
			/^\| wall time/ { s = $0; sub(/.*\(/, "", s); sub(/ samples.*/, "", s); rate = s }
			/^\| server CPU \(utime/ { s = $0; sub(/ us per batch.*/, "", s); sub(/.* /, "", s); us = s }
			/^\| POST latency/ { s = $0; sub(/.*p99 /, "", s); sub(/ ms.*/, "", s); p99 = s }
			END { printf "%s %s %s %s %s %.1f\n", mode, r, rate, us, p99, (c1 - c0) / hz }' "$dir/run.txt")
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
	$1 == "plain" { pr[++np] = $3; pu[np] = $4; pp[np] = $5; pc[np] = $6 }
	$1 == "tls" { tr[++nt] = $3; tu[nt] = $4; tp[nt] = $5; tc[nt] = $6 }
	END {
		a = median(pr, np); b = median(tr, nt); printf "median samples/s: plain %d, tls %d, tls/plain %.2f\n", a, b, b / a
		a = median(pu, np); b = median(tu, nt); printf "median server CPU per batch: plain %d us, tls %d us, tls/plain %.2f\n", a, b, b / a
		a = median(pp, np); b = median(tp, nt); printf "median POST p99: plain %.1f ms, tls %.1f ms, tls/plain %.2f\n", a, b, b / a
		a = median(pc, np); b = median(tc, nt); printf "median clickhouse-server CPU: plain %.1f s, tls %.1f s, tls/plain %.2f\n", a, b, b / a
	}' "$dir/results"
