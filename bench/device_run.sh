#!/usr/bin/env bash
# The one device-machine driver: builds what the named phases need (Release, Ninja, -j$J) and runs them on CUDA,
# with torch timed in the same call where there is a peer. Logs and JSON lines go to $OUT; the small logs come back
# in one archive (the device tool returns at most 8 files).
#   Usage (repository root): GTEST_SRC=path/to/googletest OUT=dir bench/device_run.sh PHASE...
#   tests        the GPU test binaries on CUDA (TESTS overrides the list; TEST_TIMEOUT, default 150 s each; TEST_JOBS at once, 1)
#   conformance  the libtorch conformance suite against the Python package's libtorch, DEVICE=CUDA
#   cpuconf      the same suite on the machine's CPU, every core (DEVICE=CPU)
#   kernels      bench_kernels on the CPU (DEVICE=CPU) at THREADS=2: the BENCH cases (default resnet_fw,resnet_s2_bw), once per
#                ';'-separated env set of AB (default: none), alternated ROUNDS times (3)
#   reduce       bench_gpu_reduce against bench/torch_gpu_reduce.py, one ratio line per case, and the DEBUG=2 lines
#   gemm         bench_gemm against bench/bench_gemm_torch.py (bench/gemm_vs_torch.sh)
#   tcsweep      test_tensor_cores with a fresh cache, TC_TMA=0, TC_WGMMA=0 and TC_GEMM=0; the GEMM template's tile configs
#                (TMA_CFGS, WG_CFGS, MMA_CFGS), the 4096^3 kernel's source and SASS mix
#   gemmsweep    conv2d fp16 (implicit GEMM) over CONV_CFGS, fp32 over SIMT_VARS; DEBUG=2 lines and SASS mixes of both
#   gemmx        fp32 4096^3 over FP32_VARS and TF32 over TF32_VARS ('+' joins one variant's variables), the BEAM=2 search of the 4096^3 fp16 GEMM (BEAM_TIMEOUT,
#                default 100 s), beautiful_mnist's training step on CUDA (bench_train IMPL=tg)
#   gpt2         test_gpt2 on CUDA, bench_gpt2 fp16 and fp32 against bench/torch_gpt2_decode.py, a DEBUG=2 step
#   jit          bench_jit replays (and the decode step)
#   train        bench_train on the machine's CPU: THREADS=2 against all cores (issue 13's scaling)
#   sanitize     a -DTG_SANITIZE=ON build of every test, ctest on the CPU
# Variables: SWEEP_TESTS (tcsweep's test runs, 1), J (jobs, 16), ITERS (bench repetitions, 20), TOKENS (gpt2 decode steps, 200), BUILD (build-dev).
set -uo pipefail
OUT=${OUT:-/tmp/out}; J=${J:-16}; BUILD=${BUILD:-build-dev}; mkdir -p "$OUT"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
has() { [[ " $PHASES " == *" $1 "* ]]; }
PHASES=" $* "
GPU_TESTS="test_cuda test_cuda_reduce test_cuda_train test_tensor_cores test_jit_graph test_jit test_symbolic_jit
  test_symbolic_ops test_symbolic_opts test_symbolic_kernel test_fuse_rows test_conv_bw test_fold test_renderer"
TESTS=${TESTS:-$GPU_TESTS}
[ -z "${GPT2_VOCAB_DIR:-}" ] && [ -f .dev/vocab/encoder.json ] && export GPT2_VOCAB_DIR=$PWD/.dev/vocab   # carried: the device has no npm

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
PREFIX=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
if [ -n "${GTEST_SRC:-}" ]; then   # the device image has no GoogleTest
  cmake -S "$GTEST_SRC" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/gtest >/dev/null && cmake --build /tmp/gtest-build -j "$J" >/dev/null &&
    cmake --install /tmp/gtest-build >/dev/null
  PREFIX="/tmp/gtest${PREFIX:+;$PREFIX}"
fi

configure() {   # DIR [cmake args]
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" "$@" > "$OUT/configure.log" 2>&1 ||
    { tail -30 "$OUT/configure.log"; return 1; }
}
build() {       # DIR TARGETS...
  local dir=$1; shift
  cmake --build "$dir" -j "$J" --target "$@" > "$OUT/build.log" 2>&1 ||
    { grep -E "error|Error" -A5 "$OUT/build.log" | head -60; return 1; }
}
run_test() {    # BINARY [env...]: one test binary on CUDA, its summary lines
  local t=$1; shift
  env DEVICE=CUDA "$@" timeout "${TEST_TIMEOUT:-150}" "./$BUILD/tests/$t" --gtest_brief=1 > "$OUT/$t.log" 2>&1
  echo "$t rc=$? $(grep -hE '^\[  (PASSED|FAILED)|tests? ran|SKIPPED \]' "$OUT/$t.log" | tr '\n' ' ' | cut -c1-200)"
  grep -h -B1 -A6 -E "Failure|FAILED  \]" "$OUT/$t.log" | head -30
}
ratios() {      # TG.jsonl TORCH.jsonl KEY: for each bench in both files, tg and torch KEY and torch/tg
  python3 - "$@" <<'PY'
import json, sys
def load(f):
    r = {}
    for l in open(f, errors="replace"):
        try: j = json.loads(l); r[j["bench"]] = j
        except Exception: pass
    return r
tg, th, key = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
for k, v in tg.items():
    a, b = v.get(key), th.get(k, {}).get(key)
    line = {"bench": k, "tg_" + key: a, "torch_" + key: b, "kernels": v.get("kernels")}
    if a and b: line["torch_over_tg"] = round(b / a, 3)
    print(json.dumps(line) if a else json.dumps({"bench": k, "tg": v}))
PY
}

TARGETS=""
has tests && TARGETS="$TARGETS $TESTS"
{ has conformance || has cpuconf; } && TARGETS="$TARGETS conformance"
has kernels && TARGETS="$TARGETS bench_kernels"
has reduce && TARGETS="$TARGETS bench_gpu_reduce"
{ has gemm || has tcsweep || has gemmsweep || has gemmx; } && TARGETS="$TARGETS bench_gemm"
has gemmx && TARGETS="$TARGETS bench_train"
has tcsweep && TARGETS="$TARGETS test_tensor_cores"
has gpt2 && TARGETS="$TARGETS gpt2 bench_gpt2 test_gpt2"
has jit && TARGETS="$TARGETS bench_jit"
has train && TARGETS="$TARGETS bench_train"
if [ -n "$TARGETS" ]; then
  configure "$BUILD" || exit 1
  build "$BUILD" $TARGETS || exit 1
  echo "built $(el)"
fi

if has tests; then
  echo "== tests on CUDA"
  for t in $TESTS; do   # TEST_JOBS binaries at once (the GPU has room): list the longest first
    run_test "$t" > "$OUT/$t.summary" 2>&1 &
    while [ "$(jobs -rp | wc -l)" -ge "${TEST_JOBS:-1}" ]; do wait -n; done
  done
  wait
  for t in $TESTS; do cat "$OUT/$t.summary"; done
  echo "tests $(el)"
fi

run_conformance() {   # DEVICE LOG PHASE: the libtorch conformance suite with DEVICE as the default device
  echo "== conformance on $1 ($(nproc) host cores)"
  DEVICE=$1 timeout "${CONF_TIMEOUT:-300}" "./$BUILD/tests/conformance" --gtest_brief=1 > "$OUT/$2" 2>&1
  echo "conformance ($1) rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|^\[  FAILED  \]|conformance:" "$OUT/$2" | head -40
  echo "$3 $(el)"
}
has conformance && run_conformance CUDA conformance.log conformance
has cpuconf && run_conformance CPU conformance_cpu.log cpuconf

if has kernels; then
  echo "== bench_kernels (CPU, THREADS=2)"
  IFS=';' read -ra sets <<< "${AB:- }"
  for r in $(seq "${ROUNDS:-3}"); do
    for e in "${sets[@]}"; do
      env $e DEVICE=CPU THREADS=2 MODES=default BENCH="${BENCH:-resnet_fw,resnet_s2_bw}" timeout 120 "./$BUILD/bench/bench_kernels" 2>/dev/null |
        grep '"bench"' | sed "s/^{/{\"env\":\"$e\",/" >> "$OUT/kernels.jsonl"
    done
  done
  python3 - "$OUT/kernels.jsonl" <<'PY'
import json, statistics, sys, collections
g = collections.defaultdict(list)
for l in open(sys.argv[1]):
    d = json.loads(l); g[(d["env"], d["bench"])].append((d["GFLOPS"], d.get("ratio_fma_peak_window", 0), d.get("ratio", 0)))
for (e, b), v in g.items():
    print(f"{e or '(default)':36s} {b:14s} GFLOPS median {statistics.median(x for x, _, _ in v):7.1f} "
          f"[{min(x for x, _, _ in v):.1f}-{max(x for x, _, _ in v):.1f}] window {statistics.median(w for _, w, _ in v):.3f} "
          f"x OpenBLAS {statistics.median(o for _, _, o in v):.3f}")
PY
  echo "kernels $(el)"
fi

if has reduce; then
  echo "== reductions (tg, torch)"
  BENCH_ITERS=${ITERS:-20} timeout 200 "./$BUILD/bench/bench_gpu_reduce" > "$OUT/reduce_tg.jsonl" 2> "$OUT/reduce_tg.err"
  python3 bench/torch_gpu_reduce.py "${ITERS:-20}" > "$OUT/reduce_torch.jsonl" 2> "$OUT/reduce_torch.err"
  ratios "$OUT/reduce_tg.jsonl" "$OUT/reduce_torch.jsonl" ms | tee "$OUT/reduce_ratios.jsonl"
  grep copy "$OUT/reduce_torch.jsonl"
  DEBUG=2 BENCH_ITERS=1 timeout 120 "./$BUILD/bench/bench_gpu_reduce" > "$OUT/reduce_debug2.log" 2>&1
  echo "reduce $(el)"
fi

if has gemm; then
  echo "== gemm (tg, torch)"
  timeout 200 bash bench/gemm_vs_torch.sh "$BUILD" "$OUT/gemm.jsonl" > "$OUT/gemm.out" 2>&1
  grep -hE 'ratio|first_call|error' "$OUT/gemm.out" | cut -c1-220
  echo "gemm $(el)"
fi

if has tcsweep; then
  echo "== tensor-core tests: a fresh cache, mma.sync instead of wgmma, the register (WMMA) path"
  if [ "${SWEEP_TESTS:-1}" != 0 ]; then   # SWEEP_TESTS=0: only the sweep and the kernel's SASS
    run_test test_tensor_cores CACHELEVEL=0
    for v in TC_TMA=0 TC_WGMMA=0 TC_GEMM=0; do cp "$OUT/test_tensor_cores.log" "$OUT/tc_prev.log"; run_test test_tensor_cores $v; done
  fi
  echo "== GEMM template sweep (TFLOP/s at 4096 2048 1024 fp16)"
  sweep() {
    echo "$1: $(env "$1" CASES=gemm_fp16_4096,gemm_fp16_2048,gemm_fp16_1024 REPS=10 timeout 40 "./$BUILD/bench/bench_gemm" 2>&1 |
      python3 -c 'import sys, json
for l in sys.stdin:
  try: j = json.loads(l); print(j["bench"][10:], j.get("tflops", j.get("error")), end="  ")
  except Exception: pass')"
  }
  for cfg in ${TMA_CFGS:-2,256,4 2,128,5 1,128,6 2,192,5}; do sweep TC_TMA_CFG=$cfg; done
  for cfg in ${WG_CFGS:-2,128,3,2,0 1,128,4,2,1}; do sweep TC_WGMMA_CFG=$cfg; done
  for v in SIMT_GEMM=1 SIMT_GEMM=0; do   # fp32 4096^3: the SIMT template, then the heuristic's kernel
    echo "$v: $(env $v CASES=gemm_fp32_4096 REPS=10 timeout 60 "./$BUILD/bench/bench_gemm" 2>&1 | grep -o '"tflops":[0-9.]*')"
  done
  for cfg in ${MMA_CFGS:-128,128,2,2,3,2}; do sweep TC_GEMM_CFG=$cfg; done
  DEBUG=4 REPS=1 CASES=gemm_fp16_4096 timeout 30 "./$BUILD/bench/bench_gemm" > "$OUT/gemm4096_debug4.log" 2>&1
  grep -a '\*\*\*' "$OUT/gemm4096_debug4.log" | grep matmul | tail -1 | cut -c1-200
  # the kernel's source (from its #define prologue to the closing brace of the extern "C" function), then SASS
  awk '/^#define INFINITY/{buf=""; keep=1} keep{buf=buf $0 "\n"} keep && /^extern "C"/{f=1} keep && f && /^}$/{src=buf; keep=0; f=0}
       END{printf "%s", src}' "$OUT/gemm4096_debug4.log" > "$OUT/gemm4096.cu"
  if [ -s "$OUT/gemm4096.cu" ] && nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -o "$OUT/gemm4096.cubin" "$OUT/gemm4096.cu" \
       > "$OUT/nvcc.log" 2>&1; then
    cuobjdump -sass "$OUT/gemm4096.cubin" > "$OUT/gemm4096.sass" 2>&1
    echo "sass: $(grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z][A-Z0-9.]*' "$OUT/gemm4096.sass" | awk '{print $2}' | sort | uniq -c |
      sort -rn | head -16 | tr '\n' ' ')"
  fi
  echo "tcsweep $(el)"
fi

if has gemmsweep; then
  echo "== conv2d fp16 and fp32 GEMM variants (TFLOP/s, kernel ms)"
  one() {   # ENV...: one bench_gemm run, its cases' TFLOP/s and per-kernel ms
    echo "$*: $(env "$@" REPS=10 timeout 60 "./$BUILD/bench/bench_gemm" 2>&1 | python3 -c 'import sys, json
for l in sys.stdin:
  try: j = json.loads(l); print(j["bench"], j.get("tflops", j.get("ms", j.get("error"))), j.get("kernel_ms", ""), end="  ")
  except Exception: pass')"
  }
  for cfg in ${CONV_CFGS-2,128,3,2,0 2,256,2,1,0 1,128,4,2,1 2,128,3,2,1 1,256,2,1,0}; do
    one CASES=conv2d_fp16_64x256x14 TC_WGMMA_CFG=$cfg
  done
  [ -n "${CONV_CFGS-x}" ] && one CASES=conv2d_fp16_64x256x14 TC_WGMMA=0
  for v in ${SIMT_VARS-SIMT_GEMM=1 SIMT_GEMM=0}; do one CASES=gemm_fp32_4096 ${v//,/ }; done
  # first call of a new GEMM: where the time goes
  PROFILE=1 PROFILEPATH="$OUT/first_call_trace.json" CASES=first_call "./$BUILD/bench/bench_gemm" > "$OUT/first_call_profile.log" 2>&1
  python3 - "$OUT/first_call_trace.json" <<'PY'
import json, sys, collections
ev = json.load(open(sys.argv[1])).get("traceEvents", [])
tot = collections.Counter()
for e in ev:
  if e.get("ph") == "X": tot[(e.get("cat") or "") + ":" + e.get("name", "")[:40]] += e.get("dur", 0) / 1e3
print("first_call spans (ms):", {k: round(v, 1) for k, v in tot.most_common(8)})
PY
  # DEBUG=2 lines, then each kernel's source (from its #define prologue to the closing brace) and SASS instruction mix
  for c in conv2d_fp16_64x256x14 gemm_fp32_4096; do
    DEBUG=4 REPS=1 CASES=$c timeout 60 "./$BUILD/bench/bench_gemm" > "$OUT/${c}_debug4.log" 2>&1
    grep -a '\*\*\*' "$OUT/${c}_debug4.log" | tail -3 | cut -c1-220
    awk '/^#define INFINITY/{buf=""; keep=1} keep{buf=buf $0 "\n"} keep && /^extern "C"/{f=1} keep && f && /^}$/{src=buf; keep=0; f=0}
         END{printf "%s", src}' "$OUT/${c}_debug4.log" > "$OUT/$c.cu"
    if [ -s "$OUT/$c.cu" ] && nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o "$OUT/$c.cubin" "$OUT/$c.cu" > "$OUT/${c}_nvcc.log" 2>&1; then
      grep -hE "registers|spill" "$OUT/${c}_nvcc.log" | head -3
      cuobjdump -sass "$OUT/$c.cubin" > "$OUT/$c.sass" 2>&1
      echo "$c sass: $(grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z][A-Z0-9.]*' "$OUT/$c.sass" | awk '{print $2}' | sort | uniq -c |
        sort -rn | head -18 | tr '\n' ' ')"
    fi
  done
  echo "gemmsweep $(el)"
fi

if has gemmx; then
  echo "== fp32 4096^3: SIMT variants, TF32 variants (TFLOP/s, kernel)"
  x1() {   # CASE ENV...: one bench_gemm case, its TFLOP/s and kernel name
    local c=$1; shift
    echo "$c $*: $(env "$@" CASES=$c REPS=10 timeout 60 "./$BUILD/bench/bench_gemm" 2>&1 | python3 -c 'import sys, json
for l in sys.stdin:
  try: j = json.loads(l); print(j.get("tflops", j.get("error")), j.get("kernel", ""), end=" ")
  except Exception: pass')"
  }
  # a variant's variables are joined by '+' (values may hold commas)
  for v in ${FP32_VARS-SIMT_GEMM=1}; do x1 gemm_fp32_4096 ${v//+/ }; done
  for v in ${TF32_VARS-TC_WGMMA=0 TF32_ROUND=1 TC_WGMMA_CFG=1,128,4,2,1 TC_WGMMA_CFG=2,256,2,1,0}; do x1 gemm_fp32_tf32_4096 ${v//+/ }; done
  echo "== BEAM=2 search, 4096^3 fp16 (disk cache off)"
  CASES=beam_gemm_fp16_4096 REPS=10 timeout "${BEAM_TIMEOUT:-100}" "./$BUILD/bench/bench_gemm" > "$OUT/beam.jsonl" 2> "$OUT/beam.err"
  echo "beam rc=$? $(cut -c1-300 "$OUT/beam.jsonl")"
  echo "== beautiful_mnist step on CUDA"
  DEVICE=CUDA IMPL=tg SKIP_JIT_OVERHEAD=1 STEPS=${STEPS:-10} timeout 90 "./$BUILD/bench/bench_train" 2>&1 | grep -E '^\{' | cut -c1-400
  echo "gemmx $(el)"
fi

if has gpt2; then
  echo "== gpt2"
  run_test test_gpt2
  gpt2() {   # HALF [env...]
    local half=$1; shift
    env CHECKPOINT=/tmp/gpt2ck DEVICE=CUDA HALF="$half" TOKENS="${TOKENS:-200}" "$@" timeout 150 "./$BUILD/bench/bench_gpt2" \
      >> "$OUT/gpt2_tg.jsonl" 2>> "$OUT/gpt2_tg.err"
    echo "bench_gpt2 HALF=$half $* rc=$?"
  }
  gpt2 1
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_gpt2_decode.py "${TOKENS:-200}" > "$OUT/gpt2_torch.jsonl" 2> "$OUT/gpt2_torch.err"
  echo "torch rc=$?"
  gpt2 0
  [ -n "${COMPARE_JIT2:-}" ] && gpt2 1 JIT=2
  [ -n "${COMPARE_ROW_BCAST:-}" ] && gpt2 1 ROW_BCAST=1   # layernorms and the softmax joined into their matmuls (opt-in)
  python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
def lines(f):
    r = []
    for l in open(f, errors="replace"):
        try: r.append(json.loads(l))
        except Exception: pass
    return r
tg = {j["dtype"]: j for j in lines(o + "/gpt2_tg.jsonl") if j.get("bench") == "gpt2_decode" and j.get("impl") == "tg" and j.get("JIT") != "2"
      and j.get("ROW_BCAST", "default") == "default"}
th = {}
for j in lines(o + "/gpt2_torch.jsonl"):
    if "tok_s" in j: th.setdefault({"float32": "fp32", "float16": "fp16"}[j["dtype"]], {})["graph" if "graph" in j["impl"] else "eager"] = j["tok_s"]
for dt in ("fp32", "fp16"):
    t, p = tg.get(dt, {}), th.get(dt, {})
    r = {k: round(t["tok_s"] / v, 3) for k, v in p.items() if t.get("tok_s") and v}
    print(json.dumps({"dtype": dt, "tg_tok_s": t.get("tok_s"), "kernels": t.get("kernels_per_token"), "torch_tok_s": p, "tg_over_torch": r}))
for j in lines(o + "/gpt2_tg.jsonl"):
    if j.get("bench") == "gpt2_decode" and (j.get("JIT") == "2" or j.get("ROW_BCAST", "default") != "default"):
        p = th.get(j["dtype"], {})
        print(json.dumps({"dtype": j["dtype"], "JIT": j.get("JIT"), "ROW_BCAST": j.get("ROW_BCAST"), "tg_tok_s": j["tok_s"],
                          "kernels": j.get("kernels_per_token"), "tg_over_torch": {k: round(j["tok_s"] / v, 3) for k, v in p.items() if v}}))
PY
  DEVICE=CUDA DEBUG=2 timeout 60 "./$BUILD/examples/gpt2" --random-weights --half --count 4 --temperature 0 --prompt "Hello world" \
    > "$OUT/gpt2_debug2.log" 2>&1
  echo "gpt2 DEBUG=2 rc=$?"
  echo "gpt2 $(el)"
fi

if has jit; then
  echo "== jit"
  timeout 120 "./$BUILD/bench/bench_jit" 100 "${REPS:-1000}" replay | tee "$OUT/jit.jsonl"
  DEVICE=CUDA timeout 90 "./$BUILD/bench/bench_jit" 100 100 decode | tee -a "$OUT/jit.jsonl"
  echo "jit $(el)"
fi

if has train; then
  # the device's default is CUDA: the CPU runs name DEVICE=CPU (issue 13's scaling), the CUDA run is issue 12's mnist step
  echo "== bench_train on the CPU: 2 threads, then all $(nproc); then on CUDA"
  DEVICE=CPU THREADS=2 STEPS=${STEPS:-5} timeout 200 "./$BUILD/bench/bench_train" 2>&1 | tee "$OUT/train2.jsonl" | grep -E '^\{' | cut -c1-250
  DEVICE=CPU THREADS=$(nproc) STEPS=${STEPS:-5} timeout 120 "./$BUILD/bench/bench_train" 2>&1 | tee "$OUT/train_all.jsonl" | grep -E '^\{' | cut -c1-250
  DEVICE=CUDA STEPS=${STEPS:-5} timeout 120 "./$BUILD/bench/bench_train" 2>&1 | tee "$OUT/train_cuda.jsonl" | grep -E '^\{' | cut -c1-250
  echo "train $(el)"
fi

if has sanitize; then
  echo "== sanitize: every test under ASan/UBSan on the CPU"
  configure build-asan -DTG_SANITIZE=ON && cmake --build build-asan -j "$J" > "$OUT/asan_build.log" 2>&1 &&
    (cd build-asan && timeout 400 ctest -j "$J" --timeout 300 -LE conformance > "$OUT/asan_ctest.log" 2>&1; echo "ctest rc=$?")
  tail -15 "$OUT/asan_ctest.log" 2>/dev/null || grep -E "error" -A5 "$OUT/asan_build.log" | head -30
  echo "sanitize $(el)"
fi

(cd "$OUT" && tar -czf logs.tgz ./*.log ./*.txt ./*.err ./*.cu ./*.sass 2>/dev/null; rm -f ./*.log ./*.err ./*.txt ./*.cu ./*.sass ./*.cubin)
