// Tensors of strings (ONNX's STRING element type). Tessera has no string dtype, and a string's
// operators (StringNormalizer drops stopwords: its output's length depends on the values) have no
// Graph IR form, so string tensors exist only while a model is imported: a string input is given
// at import time (ImportOptions::knownStrings; the conformance runner specializes on it as on
// shape inputs), these rules compute on the known strings, and a string output is returned known
// (ImportedModel::stringOutputs). Cast turns strings into a known numeric tensor that the rest of
// the graph uses like any constant.
#include "onnx/Importer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace tsr::onnxio {

bool takesStrings(const std::string &opType) { return opType == "StringNormalizer" || opType == "Identity" || opType == "Cast" || opType == "CastLike"; }

namespace {

std::string lowered(std::string s) {
  for (char &ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
std::string uppered(std::string s) {
  for (char &ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

} // namespace

Val castStrings(const StringTensor &x, DType to) {
  if (to == DType::Bool) throw Unsupported("Cast of strings to bool is not supported");
  rt::Tensor out = rt::Tensor::empty(x.shape, to);
  for (size_t i = 0; i < x.data.size(); ++i) {
    const std::string &s = x.data[i];
    const char *begin = s.c_str();
    char *end = nullptr;
    errno = 0;
    if (isFloat(to)) {
      // strtod reads ONNX's spellings of the special values too: "NaN", "INF", "-INF", "inf".
      const double d = std::strtod(begin, &end);
      if (end == begin || *end) throw BadModel("Cast: the string `" + s + "` is not a number");
      out.fromF64(int64_t(i), d);
    } else {
      const long long v = std::strtoll(begin, &end, 10);
      if (end == begin || *end || errno == ERANGE) throw BadModel("Cast: the string `" + s + "` is not an integer");
      out.fromI64(int64_t(i), v);
    }
  }
  return Importer::ofKnown(std::move(out));
}

/// StringNormalizer (opset 10): drops the stopwords from a [C] or [1, C] tensor of strings
/// (compared as they are, or ignoring ASCII case when is_case_sensitive = 0), then changes the
/// case of what is left (case_change_action NONE, LOWER, UPPER). When nothing is left the output is
/// one empty string ([1] or [1, 1]), as ONNX specifies. The locale attribute is read as ASCII's.
std::vector<Val> ruleStringNormalizer(Importer &, Node &n) {
  if (!n.has(0) || !n.in[0].str) throw Unsupported("StringNormalizer's input must be a tensor of strings known at import time");
  const StringTensor &x = *n.in[0].str;
  const bool twoD = x.shape.size() == 2;
  if (!(x.shape.size() == 1 || (twoD && x.shape[0] == 1)))
    throw BadModel("StringNormalizer's input must have the shape [C] or [1, C]");
  const std::string action = n.s("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    throw BadModel("StringNormalizer's case_change_action `" + action + "` is not NONE, LOWER or UPPER");
  const bool sensitive = n.i("is_case_sensitive", 0) != 0;
  std::vector<std::string> stopwords;
  if (auto *a = n.attr("stopwords"))
    for (auto &w : a->strings()) stopwords.push_back(sensitive ? w : lowered(w));
  StringTensor out;
  for (const std::string &s : x.data) {
    const std::string key = sensitive ? s : lowered(s);
    if (std::find(stopwords.begin(), stopwords.end(), key) != stopwords.end()) continue;
    out.data.push_back(action == "LOWER" ? lowered(s) : action == "UPPER" ? uppered(s) : s);
  }
  if (out.data.empty()) out.data.emplace_back();
  const int64_t c = int64_t(out.data.size());
  out.shape = twoD ? std::vector<int64_t>{1, c} : std::vector<int64_t>{c};
  Val v;
  v.str = std::make_shared<const StringTensor>(std::move(out));
  return {v};
}

} // namespace tsr::onnxio
