// The TMA GEMM kernel as PTX (see tc_gemm_ptx.hpp). Shared memory from the 1024-aligned base: the R ring, the S ring,
// the full and empty mbarriers, then each consumer warp's epilogue stage. Addresses in the shared window are 32-bit.
#include "codegen/tc_gemm_ptx.hpp"

#include <functional>

#include "uop/uop.hpp"   // TG_ASSERT

namespace tg::ptx {
namespace {

std::string S(int64_t v) { return std::to_string(v); }
int log2i(int64_t v) {
  int l = 0;
  while ((int64_t{1} << l) < v) l++;
  TG_ASSERT((int64_t{1} << l) == v, "tc_gemm_ptx: " + S(v) + " is not a power of two");
  return l;
}

struct TmaKernel {
  const TmaSpec& s;
  Fn f;
  int64_t stage_r, stage_s;   // bytes of one ring slot of R and S
  int br() const { return 64 * s.consumers; }
  // the wgmma of one iteration of the k tile's rolled loop, both operands by descriptor; 0: R by ldmatrix, unrolled
  int steps() const { return s.consumers == 1 ? 1 : s.steps; }
  // the register hand-over (TmaSpec::maxnreg); the ldmatrix form needs it (without, ptxas serializes its wgmma for
  // lack of registers, C7512, and spills)
  bool maxnreg() const { return s.consumers == 2 && (s.maxnreg || steps() == 0); }
  // whether a tile starts with movs of zero into the accumulators; the 128x256 kernel by descriptors instead starts
  // them with its first k16 step (wgmma's scale-d predicate false): the 128 movs cost its ptxas -O1 27 M of 418 M
  // instructions (registers and spills the same). Not the 64x128 kernel: -4% of its compile, but ptxas -O3 then gave
  // it 107-128 registers instead of 90. A K of 0 takes the CUDA C kernel (no wgmma would start the accumulators).
  bool zeroes() const { return s.consumers == 1 || steps() == 0; }

  explicit TmaKernel(const TmaSpec& spec) : s(spec), stage_r(int64_t{64} * 64 * spec.consumers * 2), stage_s(int64_t{spec.bs} * 64 * 2) {}

  std::string fixed(const std::string& name, const std::string& ty) {
    f.decls += "\t.reg ." + ty + " " + name + ";\n";
    return name;
  }
  // spin on an mbarrier's phase
  void wait(const std::string& bar, const std::string& parity) {
    const std::string l = f.label(), p = f.reg("pred");
    f.at(l);
    f("mbarrier.try_wait.parity.shared::cta.b64 " + p + ", [" + bar + "], " + parity);
    f("@!" + p + " bra " + l);
  }
  // the tile's coordinates: r0, s0 and the batch coordinates eb<i> (render_tma's order: batch, then groups of 8 R
  // tiles walking the S tiles)
  void tile_coords(const std::string& tile) {
    std::string tl = tile;
    if (!s.bdims.empty()) {
      const std::string bt = f.op("div.u32", "b32", tile, "%NTB");
      tl = f.op("sub.u32", "b32", tile, f.op("mul.lo.u32", "b32", bt, "%NTB"));
      for (size_t i = 0; i < s.bdims.size(); i++) {
        std::string q = bt;
        for (size_t j = i + 1; j < s.bdims.size(); j++) q = f.op("div.u32", "b32", q, arg_reg(s.bdims[j]));
        if (i > 0) q = f.op("rem.u32", "b32", q, arg_reg(s.bdims[i]));
        f("mov.u32 " + eb_reg(i) + ", " + q);
      }
    }
    const std::string gw = f.op("shl.b32", "b32", "%TS", "3"), g = f.op("div.u32", "b32", tl, gw);
    const std::string g0 = f.op("shl.b32", "b32", g, "3"), rem = f.op("sub.u32", "b32", tl, f.op("mul.lo.u32", "b32", g, gw));
    const std::string gsz = f.op("min.s32", "b32", f.op("sub.s32", "b32", "%TR", g0), "8");
    f("add.u32 %r0, " + g0 + ", " + f.op("rem.u32", "b32", rem, gsz));
    f("shl.b32 %r0, %r0, " + S(log2i(br())));
    f("div.u32 %s0, " + rem + ", " + gsz);
    f("shl.b32 %s0, %s0, " + S(log2i(s.bs)));
  }
  // ring slot and phase of iteration it
  std::pair<std::string, std::string> slot(const std::string& it) {
    const std::string st = f.op("rem.u32", "b32", it, S(s.stages));
    const std::string ph = f.op("and.b32", "b32", f.op("div.u32", "b32", it, S(s.stages)), "1");
    return {st, ph};
  }
  std::string coords(const std::string& a, const std::string& b, const std::vector<int>& batch) {
    std::string c = "{" + a + ", " + b;
    for (int i : batch) c += ", " + eb_reg(static_cast<size_t>(i));
    return c + "}";
  }
  void tma(int rank, const std::string& dst, const std::string& map, const std::string& crd, const std::string& bar) {
    f("cp.async.bulk.tensor." + S(rank) + "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [" + dst + "], [" + map + ", " + crd + "], [" +
      bar + "]");
  }
  // warpgroup 0: one thread issues the TMA copies of every k tile of the block's tiles into the ring
  void producer() {
    if (maxnreg()) f("setmaxnreg.dec.sync.aligned.u32 40");
    const std::string done = "$Lend";
    f("setp.ne.u32 %p, %tx, 0");
    f("@%p bra " + done);
    f("mov.u32 %it, 0");
    f("mov.u32 %tile, %ctaid.x");
    const std::string lt = f.label(), lk = f.label(), ln = f.label(), nowait = f.label();
    f.at(lt);
    f("setp.ge.s32 %p, %tile, %NT");
    f("@%p bra " + done);
    tile_coords("%tile");
    f("mov.u32 %kt, 0");
    f.at(lk);
    f("setp.ge.s32 %p, %kt, %KT");
    f("@%p bra " + ln);
    auto [st, ph] = slot("%it");
    f("setp.lt.u32 %p, %it, " + S(s.stages));
    f("@%p bra " + nowait);
    wait(f.op("mad.lo.u32", "b32", st, "8, %empty"), f.op("xor.b32", "b32", ph, "1"));
    f.at(nowait);
    const std::string fb = f.op("mad.lo.u32", "b32", st, "8, %full");
    f("mbarrier.arrive.expect_tx.shared::cta.b64 _, [" + fb + "], " + S(stage_r + stage_s));
    const std::string k64 = f.op("shl.b32", "b32", "%kt", "6");
    const std::string dr = f.op("mad.lo.u32", "b32", st, S(stage_r) + ", %base");
    if (s.r_kmajor) {
      tma(s.rank_r, dr, "%tmr", coords(k64, "%r0", s.batch_r), fb);
    } else {
      for (int j = 0; j < br() / 64; j++)
        tma(s.rank_r, j ? f.op("add.u32", "b32", dr, S(8192 * j)) : dr, "%tmr", coords(j ? f.op("add.u32", "b32", "%r0", S(64 * j)) : "%r0", k64, s.batch_r), fb);
    }
    tma(s.rank_s, f.op("mad.lo.u32", "b32", st, S(stage_s) + ", %ss"), "%tms", coords(k64, "%s0", s.batch_s), fb);
    f("add.u32 %kt, %kt, 1");
    f("add.u32 %it, %it, 1");
    f("bra " + lk);
    f.at(ln);
    f("add.u32 %tile, %tile, %grid");
    f("bra " + lt);
  }
  // 128-byte-swizzle descriptor of shared address a: K-major (LBO 16) or M/N-major (LBO 1024), SBO 1024
  std::string desc(const std::string& a, bool kmajor) {
    const std::string lo = f.op("or.b32", "b32", f.op("shr.u32", "b32", f.op("and.b32", "b32", a, "262143"), "4"), kmajor ? "65536" : "4194304");
    const std::string d = f.reg("b64");
    f("mov.b64 " + d + ", {" + lo + ", 1073741888}");
    return d;
  }
  std::string accs() const {
    std::string a;
    for (int i = 0; i < s.bs / 2; i++) a += (i ? "," : "") + std::string("%d") + S(i);
    return "{" + a + "}";
  }
  std::string wgmma_op() const { return "wgmma.mma_async.sync.aligned.m64n" + S(s.bs) + "k16.f32." + s.in + "." + s.in + " "; }
  std::string ldmatrix(const std::string& addr) {
    std::string a = "{";
    for (int i = 0; i < 4; i++) a += (i ? ", " : "") + f.reg("b32");
    a += "}";
    f(std::string("ldmatrix.sync.aligned.m8n8.x4") + (s.r_kmajor ? "" : ".trans") + ".shared.b16 " + a + ", [" + addr + "]");
    return a;
  }
  // scale_d: a predicate, false where the wgmma overwrites the accumulators rather than adding to them
  void wgmma(const std::string& a, const std::string& b, bool a_desc, const std::string& scale_d = "%ptrue") {
    f(wgmma_op() + accs() + ", " + a + ", " + b + ", " + scale_d + ", 1, 1" + (a_desc ? std::string(", ") + (s.r_kmajor ? "0" : "1") : "") + ", 0");
  }
  // a loop of n iterations (a fresh counter register, from 0) around body(counter); not unrolled by ptxas
  void rolled_loop(int n, const std::function<void(const std::string&)>& body) {
    const std::string i = f.reg("b32"), l = f.label(), p = f.reg("pred");
    f("mov.u32 " + i + ", 0");
    f.at(l);
    f.body += "\t.pragma \"nounroll\";\n";
    body(i);
    f("add.u32 " + i + ", " + i + ", 1");
    f("setp.lt.u32 " + p + ", " + i + ", " + S(n));
    f("@" + p + " bra " + l);
  }
  // one k tile of a consumer warpgroup, slot st full, in the form of TmaSpec::steps
  void k_tile(const std::string& st) {
    std::string sra = f.op("mad.lo.u32", "b32", st, S(stage_r) + ", %base");
    const std::string ssa = f.op("mad.lo.u32", "b32", st, S(stage_s) + ", %ss");
    if (const int u = steps()) {
      TG_ASSERT(u == 1 || u == 2 || u == 4, "tc_gemm_ptx: " + S(u) + " wgmma per k16 loop iteration (1, 2 or 4)");
      // this warpgroup's 64 R rows are 8192 bytes in from the slot (either layout)
      if (s.consumers > 1) sra = f.op("add.u32", "b32", sra, "%wgr");
      std::string acc;
      if (!zeroes()) f("setp.ne.u32 " + (acc = f.reg("pred")) + ", %kt, 0");
      f("wgmma.fence.sync.aligned");
      rolled_loop(4 / u, [&](const std::string& i) {
        for (int j = 0; j < u; j++) {
          const std::string kk = u == 1 ? i : f.op("mad.lo.u32", "b32", i, S(u) + ", " + S(j));
          const std::string da = desc(f.op("mad.lo.u32", "b32", kk, (s.r_kmajor ? "32, " : "2048, ") + sra), s.r_kmajor);
          std::string scale_d = "%ptrue";   // false only for the tile's first k16 step where it starts the accumulators
          if (!zeroes() && j == 0) f("setp.ne.or.u32 " + (scale_d = f.reg("pred")) + ", " + i + ", 0, " + acc);
          wgmma(da, desc(f.op("mad.lo.u32", "b32", kk, "32, " + ssa), true), true, scale_d);
        }
      });
      return;
    }
    std::string af[4];
    for (int kk = 0; kk < 4; kk++) af[kk] = ldmatrix(f.op("add.u32", "b32", sra, "%lo" + S(kk)));
    f("wgmma.fence.sync.aligned");
    for (int kk = 0; kk < 4; kk++) wgmma(af[kk], desc(f.op("add.u32", "b32", ssa, S(32 * kk)), true), false);
  }
  // per-thread byte offsets in R's slot of the four k16 steps' ldmatrix rows (render_tma's tma_k_steps)
  void ldmatrix_offsets() {
    for (int kk = 0; kk < 4; kk++) fixed("%lo" + S(kk), "b32");
    if (s.r_kmajor) {
      // row rr = wr0 + lane % 16, chunk 2 kk + lane / 16 XOR rr % 8
      const std::string rr = f.op("add.u32", "b32", "%wr0", f.op("and.b32", "b32", "%lane", "15"));
      const std::string hi = f.op("shr.u32", "b32", "%lane", "4"), r7 = f.op("and.b32", "b32", rr, "7");
      const std::string rowb = f.op("shl.b32", "b32", rr, "7");
      for (int kk = 0; kk < 4; kk++) {
        const std::string ch = f.op("xor.b32", "b32", f.op("add.u32", "b32", hi, S(2 * kk)), r7);
        f("add.u32 %lo" + S(kk) + ", " + rowb + ", " + f.op("shl.b32", "b32", ch, "4"));
      }
    } else {
      // k row kr = 16 kk + lane % 8 + 8 (lane / 16), chunk ch = wr0 / 8 + (lane / 8) % 2 of 64-row blocks
      const std::string l7 = f.op("and.b32", "b32", "%lane", "7");
      const std::string kr0 = f.op("add.u32", "b32", l7, f.op("shl.b32", "b32", f.op("shr.u32", "b32", "%lane", "4"), "3"));
      const std::string ch = f.op("add.u32", "b32", f.op("shr.u32", "b32", "%wr0", "3"), f.op("and.b32", "b32", f.op("shr.u32", "b32", "%lane", "3"), "1"));
      const std::string blk = f.op("shl.b32", "b32", f.op("shr.u32", "b32", ch, "3"), "13");
      const std::string sw = f.op("shl.b32", "b32", f.op("xor.b32", "b32", f.op("and.b32", "b32", ch, "7"), l7), "4");
      const std::string base = f.op("add.u32", "b32", f.op("add.u32", "b32", blk, sw), f.op("shl.b32", "b32", kr0, "7"));
      for (int kk = 0; kk < 4; kk++) f("add.u32 %lo" + S(kk) + ", " + base + ", " + S(2048 * kk));
    }
  }
  // the staged epilogue of one tile (render_tma's staged_epilogue, the 8-element runs with 16-byte stores)
  void epilogue() {
    const int cols = s.ep_cols, chunks = s.bs / cols, runs = s.r_fast ? 2 : cols / 8;
    const std::string c = f.reg("b32"), lc = f.label(), lw = f.label();
    f("mov.u32 " + c + ", 0");
    f.at(lc);
    f("bar.warp.sync -1");
    std::vector<std::string> wl;
    for (int k = 0; k < chunks; k++) wl.push_back(f.label());
    if (chunks > 1) {
      const std::string p = f.reg("pred");
      for (int k = 0; k < chunks; k++) f("setp.eq.u32 " + p + ", " + c + ", " + S(k)), f("@" + p + " bra " + wl[k]);
    }
    for (int k = 0; k < chunks; k++) {
      f.at(wl[k]);
      const int j0 = k * cols / 8;
      for (int j = 0; j < cols / 8; j++) {
        const int d = 4 * (j0 + j);
        f("st.shared.v4.f32 [" + std::string(j & 1 ? "%epa1" : "%epa0") + "+" + S(512 * j) + "], {%d" + S(d) + ", %d" + S(d + 1) + ", %d" + S(d + 2) +
          ", %d" + S(d + 3) + "}");
      }
      f("bra " + lw);
    }
    f.at(lw);
    f("bar.warp.sync -1");
    const std::string x = f.reg("b32"), lx = f.label(), lnext = f.label(), lcn = f.label();
    f("mov.u32 " + x + ", %lane");
    f.at(lx);
    const std::string p = f.reg("pred");
    f("setp.ge.u32 " + p + ", " + x + ", " + S(16 * cols / 8));
    f("@" + p + " bra " + lcn);
    std::string lr0, ls0;
    if (s.r_fast) {
      lr0 = f.op("shl.b32", "b32", f.op("and.b32", "b32", x, "1"), "3");
      ls0 = f.op("shr.u32", "b32", x, "1");
    } else {
      lr0 = f.op("shr.u32", "b32", x, S(log2i(runs)));
      ls0 = f.op("shl.b32", "b32", f.op("and.b32", "b32", x, S(runs - 1)), "3");
    }
    const std::string er0 = f.op("add.u32", "b32", "%rb", lr0), es0 = f.op("add.u32", "b32", f.op("mad.lo.u32", "b32", c, S(cols) + ", %s0"), ls0);
    const std::string em0 = s.s_is_b ? er0 : es0, en0 = s.s_is_b ? es0 : er0;
    const std::string pm = f.reg("pred"), pn = f.reg("pred");
    f("setp.ge.s32 " + pm + ", " + em0 + ", " + arg_reg(s.M));
    f("setp.ge.s32 " + pn + ", " + en0 + ", " + arg_reg(s.N));
    f("or.pred " + pm + ", " + pm + ", " + pn);
    f("@" + pm + " bra " + lnext);
    // the run's first element's stage slot: j = ls / 8, l = (lr % 8) * 4 + (ls % 8) / 2, q = (lr / 8) * 2 + ls % 2, at
    // byte (32 j + (l ^ sw)) * 16 + 4 q of the stage, sw = (l / 8) % 4 + (j % 2) * 4. The run's 8 elements step ls (or
    // lr) from a multiple of 8, so only the XOR term and q's low bit move: element u is at
    // a + ((x ^ k(u)) << 4) + o(u), with x = l ^ sw and a = 512 j + 4 q + ep of the first, and k(u) = u / 2, o(u) = 4 (u % 2)
    // along ls; k(u) = 4 u ^ u / 2, o(u) = 0 along lr (the element code was ~6% of the 128x256 kernel's ptxas time)
    const std::string j = f.op("shr.u32", "b32", ls0, "3");
    const std::string l = f.op("or.b32", "b32", f.op("shl.b32", "b32", f.op("and.b32", "b32", lr0, "7"), "2"), f.op("shr.u32", "b32", f.op("and.b32", "b32", ls0, "7"), "1"));
    const std::string q = f.op("or.b32", "b32", f.op("shl.b32", "b32", f.op("shr.u32", "b32", lr0, "3"), "1"), f.op("and.b32", "b32", ls0, "1"));
    const std::string sw = f.op("or.b32", "b32", f.op("and.b32", "b32", f.op("shr.u32", "b32", l, "3"), "3"), f.op("shl.b32", "b32", f.op("and.b32", "b32", j, "1"), "2"));
    const std::string xl = f.op("xor.b32", "b32", l, sw);
    const std::string a = f.op("add.u32", "b32", f.op("shl.b32", "b32", j, "9"), f.op("mad.lo.u32", "b32", q, "4, %ep"));
    std::vector<std::string> vals;
    for (int u = 0; u < 8; u++) {
      const int k = s.r_fast ? (4 * u) ^ (u / 2) : u / 2, o = s.r_fast ? 0 : 4 * (u % 2);
      const std::string addr = f.op("add.u32", "b32", a, f.op("shl.b32", "b32", k ? f.op("xor.b32", "b32", xl, S(k)) : xl, "4")) + (o ? "+" + S(o) : "");
      const std::string acc = f.reg("f32");
      f("ld.shared.f32 " + acc + ", [" + addr + "]");
      const bool m_fast = s.r_fast == s.s_is_b;   // the run walks M
      const std::string em = m_fast && u ? f.op("add.u32", "b32", em0, S(u)) : em0, en = !m_fast && u ? f.op("add.u32", "b32", en0, S(u)) : en0;
      vals.push_back(s.value(f, em, en, acc));
    }
    const std::string idx = s.out_index(f, em0, en0);
    const std::string ga = f.op("add.s64", "b64", "%g" + S(s.out_buf), f.op("mul.wide.s32", "b64", idx, S(s.out_bytes)));
    if (s.out_bytes == 2) {
      std::string w[4];
      for (int i = 0; i < 4; i++) {
        w[i] = f.reg("b32");
        f("mov.b32 " + w[i] + ", {" + vals[2 * i] + ", " + vals[2 * i + 1] + "}");
      }
      f("st.global.v4.b32 [" + ga + "], {" + w[0] + ", " + w[1] + ", " + w[2] + ", " + w[3] + "}");
    } else {
      f("st.global.v4.f32 [" + ga + "], {" + vals[0] + ", " + vals[1] + ", " + vals[2] + ", " + vals[3] + "}");
      f("st.global.v4.f32 [" + ga + "+16], {" + vals[4] + ", " + vals[5] + ", " + vals[6] + ", " + vals[7] + "}");
    }
    f.at(lnext);
    f("add.u32 " + x + ", " + x + ", 32");
    f("bra " + lx);
    f.at(lcn);
    f("add.u32 " + c + ", " + c + ", 1");
    f("setp.lt.u32 " + p + ", " + c + ", " + S(chunks));
    f("@" + p + " bra " + lc);
  }
  // warpgroups 1..: per tile, the k loop on the ring (each warp releases a slot it has read), then the epilogue
  void consumer() {
    if (maxnreg()) f("setmaxnreg.inc.sync.aligned.u32 232");
    f("sub.u32 %cw, %warp, 4");
    f("shl.b32 %wr0, %cw, 4");
    // this warp's stage and its float4 slots for even and odd 8-column blocks: lane ^ ((lane / 8) % 4 | (j % 2) * 4)
    f("add.u32 %ep, %empty, " + S(8 * s.stages));
    f("mad.lo.u32 %ep, %cw, " + S(int64_t{16} * s.ep_cols * 4) + ", %ep");
    const std::string sw = f.op("and.b32", "b32", f.op("shr.u32", "b32", "%lane", "3"), "3");
    f("mad.lo.u32 %epa0, " + f.op("xor.b32", "b32", "%lane", sw) + ", 16, %ep");
    f("mad.lo.u32 %epa1, " + f.op("xor.b32", "b32", "%lane", f.op("or.b32", "b32", sw, "4")) + ", 16, %ep");
    if (s.consumers == 2 && steps()) fixed("%wgr", "b32"), f("shl.b32 %wgr, " + f.op("shr.u32", "b32", "%cw", "2") + ", 13");
    if (!steps()) ldmatrix_offsets();
    f("mov.u32 %it, 0");
    f("mov.u32 %tile, %ctaid.x");
    const std::string lt = f.label(), lk = f.label(), le = f.label();
    f.at(lt);
    f("setp.ge.s32 %p, %tile, %NT");
    f("@%p bra $Lend");
    tile_coords("%tile");
    f("add.u32 %rb, %r0, %wr0");
    if (zeroes())
      for (int i = 0; i < s.bs / 2; i++) f("mov.f32 %d" + S(i) + ", 0f00000000");
    f("mov.u32 %kt, 0");
    f.at(lk);
    f.body += "\t.pragma \"nounroll\";\n";
    f("setp.ge.s32 %p, %kt, %KT");
    f("@%p bra " + le);
    auto [st, ph] = slot("%it");
    wait(f.op("mad.lo.u32", "b32", st, "8, %full"), ph);
    k_tile(st);
    f("wgmma.commit_group.sync.aligned");
    f("wgmma.wait_group.sync.aligned 0");
    const std::string skip = f.label();
    f("setp.ne.u32 %p, %lane, 0");
    f("@%p bra " + skip);
    f("mbarrier.arrive.shared::cta.b64 _, [" + f.op("mad.lo.u32", "b32", st, "8, %empty") + "]");
    f.at(skip);
    f("add.u32 %kt, %kt, 1");
    f("add.u32 %it, %it, 1");
    f("bra " + lk);
    f.at(le);
    epilogue();
    f("add.u32 %tile, %tile, %grid");
    f("bra " + lt);
  }
  std::string render() {
    for (const char* r : {"%tx", "%grid", "%lane", "%warp", "%wg", "%base", "%ss", "%full", "%empty", "%KT", "%TR", "%TS", "%NTB", "%NT", "%it", "%tile",
                          "%kt", "%r0", "%s0", "%rb", "%cw", "%wr0", "%ep", "%epa0", "%epa1"})
      fixed(r, "b32");
    fixed("%p", "pred"), fixed("%ptrue", "pred");
    fixed("%tmr", "b64"), fixed("%tms", "b64");
    for (size_t i = 0; i < s.bdims.size(); i++) fixed(eb_reg(i), "b32");
    for (int i = 0; i < s.bs / 2; i++) fixed("%d" + S(i), "f32");
    for (int i = 0; i < s.n_bufs; i++) fixed("%g" + S(i), "b64");
    f("mov.u32 %tx, %tid.x");
    f("mov.u32 %grid, %nctaid.x");
    f("and.b32 %lane, %tx, 31");
    f("shr.u32 %warp, %tx, 5");
    f("setp.eq.u32 %ptrue, %tx, %tx");
    const std::string sm64 = f.reg("b64"), sm = f.reg("b32");
    f("mov.u64 " + sm64 + ", tg_dsmem");
    f("cvt.u32.u64 " + sm + ", " + sm64);
    f("add.u32 %base, " + sm + ", " + f.op("and.b32", "b32", f.op("neg.s32", "b32", sm), "1023"));
    f("add.u32 %ss, %base, " + S(s.stages * stage_r));
    f("add.u32 %full, %ss, " + S(s.stages * stage_s));
    f("add.u32 %empty, %full, " + S(8 * s.stages));
    const std::string li = f.label();
    f("setp.ne.u32 %p, %tx, 0");
    f("@%p bra " + li);
    for (int i = 0; i < s.stages; i++) {
      f("mbarrier.init.shared::cta.b64 [%full+" + S(8 * i) + "], 1");
      f("mbarrier.init.shared::cta.b64 [%empty+" + S(8 * i) + "], " + S(4 * s.consumers));
    }
    f("fence.mbarrier_init.release.cluster");
    f.at(li);
    f("bar.sync 0");
    const std::string rdim = arg_reg(s.s_is_b ? s.M : s.N), sdim = arg_reg(s.s_is_b ? s.N : s.M);
    f("add.s32 %KT, " + arg_reg(s.K) + ", 63");
    f("shr.s32 %KT, %KT, 6");
    f("add.s32 %TR, " + rdim + ", " + S(br() - 1));
    f("shr.s32 %TR, %TR, " + S(log2i(br())));
    f("add.s32 %TS, " + sdim + ", " + S(s.bs - 1));
    f("shr.s32 %TS, %TS, " + S(log2i(s.bs)));
    f("mul.lo.u32 %NTB, %TR, %TS");
    f("mov.u32 %NT, %NTB");
    for (const std::string& b : s.bdims) f("mul.lo.u32 %NT, %NT, " + arg_reg(b));
    // the warpgroup index through a shuffle: warp-uniform to ptxas, which keeps the rolled wgmma asynchronous
    f("shfl.sync.idx.b32 %wg, " + f.op("shr.u32", "b32", "%warp", "2") + ", 0, 31, -1");
    f("setp.ne.u32 %p, %wg, 0");
    const std::string lc = f.label();
    f("@%p bra " + lc);
    producer();
    f.at(lc);
    consumer();
    f.at("$Lend");
    f("ret");
    return module();
  }
  std::string module() {
    const std::vector<std::string> params = s.params();
    std::string m = ".version 8.0\n.target sm_90a\n.address_size 64\n\n";
    m += ".visible .global .align 8 .b64 tg_launch[" + S(static_cast<int64_t>(s.launch.size())) + "] = {";
    for (size_t i = 0; i < s.launch.size(); i++) m += (i ? ", " : "") + std::to_string(static_cast<unsigned long long>(s.launch[i]));
    m += "};\n.extern .shared .align 16 .b8 tg_dsmem[];\n\n.visible .entry " + s.fname + "(\n";
    std::string loads;
    for (int i = 0; i < s.n_bufs; i++) {
      m += "\t.param .u64 p_data" + S(i) + ",\n";
      loads += "\tld.param.u64 %g" + S(i) + ", [p_data" + S(i) + "];\n\tcvta.to.global.u64 %g" + S(i) + ", %g" + S(i) + ";\n";
    }
    std::string decls;
    for (const std::string& a : params) {
      m += "\t.param .u32 p_" + a + ",\n";
      decls += "\t.reg .b32 " + arg_reg(a) + ";\n";
      loads += "\tld.param.u32 " + arg_reg(a) + ", [p_" + a + "];\n";
    }
    m += "\t.param .align 64 .b8 p_tm_r[128],\n\t.param .align 64 .b8 p_tm_s[128]\n)\n";
    m += ".maxntid " + S(128 * (s.consumers + 1)) + ", 1, 1\n.minnctapersm 1\n{\n";
    loads += "\tmov.u64 %tmr, p_tm_r;\n\tcvta.param.u64 %tmr, %tmr;\n\tmov.u64 %tms, p_tm_s;\n\tcvta.param.u64 %tms, %tms;\n";
    return m + decls + f.decls + loads + f.body + "}\n";
  }
};

}  // namespace

std::string render_tma(const TmaSpec& spec) { return TmaKernel(spec).render(); }

}  // namespace tg::ptx
