// Prototype: every row count with the three parts accumulated in one tile (C = 0 + sum h q + sum m q + sum l q).
template <int M, bool NIB>
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16"))) void acc_rows(
    const uint16_t* xs, int64_t part, const float* X, const uint8_t* q, const void* d, const void* mo, const float* b,
    float* y, int64_t K, int64_t N, int64_t g0, int64_t g1, bool small, const uint16_t* table) {
  constexpr int64_t TB = NIB ? 256 : 512;
  const auto convert = [&](const uint8_t* p, uint16_t* out) {
    if constexpr (NIB) nibbles_to_bf16(p, out, table);
    else codes_to_bf16(reinterpret_cast<const int8_t*>(p), out, small, table);
  };
  const int64_t KB = K / QBLOCK, NT = N / 16;
  TileConfig cfg{};
  cfg.palette = 1;
  for (int t = 0; t < 7; ++t) {
    cfg.rows[t] = (t == 3 || t == 4) ? 16 : M;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t codes[2][PAIR][16 * 32];
  alignas(64) float sums[PAIR][MAX_ROWS * 16];
  alignas(64) float acc[PAIR][M][16];
  const int64_t stride = K * 2;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t t0 = g * PAIR, tiles = std::min(PAIR, NT - t0);
    const uint8_t* qg = q + t0 * KB * TB;
    std::memset(acc, 0, sizeof(acc));
    for (int j = 0; j < PAIR; ++j) convert(qg + std::min<int64_t>(j, tiles - 1) * TB, codes[0][j]);
    for (int64_t kb = 0; kb < KB; ++kb) {
      const int cur = kb & 1;
      const uint16_t* xa = xs + kb * QBLOCK;
      _tile_loadd(0, xa, stride);
      _tile_loadd(1, xa + part, stride);
      _tile_loadd(2, xa + 2 * part, stride);
      _tile_loadd(3, codes[cur][0], 64);
      _tile_loadd(4, codes[cur][1], 64);
      if (kb + 1 < KB) {
        const uint8_t* next = qg + (kb + 1) * tiles * TB;
        for (int j = 0; j < PAIR; ++j) convert(next + std::min<int64_t>(j, tiles - 1) * TB, codes[cur ^ 1][j]);
        _mm_prefetch(reinterpret_cast<const char*>(next + 8 * TB), _MM_HINT_T0);
      }
      _tile_zero(5);
      _tile_zero(6);
      _tile_dpbf16ps(5, 0, 3);
      _tile_dpbf16ps(6, 0, 4);
      _tile_dpbf16ps(5, 1, 3);
      _tile_dpbf16ps(6, 1, 4);
      _tile_dpbf16ps(5, 2, 3);
      _tile_dpbf16ps(6, 2, 4);
      _tile_stored(5, sums[0], 64);
      _tile_stored(6, sums[1], 64);
      for (int j = 0; j < tiles; ++j) {
        const int64_t s = ((t0 + j) * KB + kb) * 16;
        const __m512 dv = scales<NIB>(d, s), mv = scales<NIB>(mo, s);
        const float* S = sums[j];
        for (int r = 0; r < M; ++r) {
          const __m512 v = _mm512_fmadd_ps(dv, _mm512_load_ps(S + r * 16), _mm512_load_ps(acc[j][r]));
          _mm512_store_ps(acc[j][r], _mm512_fmadd_ps(mv, _mm512_set1_ps(X[r * KB + kb]), v));
        }
      }
    }
    for (int j = 0; j < tiles; ++j)
      for (int r = 0; r < M; ++r) {
        __m512 v = _mm512_load_ps(acc[j][r]);
        if (b) v = _mm512_add_ps(v, _mm512_loadu_ps(b + (t0 + j) * 16));
        _mm512_storeu_ps(y + r * N + (t0 + j) * 16, v);
      }
  }
  _tile_release();
}

using Kernel = void (*)(const uint16_t*, int64_t, const float*, const uint8_t*, const void*, const void*, const float*,
                        float*, int64_t, int64_t, int64_t, int64_t, bool, const uint16_t*);
#define ACC_TABLE(B)                                                                                          \
  {acc_rows<1, B>,  acc_rows<2, B>,  acc_rows<3, B>,  acc_rows<4, B>,  acc_rows<5, B>,  acc_rows<6, B>,             \
   acc_rows<7, B>,  acc_rows<8, B>,  acc_rows<9, B>,  acc_rows<10, B>, acc_rows<11, B>, acc_rows<12, B>,            \
   acc_rows<13, B>, acc_rows<14, B>, acc_rows<15, B>, acc_rows<16, B>}
const Kernel KERNELS[2][MAX_ROWS] = {ACC_TABLE(false), ACC_TABLE(true)};

at::Tensor acc_proto(const at::Tensor& x, const at::Tensor& q, const at::Tensor& d, const at::Tensor& m,
                     const std::optional<at::Tensor>& b, int64_t small) {
  TORCH_CHECK(amx_ready_p());
  const bool nib = q.scalar_type() == at::kByte;
  const int64_t N = d.size(0) * 16, K = d.size(1) * QBLOCK;
  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
  out_shape.back() = N;
  const at::Tensor xc = x.reshape({-1, K}).contiguous();
  const int64_t M = xc.size(0);
  at::Tensor y = at::empty({M, N}, xc.options());
  if (M == 0) return y.view(out_shape);
  const at::Tensor bc = b.has_value() ? b->contiguous() : at::Tensor();
  const int64_t KB = K / QBLOCK;
  at::Tensor scratch = at::empty({3 * M * K / 2 + M * KB}, xc.options());
  uint16_t* xs = reinterpret_cast<uint16_t*>(scratch.data_ptr<float>());
  float* X = scratch.data_ptr<float>() + 3 * M * K / 2;
  split(xc.data_ptr<float>(), xs, X, M, K);
  alignas(64) uint16_t table[32];
  for (int i = 0; i < 32; ++i) {
    const float f = static_cast<float>(i);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    table[i] = static_cast<uint16_t>(u >> 16);
  }
  const uint8_t* qp = static_cast<const uint8_t*>(q.data_ptr());
  const void *dp = d.data_ptr(), *mp = m.data_ptr();
  const float* bp = b.has_value() ? bc.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const int64_t groups = (N / 16 + PAIR - 1) / PAIR;
  at::parallel_for(0, groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t r = 0; r < M; r += MAX_ROWS) {
      const int64_t rows = std::min<int64_t>(MAX_ROWS, M - r);
      KERNELS[nib][rows - 1](xs + r * K, M * K, X + r * KB, qp, dp, mp, bp, yp + r * N, K, N, g0, g1, small != 0, table);
    }
  });
  return y.view(out_shape);
}
#endif
}  // namespace

TORCH_LIBRARY(specdec_proto, m) { m.def("acc(Tensor x, Tensor q, Tensor d, Tensor m, Tensor? b=None, int small=0) -> Tensor"); }
TORCH_LIBRARY_IMPL(specdec_proto, CPU, m) { m.impl("acc", &acc_proto); }
