// What the skinny kernels (skinny.cpp, skinny_w8.cpp, skinny_q.cpp) share: the AVX2 horizontal sum, whose fixed order
// is part of their row-invariance contracts, the choice of a kernel table by instruction set, and its 16-entry form.
#pragma once

#include <immintrin.h>

#include <cstdint>

// A kernel table of 16 entries, fn<1> .. fn<16>: one instantiation per number of input rows held in registers.
#define SPECDEC_TABLE(fn)                                                                                           \
  {fn<1>, fn<2>, fn<3>, fn<4>, fn<5>, fn<6>, fn<7>, fn<8>, fn<9>, fn<10>, fn<11>, fn<12>, fn<13>, fn<14>, fn<15>, \
   fn<16>}

namespace specdec_isa {

// The 8 lanes summed in one fixed order: halves, then pairs, then the last two.
__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// The table to run: isa 0 = the widest this CPU has, 1 = AVX2 (every AVX-512 CPU has it too: how the AVX2 variant is
// tested on any machine), 2 = AVX-512; nullptr where the CPU lacks what is asked for.
template <class Kernel>
const Kernel* pick(int64_t isa, const Kernel* avx512_table, const Kernel* avx2_table) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == 2 || (isa == 0 && avx512)) return avx512 ? avx512_table : nullptr;
  return avx2 ? avx2_table : nullptr;
}

}  // namespace specdec_isa
