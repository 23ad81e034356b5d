// The measurement of a kernel's answers against the oracle's exact values, compiled
// (normcheck/measure.py loads it; the numpy version there is the fallback and the tests hold the
// two equal).  Per element, from t (the exact value, nearest float64), r (its correct rounding in
// the output format), a (the kernel's value) and optionally the sound bound E and the scale
// max(|γx̂|, |β|):
//
//   ulp     |a - t| / ulp(t); inf where a non-finite answer meets a finite r or a finite answer a
//           non-finite r; 0 where a is the same non-finite as r
//   cls     the outcome class (normcheck.metrics.CLASSES, by code)
//   scaled  |a - t| / ulp(max(scale, |t|)); 0 where ulp is 0, ulp where ulp is not finite
//   ratio   |a - t| / limit, limit = max(ulp(|t| + E)/2 + E, floor·ulp(max(|t|, scale))) (NaN:
//           inf), on finite-class written elements; 0 elsewhere
//
// and the reductions of a batch: max with its position (ulp, scaled, ratio), the sum and count
// of ulp (mean), a histogram of ulp on the caller's bin edges (p99), the class counts, how many
// elements hold the poison (unwritten) and how many exceed the limit.  Every operation is exact
// or a single IEEE operation in the same order as the numpy version, so the two agree bit for
// bit; nothing is guessed: where a value cannot be formed (NaN) it is classed, not measured.
// Threads split the elements in contiguous ranges; reductions merge in range order.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <thread>
#include <vector>

#include "fp_bits.h"

#define NC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

enum Kind { F64 = 0, F32 = 1, F16 = 2, BF16 = 3 };

inline double load(const void* p, int kind, long i) {
  if (kind == F64) return ((const double*)p)[i];
  if (kind == F32) return (double)((const float*)p)[i];
  if (kind == F16) return half_to_double(((const uint16_t*)p)[i]);
  uint32_t b = (uint32_t)((const uint16_t*)p)[i] << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return (double)f;
}

inline uint32_t bits_of(const void* p, int kind, long i) {
  switch (kind) {
    case F32: return ((const uint32_t*)p)[i];
    case F16:
    case BF16: return ((const uint16_t*)p)[i];
    default: return 0;
  }
}

// ulp of the format at t: 2^(e - p + 1) with e the float64 exponent of |t| clamped to
// [emin, emax] (zero and subnormals give emin; inf emax); NaN for NaN -- Format.ulp_array
inline double ulp_at(double t, int p, int emin, int emax) {
  if (t != t) return NAN;
  uint64_t b;
  std::memcpy(&b, &t, 8);
  int64_t e = (int64_t)((b >> 52) & 0x7FF) - 1023;
  e = e < emin ? emin : (e > emax ? emax : e);
  e += 1023 - p + 1;
  uint64_t ub = (uint64_t)e << 52;
  double u;
  std::memcpy(&u, &ub, 8);
  return u;
}

// 1/ulp_at(t) for a finite t: a power of two, so x·(1/ulp) is x/ulp exactly
inline double inv_ulp(double t, int p, int emin, int emax) {
  uint64_t b;
  std::memcpy(&b, &t, 8);
  int64_t e = (int64_t)((b >> 52) & 0x7FF) - 1023;
  e = e < emin ? emin : (e > emax ? emax : e);
  e = 1023 - (e - p + 1);
  uint64_t ub = (uint64_t)e << 52;
  double u;
  std::memcpy(&u, &ub, 8);
  return u;
}

// ulp_at(t)·2^shift for a finite t, built from the bits (no division)
inline double ulp_scaled(double t, int p, int emin, int emax, int shift) {
  uint64_t b;
  std::memcpy(&b, &t, 8);
  int64_t e = (int64_t)((b >> 52) & 0x7FF) - 1023;
  e = e < emin ? emin : (e > emax ? emax : e);
  e += 1023 - p + 1 + shift;
  uint64_t ub = (uint64_t)e << 52;
  double u;
  std::memcpy(&u, &ub, 8);
  return u;
}

enum Cls {
  FINITE = 0, OVERFLOW_OK, NAN_PROPAGATED, SPURIOUS_POS_INF, SPURIOUS_NEG_INF, SPURIOUS_NAN,
  MISSED_OVERFLOW, WRONG_OVERFLOW, NAN_NOT_PROPAGATED, NCLS
};

}  // namespace

struct MeasureJob {
  long n;
  const double* t;
  const void* r;
  int r_kind;
  const void* a;
  int a_kind;
  const double* scale;   // or null: |t| (or, with beta, max(|t - beta|, |beta|))
  const double* beta;    // cols of them, or null
  long cols;
  const double* E;       // or null: no ratio
  int p, emin, emax;
  double floor_ulp;
  int check_poison;
  uint32_t poison;
  const double* edges;   // histogram edges (ascending), n_edges of them
  int n_edges;
  int want_hist;         // 0: no histogram (the caller keeps the ulp array)
  double* ulp;           // outputs, each optional
  int8_t* cls;
  double* scaled;
  double* ratio;
  // reductions
  double max_ulp, max_scaled, max_ratio, sum_ulp;
  long argmax_ulp, argmax_scaled, argmax_ratio;
  int want_ordinal;      // a and r in the same storage format: their ordinal distance
  double max_ordinal;    // out: the largest (inf: a NaN against a number)
  long long* hist;       // n_edges + 2 counts: [<= edges[0]], (edges[k-1], edges[k]], above, inf
  long long classes[NCLS];
  long long unwritten, over, inf_ulp;
  int threads;
  // the sound bound formed here, row by row, instead of read from E (normcheck.bounds.SoundBound):
  const struct BoundJob* bound;  // or null
  double h_coef;                 // > 0: E += h_coef·|t - h_beta_j| (a fused fp32 sum rounds)
  const double* h_beta;          // cols or null (0)
  long e_base;                   // E[i - e_base] is element i's bound
  long long unbounded_rows;      // out (with bound): rows whose bound is inf somewhere
};

namespace {

struct Partial {
  double max_ulp = -1, max_scaled = -1, max_ratio = -1, sum_ulp = 0, max_ordinal = 0;
  long argmax_ulp = -1, argmax_scaled = -1, argmax_ratio = -1;
  std::vector<long long> hist;
  long long classes[NCLS] = {0};
  long long unwritten = 0, over = 0, inf_ulp = 0, unbounded = 0;
};

// the histogram bin of u (normcheck.metrics.StreamStats): the edges are the doubles whose bits
// are (base + j) << 48 -- 2^e·(1 + k/16), sixteen to an octave -- so the bin searchsorted(left)
// would give (edges[k-1] < u <= edges[k]) is read from the bits: the 16-bit key of the double
// just below u, less the base, plus one; 0 at or below edges[0], n_edges above the top.
inline long bin_of(double u, long base, long n_edges) {
  uint64_t b;
  std::memcpy(&b, &u, 8);
  const long c = (long)((b - (b != 0)) >> 48) - base + 1;
  return c < 0 ? 0 : (c > n_edges ? n_edges : c);
}

// the scale of element i: given, or max(|t - β|, |β|) (np.maximum: NaN if either is), or |t|
inline double scale_at(const MeasureJob& J, long i, double t) {
  if (J.scale) return J.scale[i];
  if (!J.beta) return std::fabs(t);
  const double b = J.beta[i % J.cols], u = std::fabs(t - b), v = std::fabs(b);
  return (u != u || v != v) ? NAN : (u > v ? u : v);
}

inline long edge_base(const MeasureJob& J) {
  uint64_t b;
  std::memcpy(&b, &J.edges[0], 8);
  return (long)(b >> 48);
}

template <int RK, int AK>
void run_slow(const MeasureJob& J, long lo, long hi, Partial& P) {
  const long base = edge_base(J);
  long long* __restrict__ hist = P.hist.data();
  double* __restrict__ o_ulp = J.ulp;
  int8_t* __restrict__ o_cls = J.cls;
  double* __restrict__ o_sc = J.scaled;
  double* __restrict__ o_rt = J.ratio;
  double max_ulp = P.max_ulp, max_sc = P.max_scaled, max_rt = P.max_ratio, sum = 0.0;
  long a_ulp = -1, a_sc = -1, a_rt = -1;
  long long n_fin = 0, over = 0;
  for (long i = lo; i < hi; ++i) {
    const double t = J.t[i];
    const double r = load(J.r, RK, i);
    const double a = load(J.a, AK, i);
    const bool unw = J.check_poison && bits_of(J.a, AK, i) == J.poison;
    const double s_in = scale_at(J, i, t);
    const double E_in = J.E ? J.E[i - J.e_base] : 0.0;
    if (std::isfinite(t) & std::isfinite(r) & std::isfinite(a) & !unw & std::isfinite(s_in) &
        std::isfinite(E_in)) {
      // the common case: every value finite -- the same results as below, in fewer operations
      // (ulps are powers of two: multiplying by their inverse is dividing, exactly)
      n_fin++;
      const double diff = std::fabs(a - t), at = std::fabs(t);
      const double u = diff * inv_ulp(t, J.p, J.emin, J.emax);
      const double mm = std::fmax(s_in, at);
      const double im = inv_ulp(mm, J.p, J.emin, J.emax);
      const double sc = u == 0.0 ? 0.0 : diff * im;
      double rt = 0.0;
      if (J.E) {
        const double lim = std::fmax(1.0 / inv_ulp(at + E_in, J.p, J.emin, J.emax) / 2 + E_in,
                                     J.floor_ulp / im);
        rt = diff / lim;
        over += rt > 1.0;
        if (rt > max_rt) { max_rt = rt; a_rt = i; }
      }
      if (u > max_ulp) { max_ulp = u; a_ulp = i; }
      if (sc > max_sc) { max_sc = sc; a_sc = i; }
      sum += u;
      if (J.want_hist) hist[bin_of(u, base, J.n_edges)]++;
      if (o_ulp) o_ulp[i] = u;
      if (o_cls) o_cls[i] = (int8_t)FINITE;
      if (o_sc) o_sc[i] = sc;
      if (o_rt) o_rt[i] = rt;
      continue;
    }
    // the slow path keeps its reductions in P: merge the locals first, in order
    if (max_ulp > P.max_ulp) { P.max_ulp = max_ulp; P.argmax_ulp = a_ulp; }
    if (max_sc > P.max_scaled) { P.max_scaled = max_sc; P.argmax_scaled = a_sc; }
    if (max_rt > P.max_ratio) { P.max_ratio = max_rt; P.argmax_ratio = a_rt; }
    max_ulp = P.max_ulp; a_ulp = P.argmax_ulp; max_sc = P.max_scaled; a_sc = P.argmax_scaled;
    max_rt = P.max_ratio; a_rt = P.argmax_ratio;
    const bool a_nan = a != a, t_nan = t != t, r_fin = std::isfinite(r);
    // class (the order of metrics.compare's assignments: the last one that applies wins)
    int c = FINITE;
    if (!r_fin && !t_nan && a == r) c = OVERFLOW_OK;
    if (!r_fin && !t_nan && std::isfinite(a)) c = MISSED_OVERFLOW;
    if (!r_fin && !t_nan && !std::isfinite(a) && a != r) c = WRONG_OVERFLOW;
    if (r_fin && a == INFINITY) c = SPURIOUS_POS_INF;
    if (r_fin && a == -INFINITY) c = SPURIOUS_NEG_INF;
    if (r_fin && a_nan) c = SPURIOUS_NAN;
    if (t_nan && a_nan) c = NAN_PROPAGATED;
    if (t_nan && !a_nan) c = NAN_NOT_PROPAGATED;
    P.classes[c]++;
    // ulp error
    const double diff = std::fabs(a - t);
    double u = diff / ulp_at(t, J.p, J.emin, J.emax);
    const bool same_nonfinite = !r_fin && (a == r || (a_nan && r != r));
    if (!(r_fin && std::isfinite(a))) u = INFINITY;
    if (same_nonfinite) u = 0.0;
    // scaled
    double sc = 0.0;
    {
      const double s = scale_at(J, i, t);
      const double m = std::fmax(s, std::fabs(t));  // np.maximum: NaN if either is NaN
      const double mm = (s != s || t != t) ? NAN : m;
      double v = diff / ulp_at(mm, J.p, J.emin, J.emax);
      v = u == 0.0 ? 0.0 : v;
      sc = std::isfinite(u) ? v : u;
    }
    // ratio to the sound limit
    double rt = 0.0;
    if (J.E) {
      const double E = J.E[i - J.e_base];
      const double at = std::fabs(t);
      double lim = ulp_at(at + E, J.p, J.emin, J.emax) / 2 + E;
      const double s = scale_at(J, i, t);
      const double sc2 = (s != s || at != at) ? NAN : std::fmax(at, s);
      const double fl = J.floor_ulp * ulp_at(sc2, J.p, J.emin, J.emax);
      lim = (lim != lim || fl != fl) ? NAN : std::fmax(lim, fl);  // np.maximum keeps NaN
      if (lim != lim) lim = INFINITY;
      double v = (c == FINITE && !unw) ? diff / lim : 0.0;
      rt = v != v ? 0.0 : v;
      if (rt > 1.0) P.over++;
      if (rt > P.max_ratio) { P.max_ratio = rt; P.argmax_ratio = i; }
    }
    if (unw) P.unwritten++;
    // reductions
    const double uu = u != u ? INFINITY : u;
    if (uu > P.max_ulp) { P.max_ulp = uu; P.argmax_ulp = i; }
    const double ss = std::isfinite(sc) ? sc : -1.0;  // the scaled max skips non-finite
    if (ss > P.max_scaled) { P.max_scaled = ss; P.argmax_scaled = i; }
    if (std::isinf(uu)) {
      P.inf_ulp++;
      if (J.want_hist) P.hist[J.n_edges + 1]++;
    } else {
      P.sum_ulp += uu;
      if (J.want_hist) P.hist[bin_of(uu, base, J.n_edges)]++;  // 0..n_edges
    }
    if (J.ulp) J.ulp[i] = u;
    if (J.cls) J.cls[i] = (int8_t)c;
    if (J.scaled) J.scaled[i] = sc;
    if (J.ratio) J.ratio[i] = rt;
    max_ulp = P.max_ulp; a_ulp = P.argmax_ulp; max_sc = P.max_scaled; a_sc = P.argmax_scaled;
    max_rt = P.max_ratio; a_rt = P.argmax_ratio;
  }
  if (max_ulp > P.max_ulp) { P.max_ulp = max_ulp; P.argmax_ulp = a_ulp; }
  if (max_sc > P.max_scaled) { P.max_scaled = max_sc; P.argmax_scaled = a_sc; }
  if (max_rt > P.max_ratio) { P.max_ratio = max_rt; P.argmax_ratio = a_rt; }
  P.sum_ulp += sum;
  P.over += over;
  P.classes[FINITE] += n_fin;
}

// what pass A reduces over the chunk's finite elements (the ok lanes): the maxima of u, scaled
// and ratio (-1: none), how many are beyond the limit, how many are not ok
struct ChunkSums {
  double max_u, max_s, max_r;
  long long over, not_ok;
};

// Pass A of a chunk, branch-free so that it vectorises: u, scaled and ratio as if every value
// were finite, whether it is (the others go through run_slow), the histogram bin of u, and the
// reductions of the ok lanes but the sum (masked_sum).
template <int RK, int AK, bool HS, bool HE>
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
ChunkSums pass_a(const MeasureJob& J, long lo, long n, const double* sbuf, double* __restrict__ u_,
                 double* __restrict__ s_, double* __restrict__ r_, uint8_t* __restrict__ ok_,
                 int32_t* __restrict__ bin_, long base) {
  const double* __restrict__ tt = J.t + lo;
  const double* __restrict__ ss = sbuf;
  const double* __restrict__ EE = J.E + (HE ? lo - J.e_base : 0);
  const int p = J.p, emin = J.emin, emax = J.emax;
  const double fl = J.floor_ulp;
  // the poison compare as one branch-free test: no float's bits equal 2^40 when not checking
  const uint64_t poison = J.check_poison ? (uint64_t)J.poison : (1ULL << 40);
  const long n_edges = J.n_edges;
  // the maxima on the bits (non-negative doubles order as their bits; other lanes -1): integer
  // reductions vectorise where floating-point ones would need reassociation
  int64_t mu = -1, ms = -1, mr = -1;
  long long over = 0, not_ok = 0;
  for (long k = 0; k < n; ++k) {
    const double t = tt[k];
    const double r = load(J.r, RK, lo + k);
    const double a = load(J.a, AK, lo + k);
    const double at = std::fabs(t);
    const double s_in = HS ? ss[k] : at;
    const double E_in = HE ? EE[k] : 0.0;
    const double diff = std::fabs(a - t);
    const double u = diff * inv_ulp(t, p, emin, emax);
    const double mm = s_in > at ? s_in : at;
    const double im = inv_ulp(mm, p, emin, emax);
    // diff·im is 0 exactly where diff·inv_ulp(t) is (im <= inv_ulp(t), both powers of two)
    const double sc = diff * im;
    // ulp/2 and floor·ulp(mm) exactly as the slow path's divisions give them (powers of two;
    // the format's ulps are far from float64's range ends)
    const double l1 = ulp_scaled(at + E_in, p, emin, emax, -1) + E_in;
    const double l2 = fl * ulp_scaled(mm, p, emin, emax, 0);
    const double lim = l1 > l2 ? l1 : l2;
    const double rt = diff / lim;
    u_[k] = u;
    s_[k] = sc;
    r_[k] = rt;
    bin_[k] = (int32_t)bin_of(u, base, n_edges);
    const double all = t + r + a + s_in + E_in;  // finite iff every one is
    const uint64_t unw = (uint64_t)bits_of(J.a, AK, lo + k) == poison;
    const uint8_t ok = (uint8_t)((uint64_t)((all - all) == 0.0) & (unw ^ 1));
    ok_[k] = ok;
    int64_t bu, bs, br;
    std::memcpy(&bu, &u, 8);
    std::memcpy(&bs, &sc, 8);
    std::memcpy(&br, &rt, 8);
    bu = ok ? bu : -1;
    bs = ok ? bs : -1;
    br = (ok & HE) ? br : -1;
    mu = bu > mu ? bu : mu;
    ms = bs > ms ? bs : ms;
    mr = br > mr ? br : mr;
    over += (long long)(ok & (rt > 1.0) & HE);
    not_ok += ok ^ 1;
  }
  auto as_double = [](int64_t b) {
    double d;
    std::memcpy(&d, &b, 8);
    return b < 0 ? -1.0 : d;
  };
  return ChunkSums{as_double(mu), as_double(ms), as_double(mr), over, not_ok};
}

// sum of v over the ok lanes, in vector lanes (the order of a sum of ulps -- a mean -- is free)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
double masked_sum(const double* __restrict__ v, const uint8_t* __restrict__ ok, long n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (long k = 0; k < n; ++k) s += ok[k] ? v[k] : 0.0;
  return s;
}

// the scale max(|t - β|, |β|) of a run of columns (scale_at), NaN if either is
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
void beta_scale(const double* __restrict__ t, const double* __restrict__ b,
                double* __restrict__ out, long n) {
  for (long k = 0; k < n; ++k) {
    const double u = std::fabs(t[k] - b[k]), v = std::fabs(b[k]);
    const double m = u > v ? u : v;
    out[k] = ((u != u) | (v != v)) ? NAN : m;
  }
}

// the largest ordinal distance |ord(a) - ord(r)| of a chunk, a and r stored in the same format
// (normcheck.formats.Format.ordinal: sign-magnitude bits, ±0 both 0, ±inf one past the top);
// inf where one of the two is NaN, 0 where both are
template <typename T, uint32_t MAG, uint32_t INF, uint32_t SIGN>
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
double ordinal_max_bits(const T* __restrict__ A, const T* __restrict__ R, long n) {
  // in 32-bit lanes (|ord(a) - ord(r)| < 2^32 fits unsigned), with masks rather than branches
  // so that it vectorises; x > INF for x <= 0x7FFFFFFF is the top bit of INF - x
  constexpr int SH = sizeof(T) * 8 - 1;
  uint32_t best = 0, nan = 0;
  for (long k = 0; k < n; ++k) {
    const uint32_t a = A[k], r = R[k];
    const uint32_t am = a & MAG, rm = r & MAG;
    const uint32_t an = (INF - am) >> 31, rn = (INF - rm) >> 31;
    nan |= an ^ rn;
    // same sign: the magnitudes' difference; opposite signs: their sum (ord = ±magnitude)
    const uint32_t opp = 0u - (((a ^ r) >> SH) & 1u);
    const uint32_t d0 = ((am + rm) & opp) | ((std::max(am, rm) - std::min(am, rm)) & ~opp);
    const uint32_t d = d0 & ~(0u - (an | rn));
    best = std::max(best, d);
  }
  return nan ? INFINITY : (double)best;
}

template <int K>
double ordinal_max(const MeasureJob& J, long lo, long n) {
  if (K == F32)
    return ordinal_max_bits<uint32_t, 0x7FFFFFFFu, 0x7F800000u, 0x80000000u>(
        (const uint32_t*)J.a + lo, (const uint32_t*)J.r + lo, n);
  if (K == F16)
    return ordinal_max_bits<uint16_t, 0x7FFFu, 0x7C00u, 0x8000u>(
        (const uint16_t*)J.a + lo, (const uint16_t*)J.r + lo, n);
  return ordinal_max_bits<uint16_t, 0x7FFFu, 0x7F80u, 0x8000u>(
      (const uint16_t*)J.a + lo, (const uint16_t*)J.r + lo, n);
}

// the chunk's largest value mv (>= 0; -1: none) of v over the lanes with ok[k], merged into
// (best, at) with the first lane holding it: a larger value wins, an equal one at a smaller
// position
void merge_max(const double* v, const uint8_t* ok, long n, long c0, double mv, double& best,
               long& at) {
  if (mv < 0) return;
  if (mv < best || (mv == best && at >= 0 && at < c0)) return;
  for (long k = 0; k < n; ++k) {
    if (ok[k] && v[k] == mv) {
      if (mv > best || at < 0 || c0 + k < at) { best = mv; at = c0 + k; }
      return;
    }
  }
}

template <int RK, int AK>
void run_t(const MeasureJob& J, long lo, long hi, Partial& P) {
  const long base = edge_base(J);
  constexpr long C = 2048;
  double ub[C], sb[C], rb[C], scb[C];
  uint8_t okb[C];
  int32_t binb[C];
  long long* hist = P.hist.data();
  for (long c0 = lo; c0 < hi; c0 += C) {
    const long n = std::min(C, hi - c0);
    const double* sp = J.scale ? J.scale + c0 : nullptr;
    if (!J.scale && J.beta) {  // max(|t - β|, |β|), a run of columns at a time
      long col = c0 % J.cols;
      for (long k = 0; k < n;) {
        const long m = std::min(n - k, J.cols - col);
        beta_scale(J.t + c0 + k, J.beta + col, scb + k, m);
        k += m;
        col = 0;
      }
      sp = scb;
    }
    ChunkSums S;
    if (sp && J.E) S = pass_a<RK, AK, true, true>(J, c0, n, sp, ub, sb, rb, okb, binb, base);
    else if (sp) S = pass_a<RK, AK, true, false>(J, c0, n, sp, ub, sb, rb, okb, binb, base);
    else if (J.E) S = pass_a<RK, AK, false, true>(J, c0, n, sp, ub, sb, rb, okb, binb, base);
    else S = pass_a<RK, AK, false, false>(J, c0, n, sp, ub, sb, rb, okb, binb, base);
    // the chunk's outputs as if all were finite; run_slow then writes the others' own
    if (J.ulp) std::memcpy(J.ulp + c0, ub, n * 8);
    if (J.scaled) std::memcpy(J.scaled + c0, sb, n * 8);
    if (J.ratio) {
      if (J.E) std::memcpy(J.ratio + c0, rb, n * 8);
      else std::memset(J.ratio + c0, 0, n * 8);
    }
    if (J.cls) std::memset(J.cls + c0, FINITE, n);
    const long slow = S.not_ok;
    for (long k = 0; slow && k < n; ++k) {  // the elements that are not all finite, in order
      if (!okb[k]) run_slow<RK, AK>(J, c0 + k, c0 + k + 1, P);
    }
    // the finite ones' reductions: their maxima from pass A, then the first position of each
    merge_max(ub, okb, n, c0, S.max_u, P.max_ulp, P.argmax_ulp);
    merge_max(sb, okb, n, c0, S.max_s, P.max_scaled, P.argmax_scaled);
    if (J.E) {
      merge_max(rb, okb, n, c0, S.max_r, P.max_ratio, P.argmax_ratio);
      P.over += S.over;
    }
    P.sum_ulp += masked_sum(ub, okb, n);
    if (J.want_hist)
      for (long k = 0; k < n; ++k) hist[binb[k]] += okb[k];
    if (J.want_ordinal) P.max_ordinal = std::max(P.max_ordinal, ordinal_max<RK>(J, c0, n));
    P.classes[FINITE] += n - slow;
  }
}

// the kernel's values in the reference's format, or as float64 (measure.py converts any other
// kind to float64 first): 7 instantiations of the vector loops instead of 16 -- the library
// builds in a third of the time
template <int RK>
void run_a(const MeasureJob& J, long lo, long hi, Partial& P) {
  if (J.a_kind == RK) run_t<RK, RK>(J, lo, hi, P);
  else run_t<RK, F64>(J, lo, hi, P);
}

void run_plain(const MeasureJob& J, long lo, long hi, Partial& P) {
  switch (J.r_kind) {
    case F64: run_a<F64>(J, lo, hi, P); break;
    case F32: run_a<F32>(J, lo, hi, P); break;
    case F16: run_a<F16>(J, lo, hi, P); break;
    default: run_a<BF16>(J, lo, hi, P); break;
  }
}

void run_bounded(const MeasureJob& J, long lo, long hi, Partial& P);

void run(const MeasureJob& J, long lo, long hi, Partial& P) {
  if (J.bound) run_bounded(J, lo, hi, P);
  else run_plain(J, lo, hi, P);
}

}  // namespace

NC_EXPORT int nc_measure_job_size() { return (int)sizeof(MeasureJob); }

NC_EXPORT void nc_measure(MeasureJob* J) {
  const long n = J->n;
  int T = J->threads < 1 ? 1 : J->threads;
  if (n < 65536) T = 1;
  // chunks of about 2^16 elements (whole rows when the bound is formed here), handed out from a
  // shared counter so that a thread slowed by others on the machine leaves its share to the
  // rest; each chunk keeps its own reductions, merged below in chunk order: the same results
  // whichever thread measured which chunk
  long csize = 65536;
  if (J->bound) csize = std::max(1L, csize / J->cols) * J->cols;
  const long nchunks = std::max(1L, (n + csize - 1) / csize);
  std::vector<Partial> parts(nchunks);
  for (auto& P : parts) P.hist.assign(J->n_edges + 2, 0);
  long next = 0;
  auto work = [&] {
    for (;;) {
      const long c = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
      if (c >= nchunks) break;
      run(*J, c * csize, std::min(n, (c + 1) * csize), parts[c]);
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < std::min<long>(T, nchunks); ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  J->max_ulp = J->max_scaled = J->max_ratio = -1;
  J->argmax_ulp = J->argmax_scaled = J->argmax_ratio = -1;
  J->sum_ulp = 0;
  J->max_ordinal = 0;
  J->unwritten = J->over = J->inf_ulp = J->unbounded_rows = 0;
  for (int c = 0; c < NCLS; ++c) J->classes[c] = 0;
  for (int e = 0; e < J->n_edges + 2; ++e) J->hist[e] = 0;
  for (auto& P : parts) {  // in range order: the first maximum wins, as numpy's argmax
    if (P.max_ulp > J->max_ulp) { J->max_ulp = P.max_ulp; J->argmax_ulp = P.argmax_ulp; }
    if (P.max_scaled > J->max_scaled) { J->max_scaled = P.max_scaled; J->argmax_scaled = P.argmax_scaled; }
    if (P.max_ratio > J->max_ratio) { J->max_ratio = P.max_ratio; J->argmax_ratio = P.argmax_ratio; }
    J->sum_ulp += P.sum_ulp;
    J->max_ordinal = std::max(J->max_ordinal, P.max_ordinal);
    J->unwritten += P.unwritten;
    J->over += P.over;
    J->inf_ulp += P.inf_ulp;
    J->unbounded_rows += P.unbounded;
    for (int c = 0; c < NCLS; ++c) J->classes[c] += P.classes[c];
    if (!P.hist.empty())
      for (int e = 0; e < J->n_edges + 2; ++e) J->hist[e] += P.hist[e];
  }
}

// ------------------------------------------------------------------------------------------------
// The sound bound E of every element (normcheck.bounds.sound_bound, the exact reference): the
// same first-order analysis, term for term, per row then per element, threaded over rows.  Its
// sums run in vector lanes where numpy's are pairwise, so E differs from the numpy version in its
// last bits only (a bound with a factor-2 safety margin: the tests compare at 1e-12).
// ------------------------------------------------------------------------------------------------
namespace {

const double U = 0x1p-24, TINY = 0x1p-149;

inline double gamma_n(double n) { return n * U / (1.0 - n * U); }

inline double rho(double delta) {
  if (delta != delta) return NAN;  // np.minimum keeps NaN
  delta = delta < 1.0 ? delta : 1.0;
  return (delta >= 1.0 ? INFINITY : 1.0 / std::sqrt(1.0 - delta) - 1.0) + 4 * U;
}

// the least exponent of the lowest set bit over the finite nonzero values of x (1 << 30 if none),
// branch-free so that it vectorises: the lowest set bit L of the fraction field is read as a
// double exactly (2^52 + L - 2^52, L < 2^52) and its exponent taken; a zero field means the
// hidden bit, 52
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
int64_t low_bit_min(const double* __restrict__ x, int n) {
  int64_t low = 1 << 30;
  for (int j = 0; j < n; ++j) {
    uint64_t b;
    std::memcpy(&b, &x[j], 8);
    const int64_t ex = (int64_t)((b >> 52) & 0x7FF);
    const uint64_t m = b & 0xFFFFFFFFFFFFFULL;
    const uint64_t L = m & (0 - m);
    const uint64_t lb = 0x4330000000000000ULL | L;
    double dl;
    std::memcpy(&dl, &lb, 8);
    dl -= 0x1p52;
    uint64_t db;
    std::memcpy(&db, &dl, 8);
    const int64_t tz = m != 0 ? (int64_t)(db >> 52) - 1023 : 52;
    const int64_t v = (ex != 0 ? ex : 1) - 1075 + tz;
    const int64_t use = (int64_t)(ex != 0x7FF) & (int64_t)((b << 1) != 0);  // finite, nonzero
    const int64_t c = use != 0 ? v : (int64_t)1 << 30;
    low = c < low ? c : low;
  }
  return low;
}

// the same from the values as stored (fp32, fp16, bf16 bits: 32-bit lanes, eight to a vector):
// a value's lowest set bit is 2^((ex ? ex : 1) - bias - MB + tz), tz that of the fraction field
// read through an exact int -> float conversion (MB where the field is zero: the hidden bit)
template <typename T, int MB, int EB, int BIAS>
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
int64_t low_bit_min_bits(const T* __restrict__ x, int n) {
  int32_t low = 1 << 30;
  constexpr uint32_t FM = (1u << MB) - 1, EM = (1u << EB) - 1;
  for (int j = 0; j < n; ++j) {
    const uint32_t b = x[j];
    const int32_t ex = (int32_t)((b >> MB) & EM);
    const uint32_t m = b & FM;
    const uint32_t L = m & (0u - m);
    const float fl = (float)(int32_t)L;
    uint32_t fb;
    std::memcpy(&fb, &fl, 4);
    const int32_t tz = m != 0 ? (int32_t)(fb >> 23) - 127 : MB;
    const int32_t v = (ex != 0 ? ex : 1) - BIAS - MB + tz;
    const int32_t use = (int32_t)(ex != (int32_t)EM) & (int32_t)((b & (FM | (EM << MB))) != 0);
    const int32_t c = use != 0 ? v : 1 << 30;
    low = c < low ? c : low;
  }
  return low;
}

// low_bit_min of row i, from its stored bits where it has them (xrow: the row as float64)
inline int64_t low_bit_min_stored(const void* x, int kind, long i, int n, const double* xrow) {
  const long o = i * (long)n;
  if (kind == F32) return low_bit_min_bits<uint32_t, 23, 8, 127>((const uint32_t*)x + o, n);
  if (kind == F16) return low_bit_min_bits<uint16_t, 10, 5, 15>((const uint16_t*)x + o, n);
  if (kind == BF16) return low_bit_min_bits<uint16_t, 7, 8, 127>((const uint16_t*)x + o, n);
  return low_bit_min(xrow, n);
}

// whether any of n values is ±inf
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
int any_inf(const double* __restrict__ E, long n) {
  int inf = 0;
  for (long j = 0; j < n; ++j) inf |= std::fabs(E[j]) == INFINITY;
  return inf;
}

}  // namespace

struct BoundJob {
  int rows, cols;
  const void* x;        // rows x cols (x_kind): the rows the kernel normalises
  const void* x2;       // or null: the rows are x + x2, summed in float64 (a fused sum)
  int x_kind, x2_kind;
  const double* g;      // cols: γ' (γ, or 1+γ for Gemma), or null (1)
  const double* b;      // cols or null (0)
  double eps, safety;
  int centred, gemma;
  double* E;            // rows x cols
  int threads;
};

NC_EXPORT int nc_bound_job_size() { return (int)sizeof(BoundJob); }

namespace {

// E of each element of a row from its per-algorithm terms (e_mu, rho, r), branch-free so that it
// vectorises: the larger of the algorithms' bounds, inf where rho is, NaN where any is NaN
template <int K>
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
void element_bounds(const BoundJob& J, const double* __restrict__ x, double* __restrict__ E,
                    double mu_el, const double (*terms)[3]) {
  const int n = J.cols;
  const double* __restrict__ g = J.g;
  const double* __restrict__ b = J.b;
  const double safety = J.safety, gem = J.gemma ? U : 0.0;
  double em[K], rh[K], rr[K], rinf[K];
  for (int k = 0; k < K; ++k) {
    em[k] = terms[k][0]; rh[k] = terms[k][1]; rr[k] = terms[k][2];
    rinf[k] = std::isinf(rh[k]) ? 1.0 : 0.0;
  }
  for (int j = 0; j < n; ++j) {
    const double dj = x[j] - mu_el;
    const double ge = g ? g[j] : 1.0;
    const double bj = b ? std::fabs(b[j]) : 0.0;
    double best = 0.0, nan = 0.0;
    for (int k = 0; k < K; ++k) {
      const double ej = em[k] + U * (std::fabs(dj) + em[k]);
      const double gx = std::fabs(ge * dj * rr[k]);
      double Ej = std::fabs(ge) * rr[k] * ej * (1 + rh[k]) + gx * rh[k] + U * (3 * gx + bj) +
                  gem * gx + 4 * TINY;
      Ej = rinf[k] != 0.0 ? INFINITY : Ej;
      nan = Ej != Ej ? 1.0 : nan;
      best = k == 0 ? Ej : (Ej > best ? Ej : best);
    }
    E[j] = nan != 0.0 ? NAN : safety * best;
  }
}

// E of row i into E (cols of them); xrow and d: scratch of cols doubles
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
void bound_row(const BoundJob& J, long i, double* __restrict__ xrow, double* __restrict__ d_,
               double* E) {
  const int n = J.cols;
  const double nd = n;
  {
    const long o = i * (long)n;
    for (int j = 0; j < n; ++j) xrow[j] = load(J.x, J.x_kind, o + j);
    if (J.x2)
      for (int j = 0; j < n; ++j) xrow[j] += load(J.x2, J.x2_kind, o + j);
  }
  const double* x = xrow;
  double* d = d_;
  {
    const int64_t low = J.x2 ? low_bit_min(x, n) : low_bit_min_stored(J.x, J.x_kind, i, n, x);
    const double q = low < (1 << 30) ? std::ldexp(1.0, (int)std::min<int64_t>(low, 1023))
                                     : INFINITY;
    double terms[2][3];  // (e_mu, rho, r) per algorithm
    int K;
    double mu_el;  // the mean the per-element terms centre on (x.mean)
    if (J.centred) {
      double s = 0, sabs = 0, M = 0;
      int nan = 0;
#pragma omp simd reduction(+ : s, sabs) reduction(max : M) reduction(| : nan)
      for (int j = 0; j < n; ++j) {
        s += x[j];
        sabs += std::fabs(x[j]);
        M = std::max(M, std::fabs(x[j]));  // NaN skipped here, kept below (np.max)
        nan |= x[j] != x[j];
      }
      M = nan ? NAN : M;
      const double mu = s / nd;
      double S = 0;
#pragma omp simd reduction(+ : S)
      for (int j = 0; j < n; ++j) { d[j] = x[j] - mu; S += d[j] * d[j]; }
      const double var = S / nd, w = var + J.eps, r = 1.0 / std::sqrt(w);
      const bool exact = sabs < 0x1p24 * q;
      const double e_s = exact ? 0.0 : gamma_n(nd - 1) * sabs;
      const double e_mu = (e_s / nd + 2.01 * U * std::fabs(mu)) + 2 * TINY;
      double dS = 0, S_up = 0;
#pragma omp simd reduction(+ : dS, S_up)
      for (int j = 0; j < n; ++j) {
        const double ej = e_mu + U * (std::fabs(d[j]) + e_mu);
        dS += ej * (2 * std::fabs(d[j]) + ej);
        const double up = std::fabs(d[j]) + ej;
        S_up += up * up;
      }
      dS += (gamma_n(nd - 1) + U) * S_up + nd * TINY;
      const double dw = dS / nd + 2.01 * U * (S_up / nd) + U * (S_up / nd + J.eps);
      terms[0][0] = e_mu; terms[0][1] = rho(dw / w); terms[0][2] = r;
      const double e_w = U * M * ((nd + 1) / 2.0 + 4.0) + 2 * TINY;
      const double dS_w = 4 * e_w * std::sqrt(2.0 * nd * S) + gamma_n(nd + 3) * S +
                          nd * e_w * e_w + nd * TINY;
      const double dw_w = dS_w / nd + 2.01 * U * var + U * w;
      terms[1][0] = e_w; terms[1][1] = rho(dw_w / w); terms[1][2] = r;
      K = 2;
      mu_el = mu;
    } else {
      double Sq = 0;
#pragma omp simd reduction(+ : Sq)
      for (int j = 0; j < n; ++j) Sq += x[j] * x[j];
      const double w = Sq / nd + J.eps, r = 1.0 / std::sqrt(w);
      const bool exact = Sq < 0x1p24 * q * q;
      double e_S = exact ? 0.0 : gamma_n(nd - 1) * Sq;
      e_S = e_S + U * Sq + nd * TINY;
      const double dw = e_S / nd + 2.01 * U * Sq / nd + U * w;
      terms[0][0] = 0.0; terms[0][1] = rho(dw / w); terms[0][2] = r;
      K = 1;
      mu_el = 0.0;
    }
    if (K == 2) element_bounds<2>(J, x, E, mu_el, terms);
    else element_bounds<1>(J, x, E, mu_el, terms);
  }
}

void bound_rows(const BoundJob& J, int lo, int hi) {
  std::vector<double> xrow(J.cols), d(J.cols);
  for (int i = lo; i < hi; ++i) bound_row(J, i, xrow.data(), d.data(), J.E + (size_t)i * J.cols);
}

// the measurement of rows with their bound formed here, a block of rows at a time (E stays in
// cache, never stored): the same E, bit for bit, as bound_rows, then the h term as
// normcheck.bounds.sound_bound_of adds it, then the measurement of the block
void run_bounded(const MeasureJob& J, long lo, long hi, Partial& P) {
  const BoundJob& B = *J.bound;
  const long n = B.cols;
  const long r_lo = lo / n, r_hi = hi / n;  // whole rows (nc_measure splits so)
  const long per = std::max(1L, 8192 / n);
  std::vector<double> Eb(per * n), xrow(n), d(n);
  MeasureJob L = J;
  L.bound = nullptr;
  for (long r0 = r_lo; r0 < r_hi; r0 += per) {
    const long r1 = std::min(r_hi, r0 + per);
    for (long i = r0; i < r1; ++i) {
      double* E = Eb.data() + (i - r0) * n;
      bound_row(B, i, xrow.data(), d.data(), E);
      if (J.h_coef > 0) {
        const double* t = J.t + i * n;
        for (long j = 0; j < n; ++j)
          E[j] = E[j] + J.h_coef * std::fabs(t[j] - (J.h_beta ? J.h_beta[j] : 0.0));
      }
      P.unbounded += any_inf(E, n);
    }
    L.E = Eb.data();
    L.e_base = r0 * n;
    run_plain(L, r0 * n, r1 * n, P);
  }
}

}  // namespace

NC_EXPORT void nc_sound_bound(BoundJob* J) {
  int T = J->threads < 1 ? 1 : J->threads;
  if ((long)J->rows * J->cols < 65536) T = 1;
  T = std::min(T, J->rows);
  if (T <= 1) {
    bound_rows(*J, 0, J->rows);
    return;
  }
  std::vector<std::thread> pool;
  const int step = (J->rows + T - 1) / T;
  for (int k = 0; k < T; ++k) {
    int lo = k * step, hi = std::min(J->rows, lo + step);
    if (lo < hi) pool.emplace_back([=] { bound_rows(*J, lo, hi); });
  }
  for (auto& th : pool) th.join();
}

// ------------------------------------------------------------------------------------------------
// The signed error toward zero, per row: (t - a)·sign(t)/ulp(t) over the row's elements whose
// t and a are finite and a is written (not the poison), with the row's count -- positive where
// the kernel's value lies nearer zero than the exact one (a truncating or round-toward-zero store
// gives +0.5 ulp on average, round to nearest 0).  t = 0: any nonzero a is away from zero.
// Threaded over rows; each row's sum in element order (the numpy version's order).
// ------------------------------------------------------------------------------------------------
struct SignedJob {
  long rows, cols;
  const double* t;
  const void* a;
  int a_kind;
  int p, emin, emax;
  int check_poison;
  uint32_t poison;
  double* sum;       // rows of them, out
  long long* count;  // rows of them, out
  int threads;
};

namespace {

template <int AK>
void signed_rows_t(const SignedJob& J, long r0, long r1) {
  for (long r = r0; r < r1; ++r) {
    double s = 0.0;
    long long c = 0;
    const long base = r * J.cols;
    for (long j = 0; j < J.cols; ++j) {
      const long i = base + j;
      const double t = J.t[i], a = load(J.a, AK, i);
      const bool ok = std::isfinite(t) & std::isfinite(a) &
                      !(J.check_poison && bits_of(J.a, AK, i) == J.poison);
      if (!ok) continue;
      const double d = (t - a) * inv_ulp(t, J.p, J.emin, J.emax);
      s += t > 0.0 ? d : (t < 0.0 ? -d : -std::fabs(d));
      ++c;
    }
    J.sum[r] = s;
    J.count[r] = c;
  }
}

void signed_rows(const SignedJob& J, long r0, long r1) {
  switch (J.a_kind) {
    case F64: signed_rows_t<F64>(J, r0, r1); break;
    case F32: signed_rows_t<F32>(J, r0, r1); break;
    case F16: signed_rows_t<F16>(J, r0, r1); break;
    default: signed_rows_t<BF16>(J, r0, r1); break;
  }
}

}  // namespace

NC_EXPORT int nc_signed_job_size() { return (int)sizeof(SignedJob); }

NC_EXPORT void nc_signed_rows(SignedJob* J) {
  const long rows = J->rows;
  int T = J->threads < 1 ? 1 : J->threads;
  if (rows * J->cols < 65536) T = 1;
  long next = 0;
  const long step = std::max(1L, 16384L / std::max(1L, J->cols));
  auto work = [&] {
    for (;;) {
      const long r0 = __atomic_fetch_add(&next, step, __ATOMIC_RELAXED);
      if (r0 >= rows) break;
      signed_rows(*J, r0, std::min(rows, r0 + step));
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < T; ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}
