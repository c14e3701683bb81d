// tsr-onnx-test [--executor reference|compiled] [--device cpu|cuda[:N]] MODEL_DIR: one test of
// ONNX's backend test data (MODEL_DIR/model.onnx and its test_data_set_*/input_N.pb, output_N.pb).
// Imports the model as `onnx.load` does (onnx/Import.h), runs it on every data set, and compares
// each output with ONNX's backend tolerances: |got - want| <= atol + rtol * |want| with rtol 1e-3,
// atol 1e-7 for floats (NaN equals NaN), exact for integers and booleans; dtypes and shapes must be
// equal.
//
// Where it runs: `--executor reference` (the default) runs the imported graph on the reference
// evaluator (ir/eval/Evaluator.h); `--executor compiled` runs it as `tsr run` runs a graph: the
// Graph IR pipeline (ir/passes/Pipeline.h), then the compiled executor (exec/CompiledExecutor.h,
// every step compiled at its first call) on `--device`: the host CPU's JIT (cpu, the default) or
// a GPU (cuda, cuda:N; exec/cuda/CudaBackend.h), which implies `--executor compiled`.
//
// Prints one line, `PASS NAME`, `FAIL NAME: WHY` or `UNSUPPORTED NAME: WHY`, and exits 0, 1 or 2
// (64 for a usage error, 3 when the GPU asked for cannot be used). The compiled executor also
// prints on stderr what it ran: `compiled: L launches; steps: C compiled, I interpreted, U with
// unknown dims, B library`.
#include "exec/CompiledExecutor.h"
#include "exec/cpu/CpuBackend.h"
#include "exec/cuda/NvptxCompiler.h"
#include "ir/eval/Evaluator.h"
#include "ir/passes/Pipeline.h"
#include "onnx/Import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

namespace fs = std::filesystem;
using namespace tsr;

namespace {

constexpr double kRtol = 1e-3, kAtol = 1e-7;

/// Where graphs run: null for the reference evaluator, else the compiled executor's backend.
std::shared_ptr<exec::StepBackend> gBackend;
/// What the compiled executor ran, over every data set (printed on stderr at the end).
exec::CompiledExecutor::Stats gStats;

/// Runs `g` where the command line asked. The compiled path runs the Graph IR pipeline on the
/// graph first, as `tsr run` does after lowering a call (the passes reach a fixed point, so the
/// later data sets' runs of the same graph find nothing more to rewrite).
std::vector<rt::Tensor> runGraph(const ir::Module &module, ir::Graph &g, const std::vector<rt::Tensor> &inputs) {
  if (!gBackend) return ir::evaluate(module, g, inputs);
  ir::runGraphPipeline(g, true);
  exec::CompiledExecutor exec(gBackend);
  auto outputs = exec.run(module, g, inputs);
  const auto st = exec.stats();
  gStats.launches += st.launches;
  gStats.compiledSteps += st.compiledSteps;
  gStats.interpretedSteps += st.interpretedSteps;
  gStats.unknownDimSteps += st.unknownDimSteps;
  gStats.librarySteps += st.librarySteps;
  return outputs;
}

int report(const std::string &verdict, const std::string &name, const std::string &why) {
  std::cout << verdict << " " << name << (why.empty() ? "" : ": " + why) << "\n";
  return verdict == "PASS" ? 0 : verdict == "FAIL" ? 1 : 2;
}

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// Empty when equal within tolerance; otherwise what differs.
std::string compare(const rt::Tensor &got, const rt::Tensor &want) {
  if (got.dtype() != want.dtype())
    return "dtype " + std::string(dtypeName(got.dtype())) + ", expected " + std::string(dtypeName(want.dtype()));
  if (got.shape() != want.shape()) return "shape " + shapeStr(got.shape()) + ", expected " + shapeStr(want.shape());
  const bool fl = isFloat(want.dtype());
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (fl) {
      const double a = got.toF64(i), b = want.toF64(i);
      if (std::isnan(a) && std::isnan(b)) continue;
      if (a == b) continue;
      if (!(std::fabs(a - b) <= kAtol + kRtol * std::fabs(b)))
        return "element " + std::to_string(i) + " is " + std::to_string(a) + ", expected " + std::to_string(b);
    } else if (got.toI64(i) != want.toI64(i)) {
      return "element " + std::to_string(i) + " is " + std::to_string(got.toI64(i)) + ", expected " + std::to_string(want.toI64(i));
    }
  }
  return "";
}

/// Strings compare exactly, as integers do.
std::string compareStrings(const onnxio::StringTensor &got, const onnxio::StringTensor &want) {
  if (got.shape != want.shape) return "shape " + shapeStr(got.shape) + ", expected " + shapeStr(want.shape);
  for (size_t i = 0; i < want.data.size() && i < got.data.size(); ++i)
    if (got.data[i] != want.data[i]) return "element " + std::to_string(i) + " is \"" + got.data[i] + "\", expected \"" + want.data[i] + "\"";
  return "";
}

/// Runs the imported model on one data set; empty when every output is within tolerance,
/// otherwise the verdict ("FAIL" or "UNSUPPORTED") and why.
std::pair<std::string, std::string> runSet(const ir::Module &module, const onnxio::ImportedModel &m, const fs::path &set,
                                           const std::vector<rt::Tensor> &modelInputs) {
  std::vector<rt::Tensor> inputs;
  for (size_t i : m.inputIndices) inputs.push_back(modelInputs.at(i));
  for (auto &c : m.constants) inputs.push_back(c);
  std::vector<rt::Tensor> outputs;
  try {
    outputs = runGraph(module, *m.graph, inputs);
  } catch (const std::exception &e) {
    return {"FAIL", set.filename().string() + ": " + e.what()};
  } catch (const ir::IRError &e) { // the pipeline left an ill-formed graph: an internal error
    return {"FAIL", set.filename().string() + ": internal error: " + e.message};
  }
  size_t next = 0; // the graph's outputs are the model's outputs that are not strings
  for (size_t i = 0; i < m.outputNames.size(); ++i) {
    const std::string file = (set / ("output_" + std::to_string(i) + ".pb")).string();
    const std::string where = set.filename().string() + ": output " + std::to_string(i) + " (" + m.outputNames[i] + "): ";
    if (m.stringOutputs[i]) {
      auto t = onnxio::readStringTensorFile(file);
      if (auto *e = std::get_if<onnxio::TensorReadError>(&t)) return {"FAIL", where + e->message};
      std::string diff = compareStrings(*m.stringOutputs[i], std::get<onnxio::StringTensor>(t));
      if (!diff.empty()) return {"FAIL", where + diff};
      continue;
    }
    if (next >= outputs.size()) return {"FAIL", where + "the graph has fewer outputs than the model"};
    auto t = onnxio::readTensorFile(file);
    if (auto *e = std::get_if<onnxio::TensorReadError>(&t)) return {e->unsupported ? "UNSUPPORTED" : "FAIL", e->message};
    std::string diff = compare(outputs[next++], std::get<rt::Tensor>(t));
    if (!diff.empty()) return {"FAIL", where + diff};
  }
  return {};
}

int run(const fs::path &dir) {
  const std::string name = dir.filename().string();
  const std::string model = (dir / "model.onnx").string();
  std::vector<fs::path> sets;
  for (auto &entry : fs::directory_iterator(dir))
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(entry.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return report("FAIL", name, "no test_data_set_* folder");

  ir::Module module;
  auto imported = onnxio::importModel(model, module);
  // A model whose inputs give shapes (Reshape's shape, Slice's starts) imports once specialized to
  // each data set's values of those inputs, as a compiled program specializes on its sizes.
  std::vector<std::string> specialize;
  if (auto *e = std::get_if<onnxio::ImportError>(&imported)) {
    if (e->needKnown.empty()) return report(e->unsupported ? "UNSUPPORTED" : "FAIL", name, e->str());
    specialize = e->needKnown;
  }
  for (auto &set : sets) {
    std::vector<rt::Tensor> modelInputs;
    // A tensor of strings can only be given at import time (onnx/ops/Strings.cpp): its slot in
    // modelInputs stays an empty tensor, and the importer names it among the inputs to specialize on.
    std::vector<std::optional<onnxio::StringTensor>> stringInputs;
    for (size_t i = 0; fs::exists(set / ("input_" + std::to_string(i) + ".pb")); ++i) {
      const std::string file = (set / ("input_" + std::to_string(i) + ".pb")).string();
      auto t = onnxio::readTensorFile(file);
      if (auto *e = std::get_if<onnxio::TensorReadError>(&t)) {
        auto s = e->unsupported ? onnxio::readStringTensorFile(file) : std::variant<onnxio::StringTensor, onnxio::TensorReadError>(*e);
        if (std::holds_alternative<onnxio::TensorReadError>(s)) return report(e->unsupported ? "UNSUPPORTED" : "FAIL", name, e->message);
        modelInputs.emplace_back();
        stringInputs.push_back(std::get<onnxio::StringTensor>(std::move(s)));
        continue;
      }
      modelInputs.push_back(std::get<rt::Tensor>(t));
      stringInputs.emplace_back();
    }
    auto give = [&](onnxio::ImportOptions &options, const std::vector<std::string> &names, size_t i) {
      if (stringInputs[i]) options.knownStrings[names[i]] = *stringInputs[i];
      else options.knownInputs[names[i]] = modelInputs[i];
    };
    std::pair<std::string, std::string> verdict;
    if (specialize.empty()) {
      auto &m = std::get<onnxio::ImportedModel>(imported);
      if (m.inputIndices.size() && m.inputIndices.back() >= modelInputs.size()) return report("FAIL", name, "missing input files");
      verdict = runSet(module, m, set, modelInputs);
    } else {
      const auto &names = std::get<onnxio::ImportError>(imported).modelInputs;
      onnxio::ImportOptions options;
      for (size_t i = 0; i < names.size() && i < modelInputs.size(); ++i)
        if (std::find(specialize.begin(), specialize.end(), names[i]) != specialize.end()) give(options, names, i);
      // Each import stops at the first rule that needs a value: repeat while it names new ones.
      ir::Module specialized;
      auto again = onnxio::importModel(model, specialized, options);
      for (int round = 0; round < 8; ++round) {
        auto *e = std::get_if<onnxio::ImportError>(&again);
        if (!e || e->needKnown.empty()) break;
        bool more = false;
        for (auto &want : e->needKnown)
          for (size_t i = 0; i < names.size() && i < modelInputs.size(); ++i)
            if (names[i] == want && !options.knownInputs.count(want) && !options.knownStrings.count(want)) {
              give(options, names, i);
              specialize.push_back(want);
              more = true;
            }
        if (!more) break;
        specialized = ir::Module();
        again = onnxio::importModel(model, specialized, options);
      }
      if (auto *e = std::get_if<onnxio::ImportError>(&again)) return report(e->unsupported ? "UNSUPPORTED" : "FAIL", name, e->str());
      verdict = runSet(specialized, std::get<onnxio::ImportedModel>(again), set, modelInputs);
    }
    if (!verdict.first.empty()) return report(verdict.first, name, verdict.second);
  }
  std::string note;
  std::sort(specialize.begin(), specialize.end());
  specialize.erase(std::unique(specialize.begin(), specialize.end()), specialize.end());
  for (auto &s : specialize) note += (note.empty() ? "" : ", ") + s;
  std::cout << "PASS " << name << (note.empty() ? "" : " (specialized on " + note + ")") << "\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const char *usage = "usage: tsr-onnx-test [--executor reference|compiled] [--device cpu|cuda[:N]] MODEL_DIR\n";
  std::string executor = "reference", device = "cpu", dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--executor" || a == "--device") && i + 1 < argc) (a == "--executor" ? executor : device) = argv[++i];
    else if (a.rfind("--executor=", 0) == 0) executor = a.substr(11);
    else if (a.rfind("--device=", 0) == 0) device = a.substr(9);
    else if (a.rfind("--", 0) == 0 || !dir.empty()) { std::cerr << usage; return 64; }
    else dir = a;
  }
  if (dir.empty() || (executor != "reference" && executor != "compiled") ||
      (device != "cpu" && device != "cuda" && device.rfind("cuda:", 0) != 0)) {
    std::cerr << usage;
    return 64;
  }
  if (device != "cpu") {
    if (executor == "reference") executor = "compiled"; // a GPU runs compiled programs only
    try {
      gBackend = exec::cudaBackend(device);
    } catch (const std::exception &e) {
      std::cerr << "tsr-onnx-test: --device " << device << ": " << e.what() << "\n";
      return 3;
    }
  } else if (executor == "compiled") {
    gBackend = exec::cpuBackend();
  }
  const int rc = run(dir);
  // The compiled executor's account, one line on stderr (backend_test.sh sums them): tests assert
  // from it that compiled programs ran.
  if (gBackend)
    std::cerr << "compiled: " << gStats.launches << " launches; steps: " << gStats.compiledSteps << " compiled, "
              << gStats.interpretedSteps << " interpreted, " << gStats.unknownDimSteps << " with unknown dims, "
              << gStats.librarySteps << " library\n";
  return rc;
}
