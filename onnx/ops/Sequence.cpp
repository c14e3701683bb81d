// ONNX's sequence operators (SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
// SequenceErase, SequenceLength, ConcatFromSequence, SplitToSequence) as values of the import:
// Graph IR has no sequence type, and a graph is straight-line, so a sequence exists only while
// the model is imported — a list of the tensors (Val::seq) whose length and positions are known
// then. Elements are the tensors' own Vals, so no op is built until a tensor is taken out of the
// sequence or the sequence is concatenated; a position that is a model input must be known at
// import (the conformance runner specializes on it, as for shape inputs); a sequence as a model
// input or output is unsupported. Semantics: ONNX 1.12's operator definitions
// (onnx/defs/sequence/defs.cc).
#include "onnx/Importer.h"

namespace tsr::onnxio {

namespace {

using Seq = std::vector<Val>;

const Seq &seqIn(Node &n, size_t i) {
  if (i >= n.in.size() || !n.in[i].seq) throw BadModel("the input " + std::to_string(i) + " is not a sequence");
  return *n.in[i].seq;
}

Val seqOf(Seq s) {
  Val v;
  v.seq = std::make_shared<const Seq>(std::move(s));
  return v;
}

/// A position in a sequence of `size` (ONNX: in [-size, size - 1], or [-size, size] where
/// `end` allows inserting at the end), as an index from 0.
size_t position(Importer &I, const Val &p, size_t size, bool end, const char *op) {
  const std::vector<int64_t> v = I.knownInts(p, "position");
  if (v.size() != 1) throw BadModel(std::string(op) + "'s position is not a scalar");
  const int64_t n = int64_t(size), at = v[0] < 0 ? v[0] + n : v[0];
  if (at < 0 || at > n || (at == n && !end))
    throw BadModel(std::string(op) + "'s position " + std::to_string(v[0]) + " is outside a sequence of " + std::to_string(size));
  return size_t(at);
}

} // namespace

std::vector<Val> ruleSequenceEmpty(Importer &, Node &) { return {seqOf({})}; }

std::vector<Val> ruleSequenceConstruct(Importer &, Node &n) {
  Seq s;
  for (const Val &x : n.in) {
    if (!x.present() || x.seq) throw BadModel("SequenceConstruct's inputs must be tensors");
    s.push_back(x);
  }
  return {seqOf(std::move(s))};
}

std::vector<Val> ruleSequenceInsert(Importer &I, Node &n) {
  Seq s = seqIn(n, 0);
  if (!n.has(1) || n.in[1].seq) throw BadModel("SequenceInsert's tensor is missing");
  const size_t at = n.has(2) ? position(I, n.in[2], s.size(), true, "SequenceInsert") : s.size();
  s.insert(s.begin() + std::ptrdiff_t(at), n.in[1]);
  return {seqOf(std::move(s))};
}

std::vector<Val> ruleSequenceAt(Importer &I, Node &n) {
  const Seq &s = seqIn(n, 0);
  if (!n.has(1)) throw BadModel("SequenceAt's position is missing");
  return {s[position(I, n.in[1], s.size(), false, "SequenceAt")]};
}

std::vector<Val> ruleSequenceErase(Importer &I, Node &n) {
  Seq s = seqIn(n, 0);
  if (s.empty()) throw BadModel("SequenceErase of an empty sequence");
  const size_t at = n.has(1) ? position(I, n.in[1], s.size(), false, "SequenceErase") : s.size() - 1;
  s.erase(s.begin() + std::ptrdiff_t(at));
  return {seqOf(std::move(s))};
}

std::vector<Val> ruleSequenceLength(Importer &, Node &n) {
  const int64_t size = int64_t(seqIn(n, 0).size());
  return {Importer::ofKnown(rt::Tensor::fromI64({}, DType::I64, std::vector<int64_t>{size}))};
}

// ConcatFromSequence: the elements concatenated along `axis`, or with new_axis=1 stacked along a
// new axis at `axis` (which may then be the rank: the last).
std::vector<Val> ruleConcatFromSequence(Importer &I, Node &n) {
  Seq s = seqIn(n, 0);
  if (s.empty()) throw BadModel("ConcatFromSequence of an empty sequence");
  const bool stack = n.i("new_axis", 0) != 0;
  std::vector<V> xs;
  for (Val &x : s) xs.push_back(I.v(x));
  const size_t r = xs[0]->type.rank();
  const size_t ax = Importer::axis(n.i("axis", 0), stack ? r + 1 : r);
  if (stack)
    for (V &x : xs) {
      std::vector<Dim> d = x->type.dims;
      if (d.size() != r) throw BadModel("ConcatFromSequence's tensors differ in rank");
      d.insert(d.begin() + std::ptrdiff_t(ax), D(1));
      x = I.reshape(x, d);
    }
  return one(I.concat(xs, int64_t(ax)));
}

// SplitToSequence: without `split`, parts of size 1 along `axis` (squeezed unless keepdims); a
// scalar `split`, parts of that size (the last one smaller where it does not divide); a list,
// parts of those sizes.
std::vector<Val> ruleSplitToSequence(Importer &I, Node &n) {
  V x = in(I, n, 0);
  const size_t ax = Importer::axis(n.i("axis", 0), x->type.rank());
  // A list of sizes splits a symbolic axis too (the parts are slices at known offsets); the
  // other forms need the axis' size to know how many parts there are.
  const auto size = x->type.dims[ax].constantValue();
  const bool list = n.has(1) && !I.known(n.in[1], "split").shape().empty();
  if (!size && !list) throw Unsupported("SplitToSequence along a symbolic axis without a list of sizes");
  std::vector<int64_t> parts;
  bool squeeze = false;
  if (!n.has(1)) {
    parts.assign(size_t(*size), 1);
    squeeze = n.i("keepdims", 1) == 0;
  } else if (!list) {
    const std::vector<int64_t> sp = I.knownInts(n.in[1], "split");
    if (sp.at(0) <= 0) throw BadModel("SplitToSequence's split is not positive");
    for (int64_t at = 0; at < *size; at += sp[0]) parts.push_back(std::min(sp[0], *size - at));
  } else {
    int64_t total = 0;
    for (int64_t p : I.knownInts(n.in[1], "split")) {
      if (p < 0) throw BadModel("SplitToSequence's split has a negative size");
      parts.push_back(p);
      total += p;
    }
    if (size && total != *size)
      throw BadModel("SplitToSequence's split sums to " + std::to_string(total) + ", not the axis' " + std::to_string(*size));
  }
  Seq s;
  int64_t at = 0;
  for (int64_t p : parts) {
    V part = I.sliceAxis(x, ax, D(at), D(at + p));
    if (squeeze) {
      std::vector<Dim> d = part->type.dims;
      d.erase(d.begin() + std::ptrdiff_t(ax));
      part = I.reshape(part, d);
    }
    s.push_back(Importer::of(part));
    at += p;
  }
  return {seqOf(std::move(s))};
}

} // namespace tsr::onnxio
