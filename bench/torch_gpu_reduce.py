# The same workloads as bench_gpu_reduce.cpp with torch on the GPU, JSON lines (mean of CUDA-event
# timed iterations after warm-up), plus the device-to-device copy bandwidth (bytes read + written).
import json, sys, torch
import torch.nn.functional as F
it = int(sys.argv[1]) if len(sys.argv) > 1 else 20
d = "cuda"
N = 1 << 28
def R(*s): return torch.rand(*s, device=d)
def t(name, fn, nbytes):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(it): fn()
    b.record(); torch.cuda.synchronize()
    ms = a.elapsed_time(b) / it
    print(json.dumps({"bench": name, "impl": "torch", "ms": round(ms, 4), "GBps": round(nbytes / ms * 1e-6, 1)}), flush=True)
x = R(N); t("sum_2^28", lambda: x.sum(), N * 4)
y = R(8192, 8192); t("softmax_8192x8192", lambda: y.softmax(-1), 2 * 8192 * 8192 * 4)
z = R(4096, 32000); t("softmax_4096x32000", lambda: z.softmax(-1), 2 * 4096 * 32000 * 4)
t("log_softmax_4096x32000", lambda: z.log_softmax(-1), 2 * 4096 * 32000 * 4)
o = R(8192, 4097); t("softmax_8192x4097", lambda: o.softmax(-1), 2 * 8192 * 4097 * 4)
w = R(8192, 1024); t("layernorm_8192x1024", lambda: F.layer_norm(w, (1024,)), 2 * 8192 * 1024 * 4)
c = R(8192, 32000); lab = torch.randint(0, 32000, (8192,), device=d)
t("cross_entropy_8192x32000", lambda: F.cross_entropy(c, lab), 8192 * 32000 * 4)
t("sum0_8192x8192", lambda: y.sum(0), 8192 * 8192 * 4)
s = R(8192, 64); t("sum1_8192x64", lambda: s.sum(1), 8192 * 64 * 4)
t("argmax_8192x8192", lambda: y.argmax(1), 8192 * 8192 * 4)
t("argmax_8192x4097", lambda: o.argmax(1), 8192 * 4097 * 4)
lab2 = torch.randint(0, 4097, (8192,), device=d)
t("cross_entropy_8192x4097", lambda: F.cross_entropy(o, lab2), 8192 * 4097 * 4)
a2 = R(N); t("a*b+1_2^28", lambda: torch.addcmul(torch.ones((), device=d), x, a2), 3 * N * 4)
t("rand_2^28", lambda: torch.rand(N, device=d), N * 4)
t("copy_2^28", lambda: x.clone(), 2 * N * 4)
