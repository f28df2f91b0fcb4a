// The realize engine end to end on the CPU: hand-built ASTs + Buffers -> compile -> run -> results.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "engine/realize.hpp"
#include "lazy/lazy.hpp"
#include "runtime/device.hpp"
#include "shape/shapetracker_arg.hpp"

using namespace tg;

namespace {

UOp gbuf(int64_t i, DType dt) { return UOp(Ops::DEFINE_GLOBAL, dt.ptr_to(), {}, i); }
UOp load(int64_t i, DType dt, const ShapeTracker& st) { return UOp(Ops::LOAD, dt, {gbuf(i, dt), st_uop(st)}); }
UOp store(int64_t i, DType dt, const ShapeTracker& st, const UOp& v) { return UOp(Ops::STORE, dtypes::void_, {gbuf(i, dt), st_uop(st), v}); }
UOp cnst(ConstType v, DType dt, const ShapeTracker& st) {
  Arg a = std::holds_alternative<double>(v) ? Arg(std::get<double>(v)) : Arg(const_to_int(v));
  return UOp(Ops::CONST, dt, {st_uop(st)}, a);
}
UOp sink(const UOp& s) { return UOp(Ops::SINK, dtypes::void_, {s}); }
ShapeTracker sh(const Shape& s) { return ShapeTracker::from_shape(s); }

template <class T>
std::shared_ptr<Buffer> buf_from(const std::vector<T>& v, DType dt) {
  auto b = std::make_shared<Buffer>("CPU", static_cast<int64_t>(v.size()), dt);
  b->copyin(v.data(), v.size() * sizeof(T));
  return b;
}
template <class T>
std::vector<T> to_vec(Buffer& b) {
  std::vector<T> out(b.size);
  b.copyout(out.data(), out.size() * sizeof(T));
  return out;
}
ScheduleItem kernel_item(const UOp& ast, std::vector<std::shared_ptr<Buffer>> bufs, std::vector<std::string> md = {}) {
  ScheduleItem si;
  si.kind = MetaOps::KERNEL;
  si.ast = Access::ast(ast);
  si.bufs = std::move(bufs);
  si.metadata = std::move(md);
  return si;
}
UOp add2_ast() {
  auto c = cnst(int64_t{2}, dtypes::int32, sh({1}).expand({3}));
  return sink(store(0, dtypes::int32, sh({3}), load(1, dtypes::int32, sh({3})).alu(BinaryOps::ADD, c)));
}

}  // namespace

TEST(Realize, AddConstMatchesSeedKernel) {
  auto in = buf_from<int32_t>({1, 2, 3}, dtypes::int32);
  auto out = std::make_shared<Buffer>("CPU", 3, dtypes::int32);
  clear_method_cache();
  testing::internal::CaptureStdout();
  {
    Context ctx({{"DEBUG", 4}});
    run_schedule({kernel_item(add2_ast(), {out, in}, {"__add__"})});
  }
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_EQ(to_vec<int32_t>(*out), std::vector<int32_t>({3, 4, 5}));
  EXPECT_NE(log.find("void E_3(int* restrict data0, const int* restrict data1) {"), std::string::npos) << log;
  EXPECT_NE(log.find("data0[ridx0] = (val0+2);"), std::string::npos) << log;
  // the DEBUG=2 line: device, number, name, timing and the metadata
  EXPECT_NE(log.find("*** CPU"), std::string::npos) << log;
  EXPECT_NE(log.find("E_3"), std::string::npos);
  EXPECT_NE(log.find("GFLOPS"), std::string::npos);
  EXPECT_NE(log.find("[__add__]"), std::string::npos) << log;
}

TEST(Realize, SumReduce) {
  std::vector<float> x(16 * 4);
  std::iota(x.begin(), x.end(), 0.f);
  auto in = buf_from(x, dtypes::float32);
  auto out = std::make_shared<Buffer>("CPU", 16, dtypes::float32);
  UOp red(Ops::REDUCE_AXIS, dtypes::float32, {load(1, dtypes::float32, sh({16, 4}))}, ReduceArg{ReduceOps::SUM, {1}});
  run_schedule({kernel_item(sink(store(0, dtypes::float32, sh({16, 1}), red)), {out, in})});
  auto got = to_vec<float>(*out);
  for (int r = 0; r < 16; r++) EXPECT_FLOAT_EQ(got[r], 4 * (4 * r) + 6) << r;
}

TEST(Realize, MaxReduceOverTheFirstAxis) {
  std::vector<float> x = {1, 9, 3, 7, 5, 2, -4, 8, 6};   // 3x3
  auto in = buf_from(x, dtypes::float32);
  auto out = std::make_shared<Buffer>("CPU", 3, dtypes::float32);
  UOp red(Ops::REDUCE_AXIS, dtypes::float32, {load(1, dtypes::float32, sh({3, 3}))}, ReduceArg{ReduceOps::MAX, {0}});
  run_schedule({kernel_item(sink(store(0, dtypes::float32, sh({1, 3}), red)), {out, in})});
  EXPECT_EQ(to_vec<float>(*out), std::vector<float>({7, 9, 6}));
}

TEST(Realize, MaskedPaddedLoad) {
  // out = pad(in, (1, 2)) + 1 over int32: the padded elements load 0
  auto in = buf_from<int32_t>({10, 20, 30}, dtypes::int32);
  auto out = std::make_shared<Buffer>("CPU", 6, dtypes::int32);
  UOp v = load(1, dtypes::int32, sh({3}).pad({{1, 2}}));
  UOp ast = sink(store(0, dtypes::int32, sh({6}), v.alu(BinaryOps::ADD, cnst(int64_t{1}, dtypes::int32, sh({1}).expand({6})))));
  run_schedule({kernel_item(ast, {out, in})});
  EXPECT_EQ(to_vec<int32_t>(*out), std::vector<int32_t>({1, 11, 21, 31, 1, 1}));
}

TEST(Realize, BigElementwiseRunsOnThreads) {
  const int64_t n = int64_t{1} << 17;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; i++) x[i] = static_cast<float>(i % 1000) * 0.5f;
  auto in = buf_from(x, dtypes::float32);
  UOp v = load(1, dtypes::float32, sh({n}));
  UOp ast = sink(store(0, dtypes::float32, sh({n}), v.alu(BinaryOps::MUL, cnst(3.0, dtypes::float32, sh({1}).expand({n})))));
  auto runner = get_runner("CPU", ast);
  EXPECT_GT(runner->p.global_size[0], 1) << "the first loop should be split over threads";
  for (int64_t threads : {1, 2}) {
    Context ctx({{"THREADS", threads}});
    auto out = std::make_shared<Buffer>("CPU", n, dtypes::float32);
    run_schedule({kernel_item(ast, {out, in})});
    auto got = to_vec<float>(*out);
    for (int64_t i = 0; i < n; i += 997) ASSERT_FLOAT_EQ(got[i], x[i] * 3.0f) << "THREADS=" << threads << " i=" << i;
    EXPECT_FLOAT_EQ(got[n - 1], x[n - 1] * 3.0f);
  }
}

TEST(Realize, MethodCacheSkipsRecompiles) {
  clear_method_cache();
  Context ctx({{"CACHELEVEL", 0}});   // no disk cache: every miss really compiles
  Compiler& comp = get_device("CPU").compiler();
  auto in = buf_from<int32_t>({5, 6, 7}, dtypes::int32);
  auto out = std::make_shared<Buffer>("CPU", 3, dtypes::int32);
  const int64_t before = comp.compile_count;
  run_schedule({kernel_item(add2_ast(), {out, in})});
  EXPECT_EQ(comp.compile_count, before + 1);
  auto out2 = std::make_shared<Buffer>("CPU", 3, dtypes::int32);
  run_schedule({kernel_item(add2_ast(), {out2, in})});
  EXPECT_EQ(comp.compile_count, before + 1);
  EXPECT_EQ(get_runner("CPU", add2_ast()), get_runner("CPU", add2_ast()));
  EXPECT_EQ(to_vec<int32_t>(*out2), std::vector<int32_t>({7, 8, 9}));
}

TEST(Realize, CountersAndEstimates) {
  GlobalCounters::reset();
  auto in = buf_from<int32_t>({1, 2, 3}, dtypes::int32);
  auto out = std::make_shared<Buffer>("CPU", 3, dtypes::int32);
  auto r = get_runner("CPU", add2_ast());
  EXPECT_EQ(r->op_estimate, 3);        // three adds
  EXPECT_EQ(r->mem_estimate, 24);      // 12 bytes in, 12 out
  run_schedule({kernel_item(add2_ast(), {out, in})});
  EXPECT_EQ(GlobalCounters::kernel_count, 1);
  EXPECT_EQ(GlobalCounters::global_ops, 3);
  EXPECT_EQ(GlobalCounters::global_mem, 24);
}

TEST(Realize, CopyAndEmptyItems) {
  auto src = buf_from<float>({1.5f, 2.5f}, dtypes::float32);
  auto dst = std::make_shared<Buffer>("CPU", 2, dtypes::float32);
  ScheduleItem copy;
  copy.kind = MetaOps::COPY;
  copy.bufs = {dst, src};
  ScheduleItem empty;
  empty.kind = MetaOps::EMPTY;
  auto e = std::make_shared<Buffer>("CPU", 4, dtypes::int32);
  empty.bufs = {e};
  run_schedule({copy, empty});
  EXPECT_EQ(to_vec<float>(*dst), std::vector<float>({1.5f, 2.5f}));
  EXPECT_TRUE(e->is_allocated());
  auto bad = std::make_shared<Buffer>("CPU", 3, dtypes::float32);
  copy.bufs = {bad, src};
  EXPECT_THROW(run_schedule({copy}), Error);
}

TEST(Realize, NooptKeepsTheKernelPlain) {
  clear_method_cache();
  std::vector<float> x(64, 1.f);
  auto in = buf_from(x, dtypes::float32);
  UOp v = load(1, dtypes::float32, sh({64}));
  UOp ast = sink(store(0, dtypes::float32, sh({64}), v.alu(BinaryOps::ADD, v)));
  std::string src_opt = get_runner("CPU", ast)->p.src, src_noopt;
  {
    Context ctx({{"NOOPT", 1}});
    src_noopt = get_runner("CPU", ast)->p.src;
  }
  EXPECT_NE(src_opt, src_noopt);   // hand-coded opts upcast by 4
  EXPECT_NE(src_noopt.find("ridx0 < 64"), std::string::npos) << src_noopt;
}

// A cached kernel is reused only while the settings its codegen read are the same (here EXPAND_SSA, read by the C
// renderer); settings that only print (DEBUG) keep it.
TEST(Realize, MethodCacheFollowsCodegenSettings) {
  clear_method_cache();
  UOp v = load(1, dtypes::float32, sh({64}));
  UOp ast = sink(store(0, dtypes::float32, sh({64}), v.alu(BinaryOps::MUL, v).alu(BinaryOps::ADD, v)));
  // the source with the kernel's name taken out (a recompile numbers the name anew)
  auto body = [](const std::shared_ptr<CompiledRunner>& r) {
    std::string s = r->p.src;
    for (size_t at; (at = s.find(r->p.function_name)) != std::string::npos;) s.erase(at, r->p.function_name.size());
    return s;
  };
  auto plain = get_runner("CPU", ast);
  {
    Context debug({{"DEBUG", 1}});
    EXPECT_EQ(get_runner("CPU", ast), plain) << "DEBUG changes no kernel";
  }
  std::shared_ptr<CompiledRunner> expanded;
  {
    Context ssa({{"EXPAND_SSA", 1}});
    expanded = get_runner("CPU", ast);
    EXPECT_NE(expanded, plain) << "the kernel cached with EXPAND_SSA unset was reused";
    EXPECT_NE(body(expanded), body(plain));
    EXPECT_EQ(get_runner("CPU", ast), expanded);
  }
  auto again = get_runner("CPU", ast);
  EXPECT_NE(again, expanded) << "the EXPAND_SSA=1 kernel was reused after the Context ended";
  EXPECT_EQ(body(again), body(plain));
  EXPECT_EQ(method_cache_size(), 2u) << "one kernel per key: the device's and the device kind's";
}

// ******************** through LazyBuffer + create_schedule ********************

namespace {
LazyBufferPtr lb_from(const std::vector<float>& v, const Shape& shape) {
  return LazyBuffer::from_buffer(buf_from(v, dtypes::float32), shape);
}
std::vector<float> realize_lb(const LazyBufferPtr& x) {
  run_schedule(create_schedule({x}));
  EXPECT_TRUE(x->base()->realized());
  return to_vec<float>(*x->base()->buffer);
}
}  // namespace

TEST(RealizeLazy, ElementwiseWithConst) {
  auto a = lb_from({1, 2, 3}, {3});
  auto out = a->e(BinaryOps::ADD, a->const_(2.0));
  EXPECT_EQ(realize_lb(out), std::vector<float>({3, 4, 5}));
}

TEST(RealizeLazy, ReduceThenElementwise) {
  // (a * b).sum(axis=1) + 1 over 2x3
  auto a = lb_from({1, 2, 3, 4, 5, 6}, {2, 3}), b = lb_from({1, 1, 1, 2, 2, 2}, {2, 3});
  auto s = a->e(BinaryOps::MUL, b)->r(ReduceOps::SUM, {1});
  auto out = s->e(BinaryOps::ADD, s->const_(1.0));
  EXPECT_EQ(realize_lb(out), std::vector<float>({7, 31}));
}

TEST(RealizeLazy, PermutePadAndExpand) {
  // transpose 2x3 -> 3x2, pad the rows by one on each side, multiply by a broadcast row
  auto a = lb_from({1, 2, 3, 4, 5, 6}, {2, 3});
  auto t = a->permute({1, 0})->pad({{1, 1}, {0, 0}});          // 5x2
  auto row = lb_from({10, 100}, {1, 2})->expand({5, 2});
  auto out = t->e(BinaryOps::MUL, row)->contiguous();
  EXPECT_EQ(realize_lb(out), std::vector<float>({0, 0, 10, 400, 20, 500, 30, 600, 0, 0}));
}

TEST(RealizeLazy, TwoKernelsWithAnIntermediate) {
  // a.sum() expanded back over a forces two kernels (without row kernels, which fuse them)
  Context no_rows(std::map<std::string, std::string>{{"FUSE_ROWS", "0"}});
  auto a = lb_from({1, 2, 3, 4}, {4});
  auto s = a->r(ReduceOps::SUM, {0});   // shape (1,)
  auto out = a->e(BinaryOps::ADD, s->expand({4}));
  auto sched = create_schedule({out});
  size_t n_kernels = 0;
  for (auto& si : sched) n_kernels += si.kind == MetaOps::KERNEL;
  EXPECT_EQ(n_kernels, 2u);
  run_schedule(sched);
  EXPECT_EQ(to_vec<float>(*out->base()->buffer), std::vector<float>({11, 12, 13, 14}));
}

// ******************** CUDA (skipped without a GPU) ********************

namespace {
bool has_cuda() { return cuda_device_count() > 0; }
std::shared_ptr<Buffer> to_cuda(const std::shared_ptr<Buffer>& b) {
  auto d = std::make_shared<Buffer>("CUDA", b->size, b->dtype);
  copy_buffer(*d, *b);
  return d;
}
std::vector<float> from_cuda(Buffer& b) {
  std::vector<float> out(b.size);
  b.copyout(out.data(), out.size() * sizeof(float));
  return out;
}
}  // namespace

TEST(RealizeCUDA, ElementwiseWithLocals) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 4096;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; i++) x[i] = static_cast<float>(i % 37);
  auto in = to_cuda(buf_from(x, dtypes::float32));
  auto out = std::make_shared<Buffer>("CUDA", n, dtypes::float32);
  UOp v = load(1, dtypes::float32, sh({64, 64}));
  UOp ast = sink(store(0, dtypes::float32, sh({64, 64}), v.alu(BinaryOps::ADD, cnst(1.0, dtypes::float32, sh({1, 1}).expand({64, 64})))));
  run_schedule({kernel_item(ast, {out, in})});
  auto got = from_cuda(*out);
  for (int64_t i = 0; i < n; i++) ASSERT_FLOAT_EQ(got[i], x[i] + 1) << i;
  EXPECT_NE(get_runner("CUDA", ast)->p.src.find("threadIdx"), std::string::npos);
}

TEST(RealizeCUDA, GroupedReduce) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  // 4 rows of 4096: hand-coded opts GROUPTOP the reduce through shared memory
  const int64_t rows = 4, cols = 4096;
  std::vector<float> x(rows * cols);
  for (int64_t i = 0; i < rows * cols; i++) x[i] = static_cast<float>((i * 7) % 13);
  auto in = to_cuda(buf_from(x, dtypes::float32));
  auto out = std::make_shared<Buffer>("CUDA", rows, dtypes::float32);
  UOp red(Ops::REDUCE_AXIS, dtypes::float32, {load(1, dtypes::float32, sh({rows, cols}))}, ReduceArg{ReduceOps::SUM, {1}});
  UOp ast = sink(store(0, dtypes::float32, sh({rows, 1}), red));
  run_schedule({kernel_item(ast, {out, in})});
  auto got = from_cuda(*out);
  for (int64_t r = 0; r < rows; r++) {
    double want = 0;
    for (int64_t c = 0; c < cols; c++) want += x[r * cols + c];
    EXPECT_FLOAT_EQ(got[r], static_cast<float>(want)) << r;
  }
  EXPECT_NE(get_runner("CUDA", ast)->p.src.find("__shared__"), std::string::npos);
}

TEST(RealizeCUDA, MatvecAndCopyBack) {
  if (!has_cuda()) GTEST_SKIP() << "no CUDA device";
  // y = W x with W 64x256: the MV heuristic (GROUP, LOCAL, UPCAST); then COPY the result to the CPU
  const int64_t m = 64, k = 256;
  std::vector<float> w(m * k), xv(k);
  for (int64_t i = 0; i < m * k; i++) w[i] = static_cast<float>(i % 5) - 2;
  for (int64_t i = 0; i < k; i++) xv[i] = static_cast<float>(i % 3);
  auto wb = to_cuda(buf_from(w, dtypes::float32)), xb = to_cuda(buf_from(xv, dtypes::float32));
  auto y = std::make_shared<Buffer>("CUDA", m, dtypes::float32);
  UOp mul = load(1, dtypes::float32, sh({1, k}).expand({m, k})).alu(BinaryOps::MUL, load(2, dtypes::float32, sh({m, k})));
  UOp red(Ops::REDUCE_AXIS, dtypes::float32, {mul}, ReduceArg{ReduceOps::SUM, {1}});
  UOp ast = sink(store(0, dtypes::float32, sh({m, 1}), red));
  auto ycpu = std::make_shared<Buffer>("CPU", m, dtypes::float32);
  ScheduleItem copy;
  copy.kind = MetaOps::COPY;
  copy.bufs = {ycpu, y};
  run_schedule({kernel_item(ast, {y, xb, wb}), copy});
  auto got = to_vec<float>(*ycpu);
  for (int64_t r = 0; r < m; r++) {
    double want = 0;
    for (int64_t c = 0; c < k; c++) want += w[r * k + c] * xv[c];
    EXPECT_FLOAT_EQ(got[r], static_cast<float>(want)) << r;
  }
}

// ******************** opts keep results ********************

TEST(RealizeOpts, EveryOptComboGivesTheSameSums) {
  // out[r] = sum_c (in[r, c] * 2) over 12x20, with each list of opts; PADTO pads the reduce with zeros
  const int64_t rows = 12, cols = 20;
  std::vector<float> x(rows * cols);
  for (int64_t i = 0; i < rows * cols; i++) x[i] = static_cast<float>((i * 5) % 11) - 3;
  auto in = buf_from(x, dtypes::float32);
  UOp v = load(1, dtypes::float32, sh({rows, cols}));
  UOp red(Ops::REDUCE_AXIS, dtypes::float32, {v.alu(BinaryOps::MUL, cnst(2.0, dtypes::float32, sh({1, 1}).expand({rows, cols})))},
          ReduceArg{ReduceOps::SUM, {1}});
  UOp ast = sink(store(0, dtypes::float32, sh({rows, 1}), red));
  std::vector<float> want(rows, 0);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) want[r] += 2 * x[r * cols + c];
  const std::vector<std::vector<Opt>> combos = {
      {},
      {{OptOps::UPCAST, 0, 4}},
      {{OptOps::UNROLL, 0, 4}},
      {{OptOps::UNROLL, 0, 0}},
      {{OptOps::UPCAST, 0, 3}, {OptOps::UNROLL, 0, 5}},
      {{OptOps::UPCAST, 0, 0}, {OptOps::UNROLL, 0, 2}},
      {{OptOps::PADTO, 1, 32}, {OptOps::UNROLL, 0, 4}},
      {{OptOps::PADTO, 0, 16}, {OptOps::UPCAST, 0, 4}},
  };
  for (const auto& opts : combos) {
    Kernel k(ast, get_renderer("CPU"));
    std::string desc;
    for (const Opt& o : opts) k.apply_opt(o), desc += o.str() + " ";
    CompiledRunner runner(k.to_program());
    auto out = std::make_shared<Buffer>("CPU", rows, dtypes::float32);
    out->ensure_allocated();
    runner({out.get(), in.get()}, {}, false);
    EXPECT_EQ(to_vec<float>(*out), want) << desc << "\n" << runner.p.src;
  }
}
