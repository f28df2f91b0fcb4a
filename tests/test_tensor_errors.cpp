// Bad input to every op family throws tg::Error naming the op and the shapes (never aborts).
#include "tensor_test_util.hpp"

using namespace tg;
using namespace tgt;

// the call throws tg::Error whose message contains every fragment
#define EXPECT_TG_ERROR(stmt, ...)                                                         \
  do {                                                                                     \
    try {                                                                                  \
      stmt;                                                                                \
      ADD_FAILURE() << "no tg::Error from: " #stmt;                                        \
    } catch (const tg::Error& e) {                                                         \
      for (const char* frag : {__VA_ARGS__})                                               \
        EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what() << " lacks '" << frag << "'"; \
    }                                                                                      \
  } while (0)

TEST(TensorErrors, Creation) {
  EXPECT_TG_ERROR(Tensor::from<float>({1, 2, 3}, {2, 2}), "Tensor::from", "(2, 2)");
  EXPECT_TG_ERROR(Tensor::zeros({2, -1}), "full", "(2, -1)");
  EXPECT_TG_ERROR(Tensor::empty({-3}), "empty");
  EXPECT_TG_ERROR(Tensor::arange(0, 5, 0), "arange", "step");
  EXPECT_TG_ERROR(Tensor::eye(-1), "eye");
  EXPECT_TG_ERROR(Tensor::randint({3}, 0, 5, {.dtype = dtypes::float32}), "randint", "dtypes.float");
  EXPECT_TG_ERROR(Tensor::randint({3}, 5, 5), "randint");
  EXPECT_TG_ERROR(Tensor::rand({-2}), "rand");
}

TEST(TensorErrors, Broadcasting) {
  EXPECT_TG_ERROR(F({1, 2, 3}, {3}) + F({1, 2}, {2}), "add", "(3,)", "(2,)");
  EXPECT_TG_ERROR(F({1, 2, 3, 4, 5, 6}, {2, 3}) * F({1, 2, 3, 4}, {4, 1}), "mul", "(2, 3)", "(4, 1)");
  EXPECT_TG_ERROR(F({1, 2}, {2}).where(F({1, 2, 3}, {3}), 0.0), "where");
  EXPECT_TG_ERROR(F({1, 2}, {2}).expand({3}), "expand", "(2,)", "(3,)");
  EXPECT_TG_ERROR(F({1, 2}, {2}).expand({}), "expand");
  EXPECT_TG_ERROR(F({1}, {1}) << 2, "lshift", "dtypes.float");
  EXPECT_TG_ERROR(I({1}, {1}) >> 2, "rshift", "dtypes.int");
  EXPECT_TG_ERROR(F({1}, {1}) & 1, "bitwise_and");
  EXPECT_TG_ERROR(F({1}, {1}).clip(std::nullopt, std::nullopt), "clip");
}

TEST(TensorErrors, Movement) {
  Tensor t = F({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TG_ERROR(t.reshape({4}), "reshape", "(2, 3)", "(4,)");
  EXPECT_TG_ERROR(t.reshape({-1, -1}), "reshape", "-1");
  EXPECT_TG_ERROR(t.reshape({4, -1}), "reshape");
  EXPECT_TG_ERROR(t.permute({0, 0}), "permute", "(2, 3)");
  EXPECT_TG_ERROR(t.permute({0}), "permute");
  EXPECT_TG_ERROR(t.permute({0, 2}), "permute");
  EXPECT_TG_ERROR(t.flip({0, 0}), "flip");
  EXPECT_TG_ERROR(t.shrink({{0, 3}, {0, 3}}), "shrink", "(2, 3)");
  EXPECT_TG_ERROR(t.shrink({{0, 1}}), "shrink");
  EXPECT_TG_ERROR(t.pad({{-1, 0}, {0, 0}}), "pad");
  EXPECT_TG_ERROR(t.pad2d({1, 1, 1}), "pad2d");
  EXPECT_TG_ERROR(t.transpose(0, 2), "transpose", "dim 2");
  EXPECT_TG_ERROR(t.unsqueeze(4), "unsqueeze");
  EXPECT_TG_ERROR(t.squeeze(5), "squeeze");
  EXPECT_TG_ERROR(t.flatten(1, 0), "flatten");
  EXPECT_TG_ERROR(Tensor::cat({t, F({1, 2}, {1, 2})}), "cat", "(2, 3)", "(1, 2)");
  EXPECT_TG_ERROR(Tensor::cat({}), "cat");
  EXPECT_TG_ERROR(Tensor::stack({t, F({1, 2}, {2})}), "cat");
  EXPECT_TG_ERROR(t.split(std::vector<int64_t>{1, 1}, 1), "split", "(2, 3)");
  EXPECT_TG_ERROR(t.split(int64_t{0}), "split");
  EXPECT_TG_ERROR(t.chunk(0), "chunk");
  EXPECT_TG_ERROR(t.repeat({2}), "repeat");
  EXPECT_TG_ERROR(t.gather(0, I({0}, {1})), "gather", "(1,)");
  EXPECT_TG_ERROR(t.gather(0, F({0, 0}, {1, 2})), "gather", "int");
  EXPECT_TG_ERROR(t.gather(1, I({0, 0, 0, 0, 0, 0, 0, 0}, {4, 2})), "gather", "(4, 2)");
}

TEST(TensorErrors, Indexing) {
  Tensor t = Tensor::arange(6).reshape({2, 3});
  EXPECT_TG_ERROR((t[{2}]), "getitem", "index 2", "size 2");
  EXPECT_TG_ERROR((t[{0, -4}]), "getitem", "index -4");
  EXPECT_TG_ERROR((t[{0, 0, 0}]), "getitem", "too many");
  EXPECT_TG_ERROR((t[{Ellipsis, 0, Ellipsis}]), "getitem", "ellipsis");
  EXPECT_TG_ERROR((t[{Slice{0, 2, 0}}]), "getitem", "step");
  EXPECT_TG_ERROR((t[{F({0}, {1})}]), "getitem", "dtypes.float");
  EXPECT_TG_ERROR((t[{I({0, 1}, {2}), I({0, 1, 2}, {3})}]), "getitem");
}

TEST(TensorErrors, Reduce) {
  Tensor t = F({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TG_ERROR(t.sum(2), "sum", "dim 2", "(2, 3)");
  EXPECT_TG_ERROR(t.max(-3), "max");
  EXPECT_TG_ERROR(t.sum({0, 0}), "sum");
  EXPECT_TG_ERROR(t.softmax(3), "max");
  EXPECT_TG_ERROR(t.argmax(2), "argmax");
  EXPECT_TG_ERROR(t.cumsum(2), "cumsum");
  EXPECT_TG_ERROR(Tensor(1.0).sum(1), "sum", "0-d");
  EXPECT_TG_ERROR(t.prod(4), "prod");
}

TEST(TensorErrors, Processing) {
  Tensor a = F({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TG_ERROR(a.matmul(Tensor::ones({4, 5})), "matmul: shapes (2, 3) and (4, 5) don't match: inner dims 3 != 4");
  EXPECT_TG_ERROR(a.matmul(Tensor(2.0)), "matmul", "at least 1 dim");
  EXPECT_TG_ERROR(Tensor::ones({2, 2, 3}).matmul(Tensor::ones({3, 3, 4})), "matmul", "(2,)", "(3,)");
  Tensor x = Tensor::ones({1, 3, 4, 4});
  EXPECT_TG_ERROR(x.conv2d(Tensor::ones({2, 2, 3, 3})), "conv2d", "(1, 3, 4, 4)", "(2, 2, 3, 3)");
  EXPECT_TG_ERROR(x.conv2d(Tensor::ones({2, 3, 3})), "conv2d");
  EXPECT_TG_ERROR(x.conv2d(Tensor::ones({2, 3, 3, 3}), Tensor::ones({3})), "conv2d", "bias");
  EXPECT_TG_ERROR(x.conv2d(Tensor::ones({2, 3, 5, 5})), "conv2d", "larger than the input");
  EXPECT_TG_ERROR(x.conv2d(Tensor::ones({2, 3, 3, 3}), {}, 1, {1}, {1}, {1, 1, 1}), "conv2d", "padding");
  EXPECT_TG_ERROR(x.conv2d(Tensor::ones({2, 3, 3, 3}), {}, 1, {0}), "conv2d", "positive");
  EXPECT_TG_ERROR(x.conv2d(Tensor::ones({4, 1, 3, 3}), {}, 2), "conv2d", "groups");
  EXPECT_TG_ERROR(x.conv_transpose2d(Tensor::ones({2, 1, 3, 3})), "conv_transpose2d", "(1, 3, 4, 4)");
  EXPECT_TG_ERROR(x.max_pool2d({5, 5}), "max_pool2d", "larger than the input");
  EXPECT_TG_ERROR(x.avg_pool2d({2, 2, 2}), "avg_pool2d", "kernel_size");
  EXPECT_TG_ERROR(x.max_pool2d({2, 2}, {0, 1}), "max_pool2d", "positive");
  EXPECT_TG_ERROR(Tensor::ones({3}).triu(), "triu", "(3,)");
  EXPECT_TG_ERROR(Tensor::ones({3}).tril(), "tril");
  EXPECT_TG_ERROR(Tensor::ones({1, 3}).interpolate({4}, "nearest"), "interpolate", "nearest");
  EXPECT_TG_ERROR(Tensor::ones({1, 3}).interpolate({4, 4, 4}), "interpolate");
}

TEST(TensorErrors, Einsum) {
  Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({3, 4});
  EXPECT_TG_ERROR(Tensor::einsum("ij,jk->ik", {a}), "einsum", "2 operands", "1 tensors");
  EXPECT_TG_ERROR(Tensor::einsum("ijk,jk->ik", {a, b}), "einsum", "'ijk'", "(2, 3)");
  EXPECT_TG_ERROR(Tensor::einsum("ij,ik->jk", {a, b}), "einsum", "'i'");
  EXPECT_TG_ERROR(Tensor::einsum("ij,jk->iz", {a, b}), "einsum", "'z'");
  EXPECT_TG_ERROR(Tensor::einsum("i1,jk->ik", {a, b}), "einsum", "'1'");
  EXPECT_TG_ERROR(Tensor::einsum("ii->i", {Tensor::ones({2, 2})}), "einsum", "repeated");
}

TEST(TensorErrors, NNAndLosses) {
  Tensor x = Tensor::ones({2, 3});
  EXPECT_TG_ERROR(x.sparse_categorical_crossentropy(I({0, 1, 2}, {3})), "sparse_categorical_crossentropy", "(2, 3)", "(3,)");
  EXPECT_TG_ERROR(x.sparse_categorical_crossentropy(I({0, 1}, {2}), -1, 1.5), "label_smoothing");
  EXPECT_TG_ERROR(x.dropout(1.5), "dropout");
  EXPECT_TG_ERROR(x.one_hot(3), "one_hot", "int");
  EXPECT_TG_ERROR(I({1}, {1}).one_hot(0), "one_hot");
  EXPECT_TG_ERROR(x.multinomial(0), "multinomial");
  EXPECT_TG_ERROR(x.multinomial(2, false), "multinomial", "replacement");
  EXPECT_TG_ERROR(Tensor::ones({2, 3}).scaled_dot_product_attention(Tensor::ones({2, 4}), Tensor::ones({2, 4})),
                  "scaled_dot_product_attention", "(2, 3)", "(2, 4)");
  EXPECT_TG_ERROR(x.batchnorm({}, {}, Tensor::ones({2}), Tensor::ones({3})), "batchnorm", "mean");
  EXPECT_TG_ERROR(Tensor::kaiming_uniform({}), "kaiming_uniform");
}

TEST(TensorErrors, DataAndAutograd) {
  Tensor f = F({1, 2}, {2});
  EXPECT_TG_ERROR(f.tolist<int32_t>(), "tolist", "dtypes.float", "dtypes.int");
  EXPECT_TG_ERROR(I({1}, {1}).item<float>(), "tolist", "dtypes.int");
  EXPECT_TG_ERROR(f.item<float>(), "item", "(2,)");
  EXPECT_TG_ERROR(f.requires_grad_().sum().backward(); (f * 2).backward(), "backward", "(2,)");
  EXPECT_TG_ERROR(F({1, 2}, {2}).sum().backward(), "backward", "requires_grad");
  Tensor g = F({1, 2}, {2}).requires_grad_();
  EXPECT_TG_ERROR((g * 2).backward(F({1, 2, 3}, {3})), "backward", "(3,)");
  EXPECT_TG_ERROR(g.bitcast(dtypes::int32), "bitcast");
  Tensor a = F({1, 2}, {2}).realize();
  EXPECT_TG_ERROR(a.assign(F({1, 2, 3}, {3})), "assign", "(2,)", "(3,)");
  EXPECT_TG_ERROR(a.assign(I({1, 2}, {2})), "assign", "dtype");
  EXPECT_TG_ERROR(a.assign(F({1, 2}, {2}).requires_grad_()), "assign", "grad");
  EXPECT_TG_ERROR(F({1}, {1}).bitcast(dtypes::float16), "bitcast");
  EXPECT_TG_ERROR(F({1}, {1}).to("NOSUCHDEVICE"), "NOSUCHDEVICE");
}

// A 0-d tensor has no dim to index: ops that index shape()[dim] throw (they read past an empty shape
// before: cat of two scalars was a SIGSEGV). Ops where torch gives a 0-d dim a meaning keep working.
TEST(TensorErrors, ZeroDimTensorHasNoDims) {
  Tensor a(3.14);
  EXPECT_TG_ERROR(Tensor::cat({a, a}), "cat", "0-d", "()");
  EXPECT_TG_ERROR(Tensor::cat({a, a}, -1), "cat", "0-d");
  EXPECT_TG_ERROR(a.unflatten(0, {1}), "unflatten", "0-d");
  EXPECT_TG_ERROR(a.repeat_interleave(2, 0), "repeat_interleave", "0-d");
  EXPECT_TG_ERROR(a.split(1, 0), "split", "0-d");
  EXPECT_TG_ERROR(a.split(std::vector<int64_t>{1}, 0), "split", "0-d");
  EXPECT_TG_ERROR(a.chunk(2, 0), "chunk", "0-d");
  EXPECT_TG_ERROR(a.gather(0, Tensor(int64_t{0})), "gather", "0-d");
  EXPECT_TG_ERROR(a.transpose(0, 1), "transpose", "()");
  // torch: these are defined on a 0-d tensor
  EXPECT_EQ(Tensor::stack({a, a}).shape(), Shape({2}));
  EXPECT_EQ(a.transpose(0, -1).shape(), Shape{});
  EXPECT_EQ(Tensor(2.0).argmax(0).item<int32_t>(), 0);
  EXPECT_EQ(Tensor(2.0).argmin(-1, true).item<int32_t>(), 0);
  EXPECT_EQ(a.squeeze(0).shape(), Shape{});
  EXPECT_EQ(a.flatten().shape(), Shape({1}));
  EXPECT_EQ(Tensor(2.0).cumsum(0).item<float>(), 2.0f);
}
