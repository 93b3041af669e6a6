// The few-row attention's vector code, written once for any vector width: included by skinny_attention.cpp inside
// one namespace per instruction set, after that namespace defines W (floats per vector), RB (query vectors per value
// pass), `vec` and the operations below (vload, vstore, vset, vzero, vfma, vfnma, vadd, vsub, vmul, vmax, vfloor,
// vpow2i, vkeep_seen, vfirst, vhmax, vsum). Every order of a sum is fixed here (the contract in
// skinny_attention.cpp); only W and the tree of vsum differ between instruction sets.

// exp(x) for x <= 0 (a score minus its row's maximum), Cephes' polynomial: ~2 ulp; below -87.3 it returns ~1e-38
// rather than 0 (a term that small changes no float32 sum that holds the maximum's 1).
inline vec exp_nonpositive(vec x) {
  x = vmax(x, vset(-87.3365478515625f));
  const vec fx = vfloor(vfma(x, vset(1.44269504088896341f), vset(0.5f)));
  x = vfnma(fx, vset(0.693359375f), x);
  x = vfnma(fx, vset(-2.12194440e-4f), x);
  vec y = vset(1.9875691500e-4f);
  y = vfma(y, x, vset(1.3981999507e-3f));
  y = vfma(y, x, vset(8.3334519073e-3f));
  y = vfma(y, x, vset(4.1665795894e-2f));
  y = vfma(y, x, vset(1.6666665459e-1f));
  y = vfma(y, x, vset(5.0000001201e-1f));
  y = vfma(y, vmul(x, x), vadd(x, vset(1.0f)));
  return vmul(y, vpow2i(fx));
}

// acc[r][c] = sum_n p[r][n] v[keys[n]][c] over the item's keys in order, for R query vectors (rows of p, stride
// ps) and NB vectors of c: R * NB accumulators, each one chain over n. p is exactly 0 where a row does not see a key,
// and adding an exact 0 changes no sum: a row's outputs are those of its seen keys alone.
template <int R, int NB>
void weigh(const float* v, int64_t vs_s, const int64_t* keys, int64_t n_keys, const float* p, int64_t ps,
           const float* inv, float* out, int64_t os) {
  vec acc[R][NB];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) acc[r][b] = vzero();
  for (int64_t n = 0; n < n_keys; ++n) {
    const float* vp = v + keys[n] * vs_s;
    if (n + AHEAD < n_keys)  // a value row AHEAD keys on, from memory meanwhile (the lines this pass reads)
      for (int64_t c = 0; c < NB * W; c += 64 / sizeof(float))
        _mm_prefetch(reinterpret_cast<const char*>(v + keys[n + AHEAD] * vs_s + c), _MM_HINT_T0);
    vec vv[NB];
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) vv[b] = vload(vp + b * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const vec pr = vset(p[r * ps + n]);
#pragma GCC unroll 16
      for (int b = 0; b < NB; ++b) acc[r][b] = vfma(pr, vv[b], acc[r][b]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) vstore(out + r * os + b * W, vmul(acc[r][b], vset(inv[r])));
}

using Weigh = void (*)(const float*, int64_t, const int64_t*, int64_t, const float*, int64_t, const float*, float*,
                       int64_t);
template <int R>
constexpr std::array<Weigh, 4> weighs() {
  return {weigh<R, 1>, weigh<R, 2>, weigh<R, 3>, weigh<R, 4>};
}
template <int... Rs>
constexpr std::array<std::array<Weigh, 4>, sizeof...(Rs)> weigh_table(std::integer_sequence<int, Rs...>) {
  return {weighs<Rs + 1>()...};
}
// WEIGH[r - 1][nb - 1]: r query vectors (up to RB) by nb vectors of c (up to 4)
const auto WEIGH = weigh_table(std::make_integer_sequence<int, RB>{});

// The horizontal sum of one vector by vsum's tree (lane 0 of vsum over copies of it).
inline float hsum(vec l) {
  vec ls[W];
  for (int i = 0; i < W; ++i) ls[i] = l;
  alignas(64) float lanes[W];
  vstore(lanes, vsum(ls));
  return lanes[0];
}

// The sum of a row's weights p over the keys it sees, in the order of a dense list of them: lane i adds the seen keys
// whose rank is i mod W, then one fixed tree. The row sees keys [0, lead) and then those listed in rest.
float seen_sum(const float* p, int64_t lead, const int64_t* rest, int64_t n_rest) {
  vec l = vzero();
  const int64_t full = lead / W * W;
  for (int64_t n = 0; n < full; n += W) l = vadd(l, vload(p + n));
  alignas(64) float group[W];  // the seen keys past the full groups, ranked on from `full`, W at a time
  int o = 0;
  for (int64_t i = full - lead; i < n_rest; ++i) {  // i < 0: keys full..lead-1 of the leading run
    group[o++] = i < 0 ? p[lead + i] : p[rest[i]];
    if (o == W) l = vadd(l, vload(group)), o = 0;
  }
  if (o) {
    std::fill(group + o, group + W, 0.0f);
    l = vadd(l, vload(group));
  }
  return hsum(l);
}

// One item (Item): scores of W keys at a time (each key's lanes one chain over c, then vsum's tree), p = exp(score -
// max) where seen and exactly 0 elsewhere, inv = 1 / the seen keys' sum of p, then sum p v (weigh).
void attend(const Item& it, float scale, const Shapes& s, const float* zeros, float* scores, float* inv) {
  const int64_t D = s.D, G = s.G, R = it.rows * G, padded = (it.n_keys + W - 1) / W * W;
  for (int64_t n0 = 0; n0 < it.n_keys; n0 += W) {
    const float* kp[W];
    for (int i = 0; i < W; ++i) kp[i] = n0 + i < it.n_keys ? it.k + it.keys[n0 + i] * s.ks_s : zeros;
    for (int64_t i = n0 + W; i < std::min<int64_t>(n0 + 2 * W, it.n_keys); ++i)  // the next W keys, meanwhile
      for (int64_t c = 0; c < D; c += 64 / sizeof(float))
        _mm_prefetch(reinterpret_cast<const char*>(it.k + it.keys[i] * s.ks_s + c), _MM_HINT_T0);
    for (int64_t r = 0; r < R; ++r) {  // query vector r: row r / G, head r % G
      const float* qr = it.q + (r / G) * s.qs_t + (r % G) * s.qs_h;
      vec lanes[W];
#pragma GCC unroll 16
      for (int i = 0; i < W; ++i) lanes[i] = vzero();
      for (int64_t c = 0; c < D; c += W) {
        const vec qv = vload(qr + c);
#pragma GCC unroll 16
        for (int i = 0; i < W; ++i) lanes[i] = vfma(qv, vload(kp[i] + c), lanes[i]);
      }
      const vec add = vload(it.add + (r / G) * it.as + n0);
      vstore(scores + r * padded + n0, vfma(vsum(lanes), vset(scale), add));
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    float* sc = scores + r * padded;
    vec mv = vset(-INFINITY);
    for (int64_t n0 = 0; n0 < padded; n0 += W) mv = vmax(mv, vload(sc + n0));
    const float mx = vhmax(mv);
    if (mx == -INFINITY) {  // the row sees no key: zeros
      std::fill(sc, sc + padded, 0.0f);
      inv[r] = 0.0f;
      continue;
    }
    const vec m = vset(mx);
    for (int64_t n0 = 0; n0 < padded; n0 += W) {
      const vec x = vload(sc + n0);
      vstore(sc + n0, vkeep_seen(exp_nonpositive(vsub(x, m)), x));
    }
    const int64_t t = r / G;
    inv[r] = 1.0f / seen_sum(sc, it.lead[t], it.rest[t].data(), static_cast<int64_t>(it.rest[t].size()));
  }
  for (int64_t r0 = 0; r0 < R; r0 += RB)  // up to RB query vectors x 4 vectors of c share each value load
    for (int64_t c0 = 0; c0 < D; c0 += 4 * W) {
      const int64_t rb = std::min<int64_t>(RB, R - r0), nb = std::min<int64_t>(4, (D - c0) / W);
      alignas(64) float out_block[RB * 4 * W];
      WEIGH[rb - 1][nb - 1](it.v + c0, s.vs_s, it.keys, it.n_keys, scores + r0 * padded, padded, inv + r0,
                            out_block, 4 * W);
      for (int64_t i = 0; i < rb; ++i) {  // query vector r0 + i: row (r0 + i) / G, head (r0 + i) % G
        float* o = it.out + ((r0 + i) / G) * it.os + ((r0 + i) % G) * D + c0;
        std::copy(out_block + i * 4 * W, out_block + i * 4 * W + nb * W, o);
      }
    }
}
