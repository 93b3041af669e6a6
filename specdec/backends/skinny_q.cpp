// specdec::skinny_linear_q(x, q, d, m, b): y = x @ w^T (+ b) where the float32 weight w is stored EXACTLY as int8
// codes q [N, K] with one scale d and one offset m per block of QBLOCK consecutive inputs (d, m [N, K / QBLOCK]):
// w[n, k] = fma(d[n, k / QBLOCK], q[n, k], m[n, k / QBLOCK]), bit for bit.
//
// Why: a target loaded from a GGUF file (SmolLM2's Q4_1 layers and Q8_0 embedding) holds float32 weights that are
// such codes dequantized: d and m came from float16 and q has at most 8 bits, so d * q is exact in float32 and the
// fma above rounds once, as the loader's d * q + m does. Stored as codes the weights take 1.25 bytes a weight
// against 4, and a step that streams every weight once reads a third of the bytes. The weights are the target's own
// (the caller verifies every element bit for bit before it uses the codes: specdec.backends.skinny_codes), so this
// is not quantization: the model is unchanged.
//
// Contract (the float32 kernel's order, so bitwise equal to specdec::skinny_linear on the decoded weight): for up to
// INVARIANT_ROWS rows, y[m, n] is summed lane-wise over k in steps of the vector width, then one fixed horizontal
// reduction (skinny.cpp's), then the bias; K is a multiple of QBLOCK (so of both vector widths): no k tail. A row's
// output is bitwise the same alone or among other rows. More rows are a prompt's prefill: the weight is decoded once
// and torch's own GEMM runs it, as skinny_linear does with its float32 weight.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
#include "skinny_isa.h"
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <optional>

namespace {

constexpr int64_t QBLOCK = 32;          // inputs per scale and offset (GGUF's Q4_1 and Q8_0 blocks)
constexpr int64_t ROW_BLOCK = 64;       // weight rows per block that every tile of inputs reads from L2
constexpr int MAX_ROWS = 16;            // input rows per pass over the codes (register accumulators): one decode
constexpr int TILE = 8;                 // input rows per pass where a call has more than MAX_ROWS
constexpr int64_t INVARIANT_ROWS = 64;  // as skinny.cpp: the largest tree forward

using Kernel = void (*)(const float*, const int8_t*, const float*, const float*, const float*, float*, int64_t,
                        int64_t, int64_t, int64_t);

// R weight rows per pass share each input load (R x M accumulators); the code rows 4R ahead are prefetched.
template <int M, int R>
__attribute__((target("avx512f"))) void q_avx512_r(const float* x, const int8_t* q, const float* d, const float* mo,
                                                   const float* b, float* y, int64_t K, int64_t N, int64_t n0,
                                                   int64_t n1) {
  const int64_t KB = K / QBLOCK;
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    __m512 acc[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
      __m512 wv[R];
      for (int r = 0; r < R; ++r) {
        const int8_t* p = q + (n + r) * K + k;
        const int64_t s = (n + r) * KB + k / QBLOCK;
        const __m512 codes = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
        wv[r] = _mm512_fmadd_ps(_mm512_set1_ps(d[s]), codes, _mm512_set1_ps(mo[s]));  // the weight, bit for bit
        _mm_prefetch(reinterpret_cast<const char*>(p + 4 * R * K), _MM_HINT_T0);    // never faults
      }
      for (int m = 0; m < M; ++m) {
        const __m512 xv = _mm512_loadu_ps(x + m * K + k);
        for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float bias = b ? b[n + r] : 0.0f;
      for (int m = 0; m < M; ++m) y[m * N + n + r] = _mm512_reduce_add_ps(acc[r][m]) + bias;
    }
  }
  if (n < n1 && R > 1) q_avx512_r<M, 1>(x, q, d, mo, b, y, K, N, n, n1);  // the rows left over, one at a time
}

template <int M>
__attribute__((target("avx512f"))) void q_avx512(const float* x, const int8_t* q, const float* d, const float* mo,
                                                 const float* b, float* y, int64_t K, int64_t N, int64_t n0,
                                                 int64_t n1) {
  q_avx512_r<M, (M <= 2 ? 8 : M <= 4 ? 4 : M <= 8 ? 2 : 1)>(x, q, d, mo, b, y, K, N, n0, n1);
}

template <int M>
__attribute__((target("avx2,fma"))) void q_avx2(const float* x, const int8_t* q, const float* d, const float* mo,
                                               const float* b, float* y, int64_t K, int64_t N, int64_t n0,
                                               int64_t n1) {
  const int64_t KB = K / QBLOCK;
  for (int64_t n = n0; n < n1; ++n) {
    __m256 acc[M];
    for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += 8) {
      const int64_t s = n * KB + k / QBLOCK;
      const __m256 codes =
          _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + n * K + k))));
      const __m256 wv = _mm256_fmadd_ps(_mm256_set1_ps(d[s]), codes, _mm256_set1_ps(mo[s]));
      for (int m = 0; m < M; ++m) acc[m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + m * K + k), acc[m]);
    }
    const float bias = b ? b[n] : 0.0f;
    for (int m = 0; m < M; ++m) y[m * N + n] = specdec_isa::hsum256(acc[m]) + bias;
  }
}

const Kernel AVX512[MAX_ROWS] = SPECDEC_TABLE(q_avx512);
const Kernel AVX2[MAX_ROWS] = SPECDEC_TABLE(q_avx2);

// The variant to run, by isa (as skinny_linear's; specdec_isa::pick says how).
const Kernel* q_kernels(int64_t isa) { return specdec_isa::pick<Kernel>(isa, AVX512, AVX2); }

at::Tensor skinny_linear_q(const at::Tensor& x, const at::Tensor& q, const at::Tensor& d, const at::Tensor& m,
                           const std::optional<at::Tensor>& b, int64_t isa) {
  TORCH_CHECK(isa >= 0 && isa <= 2, "specdec::skinny_linear_q: isa is 0 (best), 1 (AVX2) or 2 (AVX-512), got ", isa);
  const Kernel* table = q_kernels(isa);
  TORCH_CHECK(table != nullptr, "specdec::skinny_linear_q: this CPU lacks ", isa == 2 ? "AVX-512" : "AVX2 and FMA");
  TORCH_CHECK(x.device().is_cpu() && q.device().is_cpu() && d.device().is_cpu() && m.device().is_cpu(),
              "specdec::skinny_linear_q runs on the CPU");
  TORCH_CHECK(x.scalar_type() == at::kFloat && q.scalar_type() == at::kChar && d.scalar_type() == at::kFloat &&
                  m.scalar_type() == at::kFloat,
              "specdec::skinny_linear_q takes float32 x, int8 q and float32 d and m, got ", x.scalar_type(), ", ",
              q.scalar_type(), ", ", d.scalar_type(), " and ", m.scalar_type());
  TORCH_CHECK(q.dim() == 2 && x.dim() >= 1 && x.size(-1) == q.size(1), "specdec::skinny_linear_q: x [..., K] and ",
              "q [N, K] expected, got x ", x.sizes(), " and q ", q.sizes());
  const int64_t K = q.size(1), N = q.size(0);
  TORCH_CHECK(K > 0 && K % QBLOCK == 0, "specdec::skinny_linear_q: K a positive multiple of ", QBLOCK, ", got ", K);
  TORCH_CHECK(d.dim() == 2 && d.size(0) == N && d.size(1) == K / QBLOCK && m.sizes() == d.sizes(),
              "specdec::skinny_linear_q: d and m [N, K / ", QBLOCK, "] expected, got ", d.sizes(), " and ", m.sizes());
  TORCH_CHECK(!b.has_value() ||
                  (b->scalar_type() == at::kFloat && b->dim() == 1 && b->numel() == N && b->device().is_cpu()),
              "specdec::skinny_linear_q: bias [N] float32 expected, got ", b.has_value() ? b->sizes() : x.sizes());
  const at::Tensor dc = d.contiguous(), mc = m.contiguous();
  if (x.numel() > INVARIANT_ROWS * K) {  // a prefill: the weight decoded once (the same bits), torch's GEMM
    const at::Tensor w = at::addcmul(mc.repeat_interleave(QBLOCK, 1), dc.repeat_interleave(QBLOCK, 1), q.to(at::kFloat));
    return at::linear(x, w, b);
  }
  const at::Tensor xc = x.reshape({-1, K}).contiguous();
  const at::Tensor qc = q.contiguous();
  const at::Tensor bc = b.has_value() ? b->contiguous() : at::Tensor();
  const int64_t M = xc.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = N;
  at::Tensor y = at::empty({M, N}, xc.options());
  const float* xp = xc.data_ptr<float>();
  const int8_t* qp = qc.data_ptr<int8_t>();
  const float* dp = dc.data_ptr<float>();
  const float* mp = mc.data_ptr<float>();
  const float* bp = b.has_value() ? bc.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  if (M == 0) return y.view(out_shape);  // no rows: nothing to compute (and no kernel for zero rows)
  at::parallel_for(0, N, ROW_BLOCK, [&](int64_t n0, int64_t n1) {
    if (M <= MAX_ROWS) {  // a step or a tree: one pass over this thread's codes, each decoded once
      table[M - 1](xp, qp, dp, mp, bp, yp, K, N, n0, n1);
      return;
    }
    for (int64_t nb = n0; nb < n1; nb += ROW_BLOCK) {  // a block of weight rows, read from L2 by every tile of rows
      const int64_t ne = std::min(nb + ROW_BLOCK, n1);
      for (int64_t r = 0; r < M; r += TILE) {
        const int64_t t = std::min<int64_t>(TILE, M - r);
        table[t - 1](xp + r * K, qp, dp, mp, bp, yp + r * N, K, N, nb, ne);
      }
    }
  });
  return y.view(out_shape);
}

}  // namespace

// The C shim an ahead-of-time package calls directly (skinny.cpp's aoti_torch_cpu_skinny_linear says why).
extern "C" AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_skinny_linear_q(AtenTensorHandle x, AtenTensorHandle q,
                                                                           AtenTensorHandle d, AtenTensorHandle m,
                                                                           AtenTensorHandle* b, int64_t isa,
                                                                           AtenTensorHandle* ret0) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor out = skinny_linear_q(*torch::aot_inductor::tensor_handle_to_tensor_pointer(x),
                                     *torch::aot_inductor::tensor_handle_to_tensor_pointer(q),
                                     *torch::aot_inductor::tensor_handle_to_tensor_pointer(d),
                                     *torch::aot_inductor::tensor_handle_to_tensor_pointer(m),
                                     torch::aot_inductor::pointer_to_optional<at::Tensor>(b), isa);
    *ret0 = torch::aot_inductor::new_tensor_handle(std::move(out));
  });
}

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def("skinny_linear_q(Tensor x, Tensor q, Tensor d, Tensor m, Tensor? b=None, int isa=0) -> Tensor");
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("skinny_linear_q", &skinny_linear_q); }

// Inference only: a backward through the op raises instead of returning a wrong gradient.
TORCH_LIBRARY_IMPL(specdec, Autograd, m) {
  m.impl("skinny_linear_q", torch::autograd::autogradNotImplementedFallback());
}
