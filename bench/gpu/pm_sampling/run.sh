#!/bin/bash
# Everything the PM sampling evaluation (issue 25) runs on the GPU machine,
# in one go: builds nothing, writes its logs under a work folder, tars them
# into $OUT, and prints analyze.py's table last.
#
#   bench/gpu/pm_sampling/build.sh              # here, no GPU needed
#   bash build-pm/bench/gpu/pm_sampling/run.sh  # there; OUT=/some/dir to keep the logs
#
# CUPTI_DIR: the folder holding libcupti.so.13 and libnvperf_*.so (default:
# CUDA's default layout). STEPS: which steps to run (default all).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$(cd "$here/../../.." && pwd)}
out=${OUT:-/tmp/pm_out}
w=${WORK:-/tmp/pmrun}
steps=${STEPS:-info truth prod copy hwbuf latest inject cost shared ncu nonroot}
cuda=${CUDA_HOME:-/usr/local/cuda}
cupti_dir=${CUPTI_DIR:-}
if [ -z "$cupti_dir" ]; then
	for d in "$cuda/targets/x86_64-linux/lib" "$cuda/extras/CUPTI/lib64" "$cuda/lib64"; do
		[ -e "$d/libcupti.so.13" ] && { cupti_dir=$d; break; }
	done
fi
export PMS_CUPTI_PATH=$cupti_dir/libcupti.so.13
# libcupti finds libnvperf_host/target through the loader's path.
export LD_LIBRARY_PATH=$cupti_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
rm -rf "$w"
mkdir -p "$w"
exec > >(tee -a "$w/run.log") 2>&1
P=$bin/pm_probe
FULL=gr__compute_cycles_active.sum,gr__cycles_active.sum,gpu__cycles_active.sum,gr__cycles_elapsed.max,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max,gr__ctas_launched.sum,gpu__engine_cycles_active_any_syncce.sum,gpu__time_duration.sum,gr__dispatch_count.sum,gr__compute_cycles_active.avg.pct_of_peak_sustained_elapsed
MIN=gr__compute_cycles_active.sum,gr__cycles_active.sum,gr__cycles_elapsed.max
# What the product would run: one busy metric and its normaliser; a counter
# data image sized for one decode period (CUPTI re-initialises all of it
# after every decode, so its size, not the sample count, sets the cost).
PROD=gr__compute_cycles_active.sum,gr__cycles_elapsed.max
COPYSET=gr__compute_cycles_active.sum,gr__cycles_elapsed.max,gpu__cycles_active.sum,gpu__engine_cycles_active_any_syncce.sum,gpu__scheduler_engine_asyncce0_cycles_active.sum,pcie__read_bytes.sum,pcie__write_bytes.sum,gr__cycles_active.sum,sm__cycles_active.max,sm__cycles_elapsed.max,gr__compute_cycles_active.avg.pct_of_peak_sustained_elapsed
prod_args() { echo "--metrics $PROD --interval $1 --decode-ms 100 --maxsamples $((100000000 / $1 * 3 / 2 + 64)) --hwbuf 4194304"; }
t() { local s=$1; shift; echo "+ $*"; timeout -k 5 "$s" "$@"; echo "  (rc $?)"; }
has() { case " $steps " in *" $1 "*) return 0;; esac; return 1; }
# Waits until a holding probe has started sampling (its meta file says so).
wait_hold() { for _ in $(seq 100); do grep -q hold_from_rt "$1.meta.txt" 2>/dev/null && return 0; sleep 0.1; done; echo "  $1 never started"; }
echo "== pm_sampling run $(date -u +%FT%TZ), CUPTI $PMS_CUPTI_PATH"

if has info; then
	{
		uname -a
		nvidia-smi --query-gpu=name,driver_version,mig.mode.current,compute_mode,persistence_mode --format=csv
		nvidia-smi -q | grep -iE 'product name|mig mode|current *:|pending *:|virtualization|host vgpu' | head -20
		echo "-- /proc/driver/nvidia/params (profiling)"
		grep -i profil /proc/driver/nvidia/params
		ls -l /dev/nvidia*
		echo "-- tools"
		for x in ncu nsys dcgmi nv-hostengine setpriv taskset; do printf '%s: %s\n' "$x" "$(command -v $x || echo absent)"; done
		ls "$cupti_dir" | grep -E 'cupti|nvperf'
		nproc
	} > "$w/info.txt" 2>&1
	cat "$w/info.txt"
	t 60 "$P" list --describe > "$w/list.txt" 2>&1
	grep -cE '^(counter|ratio|throughput) ' "$w/list.txt"
	command -v ncu >/dev/null && t 90 ncu --query-metrics-collection pmsampling --chip gh100 > "$w/ncu_pmsampling_metrics.txt" 2>&1
fi

if has truth; then
	for iv in 20000 50000 100000; do
		t 60 "$P" truth --metrics "$FULL" --interval $iv --out "$w/truth_full_$iv"
	done
	t 60 "$P" truth --metrics "$FULL" --interval 1000000 --ctx-first --out "$w/truth_full_1000000"
	for iv in 10000 20000 100000 1000000; do
		t 60 "$P" truth --metrics "$MIN" --interval $iv --out "$w/truth_min_$iv"
	done
fi

if has prod; then
	t 60 "$P" truth $(prod_args 100000) --activity --out "$w/truth_prod_100000"
	for iv in 20000 1000000; do
		t 60 "$P" truth $(prod_args $iv) --out "$w/truth_prod_$iv"
	done
fi

if has copy; then
	# Copies as well as kernels: which metric sees the copy engines? Eleven
	# metrics, SM ones among them, make records of several KB: a 4 MiB
	# buffer overflowed within 100 ms at 100 us.
	t 60 "$P" truth --metrics "$COPYSET" --interval 100000 --decode-ms 100 --maxsamples 1564 --hwbuf 67108864 \
		--copies --activity --out "$w/truth_copy_100000"
fi

if has hwbuf; then
	# How many bytes a sample takes in the hardware buffer: fill it for a
	# second between decodes at 10 us (100k samples) and look for overflow;
	# and whether the buffer shows in the process's memory.
	for hb in 262144 1048576 4194304 67108864; do
		t 30 "$P" hold --seconds 2 --interval 10000 --hwbuf $hb --decode-ms 1000 --maxsamples 150000 \
			--metrics "$PROD" --out "$w/hwbuf_$hb"
	done
fi

if has latest; then
	# The same overflow with KEEP_LATEST: are the newest records kept?
	t 30 "$P" hold --seconds 2 --interval 10000 --hwbuf 1048576 --decode-ms 1000 --maxsamples 150000 \
		--keep-latest --metrics "$PROD" --out "$w/hwbuf_latest_1048576"
fi

if has inject; then
	# A PyTorch process we did not write: PM sampling enabled from cuInit
	# through CUDA_INJECTION64_PATH, beside the stall log it writes.
	(cd "$w" && t 180 env PMS_OUT="$w/inject" PMS_METRICS="$MIN" PMS_INTERVAL=100000 \
		CUDA_INJECTION64_PATH="$bin/libpm_inject.so" \
		python3 "$here/../stall_train.py" --rounds 6 --train 0.6 --stall 0.4 --warmup 1.0 --log "$w/stalls.json")
fi

if has cost; then
	# Interleaved on/off processes (ABBA), pinned to the same two CPUs; the
	# decode thread shares them, as it would inside an application.
	# COST_ARGS: the sampling settings (default: the product's at 100 us).
	cost_args=${COST_ARGS:-$(prod_args 100000)}
	for i in $(seq ${COST_PAIRS:-8}); do
		if [ $((i % 2)) = 1 ]; then order="on off"; else order="off on"; fi
		for pm in $order; do
			t 60 taskset -c 2,3 "$P" cost --pm $pm $cost_args --seconds 2 --out "$w/cost.txt" > /dev/null
		done
	done
	cat "$w/cost.txt"
fi

if has shared; then
	# Per device: A samples (no work of its own) while B, without CUPTI,
	# runs the schedule; C tries to start a second PM sampling session.
	"$P" hold --seconds 5 --metrics "$MIN" --interval 100000 --out "$w/shared_hold" &
	a=$!
	wait_hold "$w/shared_hold"
	"$P" work --out "$w/shared_work" &
	b=$!
	t 30 "$P" try --metrics "$MIN" --interval 100000 > "$w/conflict_second_pm.txt" 2>&1
	cat "$w/conflict_second_pm.txt"
	wait $b
	wait $a
fi

if has ncu && command -v ncu >/dev/null; then
	# Nsight Compute's range profiler beside PM sampling, both ways. Clock
	# control off: the card's clocks are not ours to lock.
	"$P" hold --seconds 10 --metrics "$MIN" --interval 100000 --out "$w/ncu_hold" &
	a=$!
	wait_hold "$w/ncu_hold"
	t 60 ncu --clock-control none -c 3 --metrics gr__cycles_active.sum "$P" work --out "$w/ncu_work" > "$w/conflict_ncu_while_pm.txt" 2>&1
	tail -15 "$w/conflict_ncu_while_pm.txt"
	wait $a
	grep -E 'samples|error' "$w/ncu_hold.meta.txt"
	ncu --clock-control none -c 6 --metrics gr__cycles_active.sum "$P" work --out "$w/ncu_work2" > "$w/conflict_ncu2.txt" 2>&1 &
	n=$!
	sleep 1
	t 40 "$P" try --attempts 10 --gap-ms 300 --metrics "$MIN" > "$w/conflict_pm_while_ncu.txt" 2>&1
	cat "$w/conflict_pm_while_ncu.txt"
	wait $n
	tail -8 "$w/conflict_ncu2.txt"
fi

if has nonroot; then
	# Unprivileged: the same probe as user nobody.
	mkdir -p /tmp/pmn
	cp "$P" /tmp/pmn/
	chmod 755 /tmp/pmn /tmp/pmn/pm_probe
	{
		echo "RmProfilingAdminOnly: $(grep -i RmProfilingAdminOnly /proc/driver/nvidia/params)"
		setpriv --reuid=65534 --regid=65534 --clear-groups id
		t 30 setpriv --reuid=65534 --regid=65534 --clear-groups /tmp/pmn/pm_probe try --metrics "$MIN"
		t 30 setpriv --reuid=65534 --regid=65534 --clear-groups /tmp/pmn/pm_probe list --pattern gr__cycles_active
	} > "$w/nonroot.txt" 2>&1
	cat "$w/nonroot.txt"
fi

tar czf "$out/pm_logs.tgz" -C "$w" .
echo "== analysis"
timeout 240 python3 "$here/analyze.py" "$w" > /dev/null 2>"$w/analyze.err"
cp "$w/summary.txt" "$out/" 2>/dev/null
cp "$w/run.log" "$out/"
cat "$w/summary.txt" 2>/dev/null || cat "$w/analyze.err"
