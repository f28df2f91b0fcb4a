#!/usr/bin/env bash
# One device call for issue 12: build, GPU tests (fresh cache first), bench_gemm against torch, a sweep of the
# shared-memory template's block tiles, the 4096^3 kernel's DEBUG=2 line and SASS mix. Logs under $OUT.
# Usage (repository root, on the GPU machine): OUT=<dir> GTEST_SRC=<googletest sources> bench/tc_device_run.sh
set -u
OUT=${OUT:-/tmp/tc_out}; mkdir -p "$OUT"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader
TORCH_PREFIX=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
PREFIX="$TORCH_PREFIX"
if [ -n "${GTEST_SRC:-}" ]; then
  cmake -S "$GTEST_SRC" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_INSTALL_PREFIX=/tmp/gtest >/dev/null &&
    cmake --build /tmp/gtest-build -j 16 >/dev/null && cmake --install /tmp/gtest-build >/dev/null
  PREFIX="/tmp/gtest;$TORCH_PREFIX"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" -DTG_BUILD_EXAMPLES=OFF > "$OUT/cfg.log" 2>&1 || { tail -20 "$OUT/cfg.log"; exit 1; }
cmake --build build --target test_tensor_cores bench_gemm test_cuda -j16 > "$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -40; exit 1; }
echo "built $(el)"
T=./build/tests/test_tensor_cores B=./build/bench/bench_gemm
# GPU correctness: a fresh process with the disk cache off (what a first run on a new machine sees), the default
# run, the register (WMMA) path with the template off, and test_cuda
CACHELEVEL=0 timeout 90 $T --gtest_filter='TensorCoresGPU*' > "$OUT/gpu_fresh.log" 2>&1
timeout 90 $T --gtest_filter='TensorCoresGPU*' > "$OUT/gpu_default.log" 2>&1
TC_GEMM=0 timeout 90 $T --gtest_filter='TensorCoresGPU*' > "$OUT/gpu_wmma.log" 2>&1
timeout 90 ./build/tests/test_cuda --gtest_brief=1 > "$OUT/test_cuda.log" 2>&1
for f in gpu_fresh gpu_default gpu_wmma test_cuda; do
  echo "$f: $(grep -hE '^\[  (PASSED|FAILED)' "$OUT/$f.log" | tr '\n' ' ')"; grep -h -A4 Failure "$OUT/$f.log" | head -16
done
echo "tests $(el)"
# tinygrad.cpp and torch, same call, with ratios
timeout 150 bash bench/gemm_vs_torch.sh build "$OUT/bench.jsonl" > "$OUT/bench.out" 2>&1
grep -hE 'ratio|first_call|error' "$OUT/bench.out" | cut -c1-200
echo "bench $(el)"
# block tiles of the template: bm,bn,warps_m,warps_n,stages,min_blocks
for cfg in ${CFGS:-128,128,2,4,3,2 128,256,2,4,2,1 128,128,2,2,3,2 128,64,2,2,4,2 64,128,2,2,4,2 64,64,2,2,4,4}; do
  echo "cfg $cfg: $(TC_GEMM_CFG=$cfg CASES=gemm_fp16_4096,gemm_fp16_2048,gemm_fp16_1024 REPS=10 timeout 40 $B 2>&1 |
    python3 -c 'import sys, json
for l in sys.stdin:
  try: j = json.loads(l); print(j["bench"][10:], j.get("tflops", j.get("error")), end="  ")
  except Exception: pass')"
done
echo "sweep $(el)"
# the 4096^3 fp16 kernel: DEBUG=2 line, source, SASS instruction mix
DEBUG=4 REPS=1 CASES=gemm_fp16_4096 timeout 30 $B > "$OUT/dbg4.log" 2>&1
grep -a '\*\*\*' "$OUT/dbg4.log" | tail -2 | cut -c1-220
awk '/^#define INFINITY/{p=1} p{print} p&&/^}$/{exit}' "$OUT/dbg4.log" > "$OUT/gemm4096.cu"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
OBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
if [ -x "$NVCC" ] && [ -x "$OBJ" ]; then
  "$NVCC" -cubin -gencode=arch=compute_90a,code=sm_90a -o "$OUT/gemm4096.cubin" "$OUT/gemm4096.cu" > "$OUT/nvcc.log" 2>&1 &&
    "$OBJ" -sass "$OUT/gemm4096.cubin" > "$OUT/gemm4096.sass" 2>&1 &&
    grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z][A-Z0-9.]*' "$OUT/gemm4096.sass" | awk '{print $2}' | sort | uniq -c | sort -rn | head -16 | tr '\n' ' '; echo
else
  echo "no nvcc/cuobjdump here"
fi
echo "done $(el)"
