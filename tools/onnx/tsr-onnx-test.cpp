// tsr-onnx-test MODEL_DIR: one test of ONNX's backend test data (MODEL_DIR/model.onnx and its
// test_data_set_*/input_N.pb, output_N.pb). Imports the model as `onnx.load` does (onnx/Import.h),
// runs it on every data set on the reference evaluator, and compares each output with ONNX's
// backend tolerances: |got - want| <= atol + rtol * |want| with rtol 1e-3, atol 1e-7 for floats
// (NaN equals NaN), exact for integers and booleans; dtypes and shapes must be equal.
//
// Prints one line, `PASS NAME`, `FAIL NAME: WHY` or `UNSUPPORTED NAME: WHY`, and exits 0, 1 or 2.
#include "ir/eval/Evaluator.h"
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
    outputs = ir::evaluate(module, *m.graph, inputs);
  } catch (const std::exception &e) {
    return {"FAIL", set.filename().string() + ": " + e.what()};
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
  if (argc != 2) {
    std::cerr << "usage: tsr-onnx-test MODEL_DIR\n";
    return 64;
  }
  return run(argv[1]);
}
