// Convolution and pooling loops (ConvPool.h states the semantics and their sources).
#include "ir/eval/ConvPool.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

namespace tsr::ir::eval {

namespace {

int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The geometry padded to 3 spatial axes (leading axes of extent 1), so that one loop nest serves
// 1-d, 2-d and 3-d windows.
struct Geo {
  int64_t N = 1, C = 1, M = 1;
  int64_t S[3] = {1, 1, 1}, O[3] = {1, 1, 1}, K[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  int64_t plane() const { return S[0] * S[1] * S[2]; }
  int64_t oplane() const { return O[0] * O[1] * O[2]; }
  int64_t taps() const { return K[0] * K[1] * K[2]; }
  // The outputs o along axis a whose input position o*st + k*dl - pb lies in [0, S): [lo, hi).
  void range(int a, int64_t k, int64_t &lo, int64_t &hi) const {
    const int64_t off = k * dl[a] - pb[a];
    lo = std::max<int64_t>(0, floorDiv(-off + st[a] - 1, st[a]));
    hi = std::min<int64_t>(O[a], floorDiv(S[a] - 1 - off, st[a]) + 1);
    if (hi < lo) hi = lo;
  }
};

Geo geoOf(const WindowSpec &s) {
  Geo g;
  const size_t n = s.kernel.size(), lead = 3 - n;
  g.N = s.x[0];
  g.C = s.x[1];
  g.M = s.out[1];
  for (size_t i = 0; i < n; ++i) {
    g.S[lead + i] = s.x[2 + i];
    g.O[lead + i] = s.out[2 + i];
    g.K[lead + i] = s.kernel[i];
    g.st[lead + i] = s.strides[i];
    g.dl[lead + i] = s.dilations.empty() ? 1 : s.dilations[i];
    g.pb[lead + i] = s.pads[i];
    g.pe[lead + i] = s.pads[n + i];
  }
  return g;
}

// Calls f(outputOffset, inputOffset) for every (output, input) pair of one kernel tap
// (k0, k1, k2), the last axis's pairs as one strided run: f(yo, xi, count, xstride).
template <class F> void tapPairs(const Geo &g, int64_t k0, int64_t k1, int64_t k2, F &&f) {
  int64_t lo0, hi0, lo1, hi1, lo2, hi2;
  g.range(0, k0, lo0, hi0);
  g.range(1, k1, lo1, hi1);
  g.range(2, k2, lo2, hi2);
  if (lo2 >= hi2) return;
  for (int64_t o0 = lo0; o0 < hi0; ++o0) {
    const int64_t i0 = o0 * g.st[0] + k0 * g.dl[0] - g.pb[0];
    for (int64_t o1 = lo1; o1 < hi1; ++o1) {
      const int64_t i1 = o1 * g.st[1] + k1 * g.dl[1] - g.pb[1];
      const int64_t i2 = lo2 * g.st[2] + k2 * g.dl[2] - g.pb[2];
      f((o0 * g.O[1] + o1) * g.O[2] + lo2, (i0 * g.S[1] + i1) * g.S[2] + i2, hi2 - lo2, g.st[2]);
    }
  }
}

// Calls f(outputIndex, start[3]) for every output position of one plane, start being the window's
// first input position per axis (may be negative: in the padding).
template <class F> void windows(const Geo &g, F &&f) {
  int64_t o = 0;
  for (int64_t o0 = 0; o0 < g.O[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.O[1]; ++o1)
      for (int64_t o2 = 0; o2 < g.O[2]; ++o2, ++o) {
        const int64_t start[3] = {o0 * g.st[0] - g.pb[0], o1 * g.st[1] - g.pb[1], o2 * g.st[2] - g.pb[2]};
        f(o, start);
      }
}

// The flat offset (in the plane) of each window's first maximum of x, or -1 if the window has
// no element inside the input.
void argmaxes(const Geo &g, const double *xp, std::vector<int64_t> &best) {
  best.assign(size_t(g.oplane()), -1);
  windows(g, [&](int64_t o, const int64_t *st) {
    double bv = -std::numeric_limits<double>::infinity();
    int64_t bi = -1;
    for (int64_t k0 = 0; k0 < g.K[0]; ++k0) {
      const int64_t i0 = st[0] + k0 * g.dl[0];
      if (i0 < 0 || i0 >= g.S[0]) continue;
      for (int64_t k1 = 0; k1 < g.K[1]; ++k1) {
        const int64_t i1 = st[1] + k1 * g.dl[1];
        if (i1 < 0 || i1 >= g.S[1]) continue;
        for (int64_t k2 = 0; k2 < g.K[2]; ++k2) {
          const int64_t i2 = st[2] + k2 * g.dl[2];
          if (i2 < 0 || i2 >= g.S[2]) continue;
          const int64_t i = (i0 * g.S[1] + i1) * g.S[2] + i2;
          const double v = xp[i];
          // The first maximum; a NaN wins (and the first NaN stays), as PyTorch's kernels.
          if (bi < 0 || (!std::isnan(bv) && (v > bv || std::isnan(v)))) {
            bv = v;
            bi = i;
          }
        }
      }
    }
    best[size_t(o)] = bi;
  });
}

// avg_pool's divisor of one window (PyTorch's: with count_include_pad the window clipped to the
// padded extent, else to the input).
double divisor(const Geo &g, const int64_t *st, bool includePad) {
  double d = 1;
  for (int a = 0; a < 3; ++a) {
    int64_t lo = st[a], hi = std::min(st[a] + g.K[a], g.S[a] + g.pe[a]);
    if (!includePad) {
      lo = std::max<int64_t>(lo, 0);
      hi = std::min(hi, g.S[a]);
    }
    d *= double(std::max<int64_t>(0, hi - lo));
  }
  return d;
}

// Runs f(i) for i in [0, count) on the host's cores (at most 16 threads) when the work, counted
// in multiply-adds, is worth the threads; tasks write disjoint outputs, so results do not depend
// on the thread count.
template <class F> void parallelFor(int64_t count, double workPerItem, F &&f) {
  const int64_t hw = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
  const int64_t threads = std::min<int64_t>({hw, count, 16});
  if (threads <= 1 || workPerItem * double(count) < 1e6) {
    for (int64_t i = 0; i < count; ++i) f(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t i = next++; i < count; i = next++) f(i);
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto &t : pool) t.join();
}

} // namespace

namespace {

// y_i[j] += w_i * c[j] for four rows i: the inner loop of convGemm. Compiled for the host's vector
// units as well as for baseline x86-64 (GCC's function multiversioning picks one at load time),
// since a build for the baseline alone uses 2-wide SSE2 and no fused multiply-add.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#endif
void axpy4(const double *__restrict c, double *__restrict y0, double *__restrict y1, double *__restrict y2, double *__restrict y3,
           double w0, double w1, double w2, double w3, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const double v = c[j];
    y0[j] += w0 * v;
    y1[j] += w1 * v;
    y2[j] += w2 * v;
    y3[j] += w3 * v;
  }
}

// conv as im2col and a matrix product, per example and group: the windows' columns
// cols[c * T + t, o] (zero where a tap reads the padding), then y[m, :] = sum_kk w[m, kk] cols[kk, :]
// four output channels at a time over blocks of 512 outputs, so that each column row loaded
// serves four rows of y held in L1 and the inner loops are long and contiguous (vectorized).
void convGemm(const Geo &g, int64_t groups, const double *x, const double *w, double *y) {
  const int64_t Cg = g.C / groups, Mg = g.M / groups, P = g.plane(), OP = g.oplane(), T = g.taps(), KK = Cg * T;
  constexpr int64_t kBlock = 512;
  parallelFor(g.N * groups, double(Mg * KK * OP), [&](int64_t ng) {
    const int64_t n = ng / groups, grp = ng % groups;
    std::vector<double> cols(size_t(KK * OP), 0.0);
    for (int64_t c = 0; c < Cg; ++c) {
      const double *xp = x + (n * g.C + grp * Cg + c) * P;
      for (int64_t k0 = 0, t = 0; k0 < g.K[0]; ++k0)
        for (int64_t k1 = 0; k1 < g.K[1]; ++k1)
          for (int64_t k2 = 0; k2 < g.K[2]; ++k2, ++t) {
            double *col = cols.data() + (c * T + t) * OP;
            tapPairs(g, k0, k1, k2, [&](int64_t yo, int64_t xi, int64_t cnt, int64_t xs) {
              for (int64_t j = 0; j < cnt; ++j) col[yo + j] = xp[xi + j * xs];
            });
          }
    }
    for (int64_t m0 = 0; m0 < Mg; m0 += 4) {
      const int64_t mb = std::min<int64_t>(4, Mg - m0);
      double *yr[4];
      const double *wr[4];
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t m = grp * Mg + m0 + std::min(i, mb - 1);
        yr[i] = y + (n * g.M + m) * OP;
        wr[i] = w + m * KK;
      }
      for (int64_t i = 0; i < mb; ++i) std::fill(yr[i], yr[i] + OP, 0.0);
      for (int64_t j0 = 0; j0 < OP; j0 += kBlock) {
        const int64_t jn = std::min(kBlock, OP - j0);
        for (int64_t kk = 0; kk < KK; ++kk) {
          const double *__restrict cr = cols.data() + kk * OP + j0;
          if (mb == 4) {
            axpy4(cr, yr[0] + j0, yr[1] + j0, yr[2] + j0, yr[3] + j0, wr[0][kk], wr[1][kk], wr[2][kk], wr[3][kk], jn);
          } else {
            for (int64_t i = 0; i < mb; ++i) {
              double *__restrict yi = yr[i] + j0;
              const double wi = wr[i][kk];
              for (int64_t j = 0; j < jn; ++j) yi[j] += wi * cr[j];
            }
          }
        }
      }
    }
  });
}

} // namespace

void conv(const WindowSpec &s, int64_t groups, const double *x, const double *w, double *y) {
  const Geo g = geoOf(s);
  const int64_t Cg = g.C / groups, Mg = g.M / groups, P = g.plane(), OP = g.oplane(), T = g.taps();
  // A weight gradient (conv of x by the output's cotangent) has long kernel rows and short output
  // rows: there each output element is a dot product along the kernel's last axis instead.
  // Otherwise im2col and a matrix product, while the columns stay small (64 MiB per thread).
  const bool dotRows = g.K[2] > g.O[2];
  if (!dotRows && Cg * T * OP <= (int64_t(8) << 20)) return convGemm(g, groups, x, w, y);
  parallelFor(g.N * g.M, double(Cg * T * OP), [&](int64_t nm) {
    const int64_t n = nm / g.M, m = nm % g.M, grp = m / Mg;
    double *yp = y + nm * OP;
    std::fill(yp, yp + OP, 0.0);
    for (int64_t c = 0; c < Cg; ++c) {
      const double *xp = x + (n * g.C + grp * Cg + c) * P;
      const double *wk = w + (m * Cg + c) * T;
      if (!dotRows) {
        for (int64_t k0 = 0, t = 0; k0 < g.K[0]; ++k0)
          for (int64_t k1 = 0; k1 < g.K[1]; ++k1)
            for (int64_t k2 = 0; k2 < g.K[2]; ++k2, ++t) {
              const double wv = wk[t];
              tapPairs(g, k0, k1, k2, [&](int64_t yo, int64_t xi, int64_t cnt, int64_t xs) {
                double *__restrict yr = yp + yo;
                const double *__restrict xr = xp + xi;
                if (xs == 1)
                  for (int64_t j = 0; j < cnt; ++j) yr[j] += wv * xr[j];
                else
                  for (int64_t j = 0; j < cnt; ++j) yr[j] += wv * xr[j * xs];
              });
            }
        continue;
      }
      for (int64_t k0 = 0; k0 < g.K[0]; ++k0)
        for (int64_t k1 = 0; k1 < g.K[1]; ++k1) {
          const double *wr = wk + (k0 * g.K[1] + k1) * g.K[2];
          int64_t lo0, hi0, lo1, hi1;
          g.range(0, k0, lo0, hi0);
          g.range(1, k1, lo1, hi1);
          for (int64_t o0 = lo0; o0 < hi0; ++o0)
            for (int64_t o1 = lo1; o1 < hi1; ++o1) {
              const int64_t i0 = o0 * g.st[0] + k0 * g.dl[0] - g.pb[0], i1 = o1 * g.st[1] + k1 * g.dl[1] - g.pb[1];
              const double *xrow = xp + (i0 * g.S[1] + i1) * g.S[2];
              double *yrow = yp + (o0 * g.O[1] + o1) * g.O[2];
              const int64_t d = g.dl[2];
              for (int64_t o2 = 0; o2 < g.O[2]; ++o2) {
                const int64_t base = o2 * g.st[2] - g.pb[2];
                const int64_t lo = std::max<int64_t>(0, floorDiv(-base + d - 1, d));
                const int64_t hi = std::min<int64_t>(g.K[2], floorDiv(g.S[2] - 1 - base, d) + 1);
                double acc = 0;
                const double *xr = xrow + base;
                if (d == 1)
                  for (int64_t k = lo; k < hi; ++k) acc += wr[k] * xr[k];
                else
                  for (int64_t k = lo; k < hi; ++k) acc += wr[k] * xr[k * d];
                yrow[o2] += acc;
              }
            }
        }
    }
  });
}

void convTranspose(const WindowSpec &s, int64_t groups, const double *x, const double *w, double *y) {
  // y[o] += x[i] * w[k] where o = i*st + k*dl - pb: the pairs of conv with the roles of input and
  // output swapped, so tapPairs runs over a geometry whose "input" is y and "output" is x. One
  // output plane per task, so that tasks write disjoint memory.
  const Geo g = geoOf(s);
  const int64_t C = g.C, M = g.M, Cg = C / groups, Mg = M / groups;
  Geo r = g;
  for (int a = 0; a < 3; ++a) {
    r.S[a] = g.O[a];
    r.O[a] = g.S[a];
  }
  const int64_t P = g.plane(), OP = g.oplane(), T = g.taps();
  parallelFor(g.N * M, double(Cg * T * P), [&](int64_t nm) {
    const int64_t n = nm / M, mo = nm % M, grp = mo / Mg, m = mo % Mg;
    double *yp = y + nm * OP;
    std::fill(yp, yp + OP, 0.0);
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
      const double *xp = x + (n * C + c) * P;
      const double *wk = w + (c * Mg + m) * T;
      for (int64_t k0 = 0, t = 0; k0 < g.K[0]; ++k0)
        for (int64_t k1 = 0; k1 < g.K[1]; ++k1)
          for (int64_t k2 = 0; k2 < g.K[2]; ++k2, ++t) {
            const double wv = wk[t];
            tapPairs(r, k0, k1, k2, [&](int64_t xo, int64_t yi, int64_t cnt, int64_t ys) {
              const double *__restrict xr = xp + xo;
              double *__restrict yr = yp + yi;
              if (ys == 1)
                for (int64_t j = 0; j < cnt; ++j) yr[j] += wv * xr[j];
              else
                for (int64_t j = 0; j < cnt; ++j) yr[j * ys] += wv * xr[j];
            });
          }
    }
  });
}

void maxPool(const WindowSpec &s, const double *x, const double *t, double *y) {
  const Geo g = geoOf(s);
  const int64_t P = g.plane(), OP = g.oplane();
  parallelFor(g.N * g.C, double(OP * g.taps()), [&](int64_t p) {
    std::vector<int64_t> best;
    argmaxes(g, x + p * P, best);
    const double *src = (t ? t : x) + p * P;
    for (int64_t o = 0; o < OP; ++o) {
      const int64_t b = best[size_t(o)];
      y[p * OP + o] = b >= 0 ? src[b] : t ? 0.0 : -std::numeric_limits<double>::infinity();
    }
  });
}

void maxPoolGrad(const WindowSpec &s, const double *x, const double *g_, double *gx) {
  const Geo g = geoOf(s);
  const int64_t P = g.plane(), OP = g.oplane();
  parallelFor(g.N * g.C, double(OP * g.taps()), [&](int64_t p) {
    std::vector<int64_t> best;
    argmaxes(g, x + p * P, best);
    std::fill(gx + p * P, gx + (p + 1) * P, 0.0);
    for (int64_t o = 0; o < OP; ++o)
      if (best[size_t(o)] >= 0) gx[p * P + best[size_t(o)]] += g_[p * OP + o];
  });
}

namespace {
// Calls f(inputOffset) for each element of a window inside the input.
template <class F> void windowElems(const Geo &g, const int64_t *st, F &&f) {
  for (int64_t i0 = std::max<int64_t>(st[0], 0); i0 < std::min(st[0] + g.K[0], g.S[0]); ++i0)
    for (int64_t i1 = std::max<int64_t>(st[1], 0); i1 < std::min(st[1] + g.K[1], g.S[1]); ++i1)
      for (int64_t i2 = std::max<int64_t>(st[2], 0); i2 < std::min(st[2] + g.K[2], g.S[2]); ++i2) f((i0 * g.S[1] + i1) * g.S[2] + i2);
}
} // namespace

void avgPool(const WindowSpec &s, bool countIncludePad, const double *x, double *y) {
  const Geo g = geoOf(s);
  const int64_t P = g.plane(), OP = g.oplane();
  for (int64_t p = 0; p < g.N * g.C; ++p) {
    const double *xp = x + p * P;
    windows(g, [&](int64_t o, const int64_t *st) {
      double sum = 0;
      windowElems(g, st, [&](int64_t i) { sum += xp[i]; });
      const double d = divisor(g, st, countIncludePad);
      y[p * OP + o] = d > 0 ? sum / d : std::numeric_limits<double>::quiet_NaN();
    });
  }
}

void avgPoolGrad(const WindowSpec &s, bool countIncludePad, const double *g_, double *gx) {
  const Geo g = geoOf(s);
  const int64_t P = g.plane(), OP = g.oplane();
  std::fill(gx, gx + g.N * g.C * P, 0.0);
  for (int64_t p = 0; p < g.N * g.C; ++p) {
    double *gp = gx + p * P;
    windows(g, [&](int64_t o, const int64_t *st) {
      const double d = divisor(g, st, countIncludePad);
      if (d <= 0) return;
      const double v = g_[p * OP + o] / d;
      windowElems(g, st, [&](int64_t i) { gp[i] += v; });
    });
  }
}

} // namespace tsr::ir::eval
