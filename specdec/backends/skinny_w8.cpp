// specdec::skinny_linear_w8(x, w, scale, b): y = (x @ w^T) * scale (+ b) with int8 weights and float32 inputs, for
// the few rows of a draft head's step.
//
// Why: a draft head's step reads every weight once, so int8 weights (a quarter of float32's bytes) make it cheaper;
// fbgemm's dynamic int8 GEMM (torch.ops.quantized.linear_dynamic) also quantizes the inputs, with one scale for all
// rows of a call, which costs acceptance (EAGLE-3's fc reads three layers' features of very different scales) and
// makes a row's draft depend on which rows share the call. Here only the weights are int8 (symmetric, one scale per
// output row): each weight vector is widened to float32 as it is loaded and multiplied into up to 8 input rows held
// in registers, as the float32 kernel (skinny.cpp) does.
//
// Contract (row invariance): for up to INVARIANT_ROWS rows, y[m, n] is summed in the same order whatever the number
// of rows and whichever rows share the call: lane-wise partial sums over k in steps of the vector width (the k tail
// zero-padded into the same lanes), a fixed horizontal reduction, then the scale, then the bias. More rows are a
// prompt's prefill through the head: the weights are widened once and torch's own GEMM runs it.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include "skinny_isa.h"
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace {

constexpr int64_t ROW_BLOCK = 64;       // weight rows per block that every tile of inputs reads from L2
constexpr int TILE = 8;                 // input rows per pass (register accumulators)
constexpr int64_t INVARIANT_ROWS = 64;  // as skinny.cpp: the largest tree forward

using Kernel = void (*)(const float*, const int8_t*, const float*, const float*, float*, int64_t, int64_t, int64_t,
                        int64_t);

// R weight rows per pass share each input load (R x M accumulators); the weight rows 4R ahead are prefetched.
template <int M, int R>
__attribute__((target("avx512f"))) void w8_avx512_r(const float* x, const int8_t* w, const float* s, const float* b,
                                                    float* y, int64_t K, int64_t N, int64_t n0, int64_t n1) {
  const int64_t kv = K & ~int64_t(15);
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - kv)) - 1u);
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    __m512 acc[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kv; k += 16) {
      __m512 wv[R];
      for (int r = 0; r < R; ++r) {
        const int8_t* p = w + (n + r) * K + k;
        wv[r] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
        _mm_prefetch(reinterpret_cast<const char*>(p + 4 * R * K), _MM_HINT_T0);  // never faults
      }
      for (int m = 0; m < M; ++m) {
        const __m512 xv = _mm512_loadu_ps(x + m * K + k);
        for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
      }
    }
    if (tail) {  // the k tail zero-padded into the same lanes
      for (int r = 0; r < R; ++r) {
        alignas(16) int8_t pad[16] = {0};
        std::memcpy(pad, w + (n + r) * K + kv, K - kv);
        const __m512 wt = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(pad))));
        for (int m = 0; m < M; ++m)
          acc[r][m] = _mm512_fmadd_ps(wt, _mm512_maskz_loadu_ps(tail, x + m * K + kv), acc[r][m]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float bias = b ? b[n + r] : 0.0f;
      for (int m = 0; m < M; ++m) y[m * N + n + r] = _mm512_reduce_add_ps(acc[r][m]) * s[n + r] + bias;
    }
  }
  if (n < n1 && R > 1) w8_avx512_r<M, 1>(x, w, s, b, y, K, N, n, n1);  // the rows left over, one at a time
}

template <int M>
__attribute__((target("avx512f"))) void w8_avx512(const float* x, const int8_t* w, const float* s, const float* b,
                                                  float* y, int64_t K, int64_t N, int64_t n0, int64_t n1) {
  w8_avx512_r<M, (M <= 2 ? 8 : M <= 4 ? 4 : 2)>(x, w, s, b, y, K, N, n0, n1);
}

// AVX2 has 16 vector registers: two weight rows per pass for up to 4 input rows (8 accumulators), one above.
template <int M, int R>
__attribute__((target("avx2,fma"))) void w8_avx2_r(const float* x, const int8_t* w, const float* s, const float* b,
                                                   float* y, int64_t K, int64_t N, int64_t n0, int64_t n1) {
  const int64_t kv = K & ~int64_t(7);
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    __m256 acc[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kv; k += 8) {
      __m256 wv[R];
      for (int r = 0; r < R; ++r) {
        const int8_t* p = w + (n + r) * K + k;
        wv[r] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
      }
      for (int m = 0; m < M; ++m) {
        const __m256 xv = _mm256_loadu_ps(x + m * K + k);
        for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(wv[r], xv, acc[r][m]);
      }
    }
    if (kv < K) {  // the k tail zero-padded into the same lanes
      for (int r = 0; r < R; ++r) {
        alignas(16) int8_t wpad[16] = {0};
        std::memcpy(wpad, w + (n + r) * K + kv, K - kv);
        const __m256 wt = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wpad))));
        for (int m = 0; m < M; ++m) {
          alignas(32) float xpad[8] = {0};
          std::memcpy(xpad, x + m * K + kv, (K - kv) * sizeof(float));
          acc[r][m] = _mm256_fmadd_ps(wt, _mm256_load_ps(xpad), acc[r][m]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float bias = b ? b[n + r] : 0.0f;
      for (int m = 0; m < M; ++m) y[m * N + n + r] = specdec_isa::hsum256(acc[r][m]) * s[n + r] + bias;
    }
  }
  if (n < n1 && R > 1) w8_avx2_r<M, 1>(x, w, s, b, y, K, N, n, n1);
}

template <int M>
__attribute__((target("avx2,fma"))) void w8_avx2(const float* x, const int8_t* w, const float* s, const float* b,
                                                 float* y, int64_t K, int64_t N, int64_t n0, int64_t n1) {
  w8_avx2_r<M, (M <= 4 ? 2 : 1)>(x, w, s, b, y, K, N, n0, n1);
}

const Kernel AVX512[TILE] = {w8_avx512<1>, w8_avx512<2>, w8_avx512<3>, w8_avx512<4>,
                             w8_avx512<5>, w8_avx512<6>, w8_avx512<7>, w8_avx512<8>};
const Kernel AVX2[TILE] = {w8_avx2<1>, w8_avx2<2>, w8_avx2<3>, w8_avx2<4>,
                           w8_avx2<5>, w8_avx2<6>, w8_avx2<7>, w8_avx2<8>};

// The variant to run, by isa (as skinny_linear's; specdec_isa::pick says how).
const Kernel* w8_kernels(int64_t isa) { return specdec_isa::pick<Kernel>(isa, AVX512, AVX2); }

at::Tensor skinny_linear_w8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale,
                            const std::optional<at::Tensor>& b, int64_t isa) {
  TORCH_CHECK(isa >= 0 && isa <= 2, "specdec::skinny_linear_w8: isa is 0 (best), 1 (AVX2) or 2 (AVX-512), got ", isa);
  const Kernel* table = w8_kernels(isa);
  TORCH_CHECK(table != nullptr, "specdec::skinny_linear_w8: this CPU lacks ", isa == 2 ? "AVX-512" : "AVX2 and FMA");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu() && scale.device().is_cpu(),
              "specdec::skinny_linear_w8 runs on the CPU");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kChar && scale.scalar_type() == at::kFloat,
              "specdec::skinny_linear_w8 takes float32 x, int8 w and float32 scale, got ", x.scalar_type(), ", ",
              w.scalar_type(), " and ", scale.scalar_type());
  TORCH_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "specdec::skinny_linear_w8: x [..., K] and ",
              "w [N, K] expected, got x ", x.sizes(), " and w ", w.sizes());
  const int64_t K = w.size(1), N = w.size(0);
  TORCH_CHECK(K > 0, "specdec::skinny_linear_w8: w [N, K] with K > 0 expected, got ", w.sizes());
  TORCH_CHECK(scale.dim() == 1 && scale.numel() == N, "specdec::skinny_linear_w8: scale [N] expected, got ",
              scale.sizes());
  TORCH_CHECK(!b.has_value() ||
                  (b->scalar_type() == at::kFloat && b->dim() == 1 && b->numel() == N && b->device().is_cpu()),
              "specdec::skinny_linear_w8: bias [N] float32 expected, got ", b.has_value() ? b->sizes() : x.sizes());
  const at::Tensor sc = scale.contiguous();
  if (x.numel() > INVARIANT_ROWS * K)  // a prefill: the weights widened once, torch's GEMM
    return at::linear(x, w.to(at::kFloat) * sc.unsqueeze(1), b);
  const at::Tensor xc = x.reshape({-1, K}).contiguous();
  const at::Tensor wc = w.contiguous();
  const at::Tensor bc = b.has_value() ? b->contiguous() : at::Tensor();
  const int64_t M = xc.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = N;
  at::Tensor y = at::empty({M, N}, xc.options());
  const float* xp = xc.data_ptr<float>();
  const int8_t* wp = wc.data_ptr<int8_t>();
  const float* sp = sc.data_ptr<float>();
  const float* bp = b.has_value() ? bc.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  if (M == 0) return y.view(out_shape);  // no rows: nothing to compute (and no kernel for zero rows)
  at::parallel_for(0, N, ROW_BLOCK, [&](int64_t n0, int64_t n1) {
    if (M <= TILE) {  // one pass over this thread's weight rows
      table[M - 1](xp, wp, sp, bp, yp, K, N, n0, n1);
      return;
    }
    for (int64_t nb = n0; nb < n1; nb += ROW_BLOCK) {  // a block of weight rows, read from L2 by every tile of rows
      const int64_t ne = std::min(nb + ROW_BLOCK, n1);
      for (int64_t r = 0; r < M; r += TILE) {
        const int64_t t = std::min<int64_t>(TILE, M - r);
        table[t - 1](xp + r * K, wp, sp, bp, yp + r * N, K, N, nb, ne);
      }
    }
  });
  return y.view(out_shape);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def("skinny_linear_w8(Tensor x, Tensor w, Tensor scale, Tensor? b=None, int isa=0) -> Tensor");
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("skinny_linear_w8", &skinny_linear_w8); }

// Inference only: a backward through the op raises instead of returning a wrong gradient.
TORCH_LIBRARY_IMPL(specdec, Autograd, m) {
  m.impl("skinny_linear_w8", torch::autograd::autogradNotImplementedFallback());
}
