#!/usr/bin/env bash
# One device call for issue 12: build, GPU tests (fresh cache first), bench_gemm against torch, a sweep of the
# shared-memory template's block tiles, the 4096^3 kernel's DEBUG=2 line and SASS mix. Logs under $OUT.
# Usage (repository root, on the GPU machine): OUT=<dir> GTEST_SRC=<googletest sources> bench/tc_device_run.sh
set -u
OUT=${OUT:-/tmp/tc_out}
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
. "$(dirname "$0")/device_common.sh"
device_setup torch
device_configure build -DTG_BUILD_EXAMPLES=OFF || exit 1
device_build build test_tensor_cores bench_gemm test_cuda || exit 1
echo "built $(el)"
T=./build/tests/test_tensor_cores B=./build/bench/bench_gemm
# GPU correctness: a fresh process with the disk cache off (what a first run on a new machine sees; every template
# config), then the default run, mma.sync instead of wgmma, the register (WMMA) path with the template off, test_cuda
CACHELEVEL=0 timeout 150 $T --gtest_filter='TensorCoresGPU*' > "$OUT/gpu_fresh.log" 2>&1
G='TensorCoresGPU.GemmShapes:TensorCoresGPU.DtypesBatchedTransposedEpilogue'
timeout 60 $T --gtest_filter="$G" > "$OUT/gpu_default.log" 2>&1
TC_WGMMA=0 timeout 60 $T --gtest_filter="$G" > "$OUT/gpu_mmasync.log" 2>&1
TC_GEMM=0 timeout 60 $T --gtest_filter="$G:TensorCoresGPU.Conv2dHalf" > "$OUT/gpu_wmma.log" 2>&1
timeout 90 ./build/tests/test_cuda --gtest_brief=1 > "$OUT/test_cuda.log" 2>&1
for f in gpu_fresh gpu_default gpu_mmasync gpu_wmma test_cuda; do
  echo "$f: $(grep -hE '^\[  (PASSED|FAILED)' "$OUT/$f.log" | tr '\n' ' ')"; grep -h -A4 Failure "$OUT/$f.log" | head -12
done
echo "tests $(el)"
# tinygrad.cpp and torch, same call, with ratios
timeout 150 bash bench/gemm_vs_torch.sh build "$OUT/bench.jsonl" > "$OUT/bench.out" 2>&1
grep -hE 'ratio|first_call|error' "$OUT/bench.out" | cut -c1-200
echo "bench $(el)"
sweep() {   # env assignment, then the three fp16 sizes
  echo "$1: $(env "$1" CASES=gemm_fp16_4096,gemm_fp16_2048,gemm_fp16_1024 REPS=10 timeout 40 $B 2>&1 |
    python3 -c 'import sys, json
for l in sys.stdin:
  try: j = json.loads(l); print(j["bench"][10:], j.get("tflops", j.get("error")), end="  ")
  except Exception: pass')"
}
for cfg in ${WG_CFGS:-2,128,3,2,0 2,128,3,2,1 2,256,2,1,0 1,128,4,2,1 1,256,2,1,0 1,192,3,1,1 2,64,4,2,2}; do sweep TC_WGMMA_CFG=$cfg; done
for cfg in ${MMA_CFGS:-128,128,2,2,3,2 64,64,2,2,4,4}; do sweep TC_GEMM_CFG=$cfg; done
echo "sweep $(el)"
# the default 4096^3 fp16 kernel (and its mma.sync twin): DEBUG=2 line, source, SASS instruction mix
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
OBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for v in default TC_WGMMA=0; do
  env $( [ $v = default ] || echo $v ) DEBUG=4 REPS=1 CASES=gemm_fp16_4096 timeout 30 $B > "$OUT/dbg4_$v.log" 2>&1
  echo "$v: $(grep -a '\*\*\*' "$OUT/dbg4_$v.log" | grep matmul | tail -1 | cut -c1-200)"
  python3 - "$OUT/dbg4_$v.log" "$OUT/gemm4096_$v.cu" <<'PY'
import sys
txt = open(sys.argv[1], errors="replace").read()
for chunk in txt.split("#define INFINITY")[1:]:
  if "tg_cp_async16" in chunk:
    lines = ("#define INFINITY" + chunk).split("\n")
    out, seen = [], False
    for l in lines:
      out.append(l)
      if l.startswith('extern "C"'): seen = True
      if seen and l == "}": break
    open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
  if [ -x "$NVCC" ] && [ -x "$OBJ" ] && [ -s "$OUT/gemm4096_$v.cu" ]; then
    "$NVCC" -cubin -gencode=arch=compute_90a,code=sm_90a -o "$OUT/gemm4096_$v.cubin" "$OUT/gemm4096_$v.cu" > "$OUT/nvcc_$v.log" 2>&1 &&
      "$OBJ" -sass "$OUT/gemm4096_$v.cubin" > "$OUT/gemm4096_$v.sass" 2>&1 &&
      echo "  sass: $(grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z][A-Z0-9.]*' "$OUT/gemm4096_$v.sass" | awk '{print $2}' | sort | uniq -c | sort -rn | head -14 | tr '\n' ' ')"
  fi
done
echo "done $(el)"
