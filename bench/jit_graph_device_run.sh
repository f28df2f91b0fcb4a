#!/usr/bin/env bash
# One device-machine call for TinyJit's CUDA graphs: build libtg, the JIT tests and bench_jit, run
# them on CUDA; logs go to $OUT. Usage (repo root): GTEST_SRC=path/to/googletest bench/jit_graph_device_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
J=${J:-16}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
PREFIX=""
if [ -n "${GTEST_SRC:-}" ]; then   # the device image has no GoogleTest: build the carried sources
  cmake -S "$GTEST_SRC" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_INSTALL_PREFIX=/tmp/gtest >/dev/null &&
    cmake --build /tmp/gtest-build -j $J >/dev/null && cmake --install /tmp/gtest-build >/dev/null
  PREFIX="/tmp/gtest"
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" -DTG_BUILD_EXAMPLES=OFF > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
TESTS=${TESTS:-"test_jit_graph test_cuda test_jit test_symbolic_jit"}
cmake --build build-gpu -j $J --target bench_jit $TESTS > "$OUT/build.log" 2>&1 || { grep -E "error|Error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "== bench (replay)"
timeout 120 ./build-gpu/bench/bench_jit 100 ${REPS:-1000} replay | tee "$OUT/bench_jit.jsonl"
echo "== tests"
for t in $TESTS; do
  DEVICE=CUDA timeout ${TEST_TIMEOUT:-150} ./build-gpu/tests/$t --gtest_brief=1 > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E "FAILED|Failure|PASSED|SKIPPED \]|Expected|Which is|error" "$OUT/$t.log" | head -20
done
if [ "${DECODE:-0}" = 1 ]; then echo "== bench (decode)"; DEVICE=CUDA timeout 90 ./build-gpu/bench/bench_jit 100 100 decode | tee "$OUT/bench_decode.jsonl"; fi
(cd "$OUT" && tar -czf logs.tgz *.log *.txt 2>/dev/null && rm -f test_*.log configure.log build.log gpu.txt)
