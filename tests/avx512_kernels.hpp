#pragma once
// Included by the tests that assert AVX-512's kernels (64-byte registers, 32 of them): pins CPU_REGISTER_BYTES=64
// before the CPU renderer is built, so an AVX2 machine runs the same kernels (its compiler splits each vector in
// two). AVX2's own tiles: CpuHeuristics.Avx2* in test_search.cpp.
#include <cstdlib>

[[maybe_unused]] static const int kAvx512Kernels = setenv("CPU_REGISTER_BYTES", "64", 1);
