// specdec::sample_rows(probs [M, V], u [M, k]) -> [M, k] long: k draws per row without replacement by inverse CDF,
// the law of specdec.sampling.sample (k = 1) and sample_distinct, in one call instead of ~6 tensor ops per draw.
//
// Row m's draw j: the row's max(p, 0) with the entries of draws 0 .. j-1 set to 0, its CDF c summed afresh in
// float64 in index order, target = min(u[m, j] * c[V-1], the float64 just below c[V-1]), and the index is the first
// i with c_i > target (so c_{i-1} <= target < c_i and p_i > 0: a zero entry is never drawn), at most V - 1. A row with
// a NaN, or with no positive entry left, gives V - 1 (sampling.py's contract: the loops check logits for NaN). The
// uniforms come from the caller (torch's generator, drawn in the order the tensor form draws them), so both forms
// read the same random numbers.
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

template <typename T>
void draw_rows(const T* probs, const double* u, int64_t M, int64_t V, int64_t k, int64_t* out) {
  thread_local std::vector<double> rest, cdf;  // reused across calls: no allocation (nor page faults) per draw
  rest.resize(V);
  cdf.resize(V);
  for (int64_t m = 0; m < M; ++m) {
    const T* row = probs + m * V;
    int64_t nans = 0;  // a row with a NaN draws V - 1 (and zeroes it: a NaN there alone then leaves a valid row)
    bool last_nan = false;
    double run = 0.0;
    for (int64_t i = 0; i < V; ++i) {  // max(p, 0) and the first draw's CDF in one pass (a NaN summed as 0)
      double x = double(row[i]);
      if (!(x > 0.0)) {
        nans += x != x;
        last_nan = i == V - 1 && x != x;
        x = 0.0;
      }
      rest[i] = x;
      cdf[i] = run += x;
    }
    int64_t from = V;  // cdf[0 .. from) holds the current sums: a draw changes the CDF only from its index on
    for (int64_t j = 0; j < k; ++j) {
      int64_t index = V - 1;
      if (nans == 0) {
        run = from > 0 ? cdf[from - 1] : 0.0;
        for (int64_t i = from; i < V; ++i) cdf[i] = run += rest[i];  // the same sums, in the same order, as afresh
        const double total = cdf[V - 1];
        const double target = std::min(u[m * k + j] * total, std::nextafter(total, 0.0));
        index = std::min<int64_t>(std::upper_bound(cdf.begin(), cdf.end(), target) - cdf.begin(), V - 1);
      }
      out[m * k + j] = index;
      if (index == V - 1 && last_nan) {  // the tensor form zeroes the drawn NaN: the rest of the row is as summed
        --nans;
        last_nan = false;
      }
      rest[index] = 0.0;
      from = index;  // every sum is current again; zeroing this entry changes them from here on
    }
  }
}

at::Tensor sample_rows(const at::Tensor& probs, const at::Tensor& u) {
  const char* op = "specdec::sample_rows";
  TORCH_CHECK(probs.device().is_cpu() && u.device().is_cpu(), op, " runs on the CPU");
  TORCH_CHECK(probs.dim() == 2 && probs.size(1) > 0, op, ": probs [M, V] with V > 0 expected, got ", probs.sizes());
  TORCH_CHECK(probs.scalar_type() == at::kFloat || probs.scalar_type() == at::kDouble, op,
              ": probs float32 or float64 expected, got ", probs.scalar_type());
  TORCH_CHECK(u.scalar_type() == at::kDouble && u.dim() == 2 && u.size(0) == probs.size(0), op,
              ": u [M, k] float64 expected for M = ", probs.size(0), ", got ", u.sizes(), " ", u.scalar_type());
  const int64_t M = probs.size(0), V = probs.size(1), k = u.size(1);
  TORCH_CHECK(k <= V, op, ": cannot draw ", k, " distinct indices from ", V);
  const at::Tensor pc = probs.contiguous(), uc = u.contiguous();
  at::Tensor out = at::empty({M, k}, probs.options().dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES(probs.scalar_type(), "sample_rows", [&] {
    draw_rows<scalar_t>(pc.data_ptr<scalar_t>(), uc.data_ptr<double>(), M, V, k, out.data_ptr<int64_t>());
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specdec, m) { m.def("sample_rows(Tensor probs, Tensor u) -> Tensor"); }

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("sample_rows", &sample_rows); }
