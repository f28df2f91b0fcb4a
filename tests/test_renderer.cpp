// C and CUDA renderers: exact text for small kernels, and C kernels compiled with the system
// compiler and run through their NAME_call entry point.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <unordered_set>

#include "codegen/linearizer.hpp"
#include "renderer/cstyle.hpp"

using namespace tg;

namespace {
UOp ci(int64_t v) { return UOp::const_(dtypes::int32, v); }
UOp cf(double v) { return UOp::const_(dtypes::float32, v); }
UOp glob(int64_t i, DType dt) { return UOp(Ops::DEFINE_GLOBAL, dt.ptr_to(), {}, i); }
UOp range(int64_t end, int64_t axis, bool reduce = false, bool parallel = false) {
  std::vector<int64_t> arg{axis, reduce ? 1 : 0};
  if (parallel) arg.push_back(1);
  return UOp(Ops::RANGE, dtypes::int32, {ci(0), ci(end)}, arg);
}
UOp load(DType dt, const UOp& buf, const UOp& idx) { return UOp(Ops::LOAD, dt, {buf, idx}); }
UOp store(const UOp& buf, const UOp& idx, const UOp& val) { return UOp(Ops::STORE, dtypes::void_, {buf, idx, val}); }
UOp sink(std::vector<UOp> s) { return UOp(Ops::SINK, dtypes::void_, std::move(s)); }
UOp special(const std::string& name, int64_t size) { return UOp(Ops::SPECIAL, dtypes::int32, {ci(size)}, name); }

std::string entry_noargs(const std::string& name, const std::string& call) {
  return "\nvoid " + name + "_call(void** bufs, const int* vals, int core_lo, int core_hi) {\n  (void)vals; (void)core_lo; (void)core_hi;\n  " +
         call + ";\n}\n";
}

// Compiles C source into a shared object with the system compiler and loads it.
class CLib {
 public:
  explicit CLib(const std::string& src, const std::string& cc = "cc") {
    char dir[] = "/tmp/tg_render_XXXXXX";
    if (!mkdtemp(dir)) throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
    std::ofstream(dir_ + "/k.c") << src;
    std::string cmd = cc + " -O2 -march=native -Wall -Werror -shared -fPIC -o " + dir_ + "/k.so " + dir_ + "/k.c 2>" + dir_ + "/err.txt";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream e(dir_ + "/err.txt");
      throw std::runtime_error("compile failed:\n" + std::string(std::istreambuf_iterator<char>(e), {}) + "\n" + src);
    }
    h_ = dlopen((dir_ + "/k.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h_) throw std::runtime_error(dlerror());
  }
  ~CLib() {
    if (h_) dlclose(h_);
    std::system(("rm -rf " + dir_).c_str());
  }
  using Entry = void (*)(void**, const int*, int, int);
  Entry entry(const std::string& name) {
    auto f = reinterpret_cast<Entry>(dlsym(h_, (name + "_call").c_str()));
    if (!f) throw std::runtime_error("no " + name + "_call");
    return f;
  }

 private:
  std::string dir_;
  void* h_ = nullptr;
};

bool have(const char* tool) { return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0; }
}  // namespace

// seed 000: the kernel of Tensor([1,2,3]) + 2, exactly as tinygrad 0.9.2's clang renderer prints it
TEST(ClangRenderer, Seed000Exact) {
  UOp g0 = glob(0, dtypes::int32), g1 = glob(1, dtypes::int32), r = range(3, 0);
  UOp st = store(g0, r, load(dtypes::int32, g1, r).alu(BinaryOps::ADD, ci(2)));
  std::vector<UOp> uops = linearize(sink({st}));
  ClangRenderer ren;
  std::string kernel =
      "\nvoid E_3(int* restrict data0, const int* restrict data1) {\n  for (int ridx0 = 0; ridx0 < 3; ridx0++) {\n"
      "    int val0 = data1[ridx0];\n    data0[ridx0] = (val0+2);\n  }\n}";
  std::string src = ren.render("E_3", uops);
  EXPECT_EQ(src, kernel + entry_noargs("E_3", "E_3((int*)bufs[0], (const int*)bufs[1])"));

  RenderedProgram p = to_program(ren, "E_3", uops);
  EXPECT_EQ(p.src, src);
  EXPECT_EQ(p.function_name, "E_3");
  EXPECT_EQ(p.device, "CPU");
  EXPECT_EQ(p.global_size, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(p.n_bufs, 2);
  EXPECT_EQ(p.outs, (std::vector<int64_t>{0}));
  EXPECT_TRUE(p.vars.empty());
  EXPECT_EQ(p.op_estimate, 3);     // one add per element
  EXPECT_EQ(p.mem_estimate, 24);   // 3 int loads + 3 int stores, as the seed's Program

  CLib lib(src);
  int out[3] = {0, 0, 0}, in[3] = {1, 2, 3};
  void* bufs[2] = {out, in};
  lib.entry("E_3")(bufs, nullptr, 0, 0);
  EXPECT_EQ(std::vector<int>(out, out + 3), (std::vector<int>{3, 4, 5}));
}

// sum of 16 floats: DEFINE_ACC before the loop, PHI inside, store after
TEST(ClangRenderer, ReduceCompilesAndSums) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), r = range(16, 0, true);
  UOp acc = UOp(Ops::DEFINE_ACC, dtypes::float32, {cf(0.0), r}, std::vector<int64_t>{0});
  UOp phi = UOp(Ops::PHI, dtypes::float32, {acc, acc.alu(BinaryOps::ADD, load(dtypes::float32, g1, r))});
  std::vector<UOp> uops = linearize(sink({store(g0, ci(0), phi)}));
  ClangRenderer ren;
  std::string src = ren.render("r_16", uops);
  EXPECT_EQ(src,
            "\nvoid r_16(float* restrict data0, const float* restrict data1) {\n  float acc0 = 0.0f;\n"
            "  for (int ridx0 = 0; ridx0 < 16; ridx0++) {\n    float val0 = data1[ridx0];\n    acc0 = (acc0+val0);\n  }\n"
            "  data0[0] = acc0;\n}" +
                entry_noargs("r_16", "r_16((float*)bufs[0], (const float*)bufs[1])"));
  CLib lib(src);
  float in[16], out = -1;
  for (int i = 0; i < 16; i++) in[i] = 0.5f * static_cast<float>(i);
  void* bufs[2] = {&out, in};
  lib.entry("r_16")(bufs, nullptr, 0, 0);
  EXPECT_FLOAT_EQ(out, 60.0f);
}

// a parallel RANGE is bounded by the thread's slice; variables come from vals[] in sorted order
TEST(ClangRenderer, ParallelRangeAndVars) {
  UOp n = UOp(Ops::DEFINE_VAR, dtypes::int32, {ci(1), ci(100)}, std::string("n"));
  UOp a = UOp(Ops::DEFINE_VAR, dtypes::int32, {ci(0), ci(100)}, std::string("a"));
  UOp g0 = glob(0, dtypes::int32), g1 = glob(1, dtypes::int32), r = range(10, 0, false, true);
  UOp val = load(dtypes::int32, g1, r).alu(BinaryOps::MUL, n).alu(BinaryOps::ADD, a);
  std::vector<UOp> uops = linearize(sink({store(g0, r, val)}));
  ClangRenderer ren;
  RenderedProgram p = to_program(ren, "E_10", uops);
  EXPECT_NE(p.src.find("for (int ridx0 = core_lo; ridx0 < core_hi; ridx0++) {"), std::string::npos) << p.src;
  EXPECT_NE(p.src.find("const int a, const int n, int core_lo, int core_hi) {"), std::string::npos) << p.src;
  EXPECT_EQ(p.global_size, (std::vector<int64_t>{10, 1, 1}));
  EXPECT_EQ(p.vars, (std::vector<std::string>{"a", "n"}));
  CLib lib(p.src);
  int in[10], out[10] = {0};
  for (int i = 0; i < 10; i++) in[i] = i;
  void* bufs[2] = {out, in};
  int vals[2] = {7, 3};   // a=7, n=3 (sorted names)
  lib.entry("E_10")(bufs, vals, 0, 4);    // two "threads" cover [0, 10)
  lib.entry("E_10")(bufs, vals, 4, 10);
  for (int i = 0; i < 10; i++) EXPECT_EQ(out[i], i * 3 + 7) << i;
}

// int32 index math that only addresses memory (index_only_uops): loop counters and address sums, not a loop
// counter that is also part of a stored int value. The C renderer makes them long only in kernels with vector
// accumulators (tests/test_cpu_gemm.cpp ConvTileRowsAlongOutputColumns); here, without, every index stays int.
TEST(ClangRenderer, IndexOnlyMath) {
  UOp g0 = glob(0, dtypes::int32), g1 = glob(1, dtypes::float32), g2 = glob(2, dtypes::float32);
  UOp r0 = range(4, 0), r1 = range(3, 1), r2 = range(5, 2);
  UOp idx = r0.alu(BinaryOps::MUL, ci(15)).alu(BinaryOps::ADD, r1.alu(BinaryOps::MUL, ci(5))).alu(BinaryOps::ADD, r2);
  UOp off = idx.alu(BinaryOps::ADD, ci(1));   // used twice: a named local
  UOp v = load(dtypes::float32, g1, off).alu(BinaryOps::ADD, load(dtypes::float32, g1, off.alu(BinaryOps::ADD, ci(60))));
  UOp st_f = store(g2, idx, v);
  UOp val = r2.alu(BinaryOps::MUL, ci(7));   // a value
  UOp st_i = store(g0, idx, val.alu(BinaryOps::ADD, val));
  std::vector<UOp> uops = linearize(sink({st_f, st_i}));
  std::unordered_set<const UOpNode*> wide = index_only_uops(uops);
  EXPECT_TRUE(wide.count(r0.get()) && wide.count(r1.get()) && wide.count(idx.get()) && wide.count(off.get()));
  EXPECT_FALSE(wide.count(r2.get())) << "r2 is also part of a stored value";
  EXPECT_FALSE(wide.count(val.get()));
  std::string src = ClangRenderer().render("E_4_3_5", uops);
  EXPECT_EQ(src.find("long"), std::string::npos) << "no vector accumulators: clang's own vectorizer takes int32\n" << src;
  CLib lib(src);
  float in[121], outf[60];
  int outi[60];
  for (int i = 0; i < 121; i++) in[i] = float(i);
  void* bufs[3] = {outi, in, outf};
  lib.entry("E_4_3_5")(bufs, nullptr, 0, 0);
  for (int i = 0; i < 60; i++) {
    EXPECT_EQ(outf[i], float(2 * i + 62)) << i;
    EXPECT_EQ(outi[i], 14 * (i % 5)) << i;
  }
}

// masks: a gated LOAD is a ternary that never reads the masked element, a gated STORE an if
TEST(ClangRenderer, GatedLoadAndStore) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), r = range(8, 0);
  UOp ld = UOp(Ops::LOAD, dtypes::float32, {g1, r, cf(0.0), r.alu(BinaryOps::CMPLT, ci(4))});
  UOp st = UOp(Ops::STORE, dtypes::void_, {g0, r, ld, r.alu(BinaryOps::CMPNE, ci(2))});
  std::vector<UOp> uops = linearize(sink({st}));
  std::string src = ClangRenderer().render("E_8", uops);
  EXPECT_NE(src.find("    float val0 = ((ridx0<4)?data1[ridx0]:0.0f);\n"), std::string::npos) << src;
  EXPECT_NE(src.find("    if ((ridx0!=2)) { data0[ridx0] = val0; }\n"), std::string::npos) << src;
  CLib lib(src);
  float in[4] = {1, 2, 3, 4}, out[8];   // in has only 4 elements: masked reads must not happen
  for (float& o : out) o = -1;
  void* bufs[2] = {out, in};
  lib.entry("E_8")(bufs, nullptr, 0, 0);
  EXPECT_EQ(std::vector<float>(out, out + 8), (std::vector<float>{1, 2, -1, 4, 0, 0, 0, 0}));
}

TEST(ClangRenderer, CastsAndBitcasts) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::uint32), g2 = glob(2, dtypes::int32), g3 = glob(3, dtypes::float32);
  UOp g4 = glob(4, dtypes::bool_), r = range(4, 0);
  UOp li = load(dtypes::int32, g2, r), lf = load(dtypes::float32, g3, r);
  std::vector<UOp> uops = linearize(sink({store(g0, r, li.cast(dtypes::float32)), store(g1, r, lf.bitcast(dtypes::uint32)),
                                          store(g4, r, lf.cast(dtypes::bool_))}));
  std::string src = ClangRenderer().render("E_4", uops);
  EXPECT_NE(src.find("data0[ridx0] = (float)(val0);"), std::string::npos) << src;
  EXPECT_NE(src.find("float precast0 = val1;"), std::string::npos) << src;
  EXPECT_NE(src.find("data1[ridx0] = (((union { __typeof__(precast0) f; unsigned int t; }){precast0}).t);"), std::string::npos) << src;
  EXPECT_NE(src.find("data4[ridx0] = (_Bool)(val1);"), std::string::npos) << src;
  EXPECT_NE(src.find("void E_4(float* restrict data0, unsigned int* restrict data1, const int* restrict data2, "
                     "const float* restrict data3, _Bool* restrict data4)"),
            std::string::npos)
      << src;
  CLib lib(src);
  float fo[4], fi[4] = {1.0f, -2.0f, 0.0f, 0.5f};
  uint32_t uo[4];
  int ii[4] = {5, -6, 7, 0};
  bool bo[4];
  void* bufs[5] = {fo, uo, ii, fi, bo};
  lib.entry("E_4")(bufs, nullptr, 0, 0);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(fo[i], static_cast<float>(ii[i]));
    uint32_t bits;
    std::memcpy(&bits, &fi[i], 4);
    EXPECT_EQ(uo[i], bits);
    EXPECT_EQ(bo[i], fi[i] != 0.0f);
  }
}

TEST(ClangRenderer, InfNanConstants) {
  ClangRenderer ren;
  EXPECT_EQ(ren.render_const(INFINITY, dtypes::float32), "__builtin_inff()");
  EXPECT_EQ(ren.render_const(-INFINITY, dtypes::float32), "-__builtin_inff()");
  EXPECT_EQ(ren.render_const(NAN, dtypes::float32), "__builtin_nanf(\"\")");
  EXPECT_EQ(ren.render_const(INFINITY, dtypes::float64), "(double)(__builtin_inff())");
  EXPECT_EQ(ren.render_const(1.5, dtypes::float64), "(double)(1.5)");
  EXPECT_EQ(ren.render_const(1e-05, dtypes::float32), "1e-05f");
  EXPECT_EQ(ren.render_const(int64_t{5}, dtypes::int64), "(long)(5)");
  EXPECT_EQ(ren.render_const(int64_t{7}, dtypes::uint64), "(unsigned long)(7ULL)");
  EXPECT_EQ(ren.render_const(true, dtypes::bool_), "1");
  EXPECT_EQ(ren.render_const(int64_t{2}, dtypes::half), "(__fp16)(2.0)");

  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float64);
  std::vector<UOp> uops = linearize(sink({store(g0, ci(0), cf(INFINITY)), store(g0, ci(1), cf(-INFINITY)), store(g0, ci(2), cf(NAN)),
                                          store(g1, ci(0), UOp::const_(dtypes::float64, -INFINITY))}));
  std::string src = ren.render("E_inf", uops);
  EXPECT_NE(src.find("data0[2] = (__builtin_nanf(\"\"));"), std::string::npos) << src;
  EXPECT_NE(src.find("data0[1] = (-__builtin_inff());"), std::string::npos) << src;
  CLib lib(src);
  float f[3];
  double d = 0;
  void* bufs[2] = {f, &d};
  lib.entry("E_inf")(bufs, nullptr, 0, 0);
  EXPECT_TRUE(std::isinf(f[0]) && f[0] > 0);
  EXPECT_TRUE(std::isinf(f[1]) && f[1] < 0);
  EXPECT_TRUE(std::isnan(f[2]));
  EXPECT_TRUE(std::isinf(d) && d < 0);
}

// MAX gets a named value and casts its constant; SQRT/EXP2 use clang builtins, no math.h
TEST(ClangRenderer, UnaryAndMax) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), r = range(4, 0);
  UOp x = load(dtypes::float32, g1, r);
  UOp v = x.alu(BinaryOps::MAX, cf(0.0)).alu(UnaryOps::SQRT).alu(UnaryOps::SIN);
  std::vector<UOp> uops = linearize(sink({store(g0, r, v)}));
  std::string src = ClangRenderer().render("E_4", uops);
  EXPECT_NE(src.find("float alu0 = ((val0>(float)(0.0f))?val0:(float)(0.0f));"), std::string::npos) << src;
  EXPECT_NE(src.find("data0[ridx0] = __builtin_sinf(__builtin_sqrtf(alu0));"), std::string::npos) << src;
  CLib lib(src);
  float in[4] = {-1, 0, 4, 9}, out[4];
  void* bufs[2] = {out, in};
  lib.entry("E_4")(bufs, nullptr, 0, 0);
  EXPECT_FLOAT_EQ(out[0], 0);
  EXPECT_FLOAT_EQ(out[2], std::sin(2.0f));
  EXPECT_FLOAT_EQ(out[3], std::sin(3.0f));
  // EXP2 and LOG2 are left to the transcendental rewrites (vectorizable), as in tinygrad's clang renderer
  EXPECT_FALSE(ClangRenderer().supports(UnaryOps::EXP2));
  EXPECT_FALSE(ClangRenderer().supports(UnaryOps::LOG2));
}

// float4 loads/stores with clang vector typedefs, GEP as an index
TEST(ClangRenderer, VectorTypes) {
  DType f4 = dtypes::float32.vec(4);
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), r = range(2, 0);
  UOp idx = r.alu(BinaryOps::MUL, ci(4));
  UOp v = load(f4, g1, idx);
  std::vector<UOp> parts;
  for (int i = 0; i < 4; i++) parts.push_back(v.gep(3 - i));
  UOp rev = UOp(Ops::VECTORIZE, f4, parts);
  std::vector<UOp> uops = linearize(sink({store(g0, idx, rev)}));
  std::string src = ClangRenderer().render("E_2_4", uops);
  EXPECT_EQ(src.rfind("typedef float float4 __attribute__((aligned(16),vector_size(16)));\nvoid E_2_4(", 0), 0u) << src;
  // vector loads and stores go through memcpy: their address need not be aligned to the vector
  EXPECT_NE(src.find("float4 val0 = ({float4 v_; __builtin_memcpy(&v_, data1+alu0, sizeof(v_)); v_;});"), std::string::npos) << src;
  EXPECT_NE(src.find("{ float4 v_ = (float4){val0[3],val0[2],val0[1],val0[0]}; __builtin_memcpy(data0+alu0, &v_, sizeof(v_)); }"),
            std::string::npos) << src;
  CLib lib(src);
  float in[8] = {0, 1, 2, 3, 4, 5, 6, 7}, out[8];
  void* bufs[2] = {out, in};
  lib.entry("E_2_4")(bufs, nullptr, 0, 0);
  EXPECT_EQ(std::vector<float>(out, out + 8), (std::vector<float>{3, 2, 1, 0, 7, 6, 5, 4}));
}

// half buffers compute through float; clang's __fp16 (gcc needs _Float16)
TEST(ClangRenderer, Half) {
  UOp g0 = glob(0, dtypes::half), g1 = glob(1, dtypes::half), r = range(4, 0);
  UOp x = load(dtypes::half, g1, r);
  std::vector<UOp> uops = linearize(sink({store(g0, r, x.alu(BinaryOps::MUL, UOp::const_(dtypes::half, 2.0)))}));
  bool clang = have("clang");
  ClangRenderer ren(clang ? "__fp16" : "_Float16");
  std::string src = ren.render("E_4", uops);
  std::string h = clang ? "__fp16" : "_Float16";
  EXPECT_NE(src.find("data0[ridx0] = (val0*(" + h + ")(2.0));"), std::string::npos) << src;
  CLib lib(src, clang ? "clang" : "cc");
  uint16_t in[4] = {0x3C00, 0x4000, 0xBC00, 0x0000}, out[4];   // 1, 2, -1, 0
  void* bufs[2] = {out, in};
  lib.entry("E_4")(bufs, nullptr, 0, 0);
  EXPECT_EQ(std::vector<uint16_t>(out, out + 4), (std::vector<uint16_t>{0x4000, 0x4400, 0xC000, 0x0000}));
}

TEST(ClangRenderer, FunctionName) {
  EXPECT_EQ(to_function_name("E_\x1b[34m3\x1b[0m\x1b[90m\x1b[0m"), "E_3");
  EXPECT_EQ(to_function_name("r_4-2"), "r_42D2");
}

// a SPECIAL-indexed elementwise kernel: blockIdx/threadIdx, launch bounds, launch sizes
TEST(CUDARenderer, SpecialIndexedKernel) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32), g2 = glob(2, dtypes::float32);
  UOp gidx = special("gidx0", 4), lidx = special("lidx0", 32);
  UOp idx = gidx.alu(BinaryOps::MUL, ci(32)).alu(BinaryOps::ADD, lidx);
  UOp val = load(dtypes::float32, g1, idx).alu(BinaryOps::ADD, load(dtypes::float32, g2, idx));
  std::vector<UOp> uops = linearize(sink({store(g0, idx, val)}));
  CUDARenderer ren("sm_90");
  RenderedProgram p = to_program(ren, "E_4_32", uops);
  EXPECT_EQ(p.src,
            "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fffffff))\n"
            "extern \"C\" __global__ void __launch_bounds__(32) E_4_32(float* data0, const float* data1, const float* data2) {\n"
            "  int gidx0 = blockIdx.x; /* 4 */\n  int lidx0 = threadIdx.x; /* 32 */\n  int alu0 = ((gidx0*32)+lidx0);\n"
            "  float val0 = data1[alu0];\n  float val1 = data2[alu0];\n  data0[alu0] = (val0+val1);\n}");
  EXPECT_EQ(p.global_size, (std::vector<int64_t>{4, 1, 1}));
  EXPECT_EQ(p.local_size, (std::vector<int64_t>{32, 1, 1}));
  EXPECT_EQ(p.device, "CUDA");
  EXPECT_EQ(ren.tensor_cores.size(), 3u);
  EXPECT_TRUE(CUDARenderer("sm_75").tensor_cores.empty());
}

// shared memory, a barrier and an IF block
TEST(CUDARenderer, SharedMemoryBarrierIf) {
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::float32);
  UOp lidx = special("lidx0", 16);
  UOp loc = UOp(Ops::DEFINE_LOCAL, dtypes::float32.ptr_to(true), {ci(16)}, std::string("temp0"));
  UOp bar = UOp(Ops::BARRIER, dtypes::void_, {store(loc, lidx, load(dtypes::float32, g1, lidx))});
  UOp iff = UOp(Ops::IF, dtypes::void_, {lidx.alu(BinaryOps::CMPLT, ci(1)), bar});
  UOp ld = UOp(Ops::LOAD, dtypes::float32, {loc, ci(3), iff});
  std::vector<UOp> uops = linearize(sink({store(g0, ci(0), ld)}));
  std::string src = CUDARenderer().render("r_16", uops);
  EXPECT_EQ(src,
            "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fffffff))\n"
            "extern \"C\" __global__ void __launch_bounds__(16) r_16(float* data0, const float* data1) {\n"
            "  __shared__ float temp0[16];\n  int lidx0 = threadIdx.x; /* 16 */\n  float val0 = data1[lidx0];\n"
            "  temp0[lidx0] = val0;\n  __syncthreads();\n  if ((lidx0<1)) {\n    float val1 = temp0[3];\n    data0[0] = val1;\n  }\n}");
}

// half pulls in cuda_fp16.h and the half4/half8 helpers; half ops use the h* intrinsics
TEST(CUDARenderer, HalfPrefix) {
  UOp g0 = glob(0, dtypes::half), g1 = glob(1, dtypes::half), gidx = special("gidx0", 8);
  UOp v = load(dtypes::half, g1, gidx).alu(UnaryOps::SQRT);
  std::string src = CUDARenderer().render("E_8", linearize(sink({store(g0, gidx, v)})));
  EXPECT_NE(src.find("#include <cuda_fp16.h>\nstruct __align__(8) half4 { half x, y, z, w; }; __device__ half4 make_half4(half x, half y, "
                     "half z, half w) { half4 r={x, y, z, w}; return r; }\nstruct __align__(16) half8 {"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("__launch_bounds__(1) E_8(half* data0, const half* data1)"), std::string::npos) << src;
  EXPECT_NE(src.find("data0[gidx0] = hsqrt(val0);"), std::string::npos) << src;
}

// The CUDA runtime passes buffers by index and then the variables by name. With 10+ buffers the
// linearized order puts data10 before data2; the signature must not follow it (wrong gradients on the GPU).
TEST(CUDARenderer, ParametersInRuntimeOrder) {
  UOp gidx = special("gidx0", 4), sum = cf(0);
  for (int64_t i = 1; i <= 11; i++)
    if (i != 7) sum = sum.alu(BinaryOps::ADD, load(dtypes::float32, glob(i, dtypes::float32), gidx));   // data7 unused
  UOp n = UOp(Ops::DEFINE_VAR, dtypes::int32, {ci(1), ci(9)}, std::string("n")), a = UOp(Ops::DEFINE_VAR, dtypes::int32, {ci(1), ci(9)}, std::string("a"));
  sum = sum.alu(BinaryOps::ADD, n.alu(BinaryOps::ADD, a).cast(dtypes::float32));
  std::string src = CUDARenderer().render("E_4", linearize(sink({store(glob(0, dtypes::float32), gidx, sum)})));
  std::string want = "E_4(float* data0";
  for (int i = 1; i <= 11; i++) want += i == 7 ? ", const unsigned char* data7" : ", const float* data" + std::to_string(i);
  EXPECT_NE(src.find(want + ", const int a, const int n)"), std::string::npos) << src;
}

TEST(CUDARenderer, GlobalIndexLeavesLocalSizeToRuntime) {
  UOp g0 = glob(0, dtypes::int32), i0 = special("i0", 100);
  RenderedProgram p = to_program(CUDARenderer(), "E_100", linearize(sink({store(g0, i0, i0)})));
  EXPECT_NE(p.src.find("int i0 = (blockIdx.x*blockDim.x+threadIdx.x); /* 100 */"), std::string::npos) << p.src;
  EXPECT_EQ(p.global_size, (std::vector<int64_t>{100, 1, 1}));
  EXPECT_TRUE(p.local_size.empty());
}

// tensor core: the mma.sync helper is emitted once per WMMA kind and called by name
TEST(CUDARenderer, WMMA) {
  auto arg = std::make_shared<WMMAArg>();
  arg->name = TensorCore{{8, 16, 16}, dtypes::half, dtypes::float32, {}}.str();
  arg->dims = {8, 16, 16};
  arg->dtype_in = dtypes::half;
  arg->dtype_out = dtypes::float32;
  arg->device = "CUDA";
  EXPECT_EQ(arg->name, "WMMA_8_16_16_half_float");
  UOp g0 = glob(0, dtypes::float32), g1 = glob(1, dtypes::half), g2 = glob(2, dtypes::half), lidx = special("lidx0", 32);
  UOp a = load(dtypes::half.vec(8), g1, lidx.alu(BinaryOps::MUL, ci(8))), b = load(dtypes::half.vec(4), g2, lidx.alu(BinaryOps::MUL, ci(4)));
  UOp c = load(dtypes::float32.vec(4), g0, lidx.alu(BinaryOps::MUL, ci(4)));
  UOp w = UOp(Ops::WMMA, dtypes::float32.vec(4), {a, b, c}, ArgObjPtr(arg));
  std::vector<UOp> uops = linearize(sink({store(g0, lidx.alu(BinaryOps::MUL, ci(4)), w)}));
  CUDARenderer ren;
  std::string src = ren.render("wmma_test", uops);
  EXPECT_NE(src.find("__device__ float4 __WMMA_8_16_16_half_float(half8 a, half4 b, float4 c) {"), std::string::npos) << src;
  EXPECT_NE(src.find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"), std::string::npos) << src;
  EXPECT_NE(src.find("  half8 val1 = *((half8*)(data1+lidx0*8));\n"), std::string::npos) << src;
  EXPECT_NE(src.find("  float4 wmma0 = __WMMA_8_16_16_half_float(val1, val0, val2);\n"), std::string::npos) << src;
  EXPECT_NE(src.find("#include <cuda_fp16.h>\nstruct __align__(8) half4"), std::string::npos) << src;
  auto [flops, mem] = flops_mem(uops, true);
  EXPECT_EQ(flops, 2 * 8 * 16 * 16 / 32 * 32);   // per-thread share of the 8x16x16 product, 32 threads
}

// sizes that depend on a variable are resolved at launch
TEST(CUDARenderer, SymbolicLaunchDims) {
  UOp n = UOp(Ops::DEFINE_VAR, dtypes::int32, {ci(1), ci(1024)}, std::string("n"));
  UOp g0 = glob(0, dtypes::int32), gidx = UOp(Ops::SPECIAL, dtypes::int32, {n}, std::string("gidx0"));
  RenderedProgram p = to_program(CUDARenderer(), "E_n", linearize(sink({store(g0, gidx, gidx)})));
  EXPECT_NE(p.src.find("E_n(int* data0, const int n) {\n  int gidx0 = blockIdx.x; /* n */"), std::string::npos) << p.src;
  EXPECT_EQ(p.global_size[0], -1);   // unknown until the variable is bound
  auto [gs, ls] = p.launch_dims({{"n", 77}});
  EXPECT_EQ(gs, (std::vector<int64_t>{77, 1, 1}));
  EXPECT_EQ(ls, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(p.vars, (std::vector<std::string>{"n"}));
}
