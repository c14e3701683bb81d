// Graph lowering of the builtins that shape compile-time structure (spec 3: graph loops unroll
// over them): len, range, enumerate, zip, list, tuple, dict, reversed, the methods of dicts, and
// cdiv of sizes. They compute at compile time and build no ops.
#include "ir/lower/builtins/Rules.h"

namespace tsr::ir::lowering {

namespace {

LVRef len(BuiltinCall &c) {
  LVRef x = c.arg(0, "x");
  if (x->kind == LV::K::Tuple || x->kind == LV::K::List) return integer(Dim::constant(static_cast<int64_t>(x->elems.size())));
  if (x->kind == LV::K::Dict) return integer(Dim::constant(static_cast<int64_t>(x->fields.size())));
  if (x->kind == LV::K::Str) return integer(Dim::constant(static_cast<int64_t>(x->s.size())));
  if (x->kind == LV::K::Tensor && x->v->type.rank() > 0) return integer(x->v->type.dims[0]);
  c.unsupported("len() of a " + Lowering::kindName(x));
}

// range(stop), range(start, stop, step=1): the ints, as a list (loops over it unroll).
LVRef range(BuiltinCall &c) {
  Lowering &L = c.L;
  LVRef a0 = c.arg(0, "start"), a1 = c.arg(1, "stop"), a2 = c.arg(2, "step");
  auto c0 = L.constInt(a0), c1 = a1 ? L.constInt(a1) : std::optional<int64_t>(0), c2 = a2 ? L.constInt(a2) : std::optional<int64_t>(1);
  if (!c0 || !c1 || !c2 || *c2 == 0) c.unsupported("a range whose bounds are known only at run time");
  int64_t lo = a1 ? *c0 : 0, hi = a1 ? *c1 : *c0, st = *c2;
  std::vector<LVRef> out;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
    out.push_back(integer(Dim::constant(i)));
    if (out.size() > 4096) c.unsupported("a loop of more than 4096 iterations (graph loops are unrolled)");
  }
  return tuple(out, true);
}

// enumerate(iterable, start=0): (index, element) pairs, a tuple of them for a tuple.
LVRef enumerate(BuiltinCall &c) {
  LVRef it = c.arg(0, "iterable"), start = c.arg(1, "start");
  int64_t i = 0;
  if (start) {
    auto k = c.L.constInt(start);
    if (!k) c.unsupported("enumerate() from a start known only at run time");
    i = *k;
  }
  std::vector<LVRef> out;
  for (auto &e : c.L.iterate(it, c.at)) out.push_back(tuple({integer(Dim::constant(i++)), e}));
  return tuple(out, it->kind != LV::K::Tuple);
}

// zip(*iterables): tuples of corresponding elements, as long as the shortest.
LVRef zip(BuiltinCall &c) {
  std::vector<std::vector<LVRef>> seqs;
  size_t n = c.args.empty() ? 0 : SIZE_MAX;
  bool allTuples = true;
  for (auto &a : c.args) {
    seqs.push_back(c.L.iterate(a, c.at));
    n = std::min(n, seqs.back().size());
    allTuples &= a->kind == LV::K::Tuple;
  }
  std::vector<LVRef> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<LVRef> t;
    for (auto &s : seqs) t.push_back(s[i]);
    out.push_back(tuple(t));
  }
  return tuple(out, !allTuples);
}

// list(iterable=()), tuple(iterable=()): the elements (a dict's keys).
std::vector<LVRef> elements(BuiltinCall &c) {
  LVRef x = c.arg(0, "iterable");
  return x ? c.L.iterate(x, c.at) : std::vector<LVRef>{};
}
LVRef list(BuiltinCall &c) { return tuple(elements(c), true); }
LVRef tupleOf(BuiltinCall &c) { return tuple(elements(c)); }

// dict(mapping=None, **fields): the mapping's fields, then the keyword arguments, in order.
LVRef dict(BuiltinCall &c) {
  LV d;
  d.kind = LV::K::Dict;
  auto put = [&](const std::string &k, const LVRef &v) {
    for (auto &f : d.fields)
      if (f.first == k) { f.second = v; return; }
    d.fields.push_back({k, v});
  };
  if (!c.args.empty() && c.args[0]->kind != LV::K::None) {
    if (c.args[0]->kind != LV::K::Dict) c.unsupported("dict() of a " + Lowering::kindName(c.args[0]));
    for (auto &[k, v] : c.args[0]->fields) put(k, v);
  }
  for (auto &[k, v] : c.kw) put(k, v);
  return mk(d);
}

LVRef reversed(BuiltinCall &c) {
  std::vector<LVRef> es = c.L.iterate(c.arg(0, "seq"), c.at);
  return tuple(std::vector<LVRef>(es.rbegin(), es.rend()), true);
}

// d.items(), d.keys(), d.values(): tuples of the fields, in order (graph loops unroll over them).
template <typename F> LVRef dictView(BuiltinCall &c, F each) {
  const LVRef &d = c.args.at(0);
  if (d->kind != LV::K::Dict) c.unsupported("a dict method of a " + Lowering::kindName(d));
  std::vector<LVRef> out;
  for (auto &[k, v] : d->fields) out.push_back(each(k, v));
  return tuple(out);
}
LVRef dictItems(BuiltinCall &c) { return dictView(c, [](const std::string &k, const LVRef &v) { return tuple({str(k), v}); }); }
LVRef dictKeys(BuiltinCall &c) { return dictView(c, [](const std::string &k, const LVRef &) { return str(k); }); }
LVRef dictValues(BuiltinCall &c) { return dictView(c, [](const std::string &, const LVRef &v) { return v; }); }

// d.get(key, default=None).
LVRef dictGet(BuiltinCall &c) {
  const LVRef &d = c.args.at(0);
  LVRef key = c.arg(1, "key"), dflt = c.arg(2, "default");
  if (d->kind != LV::K::Dict || !key || key->kind != LV::K::Str) c.unsupported("d.get() of a key known only at run time");
  for (auto &[k, v] : d->fields)
    if (k == key->s) return v;
  return dflt ? dflt : none();
}

// cdiv(a, b) of sizes: (a + b - 1) / b, exact in the dim algebra; where a grid is evaluated it is
// floored, which makes it the ceiling division.
LVRef cdiv(BuiltinCall &c) {
  Dim x = c.L.dimOf(c.arg(0, "a"), c.at), y = c.L.dimOf(c.arg(1, "b"), c.at);
  auto cx = x.constantValue(), cy = y.constantValue();
  if (cx && cy && *cy > 0) return integer(Dim::constant((*cx + *cy - 1) / *cy));
  if (auto q = (x + y - Dim::constant(1)).divide(y)) return integer(*q);
  c.unsupported("cdiv of sizes known only at run time");
}

} // namespace

void addStructureRules(GraphRules &r) {
  r["len"] = len;
  r["range"] = range;
  r["enumerate"] = enumerate;
  r["zip"] = zip;
  r["list"] = list;
  r["tuple"] = tupleOf;
  r["dict"] = dict;
  r["reversed"] = reversed;
  r["dict_items"] = dictItems;
  r["dict_keys"] = dictKeys;
  r["dict_values"] = dictValues;
  r["dict_get"] = dictGet;
  r["cdiv"] = cdiv;
}

} // namespace tsr::ir::lowering
