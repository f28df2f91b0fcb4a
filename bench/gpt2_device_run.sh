#!/usr/bin/env bash
# One device-machine call for GPT-2 (issue 14): build gpt2, bench_gpt2 and test_gpt2, run test_gpt2 on CUDA,
# bench_gpt2 fp32 and fp16 on CUDA, torch's decode (eager and CUDA graphs) on the same GPU, and print the
# ratios. Logs go to $OUT. Usage (repo root): GTEST_SRC=path/to/googletest bench/gpt2_device_run.sh
#   GPT2_VOCAB_DIR: encoder.json + vocab.bpe for the tokenizer tests; TOKENS: decode steps timed (200)
set -uo pipefail
TOKENS=${TOKENS:-200}
. "$(dirname "$0")/device_common.sh"
device_setup   # no torch prefix: bench_gpt2's libtorch peer is the CPU one; on the GPU the peer is torch_gpt2_decode.py
device_configure build-gpu || exit 1
t0=$(date +%s)
device_build build-gpu gpt2 bench_gpt2 test_gpt2 || exit 1
echo "build $(( $(date +%s) - t0 )) s"
echo "== test_gpt2 on CUDA"
DEVICE=CUDA timeout ${TEST_TIMEOUT:-100} ./build-gpu/tests/test_gpt2 --gtest_brief=1 > "$OUT/test_gpt2.log" 2>&1; echo "test_gpt2 rc=$?"
grep -E "FAILED|Failure|PASSED|SKIPPED \]|tests ran" "$OUT/test_gpt2.log" | head -20
bench() {   # $1: HALF
  CHECKPOINT=/tmp/gpt2ck DEVICE=CUDA HALF=$1 TOKENS=$TOKENS timeout 120 ./build-gpu/bench/bench_gpt2 >> "$OUT/bench_tg.jsonl" 2>> "$OUT/bench_tg.err"
  echo "bench_gpt2 HALF=$1 rc=$?"
}
echo "== bench_gpt2 fp16 on CUDA (tg)"
bench 1
echo "== torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1)"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/torch_gpt2_decode.py $TOKENS > "$OUT/bench_torch.jsonl" 2> "$OUT/bench_torch.err"; echo "torch rc=$?"
echo "== bench_gpt2 fp32 on CUDA (tg)"
bench 0
if [ -n "${COMPARE_JIT2:-}" ]; then echo "== bench_gpt2 fp16, JIT=2 (replay without device graphs)"; JIT=2 bench 1; fi
cat "$OUT/bench_tg.jsonl"; tail -5 "$OUT/bench_tg.err"
cat "$OUT/bench_torch.jsonl"; tail -5 "$OUT/bench_torch.err"
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
def lines(f):
    r = []
    for l in open(f):
        try: r.append(json.loads(l))
        except Exception: pass
    return r
tg = {j["dtype"]: j["tok_s"] for j in lines(o + "/bench_tg.jsonl") if j.get("bench") == "gpt2_decode" and j.get("impl") == "tg" and j.get("JIT") != "2"}
th = {}
for j in lines(o + "/bench_torch.jsonl"):
    if "tok_s" in j: th.setdefault({"float32": "fp32", "float16": "fp16"}[j["dtype"]], {})["graph" if "graph" in j["impl"] else "eager"] = j["tok_s"]
for dt in ("fp32", "fp16"):
    t, p = tg.get(dt), th.get(dt, {})
    r = {k: round(t / v, 3) for k, v in p.items() if t and v}
    print(json.dumps({"ratio": "tg_over_torch", "dtype": dt, "tg_tok_s": t, "torch_tok_s": p, "tg_over": r, "goal_fp16_tok_s": 1500 if dt == "fp16" else None}))
PY
echo "== one decode step, DEBUG=2 (fp16)"
DEVICE=CUDA DEBUG=2 timeout 60 ./build-gpu/examples/gpt2 --random-weights --half --count 4 --temperature 0 --prompt "Hello world" > "$OUT/debug2_fp16.log" 2>&1
echo "gpt2 DEBUG=2 rc=$?"; grep -E "JIT|captured" "$OUT/debug2_fp16.log" | head -5
