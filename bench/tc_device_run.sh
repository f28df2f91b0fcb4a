#!/usr/bin/env bash
# One device call for issue 12: build, GPU tests, then bench_gemm against torch and the variants, logs under $OUT.
# Usage (repository root, on the GPU machine): OUT=<dir> bench/tc_device_run.sh
set -u
OUT=${OUT:-/tmp/tc_out}; mkdir -p "$OUT"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/cfg.log" 2>&1
cmake --build build --target test_tensor_cores bench_gemm test_cuda -j16 > "$OUT/build.log" 2>&1; tail -1 "$OUT/build.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
T=./build/tests/test_tensor_cores B=./build/bench/bench_gemm
timeout 120 $T --gtest_filter=-*Emulated* > "$OUT/test.log" 2>&1
TC_PAIR_LOADS=1 timeout 120 $T --gtest_filter='TensorCoresGPU*' > "$OUT/test_pair.log" 2>&1
timeout 120 ./build/tests/test_cuda > "$OUT/test_cuda.log" 2>&1
for f in test test_pair test_cuda; do echo "$f: $(grep -hE '^\[  (PASSED|FAILED)' "$OUT/$f.log" | tr '\n' ' ')"; grep -h -A3 Failure "$OUT/$f.log" | head -12; done
timeout 150 bash bench/gemm_vs_torch.sh build "$OUT/bench.jsonl" > "$OUT/bench.out" 2>&1
grep -hE 'ratio|first_call|error' "$OUT/bench.out"
for v in TC_PAIR_LOADS=1 TC=0; do env $v CASES=gemm_fp16_4096,gemm_fp16_1024 REPS=5 timeout 40 $B | sed "s/^/$v /" | cut -c1-220; done
TC_OPT=1 CASES=conv2d_fp16_64x256x14 REPS=5 timeout 30 $B | cut -c1-220
# the 4096^3 fp16 kernel: DEBUG=2 line, source, and its SASS instruction mix when nvcc is here
DEBUG=4 REPS=1 CASES=gemm_fp16_4096 timeout 30 $B > "$OUT/dbg4.log" 2>&1
grep -a '\*\*\*' "$OUT/dbg4.log" | tail -2 | cut -c1-220
awk '/^#define INFINITY/{p=1} p{print} p&&/^}$/{exit}' "$OUT/dbg4.log" > "$OUT/gemm4096.cu"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$NVCC" ]; then
  "$NVCC" -cubin -arch=sm_90 -o "$OUT/gemm4096.cubin" "$OUT/gemm4096.cu" > "$OUT/nvcc.log" 2>&1 && \
  "$(dirname "$NVCC")/cuobjdump" -sass "$OUT/gemm4096.cubin" > "$OUT/gemm4096.sass" 2>&1 && \
  grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z][A-Z0-9]*' "$OUT/gemm4096.sass" | awk '{print $2}' | sort | uniq -c | sort -rn | head -12 | tr '\n' ' '; echo
fi
# BEAM=2 on the 2048^3 GEMM: search wall time and the pick
s=$(date +%s); BEAM=2 BEAM_COMPARE=0 CASES=gemm_fp16_2048 REPS=5 timeout 110 $B | cut -c1-220; echo "beam2 wall $(( $(date +%s) - s )) s"
