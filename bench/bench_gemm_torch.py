# torch's side of bench_gemm (JSON lines, same cases and timing: median of REPS runs with CUDA events after a warm-up).
import json, os, sys, time
import torch

REPS = int(os.environ.get("REPS", "20"))
SEL = [s for s in os.environ.get("CASES", "").split(",") if s]
torch.backends.cuda.matmul.allow_tf32 = False   # fp32 GEMM in fp32, as tinygrad.cpp (ALLOW_TF32 off)
torch.backends.cudnn.allow_tf32 = False

def timed(fn):
  fn(); torch.cuda.synchronize()
  ts = []
  for _ in range(REPS):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); e.synchronize()
    ts.append(s.elapsed_time(e))
  ts.sort()
  return ts[len(ts) // 2], ts[0]

DT = {"half": torch.float16, "bfloat16": torch.bfloat16, "float": torch.float32}
cases = [("gemm_fp16_4096", "gemm", 4096, 4096, 4096, "half"), ("gemm_bf16_4096", "gemm", 4096, 4096, 4096, "bfloat16"),
         ("gemm_fp16_2048", "gemm", 2048, 2048, 2048, "half"), ("gemm_fp16_1024", "gemm", 1024, 1024, 1024, "half"),
         ("gemm_fp32_4096", "gemm", 4096, 4096, 4096, "float"), ("conv2d_fp16_64x256x14", "conv", 64, 256, 256, "half"),
         ("gemm_fp32_tf32_4096", "gemm", 4096, 4096, 4096, "float")]   # with allow_tf32 (tinygrad.cpp: ALLOW_TF32=1)
if not torch.cuda.is_available():
  print(json.dumps({"bench": "gemm", "impl": "torch", "skipped": "no CUDA"})); sys.exit(0)
def new_gemm_ms(n):
  a = torch.randn(n, n, device="cuda", dtype=torch.float16); b = torch.randn(n, n, device="cuda", dtype=torch.float16)
  torch.cuda.synchronize(); t0 = time.perf_counter(); (a @ b); torch.cuda.synchronize()
  return round((time.perf_counter() - t0) * 1e3, 2)
if not SEL or "first_call" in SEL:   # as bench_gemm: the process's first GEMM (cuBLAS's set-up), then a new shape
  cold = new_gemm_ms(1024)
  print(json.dumps({"bench": "first_call_cold_gemm_fp16_1024", "impl": "torch", "ms": cold}))
  each = [new_gemm_ms(n) for n in (1536, 1408, 1664, 1792, 1920)]
  print(json.dumps({"bench": "first_call_new_gemm_fp16", "impl": "torch", "ms": sorted(each)[len(each) // 2], "each_ms": each}))
for name, kind, m, k, n, dt in cases:
  if SEL and name not in SEL: continue
  d = DT[dt]
  torch.backends.cuda.matmul.allow_tf32 = "tf32" in name
  if kind == "gemm":
    a = torch.randn(m, k, device="cuda").to(d); b = torch.randn(k, n, device="cuda").to(d)
    fn, flops = (lambda: a @ b), 2.0 * m * n * k
  else:
    x = torch.randn(m, k, 14, 14, device="cuda").to(d); w = (torch.randn(n, k, 3, 3, device="cuda") * 0.05).to(d)
    fn, flops = (lambda: torch.nn.functional.conv2d(x, w, padding=1)), 2.0 * m * n * 14 * 14 * k * 9
  med, mn = timed(fn)
  print(json.dumps({"bench": name, "impl": "torch", "kind": kind, "dtype": dt, "m": m, "k": k, "n": n,
                    "median_ms": round(med, 4), "min_ms": round(mn, 4), "tflops": round(flops / (med * 1e-3) / 1e12, 2)}), flush=True)
