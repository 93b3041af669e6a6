// specdec::nucleus_(probs [M, V], top_p) -> probs: top-p on rows that are already a softmax, in place.
//
// The rule (transformers' TopPLogitsWarper, specdec.sampling._outside_nucleus): in descending order of p, a token is
// kept iff the mass of the tokens before it is below top_p (the first token is always kept); the kept tokens are
// renormalised, the others set to 0. Only the order of the tokens above the cut matters, so instead of sorting the
// row: one pass sums the mass of the tokens of p >= theta for a few thresholds theta at once; the largest theta whose
// tokens hold top_p of the mass takes them (every token below it comes after all of them in the order, with at least
// that mass before it: dropped), sorted (descending p, then ascending index) and kept by the rule; the row is then
// rewritten: the kept tokens times 1 / (their mass), the rest 0. The last threshold, 0, takes every positive token
// (a row as flat as that sorts them all, as the tensor form does).
// Masses are summed in float64. Against the tensor form the cut can move only where it lies within rounding of top_p
// (the tensor form's two ways already differ there), or between tokens of exactly equal p, whose order the rule
// leaves open. A row with a NaN is left as it is (the loops check the logits for NaN and raise).
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

// The library loads only on CPUs with AVX2 and FMA (specdec/backends/skinny.py), so these loops may use them.
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace {

constexpr int LEVELS = 5;
constexpr double THETA[LEVELS] = {1e-3, 1e-4, 1e-5, 1e-6, 0.0};

template <typename T>
void nucleus_row(T* __restrict row, int64_t V, double top_p, std::vector<int64_t>& members, std::vector<T>& kept) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0;
  int nan = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3, s4) reduction(| : nan)
  for (int64_t i = 0; i < V; ++i) {
    const double p = double(row[i]);
    nan |= p != p;
    s0 += p >= THETA[0] ? p : 0.0;
    s1 += p >= THETA[1] ? p : 0.0;
    s2 += p >= THETA[2] ? p : 0.0;
    s3 += p >= THETA[3] ? p : 0.0;
    s4 += p > 0.0 ? p : 0.0;
  }
  if (nan) return;
  const double mass[LEVELS] = {s0, s1, s2, s3, s4};
  int level = 0;
  while (level < LEVELS - 1 && mass[level] < top_p) ++level;
  const double theta = THETA[level];
  members.clear();
  for (int64_t i = 0; i < V; ++i)
    if (row[i] > T(0) && double(row[i]) >= theta) members.push_back(i);
  std::sort(members.begin(), members.end(),
            [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  double before = 0.0;  // the mass before the next member; a member is kept while it is below top_p
  int64_t count = 0;
  kept.clear();
  for (; count < static_cast<int64_t>(members.size()) && before < top_p; ++count) {
    kept.push_back(row[members[count]]);
    before += double(kept.back());
  }
  std::fill(row, row + V, T(0));
  for (int64_t k = 0; k < count; ++k) row[members[k]] = T(double(kept[k]) / before);
}

at::Tensor nucleus_(at::Tensor probs, double top_p) {
  const char* op = "specdec::nucleus_";
  TORCH_CHECK(probs.device().is_cpu(), op, " runs on the CPU");
  TORCH_CHECK(probs.scalar_type() == at::kFloat || probs.scalar_type() == at::kDouble, op,
              ": probs float32 or float64 expected, got ", probs.scalar_type());
  TORCH_CHECK(probs.dim() >= 1 && probs.size(-1) > 0 && probs.is_contiguous(), op,
              ": contiguous probs [..., V] with V > 0 expected, got ", probs.sizes());
  TORCH_CHECK(0.0 < top_p && top_p <= 1.0, op, ": top_p in (0, 1] expected, got ", top_p);
  const int64_t V = probs.size(-1), M = probs.numel() / V;
  std::vector<int64_t> members;
  AT_DISPATCH_FLOATING_TYPES(probs.scalar_type(), "nucleus_", [&] {
    std::vector<scalar_t> kept;
    scalar_t* data = probs.data_ptr<scalar_t>();
    for (int64_t m = 0; m < M; ++m) nucleus_row<scalar_t>(data + m * V, V, top_p, members, kept);
  });
  return probs;
}

}  // namespace

#pragma GCC pop_options

TORCH_LIBRARY_FRAGMENT(specdec, m) { m.def("nucleus_(Tensor(a!) probs, float top_p) -> Tensor(a!)"); }

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("nucleus_", &nucleus_); }
