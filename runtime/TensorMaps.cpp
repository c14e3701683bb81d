#include "runtime/TensorMaps.h"

#include <algorithm>
#include <charconv>

namespace tsr::rt {

std::vector<int> tensorMapAxes(const TensorMapSpec &spec, const KernelArg &arg) {
  const int rank = int(spec.box.size());
  int inner = -1;
  for (int a : spec.inner)
    if (a >= 0 && a < rank && a < kMaxRank && arg.strides[a] == 1) {
      inner = a;
      break;
    }
  if (inner < 0) return {};
  std::vector<int> axes{inner};
  for (int a = 0; a < rank; ++a)
    if (a != inner && spec.box[size_t(a)] > 0) axes.push_back(a);
  if (spec.box[size_t(inner)] <= 0 || axes.size() != 2) return {};
  for (int a = 0; a < rank; ++a)
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) axes.push_back(a);
  return axes;
}

std::string formatTensorMaps(const std::vector<TensorMapSpec> &specs) {
  std::string s;
  for (const TensorMapSpec &m : specs) {
    if (!s.empty()) s += ';';
    s += std::to_string(m.param) + ':';
    for (size_t i = 0; i < m.box.size(); ++i) s += (i ? "x" : "") + std::to_string(m.box[i]);
    s += ':';
    for (size_t i = 0; i < m.inner.size(); ++i) s += (i ? "," : "") + std::to_string(m.inner[i]);
  }
  return s;
}

namespace {
/// Integers separated by `sep` (at least one), all of `text`.
std::optional<std::vector<int64_t>> numbers(std::string_view text, char sep) {
  std::vector<int64_t> out;
  while (true) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || v < 0) return std::nullopt;
    out.push_back(v);
    text.remove_prefix(size_t(p - text.data()));
    if (text.empty()) return out;
    if (text.front() != sep) return std::nullopt;
    text.remove_prefix(1);
  }
}
} // namespace

std::optional<std::vector<TensorMapSpec>> parseTensorMaps(std::string_view text) {
  std::vector<TensorMapSpec> out;
  while (!text.empty()) {
    const size_t end = text.find(';');
    std::string_view slot = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (end != std::string_view::npos && text.empty()) return std::nullopt; // a trailing ';'
    const size_t c1 = slot.find(':'), c2 = c1 == std::string_view::npos ? c1 : slot.find(':', c1 + 1);
    if (c2 == std::string_view::npos) return std::nullopt;
    auto param = numbers(slot.substr(0, c1), ',');
    auto box = numbers(slot.substr(c1 + 1, c2 - c1 - 1), 'x');
    auto inner = numbers(slot.substr(c2 + 1), ',');
    if (!param || param->size() != 1 || !box || box->size() > size_t(kMaxRank) || !inner) return std::nullopt;
    TensorMapSpec m;
    m.param = int(param->front());
    m.box = *box;
    for (int64_t a : *inner) {
      if (a >= int64_t(box->size())) return std::nullopt;
      m.inner.push_back(int(a));
    }
    out.push_back(std::move(m));
  }
  return out;
}

} // namespace tsr::rt
