#!/usr/bin/env bash
# make demo: build the sample program, run it without and then with the shim, on the real GPU
# when there is one, otherwise against the fake CUDA runtime of the tests.
set -euo pipefail
build=${BUILD:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
cc=${CC:-cc}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  where="the GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1))"
  libdir="$cuda/lib64"
  env_extra=()
else
  where="the fake CUDA runtime (no GPU here; cudaMalloc/cudaFree made to cost 30 us, as on a GPU)"
  make --no-print-directory BUILD="$build" "$build/fake/libcudart.so.13" >/dev/null
  libdir="$(cd "$build/fake" && pwd)"
  env_extra=(FAKECUDA_MALLOC_US=30)
fi
mkdir -p "$build/examples"
"$cc" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I"$cuda/include" -o "$build/examples/demo" \
  examples/demo.c -L"$libdir" -lcudart -Wl,-rpath,"$libdir"
echo "== demo on $where"
echo "-- without gpucache:"
env "${env_extra[@]}" "$build/examples/demo"
echo "-- with LD_PRELOAD=$build/libgpucache.so:"
env "${env_extra[@]}" LD_PRELOAD="$(cd "$build" && pwd)/libgpucache.so" "$build/examples/demo"
