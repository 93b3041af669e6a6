// specdec::skinny_linear(x, w, b): y = x @ w^T (+ b) for the few rows of a decoding step or a draft tree, float32.
//
// Why: a step of a small model streams every weight from memory once; MKL's and oneDNN's GEMMs run 8 rows of a draft
// tree at 1.5-3.4x the time of one row on the 2-core CPUs this project measures, where the memory stream alone would
// allow about 1x. Here each thread walks its share of w's rows once, and every weight vector it loads is multiplied
// into up to 16 input rows held in registers (AVX-512: up to four weight rows at a time share each input load, with
// the rows ahead prefetched); inputs of 17 to INVARIANT_ROWS rows (the largest trees) go in blocks of ROW_BLOCK
// weight rows that stay in L2 across the input's blocks of TILE rows.
//
// Contract (row invariance): for up to INVARIANT_ROWS rows, y[m, n] is summed in the same order whatever the number
// of rows and whichever rows share the call: lane-wise partial sums over k in steps of the vector width (AVX-512: the
// k tail masked into the same lanes), a fixed horizontal reduction (AVX2: then the k tail in order), then the bias. So
// a row's output is bitwise the same alone or in a tree (what greedy speculation needs to emit exactly what plain
// decoding emits with the same kernel). The order differs between the AVX-512 and AVX2 variants; one machine always
// runs the same one. More rows than INVARIANT_ROWS are a prompt's prefill, shared by plain and speculative decoding
// and compared with no tree: they run on torch's own GEMM (at::linear), 1.5-2x faster there than this kernel.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
#include "skinny_isa.h"
#include <torch/library.h>
#include <torch/torch.h>

#include <optional>

namespace {

constexpr int64_t ROW_BLOCK = 64;  // rows of w per inner block (64 x 576 floats = 147 KB: L2-resident)
constexpr int MAX_ROWS = 16;       // input rows per pass over a block (register accumulators)
constexpr int TILE = 6;            // input rows per pass where a call has more than MAX_ROWS (6 x 4 accumulators)
// The most rows summed in the fixed order of the contract: the largest tree forward (specdec.backends.aot.MAX_ROWS,
// the row probe's largest count). A longer input is a prefill, which no tree is compared with: a dense GEMM runs it.
constexpr int64_t INVARIANT_ROWS = 64;

using Kernel = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t);

// R weight rows per pass share each input vector load (R x M accumulators: at most 16 of the 32 registers), and the
// rows 2R ahead are prefetched. R changes which outputs are computed together, never the order of one output's sum.
template <int M, int R>
__attribute__((target("avx512f"))) void rows_avx512_r(const float* x, const float* w, const float* b, float* y,
                                                       int64_t K, int64_t N, int64_t n0, int64_t n1) {
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
        wv[r] = _mm512_loadu_ps(w + (n + r) * K + k);
        _mm_prefetch(reinterpret_cast<const char*>(w + (n + r + 2 * R) * K + k), _MM_HINT_T0);  // never faults
      }
      for (int m = 0; m < M; ++m) {
        const __m512 xv = _mm512_loadu_ps(x + m * K + k);
        for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]);
      }
    }
    if (tail) {
      for (int m = 0; m < M; ++m) {
        const __m512 xv = _mm512_maskz_loadu_ps(tail, x + m * K + kv);
        for (int r = 0; r < R; ++r)
          acc[r][m] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + (n + r) * K + kv), xv, acc[r][m]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float bias = b ? b[n + r] : 0.0f;
      for (int m = 0; m < M; ++m) y[m * N + n + r] = _mm512_reduce_add_ps(acc[r][m]) + bias;
    }
  }
  if (n < n1 && R > 1) rows_avx512_r<M, 1>(x, w, b, y, K, N, n, n1);  // the rows left over, one at a time
}

template <int M>
__attribute__((target("avx512f"))) void rows_avx512(const float* x, const float* w, const float* b, float* y,
                                                     int64_t K, int64_t N, int64_t n0, int64_t n1) {
  rows_avx512_r<M, (M <= 4 ? 4 : M <= 8 ? 2 : 1)>(x, w, b, y, K, N, n0, n1);
}

template <int M>
__attribute__((target("avx2,fma"))) void rows_avx2(const float* x, const float* w, const float* b, float* y,
                                                   int64_t K, int64_t N, int64_t n0, int64_t n1) {
  const int64_t kv = K & ~int64_t(7);
  for (int64_t n = n0; n < n1; ++n) {
    const float* wr = w + n * K;
    __m256 acc[M];
    for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kv; k += 8) {
      const __m256 wv = _mm256_loadu_ps(wr + k);
      for (int m = 0; m < M; ++m) acc[m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + m * K + k), acc[m]);
    }
    const float bias = b ? b[n] : 0.0f;
    for (int m = 0; m < M; ++m) {
      float s = specdec_isa::hsum256(acc[m]);
      for (int64_t k = kv; k < K; ++k) s += x[m * K + k] * wr[k];
      y[m * N + n] = s + bias;
    }
  }
}

const Kernel AVX512[MAX_ROWS] = SPECDEC_TABLE(rows_avx512);
const Kernel AVX2[MAX_ROWS] = SPECDEC_TABLE(rows_avx2);

// The variant to run, by isa (specdec_isa::pick says how).
const Kernel* kernels(int64_t isa) { return specdec_isa::pick<Kernel>(isa, AVX512, AVX2); }

at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b, int64_t isa) {
  TORCH_CHECK(isa >= 0 && isa <= 2, "specdec::skinny_linear: isa is 0 (best), 1 (AVX2) or 2 (AVX-512), got ", isa);
  const Kernel* table = kernels(isa);
  TORCH_CHECK(table != nullptr, "specdec::skinny_linear: this CPU lacks ", isa == 2 ? "AVX-512" : "AVX2 and FMA");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "specdec::skinny_linear runs on the CPU");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat,
              "specdec::skinny_linear runs float32, got x ", x.scalar_type(), " and w ", w.scalar_type());
  TORCH_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), "specdec::skinny_linear: x [..., K] and w [N, K] ",
              "expected, got x ", x.sizes(), " and w ", w.sizes());
  const int64_t K = w.size(1), N = w.size(0);
  TORCH_CHECK(!b.has_value() || (b->scalar_type() == at::kFloat && b->numel() == N && b->device().is_cpu()),
              "specdec::skinny_linear: bias [N] float32 expected, got ", b.has_value() ? b->sizes() : x.sizes());
  // a prefill (more rows than any tree): compute-bound, where a blocked GEMM is 1.5-2x faster; before any copy
  if (x.numel() > INVARIANT_ROWS * K) return at::linear(x, w, b);
  const at::Tensor xc = x.reshape({-1, K}).contiguous();
  const at::Tensor wc = w.contiguous();
  const at::Tensor bc = b.has_value() ? b->contiguous() : at::Tensor();
  const int64_t M = xc.size(0);
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = N;
  at::Tensor y = at::empty({M, N}, xc.options());
  const float* xp = xc.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  const float* bp = b.has_value() ? bc.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  if (M == 0) return y.view(out_shape);  // no rows: nothing to compute (and no kernel for zero rows)
  const Kernel tile = table == AVX512 ? rows_avx512_r<TILE, 4> : rows_avx2<TILE>;
  at::parallel_for(0, N, ROW_BLOCK, [&](int64_t n0, int64_t n1) {
    if (M <= MAX_ROWS) {  // a step or a tree: one pass over this thread's rows of w
      table[M - 1](xp, wp, bp, yp, K, N, n0, n1);
      return;
    }
    for (int64_t nb = n0; nb < n1; nb += ROW_BLOCK) {  // a block of w's rows, reused from L2 by every row block of x
      const int64_t ne = std::min(nb + ROW_BLOCK, n1);
      int64_t r = 0;  // TILE rows at a time (more outputs per load than 16 rows with one weight row), then the rest
      for (; r + TILE <= M; r += TILE) tile(xp + r * K, wp, bp, yp + r * N, K, N, nb, ne);
      if (r < M) table[M - r - 1](xp + r * K, wp, bp, yp + r * N, K, N, nb, ne);
    }
  });
  return y.view(out_shape);
}

}  // namespace

// The C shim AOTInductor calls directly where a package is built with this op in
// ``aot_inductor.custom_ops_to_c_shims`` (instead of its proxy executor, which costs tens of microseconds a call).
extern "C" AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_skinny_linear(AtenTensorHandle x, AtenTensorHandle w,
                                                                         AtenTensorHandle* b, int64_t isa,
                                                                         AtenTensorHandle* ret0) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor out = skinny_linear(*torch::aot_inductor::tensor_handle_to_tensor_pointer(x),
                                   *torch::aot_inductor::tensor_handle_to_tensor_pointer(w),
                                   torch::aot_inductor::pointer_to_optional<at::Tensor>(b), isa);
    *ret0 = torch::aot_inductor::new_tensor_handle(std::move(out));
  });
}

TORCH_LIBRARY(specdec, m) { m.def("skinny_linear(Tensor x, Tensor w, Tensor? b=None, int isa=0) -> Tensor"); }

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("skinny_linear", &skinny_linear); }

// Inference only: a backward through the op raises instead of returning a wrong gradient.
TORCH_LIBRARY_IMPL(specdec, Autograd, m) {
  m.impl("skinny_linear", torch::autograd::autogradNotImplementedFallback());
}
