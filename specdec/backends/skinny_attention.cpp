// specdec::skinny_attention(q, k, v, mask, scale): softmax(q k^T * scale + mask) v for the few query rows of a
// decoding step or a draft tree, float32, grouped-query heads read in place.
//
// Why: torch's CPU SDPA (its flash kernel) spends 60-120 us a layer on one query row against a few hundred keys,
// whose arithmetic is a few microseconds, and 150-400 us on 8-16 rows (measured on the 2-core Xeon f6m106): about a
// tenth of a 1-token step of a 135M model and a fifth of a 16-row tree. Here the keys each chunk of query rows sees
// are gathered from the mask once per call (shared by every kv head: on a static cache of 2048 slots, scanning the
// mask per head took as long as the arithmetic of an 8-row call), and each (batch, kv head, chunk of rows) item
// scores them for every query head of the group (the keys loaded once) and sums the values in registers.
//
// Contract (row invariance): a query row's output depends only on its query, on the keys and values it sees, in the
// order of their slots, and on their additive mask values, never on the other rows of the call, on how many slots
// are masked or where: a key's score is one fixed sum over its lanes and tree (the same for every key whatever its
// place among the W scored together), the sum of exponentials runs over the visible keys in a fixed lane layout of
// their ranks, and each weighted sum over the keys any row of the item sees, in slot order, where a key the row does
// not see adds an exact 0 (which changes no sum). A 1-token step (keys [0, L]) and the same row in a tree (its
// ancestors at later slots, siblings masked) therefore give the same bits, in float32. The vector code
// (skinny_attention_impl.h) is compiled twice: AVX2 (8 lanes) and AVX-512 (16 lanes, where the CPU has it and the
// head size is a multiple of 16); the order differs between the two, and one machine always runs the same one.
//
// Masks: an additive float mask (0 where seen, a value <= -1e30 such as the dtype's minimum or -inf where not: such
// a slot contributes exactly nothing to softmax) or a boolean one (true = seen), broadcast over heads ([B or 1, 1,
// T, S]); no mask = every key seen. A row that sees no key gets zeros (a padding row, never read).
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

namespace {

constexpr float UNSEEN = -1e30f;  // an additive mask value at or below this hides its key
constexpr int64_t AHEAD = 8;      // value rows prefetched this many keys ahead
constexpr int64_t ROWS = 4;       // query rows per item (their keys loaded once for all of them)
constexpr int64_t MAX_W = 16;     // the widest vector's floats: buffers are padded to a multiple of it

struct Shapes {
  int64_t G, D;                    // query heads per kv head, head size
  int64_t qs_h, qs_t, ks_s, vs_s;  // strides (floats): q's head and row, k's and v's slot
};

// One item: the G query heads of one kv head for `rows` rows of a call. keys[n] (n < n_keys) are the slots any of
// these rows sees, in order; add[t][n] is row t's mask value there (-inf where it does not see the key, and past
// n_keys to a multiple of MAX_W; row stride as); lead[t], rest[t] say which keys row t sees (seen_sum). q points at
// head 0 of the group in the item's first row; out at that row's first head of the group ([T, H, D] layout, row
// stride os).
struct Item {
  const float* q;
  const float* k;
  const float* v;
  const int64_t* keys;
  int64_t n_keys, rows;
  const float* add;  // [rows][as]
  int64_t as;
  const int64_t* lead;
  const std::vector<int64_t>* rest;
  float* out;
  int64_t os;
};

using Attend = void (*)(const Item&, float, const Shapes&, const float*, float*, float*);

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int W = 8, RB = 3;  // 3 query vectors x 4 vectors of c: 12 of the 16 registers
using vec = __m256;
inline vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vec x) { _mm256_storeu_ps(p, x); }
inline vec vset(float x) { return _mm256_set1_ps(x); }
inline vec vzero() { return _mm256_setzero_ps(); }
inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline vec vfnma(vec a, vec b, vec c) { return _mm256_fnmadd_ps(a, b, c); }
inline vec vadd(vec a, vec b) { return _mm256_add_ps(a, b); }
inline vec vsub(vec a, vec b) { return _mm256_sub_ps(a, b); }
inline vec vmul(vec a, vec b) { return _mm256_mul_ps(a, b); }
inline vec vmax(vec a, vec b) { return _mm256_max_ps(a, b); }
inline vec vfloor(vec x) { return _mm256_floor_ps(x); }
inline vec vpow2i(vec n) {  // 2^n for integral n in [-126, 127]
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline vec vkeep_seen(vec p, vec x) { return _mm256_and_ps(p, _mm256_cmp_ps(x, vset(-INFINITY), _CMP_NEQ_OQ)); }
inline float vhmax(vec x) {
  alignas(32) float lanes[W];
  _mm256_store_ps(lanes, x);
  return *std::max_element(lanes, lanes + W);
}
// The 8 horizontal sums of a[0..7] as one vector, each by the same tree: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline vec vsum(const vec* a) {
  const vec h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const vec h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const vec q0 = _mm256_hadd_ps(h01, h23), q1 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}
#include "skinny_attention_impl.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
namespace avx512 {
constexpr int W = 16, RB = 6;  // 6 query vectors x 4 vectors of c: 24 of the 32 registers
using vec = __m512;
inline vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vec x) { _mm512_storeu_ps(p, x); }
inline vec vset(float x) { return _mm512_set1_ps(x); }
inline vec vzero() { return _mm512_setzero_ps(); }
inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
inline vec vfnma(vec a, vec b, vec c) { return _mm512_fnmadd_ps(a, b, c); }
inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
inline vec vsub(vec a, vec b) { return _mm512_sub_ps(a, b); }
inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
inline vec vmax(vec a, vec b) { return _mm512_max_ps(a, b); }
inline vec vfloor(vec x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline vec vpow2i(vec n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23));
}
inline vec vkeep_seen(vec p, vec x) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, vset(-INFINITY), _CMP_NEQ_OQ), p); }
inline float vhmax(vec x) { return _mm512_reduce_max_ps(x); }
// The 16 horizontal sums of a[0..15], each by the same tree: lane l of its low half plus lane l of its high half
// (h_l = a[l] + a[l + 8]), then ((h0 + h1) + (h2 + h3)) + ((h4 + h5) + (h6 + h7)), the tree of AVX2's vsum on the
// halves. Computed across the 16 vectors at once (each level adds the same pairs, so the same bits as one vector at
// a time), with 23 shuffles and 8 blends where storing the halves and AVX2's hadd trees took ~44.
inline vec vsum(const vec* a) {
  vec x[8];  // x[i]: lanes 0-7 the halves of a[i], lanes 8-15 those of a[i + 8]
  for (int i = 0; i < 8; ++i)
    x[i] = _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, a[i], a[i + 8]), _mm512_shuffle_f32x4(a[i], a[i + 8], 0x4E));
  const auto pairs = [](vec u, vec v) {  // per 128 bits: u0 + u1, u2 + u3, v0 + v1, v2 + v3
    return _mm512_add_ps(_mm512_shuffle_ps(u, v, 0x88), _mm512_shuffle_ps(u, v, 0xDD));
  };
  const vec y01 = pairs(x[0], x[1]), y23 = pairs(x[2], x[3]), y45 = pairs(x[4], x[5]), y67 = pairs(x[6], x[7]);
  const vec z0 = pairs(y01, y23), z1 = pairs(y45, y67);  // per key: its first four halves' sum, then its last four's
  // z0's 128-bit lanes: keys 0-3 (first, last), keys 8-11 (first, last); z1 likewise for keys 4-7 and 12-15
  const vec r = _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, 0x88), _mm512_shuffle_f32x4(z0, z1, 0xDD));
  return _mm512_shuffle_f32x4(r, r, 0xD8);  // keys 0-3, 8-11, 4-7, 12-15 -> in order
}
#include "skinny_attention_impl.h"
}  // namespace avx512
#pragma GCC pop_options

// The keys that rows [t0, t0 + ROWS) of mask `mb` see (any of them), in slot order, and each row's mask values over
// them (Item's keys, add, lead and rest): a slot is seen where its additive value is above UNSEEN (NaN is not) or
// its boolean is true; no mask: every slot. One pass over the mask's rows, then the seen slots only.
struct Visible {
  std::vector<int64_t> keys, lead;
  std::vector<std::vector<int64_t>> rest;
  std::vector<float> add;  // [rows][as]: -inf where a row does not see a key, and past the keys to a multiple of W
  int64_t rows = 0, as = 0;
};

void gather(const float* mask_f, const bool* mask_b, int64_t mb, int64_t t0, int64_t T, int64_t S,
            std::vector<uint8_t>& seen, Visible& vis) {
  const int64_t rows = std::min(ROWS, T - t0);
  if (mask_f == nullptr && mask_b == nullptr) {
    std::fill(seen.begin(), seen.end(), 1);
  } else {
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t i = 0; i < rows; ++i) {  // branch-free over the slots, so the compiler vectorizes it
      uint8_t* sp = seen.data();
      if (mask_f != nullptr) {
        const float* row = mask_f + (mb * T + t0 + i) * S;
        for (int64_t j = 0; j < S; ++j) sp[j] |= static_cast<uint8_t>(row[j] > UNSEEN);
      } else {
        const bool* row = mask_b + (mb * T + t0 + i) * S;
        for (int64_t j = 0; j < S; ++j) sp[j] |= static_cast<uint8_t>(row[j]);
      }
    }
  }
  vis.rows = rows;
  vis.keys.clear();
  for (int64_t j = 0; j < S; ++j)
    if (seen[j]) vis.keys.push_back(j);
  const int64_t n = static_cast<int64_t>(vis.keys.size());
  vis.as = (n + MAX_W - 1) / MAX_W * MAX_W;
  vis.add.assign(rows * vis.as, -INFINITY);
  vis.lead.assign(rows, 0);
  vis.rest.assign(rows, {});
  for (int64_t i = 0; i < rows; ++i) {
    float* row = vis.add.data() + i * vis.as;
    for (int64_t jn = 0; jn < n; ++jn) {  // row i's additive mask value at the key: -inf where it does not see it
      const int64_t j = vis.keys[jn], at = (mb * T + t0 + i) * S + j;
      if (mask_b != nullptr) row[jn] = mask_b[at] ? 0.0f : -INFINITY;
      else if (mask_f != nullptr) row[jn] = mask_f[at] > UNSEEN ? mask_f[at] : -INFINITY;
      else row[jn] = 0.0f;
    }
    int64_t lead = -1;  // the keys row i sees: [0, lead), then those listed in rest
    for (int64_t jn = 0; jn < n; ++jn) {
      if (lead < 0 && row[jn] == -INFINITY) lead = jn;
      if (lead >= 0 && row[jn] != -INFINITY) vis.rest[i].push_back(jn);
    }
    vis.lead[i] = lead < 0 ? n : lead;
  }
}

at::Tensor skinny_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& mask, double scale, int64_t isa) {
  static const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  TORCH_CHECK(isa >= 0 && isa <= 2, "specdec::skinny_attention: isa is 0 (best), 1 (AVX2) or 2 (AVX-512), got ", isa);
  TORCH_CHECK(isa == 2 ? has_avx512 : has_avx2, "specdec::skinny_attention: this CPU lacks ",
              isa == 2 ? "AVX-512" : "AVX2 and FMA");
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(), "specdec::skinny_attention: CPU only");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "specdec::skinny_attention runs float32, got q ", q.scalar_type(), ", k ", k.scalar_type(), ", v ",
              v.scalar_type());
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes(), "specdec::skinny_attention: q [B, H, T, D] and ",
              "k, v [B, H_kv, S, D] expected, got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), S = k.size(2);
  TORCH_CHECK(k.size(0) == B && k.size(3) == D && Hkv > 0 && H % Hkv == 0 && D % 8 == 0 && (isa != 2 || D % 16 == 0),
              "specdec::skinny_attention: batch and head size must match, query heads a multiple of kv heads and the "
              "head size a multiple of 8 (16 for AVX-512), got q ", q.sizes(), " and k ", k.sizes());
  const at::Tensor qc = q.stride(3) == 1 ? q : q.contiguous();
  const at::Tensor kc = k.stride(3) == 1 ? k : k.contiguous();
  const at::Tensor vc = v.stride(3) == 1 ? v : v.contiguous();
  at::Tensor m;
  if (mask.has_value()) {
    m = *mask;
    TORCH_CHECK(m.dim() == 4 && (m.size(0) == 1 || m.size(0) == B) && m.size(1) == 1 && m.size(2) == T &&
                    m.size(3) == S && (m.scalar_type() == at::kFloat || m.scalar_type() == at::kBool),
                "specdec::skinny_attention: a float32 or bool mask [B or 1, 1, T, S] expected, got ", m.sizes(), " ",
                m.scalar_type());
    m = m.contiguous();
  }
  const Shapes s{H / Hkv, D, qc.stride(1), qc.stride(2), kc.stride(2), vc.stride(2)};
  // the widest variant this CPU and head size allow, unless one is asked for (how each is tested on any machine)
  const Attend attend = isa == 2 || (isa == 0 && has_avx512 && D % 16 == 0) ? avx512::attend : avx2::attend;
  at::Tensor out = at::empty({B, T, H, D}, q.options());
  const int64_t chunks = (T + ROWS - 1) / ROWS, items = B * Hkv * chunks;
  const bool* mask_b = m.defined() && m.scalar_type() == at::kBool ? m.data_ptr<bool>() : nullptr;
  const float* mask_f = m.defined() && m.scalar_type() == at::kFloat ? m.data_ptr<float>() : nullptr;
  // The keys each chunk of rows sees, gathered once per call (every kv head and batch row of one mask shares them).
  const int64_t masks = m.defined() ? m.size(0) : 1;
  std::vector<Visible> visible(masks * chunks);
  at::parallel_for(0, masks * chunks, 1, [&](int64_t v0, int64_t v1) {
    std::vector<uint8_t> seen(S);
    for (int64_t vi = v0; vi < v1; ++vi)
      gather(mask_f, mask_b, vi / chunks, vi % chunks * ROWS, T, S, seen, visible[vi]);
  });
  at::parallel_for(0, items, 1, [&](int64_t i0, int64_t i1) {
    const int64_t padded_s = (S + MAX_W - 1) / MAX_W * MAX_W;
    std::vector<float> scores(ROWS * s.G * padded_s), inv(ROWS * s.G), zeros(D, 0.0f);
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t b = item / (Hkv * chunks), g = item / chunks % Hkv, chunk = item % chunks, t0 = chunk * ROWS;
      const Visible& vis = visible[(masks > 1 ? b : 0) * chunks + chunk];
      const Item it{qc.data_ptr<float>() + b * qc.stride(0) + g * s.G * s.qs_h + t0 * s.qs_t,
                    kc.data_ptr<float>() + b * kc.stride(0) + g * kc.stride(1),
                    vc.data_ptr<float>() + b * vc.stride(0) + g * vc.stride(1),
                    vis.keys.data(), static_cast<int64_t>(vis.keys.size()), vis.rows, vis.add.data(), vis.as,
                    vis.lead.data(), vis.rest.data(), out.data_ptr<float>() + ((b * T + t0) * H + g * s.G) * D, H * D};
      attend(it, static_cast<float>(scale), s, zeros.data(), scores.data(), inv.data());
    }
  });
  return out;
}

}  // namespace

// The C shim an ahead-of-time package calls (``aot_inductor.custom_ops_to_c_shims``), as for skinny_linear.
extern "C" AOTI_TORCH_EXPORT AOTITorchError aoti_torch_cpu_skinny_attention(AtenTensorHandle q, AtenTensorHandle k,
                                                                            AtenTensorHandle v, AtenTensorHandle* mask,
                                                                            double scale, int64_t isa,
                                                                            AtenTensorHandle* ret0) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor out = skinny_attention(*torch::aot_inductor::tensor_handle_to_tensor_pointer(q),
                                      *torch::aot_inductor::tensor_handle_to_tensor_pointer(k),
                                      *torch::aot_inductor::tensor_handle_to_tensor_pointer(v),
                                      torch::aot_inductor::pointer_to_optional<at::Tensor>(mask), scale, isa);
    *ret0 = torch::aot_inductor::new_tensor_handle(std::move(out));
  });
}

TORCH_LIBRARY_FRAGMENT(specdec, m) {
  m.def("skinny_attention(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale, int isa=0) -> Tensor");
}

TORCH_LIBRARY_IMPL(specdec, CPU, m) { m.impl("skinny_attention", &skinny_attention); }

TORCH_LIBRARY_IMPL(specdec, Autograd, m) {
  m.impl("skinny_attention", torch::autograd::autogradNotImplementedFallback());
}
