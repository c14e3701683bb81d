// The GPU backend's batch compilation (CudaBackend::compileAll) against the fake driver
// (fake_libcuda.cpp, through TSR_LIBCUDA), with the real PTX compiler (codegen/nvptx) and no
// persistent cache (TSR_NO_CACHE=1):
//   - the batch's PTX is byte for byte the PTX of compiling each program alone, one after the
//     other (compileToPtx), and every program of the batch is loaded and found in its module;
//   - the batch compiles concurrently: two compilations are in flight at once. The serial
//     implementation (the base class's StepBackend::compileAll, called on the same backend) is
//     the negative control: it never has two in flight, and the check must fail for it;
//   - a program that fails to compile is a null entry, and the others are still loaded;
//   - a program given twice in one batch compiles once.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "codegen/nvptx/PtxKernel.h"
#include "exec/cuda/CudaBackend.h"
#include "exec/cuda/NvptxCompiler.h"
#include "ir/tile/TileText.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace tsr;

namespace {

// A scaling program (one constant differs between them, so each has its own text) and two row
// programs of several ops (layer_norm's and softmax's, as the CPU's row fusion makes them).
std::string scaleProgram(int k) {
  return "tile @scale" + std::to_string(k) + "(%out: tensor<1, f32>, %in0: tensor<1, f32>) grid 1 {\n"
         "  %2 = constant {value = 1024, dtype = dtype i64} : i64\n"
         "  %3 = program_id {axis = 0} : i64\n"
         "  %4 = mul %3, %2 : i64\n"
         "  %5 = load_box %in0, %4 {box = [1024]} : tile<1024xf32>\n"
         "  %6 = constant {value = " + std::to_string(k) + ".5, dtype = dtype f32, shape = [1024]} : tile<1024xf32>\n"
         "  %7 = mul %5, %6 : tile<1024xf32>\n"
         "  store_box %out, %4, %7 {box = [1024]}\n"
         "}\n";
}

const char *kRows = R"(tile @layer_norm_row(%out: tensor<2, f32>, %in0: tensor<2, f32>, %in1: tensor<2, f32>, %in2: tensor<2, f32>) grid 1 {
  %4 = constant {value = 0, dtype = dtype i64} : i64
  %5 = constant {value = 1, dtype = dtype i64} : i64
  %6 = program_id {axis = 0} : i64
  %7 = mul %6, %5 : i64
  %8 = load_box %in0, %7, %4 {box = [1, 1024]} : tile<1x1024xf32>
  %9 = reduce_sum %8 {axis = 1} : tile<1xf32>
  %10 = expand_dims %9 {axis = 1} : tile<1x1xf32>
  %11 = constant {value = 1024.0, dtype = dtype f32, shape = [1, 1]} : tile<1x1xf32>
  %12 = div %10, %11 : tile<1x1xf32>
  %13 = broadcast %12 {shape = [1, 1024]} : tile<1x1024xf32>
  %14 = sub %8, %13 : tile<1x1024xf32>
  %15 = mul %14, %14 : tile<1x1024xf32>
  %16 = reduce_sum %15 {axis = 1} : tile<1xf32>
  %17 = expand_dims %16 {axis = 1} : tile<1x1xf32>
  %18 = div %17, %11 : tile<1x1xf32>
  %19 = constant {value = 9.999999747378752e-06, dtype = dtype f32, shape = [1, 1]} : tile<1x1xf32>
  %20 = add %18, %19 : tile<1x1xf32>
  %21 = rsqrt %20 : tile<1x1xf32>
  %22 = broadcast %21 {shape = [1, 1024]} : tile<1x1024xf32>
  %23 = mul %14, %22 : tile<1x1024xf32>
  %24 = constant {value = 0, dtype = dtype i64} : i64
  %25 = load_box %in1, %24, %4 {box = [1, 1024]} : tile<1x1024xf32>
  %26 = mul %23, %25 : tile<1x1024xf32>
  %27 = constant {value = 0, dtype = dtype i64} : i64
  %28 = load_box %in2, %27, %4 {box = [1, 1024]} : tile<1x1024xf32>
  %29 = add %26, %28 : tile<1x1024xf32>
  store_box %out, %7, %4, %29 {box = [1, 1024]}
}

tile @softmax_row(%out: tensor<2, f32>, %in0: tensor<2, f32>) grid 1 {
  %2 = constant {value = 0, dtype = dtype i64} : i64
  %3 = constant {value = 1, dtype = dtype i64} : i64
  %4 = program_id {axis = 0} : i64
  %5 = mul %4, %3 : i64
  %6 = load_box %in0, %5, %2 {box = [1, 1024]} : tile<1x1024xf32>
  %7 = reduce_max %6 {axis = 1} : tile<1xf32>
  %8 = expand_dims %7 {axis = 1} : tile<1x1xf32>
  %9 = broadcast %8 {shape = [1, 1024]} : tile<1x1024xf32>
  %10 = sub %6, %9 : tile<1x1024xf32>
  %11 = exp %10 : tile<1x1024xf32>
  %12 = reduce_sum %11 {axis = 1} : tile<1xf32>
  %13 = expand_dims %12 {axis = 1} : tile<1x1xf32>
  %14 = broadcast %13 {shape = [1, 1024]} : tile<1x1024xf32>
  %15 = div %11, %14 : tile<1x1024xf32>
  store_box %out, %5, %2, %15 {box = [1, 1024]}
}
)";

std::unique_ptr<tile::Module> programs(int scales) {
  std::string text = kRows;
  for (int k = 0; k < scales; ++k) text += "\n" + scaleProgram(k);
  return tile::parseTileModule(text);
}

// nvptxSource() with a record of what it compiled, and a meeting point: a compilation waits
// (up to `patience`) until another one is in flight, so that a concurrent batch proves itself
// at once and a serial one shows as never having two at a time.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  int inFlight = 0, most = 0, calls = 0;
  std::map<std::string, std::string> ptx; // by function name
  std::chrono::milliseconds patience{2000};
  std::string failing;                    // a function name whose compilation throws

  exec::PtxSource source() {
    exec::PtxSource s = exec::nvptxSource();
    auto real = s.compile;
    s.compile = [this, real](const tile::Function &fn, const std::string &arch) {
      {
        std::unique_lock<std::mutex> lock(mu);
        ++calls;
        ++inFlight;
        most = std::max(most, inFlight);
        cv.notify_all();
        cv.wait_for(lock, patience, [&] { return inFlight >= 2 || most >= 2; });
      }
      struct Leave {
        Recorder &r;
        ~Leave() {
          std::lock_guard<std::mutex> lock(r.mu);
          --r.inFlight;
        }
      } leave{*this};
      if (fn.name == failing) throw std::runtime_error("planted failure of " + fn.name);
      exec::CompiledPtx c = real(fn, arch);
      std::lock_guard<std::mutex> lock(mu);
      ptx[fn.name] = c.ptx;
      return c;
    };
    return s;
  }
};

std::vector<exec::CompileRequest> requestsOf(const tile::Module &m) {
  std::vector<exec::CompileRequest> r;
  for (const auto &f : m.functions) r.push_back({f.get(), exec::CompileHints{}});
  return r;
}

} // namespace

TEST_CASE("compileAll: the batch's PTX is the serial PTX, compiled concurrently and loaded") {
  auto m = programs(6);
  Recorder rec;
  auto backend = exec::cudaBackend("cuda:0", rec.source());
  REQUIRE(backend->arch() == "sm_90");
  const auto codes = backend->compileAll(requestsOf(*m));
  REQUIRE(codes.size() == m->functions.size());
  for (size_t i = 0; i < codes.size(); ++i) CHECK_MESSAGE(codes[i] != nullptr, m->functions[i]->name);
  CHECK(rec.calls == int(m->functions.size()));
  if (std::thread::hardware_concurrency() >= 2) CHECK(rec.most >= 2);
  codegen::nvptx::PtxOptions opts;
  opts.arch = "sm_90";
  for (const auto &f : m->functions) {
    REQUIRE(rec.ptx.count(f->name));
    CHECK_MESSAGE(rec.ptx[f->name] == codegen::nvptx::compileToPtx({f.get()}, opts).ptx, f->name);
  }
}

TEST_CASE("negative control: the serial compileAll never has two compilations in flight") {
  auto m = programs(3);
  Recorder rec;
  rec.patience = std::chrono::milliseconds(200);
  auto backend = exec::cudaBackend("cuda:0", rec.source());
  const auto codes = backend->exec::StepBackend::compileAll(requestsOf(*m));
  for (const auto &c : codes) CHECK(c != nullptr);
  CHECK(rec.most == 1); // what the concurrency check above would reject
}

TEST_CASE("compileAll: a failing program is a null entry; the rest load; a repeated text compiles once") {
  auto m = programs(4);
  Recorder rec;
  rec.failing = "scale2";
  auto backend = exec::cudaBackend("cuda:0", rec.source());
  std::vector<exec::CompileRequest> reqs = requestsOf(*m);
  reqs.push_back(reqs[0]); // the same program again
  const auto codes = backend->compileAll(reqs);
  REQUIRE(codes.size() == reqs.size());
  for (size_t i = 0; i < m->functions.size(); ++i)
    CHECK_MESSAGE((codes[i] == nullptr) == (m->functions[i]->name == "scale2"), m->functions[i]->name);
  CHECK(codes.back() == codes[0]);
  CHECK(rec.calls == int(m->functions.size()));
}

int main(int argc, char **argv) {
#ifdef TSR_FAKE_LIBCUDA
  setenv("TSR_LIBCUDA", TSR_FAKE_LIBCUDA, 1);
#endif
  setenv("TSR_NO_CACHE", "1", 1); // every program compiled here, none read back
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
