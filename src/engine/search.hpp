// BEAM search over kernel optimizations (tinygrad 0.9.2 engine/search.py).
//
// Each step applies every action to every kernel of the beam, renders and compiles the candidates,
// times each on scratch buffers and keeps the `amt` fastest. It stops when a step brings no
// improvement. The winner's applied opts are cached on disk (table "beam_search"), so a second run
// of the same AST only replays them. Settings: BEAM=n (the width, used by realize's get_kernel),
// BEAM_UPCAST_MAX, BEAM_LOCAL_MAX, BEAM_UOPS_MAX, BEAM_TIMEOUT_SEC (per candidate), BEAM_MIN_PROGRESS
// (us), BEAM_PADTO, BEAM_DEBUG, IGNORE_BEAM_CACHE, PARALLEL (compile threads), BEAM_COMPARE (off by default
// while BEAM_HAND_CODED is on: the hand-coded kernel is one of the timed candidates), and
// beyond 0.9.2: BEAM_BUDGET (seconds for the whole search, its final compare included; 8 on the CPU),
// BEAM_HAND_CODED (1: the timed hand-coded kernel starts the beam, alone on the CPU, and is the incumbent of the
// final compare), BEAM_BATCH (C candidates per compile, 16), BEAM_CPU_TEST_OPS (the work of one timed CPU run, a
// slice of the parallel loop), and the final compare's BEAM_FINALISTS (2: the search's best few that challenge the
// hand-coded kernel), BEAM_FINAL_ROUNDS (5 interleaved full-size runs each; 0: no compare), BEAM_FINAL_MARGIN
// (0.03: how much faster a challenger must be), BEAM_FINAL_SEC (0.75: the part of BEAM_BUDGET kept for it).
//
// The final compare: the search times candidates with a few runs on a slice of the work, and on a machine shared
// with other processes one lucky run can rank a slower kernel first (on a slice, the 1024^3 matmul's rows-outermost
// order timed 2.5x faster than the hand-coded kernel; at full size it is 1.9x slower). So the search's verdict is
// only a shortlist: the hand-coded kernel and the best few candidates are timed again at full size, interleaved
// (A B C A B C ...: a burst of load hits them alike), after one untimed warm-up round. A challenger replaces the
// hand-coded kernel only if its best run is faster by the margin (on the CPU its best process CPU time too: load
// from other processes stretches the wall clock, not the CPU time of our threads) and it ran faster in at least
// 3/4 of the rounds. The decided kernel is what the search returns and what the disk cache keeps.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel.hpp"
#include "runtime/buffer.hpp"

namespace tg {

// The moves of the search, as 0.9.2 with its TC actions (UPCASTMID is left out: it is for images only).
const std::vector<Opt>& beam_actions();

// A fresh copy of k (same opts so far), with nothing linearized yet.
std::unique_ptr<Kernel> copy_kernel(const Kernel& k);

// Scratch buffers for timing k: one per DEFINE_GLOBAL, as big as its largest access (index = arg).
std::vector<std::shared_ptr<Buffer>> bufs_from_lin(const Kernel& k, bool allocate = true);

// Every action that applies to k, keyed by 1 + its index in beam_actions() (0 is k itself when
// include_0). Candidates whose upcast or local size exceeds BEAM_UPCAST_MAX / BEAM_LOCAL_MAX, or k's own if larger,
// are dropped.
std::map<int, std::unique_ptr<Kernel>> get_kernel_actions(const Kernel& k, bool include_0 = true);

// The fastest kernel found from k with beam width amt. rawbufs as bufs_from_lin (allocated if not).
std::unique_ptr<Kernel> beam_search(const Kernel& k, const std::vector<std::shared_ptr<Buffer>>& rawbufs, int amt,
                                    bool allow_test_size = true, bool disable_cache = getenv("IGNORE_BEAM_CACHE") != 0);

// Minimum run time in seconds of k over cnt runs on rawbufs. allow_test_size shrinks a big launch
// (global size over max_global_size) and scales the time back up. clear_l2 evicts caches between runs.
double time_linearizer(Kernel& k, const std::vector<std::shared_ptr<Buffer>>& rawbufs, bool allow_test_size = true,
                       int64_t max_global_size = 65536, int cnt = 3, bool clear_l2 = false);

// Opts as text for the disk cache ("UPCAST,0,4;UNROLL,0,0;NOLOCALS,-,-") and back.
std::string opts_to_string(const std::vector<Opt>& opts);
std::vector<Opt> opts_from_string(const std::string& s);

// Counters for tests and DEBUG: searches actually run, answered from the disk cache, candidates timed,
// GPU L2 flushes (one before each timed run of a BEAM candidate on CUDA).
// final_compares: final compares run; final_upsets: those a challenger won.
struct SearchStats {
  static inline int64_t searches = 0, cache_hits = 0, candidates_timed = 0, compile_failures = 0, gpu_l2_flushes = 0;
  static inline int64_t final_compares = 0, final_upsets = 0;
};

// A test's clock: when set, every timed run of a kernel (search candidates, the final compare, time_linearizer)
// returns this many seconds, as wall and CPU time, instead of running it. full_size: a run of the final compare or
// time_linearizer's (not scaled up from a slice). Lets a test make a candidate time fast once by "noise".
struct SearchHooks {
  static inline std::function<double(const Kernel& k, bool full_size)> fake_time;
};

}  // namespace tg
