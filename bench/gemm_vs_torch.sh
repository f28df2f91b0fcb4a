#!/usr/bin/env bash
# bench_gemm (tinygrad.cpp) and bench_gemm_torch.py (torch) in one call, then one ratio line per case:
# {"bench": ..., "ratio_vs_torch": tinygrad.cpp TFLOP/s / torch TFLOP/s}. Usage: bench/gemm_vs_torch.sh <build dir> [out.jsonl]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"; out="${2:-/dev/stdout}"
tmp="$(mktemp)"
"$build/bench/bench_gemm" | tee "$tmp"
python3 "$here/bench_gemm_torch.py" | tee -a "$tmp"
python3 - "$tmp" <<'PY' | tee -a "$tmp"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
by = {}
for r in rows: by.setdefault(r["bench"], {})[r.get("impl")] = r
for name, d in by.items():
  t, p = d.get("tinygrad.cpp"), d.get("torch")
  if t and p and "tflops" in t and "tflops" in p and p["tflops"] > 0:
    print(json.dumps({"bench": name, "tinygrad_tflops": t["tflops"], "torch_tflops": p["tflops"], "ratio_vs_torch": round(t["tflops"] / p["tflops"], 4)}))
  elif t and p and "ms" in t and "ms" in p:
    print(json.dumps({"bench": name, "tinygrad_ms": t["ms"], "torch_ms": p["ms"]}))
PY
[ "$out" != /dev/stdout ] && cp "$tmp" "$out"
rm -f "$tmp"
