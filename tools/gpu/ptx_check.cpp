// ptx_check: runs Tessera's generated PTX (tsrc --emit=ptx) on a GPU through the CUDA driver API
// and compares each kernel it knows (saxpy, gemm, softmax, layer_norm) with a reference computed
// here on the CPU in double precision from the same (bf16-rounded) inputs.
//
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include ptx_check.cpp -o ptx_check -lcuda
//   ptx_check FILE.ptx...      (each file: one module; its `// kernel NAME: ...` lines list kernels)
//   PTX_CHECK_ONLY=NAME ptx_check FILE.ptx   (that kernel alone: a fault ends the process's context)
//
// The kernel ABI is codegen/nvptx/PtxKernel.h's: one by-value parameter holding the KernelArg
// array. Prints one line per kernel with the max relative error (max |got-ref| / max |ref|) and
// exits 1 when any kernel is above its tolerance or fails to load or launch.
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct KernelArg {  // codegen/cpu/CpuKernel.h
  void *data = nullptr;
  int64_t shape[8] = {};
  int64_t strides[8] = {};
  int64_t i = 0;
  double f = 0;
};
static_assert(sizeof(KernelArg) == 152, "KernelArg layout");

#define CK(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char *s_ = nullptr;                                                \
      cuGetErrorString(r_, &s_);                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); \
      throw 1;                                                                 \
    }                                                                          \
  } while (0)

uint16_t toBf16(float x) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct Kernel {
  std::string name;
  int threads = 128;
  long shared = 0;
  std::map<std::string, long> config;
  CUfunction fn = nullptr;
};

std::mt19937 rng(1234);
std::vector<float> randn(size_t n) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto &x : v) x = d(rng);
  return v;
}

struct Dev {
  CUdeviceptr p = 0;
  size_t bytes = 0;
  explicit Dev(size_t b) : bytes(b) { CK(cuMemAlloc(&p, b ? b : 1)); }
  ~Dev() { cuMemFree(p); }
  void put(const void *h) { CK(cuMemcpyHtoD(p, h, bytes)); }
  void get(void *h) { CK(cuMemcpyDtoH(h, p, bytes)); }
};

KernelArg tensorArg(const Dev &d, std::vector<int64_t> shape) {
  KernelArg a;
  a.data = reinterpret_cast<void *>(d.p);
  int64_t st = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    a.shape[i] = shape[i];
    a.strides[i] = st;
    st *= shape[i];
  }
  return a;
}

void launch(const Kernel &k, std::vector<KernelArg> args, unsigned gx, unsigned gy = 1, unsigned gz = 1) {
  if (k.shared > 48 * 1024) CK(cuFuncSetAttribute(k.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(k.shared)));
  void *params[] = {args.data()};
  CK(cuLaunchKernel(k.fn, gx, gy, gz, unsigned(k.threads), 1, 1, unsigned(k.shared), nullptr, params, nullptr));
  CK(cuCtxSynchronize());
}

double relErr(const std::vector<float> &got, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::fabs(double(got[i]) - ref[i]);
    if (!(e == e)) return INFINITY;
    num = std::max(num, e);
    den = std::max(den, std::fabs(ref[i]));
  }
  return den > 0 ? num / den : num;
}

long cfg(const Kernel &k, const char *n, long def) {
  auto it = k.config.find(n);
  return it == k.config.end() ? def : it->second;
}
unsigned cdiv(long a, long b) { return unsigned((a + b - 1) / b); }

double runSaxpy(const Kernel &k) {
  long n = 100003, BLOCK = cfg(k, "BLOCK", 1024);
  auto x = randn(n), y = randn(n);
  Dev dx(n * 4), dy(n * 4);
  dx.put(x.data());
  dy.put(y.data());
  KernelArg al;
  al.f = 2.5;
  launch(k, {tensorArg(dx, {n}), tensorArg(dy, {n}), al}, cdiv(n, BLOCK));
  std::vector<float> got(n);
  dy.get(got.data());
  std::vector<double> ref(n);
  for (long i = 0; i < n; ++i) ref[i] = 2.5 * double(x[i]) + double(y[i]);
  return relErr(got, ref);
}

double runGemm(const Kernel &k) {
  long M = 197, N = 131, K = 75, BM = cfg(k, "BM", 64), BN = cfg(k, "BN", 64);
  auto a = randn(M * K), b = randn(K * N);
  std::vector<uint16_t> ha(M * K), hb(K * N);
  for (long i = 0; i < M * K; ++i) { ha[i] = toBf16(a[i]); a[i] = fromBf16(ha[i]); }
  for (long i = 0; i < K * N; ++i) { hb[i] = toBf16(b[i]); b[i] = fromBf16(hb[i]); }
  Dev da(M * K * 2), db(K * N * 2), dc(M * N * 4);
  da.put(ha.data());
  db.put(hb.data());
  CK(cuMemsetD8(dc.p, 0xff, dc.bytes));  // NaN: any element left unwritten shows
  launch(k, {tensorArg(da, {M, K}), tensorArg(db, {K, N}), tensorArg(dc, {M, N})}, cdiv(M, BM), cdiv(N, BN));
  std::vector<float> got(M * N);
  dc.get(got.data());
  std::vector<double> ref(M * N, 0.0);
  for (long i = 0; i < M; ++i)
    for (long p = 0; p < K; ++p)
      for (long j = 0; j < N; ++j) ref[i * N + j] += double(a[i * K + p]) * double(b[p * N + j]);
  return relErr(got, ref);
}

double runSoftmax(const Kernel &k) {
  long M = 37, N = 1500, BM = cfg(k, "BM", 4);
  auto x = randn(M * N);
  std::vector<uint16_t> hx(M * N), hy(M * N);
  for (long i = 0; i < M * N; ++i) { hx[i] = toBf16(3 * x[i]); x[i] = fromBf16(hx[i]); }
  Dev dx(M * N * 2), dy(M * N * 2);
  dx.put(hx.data());
  launch(k, {tensorArg(dx, {M, N}), tensorArg(dy, {M, N})}, cdiv(M, BM));
  dy.get(hy.data());
  std::vector<float> got(M * N);
  std::vector<double> ref(M * N);
  for (long i = 0; i < M * N; ++i) got[i] = fromBf16(hy[i]);
  for (long r = 0; r < M; ++r) {
    double mx = -INFINITY, s = 0;
    for (long c = 0; c < N; ++c) mx = std::max(mx, double(x[r * N + c]));
    for (long c = 0; c < N; ++c) s += std::exp(double(x[r * N + c]) - mx);
    for (long c = 0; c < N; ++c) ref[r * N + c] = std::exp(double(x[r * N + c]) - mx) / s;
  }
  return relErr(got, ref);
}

double runLayerNorm(const Kernel &k) {
  long M = 37, N = 1500, BM = cfg(k, "BM", 4);
  auto x = randn(M * N), w = randn(N), bias = randn(N);
  std::vector<uint16_t> hx(M * N), hw(N), hb(N), hy(M * N);
  for (long i = 0; i < M * N; ++i) { hx[i] = toBf16(x[i] + 2.f); x[i] = fromBf16(hx[i]); }
  for (long i = 0; i < N; ++i) { hw[i] = toBf16(w[i]); w[i] = fromBf16(hw[i]); hb[i] = toBf16(bias[i]); bias[i] = fromBf16(hb[i]); }
  Dev dx(M * N * 2), dw(N * 2), db(N * 2), dy(M * N * 2), dm(M * 4), dr(M * 4);
  dx.put(hx.data());
  dw.put(hw.data());
  db.put(hb.data());
  KernelArg eps;
  eps.f = 1e-5;
  launch(k, {tensorArg(dx, {M, N}), tensorArg(dw, {N}), tensorArg(db, {N}), tensorArg(dy, {M, N}), tensorArg(dm, {M}),
             tensorArg(dr, {M}), eps},
         cdiv(M, BM));
  dy.get(hy.data());
  std::vector<float> got(M * N), gm(M), gr(M);
  dm.get(gm.data());
  dr.get(gr.data());
  for (long i = 0; i < M * N; ++i) got[i] = fromBf16(hy[i]);
  std::vector<double> ref(M * N), rm(M), rr(M);
  for (long r = 0; r < M; ++r) {
    double mu = 0, var = 0;
    for (long c = 0; c < N; ++c) mu += x[r * N + c];
    mu /= N;
    for (long c = 0; c < N; ++c) var += (x[r * N + c] - mu) * (x[r * N + c] - mu);
    var /= N;
    double rs = 1 / std::sqrt(var + 1e-5);
    rm[r] = mu;
    rr[r] = rs;
    for (long c = 0; c < N; ++c) ref[r * N + c] = (x[r * N + c] - mu) * rs * w[c] + bias[c];
  }
  return std::max(relErr(got, ref), std::max(relErr(gm, rm), relErr(gr, rr)));
}

// Non-causal attention over [BH, S, D] (the launch in tests/ptx/stdlib_kernels.tsr: BH=2,
// S=128, D=64, scale 0.125); O against softmax(scale QK^T)V, L against the natural log-sum-exp.
double runFlashFwd(const Kernel &k) {
  long BH = 2, S = 128, D = 64, BM = cfg(k, "BM", 64);
  double scale = 0.125;
  long n = BH * S * D;
  std::vector<float> q = randn(n), kk = randn(n), v = randn(n);
  std::vector<uint16_t> hq(n), hk(n), hv(n), ho(n);
  for (long i = 0; i < n; ++i) {
    hq[i] = toBf16(q[i]); q[i] = fromBf16(hq[i]);
    hk[i] = toBf16(kk[i]); kk[i] = fromBf16(hk[i]);
    hv[i] = toBf16(v[i]); v[i] = fromBf16(hv[i]);
  }
  Dev dq(n * 2), dk(n * 2), dv(n * 2), dout(n * 2), dl(BH * S * 4);
  dq.put(hq.data());
  dk.put(hk.data());
  dv.put(hv.data());
  KernelArg sc;
  sc.f = scale;
  launch(k, {tensorArg(dq, {BH, S, D}), tensorArg(dk, {BH, S, D}), tensorArg(dv, {BH, S, D}), tensorArg(dout, {BH, S, D}),
             tensorArg(dl, {BH, S}), sc},
         cdiv(S, BM), unsigned(BH));
  dout.get(ho.data());
  std::vector<float> got(n), gl(BH * S);
  dl.get(gl.data());
  for (long i = 0; i < n; ++i) got[i] = fromBf16(ho[i]);
  std::vector<double> ref(n), rl(BH * S), s(S);
  for (long b = 0; b < BH; ++b)
    for (long i = 0; i < S; ++i) {
      double mx = -INFINITY, l = 0;
      for (long j = 0; j < S; ++j) {
        double d = 0;
        for (long c = 0; c < D; ++c) d += double(q[(b * S + i) * D + c]) * kk[(b * S + j) * D + c];
        s[j] = scale * d;
        mx = std::max(mx, s[j]);
      }
      for (long j = 0; j < S; ++j) l += std::exp(s[j] - mx);
      rl[b * S + i] = mx + std::log(l);
      for (long c = 0; c < D; ++c) {
        double o = 0;
        for (long j = 0; j < S; ++j) o += std::exp(s[j] - mx) / l * v[(b * S + j) * D + c];
        ref[(b * S + i) * D + c] = o;
      }
    }
  return std::max(relErr(got, ref), relErr(gl, rl));
}

}  // namespace

int main(int argc, char **argv) {
  int failures = 0, ran = 0;
  try {
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    char devName[256];
    CK(cuDeviceGetName(devName, sizeof devName, dev));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    std::printf("device: %s\n", devName);
    for (int a = 1; a < argc; ++a) {
      std::ifstream in(argv[a]);
      std::stringstream ss;
      ss << in.rdbuf();
      std::string ptx = ss.str();
      std::vector<Kernel> ks;
      std::istringstream lines(ptx);
      for (std::string l; std::getline(lines, l);) {
        // "// kernel NAME: T threads, S bytes of dynamic shared memory, P KernelArg params; config A=1 B=2"
        if (l.rfind("// kernel ", 0) != 0) continue;
        Kernel k;
        std::istringstream ls(l.substr(10));
        ls >> k.name;
        k.name.pop_back();
        std::string w;
        ls >> k.threads >> w >> k.shared;  // "128 threads, 16384 bytes ..."
        if (const char *only = std::getenv("PTX_CHECK_ONLY"); only && k.name != only) continue;
        auto c = l.find("config");
        if (c != std::string::npos) {
          std::istringstream cs(l.substr(c + 6));
          for (std::string kv; cs >> kv;) {
            auto eq = kv.find('=');
            if (eq != std::string::npos) k.config[kv.substr(0, eq)] = std::atol(kv.c_str() + eq + 1);
          }
        }
        ks.push_back(k);
      }
      char log[16384] = {};
      CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
      void *vals[] = {log, reinterpret_cast<void *>(uintptr_t(sizeof log))};
      CUmodule mod;
      CUresult r = cuModuleLoadDataEx(&mod, ptx.c_str(), 2, opts, vals);
      if (r != CUDA_SUCCESS) {
        std::printf("%s: cuModuleLoadDataEx failed (%d): %s\n", argv[a], int(r), log);
        ++failures;
        continue;
      }
      for (Kernel &k : ks) {
        struct T { const char *prefix; double (*run)(const Kernel &); double tol; };
        // Tolerances: f32 arithmetic against a double reference; bf16 outputs round to 2^-8.
        static const T tests[] = {{"saxpy", runSaxpy, 1e-6}, {"gemm", runGemm, 1e-5},
                                  {"softmax", runSoftmax, 1e-2}, {"layer_norm", runLayerNorm, 1e-2},
                                  {"flash_attention_fwd", runFlashFwd, 2e-2}};
        for (const T &t : tests) {
          // Entry names are MODULE_KERNEL (tsrc): match the kernel part.
          std::string base = k.name;
          for (const char *mod : {"kernels_", "saxpy_", "gemm_"})
            if (base.rfind(mod, 0) == 0 && base.size() > std::strlen(mod)) { base = base.substr(std::strlen(mod)); break; }
          if (base.rfind(t.prefix, 0) != 0) continue;
          if (k.name.find("bwd") != std::string::npos || k.name.find("backward") != std::string::npos) continue;
          CK(cuModuleGetFunction(&k.fn, mod, k.name.c_str()));
          ++ran;
          try {
            double e = t.run(k);
            bool ok = e <= t.tol;
            std::printf("%-48s threads=%d shared=%ldB  max_rel_err=%.3e  %s\n", k.name.c_str(), k.threads, k.shared, e,
                        ok ? "OK" : "FAIL");
            if (!ok) ++failures;
          } catch (int) {
            std::printf("%-48s FAILED to run\n", k.name.c_str());
            ++failures;
            CK(cuCtxSynchronize());
          }
        }
      }
    }
  } catch (int) {
    return 2;
  }
  std::printf("ptx_check: %d kernel(s) run, %d failure(s)\n", ran, failures);
  return failures || ran == 0 ? 1 : 0;
}
