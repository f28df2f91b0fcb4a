#!/usr/bin/env bash
# The device CPU's thread scaling (issue 13): beautiful_mnist's step (bench_train, DEVICE=CPU) at THREADS=2 and 16 for
# one or more source trees (old main and a branch), alternating in the same call, then a DEBUG=2 JIT=2 per-kernel
# listing of each tree at 16 and 2 threads. Extra test binaries (TESTS) are built in the last tree and run.
# A spec TREE:VAR=value runs that tree again with the variable set (e.g. new:POOL_SPIN_US=0), in the rounds only.
#   Usage (repository root): GTEST_SRC=dir OUT=dir [ROUNDS=3 STEPS=10 TESTS=...] bench/cpu_threads_ab.sh SPEC...
set -uo pipefail
OUT=${OUT:-/tmp/out}; J=${J:-16}; ROUNDS=${ROUNDS:-3}; STEPS=${STEPS:-10}; mkdir -p "$OUT"
lscpu | grep -E "Model name|^CPU\(s\)|Thread|L2|L3" > "$OUT/cpu.txt"; cat "$OUT/cpu.txt"
cmake -S "$GTEST_SRC" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
  -DCMAKE_INSTALL_PREFIX=/tmp/gtest >/dev/null && cmake --build /tmp/gtest-build -j "$J" >/dev/null &&
  cmake --install /tmp/gtest-build >/dev/null
trees=(); for spec in "$@"; do t=${spec%%:*}; [[ " ${trees[*]} " == *" $t "* ]] || trees+=("$t"); done
last=${trees[-1]}
for t in "${trees[@]}"; do
  targets="bench_train"; [ "$t" = "$last" ] && targets="$targets ${TESTS:-}"
  cmake -S "$t" -B "$t/build-dev" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/gtest > "$OUT/configure.log" 2>&1 &&
    cmake --build "$t/build-dev" -j "$J" --target $targets > "$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -40; exit 1; }
done
echo "built $SECONDS s"
for tb in ${TESTS:-}; do
  THREADS=16 timeout 200 "$last/build-dev/tests/$tb" --gtest_brief=1 > "$OUT/$tb.log" 2>&1; echo "$tb THREADS=16 rc=$?"; tail -3 "$OUT/$tb.log"
done
train() {   # SPEC THREADS
  local t=${1%%:*} var=; [[ $1 == *:* ]] && var=${1#*:}
  env $var DEVICE=CPU IMPL=tg SKIP_JIT_OVERHEAD=1 STEPS=$STEPS THREADS=$2 timeout 120 "$t/build-dev/bench/bench_train" 2>&1 |
    grep -E '"impl":"tg"' | grep -oE '"(threads|s_per_step|cpu_s_per_step)":[0-9.]+' | tr '\n' ' '
}
for r in $(seq "$ROUNDS"); do
  for spec in "$@"; do for th in 2 16; do echo "round $r $(basename "${spec%%:*}")${spec#"${spec%%:*}"} THREADS=$th: $(train "$spec" "$th")"; done; done
done | tee "$OUT/train_ab.txt"
echo "rounds $SECONDS s"
for t in "${trees[@]}"; do for th in 16 2; do
  DEVICE=CPU IMPL=tg SKIP_JIT_OVERHEAD=1 STEPS=3 THREADS=$th DEBUG=2 JIT=2 timeout 120 "$t/build-dev/bench/bench_train" > "$OUT/debug_$(basename "$t")_$th.txt" 2>&1
done; done
echo "listings $SECONDS s"
(cd "$OUT" && tar -czf logs.tgz ./*.txt ./*.log && rm -f ./*.txt ./*.log)
