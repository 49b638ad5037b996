#!/bin/sh
# Load test of the ClickHouse store next to SQLite (bench/CLICKHOUSE.md):
# simulated agents (ingest_bench's fleet: 20 nodes x 8 CPUs x 19 Hz, 50,000
# stacks with churn, 1 h of samples) sent as fast as one server takes them,
# through bench/ingest_bench,
# once against `flamewatch server --store clickhouse://...` and once against
# `flamewatch server --data DIR`; then the query API is timed (1 h and 24 h
# windows). Starts its own clickhouse-server (Debian's) on free ports with
# its data under $TMPDIR (default /var/tmp) and stops it afterwards. Prints
# both reports and ClickHouse's own CPU time, which the flamewatch server's
# does not include.
#
#   make && sh bench/clickhouse_load.sh [extra ingest_bench options]
#
# Run from the repository root as root (clickhouse-server drops nothing:
# it runs as the calling user). Needs clickhouse-server, curl.
set -eu

NODES=${NODES:-20}
CPUS=${CPUS:-8}
HZ=${HZ:-19}
HOURS=${HOURS:-1}
TMPDIR=${TMPDIR:-/var/tmp}
CH=${CLICKHOUSE_SERVER:-/usr/sbin/clickhouse-server}

[ -x build/flamewatch ] || { echo "run make first" >&2; exit 1; }
if [ ! -x build/ingest_bench ] || [ bench/ingest_bench.c -nt build/ingest_bench ]; then
	gcc -O2 -g -std=gnu11 -D_GNU_SOURCE -Isrc -Ibuild -Ibuild/gen bench/ingest_bench.c \
		build/libflamewatch.a -Wl,-Bstatic -lbpf -ldw -lelf -lprotobuf-c -liberty \
		-levent_openssl -levent_extra -levent_core -lssl -lcrypto -lsqlite3 -lzstd -llzma -lbz2 -lz -Wl,-Bdynamic \
		-lpthread -ldl -lm -o build/ingest_bench
fi

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

dir=$(mktemp -d "$TMPDIR/fw-ch-load-XXXXXX")
http=$(free_port)
tcp=$(free_port)
mkdir -p "$dir/data" "$dir/tmp" "$dir/log" "$dir/fmt"
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
  <tcp_port>$tcp</tcp_port>
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
until [ "$(curl -s "http://127.0.0.1:$http/?query=SELECT%201" || true)" = 1 ]; do
	i=$((i + 1))
	[ $i -lt 300 ] || { echo "clickhouse-server did not start" >&2; cat "$dir/log/err.log" >&2; exit 1; }
	sleep 0.2
done

cpu() {	# utime + stime of a process, in clock ticks
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}
hz=$(getconf CLK_TCK)

echo "== ClickHouse $(curl -s "http://127.0.0.1:$http/?query=SELECT%20version()"): $NODES nodes x $CPUS CPUs x $HZ Hz, $HOURS h"
c0=$(cpu "$chpid")
build/ingest_bench --store "clickhouse://127.0.0.1:$http/load" --nodes "$NODES" --cpus "$CPUS" \
	--hz "$HZ" --hours "$HOURS" --pregen --tmp "$TMPDIR" "$@"
c1=$(cpu "$chpid")
echo
echo "clickhouse-server CPU during ingest and queries: $(echo "$c0 $c1 $hz" | awk '{ printf "%.1f s", ($2 - $1) / $3 }')"
curl -s "http://127.0.0.1:$http/" --data-binary "SELECT table, sum(rows), sum(bytes_on_disk), count() FROM system.parts WHERE database = 'load' AND active GROUP BY table ORDER BY table FORMAT PrettyCompactMonoBlock"

echo
echo "== SQLite: $NODES nodes x $CPUS CPUs x $HZ Hz, $HOURS h"
build/ingest_bench --nodes "$NODES" --cpus "$CPUS" --hz "$HZ" --hours "$HOURS" --pregen \
	--tmp "$TMPDIR" "$@"
