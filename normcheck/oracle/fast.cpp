// normcheck's oracle, tiers 1 and 2, compiled: the float64 evaluation of LayerNorm / RMSNorm rows
// with a rigorous error bound per element, the double-double redo of the elements it cannot
// settle, and the decision "this interval rounds to one value of the output format".  Built by
// normcheck.oracle.fast with the cpu backend's compiler and cache; called through ctypes with the
// GIL released, rows split over threads.  Tier 3 (exact) stays in Python (normcheck.oracle).
//
// Strict IEEE binary64: built with -ffp-contract=off and without -ffast-math, so every operation
// below rounds once, as the error analysis assumes.  Sums are *blocked*: each block of up to 256
// terms is summed in 16 independent lanes (vectorised, no reassociation), the lanes as a balanced
// tree, the block sums as a balanced tree; every term passes through at most L = depth(D)
// roundings, so a sum of n terms is within γ_L·Σ|terms| (γ_n = n·u/(1-n·u), u = 2^-53).
//
// The analysis (row values z_j = hi_j + lo_j exactly, lo optional; μ = Σz/D):
//  * pivot m0 = fl(Σhi)/D (any value: its error is corrected);
//  * centred rows, a_j ≈ z_j - m0 and its sum c ≈ Σ(z - m0) with bound E_c, three ways:
//      dd   (fp32 outputs): a_hi + a_err = hi - m0 exactly (TwoSum), a_lo = fl(a_err + lo), c in
//           double-double: E_c = γ_{2L+1}·((L+1)·u·Σ|a_hi| + Σ|a_lo|) + u·Σ|a_lo|;
//      grid (fp16 rows): m0 on the 2^-24 grid, a and every partial sum exact while Σ|a| < 2^29;
//      tree (fp16/bf16 outputs): a = fl(fl(hi - m0) + lo),
//           E_c = (u_a + γ_L)(1+γ_L)Σ|a| + u·Σ|lo|;
//    cD = fl(c/D), |cD - (μ - m0)| <= e_cD = E_c/D + 2u|cD|; deviations d_j with
//    |d_j - (z_j - μ)| <= k·|d_j| + e_row (k and e_row per mode, below);
//  * S = Σfl(d²) blocked: |S - Σ(z-μ)²| <= e_S
//        = (γ_L+u)·ssq + k(2+k)·ssq + e_row(2+2k)Σ|d| + D·e_row²;
//  * v = S/D, w = v + ε, r = 1/√w: relative error ρ_r = (ρ + 2.01u)(1+ρ), ρ = e_w/(w - e_w);
//  * y_j = fl(fl(g_j·fl(d_j·r)) + b_j) with |y_j - t_j| <= A'|p_j| + B'|g_j| + u|b_j|,
//    A = (k(1+ρ_r) + ρ_r + u)(1+2u), B = e_row·r(1+ρ_r) (Gemma's 1+γ adds a rounding).
// Every bound is multiplied by SAFETY = 1 + 2^-20 for the roundings of the bound itself.  An
// element is settled when [y-e, y+e] rounds to one value of the output format, stays in one
// binade (so ulp(t) is known) and e <= resolution·quantum.
//
// fp32 outputs skip tier 1's statistics: the row goes straight to tier 2's (below), and every
// element is evaluated in float64 from them, which leaves far fewer unsettled.
// Tier 2 (rows with unsettled elements): deviations d = d_hi + d_lo in double-double, squares by
// Dekker's product, S in double-double, r = 1/√w in double-double by one Newton step from the
// float64 value (relative error <= 1.5δ² + 0.5|δ|³ + rounding, δ <= 2.01u: charged 64u²), and
// y = γ·d·r + β in double-double, each operation charged 16u² of its magnitude.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "../fp_bits.h"

#define NC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr double U = 0x1p-53;
constexpr double SAFETY = 1.0 + 0x1p-20;
constexpr int LANES = 16;
constexpr int BLOCK = 256;

inline double gam(double n) { return n * U / (1 - n * U); }

int ceil_log2(long n) {
  int d = 0;
  while ((1L << d) < n) ++d;
  return d;
}

// The layout of a blocked sum over D terms: block size, padded length, depth.
struct Layout {
  int D, blk, npad, nblocks, depth;
  explicit Layout(int d) : D(d) {
    blk = D >= BLOCK ? BLOCK : ((D + LANES - 1) / LANES) * LANES;
    npad = ((D + blk - 1) / blk) * blk;
    nblocks = npad / blk;
    depth = blk / LANES + ceil_log2(LANES) + ceil_log2(nblocks);
  }
};

// Σ a[0..npad) (zeros past D), blocked; tmp holds >= 2·nblocks doubles.
inline double bsum(const double* a, const Layout& L, double* tmp) {
  for (int b = 0; b < L.nblocks; ++b) {
    double acc[LANES] = {0};
    const double* p = a + (long)b * L.blk;
    for (int i = 0; i < L.blk; i += LANES)
      for (int l = 0; l < LANES; ++l) acc[l] += p[i + l];
    for (int w = LANES / 2; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
    tmp[b] = acc[0];
  }
  int w = 1;
  while (w < L.nblocks) w *= 2;
  for (int b = L.nblocks; b < w; ++b) tmp[b] = 0;
  while (w > 1) {
    w /= 2;
    for (int b = 0; b < w; ++b) tmp[b] += tmp[b + w];
  }
  return tmp[0];
}

// Upper-bound helpers for the analysis: Σ|a| and max|a| over a padded row, in 16 lanes (any order
// will do: the callers multiply Σ|a| by 1 + γ_D).
inline double abs_sum(const double* a, int npad) {
  double acc[LANES] = {0};
  for (int i = 0; i < npad; i += LANES)
    for (int l = 0; l < LANES; ++l) acc[l] += std::fabs(a[i + l]);
  double t = 0;
  for (int l = 0; l < LANES; ++l) t += acc[l];
  return t;
}

inline double abs_max(const double* a, int npad) {
  double acc[LANES] = {0};
  for (int i = 0; i < npad; i += LANES)
    for (int l = 0; l < LANES; ++l) {
      double v = std::fabs(a[i + l]);
      acc[l] = v > acc[l] ? v : acc[l];
    }
  double t = 0;
  for (int l = 0; l < LANES; ++l) t = acc[l] > t ? acc[l] : t;
  return t;
}

inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}

// a·b = p + e exactly (Veltkamp splitting; no FMA needed)
inline void two_prod(double a, double b, double& p, double& e) {
  p = a * b;
  double a1 = a * 134217729.0, b1 = b * 134217729.0;
  double ah = a1 - (a1 - a), al = a - ah;
  double bh = b1 - (b1 - b), bl = b - bh;
  e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
}

// (s, t) += (s2, t2): the float sums added by TwoSum, its error and the t parts into t.
inline void dd_combine(double& s, double& t, double s2, double t2) {
  double sm, e;
  two_sum(s, s2, sm, e);
  s = sm;
  t += t2;
  t += e;
}

// Σ (hi + lo) in double-double, blocked like bsum; the TwoSum errors and the lo parts accumulate
// in t.  tmp holds >= 4·nblocks doubles.
inline void ddsum(const double* hi, const double* lo, const Layout& L, double* tmp, double& sh,
                  double& sl) {
  double* bs = tmp;
  double* bt = tmp + 2 * L.nblocks;
  for (int b = 0; b < L.nblocks; ++b) {
    double s[LANES] = {0}, t[LANES] = {0};
    const double* p = hi + (long)b * L.blk;
    const double* q = lo + (long)b * L.blk;
    for (int i = 0; i < L.blk; i += LANES)
      for (int l = 0; l < LANES; ++l) {
        double a = s[l], x = p[i + l];
        double sm = a + x, bb = sm - a;
        double e = (a - (sm - bb)) + (x - bb);
        s[l] = sm;
        t[l] += e;
        t[l] += q[i + l];
      }
    for (int w = LANES / 2; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) dd_combine(s[l], t[l], s[l + w], t[l + w]);
    bs[b] = s[0];
    bt[b] = t[0];
  }
  int w = 1;
  while (w < L.nblocks) w *= 2;
  for (int b = L.nblocks; b < w; ++b) bs[b] = bt[b] = 0;
  while (w > 1) {
    w /= 2;
    for (int b = 0; b < w; ++b) dd_combine(bs[b], bt[b], bs[b + w], bt[b + w]);
  }
  sh = bs[0];
  sl = bt[0];
}

// The output format, as decide1 needs it.
struct Fmt {
  int p, lowest;      // significand bits; the float64 biased exponent of its smallest normal
  double top, low;    // 2^p, 2^(p-1)
  double maxf, res;   // its largest finite value; the resolution (fraction of an ulp)
  Fmt(int p_, int emin, double maxf_, double res_)
      : p(p_), lowest(emin + 1023), top(std::ldexp(1.0, p_)), low(std::ldexp(1.0, p_ - 1)),
        maxf(maxf_), res(res_) {}
};

// Round y to the format where [y-e, y+e] settles the rounded value and the binade and
// e <= res·quantum; returns whether it did, the rounded value in *r.  In units of the quantum of
// y's binade: z = y/quantum has its integer part in [2^(p-1), 2^p) (or below, subnormal); the
// interval may leave the binade only where rint(z) is its first or last integer.  Branch-free,
// so that the row loop below vectorises.
inline bool decide1(double y, double e, const Fmt& F, double* r) {
  int64_t bits;
  std::memcpy(&bits, &y, 8);
  const int64_t lowest = (int64_t)F.lowest << 52;
  int64_t eb = bits & 0x7FF0000000000000LL;
  eb = eb < lowest ? lowest : eb;  // subnormals of the format share the lowest binade's quantum
  int64_t sb = ((int64_t)(F.p - 1 + 2 * 1023) << 52) - eb;  // 2^(p-1-e)
  int64_t ib = eb - ((int64_t)(F.p - 1) << 52);             // 2^(e-p+1)
  double scale, inv;
  std::memcpy(&scale, &sb, 8);
  std::memcpy(&inv, &ib, 8);
  double z = y * scale, ez = e * scale;
  double n = std::rint(z);
  double az = std::fabs(z), an = std::fabs(n);
  bool ok = (std::fabs(z - n) + ez < 0.5) & (ez <= F.res);
  bool edge = (an == F.top) | (an == F.low);
  bool edge_ok = (az + ez < F.top) & ((az - ez > F.low) | (eb == lowest) | (ez == 0));
  ok = ok & (!edge | edge_ok);
  double v = n * inv;
  *r = std::fabs(v) > F.maxf ? std::copysign(INFINITY, y) : v;
  return ok;
}

// A value of fp16 (exactly representable: a rounded result) as its bits; branch-free, so that
// the row loop vectorises.  Normal: exponent and the top 10 significand bits moved down;
// subnormal: |v|·2^24 is the integer significand; inf/NaN: 0x7c00/0x7e00.
inline uint16_t double_to_half_exact(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  uint64_t sign = (b >> 48) & 0x8000;
  uint64_t ex = (b >> 52) & 0x7FF;
  double a = std::fabs(v);
  uint64_t normal = (((ex - (1023 - 15)) << 10) | ((b >> 42) & 0x3ff)) & 0x7fff;
  uint64_t sub = (uint64_t)(int64_t)(a * 0x1p24);
  uint64_t mag = ex >= 1023 - 14 ? normal : sub;
  mag = ex == 0x7FF ? ((b & 0xFFFFFFFFFFFFFULL) ? 0x7e00 : 0x7c00) : mag;
  return (uint16_t)(sign | mag);
}

// floats (each an fp16 value) to fp16 bits: 8 at a time with F16C where the CPU has it (every
// x86-64 since 2013; checked once), else one at a time.
__attribute__((target("avx,f16c"))) void floats_to_halves_f16c(const float* a, uint16_t* o,
                                                                int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i*)(o + i), _mm256_cvtps_ph(_mm256_loadu_ps(a + i), 0));
  for (; i < n; ++i) o[i] = double_to_half_exact(a[i]);
}

void floats_to_halves(const float* a, uint16_t* o, int n) {
  static const bool f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  if (f16c) {
    floats_to_halves_f16c(a, o, n);
  } else {
    for (int i = 0; i < n; ++i) o[i] = double_to_half_exact(a[i]);
  }
}

// decide1 over a row: the rounded values in a float64 buffer, status 0 or `unsettled`; returns
// how many are unsettled.
inline int decide_row(const double* y, const double* e, int n, const Fmt& F, double* r,
                      uint8_t* st, uint8_t unsettled) {
  int bad = 0;
  for (int j = 0; j < n; ++j) {
    double v;
    bool ok = decide1(y[j], e[j], F, &v);
    r[j] = v;
    st[j] = ok ? 0 : unsettled;
    bad += !ok;
  }
  return bad;
}

struct Job {
  int rows, cols;
  int in_kind;       // 0 float64, 1 float32, 2 float16 bits, 3 bfloat16 bits
  const void* x;     // rows x cols
  const double* lo;  // rows x cols or null: the rows are x + lo exactly
  const double* g;   // cols or null (non-finite entries already replaced by 0)
  const double* b;   // cols or null (likewise)
  double eps;
  int center, gemma, mode;  // mode: 0 dd, 1 grid, 2 tree
  int out_p, out_emin;
  double out_max, resolution;
  double tier1_resolution;  // = resolution; 0 sends every element to tier 2 (tests)
  double* y;         // rows x cols (null: statistics only)
  void* r;           // rows x cols, the rounded values in the output format (r_kind)
  int r_kind;        // 1 float32, 2 float16 bits, 3 bfloat16 bits
  uint8_t* status;   // rows x cols: 0 settled in float64, 1 in double-double, 2 unsettled,
                     // 3 a row holding NaN or inf
  double* xhat;      // rows x cols or null: fl(d·r)
  double* stats;     // rows x 8 or null: mean, e_mean, var, e_var, rstd, e_rstd, nonfinite, 0
  int threads;
  long long unsettled;  // out: elements left for tier 3
  long long nonfinite;  // out: rows holding NaN or inf
};

inline void store_rounded(const Job& J, long idx, double v) {
  if (J.r_kind == 1) {
    ((float*)J.r)[idx] = (float)v;
  } else if (J.r_kind == 2) {
    ((uint16_t*)J.r)[idx] = double_to_half_exact(v);
  } else {
    float f = (float)v;  // exact; bf16 is its upper half
    uint32_t fb;
    std::memcpy(&fb, &f, 4);
    ((uint16_t*)J.r)[idx] = (uint16_t)(f != f ? 0x7fc0 : fb >> 16);
  }
}

struct Scratch {
  std::vector<double> hi, lo, a, alo, d, dlo, q, qlo, e, tmp;
  explicit Scratch(const Layout& L) {
    for (auto* v : {&hi, &lo, &a, &alo, &d, &dlo, &q, &qlo, &e}) v->assign(L.npad, 0.0);
    tmp.assign(4 * L.nblocks + 8, 0.0);
  }
};

struct Row1 {  // what tier 1 knows of a row, reused by tier 2
  double m0;
  bool has_lo;
};

inline void load_row(const Job& J, const Layout& L, long i, Scratch& s) {
  const int D = J.cols;
  double* hi = s.hi.data();
  switch (J.in_kind) {
    case 0: {
      const double* x = (const double*)J.x + i * D;
      std::memcpy(hi, x, sizeof(double) * D);
      break;
    }
    case 1: {
      const float* x = (const float*)J.x + i * D;
      for (int j = 0; j < D; ++j) hi[j] = x[j];
      break;
    }
    case 2: {
      const uint16_t* x = (const uint16_t*)J.x + i * D;
      for (int j = 0; j < D; ++j) hi[j] = half_to_double(x[j]);
      break;
    }
    default: {
      const uint16_t* x = (const uint16_t*)J.x + i * D;
      for (int j = 0; j < D; ++j) {
        uint32_t bits = (uint32_t)x[j] << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        hi[j] = f;
      }
    }
  }
  for (int j = D; j < L.npad; ++j) hi[j] = 0;
  if (J.lo) {
    std::memcpy(s.lo.data(), J.lo + i * D, sizeof(double) * D);
    for (int j = D; j < L.npad; ++j) s.lo[j] = 0;
  }
}

// The row in double-double: deviations d_hi + d_lo (in s.d, s.dlo) within e_mu of z - μ, and
// r = rh + rl within rel_r·r of 1/√(v+ε).
struct DD {
  double e_mu, dlo_max, rh, rl, rel_r;
};

__attribute__((always_inline)) inline DD dd_row(const Job& J, const Layout& L, Scratch& s,
                                                const Row1& t1) {
  const int D = J.cols, N = L.npad;
  const double Dd = D, u = U;
  const int Ld = L.depth;
  const double* hi = s.hi.data();
  const double* lo = s.lo.data();
  const bool has_lo = t1.has_lo;
  double *dh = s.d.data(), *dl = s.dlo.data(), *ah = s.a.data(), *al = s.alo.data();
  double e_mu = 0, dlo_max = 0;
  if (J.center) {
    const double m0 = t1.m0;
    // a_hi + a_err = hi - m0 exactly; a_lo = fl(a_err + lo)
    for (int j = 0; j < D; ++j) two_sum(hi[j], -m0, ah[j], al[j]);
    if (has_lo)
      for (int j = 0; j < D; ++j) al[j] += lo[j];
    for (int j = D; j < N; ++j) ah[j] = al[j] = 0;
    double sabs = abs_sum(ah, N) * (1 + gam(D));
    double alo_abs = abs_sum(al, N) * (1 + gam(D));
    double alo_max = abs_max(al, N);
    double ch, cl;
    ddsum(ah, al, L, s.tmp.data(), ch, cl);
    double cD = (ch + cl) / Dd;
    double E_c = (gam(2 * Ld + 1) * ((Ld + 1) * u * sabs + alo_abs) * (1 + u) +
                  (has_lo ? u * alo_abs : 0.0)) * SAFETY;
    double e_cD = (E_c / Dd + 2.0000001 * u * std::fabs(cD)) * SAFETY;
    // d_hi + d_err = a_hi - cD exactly; d_lo = fl(d_err + a_lo)
    for (int j = 0; j < D; ++j) {
      double x, e;
      two_sum(ah[j], -cD, x, e);
      dh[j] = x;
      dl[j] = e + al[j];
    }
    for (int j = D; j < N; ++j) dh[j] = dl[j] = 0;
    dlo_max = abs_max(dl, N);
    e_mu = (e_cD + u * dlo_max * (1 + u) + (has_lo ? u * alo_max * (1 + u) : 0.0)) * SAFETY;
  } else {
    if (has_lo)
      for (int j = 0; j < N; ++j) two_sum(hi[j], lo[j], dh[j], dl[j]);
    else
      for (int j = 0; j < N; ++j) dh[j] = hi[j], dl[j] = 0;
    dlo_max = abs_max(dl, N);
  }
  double *qh = s.q.data(), *ql = s.qlo.data();
  for (int j = 0; j < N; ++j) {
    double p, e;
    two_prod(dh[j], dh[j], p, e);
    qh[j] = p;
    ql[j] = e + 2.0 * dh[j] * dl[j];
  }
  double qlo_abs = abs_sum(ql, N) * (1 + gam(D));
  double qsum = abs_sum(qh, N) * (1 + gam(D));
  double dabs = abs_sum(dh, N) * (1 + gam(D)) + Dd * dlo_max;
  double Sh, Sl;
  ddsum(qh, ql, L, s.tmp.data(), Sh, Sl);
  // |q_j - d_j²|: the rounding of q_lo and the dropped d_lo²
  double E_q = u * (1 + u) * qlo_abs + 2 * u * (1 + u) * dlo_max * dabs + Dd * dlo_max * dlo_max;
  double E_sum = gam(2 * Ld + 1) * ((Ld + 1) * u * qsum + qlo_abs);
  double e_S = (2 * e_mu * dabs + Dd * e_mu * e_mu + E_q + E_sum) * SAFETY;
  // w = S/D + ε in double-double
  double qh1 = Sh / Dd, p, pe;
  two_prod(qh1, Dd, p, pe);
  double ql1 = (((Sh - p) - pe) + Sl) / Dd;
  double wh, wl;
  two_sum(qh1, J.eps, wh, wl);
  wl += ql1;
  {
    double t = wh + wl;
    wl = wl - (t - wh);
    wh = t;
  }
  // r = 1/√w: one Newton step in double-double from the float64 value
  double r0 = 1.0 / std::sqrt(wh);
  double pp, ppe;
  two_prod(r0, r0, pp, ppe);
  double qq, qqe;
  two_prod(wh, pp, qq, qqe);
  qqe += wh * ppe + wl * pp;
  double corr = r0 * (((1.0 - qq) - qqe) * 0.5);
  double rh, rl;
  two_sum(r0, corr, rh, rl);
  double wlow = (wh - e_S / Dd * SAFETY) * (1 - 4 * u);
  double rel_r = wlow > 0 ? (e_S / Dd / wlow) * (1 + 4 * u) + 64 * u * u : INFINITY;
  return DD{e_mu, dlo_max, rh, rl, rel_r};
}

// Tier 2: the elements of row i whose status is 2 (unsettled), in double-double.
__attribute__((always_inline)) inline void dd_elements(const Job& J, long i, Scratch& s,
                                                       const DD& q, const Fmt& F) {
  const int D = J.cols;
  const double u = U;
  const double *dh = s.d.data(), *dl = s.dlo.data();
  const double e_mu = q.e_mu, rh = q.rh, rl = q.rl, rel_r = q.rel_r;
  for (int j = 0; j < D; ++j) {
    long idx = i * D + j;
    if (J.status[idx] != 2) continue;
    double th, tl;
    two_prod(dh[j], rh, th, tl);
    tl += dh[j] * rl + dl[j] * rh;
    double e_t = (rh * (1 + rel_r) * e_mu + (std::fabs(dh[j]) + std::fabs(dl[j]) + e_mu) * rh *
                  rel_r) * (1 + 4 * u) + 16 * u * u * std::fabs(th);
    double ph = th, pl = tl, e_p = e_t;
    if (J.g) {
      double gh, gl;
      if (J.gemma)
        two_sum(1.0, J.g[j], gh, gl);
      else
        gh = J.g[j], gl = 0;
      double x, e;
      two_prod(gh, th, x, e);
      ph = x;
      pl = e + (gh * tl + gl * th);
      e_p = std::fabs(gh) * e_t * (1 + 4 * u) + 16 * u * u * std::fabs(ph);
    }
    double yh = ph, yl = pl, e_y = e_p;
    if (J.b) {
      double x, e;
      two_sum(ph, J.b[j], x, e);
      yh = x;
      yl = e + pl;
      e_y = e_p + 16 * u * u * (std::fabs(ph) + std::fabs(J.b[j]));
    }
    double yv = yh + yl;
    e_y = (e_y + u * std::fabs(yv)) * SAFETY;
    double rv;
    bool ok = decide1(yv, e_y, F, &rv);
    J.y[idx] = yv;
    store_rounded(J, idx, rv);
    if (ok) J.status[idx] = 1;
  }
}

__attribute__((always_inline)) inline void row_tier1(const Job& J, const Layout& L, long i,
                                                     Scratch& s, const Fmt& F1,
                                                     const Fmt& F) {
  const int D = J.cols, N = L.npad;
  const double Dd = D, u = U;
  load_row(J, L, i, s);
  double* hi = s.hi.data();
  const double* lo = s.lo.data();
  const bool has_lo = J.lo != nullptr;
  double* tmp = s.tmp.data();
  double rs = bsum(hi, L, tmp);
  double* st = J.stats ? J.stats + 8 * i : nullptr;
  if (!std::isfinite(rs)) {  // NaN or ±inf in the row: Python gives the IEEE values
    __atomic_add_fetch(&((Job&)J).nonfinite, 1, __ATOMIC_RELAXED);
    if (J.status)
      for (int j = 0; j < D; ++j) J.status[i * D + j] = 3;
    if (st) {
      for (int k = 0; k < 6; ++k) st[k] = NAN;
      st[6] = 1;
    }
    return;
  }
  Row1 t1{rs / Dd, has_lo};
  double* d = s.d.data();
  // fp32 outputs: the row in double-double first (tier 2's statistics), then every element in
  // float64 from it: t = fl(d_hi·r_hi) within (u + ρ1(1+u))|t| + r_hi(1+ρ1)(max|d_lo| + e_mu)
  // of x̂, where |r_hi - r| <= ρ1·r_hi.  Tier 1's own statistics (a γ_L-sized ρ_r) would leave
  // every element whose γx̂ nearly cancels β unsettled, and so redo nearly every row.
  const bool dd_first = J.mode == 0 && J.y && !J.stats;
  DD q{};
  double A0, B0, r;
  bool hopeless;
  if (dd_first) {
    q = dd_row(J, L, s, t1);
    const double rho1 = (u + q.rel_r * (1 + u)) * (1 + u);
    hopeless = !(q.rel_r < INFINITY);
    r = q.rh;
    A0 = (u + rho1 * (1 + u)) * (1 + 2 * u);
    B0 = r * (1 + rho1) * (q.dlo_max + q.e_mu);
  } else {
    const double gL = gam(L.depth);
    double k = 2.0000001 * u, e_row = 0, mean = 0, e_mean = 0, sabs_d = -1;
    double* a = s.a.data();
    if (J.center) {
      double m0 = rs / Dd;
      double c, E_c, sabs;
      if (J.mode == 0) {
        double* al = s.alo.data();
        // a + a_err = hi - m0 exactly (TwoSum); a_lo = fl(a_err + lo)
        for (int j = 0; j < D; ++j) two_sum(hi[j], -m0, a[j], al[j]);
        if (has_lo)
          for (int j = 0; j < D; ++j) al[j] += lo[j];
        for (int j = D; j < N; ++j) a[j] = al[j] = 0;
        sabs = abs_sum(a, N) * (1 + gam(D));
        double alo_abs = abs_sum(al, N) * (1 + gam(D));
        double alo_max = abs_max(al, N);
        double ch, cl;
        ddsum(a, al, L, tmp, ch, cl);
        c = ch + cl;
        E_c = (gam(2 * L.depth + 1) * ((L.depth + 1) * u * sabs + alo_abs) * (1 + u) +
               (has_lo ? u * alo_abs : 0.0)) * SAFETY;
        double cD = c / Dd;
        double e_cD = (E_c / Dd + 2.0000001 * u * std::fabs(cD)) * SAFETY;
        if (has_lo) {
          // d = fl(fl(a - cD) + a_lo): two roundings of d, a_lo's own rounding and its size
          for (int j = 0; j < D; ++j) d[j] = (a[j] - cD) + al[j];
          e_row = 2.0000001 * u * alo_max * (1 + u);
        } else {
          // d = fl(a - cD): a_err (<= u|a|) dropped, charged as u(|d|(1+u) + |cD|)
          for (int j = 0; j < D; ++j) d[j] = a[j] - cD;
        }
        e_row = (e_row + e_cD + 2 * u * std::fabs(cD)) * SAFETY;
        sabs_d = (sabs + Dd * std::fabs(cD)) * (1 + 2 * u) + (has_lo ? Dd * alo_max : 0.0);
        mean = m0 + cD;
        e_mean = (e_cD + u * std::fabs(mean)) * SAFETY;
      } else if (J.mode == 1) {
        // fp16 rows: every value a multiple of 2^-24; so is the pivot, and then x - m0 and every
        // partial sum are exact while Σ|a| < 2^29 (53 bits of 2^-24 steps)
        m0 = std::nearbyint(m0 * 0x1p24) * 0x1p-24;
        for (int j = 0; j < D; ++j) a[j] = hi[j] - m0;
        for (int j = D; j < N; ++j) a[j] = 0;
        sabs = abs_sum(a, N) * (1 + gam(D));
        c = bsum(a, L, tmp);
        E_c = sabs < 0x1p29 ? 0.0 : gam(D) * sabs * SAFETY;
        double cD = c / Dd;
        double e_cD = (E_c / Dd + 2.0000001 * u * std::fabs(cD)) * SAFETY;
        for (int j = 0; j < D; ++j) d[j] = a[j] - cD;
        e_row = (e_cD + 2 * u * std::fabs(cD)) * SAFETY;
        sabs_d = (sabs + Dd * std::fabs(cD)) * (1 + 2 * u);
        mean = m0 + cD;
        e_mean = (e_cD + u * std::fabs(mean)) * SAFETY;
      } else {
        // a = fl(hi - m0) (+ lo: a second rounding, u_a = 2u, and u|lo|)
        for (int j = 0; j < D; ++j) a[j] = hi[j] - m0;
        if (has_lo)
          for (int j = 0; j < D; ++j) a[j] += lo[j];
        for (int j = D; j < N; ++j) a[j] = 0;
        sabs = abs_sum(a, N) * (1 + gam(D));
        double lo_abs = has_lo ? abs_sum(lo, N) * (1 + gam(D)) : 0.0;
        double lo_max = has_lo ? abs_max(lo, N) : 0.0;
        const double ua = has_lo ? 2.0000001 * u : u;
        c = bsum(a, L, tmp);
        E_c = ((ua + gL) * (1 + gL) * sabs + 1.0000001 * u * lo_abs) * SAFETY;
        double cD = c / Dd;
        double e_cD = (E_c / Dd + 2.0000001 * u * std::fabs(cD)) * SAFETY;
        for (int j = 0; j < D; ++j) d[j] = a[j] - cD;
        // |d - (z - μ)| <= u|d| + ua|a| + u|lo| + e_cD,  |a| <= |d|(1+u) + |cD|
        k = (u + ua * (1 + u)) * (1 + 1e-7);
        e_row = (e_cD + ua * std::fabs(cD) + 1.0000001 * u * lo_max) * SAFETY;
        sabs_d = (sabs + Dd * std::fabs(cD)) * (1 + 2 * u);
        mean = m0 + cD;
        e_mean = (e_cD + u * std::fabs(mean)) * SAFETY;
      }
    } else {
      if (has_lo)
        for (int j = 0; j < D; ++j) d[j] = hi[j] + lo[j];  // one rounding: within k|d|
      else
        std::memcpy(d, hi, sizeof(double) * D);
    }
    for (int j = D; j < N; ++j) d[j] = 0;
    double* q = s.q.data();
    for (int j = 0; j < N; ++j) q[j] = d[j] * d[j];
    double S = bsum(q, L, tmp);
    double ssq = S * (1 + gL) / (1 - u);  // >= Σd²
    if (sabs_d < 0) sabs_d = std::sqrt(Dd * ssq) * (1 + 4 * u);  // Cauchy-Schwarz
    double prop = k * (2 + k) * ssq + e_row * (2 + 2 * k) * sabs_d + Dd * e_row * e_row;
    double e_S = ((gL + u) * ssq + prop) * SAFETY;
    double v = S / Dd;
    double e_v = (e_S / Dd + u * v) * SAFETY;
    double w = v + J.eps;
    double e_w = (e_v + u * w) * SAFETY;
    double denom = w - e_w;
    hopeless = !(denom > 0);
    double rho = hopeless ? INFINITY : e_w / denom;
    r = 1.0 / std::sqrt(w);
    double rho_r = (rho + 2.01 * u) * (1 + rho) * SAFETY;
    if (st) {
      st[0] = J.center ? mean : NAN;
      st[1] = J.center ? e_mean : NAN;
      st[2] = v;
      st[3] = hopeless ? INFINITY : e_v;
      st[4] = r;
      st[5] = rho_r * r;
      st[6] = 0;
    }
    if (!J.y) return;
    A0 = (k * (1 + rho_r) + rho_r + u) * (1 + 2 * u);
    B0 = e_row * r * (1 + rho_r);
  }
  double A = A0;
  const double B = B0;
  const double ug = J.gemma ? u : 0.0;
  double Bc = B;
  if (J.g) {
    A = (A + ug * (1 + A)) * (1 + u) + u;
    Bc = B * (1 + ug);
  }
  const double Ay = (A + (J.b ? u : 0.0)) * SAFETY, Bs = Bc * SAFETY, us = u * SAFETY;
  double* yrow = J.y + i * D;
  double* erow = s.e.data();
  // y_j and its bound e_j (one loop per case, so that each vectorises)
  if (J.xhat)
    for (int j = 0; j < D; ++j) J.xhat[i * D + j] = d[j] * r;
  if (J.g && J.b) {
    for (int j = 0; j < D; ++j) {
      double gg = J.gemma ? 1.0 + J.g[j] : J.g[j];
      double p = (d[j] * r) * gg;
      erow[j] = std::fabs(p) * Ay + Bs * std::fabs(gg) + us * std::fabs(J.b[j]);
      yrow[j] = p + J.b[j];
    }
  } else if (J.g) {
    for (int j = 0; j < D; ++j) {
      double gg = J.gemma ? 1.0 + J.g[j] : J.g[j];
      double p = (d[j] * r) * gg;
      erow[j] = std::fabs(p) * Ay + Bs * std::fabs(gg);
      yrow[j] = p;
    }
  } else if (J.b) {
    for (int j = 0; j < D; ++j) {
      double p = d[j] * r;
      erow[j] = std::fabs(p) * Ay + Bs + us * std::fabs(J.b[j]);
      yrow[j] = p + J.b[j];
    }
  } else {
    for (int j = 0; j < D; ++j) {
      double p = d[j] * r;
      erow[j] = std::fabs(p) * Ay + Bs;
      yrow[j] = p;
    }
  }
  if (hopeless)
    for (int j = 0; j < D; ++j) erow[j] = INFINITY;
  double* rr = s.q.data();  // free by now
  int bad = decide_row(yrow, erow, D, F1, rr, J.status + i * D, 2);
  if (J.r_kind == 1) {
    float* o = (float*)J.r + i * D;
    for (int j = 0; j < D; ++j) o[j] = (float)rr[j];
  } else if (J.r_kind == 2) {
    float* f = (float*)erow;  // free by now
    for (int j = 0; j < D; ++j) f[j] = (float)rr[j];
    floats_to_halves(f, (uint16_t*)J.r + i * D, D);
  } else {
    for (int j = 0; j < D; ++j) store_rounded(J, i * D + j, rr[j]);
  }
  if (bad) {
    dd_elements(J, i, s, dd_first ? q : dd_row(J, L, s, t1), F);
    long long left = 0;
    const uint8_t* sr = J.status + i * D;
    for (int j = 0; j < D; ++j) left += sr[j] == 2;
    if (left) __atomic_add_fetch(&((Job&)J).unsettled, left, __ATOMIC_RELAXED);
  }
}

// rows are handed out a few at a time from a shared counter (not split in fixed ranges), so that
// a thread slowed by others on the machine (the kernel's, the harness's) leaves its share to the
// rest; every row's result is its own, whichever thread computes it
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) void run_rows(const Job* J, long* next) {
  Layout L(J->cols);
  Scratch s(L);
  Fmt F(J->out_p, J->out_emin, J->out_max, J->resolution);
  Fmt F1(J->out_p, J->out_emin, J->out_max, J->tier1_resolution);
  const long step = std::max(1L, 16384L / std::max(1, J->cols));
  for (;;) {
    const long r0 = __atomic_fetch_add(next, step, __ATOMIC_RELAXED);
    if (r0 >= J->rows) break;
    const long r1 = std::min<long>(J->rows, r0 + step);
    for (long i = r0; i < r1; ++i) row_tier1(*J, L, i, s, F1, F);
  }
}

}  // namespace

NC_EXPORT int nc_oracle_rows(const Job* J) {
  long rows = J->rows;
  int T = std::max(1, std::min<int>(J->threads, (int)((rows + 3) / 4)));
  long next = 0;
  std::vector<std::thread> ts;
  for (int t = 1; t < T; ++t) ts.emplace_back(run_rows, J, &next);
  run_rows(J, &next);  // this thread works too
  for (auto& t : ts) t.join();
  return 0;
}

NC_EXPORT void nc_decide(const double* y, const double* e, long n, int p, int emin, double maxf,
                         double res, double* r, uint8_t* ok) {
  Fmt F(p, emin, maxf, res);
  for (long i = 0; i < n; ++i) ok[i] = decide1(y[i], e[i], F, r + i);
}

// Correctly round float64 values to a format and store them in its storage (kind 1 float32, 2
// float16 bits, 3 bfloat16 bits): decide1 with no error settles every value, to nearest even,
// subnormals and overflow included; a NaN keeps its sign and is quiet (fp16 as numpy's own
// conversion gives it: 0x7c00 + the top ten significand bits, never 0x7c00; bf16 0x7fc0).
namespace {
template <int K>
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) void round_range(const double* __restrict__ v,
                                                                     long n, void* out,
                                                                     const Fmt* F) {
  uint16_t* __restrict__ o16 = (uint16_t*)out;
  float* __restrict__ o32 = (float*)out;
  for (long i = 0; i < n; ++i) {
    double r;
    decide1(v[i], 0.0, *F, &r);
    uint64_t b;
    std::memcpy(&b, &v[i], 8);
    const uint64_t sign = (b >> 48) & 0x8000, sig = b & 0xFFFFFFFFFFFFFULL;
    const bool nan = v[i] != v[i];
    if (K == 1) {
      o32[i] = (float)r;
    } else if (K == 2) {
      uint64_t nb = 0x7c00 + (sig >> 42);
      nb = nb == 0x7c00 ? 0x7c01 : nb;
      o16[i] = (uint16_t)(nan ? (sign | nb) : double_to_half_exact(r));
    } else {
      const float f = (float)r;
      uint32_t fb;
      std::memcpy(&fb, &f, 4);
      o16[i] = (uint16_t)(nan ? (sign | 0x7fc0) : fb >> 16);
    }
  }
}

// fp16: the rounded values are fp16 values, so float32 holds them and F16C stores them exactly
// (8 at a time; a float64 -> integer conversion does not vectorise before AVX-512), NaN after
void round_half(const double* v, long n, uint16_t* out, const Fmt* F) {
  constexpr long C = 2048;
  float buf[C];
  for (long c0 = 0; c0 < n; c0 += C) {
    const long m = std::min(C, n - c0);
    round_range<1>(v + c0, m, buf, F);
    floats_to_halves(buf, out + c0, (int)m);
    for (long k = 0; k < m; ++k)
      if (v[c0 + k] != v[c0 + k]) round_range<2>(v + c0 + k, 1, out + c0 + k, F);
  }
}

void round_any(const double* v, long lo, long hi, void* out, int kind, const Fmt* F) {
  if (kind == 1) round_range<1>(v + lo, hi - lo, (float*)out + lo, F);
  else if (kind == 2) round_half(v + lo, hi - lo, (uint16_t*)out + lo, F);
  else round_range<3>(v + lo, hi - lo, (uint16_t*)out + lo, F);
}
}  // namespace

NC_EXPORT void nc_round(const double* v, long n, void* out, int kind, int p, int emin,
                        double maxf, int threads) {
  Fmt F(p, emin, maxf, 0.5);
  constexpr long C = 1 << 16;  // handed out from a shared counter, as the rows above
  const long nchunks = (n + C - 1) / C;
  long next = 0;
  auto work = [&] {
    for (;;) {
      const long c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
      if (c >= nchunks) break;
      round_any(v, c * C, std::min(n, (c + 1) * C), out, kind, &F);
    }
  };
  std::vector<std::thread> ts;
  for (int t = 1; t < std::min<long>(threads, nchunks); ++t) ts.emplace_back(work);
  work();
  for (auto& t : ts) t.join();
}

NC_EXPORT int nc_job_size() { return (int)sizeof(Job); }
