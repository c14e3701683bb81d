// A driver for tests/runtime/test_formats.py, which checks Tessera's tensor files against NumPy,
// torch and an independent Python reader of safetensors.
//
//   formats_tool roundtrip IN OUT        load IN (.npy/.npz/.safetensors) and save it as OUT
//   formats_tool dump IN                 print IN as JSON (below)
//   formats_tool csv IN DTYPE DELIM      print load_csv(IN, DTYPE, DELIM) as JSON
//   formats_tool cast IN DTYPE OUT [saturate]
//                                        load the .npy IN, cast it to DTYPE (nearest-even, or
//                                        saturating), save it as OUT: a .npy, or a dict {"x": ...}
//                                        in a .npz or .safetensors (which keeps bf16/fp8 exact)
//
// JSON: a tensor is {"dtype": "f32", "shape": [2, 3], "values": [...]} with values in row-major
// order: integers and bools as integers, floats as their exact f64 value (nlohmann prints the
// shortest decimal that reads back) or the strings "nan", "inf", "-inf". A dict is
// {"order": [names...], "tensors": {name: tensor}, "metadata": {key: value}}.
// Errors print "error: MESSAGE" to stderr and exit 1; usage errors exit 2.
#include "runtime/Formats.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <iostream>
#include <string>

using namespace tsr;
using namespace tsr::rt;
using json = nlohmann::ordered_json;

namespace {

json tensorJson(const Tensor &t) {
  json values = json::array();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloat(t.dtype())) {
      const double v = t.toF64(i);
      if (std::isnan(v)) values.push_back("nan");
      else if (std::isinf(v)) values.push_back(v < 0 ? "-inf" : "inf");
      else values.push_back(v);
    } else {
      values.push_back(t.toI64(i));
    }
  }
  return {{"dtype", std::string(dtypeName(t.dtype()))}, {"shape", t.shape()}, {"values", values}};
}

int usage() {
  std::cerr << "usage: formats_tool roundtrip IN OUT | dump IN | csv IN DTYPE DELIM | cast IN DTYPE OUT [saturate]\n";
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3) return usage();
  const std::string cmd = argv[1];
  try {
    if (cmd == "roundtrip" && argc == 4) {
      const Loaded l = load(argv[2]);
      if (l.isDict) save(argv[3], l.dict, l.metadata);
      else save(argv[3], l.tensor);
      return 0;
    }
    if (cmd == "dump" && argc == 3) {
      const Loaded l = load(argv[2]);
      if (!l.isDict) {
        std::cout << tensorJson(l.tensor).dump() << "\n";
        return 0;
      }
      json order = json::array(), tensors = json::object(), meta = json::object();
      for (const auto &[name, t] : l.dict) {
        order.push_back(name);
        tensors[name] = tensorJson(t);
      }
      for (const auto &[k, v] : l.metadata) meta[k] = v;
      std::cout << json{{"order", order}, {"tensors", tensors}, {"metadata", meta}}.dump() << "\n";
      return 0;
    }
    if (cmd == "csv" && argc == 5) {
      const auto dt = dtypeFromName(argv[3]);
      if (!dt) return usage();
      std::cout << tensorJson(loadCsv(argv[2], *dt, argv[4])).dump() << "\n";
      return 0;
    }
    if (cmd == "cast" && (argc == 5 || argc == 6)) {
      const auto dt = dtypeFromName(argv[3]);
      if (!dt) return usage();
      Rounding r;
      r.saturate = argc == 6 && std::string(argv[5]) == "saturate";
      const Tensor y = readNpy(argv[2]).cast(*dt, r);
      const std::string out = argv[4];
      if (out.size() >= 4 && out.compare(out.size() - 4, 4, ".npy") == 0) save(out, y);
      else save(out, NamedTensors{{"x", y}});
      return 0;
    }
  } catch (const std::exception &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return usage();
}
