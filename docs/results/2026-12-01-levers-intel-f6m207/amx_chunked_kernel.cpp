// The prototype's own code (amx_chunked.py prepends specdec/backends/skinny_amx.cpp as of e5e506d up to its
// amx_rows, whose helpers it uses: TileConfig, split, codes_to_bf16, nibbles_to_bf16, scales, QBLOCK, PAIR, MAX_ROWS).
// x rows [0, M) -> parts in chunks: xs [nc][3][cmax][K] (zero-padded rows), block sums X [M][K/32].
__attribute__((target("avx512f,avx512bw"))) void split_chunks(const float* x, uint16_t* xs, float* X, int64_t M,
                                                               int64_t K, int64_t nc, int64_t cmax) {
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  std::memset(xs, 0, sizeof(uint16_t) * nc * 3 * cmax * K);
  const int64_t base = M / nc, extra = M % nc;
  int64_t row = 0;
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t rows = base + (c < extra);
    for (int64_t r = 0; r < rows; ++r, ++row) {
      uint16_t* h = xs + ((c * 3 + 0) * cmax + r) * K;
      uint16_t* mm = xs + ((c * 3 + 1) * cmax + r) * K;
      uint16_t* l = xs + ((c * 3 + 2) * cmax + r) * K;
      for (int64_t i = 0; i < K; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + row * K + i);
        const __m512i hv = _mm512_and_si512(_mm512_castps_si512(v), top);
        const __m512 rv = _mm512_sub_ps(v, _mm512_castsi512_ps(hv));
        const __m512i mv = _mm512_and_si512(_mm512_castps_si512(rv), top);
        const __m512i lv = _mm512_castps_si512(_mm512_sub_ps(rv, _mm512_castsi512_ps(mv)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(hv, 16)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(mm + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(mv, 16)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(l + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(lv, 16)));
      }
    }
  }
  for (int64_t j = 0; j < M * K / QBLOCK; ++j)
    X[j] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(x + j * QBLOCK), _mm512_loadu_ps(x + j * QBLOCK + 16)));
}

// One unit's sums (rows of chunk c, block kb) into the rows' accumulators, in the order of the contract.
template <int M, bool NIB, int CMAX, int BASE, int EXTRA>
__attribute__((target("avx512f"))) inline void epilogue(const float (*sums)[CMAX * 3 * 16], float (*acc)[M][16],
                                                         const float* X, const void* d, const void* mo, int64_t t0,
                                                         int64_t tiles, int64_t KB, int64_t kb, int64_t c) {
  const int64_t r0 = c * BASE + std::min<int64_t>(c, EXTRA), rows = BASE + (c < EXTRA);
  for (int j = 0; j < tiles; ++j) {
    const int64_t s = ((t0 + j) * KB + kb) * 16;
    const __m512 dv = scales<NIB>(d, s), mv = scales<NIB>(mo, s);
    const float* S = sums[j];
    for (int64_t r = 0; r < rows; ++r) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(S + r * 16), _mm512_load_ps(S + (CMAX + r) * 16)),
                                       _mm512_load_ps(S + (2 * CMAX + r) * 16));
      const __m512 v = _mm512_fmadd_ps(dv, sum, _mm512_load_ps(acc[j][r0 + r]));
      _mm512_store_ps(acc[j][r0 + r], _mm512_fmadd_ps(mv, _mm512_set1_ps(X[(r0 + r) * KB + kb]), v));
    }
  }
}

int64_t MODE = 0;
template <int M, bool NIB>
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16"))) void amx_pipe(
    const uint16_t* xs, const float* X, const uint8_t* q, const void* d, const void* mo, const float* b,
    float* y, int64_t K, int64_t N, int64_t g0, int64_t g1, bool small, const uint16_t* table) {
  constexpr int64_t TB = NIB ? 256 : 512;
  constexpr int NC = (M + 4) / 5, CMAX = (M + NC - 1) / NC, BASE = M / NC, EXTRA = M % NC, TR = 3 * CMAX;
  const auto convert = [&](const uint8_t* p, uint16_t* out) {
    if constexpr (NIB) nibbles_to_bf16(p, out, table);
    else codes_to_bf16(reinterpret_cast<const int8_t*>(p), out, small, table);
  };
  const int64_t KB = K / QBLOCK, NT = N / 16;
  TileConfig cfg{};
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = (t == 1 || t == 2) ? 16 : TR;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  constexpr int LA = 3;
  alignas(64) uint16_t codes[8][PAIR][16 * 32];
  alignas(64) float sums[2][PAIR][TR * 16];
  alignas(64) float acc[PAIR][M][16];
  const int64_t stride = K * 2, cstride = 3 * CMAX * K;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t t0 = g * PAIR, tiles = std::min(PAIR, NT - t0);
    const uint8_t* qg = q + t0 * KB * TB;
    std::memset(acc, 0, sizeof(acc));
    for (int64_t a = 0; a < std::min<int64_t>(LA, KB); ++a)
      for (int j = 0; j < PAIR; ++j) convert(qg + a * tiles * TB + std::min<int64_t>(j, tiles - 1) * TB, codes[a % (LA + 1)][j]);
    int64_t pkb = -1, pc = 0;  // the unit whose sums are in flight
    int par = 0;
    for (int64_t kb = 0; kb < KB; ++kb) {
      const int cur = kb % (LA + 1);
      _tile_loadd(1, codes[cur][0], 64);
      _tile_loadd(2, codes[cur][1], 64);
      for (int64_t c = 0; c < NC; ++c) {
        const uint16_t* xa = xs + c * cstride + kb * QBLOCK;
        if (par == 0) {
          _tile_loadd(0, xa, stride);
          _tile_zero(3);
          _tile_zero(4);
          _tile_dpbf16ps(3, 0, 1);
          _tile_dpbf16ps(4, 0, 2);
          if (pkb >= 0) {
            _tile_stored(6, sums[1][0], 64);
            _tile_stored(7, sums[1][1], 64);
            if (!(MODE & 2)) epilogue<M, NIB, CMAX, BASE, EXTRA>(sums[1], acc, X, d, mo, t0, tiles, KB, pkb, pc);
          }
        } else {
          _tile_loadd(5, xa, stride);
          _tile_zero(6);
          _tile_zero(7);
          _tile_dpbf16ps(6, 5, 1);
          _tile_dpbf16ps(7, 5, 2);
          _tile_stored(3, sums[0][0], 64);
          _tile_stored(4, sums[0][1], 64);
          if (!(MODE & 2)) epilogue<M, NIB, CMAX, BASE, EXTRA>(sums[0], acc, X, d, mo, t0, tiles, KB, pkb, pc);
        }
        pkb = kb;
        pc = c;
        par ^= 1;
      }
      if (kb + LA < KB) {
        const uint8_t* next = qg + (kb + LA) * tiles * TB;
        if (!(MODE & 1)) for (int j = 0; j < PAIR; ++j) convert(next + std::min<int64_t>(j, tiles - 1) * TB, codes[(kb + LA) % (LA + 1)][j]);
        _mm_prefetch(reinterpret_cast<const char*>(next + 8 * TB), _MM_HINT_T0);
      }
    }
    if (par == 1) {  // the last unit ran on set 0
      _tile_stored(3, sums[0][0], 64);
      _tile_stored(4, sums[0][1], 64);
      if (!(MODE & 2)) epilogue<M, NIB, CMAX, BASE, EXTRA>(sums[0], acc, X, d, mo, t0, tiles, KB, pkb, pc);
    } else {
      _tile_stored(6, sums[1][0], 64);
      _tile_stored(7, sums[1][1], 64);
      if (!(MODE & 2)) epilogue<M, NIB, CMAX, BASE, EXTRA>(sums[1], acc, X, d, mo, t0, tiles, KB, pkb, pc);
    }
    par = 0;
    for (int j = 0; j < tiles; ++j)
      for (int r = 0; r < M; ++r) {
        __m512 v = _mm512_load_ps(acc[j][r]);
        if (b) v = _mm512_add_ps(v, _mm512_loadu_ps(b + (t0 + j) * 16));
        _mm512_storeu_ps(y + r * N + (t0 + j) * 16, v);
      }
  }
  _tile_release();
}

using PKernel = void (*)(const uint16_t*, const float*, const uint8_t*, const void*, const void*, const float*,
                        float*, int64_t, int64_t, int64_t, int64_t, bool, const uint16_t*);
#define PTABLE(B)                                                                                          \
  {amx_pipe<1, B>,  amx_pipe<2, B>,  amx_pipe<3, B>,  amx_pipe<4, B>,  amx_pipe<5, B>,  amx_pipe<6, B>,             \
   amx_pipe<7, B>,  amx_pipe<8, B>,  amx_pipe<9, B>,  amx_pipe<10, B>, amx_pipe<11, B>, amx_pipe<12, B>,            \
   amx_pipe<13, B>, amx_pipe<14, B>, amx_pipe<15, B>, amx_pipe<16, B>}
const PKernel PKERNELS[2][MAX_ROWS] = {PTABLE(false), PTABLE(true)};
#endif

at::Tensor amx_proto(const at::Tensor& x, const at::Tensor& q, const at::Tensor& d, const at::Tensor& m,
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
  const int64_t KB = K / QBLOCK, passes = (M + MAX_ROWS - 1) / MAX_ROWS, per_pass = 3 * 20 * K;
  at::Tensor scratch = at::empty({passes * per_pass / 2 + M * KB}, xc.options());
  uint16_t* xs = reinterpret_cast<uint16_t*>(scratch.data_ptr<float>());
  float* X = scratch.data_ptr<float>() + passes * per_pass / 2;
  for (int64_t p = 0; p < passes; ++p) {
    const int64_t rows = std::min<int64_t>(MAX_ROWS, M - p * MAX_ROWS), nc = (rows + 4) / 5, cmax = (rows + nc - 1) / nc;
    split_chunks(xc.data_ptr<float>() + p * MAX_ROWS * K, xs + p * per_pass, X + p * MAX_ROWS * KB, rows, K, nc, cmax);
  }
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
    for (int64_t p = 0; p < passes; ++p) {
      const int64_t rows = std::min<int64_t>(MAX_ROWS, M - p * MAX_ROWS);
      PKERNELS[nib][rows - 1](xs + p * per_pass, X + p * MAX_ROWS * KB, qp, dp, mp, bp, yp + p * MAX_ROWS * N, K, N, g0, g1,
                              small != 0, table);
    }
  });
  return y.view(out_shape);
}
}  // namespace

TORCH_LIBRARY(specdec_proto, m) { m.def("amx(Tensor x, Tensor q, Tensor d, Tensor m, Tensor? b=None, int small=0) -> Tensor"); m.def("mode(int m) -> int", [](int64_t v) { MODE = v; return v; }); }
TORCH_LIBRARY_IMPL(specdec_proto, CPU, m) { m.impl("amx", &amx_proto); }
