#!/bin/sh
# Builds the PM sampling probe (bench/gpu/pm_sampling) into OUT (default
# build-pm/ at the repository root, which .gitignore ignores), with a copy of
# the scripts the device run needs, so that OUT alone can travel to the GPU
# machine.
#
#   bench/gpu/pm_sampling/build.sh [OUT]
#
# Needs gcc, and CUDA's nvcc and headers (CUDA_HOME, default /usr/local/cuda);
# no GPU. CUPTI is not linked: pm_probe and libpm_inject.so dlopen it.
# cupti_profiler_host.h includes <string> though it declares only C;
# src/gpu/cshim/ (shared with the product) gives the C compiler an empty one.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$root/build-pm}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out/obj" "$out/bench/gpu/pm_sampling"
cflags="-O2 -g -std=gnu11 -Wall -Wextra -Werror -fPIC -I$root/src/gpu/cshim -isystem $cuda/include"
for f in pms pm_probe pm_inject; do
	gcc $cflags -c "$here/$f.c" -o "$out/obj/$f.o"
done
"$cuda/bin/nvcc" -O2 -arch=sm_90 -Xcompiler -fPIC -c "$here/workload.cu" -o "$out/obj/workload.o"
stubs=$cuda/lib64/stubs
gcc -o "$out/pm_probe" "$out/obj/pm_probe.o" "$out/obj/pms.o" "$out/obj/workload.o" \
	-L"$cuda/lib64" -lcudart_static -L"$stubs" -lcuda -ldl -lpthread -lrt -lstdc++
gcc -shared -o "$out/libpm_inject.so" "$out/obj/pm_inject.o" "$out/obj/pms.o" -ldl -lpthread \
	-Wl,-z,defs
cp "$here"/*.sh "$here"/*.py "$out/bench/gpu/pm_sampling/"
cp "$root/bench/gpu/stall_train.py" "$out/bench/gpu/"
echo "built $out/pm_probe $out/libpm_inject.so"
