// Seeing inside: kernel origin metadata (fusion, DEBUG=2, errors), GRAPH=1 dot files, PROFILE=1
// traces and DEBUG=6 disassembly, on the CPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/graph.hpp"
#include "engine/profile.hpp"
#include "engine/realize.hpp"
#include "lazy/metadata.hpp"
#include "runtime/device.hpp"
#include "runtime/disasm.hpp"
#include "runtime/tools.hpp"
#include "tg/jit.hpp"
#include "tg/json.hpp"
#include "tg/origin.hpp"
#include "tg/tensor.hpp"

using namespace tg;

namespace {

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string fresh_dir(const std::string& name) {
  const std::string d = temp_dir() + "/tg_test_viz_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

std::vector<const ScheduleItem*> kernels(const std::vector<ScheduleItem>& s) {
  std::vector<const ScheduleItem*> r;
  for (auto& si : s) if (si.kind == MetaOps::KERNEL) r.push_back(&si);
  return r;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

// ---------------------------------------------------------------- metadata

TEST(Metadata, FusedKernelListsEveryOp) {
  Tensor x = Tensor::from<float>({1, -2, 3, -4}, {4});
  Tensor y = ((x * 2).relu() + 1).exp();
  auto sched = y.schedule();
  auto k = kernels(sched);
  ASSERT_EQ(k.size(), 1u);   // one fused elementwise kernel
  const auto& md = k[0]->metadata;
  for (const char* op : {"mul", "relu", "add", "exp"}) EXPECT_TRUE(has(md, op)) << op << " missing from " << format_metadata(md);
  // inputs first: the order the user wrote them
  EXPECT_EQ(format_metadata(md), "[mul, relu, add, exp]");
}

TEST(Metadata, ReduceFusesItsInputsAndOutputsOps) {
  Tensor x = Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = (x.sqrt().sum(1) * 3).neg();
  auto sched = y.schedule();
  auto k = kernels(sched);
  ASSERT_EQ(k.size(), 1u);
  for (const char* op : {"sqrt", "sum", "mul", "neg"}) EXPECT_TRUE(has(k[0]->metadata, op)) << op << " " << format_metadata(k[0]->metadata);
}

TEST(Metadata, OuterOpWinsAndOriginAddsTheLine) {
  Tensor x = Tensor::from<float>({1, 2, 3, 4}, {1, 4});
  const int line = __LINE__ + 3;   // the Origin's line
  Tensor y(0.0);
  {
    Origin here;
    y = x.softmax();
  }
  std::vector<std::string> all;
  auto sched = y.schedule();
  for (auto* k : kernels(sched)) all.insert(all.end(), k->metadata.begin(), k->metadata.end());
  ASSERT_FALSE(all.empty());
  for (auto& m : all) EXPECT_EQ(m, "softmax @ test_viz.cpp:" + std::to_string(line)) << "softmax's max/exp/sum are not the user's ops";
}

TEST(Metadata, BackwardKernelsNameTheForwardOp) {
  Tensor w = Tensor::from<float>({1, -2, 3, -4}, {4}).requires_grad_();
  Tensor loss = (w * 3).relu().sum();
  loss.backward();
  std::vector<std::string> all;
  auto sched = w.grad()->schedule();
  for (auto* k : kernels(sched)) all.insert(all.end(), k->metadata.begin(), k->metadata.end());
  EXPECT_TRUE(has(all, "relu bw")) << format_metadata(all);
  EXPECT_TRUE(has(all, "mul bw")) << format_metadata(all);
}

TEST(Metadata, Debug2LineShowsOpsAndLine) {
  Tensor x = Tensor::from<float>({1, 2, 3, 4}, {4});
  Tensor y(0.0);
  const int line = __LINE__ + 2;   // the Origin's line
  {
    Origin here;
    y = (x + 1).relu();
  }
  testing::internal::CaptureStdout();
  {
    Context ctx({{"DEBUG", 2}});
    y.realize();
  }
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_NE(log.find("[add, relu @ test_viz.cpp:" + std::to_string(line) + "]"), std::string::npos) << log;
}

TEST(Metadata, FailingCompileNamesTheOpAndSavesTheSource) {
  clear_method_cache();
  Tensor x = Tensor::from<float>({1, 2, 3, 4}, {4});
  Tensor y(0.0);
  const int line = __LINE__ + 2;   // the Origin's line
  {
    Origin here;
    y = (x * 7).sin();   // a kernel no other test compiles: the method cache can't hold it
  }
  std::string msg;
  {
    Context ctx(std::map<std::string, std::string>{{"CC", "false"}, {"CACHELEVEL", "0"}});   // `false` fails every compile
    try {
      y.realize();
    } catch (const Error& e) {
      msg = e.what();
    }
  }
  clear_method_cache();
  ASSERT_FALSE(msg.empty()) << "a failing compiler must raise tg::Error";
  EXPECT_NE(msg.find("CPU compile failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[mul, sin @ test_viz.cpp:" + std::to_string(line) + "]"), std::string::npos) << msg;
  const std::string key = "the generated source is saved to ";
  const size_t at = msg.find(key);
  ASSERT_NE(at, std::string::npos) << msg;
  std::string path = msg.substr(at + key.size());
  path = path.substr(0, path.find('\n'));
  const std::string src = read(path);
  EXPECT_NE(src.find("void E_"), std::string::npos) << path << ":\n" << src;
  std::filesystem::remove(path);
}

TEST(Metadata, SchedulingErrorNamesTheOp) {
  Tensor a = Tensor::from<float>({1, 2, 3, 4}, {2, 2}).realize();
  const int line = __LINE__ + 2;   // the Origin's line
  {
    Origin here;
    a.assign(a.T() + a);   // reads its own target through a permuted view: can't run in place
  }
  try {
    a.realize();
    FAIL() << "an assign reading its target permuted must throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("must be contiguous"), std::string::npos) << msg;
    EXPECT_NE(msg.find("while scheduling the kernel made by [assign @ test_viz.cpp:" + std::to_string(line) + "]"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------- GRAPH=1

TEST(Graph, DotFilesNameTheOpsAndParse) {
  const std::string dir = fresh_dir("graph");
  Context ctx(std::map<std::string, std::string>{{"GRAPH", "1"}, {"GRAPHPATH", dir}});
  graph::clear();
  Tensor a = Tensor::from<float>({1, 2, 3, 4}, {2, 2}), b = Tensor::from<float>({4, 3, 2, 1}, {2, 2});
  Tensor y = (a + b).relu().sum(1);
  y.realize();
  const std::string net = graph::lazy_dot(), sched = graph::schedule_dot();
  EXPECT_EQ(net.rfind("digraph net {", 0), 0u) << net;
  for (const char* s : {"ADD", "SUM", "BUFFER", "add", "relu", "sum", "#FFA0A0", "#a0a0ff", "(2, 2)"})
    EXPECT_NE(net.find(s), std::string::npos) << s << " not in\n" << net;
  EXPECT_NE(net.find("->"), std::string::npos) << net;
  EXPECT_NE(sched.find("r_2_2"), std::string::npos) << sched;   // the kernel's name, one box
  EXPECT_NE(sched.find("[add, relu, sum]"), std::string::npos) << sched;
  auto files = graph::save();
  graph::clear();
  ASSERT_GE(files.size(), 2u);
  EXPECT_EQ(read(dir + "/net.dot"), net);
  EXPECT_EQ(read(dir + "/schedule.dot"), sched);
  if (!find_tool("dot")) GTEST_SKIP() << "Graphviz dot is not installed (scripts/setup installs graphviz): SVG not checked";
  for (const char* f : {"/net.svg", "/schedule.svg"}) EXPECT_NE(read(dir + f).find("<svg"), std::string::npos) << f;
  EXPECT_NE(read(dir + "/net.svg").find("relu"), std::string::npos);
  std::filesystem::remove_all(dir);
  graph::clear();
}

TEST(Graph, OffRecordsNothing) {
  graph::clear();
  Tensor a = Tensor::from<float>({1, 2}, {2});
  (a * 5).realize();
  EXPECT_EQ(graph::lazy_dot().find("->"), std::string::npos);
  EXPECT_EQ(graph::schedule_dot().find("label"), std::string::npos);
}

// ---------------------------------------------------------------- PROFILE=1

TEST(Profile, TraceIsJsonWithOneEventPerKernel) {
  const std::string dir = fresh_dir("profile"), path = dir + "/trace.json";
  Context ctx(std::map<std::string, std::string>{{"PROFILE", "1"}, {"PROFILEPATH", path}, {"FUSE_ROWS", "0"}});
  profile::clear();
  clear_method_cache();   // so the kernels go through codegen and compile (a disk-cache hit still counts as a compile span)
  Tensor a = Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor m = a.max(1, true);
  Tensor y = (a - m).exp();   // the max realizes first: two kernels
  auto sched = y.schedule();
  const size_t n_kernels = kernels(sched).size();
  ASSERT_EQ(n_kernels, 2u);
  run_schedule(sched);
  EXPECT_EQ(profile::save(), path);

  const std::string text = read(path);
  Json root;
  ASSERT_NO_THROW(root = json_parse(text, path)) << text;
  const Json* evs = root.find("traceEvents");
  ASSERT_TRUE(evs && evs->kind == Json::Kind::Array);
  int cpu_pid = -1, host_pid = -1;
  for (auto& e : evs->arr)
    if (e.find("ph")->str == "M" && e.find("name")->str == "process_name") {
      const std::string track = e.find("args")->find("name")->str;
      if (track == "CPU") cpu_pid = static_cast<int>(e.find("pid")->num);
      if (track == "HOST") host_pid = static_cast<int>(e.find("pid")->num);
    }
  ASSERT_GE(cpu_pid, 0) << "a CPU track";
  ASSERT_GE(host_pid, 0) << "a HOST track";
  size_t kernel_events = 0;
  bool schedule_span = false;
  int codegen = 0, compile = 0;
  for (auto& e : evs->arr) {
    if (e.find("ph")->str != "X") continue;
    if (static_cast<int>(e.find("pid")->num) == cpu_pid) {
      kernel_events++;
      const Json* args = e.find("args");
      ASSERT_TRUE(args->find("GFLOPS") && args->find("GB/s") && args->find("time_us")) << e.find("name")->str;
      EXPECT_GE(e.find("dur")->num, 0);
      EXPECT_NE(args->find("metadata"), nullptr);
    }
    if (static_cast<int>(e.find("pid")->num) != host_pid) continue;
    const std::string& name = e.find("name")->str;
    schedule_span |= name == "schedule";
    codegen += name == "codegen";
    compile += name.rfind("compile ", 0) == 0;
  }
  EXPECT_EQ(kernel_events, n_kernels);
  EXPECT_TRUE(schedule_span);
  EXPECT_EQ(codegen, static_cast<int>(n_kernels));
  EXPECT_EQ(compile, static_cast<int>(n_kernels));
  std::filesystem::remove_all(dir);
  profile::clear();   // nothing left for the exit hook to write
}

TEST(Profile, JitCaptureAndReplayAreSpans) {
  Context ctx({{"PROFILE", 1}});
  profile::clear();
  TinyJit jit([](const std::vector<Tensor>& in) { return std::vector<Tensor>{(in[0] * 2 + 1).relu()}; });
  for (int i = 0; i < 4; i++) jit({Tensor::from<float>({1, -2, 3, float(i)}, {4})});
  int capture = 0, replay = 0, jit_kernels = 0;
  for (auto& e : profile::events()) {
    capture += e.name == "TinyJit capture";
    replay += e.name == "TinyJit replay";
    for (auto& [k, v] : e.args) jit_kernels += k == "jit" && v == "true";
  }
  EXPECT_EQ(capture, 1);
  EXPECT_EQ(replay, 2);
  EXPECT_EQ(jit_kernels, 2 * static_cast<int>(jit.captured_kernels()));
  profile::clear();
}

// ---------------------------------------------------------------- DEBUG=6

TEST(Disasm, CpuKernelsDisassembleWithObjdump) {
  if (!find_tool("objdump")) GTEST_SKIP() << "objdump is not installed";
  clear_method_cache();
  Tensor x = Tensor::from<float>({1, 2, 3, 4}, {4});
  Tensor y = (x * 11).cos();
  testing::internal::CaptureStdout();
  {
    Context ctx({{"DEBUG", 6}});
    y.realize();
  }
  const std::string log = testing::internal::GetCapturedStdout();
  EXPECT_NE(log.find(" <E_4"), std::string::npos) << log;   // objdump's header of the kernel function
  EXPECT_NE(log.find("ret"), std::string::npos) << log;
  EXPECT_EQ(log.find("deregister_tm_clones"), std::string::npos) << "only the kernel, not the C runtime's code";
}

TEST(Disasm, MissingOrFailingToolIsOneLine) {
  for (const char* kind : {"C", "CUDA", "DISK"}) {
    const std::string r = disassemble(kind, "not a binary");
    EXPECT_EQ(r.rfind("DEBUG=6: ", 0), 0u) << kind << ": " << r;
    EXPECT_EQ(r.find('\n'), std::string::npos) << kind << ": " << r;
    EXPECT_NE(r.find("skipped"), std::string::npos) << r;
  }
}
