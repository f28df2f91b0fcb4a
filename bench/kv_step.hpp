// The KV-cache decode step that bench_jit and bench_symbolic time: write k/v at position sp of
// the caches, attend over the first sp+1 positions (tinygrad's gpt2 Attention with a KV cache).
#pragma once
#include "tg/tg.hpp"

inline tg::Tensor kv_step(tg::Tensor& ck, tg::Tensor& cv, const tg::Tensor& q, const tg::Tensor& k, const tg::Tensor& v,
                          const tg::sint& sp, int64_t H, int64_t D) {
  using tg::sint;
  ck.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sp, sp + 1}, {sint(0), sint(D)}}).assign(k).realize();
  cv.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sp, sp + 1}, {sint(0), sint(D)}}).assign(v).realize();
  tg::Tensor keys = ck.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), sp + 1}, {sint(0), sint(D)}});
  tg::Tensor values = cv.shrink({{sint(0), sint(1)}, {sint(0), sint(H)}, {sint(0), sp + 1}, {sint(0), sint(D)}});
  return q.scaled_dot_product_attention(keys, values);
}
