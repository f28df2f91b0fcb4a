#!/usr/bin/env bash
# One device-machine call: build tg's GPU tests and bench (and, with CONFORMANCE=1, the libtorch
# conformance suite against the Python package's libtorch), run them on CUDA and time torch on the
# same GPU. Logs go to $OUT. Usage (repo root): GTEST_SRC=path/to/googletest bench/gpu_device_run.sh
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
device_setup torch   # the conformance suite links torch's libtorch
device_configure build-gpu -DTG_BUILD_EXAMPLES=OFF || exit 1
TARGETS="test_cuda test_cuda_reduce test_fold test_renderer bench_gpu_reduce ${EXTRA_TARGETS:-}"
[ "${CONFORMANCE:-0}" = 1 ] && TARGETS="$TARGETS conformance"
device_build build-gpu $TARGETS || exit 1
echo "== tests"
for t in test_cuda test_cuda_reduce test_fold test_renderer ${EXTRA_TESTS:-}; do
  timeout ${TEST_TIMEOUT:-120} ./build-gpu/tests/$t --gtest_brief=1 > "$OUT/$t.log" 2>&1; echo "$t rc=$?"; grep -E "FAILED|Failure|PASSED|SKIPPED \]" "$OUT/$t.log" | head -12
done
[ -n "${DEBUG4_FILTER:-}" ] && DEBUG=4 ./build-gpu/tests/test_cuda_reduce --gtest_filter="$DEBUG4_FILTER" > "$OUT/debug4.log" 2>&1
echo "== bench"
BENCH_ITERS=${BENCH_ITERS:-20} timeout 200 ./build-gpu/bench/bench_gpu_reduce > "$OUT/bench_tg.jsonl" 2> "$OUT/bench_tg.err"
python3 bench/torch_gpu_reduce.py ${BENCH_ITERS:-20} > "$OUT/bench_torch.jsonl" 2> "$OUT/bench_torch.err"
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
def load(f):
    r = {}
    for l in open(f):
        try: j = json.loads(l); r[j["bench"]] = j
        except Exception: pass
    return r
tg, th = load(o + "/bench_tg.jsonl"), load(o + "/bench_torch.jsonl")
for k, v in tg.items():
    t = th.get(k, {}).get("ms")
    print(f'{k:28s} tg {v.get("ms", v.get("error"))} ms k={v.get("kernels")}  torch {t} ms  ratio(torch/tg) {t / v["ms"] if t and "ms" in v else None:.3}' if t and "ms" in v else f'{k} {v}')
print("copy", th.get("copy_2^28"))
PY
if [ "${DEBUG_LINES:-1}" = 1 ]; then
  DEBUG=2 BENCH_ITERS=1 timeout 120 ./build-gpu/bench/bench_gpu_reduce > "$OUT/debug2.log" 2>&1
fi
if [ "${CONFORMANCE:-0}" = 1 ]; then
  echo "== conformance on CUDA"
  DEVICE=CUDA timeout ${CONF_TIMEOUT:-200} ./build-gpu/tests/conformance --gtest_brief=1 > "$OUT/conformance.log" 2>&1; echo "conformance rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|FAILED TEST|^\[ FAIL|conformance:" "$OUT/conformance.log" | head -40
fi
# the 8-file limit on what comes back: one archive of the logs
(cd "$OUT" && tar -czf logs.tgz *.log *.txt 2>/dev/null && rm -f test_*.log configure.log build.log gpu.txt)
