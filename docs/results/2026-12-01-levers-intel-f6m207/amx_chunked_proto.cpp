// specdec::skinny_linear_amx(x, q, d, m, b, small): y = x @ w^T (+ b) for a weight stored as exact block codes
// (w = d * q + m per block of QBLOCK inputs, as skinny_q.cpp), with the products on AMX's bfloat16 tile unit.
//
// Why: on a CPU with AMX (Intel Xeon of family 6 model 207, docs/results/2026-12-01-amx-intel-f6m207) the AVX-512
// kernels' cost grows with the rows of a tree (all 211 SmolLM2 linears: 12.5 ms for one row, 38 ms for 16), because
// each weight vector is multiplied into every row by FMA. The tile unit multiplies a 16 x 32 block of inputs into
// 32 x 16 weights in one instruction: per SmolLM2 shape, warm, 16 rows cost it 2.2-3.3x one row against the AVX-512
// coded kernel's 3.7-6.2x (one row about even, the Q8_0 vocabulary projection's 1.3x slower).
//
// Exactness. A float32 input is the exact sum of three bfloat16 parts, x = h + m + l (its 24 significant bits in
// three bytes; exact for |x| >= 2^-103: below it a part can be a bfloat16 denormal, which the tile unit reads as
// zero, an error below 2^-126 per product). A non-finite input gives NaN outputs (inf - inf in the split). A code
// q has at most 8 significant bits, so it is a bfloat16 and every product h * q, m * q, l * q is exact in float32. Per row, per block b of 32 inputs and 16 outputs n:
//   S[n, b] = (S_h + S_m) + S_l, each the tile unit's float32 sum of one part's 32 exact products in the block,
//   X[b]    = the block's inputs summed in one fixed order (two 16-lane halves added, then the lanes),
//   y[n]   += d[n, b] * S[n, b] (one fma), then += m[n, b] * X[b] (one fma), blocks in order; then the bias.
// This is the GGUF block's own dot product (llama.cpp's form, sum(q x) d + m sum(x)), computed in float32 on the
// weight's exact value d * q + m; the float32 weight a loader keeps is that value rounded (within half an ulp), so
// the output differs from x @ w by float32 rounding only, as every GEMM's grouping does. Nothing is quantized.
//
// Contract (row invariance): the tile unit computes each row of a product from that row alone, and every step above
// is per row, so a row's output is bitwise the same whatever rows are beside it and however many (1 to any number:
// rows are taken 16 at a time). It is NOT bitwise skinny_linear's or skinny_linear_q's output: a linear runs on one
// kernel for every row count (specdec.backends.skinny_choice chooses per linear, once).
//
// Layout (specdec.backends.skinny_amx.amx_layout): q [N / 16 / PAIR groups][K / 32 blocks][PAIR tiles][16 k-pairs]
// [16 n][2] int8 (the tile unit's pair-interleaved form, so a tile of weights is 512 consecutive codes); d and m
// [N / 16][K / 32][16] float32. ``small`` (1): every code in 0..31 (Q4_1, Q5_1), converted by one table lookup
// (the caller's promise, which amx_layout keeps: the lookup reads a code's low 5 bits only). The 4-bit form (q uint8,
// d and m float16: GGUF's Q4_1 as stored, 0.625 bytes a weight against 1.25): a tile's 512 codes in 256 bytes, its
// 16-bit word i holding codes i, 128 + i, 256 + i and 384 + i of the tile's order in its four nibbles, lowest first,
// each converted by the same lookup; d and m are the float16 values the file holds (float32 after an exact widening),
// so its outputs are bitwise the byte form's on the same codes. A change of a layout bumps its name in
// specdec.backends.skinny_amx (LAYOUTS; a package's name carries it: its constants are in that layout).
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
#include <torch/library.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#if (defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11)
#define SPECDEC_AMX 1  // the compiler knows the tile instructions
#else
#define SPECDEC_AMX 0
#endif

namespace {

constexpr int64_t QBLOCK = 32;  // inputs per scale and offset: one tile row of bfloat16
constexpr int64_t PAIR = 2;     // output tiles (16 outputs each) per pass: two independent tile chains
constexpr int MAX_ROWS = 16;    // input rows per pass: a tile's rows

// Whether this CPU has the tile unit for bfloat16 and Linux lets this process use it (asked once).
bool amx_ready_p() {
#if SPECDEC_AMX
  static const bool ready = [] {
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const bool tile = (d >> 24) & 1, bf16 = (d >> 22) & 1, avx512bf16 = __builtin_cpu_supports("avx512bf16");
    constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return tile && bf16 && avx512bf16 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
  }();
  return ready;
#else
  return false;
#endif
}

#if SPECDEC_AMX
struct TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// x [M, K] -> its three bfloat16 parts xs [3][M][K] (h, m, l; x = h + m + l exactly) and block sums X [M][K / 32].
__attribute__((target("avx512f,avx512bw"))) void split(const float* x, uint16_t* xs, float* X, int64_t M, int64_t K) {
  const int64_t MK = M * K;
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t i = 0; i < MK; i += 16) {  // K is a multiple of 32
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512i h = _mm512_and_si512(_mm512_castps_si512(v), top);  // the top 8 significant bits
    const __m512 r = _mm512_sub_ps(v, _mm512_castsi512_ps(h));        // exact: the other 16
    const __m512i m = _mm512_and_si512(_mm512_castps_si512(r), top);
    const __m512i l = _mm512_castps_si512(_mm512_sub_ps(r, _mm512_castsi512_ps(m)));  // exact: at most 8 bits
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xs + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xs + MK + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(m, 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xs + 2 * MK + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(l, 16)));
  }
  for (int64_t j = 0; j < MK / QBLOCK; ++j)
    X[j] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(x + j * QBLOCK), _mm512_loadu_ps(x + j * QBLOCK + 16)));
}

// One tile of codes (512 int8, 16 k-pairs x 16 outputs x 2) -> bfloat16 (exact: a code has at most 8 bits).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void codes_to_bf16(const int8_t* p, uint16_t* out, bool small,
                                                                         const uint16_t* table) {
  if (small) {  // codes 0..31: one lookup in the table of their bfloat16 bits
    const __m512i lut = _mm512_loadu_si512(table);
    for (int r = 0; r < 16; ++r) {
      const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + r * 32)));
      _mm512_store_si512(out + r * 32, _mm512_permutexvar_epi16(c, lut));
    }
    return;
  }
  for (int r = 0; r < 16; ++r) {
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * 32))));
    const __m512 hi =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * 32 + 16))));
    _mm512_store_si512(out + r * 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
}

// One tile of 4-bit codes (256 bytes, the layout above) -> bfloat16: each nibble by one lookup in the table of 0..15.
__attribute__((target("avx512f,avx512bw"))) void nibbles_to_bf16(const uint8_t* p, uint16_t* out, const uint16_t* table) {
  const __m512i lut = _mm512_loadu_si512(table), low = _mm512_set1_epi16(0x0F);
  for (int r = 0; r < 4; ++r) {  // 32 words a pass: codes 32r.. of each quarter of the tile
    const __m512i w = _mm512_loadu_si512(p + r * 64);
    _mm512_store_si512(out + r * 32, _mm512_permutexvar_epi16(_mm512_and_si512(w, low), lut));
    _mm512_store_si512(out + 128 + r * 32, _mm512_permutexvar_epi16(_mm512_and_si512(_mm512_srli_epi16(w, 4), low), lut));
    _mm512_store_si512(out + 256 + r * 32, _mm512_permutexvar_epi16(_mm512_and_si512(_mm512_srli_epi16(w, 8), low), lut));
    _mm512_store_si512(out + 384 + r * 32, _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 12), lut));
  }
}

// A tile-block's 16 scales or offsets as float32: loaded, or widened from float16 (exact) in the 4-bit form.
template <bool NIB>
__attribute__((target("avx512f"))) __m512 scales(const void* p, int64_t s) {
  if constexpr (NIB) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + s)));
  return _mm512_loadu_ps(static_cast<const float*>(p) + s);
}


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
