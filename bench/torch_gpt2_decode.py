#!/usr/bin/env python3
"""GPT-2 124M decode tokens/s in PyTorch (the peer for bench_gpt2 / examples/gpt2 --benchmark on CUDA), as JSON
lines: batch 1, random weights, greedy, a 20-token prompt, then TOKENS decode steps with a fixed-length KV cache
(one token per call, the position in a device tensor, so the step can be captured once as a CUDA graph).
Each step reads the next token back to the host, as examples/gpt2 does. Modes: eager, and CUDA graph replay.
    python3 bench/torch_gpt2_decode.py [TOKENS]"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

L, E, H, V, P, EPS = 12, 768, 12, 50257, 1024, 1e-5
D = E // H


def weights(dtype, dev):
    g = torch.Generator(device="cpu").manual_seed(0)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.02).to(dev, dtype)
    z = lambda *s: torch.zeros(*s, device=dev, dtype=dtype)
    o = lambda *s: torch.ones(*s, device=dev, dtype=dtype)
    w = {"wte": r(V, E), "wpe": r(P, E), "lnf_w": o(E), "lnf_b": z(E), "h": []}
    for _ in range(L):
        w["h"].append(dict(ln1_w=o(E), ln1_b=z(E), attn_w=r(E, 3 * E), attn_b=z(3 * E), proj_w=r(E, E), proj_b=z(E),
                           ln2_w=o(E), ln2_b=z(E), fc_w=r(E, 4 * E), fc_b=z(4 * E), mproj_w=r(4 * E, E), mproj_b=z(E)))
    return w


class Decoder:
    def __init__(self, w, ctx, dtype, dev):
        self.w, self.ctx = w, ctx
        self.kc = torch.zeros(L, 1, H, ctx, D, device=dev, dtype=dtype)
        self.vc = torch.zeros(L, 1, H, ctx, D, device=dev, dtype=dtype)
        self.slots = torch.arange(ctx, device=dev)

    @torch.no_grad()
    def step(self, tok, pos):   # tok (1,) long, pos (1,) long -> next token (1,) long; everything on the device
        w = self.w
        x = w["wte"][tok] + w["wpe"][pos]                                   # (1, E)
        mask = torch.where(self.slots <= pos, 0.0, -math.inf).to(x.dtype)   # (ctx,)
        for l, b in enumerate(w["h"]):
            h = F.layer_norm(x, (E,), b["ln1_w"], b["ln1_b"], EPS)
            q, k, v = torch.addmm(b["attn_b"], h, b["attn_w"]).view(3, 1, H, 1, D).unbind(0)
            self.kc[l].index_copy_(2, pos, k)
            self.vc[l].index_copy_(2, pos, v)
            att = (q @ self.kc[l].transpose(-1, -2)) / math.sqrt(D) + mask  # (1, H, 1, ctx)
            y = (att.float().softmax(-1).to(x.dtype) @ self.vc[l]).reshape(1, E)
            x = x + torch.addmm(b["proj_b"], y, b["proj_w"])
            h = F.layer_norm(x, (E,), b["ln2_w"], b["ln2_b"], EPS)
            x = x + torch.addmm(b["mproj_b"], F.gelu(torch.addmm(b["fc_b"], h, b["fc_w"]), approximate="tanh"), b["mproj_w"])
        logits = F.layer_norm(x, (E,), w["lnf_w"], w["lnf_b"], EPS) @ w["wte"].t()
        return logits.argmax(-1)


def run(dtype, graphs, tokens, dev="cuda"):
    w = weights(dtype, dev)
    d = Decoder(w, 20 + tokens + 16, dtype, dev)
    tok = torch.tensor([11], device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    for p in range(20):                                 # the prompt, one token at a time (not timed)
        pos.fill_(p)
        nxt = d.step(torch.tensor([(p * 7919 + 11) % V], device=dev), pos)
    p = 20
    if graphs:
        tok.copy_(nxt)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                d.step(tok, pos)                        # warm-up on the side stream, as torch's docs do
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = d.step(tok, pos)
        def one(p, t):
            pos.fill_(p)
            tok.copy_(t)
            g.replay()
            return out.clone()
    else:
        def one(p, t):
            pos.fill_(p)
            return d.step(t, pos)
    for _ in range(5):
        nxt = one(p, nxt); nxt.item(); p += 1
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(tokens):
        nxt = one(p, nxt)
        nxt.item()                                      # the host sees every token, as a generator must
        p += 1
    dt = time.perf_counter() - t0
    print(json.dumps({"bench": "gpt2_decode", "impl": "torch " + torch.__version__ + (" cuda graph" if graphs else " eager"),
                      "device": torch.cuda.get_device_name(), "dtype": str(dtype).replace("torch.", ""), "tokens": tokens,
                      "tok_s": round(tokens / dt, 1)}), flush=True)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for dtype in (torch.float32, torch.float16):
        for graphs in (False, True):
            try:
                run(dtype, graphs, n)
            except Exception as e:   # one failing mode still leaves the others' lines
                print(json.dumps({"bench": "gpt2_decode", "impl": "torch " + torch.__version__ + (" cuda graph" if graphs else " eager"),
                                  "dtype": str(dtype).replace("torch.", ""), "error": repr(e)[:300]}), flush=True)
