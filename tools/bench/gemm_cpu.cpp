// Micro benchmark of the host code generator: f32 GEMM (default 1024^3) through a hand-built
// tiled gemm tile function (tests/codegen/TileBuild.h's buildGemm) at several tile sizes, against
// PyTorch's CPU matmul (MKL or OpenBLAS) run in a Python subprocess with the same thread count.
//
//   gemm_cpu [--size N] [--threads T] [--reps R] [--python /usr/bin/python3] [--tiles 64x64x32,...]
//            [--dot-only 1]   (loads the tiles once, outside the k loop: the micro-kernel's speed)
//
// Prints GFLOP/s per tile size (best of R runs after a warm-up), the winner, and the ratio to
// PyTorch. Results are checked against a double-precision reference on sampled entries.
#include "../../tests/codegen/TileBuild.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>

using namespace tsr;
using namespace tsr::cgtest;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double torchGflops(const std::string &python, int64_t n, int threads, int reps) {
  std::ostringstream cmd;
  cmd << python << " -c '"
      << "import torch, time\n"
      << "torch.set_num_threads(" << threads << ")\n"
      << "a = torch.randn(" << n << ", " << n << "); b = torch.randn(" << n << ", " << n << ")\n"
      << "for _ in range(3): c = a @ b\n"
      << "best = 1e9\n"
      << "for _ in range(" << reps << "):\n"
      << "  t = time.perf_counter(); c = a @ b; best = min(best, time.perf_counter() - t)\n"
      << "print(2 * " << n << "**3 / best / 1e9)' 2>/dev/null";
  FILE *p = popen(cmd.str().c_str(), "r");
  if (!p) return 0;
  double g = 0;
  if (fscanf(p, "%lf", &g) != 1) g = 0;
  pclose(p);
  return g;
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = 1024;
  int threads = int(std::thread::hardware_concurrency());
  int reps = 5;
  std::string python = "/usr/bin/python3";
  std::string tiles = "32x64x32,64x64x32,64x128x32,128x128x32,64x256x64,128x64x64";
  bool dotOnly = false; // --dot-only 1: the k loop reuses the first tiles (the micro-kernel alone; wrong results)
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--size") n = std::stoll(v);
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--python") python = v;
    else if (a == "--tiles") tiles = v;
    else if (a == "--dot-only") dotOnly = v == "1";
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  auto A = rt::Tensor::empty({n, n}, DType::F32), Bm = rt::Tensor::empty({n, n}, DType::F32), C = rt::Tensor::zeros({n, n}, DType::F32);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n * n; ++i) {
    A.data<float>()[i] = u(rng);
    Bm.data<float>()[i] = u(rng);
  }
  std::printf("f32 GEMM %lldx%lldx%lld, %d threads\n", (long long)n, (long long)n, (long long)n, threads);
  double best = 0;
  std::string bestTile;
  std::stringstream ts(tiles);
  std::string tile;
  while (std::getline(ts, tile, ',')) {
    long long bm, bn, bk;
    if (std::sscanf(tile.c_str(), "%lldx%lldx%lld", &bm, &bn, &bk) != 3) continue;
    Function f("gemm_" + tile);
    buildGemm(f, bm, bn, bk, DType::F32, DType::F32, dotOnly);
    double t0 = now();
    auto k = codegen::compileForHost(f);
    double tc = now() - t0;
    codegen::KernelArg args[3] = {arg(A), arg(Bm), arg(C)};
    std::array<int64_t, 3> grid{(n + bn - 1) / bn, (n + bm - 1) / bm, 1};
    k->launch(args, 3, grid, threads);
    double tb = 1e9;
    for (int r = 0; r < reps; ++r) {
      double s = now();
      k->launch(args, 3, grid, threads);
      tb = std::min(tb, now() - s);
    }
    // Spot check against a double-precision dot product.
    double maxErr = 0;
    for (int q = 0; q < 64; ++q) {
      int64_t i = (q * 131) % n, j = (q * 977) % n;
      double ref = 0;
      for (int64_t kk = 0; kk < n; ++kk) ref += double(A.data<float>()[i * n + kk]) * Bm.data<float>()[kk * n + j];
      maxErr = std::max(maxErr, std::fabs(ref - C.data<float>()[i * n + j]));
    }
    double gf = 2.0 * n * n * n / tb / 1e9;
    std::printf("  tile %-12s %8.1f GFLOP/s  (%.2f ms, compile %.0f ms, max abs err %.1e)\n", tile.c_str(), gf, tb * 1e3, tc * 1e3, maxErr);
    if (maxErr > 1e-2 && !dotOnly) std::printf("    WRONG RESULT\n");
    else if (gf > best) { best = gf; bestTile = tile; }
  }
  {
    // Launch overhead: a kernel of 2*threads programs that each store one element.
    Function f("tiny");
    Value *o = f.addParam("o", Type::tensor(1, DType::F32));
    TB t{f, f.body};
    t.storeBox(o, {t.pid(0)}, {0}, t.cst(1.0, DType::F32));
    auto k = codegen::compileForHost(f);
    auto O = rt::Tensor::zeros({2 * int64_t(threads)}, DType::F32);
    codegen::KernelArg args[1] = {arg(O)};
    const int iters = 2000;
    double s = now();
    for (int i = 0; i < iters; ++i) k->launch(args, 1, {2 * int64_t(threads), 1, 1}, threads);
    std::printf("launch overhead (%d programs on %d threads): %.1f us\n", 2 * threads, threads, (now() - s) / iters * 1e6);
  }
  double tg = torchGflops(python, n, threads, reps);
  std::printf("best tile %s: %.1f GFLOP/s\n", bestTile.c_str(), best);
  if (tg > 0) std::printf("torch (%s): %.1f GFLOP/s; tessera / torch = %.2f\n", python.c_str(), tg, best / tg);
  else std::printf("torch: not available from %s\n", python.c_str());
  return 0;
}
