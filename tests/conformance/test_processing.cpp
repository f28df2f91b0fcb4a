// Processing ops against torch: matmul/dot/linear, conv2d (bias, stride, padding, dilation,
// groups), conv_transpose2d, max/avg pooling, einsum, interpolate, scaled_dot_product_attention,
// the losses, layernorm, batchnorm and dropout outside training.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.hpp"

using namespace conf;
namespace F_ = torch::nn::functional;

namespace {

std::vector<Case> matmul_cases() {
  std::vector<Case> cs;
  auto mm = [&](const std::string& n, std::vector<int64_t> a, std::vector<int64_t> b, double atol = 1e-5) {
    cs.push_back(same("matmul/" + n, {F(a), F(b)}, FN(x[0].matmul(x[1]))).tol(atol));
  };
  mm("1d_1d", {6}, {6});
  mm("2d_1d", {3, 6}, {6});
  mm("1d_2d", {6}, {6, 5});
  mm("2d_2d", {3, 6}, {6, 5});
  mm("9x9", {9, 9}, {9, 9});
  mm("batched", {2, 3, 6}, {2, 6, 5});
  mm("bcast_rhs", {2, 3, 6}, {6, 5});
  mm("bcast_batch", {1, 3, 6}, {2, 6, 5});
  mm("1d_batched", {6}, {2, 6, 5});
  mm("batched_1d", {2, 3, 6}, {6});
  mm("4d", {2, 2, 3, 4}, {2, 2, 4, 3});
  mm("zero_k", {3, 0}, {0, 4});
  mm("zero_m", {0, 4}, {4, 3});
  mm("zero_n", {3, 4}, {4, 0});
  mm("zero_1d", {0}, {0});
  mm("64x64", {64, 64}, {64, 64}, 1e-4);
  // the CPU GEMM's packed b in panels of several 32-column tiles (codegen/pack.cpp; on a 2-core machine N >= 256
  // gives two or four tiles a panel): odd M and K, a batch, 1-long axes, b transposed
  mm("packed_panels_odd", {67, 129}, {129, 512}, 1e-3);
  mm("packed_panels_batched", {2, 64, 72}, {2, 72, 256}, 1e-3);
  mm("packed_panels_1len", {1, 1, 65, 64}, {1, 64, 512}, 1e-3);
  cs.push_back(same("matmul/packed_panels_transposed_rhs", {F({96, 130}), F({512, 130})},
                    FN(x[0].matmul(op::permute(x[1], {1, 0})))).tol(1e-3));
  cs.push_back(same("matmul/transposed_lhs", {F({6, 3}), F({6, 5})}, FN(op::permute(x[0], {1, 0}).matmul(x[1]))).tol(1e-5));
  cs.push_back(same("matmul/transposed_both", {F({6, 3}), F({5, 6})},
                    FN(op::permute(x[0], {1, 0}).matmul(op::permute(x[1], {1, 0})))).tol(1e-5));
  cs.push_back(same("matmul/chain_relu", {F({1, 16}), F({16, 16}), F({16, 8})}, FN(x[0].matmul(x[1]).relu().matmul(x[2]))).tol(1e-5));
  cs.push_back(same("matmul/eye", {V({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1}), F({3, 4})}, FN(x[0].matmul(x[1]))));
  cs.push_back(pair("matmul/int", {I({3, 4}, -5, 5), I({4, 2}, -5, 5)}, TG(x[0].matmul(x[1])),
                    TH(x[0].to(torch::kInt64).matmul(x[1].to(torch::kInt64)))));
  cs.push_back(pair("dot/2d", {F({3, 6}), F({6, 5})}, TG(x[0].dot(x[1])), TH(x[0].matmul(x[1]))).tol(1e-5));
  cs.push_back(pair("dot/1d", {F({6}), F({6})}, TG(x[0].dot(x[1])), TH(x[0].dot(x[1]))).tol(1e-5));
  cs.push_back(pair("dot/batched", {F({2, 3, 6}), F({2, 6, 5})}, TG(x[0].dot(x[1])), TH(x[0].matmul(x[1]))).tol(1e-5));
  cs.push_back(same("linear", {F({3, 4}), F({4, 5}), F({5})}, FN(op::linear(x[0], x[1], x[2]))).tol(1e-5));
  cs.push_back(same("linear/no_bias", {F({3, 4}), F({4, 5})}, FN(op::linear(x[0], x[1]))).tol(1e-5));
  cs.push_back(same("linear/3d_input", {F({2, 3, 4}), F({4, 5}), F({5})}, FN(op::linear(x[0], x[1], x[2]))).tol(1e-5));
  cs.push_back(pair("linear/1d_weight", {F({3, 4}), F({4})}, TG(x[0].linear(x[1])), TH(x[0] * x[1])));
  return cs;
}

struct ConvArgs {
  int groups = 1;
  std::vector<int64_t> stride{1}, dilation{1}, padding{0}, output_padding{0};
};
std::vector<int64_t> two(std::vector<int64_t> v) { return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v; }

void conv(std::vector<Case>& cs, const std::string& n, std::vector<int64_t> xs, std::vector<int64_t> ws, bool bias, ConvArgs a) {
  std::vector<In> ins{F(xs), F(ws)};
  if (bias) ins.push_back(F({ws[0]}));
  auto tgf = [a](const std::vector<tg::Tensor>& x) {
    return x[0].conv2d(x[1], x.size() > 2 ? std::optional(x[2]) : std::nullopt, a.groups, a.stride, a.dilation, a.padding);
  };
  auto thf = [a](const std::vector<torch::Tensor>& x) {
    return torch::conv2d(x[0], x[1], x.size() > 2 ? x[2] : torch::Tensor(), two(a.stride), two(a.padding), two(a.dilation), a.groups);
  };
  cs.push_back(pair("conv2d/" + n, ins, tgf, thf).tol(1e-4).gtol(1e-4));
}

void conv_t(std::vector<Case>& cs, const std::string& n, std::vector<int64_t> xs, std::vector<int64_t> ws, bool bias, ConvArgs a) {
  std::vector<In> ins{F(xs), F(ws)};
  if (bias) ins.push_back(F({ws[1] * a.groups}));
  auto tgf = [a](const std::vector<tg::Tensor>& x) {
    return x[0].conv_transpose2d(x[1], x.size() > 2 ? std::optional(x[2]) : std::nullopt, a.groups, a.stride, a.dilation,
                                 a.padding, a.output_padding);
  };
  auto thf = [a](const std::vector<torch::Tensor>& x) {
    return torch::conv_transpose2d(x[0], x[1], x.size() > 2 ? x[2] : torch::Tensor(), two(a.stride), two(a.padding),
                                   two(a.output_padding), a.groups, two(a.dilation));
  };
  cs.push_back(pair("conv_transpose2d/" + n, ins, tgf, thf).tol(1e-4).gtol(1e-4));
}

std::vector<Case> conv_cases() {
  std::vector<Case> cs;
  conv(cs, "simple", {1, 3, 6, 6}, {4, 3, 3, 3}, false, {});
  conv(cs, "bias", {1, 3, 6, 6}, {4, 3, 3, 3}, true, {});
  conv(cs, "batched", {2, 3, 5, 5}, {2, 3, 3, 3}, true, {});
  conv(cs, "1x1", {1, 4, 5, 5}, {3, 4, 1, 1}, false, {});
  conv(cs, "cin1", {2, 1, 5, 5}, {2, 1, 3, 3}, false, {});
  conv(cs, "nonsquare_kernel", {1, 2, 6, 5}, {3, 2, 3, 2}, false, {});
  conv(cs, "stride2", {1, 2, 7, 7}, {3, 2, 3, 3}, false, {.stride = {2}});
  conv(cs, "stride21", {1, 2, 7, 7}, {3, 2, 3, 3}, false, {.stride = {2, 1}});
  conv(cs, "padding1", {1, 2, 5, 5}, {3, 2, 3, 3}, false, {.padding = {1}});
  conv(cs, "padding21", {1, 2, 5, 5}, {3, 2, 3, 3}, true, {.padding = {2, 1}});
  conv(cs, "dilation2", {1, 2, 7, 7}, {3, 2, 3, 3}, false, {.dilation = {2}});
  conv(cs, "dilation21", {1, 2, 7, 7}, {3, 2, 3, 3}, false, {.dilation = {2, 1}});
  conv(cs, "groups2", {1, 4, 5, 5}, {6, 2, 3, 3}, false, {.groups = 2});
  conv(cs, "depthwise", {2, 4, 5, 5}, {4, 1, 3, 3}, true, {.groups = 4});
  conv(cs, "all_args", {2, 4, 8, 8}, {4, 2, 3, 3}, true, {.groups = 2, .stride = {2}, .dilation = {2}, .padding = {1}});
  // the fused backward (tensor/conv.cpp): odd sizes, rows no window reads, padding past the kernel's
  // span, groups with every argument, and one large enough for the CPU's packed GEMM path
  conv(cs, "batch1_odd", {1, 5, 9, 11}, {7, 5, 5, 3}, true, {});
  conv(cs, "stride23_unread_rows", {2, 3, 10, 8}, {4, 3, 3, 3}, false, {.stride = {2, 3}});
  conv(cs, "stride3_k2", {1, 2, 11, 11}, {2, 2, 2, 2}, false, {.stride = {3}});
  conv(cs, "padding_past_span", {1, 2, 5, 5}, {2, 2, 2, 2}, false, {.padding = {3}});
  // a padded last dim copied with the columns padded, the rows a view (tensor/conv.cpp pads_columns_forward)
  conv(cs, "padded_columns_7", {2, 8, 5, 7}, {16, 8, 3, 3}, true, {.padding = {1}});
  conv(cs, "padded_columns_rows_strided", {2, 8, 9, 8}, {4, 8, 3, 3}, false, {.stride = {2, 1}, .dilation = {2, 1}, .padding = {2, 1}});
  conv(cs, "groups3_all_args", {2, 6, 11, 10}, {9, 2, 3, 3}, true, {.groups = 3, .stride = {2}, .dilation = {2}, .padding = {2}});
  conv(cs, "mnist_conv2_packed", {8, 32, 14, 14}, {32, 32, 5, 5}, true, {});
  // the narrowed CPU input gradient's shapes that its split at the taps takes with CONV_DX_SPLIT=1 (tensor/conv.cpp
  // split_columns_input_grad; run the suite with it set to check that path): both borders; padding 1; batch 1
  conv(cs, "dx_split_columns", {32, 16, 24, 24}, {16, 16, 5, 5}, true, {});
  conv(cs, "dx_split_padded", {32, 16, 16, 18}, {16, 16, 3, 3}, false, {.padding = {1}});
  conv(cs, "dx_split_batch1", {1, 16, 16, 34}, {32, 16, 3, 3}, true, {.padding = {1}});
  // a strided input gradient by the input's own phases (tensor/conv.cpp exact_phase_input_grad): 32 input channels
  // (28 wide: the phases rounded to 16 columns), odd sizes, a stride past a phase's taps, groups
  conv(cs, "stride2_exact_phases", {2, 32, 7, 28}, {8, 32, 3, 3}, true, {.stride = {2}, .padding = {1}});
  conv(cs, "stride32_phases_padded", {1, 16, 10, 11}, {4, 16, 5, 4}, false, {.stride = {3, 2}, .padding = {2, 1}});
  conv(cs, "stride2_phases_groups", {3, 8, 9, 12}, {6, 4, 3, 3}, true, {.groups = 2, .stride = {2}, .padding = {1}});
  // batch 32, 64 output channels: the 2-tap phases keep their exact 14 columns (the packed 7-column tile)
  conv(cs, "stride2_exact_phase_columns", {32, 32, 3, 28}, {64, 32, 3, 3}, false, {.stride = {2}, .padding = {1}});
  // 32 output channels per group: a strided weight gradient in one GEMM over x's strided view (tensor/conv.cpp
  // strided_panel_weight_grad): odd sizes, stride (3, 2) with padding, a 1-row input whose taps 0 and 2 read only
  // padding, groups
  conv(cs, "stride2_dw_one_gemm", {2, 8, 9, 13}, {32, 8, 3, 3}, true, {.stride = {2}, .padding = {1}});
  conv(cs, "stride32_dw_one_gemm_padded", {1, 4, 10, 11}, {32, 4, 5, 4}, false, {.stride = {3, 2}, .padding = {2, 1}});
  conv(cs, "stride2_dw_one_gemm_1row", {1, 4, 1, 5}, {32, 4, 3, 3}, false, {.stride = {2}, .padding = {1}});
  conv(cs, "stride2_dw_one_gemm_groups", {2, 8, 9, 10}, {64, 4, 3, 3}, true, {.groups = 2, .stride = {2}, .padding = {1}});
  // one input channel: the weight gradient's tile takes the 5 kernel columns next to 4 output channels
  conv(cs, "mnist_conv1_tiled", {4, 1, 28, 28}, {32, 1, 5, 5}, true, {});
  // the weight gradient's reduce in batch blocks (over 4096 (b, oy, ox) elements): 2 blocks of 5, 7 blocks of 1
  conv(cs, "batch_blocks", {10, 3, 26, 26}, {4, 3, 3, 3}, true, {});
  conv(cs, "batch_blocks_prime", {7, 2, 26, 26}, {3, 2, 3, 3}, false, {.padding = {1}});
  // the CPU weight gradient's tiles over the kernel's columns (codegen/heuristic.cpp kernel_column_rows): 5 kx x 2
  // channels on odd sizes at batch 1, a padded 3x3 (masked taps: the channel tile), a 1-row input; and conv1's
  // row-shifted forward (tensor/conv.cpp row_shift_forward) with padding, odd sizes, 1-long axes, groups
  conv(cs, "dw_columns_batch1_odd", {1, 32, 11, 13}, {32, 32, 5, 5}, true, {});
  conv(cs, "dw_columns_3x3_padded", {2, 32, 7, 9}, {64, 32, 3, 3}, false, {.padding = {1}});
  conv(cs, "dw_columns_one_row", {2, 32, 1, 40}, {32, 32, 1, 5}, false, {});
  conv(cs, "rows_fw_padded_odd", {1, 1, 9, 13}, {5, 1, 3, 5}, true, {.padding = {1, 2}});
  conv(cs, "rows_fw_1x7", {2, 1, 1, 7}, {3, 1, 1, 3}, false, {});
  conv(cs, "rows_fw_groups2", {2, 4, 10, 9}, {6, 2, 3, 3}, true, {.groups = 2, .padding = {1}});
  // the forward's short-row tile (heuristic.cpp contiguous_tile_rows: 6 or 9 output columns) and the column-padded
  // forward's copy padded to groups of 4 columns (tensor/conv.cpp aligned_column_copy)
  conv(cs, "short_rows_6", {32, 32, 8, 8}, {32, 32, 3, 3}, true, {});
  conv(cs, "short_rows_9_rows_strided", {32, 16, 13, 11}, {32, 16, 3, 3}, false, {.stride = {2, 1}});
  conv(cs, "short_rows_4_by_2", {32, 16, 6, 6}, {32, 16, 3, 3}, true, {});
  conv(cs, "short_rows_4_odd_rows", {32, 16, 7, 6}, {32, 16, 3, 3}, false, {});
  conv(cs, "short_rows_5", {32, 16, 7, 7}, {32, 16, 3, 3}, true, {});
  conv(cs, "aligned_copy_pad2", {2, 16, 5, 12}, {16, 16, 3, 3}, true, {.padding = {1, 2}});
  conv(cs, "aligned_copy_21_batch1", {1, 8, 3, 21}, {8, 8, 3, 3}, false, {.padding = {0, 1}});
  cs.push_back(pair("conv2d/nhwc_input", {F({1, 5, 5, 2}), F({3, 2, 3, 3})}, TG(op::permute(x[0], {0, 3, 1, 2}).conv2d(x[1])),
                    TH(torch::conv2d(x[0].permute({0, 3, 1, 2}), x[1])))
                   .tol(1e-4));
  cs.push_back(pair("conv2d/padded_then_add", {F({1, 2, 5, 5}), F({2, 2, 3, 3})},
                    TG(x[0].conv2d(x[1], std::nullopt, 1, {1}, {1}, {1}) + x[0]),
                    TH(torch::conv2d(x[0], x[1], {}, 1, 1) + x[0]))
                   .tol(1e-4));

  conv_t(cs, "simple", {1, 4, 5, 5}, {4, 2, 3, 3}, false, {});
  conv_t(cs, "bias", {2, 4, 4, 4}, {4, 2, 3, 3}, true, {});
  conv_t(cs, "stride2", {1, 3, 4, 4}, {3, 2, 3, 3}, false, {.stride = {2}});
  conv_t(cs, "stride2_output_padding1", {1, 3, 4, 4}, {3, 2, 3, 3}, false, {.stride = {2}, .output_padding = {1}});
  conv_t(cs, "padding1", {1, 3, 5, 5}, {3, 2, 3, 3}, false, {.padding = {1}});
  conv_t(cs, "dilation2", {1, 3, 4, 4}, {3, 2, 3, 3}, false, {.dilation = {2}});
  conv_t(cs, "groups2", {1, 4, 5, 5}, {4, 1, 3, 3}, true, {.groups = 2});
  conv_t(cs, "all_args", {1, 4, 4, 4}, {4, 2, 3, 3}, true,
         {.groups = 2, .stride = {2}, .dilation = {1}, .padding = {1}, .output_padding = {1}});
  return cs;
}

std::vector<Case> pool_cases() {
  std::vector<Case> cs;
  auto maxp = [&](const std::string& n, std::vector<int64_t> xs, std::vector<int64_t> k, std::vector<int64_t> s,
                  std::vector<int64_t> d, std::vector<int64_t> p) {
    auto tgf = [=](const std::vector<tg::Tensor>& x) { return x[0].max_pool2d(k, s, d, p); };
    auto thf = [=](const std::vector<torch::Tensor>& x) {
      return torch::max_pool2d(x[0], two(k), s.empty() ? two(k) : two(s), two(p), two(d));
    };
    cs.push_back(pair("max_pool2d/" + n, {F(xs)}, tgf, thf));
  };
  maxp("k2", {1, 2, 6, 6}, {2, 2}, {}, {1}, {0});
  maxp("k2_odd_size", {1, 2, 7, 5}, {2, 2}, {}, {1}, {0});
  maxp("k3_stride1", {2, 1, 5, 5}, {3, 3}, {1}, {1}, {0});
  maxp("k23_stride12", {1, 2, 6, 7}, {2, 3}, {1, 2}, {1}, {0});
  maxp("dilation2", {1, 1, 7, 7}, {2, 2}, {1}, {2}, {0});
  maxp("padding1", {1, 2, 5, 5}, {3, 3}, {2}, {1}, {1});
  maxp("k1", {1, 2, 3, 3}, {1, 1}, {}, {1}, {0});
  // forward only: torch's max_pool2d sends a tie's gradient to one element, tinygrad splits it evenly
  cs.push_back(pair("max_pool2d/ties", {V({1, 1, 2, 2}, {1, 1, 1, 1})}, TG(x[0].max_pool2d()), TH(torch::max_pool2d(x[0], {2, 2}))).fwd());

  auto avgp = [&](const std::string& n, std::vector<int64_t> xs, std::vector<int64_t> k, std::vector<int64_t> s,
                  std::vector<int64_t> p, bool include_pad) {
    auto tgf = [=](const std::vector<tg::Tensor>& x) { return x[0].avg_pool2d(k, s, {1}, p, include_pad); };
    auto thf = [=](const std::vector<torch::Tensor>& x) {
      return torch::avg_pool2d(x[0], two(k), s.empty() ? two(k) : two(s), two(p), false, include_pad);
    };
    cs.push_back(pair("avg_pool2d/" + n, {F(xs)}, tgf, thf));
  };
  avgp("k2", {1, 2, 6, 6}, {2, 2}, {}, {0}, true);
  avgp("k2_odd_size", {1, 2, 7, 5}, {2, 2}, {}, {0}, true);
  avgp("k3_stride1", {2, 1, 5, 5}, {3, 3}, {1}, {0}, true);
  avgp("k23_stride12", {1, 2, 6, 7}, {2, 3}, {1, 2}, {0}, true);
  avgp("padding1_include_pad", {1, 2, 5, 5}, {3, 3}, {2}, {1}, true);
  avgp("padding1_exclude_pad", {1, 2, 5, 5}, {3, 3}, {2}, {1}, false);
  cs.push_back(pair("avg_pool2d/dilation2", {F({1, 1, 7, 7})}, TG(x[0].avg_pool2d({2, 2}, {1}, {2})), TH(x[0]))
                   .skipped("torch's avg_pool2d has no dilation argument (tinygrad's has)"));
  return cs;
}

std::vector<Case> einsum_cases() {
  std::vector<Case> cs;
  auto es = [&](const std::string& f, std::vector<In> ins) {
    cs.push_back(pair("einsum/" + f, std::move(ins), [f](const std::vector<tg::Tensor>& x) { return tg::Tensor::einsum(f, x); },
                      [f](const std::vector<torch::Tensor>& x) { return torch::einsum(f, x); })
                     .tol(1e-5));
  };
  es("ij->ji", {F({3, 4})});
  es("ij -> ji", {F({3, 4})});
  es("ji", {F({3, 4})});
  es("jki", {F({2, 3, 4})});
  es("ij,jk", {F({3, 4}), F({4, 5})});
  es("ijk->", {F({2, 3, 4})});
  es("ij->j", {F({3, 4})});
  es("ij->i", {F({3, 4})});
  es("ik,k->i", {F({3, 4}), F({4})});
  es("ik,kj->ij", {F({3, 4}), F({4, 5})});
  es("jk,ki->ji", {F({3, 4}), F({4, 5})});
  es("i,i->i", {F({6}), F({6})});
  es("ij,ij->ij", {F({3, 4}), F({3, 4})});
  es("i,j->ij", {F({3}), F({4})});
  es("ijk,ikl->ijl", {F({2, 3, 4}), F({2, 4, 5})});
  es("ijk,ikl->jil", {F({2, 3, 4}), F({2, 4, 5})});
  es("pqrs,tuqvr->pstuv", {F({2, 3, 2, 2}), F({2, 2, 3, 2, 2})});
  es("ik,jkl,il->ij", {F({2, 3}), F({4, 3, 5}), F({2, 5})});
  cs.push_back(pair("einsum/...id,...jd->...ij", {F({2, 3, 4}), F({2, 5, 4})}, TG(tg::Tensor::einsum("...id,...jd->...ij", x)),
                    TH(torch::einsum("...id,...jd->...ij", x)))
                   .skipped("tinygrad v0.9.2 rejects it: test/test_ops.py:754 expects einsum with '...' to raise (TODO: FIXME)"));
  cs.push_back(pair("einsum/ii->i", {F({3, 3})}, TG(tg::Tensor::einsum("ii->i", x)), TH(torch::einsum("ii->i", x)))
                   .skipped("tinygrad v0.9.2 rejects it: tensor.py:1661 reshapes 'ii' (3, 3) to one dim per distinct letter, (3,), and fails"));
  return cs;
}

std::vector<Case> interpolate_cases() {
  std::vector<Case> cs;
  auto ip = [&](const std::string& n, std::vector<int64_t> xs, std::vector<int64_t> size, bool ac) {
    F_::InterpolateFuncOptions::mode_t mode = torch::kLinear;
    if (size.size() == 2) mode = torch::kBilinear;
    if (size.size() == 3) mode = torch::kTrilinear;
    auto tgf = [=](const std::vector<tg::Tensor>& x) { return x[0].interpolate(size, "linear", ac); };
    auto thf = [=](const std::vector<torch::Tensor>& x) {
      return F_::interpolate(x[0], F_::InterpolateFuncOptions().size(size).mode(mode).align_corners(ac));
    };
    cs.push_back(pair("interpolate/" + n, {F(xs)}, tgf, thf).tol(1e-5));
  };
  ip("linear_up", {1, 2, 5}, {8}, false);
  ip("linear_down", {1, 2, 8}, {3}, false);
  ip("linear_align_corners", {1, 2, 5}, {8}, true);
  ip("bilinear", {1, 2, 4, 5}, {7, 3}, false);
  ip("bilinear_align_corners", {1, 2, 4, 5}, {7, 3}, true);
  ip("trilinear", {1, 1, 3, 4, 2}, {5, 2, 3}, false);
  ip("trilinear_align_corners", {1, 1, 3, 4, 2}, {5, 2, 3}, true);
  cs.push_back(pair("interpolate/nearest", {F({1, 1, 3, 3})}, TG(x[0].interpolate({6, 6}, "nearest")), TH(x[0]))
                   .skipped("tinygrad v0.9.2 rejects it: tensor.py:1964 asserts mode == \"linear\""));
  return cs;
}

// torch reference for tinygrad's scaled_dot_product_attention: bool masks mark kept positions
torch::Tensor sdpa_ref(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, std::optional<torch::Tensor> mask,
                       bool causal) {
  torch::Tensor qk = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (causal) mask = torch::ones({q.size(-2), k.size(-2)}).tril().to(torch::kBool);
  if (mask && mask->scalar_type() == torch::kBool) qk = qk.masked_fill(mask->logical_not(), -INFINITY);
  else if (mask) qk = qk + *mask;
  return qk.softmax(-1).matmul(v);
}

std::vector<Case> attention_cases() {
  std::vector<Case> cs;
  std::vector<In> qkv{F({2, 2, 4, 8}), F({2, 2, 4, 8}), F({2, 2, 4, 8})};
  cs.push_back(pair("sdpa/plain", qkv, TG(x[0].scaled_dot_product_attention(x[1], x[2])), TH(sdpa_ref(x[0], x[1], x[2], {}, false))).tol(1e-5));
  auto with_mask = qkv;
  with_mask.push_back(NG(F({2, 2, 4, 4})));
  cs.push_back(pair("sdpa/float_mask", with_mask, TG(x[0].scaled_dot_product_attention(x[1], x[2], x[3])),
                    TH(sdpa_ref(x[0], x[1], x[2], x[3], false))).tol(1e-5));
  auto with_bool = qkv;   // every row keeps at least its diagonal
  with_bool.push_back(V({4, 4}, {1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1}, Kind::Bool));
  cs.push_back(pair("sdpa/bool_mask", with_bool, TG(x[0].scaled_dot_product_attention(x[1], x[2], x[3])),
                    TH(sdpa_ref(x[0], x[1], x[2], x[3], false))).tol(1e-5));
  cs.push_back(pair("sdpa/causal", qkv, TG(x[0].scaled_dot_product_attention(x[1], x[2], std::nullopt, 0, true)),
                    TH(sdpa_ref(x[0], x[1], x[2], {}, true))).tol(1e-5));
  cs.push_back(pair("sdpa/causal_longer_keys", {F({1, 2, 3, 8}), F({1, 2, 5, 8}), F({1, 2, 5, 4})},
                    TG(x[0].scaled_dot_product_attention(x[1], x[2], std::nullopt, 0, true)),
                    TH(sdpa_ref(x[0], x[1], x[2], {}, true))).tol(1e-5));
  return cs;
}

std::vector<Case> loss_cases() {
  std::vector<Case> cs;
  cs.push_back(pair("binary_crossentropy", {F({8}, 0.05, 0.95), NG(F({8}, 0, 1))}, TG(x[0].binary_crossentropy(x[1])),
                    TH(torch::binary_cross_entropy(x[0], x[1]))).tol(1e-5));
  cs.push_back(pair("binary_crossentropy/2d_hard_labels", {F({3, 4}, 0.05, 0.95), NG(V({3, 4}, {0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0, 1}))},
                    TG(x[0].binary_crossentropy(x[1])), TH(torch::binary_cross_entropy(x[0], x[1]))).tol(1e-5));
  cs.push_back(pair("binary_crossentropy_logits", {F({8}, -4, 4), F({8}, 0, 1)}, TG(x[0].binary_crossentropy_logits(x[1])),
                    TH(torch::binary_cross_entropy_with_logits(x[0], x[1]))).tol(1e-5));
  cs.push_back(pair("binary_crossentropy_logits/large", {F({3, 4}, -30, 30), NG(F({3, 4}, 0, 1))},
                    TG(x[0].binary_crossentropy_logits(x[1])), TH(torch::binary_cross_entropy_with_logits(x[0], x[1]))).tol(1e-5));
  auto ce = [&](const std::string& n, std::vector<In> ins, int64_t ignore, double ls) {
    auto tgf = [=](const std::vector<tg::Tensor>& x) { return x[0].sparse_categorical_crossentropy(x[1], ignore, ls); };
    auto thf = [=](const std::vector<torch::Tensor>& x) {
      return F_::cross_entropy(x[0].reshape({-1, x[0].size(-1)}), x[1].reshape({-1}),
                               F_::CrossEntropyFuncOptions().ignore_index(ignore).label_smoothing(ls));
    };
    cs.push_back(pair("sparse_categorical_crossentropy/" + n, std::move(ins), tgf, thf).tol(1e-5));
  };
  ce("plain", {F({5, 4}), Ix({5}, 0, 3)}, -1, 0);
  ce("ignore_index", {F({6, 4}), V({6}, {1, -1, 3, 0, -1, 2}, Kind::Idx)}, -1, 0);
  ce("ignore_index_custom", {F({6, 4}), V({6}, {1, 3, 3, 0, 2, 2}, Kind::Idx)}, 3, 0);
  ce("label_smoothing", {F({5, 4}), Ix({5}, 0, 3)}, -1, 0.1);
  ce("ignore_and_smoothing", {F({6, 4}), V({6}, {1, -1, 3, 0, -1, 2}, Kind::Idx)}, -1, 0.2);
  ce("3d_logits", {F({2, 3, 4}), Ix({2, 3}, 0, 3)}, -1, 0);
  ce("wide_(37,130)", {F({37, 130}, -10, 10), Ix({37}, 0, 129)}, -1, 0.1);   // CPU vector exp/log over rows
  return cs;
}

std::vector<Case> norm_cases() {
  std::vector<Case> cs;
  cs.push_back(pair("layernorm", {F({3, 8})}, TG(x[0].layernorm()), TH(torch::layer_norm(x[0], {8}))).tol(1e-5).gtol(1e-4));
  cs.push_back(pair("layernorm/(17,96)", {F({17, 96}, -3, 3)}, TG(x[0].layernorm()), TH(torch::layer_norm(x[0], {96}))).tol(1e-5).gtol(1e-4));
  cs.push_back(pair("layernorm/eps", {F({2, 3, 8})}, TG(x[0].layernorm(-1, 1e-2)), TH(torch::layer_norm(x[0], {8}, {}, {}, 1e-2)))
                   .tol(1e-5));
  cs.push_back(pair("layernorm/last_two_axes", {F({2, 3, 4})}, TG(x[0].layernorm({-2, -1})), TH(torch::layer_norm(x[0], {3, 4})))
                   .tol(1e-5));
  cs.push_back(pair("layernorm/affine_after", {F({3, 8}), F({8}), F({8})}, TG(x[0].layernorm() * x[1] + x[2]),
                    TH(torch::layer_norm(x[0], {8}, x[1], x[2])))
                   .tol(1e-5));
  // eval-mode batchnorm with running statistics (tinygrad takes invstd = 1/sqrt(var + eps))
  std::vector<In> bn{F({2, 3, 4, 4}), F({3}), F({3}), NG(F({3})), NG(F({3}, 0.5, 2))};
  cs.push_back(pair("batchnorm/running_stats", bn, TG(x[0].batchnorm(x[1], x[2], x[3], (x[4] + 1e-5).rsqrt())),
                    TH(torch::batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5, false))).tol(1e-5));
  std::vector<In> bn_noaffine{F({2, 3, 4, 4}), NG(F({3})), NG(F({3}, 0.5, 2))};
  cs.push_back(pair("batchnorm/no_affine", bn_noaffine, TG(x[0].batchnorm(std::nullopt, std::nullopt, x[1], (x[2] + 1e-5).rsqrt())),
                    TH(torch::batch_norm(x[0], {}, {}, x[1], x[2], false, 0.1, 1e-5, false))).tol(1e-5));
  cs.push_back(pair("batchnorm/2d_input", {F({4, 3}), F({3}), F({3}), NG(F({3})), NG(F({3}, 0.5, 2))},
                    TG(x[0].batchnorm(x[1], x[2], x[3], (x[4] + 1e-5).rsqrt())),
                    TH(torch::batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5, false))).tol(1e-5));
  // training-mode batchnorm: statistics from the batch, gradients through them
  cs.push_back(pair("batchnorm/batch_stats", {F({4, 3, 3, 3}), F({3}), F({3})},
                    [](const std::vector<tg::Tensor>& x) {
                      tg::Tensor mean = x[0].mean({0, 2, 3});
                      tg::Tensor invstd = (x[0].var({0, 2, 3}, false, 0) + 1e-5).rsqrt();
                      return x[0].batchnorm(x[1], x[2], mean, invstd);
                    },
                    TH(torch::batch_norm(x[0], x[1], x[2], {}, {}, true, 0.1, 1e-5, false)))
                   .tol(1e-5).gtol(1e-4));
  // training batchnorm then max_pool2d (beautiful_mnist's block; the pool's input gradient is realized once):
  // even and odd H, W (the last row and column dropped), gradients of input, weight and bias
  auto bn_pool = [&](const std::string& n, std::vector<int64_t> xs) {
    const int64_t c = xs[1];
    cs.push_back(pair("batchnorm_max_pool2d/" + n, {F(xs), F({c}, 0.5, 2), F({c})},
                      [](const std::vector<tg::Tensor>& x) {
                        tg::Tensor mean = x[0].mean({0, 2, 3}), invstd = (x[0].var({0, 2, 3}, false, 0) + 1e-5).rsqrt();
                        return x[0].batchnorm(x[1], x[2], mean, invstd).max_pool2d();
                      },
                      TH(torch::max_pool2d(torch::batch_norm(x[0], x[1], x[2], {}, {}, true, 0.1, 1e-5, false), {2, 2})))
                     .tol(1e-5).gtol(1e-4));
  };
  bn_pool("even", {4, 3, 6, 8});
  bn_pool("odd", {3, 5, 7, 9});
  bn_pool("one_window", {5, 2, 2, 3});
  cs.push_back(pair("dropout/not_training", {F({4, 5})}, TG(x[0].dropout(0.5)), TH(torch::dropout(x[0], 0.5, false))));
  cs.push_back(pair("dropout/p0_training", {F({4, 5})},
                    [](const std::vector<tg::Tensor>& x) {
                      tg::Tensor::Train t;
                      return x[0].dropout(0.0);
                    },
                    TH(torch::dropout(x[0], 0.0, true))));
  return cs;
}

}  // namespace

TEST(Conformance, Matmul) { EXPECT_EQ(run_cases("matmul", matmul_cases()), 0); }
TEST(Conformance, Conv) { EXPECT_EQ(run_cases("conv", conv_cases()), 0); }
TEST(Conformance, Pool) { EXPECT_EQ(run_cases("pool", pool_cases()), 0); }
TEST(Conformance, Einsum) { EXPECT_EQ(run_cases("einsum", einsum_cases()), 0); }
TEST(Conformance, Interpolate) { EXPECT_EQ(run_cases("interpolate", interpolate_cases()), 0); }
TEST(Conformance, Attention) { EXPECT_EQ(run_cases("attention", attention_cases()), 0); }
TEST(Conformance, Losses) { EXPECT_EQ(run_cases("loss", loss_cases()), 0); }
TEST(Conformance, Norms) { EXPECT_EQ(run_cases("norm", norm_cases()), 0); }
