#!/usr/bin/env bash
# One device-machine call for TinyJit's CUDA graphs: build libtg, the JIT tests and bench_jit, run
# them on CUDA; logs go to $OUT. Usage (repo root): GTEST_SRC=path/to/googletest bench/jit_graph_device_run.sh
set -uo pipefail
. "$(dirname "$0")/device_common.sh"
device_setup
device_configure build-gpu -DTG_BUILD_EXAMPLES=OFF || exit 1
TESTS=${TESTS:-"test_jit_graph test_cuda test_jit test_symbolic_jit"}
device_build build-gpu bench_jit $TESTS || exit 1
echo "== bench (replay)"
timeout 120 ./build-gpu/bench/bench_jit 100 ${REPS:-1000} replay | tee "$OUT/bench_jit.jsonl"
echo "== tests"
for t in $TESTS; do
  DEVICE=CUDA timeout ${TEST_TIMEOUT:-150} ./build-gpu/tests/$t --gtest_brief=1 > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "FAILED|Failure|PASSED|SKIPPED \]|Expected|Which is|error" "$OUT/$t.log" | head -20
done
if [ "${DECODE:-0}" = 1 ]; then echo "== bench (decode)"; DEVICE=CUDA timeout 90 ./build-gpu/bench/bench_jit 100 100 decode | tee "$OUT/bench_decode.jsonl"; fi
(cd "$OUT" && tar -czf logs.tgz *.log *.txt 2>/dev/null && rm -f test_*.log configure.log build.log gpu.txt)
