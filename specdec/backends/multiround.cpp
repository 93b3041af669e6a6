// specdec::multiround_plan and specdec::multiround_residual: the mixed multi-round verification plan
// (specdec/verify/mixed.py, mixed_multiround_plan) in a few passes over the [V] rows of the nodes that have children,
// instead of ~100 small tensor ops over [N, V] and [N, N].
//
// p and q are [N, V] (float32 or float64, the plan's dtype): row u is the target's and the draft's law for the
// children of node u. parents [N] (parents[0] = -1, parents[c] < c), tokens [N], point_mass [N] (bool: the child is
// a point mass, else a draw from q without replacement among the drawn siblings). The closed form, per node u with
// children c_1 .. c_K (index order), the first `rounds` of them judged (later ones: accept 0):
//
//   t = 0; for k = 0 .. min(K, rounds) - 1, child c = c_{k+1}, token x:
//     row_j = max(0, p_u[j] - t q_u[j]), 0 at the tokens of the point-mass children of rank < k (k = 0: row = p_u)
//     own = row_x, r = sum_j row_j (k = 0: r = 1)
//     Z = the q mass no earlier drawn sibling took: the mass no child carries, plus the draws from c on, plus each
//         point-mass token that no draw carries (once); every term non-negative, so it cannot cancel
//     accept[c] = min(1, point mass ? own / r : own Z / (r q_u[x]))   (a / b with b <= 0 -> 0)
//     t += point mass ? 0 : r / Z
//   residual row of u: max(0, p_u - t q_u), 0 at the tokens of every point-mass child, renormalised; p_u if all 0.
//
// The sums over V run in double over the stretches between the excluded tokens (never as a total minus the
// excluded terms, which would cancel when they hold nearly all the mass). mixed.py proves the law; the tests compare
// this kernel with it on random trees (tests/test_native_steps.py).
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

// The library loads only on CPUs with AVX2 and FMA (specdec/backends/skinny.py), so these loops may use them.
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace {

// sum_{j in [lo, hi)} f(j) in double, over 8 interleaved partial sums (independent chains the compiler can keep in
// vector registers; one chain would wait on each add), added pairwise at the end: a fixed order.
template <typename F>
double range_sum(int64_t lo, int64_t hi, const F& f) {
  double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  int64_t j = lo;
  for (; j + 8 <= hi; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += f(j + l);
  for (int l = 0; j < hi; ++j, ++l) acc[l] += f(j);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// sum over j in [0, V) outside the sorted distinct tokens `skip` of f(j).
template <typename F>
double sum_except(int64_t V, const std::vector<int64_t>& skip, const F& f) {
  double acc = 0.0;
  int64_t lo = 0;
  for (const int64_t s : skip) {
    acc += range_sum(lo, s, f);
    lo = s + 1;
  }
  return acc + range_sum(lo, V, f);
}

std::vector<int64_t> sorted_unique(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

double safe_div(double num, double den) { return den > 0.0 ? num / den : 0.0; }

// max(0, x) that keeps a NaN (as the tensor form's clamp does), so a NaN row is not renormalised into a law.
template <typename T>
T positive(T x) {
  return x > T(0) || x != x ? x : T(0);
}

struct Tree {
  int64_t N, V;
  std::vector<std::vector<int64_t>> children;  // per node, in index order
  const int64_t* tokens;
  const bool* point;
};

Tree read_tree(const at::Tensor& p, const at::Tensor& q, const at::Tensor& parents, const at::Tensor& tokens,
               const at::Tensor& point_mass, const char* op) {
  TORCH_CHECK(p.device().is_cpu() && q.device().is_cpu() && parents.device().is_cpu() && tokens.device().is_cpu() &&
                  point_mass.device().is_cpu(),
              op, " runs on the CPU: p, q, parents, tokens and point_mass there");
  TORCH_CHECK(p.dim() == 2 && q.sizes() == p.sizes(), op, ": p and q [N, V] of one shape expected, got p ", p.sizes(),
              " and q ", q.sizes());
  TORCH_CHECK(p.scalar_type() == q.scalar_type() &&
                  (p.scalar_type() == at::kFloat || p.scalar_type() == at::kDouble),
              op, ": p and q float32 or float64 of one dtype expected, got ", p.scalar_type(), " and ",
              q.scalar_type());
  const int64_t N = p.size(0), V = p.size(1);
  TORCH_CHECK(parents.scalar_type() == at::kLong && tokens.scalar_type() == at::kLong &&
                  point_mass.scalar_type() == at::kBool,
              op, ": parents and tokens int64, point_mass bool expected");
  TORCH_CHECK(parents.dim() == 1 && parents.size(0) == N && tokens.dim() == 1 && tokens.size(0) == N &&
                  point_mass.dim() == 1 && point_mass.size(0) == N,
              op, ": parents, tokens and point_mass [N] expected for N = ", N);
  TORCH_CHECK(parents.is_contiguous() && tokens.is_contiguous() && point_mass.is_contiguous(), op,
              ": parents, tokens and point_mass must be contiguous");
  const int64_t* par = parents.data_ptr<int64_t>();
  Tree tree{N, V, std::vector<std::vector<int64_t>>(N), tokens.data_ptr<int64_t>(), point_mass.data_ptr<bool>()};
  for (int64_t c = 0; c < N; ++c) {
    TORCH_CHECK(0 <= tree.tokens[c] && tree.tokens[c] < V, op, ": token ", tree.tokens[c], " of node ", c,
                " outside the vocabulary of ", V);
    if (c == 0) {
      TORCH_CHECK(par[0] == -1, op, ": parents[0] must be -1 (the root)");
      continue;
    }
    TORCH_CHECK(0 <= par[c] && par[c] < c, op, ": parents[", c, "] = ", par[c], " must lie in [0, ", c, ")");
    tree.children[par[c]].push_back(c);
  }
  return tree;
}

template <typename T>
void plan_rows(const Tree& tree, const T* p, const T* q, int64_t rounds, T* accept, T* t_out) {
  const int64_t V = tree.V;
  std::fill(accept, accept + tree.N, T(0));
  std::fill(t_out, t_out + tree.N, T(0));
  if (tree.N > 0) accept[0] = T(1);
  for (int64_t u = 0; u < tree.N; ++u) {
    const std::vector<int64_t>& kids = tree.children[u];
    if (kids.empty()) continue;
    const T* pu = p + u * V;
    const T* qu = q + u * V;
    const int64_t K = static_cast<int64_t>(kids.size());
    // Z before each child, as non-negative terms: the mass no child carries, the draws from this child on, and each
    // point-mass token (first occurrence) that no drawn sibling carries.
    std::vector<int64_t> child_tokens;
    for (const int64_t c : kids) child_tokens.push_back(tree.tokens[c]);
    const double rest = sum_except(V, sorted_unique(child_tokens), [&](int64_t j) { return double(qu[j]); });
    double point_only = 0.0;
    for (int64_t i = 0; i < K; ++i) {
      const int64_t x = tree.tokens[kids[i]];
      if (!tree.point[kids[i]]) continue;
      bool counted = false;
      for (int64_t j = 0; j < K && !counted; ++j)
        counted = tree.tokens[kids[j]] == x && (j < i || !tree.point[kids[j]]);  // an earlier copy, or a draw
      if (!counted) point_only += double(qu[x]);
    }
    std::vector<double> z_before(K);
    double draws_from = 0.0;  // the q of the drawn children from i on
    for (int64_t i = K - 1; i >= 0; --i) {
      if (!tree.point[kids[i]]) draws_from += double(qu[tree.tokens[kids[i]]]);
      z_before[i] = rest + draws_from + point_only;
    }
    double t = 0.0;
    std::vector<int64_t> tried;  // tokens of the point-mass children judged so far
    for (int64_t k = 0; k < std::min(K, rounds); ++k) {
      const int64_t c = kids[k], x = tree.tokens[c];
      double own, r;
      if (k == 0) {
        own = double(pu[x]);
        r = 1.0;
      } else {
        const std::vector<int64_t> skip = sorted_unique(tried);
        const double tt = t;
        r = sum_except(V, skip, [&](int64_t j) { return positive(double(pu[j]) - tt * double(qu[j])); });
        const bool excluded = std::binary_search(skip.begin(), skip.end(), x);
        own = excluded ? 0.0 : positive(double(pu[x]) - t * double(qu[x]));
      }
      const double z = z_before[k];
      const double a = tree.point[c] ? safe_div(own, r) : safe_div(own * z, r * double(qu[x]));
      accept[c] = T(std::min(a, 1.0));
      if (tree.point[c])
        tried.push_back(x);
      else
        t += safe_div(r, z);
    }
    t_out[u] = T(t);
  }
}

std::tuple<at::Tensor, at::Tensor> multiround_plan(const at::Tensor& p, const at::Tensor& q, const at::Tensor& parents,
                                                   const at::Tensor& tokens, const at::Tensor& point_mass,
                                                   int64_t rounds) {
  const Tree tree = read_tree(p, q, parents, tokens, point_mass, "specdec::multiround_plan");
  const at::Tensor pc = p.contiguous(), qc = q.contiguous();
  at::Tensor accept = at::empty({tree.N}, p.options()), t = at::empty({tree.N}, p.options());
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "multiround_plan", [&] {
    plan_rows<scalar_t>(tree, pc.data_ptr<scalar_t>(), qc.data_ptr<scalar_t>(), rounds, accept.data_ptr<scalar_t>(),
                        t.data_ptr<scalar_t>());
  });
  return {accept, t};
}

template <typename T>
void residual_rows(const Tree& tree, const T* p, const T* q, const T* t, const int64_t* nodes, int64_t M, T* out) {
  const int64_t V = tree.V;
  for (int64_t i = 0; i < M; ++i) {
    const int64_t u = nodes[i];
    const T* __restrict pu = p + u * V;
    const T* __restrict qu = q + u * V;
    T* __restrict row = out + i * V;
    const T tu = t[u];
    std::vector<int64_t> points;
    for (const int64_t c : tree.children[u])
      if (tree.point[c]) points.push_back(tree.tokens[c]);
    const std::vector<int64_t> skip = sorted_unique(points);
    for (int64_t j = 0; j < V; ++j) row[j] = positive(pu[j] - tu * qu[j]);  // in the plan's dtype, as mixed.py
    for (const int64_t s : skip) row[s] = T(0);
    const double total = range_sum(0, V, [&](int64_t j) { return double(row[j]); });  // the skipped entries are 0
    if (total > 0.0) {  // scaled in float64: 1 / total stays finite even for a total of float32 subnormals
      const double inv = 1.0 / total;
      for (int64_t j = 0; j < V; ++j) row[j] = T(double(row[j]) * inv);
    } else {
      std::copy(pu, pu + V, row);
    }
  }
}

at::Tensor multiround_residual(const at::Tensor& p, const at::Tensor& q, const at::Tensor& t,
                               const at::Tensor& parents, const at::Tensor& tokens, const at::Tensor& point_mass,
                               const at::Tensor& nodes) {
  const char* op = "specdec::multiround_residual";
  const Tree tree = read_tree(p, q, parents, tokens, point_mass, op);
  TORCH_CHECK(t.scalar_type() == p.scalar_type() && t.dim() == 1 && t.size(0) == tree.N, op,
              ": t [N] of p's dtype expected, got ", t.sizes());
  TORCH_CHECK(nodes.scalar_type() == at::kLong && nodes.device().is_cpu() && t.device().is_cpu(), op,
              ": nodes int64 and t on the CPU expected");
  const at::Tensor nc = nodes.reshape({-1}).contiguous();
  const int64_t* np = nc.data_ptr<int64_t>();
  for (int64_t i = 0; i < nc.numel(); ++i)
    TORCH_CHECK(0 <= np[i] && np[i] < tree.N, op, ": node ", np[i], " outside the tree of ", tree.N, " nodes");
  const at::Tensor pc = p.contiguous(), qc = q.contiguous(), tc = t.contiguous();
  std::vector<int64_t> shape(nodes.sizes().begin(), nodes.sizes().end());
  shape.push_back(tree.V);
  at::Tensor out = at::empty({nc.numel(), tree.V}, p.options());
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "multiround_residual", [&] {
    residual_rows<scalar_t>(tree, pc.data_ptr<scalar_t>(), qc.data_ptr<scalar_t>(), tc.data_ptr<scalar_t>(), np,
                            nc.numel(), out.data_ptr<scalar_t>());
  });
  return out.view(shape);
}

}  // namespace

#pragma GCC pop_options

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def(
      "multiround_plan(Tensor p, Tensor q, Tensor parents, Tensor tokens, Tensor point_mass, int rounds) -> "
      "(Tensor, Tensor)");
  m.def(
      "multiround_residual(Tensor p, Tensor q, Tensor t, Tensor parents, Tensor tokens, Tensor point_mass, "
      "Tensor nodes) -> Tensor");
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) {
  m.impl("multiround_plan", &multiround_plan);
  m.impl("multiround_residual", &multiround_residual);
}
