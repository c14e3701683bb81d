// The host rules of builtins (sema/Builtins.h, `host.rule`), by family: Python's values (print,
// len, range, conversions, sequences, dicts), numbers (math, min, max, sum, abs, round), random
// keys, files, and the autodiff transforms. A rule returns null to decline, and the call then runs
// as a graph (the "graph" rule always declines).
#include "exec/host/InterpreterImpl.h"
#include "exec/host/TensorParallel.h"
#include "runtime/dist/Dist.h"

#include <unordered_map>

namespace tsr::host {

namespace {

ValueRef keyValue(rt::Key k) { Value v; v.k = K::Key; v.key = k; return mk(v); }

// ---- Python values ----

ValueRef graphRule(HostCall &) { return nullptr; }

ValueRef print(HostCall &c) {
  std::string sep = " ", end = "\n";
  if (auto s = c.kw("sep")) sep = s->s;
  if (auto e = c.kw("end")) end = e->s;
  for (size_t i = 0; i < c.args.size(); ++i) c.I.out << (i ? sep : "") << c.I.display(c.args[i]);
  c.I.out << end << std::flush;
  return none();
}

ValueRef len(HostCall &c) {
  ValueRef x = c.need(0, "x");
  if (x->k == K::List || x->k == K::Tuple) return integer(static_cast<int64_t>(x->items.size()));
  if (x->k == K::Dict) return integer(static_cast<int64_t>(x->dict.size()));
  if (x->k == K::Str) return integer(static_cast<int64_t>(x->s.size()));
  if (x->k == K::Range) return integer(std::max<int64_t>(0, (x->stop - x->start + x->step - (x->step > 0 ? 1 : -1)) / x->step));
  if (x->k == K::Tensor && x->t.ndim() > 0) return integer(x->t.shape()[0]);
  c.fail("len() of a " + Interpreter::Impl::kindName(x));
}

ValueRef range(HostCall &c) {
  Value r;
  r.k = K::Range;
  auto intArg = [&](const ValueRef &v) {
    if (v->k != K::Int) c.fail("range() takes ints");
    return v->i;
  };
  auto &args = c.args;
  if (args.size() == 1) r.stop = intArg(args[0]);
  else { r.start = intArg(args.at(0)); r.stop = intArg(args.at(1)); if (args.size() > 2) r.step = intArg(args[2]); }
  if (r.step == 0) c.fail("range() step must not be zero");
  return mk(r);
}

ValueRef enumerate(HostCall &c) {
  std::vector<ValueRef> out;
  int64_t i = 0;
  if (ValueRef s = c.arg(1, "start")) i = s->i;
  for (auto &x : c.I.iterate(c.need(0, "iterable"), c.at)) out.push_back(seq({integer(i++), x}, false));
  return seq(out, true);
}

ValueRef zip(HostCall &c) {
  std::vector<std::vector<ValueRef>> lists;
  size_t n = SIZE_MAX;
  for (auto &a : c.args) { lists.push_back(c.I.iterate(a, c.at)); n = std::min(n, lists.back().size()); }
  std::vector<ValueRef> out;
  for (size_t i = 0; i < n && !lists.empty(); ++i) {
    std::vector<ValueRef> t;
    for (auto &l : lists) t.push_back(l[i]);
    out.push_back(seq(t, false));
  }
  return seq(out, true);
}

// progress(iterable, desc=...): the `for` loop over it draws a bar on a terminal and prints plain
// lines otherwise.
ValueRef progress(HostCall &c) {
  Value v = *c.need(0, "iterable");
  v.progress = c.kw("desc") ? c.kw("desc")->s : (c.args.size() > 1 ? c.args[1]->s : std::string("progress"));
  return mk(v);
}

ValueRef time(HostCall &) {
  using namespace std::chrono;
  return floating(duration<double>(steady_clock::now().time_since_epoch()).count());
}

// ---- distribution (spec 10; runtime/dist, docs/distributed.md) ----

// dist.mesh(axes, shape): the run's mesh, which collectives name axes of; its size must be the
// run's world size. A dict {"axes": (...), "shape": (...)} in host code.
ValueRef distMesh(HostCall &c) {
  rt::dist::Mesh m;
  ValueRef axes = c.need(0, "axes"), shape = c.need(1, "shape");
  if (axes->k == K::Str) m.axes.push_back(axes->s);
  else for (auto &a : axes->items) m.axes.push_back(a->s);
  if (shape->k == K::Int) m.shape.push_back(shape->i);
  else for (auto &e : shape->items) m.shape.push_back(e->i);
  try {
    rt::dist::setMesh(m);
  } catch (const std::exception &e) {
    c.fail(e.what());
  }
  std::vector<ValueRef> a, sh;
  for (auto &n : m.axes) a.push_back(::tsr::host::str(n));
  for (int64_t e : m.shape) sh.push_back(integer(e));
  Value v;
  v.k = K::Dict;
  v.dict = {{"axes", seq(a, false)}, {"shape", seq(sh, false)}};
  return mk(v);
}

ValueRef distRank(HostCall &) { return integer(rt::dist::world().rank); }
ValueRef distWorldSize(HostCall &) { return integer(rt::dist::world().size); }

ValueRef str(HostCall &c) { return c.args.empty() ? ::tsr::host::str("") : ::tsr::host::str(c.I.display(c.args[0])); }

// The value of a one-element tensor (item, and int/float/bool of a tensor, as Python's of a 0-d
// NumPy array).
ValueRef itemOf(HostCall &c, const ValueRef &x) {
  if (x->t.numel() != 1) c.fail(c.b.name + "() needs a tensor with one element, not " + std::to_string(x->t.numel()));
  if (isFloat(x->t.dtype())) return floating(x->t.toF64(0));
  if (x->t.dtype() == DType::Bool) return boolean(x->t.toI64(0) != 0);
  return integer(x->t.toI64(0));
}

ValueRef toInt(HostCall &c) {
  ValueRef x = c.arg(0, "x");
  if (!x) return integer(0);
  if (x->k == K::Tensor) x = itemOf(c, x);
  if (x->k == K::Float) return integer(static_cast<int64_t>(x->f));
  if (x->k == K::Bool) return integer(x->b);
  if (x->k == K::Str) return integer(std::stoll(x->s));
  return x;
}

ValueRef toFloat(HostCall &c) {
  ValueRef x = c.arg(0, "x");
  if (!x) return floating(0.0);
  if (x->k == K::Tensor) x = itemOf(c, x);
  if (x->k == K::Int) return floating(static_cast<double>(x->i));
  if (x->k == K::Bool) return floating(x->b);
  if (x->k == K::Str) {
    if (x->s == "inf") return floating(INFINITY);
    if (x->s == "-inf") return floating(-INFINITY);
    if (x->s == "nan") return floating(NAN);
    return floating(std::stod(x->s));
  }
  return x;
}

ValueRef toBool(HostCall &c) {
  ValueRef x = c.arg(0, "x");
  if (!x) return boolean(false);
  if (x->k == K::Tensor) x = itemOf(c, x);
  return boolean(c.I.truthy(x, c.at));
}

ValueRef item(HostCall &c) {
  ValueRef x = c.self ? c.self : c.need(0, "x");
  return x->k == K::Tensor ? itemOf(c, x) : x;
}

ValueRef toHost(HostCall &c) { return c.need(0, "x"); }

ValueRef list(HostCall &c) { return seq(c.args.empty() ? std::vector<ValueRef>{} : c.I.iterate(c.args[0], c.at), true); }
ValueRef tuple(HostCall &c) { return seq(c.args.empty() ? std::vector<ValueRef>{} : c.I.iterate(c.args[0], c.at), false); }

// dict(mapping=None, **fields): the mapping's entries, then the keyword arguments.
ValueRef dict(HostCall &c) {
  Value d;
  d.k = K::Dict;
  auto put = [&](const std::string &k, const ValueRef &v) {
    for (auto &[kk, vv] : d.dict)
      if (kk == k) { vv = v; return; }
    d.dict.push_back({k, v});
  };
  if (!c.args.empty() && c.args[0]->k != K::None) {
    if (c.args[0]->k != K::Dict) c.fail("dict() takes a dict, not a " + Interpreter::Impl::kindName(c.args[0]));
    for (auto &[k, v] : c.args[0]->dict) put(k, v);
  }
  for (auto &[k, v] : c.kwargs) put(k, v);
  return mk(d);
}

ValueRef sorted(HostCall &c) {
  std::vector<ValueRef> items = c.I.iterate(c.need(0, "iterable"), c.at);
  ValueRef rev = c.kw("reverse");
  bool reverse = rev && c.I.truthy(rev, c.at);
  std::stable_sort(items.begin(), items.end(), [&](const ValueRef &a, const ValueRef &b) {
    return reverse ? c.I.order(b, a, c.at) < 0 : c.I.order(a, b, c.at) < 0;
  });
  return seq(items, true);
}

ValueRef reversed(HostCall &c) {
  std::vector<ValueRef> items = c.I.iterate(c.need(0, "seq"), c.at);
  return seq(std::vector<ValueRef>(items.rbegin(), items.rend()), true);
}

// cdiv(a, b) of ints: -(-a // b).
ValueRef cdiv(HostCall &c) {
  ValueRef a = c.need(0, "a"), b = c.need(1, "b");
  if (a->k != K::Int || b->k != K::Int) return nullptr;
  if (b->i == 0) c.fail("cdiv() by zero");
  int64_t q = a->i / b->i, r = a->i % b->i;
  return integer(q + ((r != 0) && ((r > 0) == (b->i > 0)) ? 1 : 0));
}

// ---- methods of lists and dicts: they run on the receiver itself (append, extend and pop
// mutate it) ----

Value *receiver(HostCall &c, Value::K kind) { return c.self && c.self->k == kind ? c.self.get() : nullptr; }

ValueRef listAppend(HostCall &c) {
  Value *l = receiver(c, K::List);
  if (!l) return nullptr;
  l->items.push_back(c.need(0, "x"));
  return none();
}

ValueRef listExtend(HostCall &c) {
  Value *l = receiver(c, K::List);
  if (!l) return nullptr;
  for (auto &x : c.I.iterate(c.need(0, "iterable"), c.at)) l->items.push_back(x);
  return none();
}

ValueRef listPop(HostCall &c) {
  Value *l = receiver(c, K::List);
  if (!l) return nullptr;
  int64_t n = static_cast<int64_t>(l->items.size()), i = c.args.empty() ? n - 1 : c.args[0]->i;
  if (i < 0) i += n;
  if (i < 0 || i >= n) c.fail(n ? "pop index out of range" : "pop from an empty list");
  ValueRef v = l->items[static_cast<size_t>(i)];
  l->items.erase(l->items.begin() + i);
  return v;
}

template <typename F> ValueRef dictView(HostCall &c, F each) {
  Value *d = receiver(c, K::Dict);
  if (!d) return nullptr;
  std::vector<ValueRef> out;
  for (auto &[k, v] : d->dict) out.push_back(each(k, v));
  return seq(out, false);
}
ValueRef dictItems(HostCall &c) { return dictView(c, [](const std::string &k, const ValueRef &v) { return seq({::tsr::host::str(k), v}, false); }); }
ValueRef dictKeys(HostCall &c) { return dictView(c, [](const std::string &k, const ValueRef &) { return ::tsr::host::str(k); }); }
ValueRef dictValues(HostCall &c) { return dictView(c, [](const std::string &, const ValueRef &v) { return v; }); }

ValueRef dictGet(HostCall &c) {
  Value *d = receiver(c, K::Dict);
  if (!d) return nullptr;
  const ValueRef &k = c.need(0, "key");
  if (k->k == K::Str) for (auto &[kk, v] : d->dict) if (kk == k->s) return v;
  return c.args.size() > 1 ? c.args[1] : none();
}

// ---- numbers: Python's math, min, max, sum, abs and round when no tensor is involved ----

// Math on a Python number is Python math, with the kind the checker gives the result. (Ints
// beyond 2^53 are not exact as doubles: they are left to the other rules.)
ValueRef math(HostCall &c) {
  if (c.args.size() != 1 || !c.kwargs.empty()) return nullptr;
  const ValueRef &x = c.args[0];
  if (!(x->k == K::Float || (x->k == K::Int && std::llabs(x->i) <= (int64_t{1} << 53)))) return nullptr;
  bool isInt = x->k == K::Int;
  auto r = sema::applyToNumber(c.b, isInt ? static_cast<double>(x->i) : x->f, isInt);
  if (!r) return nullptr;
  return r->isInt ? integer(static_cast<int64_t>(r->value)) : floating(r->value);
}

ValueRef abs(HostCall &c) {
  if (ValueRef v = math(c)) return v;
  if (c.anyTensor() || c.args.empty()) return nullptr;
  ValueRef x = c.args[0];
  return x->k == K::Float ? floating(std::fabs(x->f)) : integer(x->i < 0 ? -x->i : x->i);
}

ValueRef round(HostCall &c) {
  if (c.anyTensor() || c.args.empty()) return nullptr;
  ValueRef x = c.args[0];
  if (c.args.size() > 1 && c.args[1]->k == K::Int) {
    double m = std::pow(10.0, static_cast<double>(c.args[1]->i));
    return floating(std::nearbyint((x->k == K::Float ? x->f : static_cast<double>(x->i)) * m) / m);
  }
  return integer(static_cast<int64_t>(std::nearbyint(x->k == K::Float ? x->f : static_cast<double>(x->i))));
}

ValueRef minOrMax(HostCall &c, bool isMax) {
  if (c.anyTensor() || c.args.empty()) return nullptr;
  std::vector<ValueRef> items = c.args.size() == 1 ? c.I.iterate(c.args[0], c.at) : c.args;
  if (items.empty()) c.fail(c.b.name + "() of an empty sequence");
  ValueRef best = items[0];
  for (auto &x : items) if (isMax ? c.I.order(x, best, c.at) > 0 : c.I.order(x, best, c.at) < 0) best = x;
  return best;
}
ValueRef max(HostCall &c) { return minOrMax(c, true); }
ValueRef min(HostCall &c) { return minOrMax(c, false); }

// sum(iterable, start=0): the elements added to start with `+`.
ValueRef sum(HostCall &c) {
  if (c.args.empty() || c.args[0]->k == K::Tensor) return nullptr;
  ValueRef acc = c.args.size() > 1 ? c.args[1] : integer(0);
  for (auto &x : c.I.iterate(c.args[0], c.at)) acc = c.I.binary(BinOp::Add, acc, x, c.c, c.c, c.at, c.c, c.env);
  return acc;
}

// ---- random keys: the runtime's draws, which graphs reproduce ----

const rt::Key &keyArg(HostCall &c) {
  ValueRef k = c.need(0, "key");
  if (k->k != K::Key) c.fail(c.b.name + "() takes a random key first");
  return k->key;
}

ValueRef randomKey(HostCall &c) {
  ValueRef s = c.need(0, "seed");
  if (s->k != K::Int) c.fail("random.key() takes an int seed");
  return keyValue(rt::key(s->i));
}

ValueRef randomSplit(HostCall &c) {
  if (c.args.empty() || c.args[0]->k != K::Key) return nullptr;
  ValueRef num = c.arg(1, "num");
  int64_t n = num ? num->i : 2;
  std::vector<ValueRef> out;
  for (auto &k : rt::split(c.args[0]->key, n)) out.push_back(keyValue(k));
  return seq(out, false);
}

ValueRef randomFoldIn(HostCall &c) {
  const rt::Key &k = keyArg(c);
  ValueRef data = c.need(1, "data");
  if (data->k != K::Int) c.fail("random.fold_in() takes an int");
  return keyValue(rt::foldIn(k, data->i));
}

std::vector<int64_t> shapeArg(HostCall &c, const ValueRef &s) {
  if (s->k == K::Int) return {s->i};
  std::vector<int64_t> shape;
  for (auto &e : c.I.iterate(s, c.at)) {
    if (e->k != K::Int) c.fail(c.b.name + "() takes a shape of ints");
    shape.push_back(e->i);
  }
  return shape;
}

ValueRef randomRandint(HostCall &c) {
  const rt::Key &k = keyArg(c);
  ValueRef lo = c.need(2, "minval"), hi = c.need(3, "maxval"), dt = c.arg(4, "dtype");
  if (lo->k != K::Int || hi->k != K::Int) return nullptr;
  try {
    return tensor(rt::randint(k, shapeArg(c, c.need(1, "shape")), lo->i, hi->i, dt && dt->k == K::DType ? dt->dtype : DType::I32));
  } catch (std::invalid_argument &e) {
    c.fail(e.what());
  }
}

// A host permutation needs no graph: the runtime's draw is the one graphs use.
ValueRef randomPermutation(HostCall &c) {
  if (c.args.size() != 2 || c.args[0]->k != K::Key || (c.args[1]->k != K::Int && c.args[1]->k != K::Tensor)) return nullptr;
  try {
    if (c.args[1]->k == K::Int) return tensor(rt::permutation(c.args[0]->key, c.args[1]->i));
    return tensor(rt::permuteRows(c.args[0]->key, c.args[1]->t));
  } catch (std::exception &e) {
    c.fail(e.what());
  }
}

// ---- tensors and files ----

// tensor(nested lists of numbers, dtype=None): the shape from the nesting, the dtype f32 for
// floats and i32 for ints unless given.
ValueRef tensorLiteral(HostCall &c) {
  ValueRef data = c.need(0, "data");
  std::vector<int64_t> shape;
  for (ValueRef v = data; v->k == K::List || v->k == K::Tuple; v = v->items.empty() ? none() : v->items[0]) shape.push_back(static_cast<int64_t>(v->items.size()));
  std::vector<double> flat;
  bool anyFloat = false;
  std::function<void(const ValueRef &, size_t)> walk = [&](const ValueRef &v, size_t d) {
    if (d < shape.size()) {
      if ((v->k != K::List && v->k != K::Tuple) || static_cast<int64_t>(v->items.size()) != shape[d]) c.fail("tensor() needs a rectangular nesting of numbers");
      for (auto &e : v->items) walk(e, d + 1);
      return;
    }
    if (v->k == K::Float) { anyFloat = true; flat.push_back(v->f); }
    else if (v->k == K::Int) flat.push_back(static_cast<double>(v->i));
    else if (v->k == K::Bool) flat.push_back(v->b);
    else c.fail("tensor() takes numbers, not a " + Interpreter::Impl::kindName(v));
  };
  walk(data, 0);
  DType dt = anyFloat ? DType::F32 : DType::I32;
  if (auto d = c.arg(1, "dtype"); d && d->k == K::DType) dt = d->dtype;
  return tensor(rt::Tensor::fromF64(shape, dt, flat));
}

ValueRef pathArg(HostCall &c) {
  ValueRef path = c.need(0, "path");
  if (path->k != K::Str) c.fail(c.b.name + "() takes a path string first");
  return path;
}

ValueRef load(HostCall &c) {
  ValueRef path = pathArg(c);
  try {
    rt::Loaded l = rt::load(path->s);
    if (!l.isDict) return tensor(l.tensor);
    Value d;
    d.k = K::Dict;
    for (auto &[k, t] : l.dict) d.dict.push_back({k, tensor(t)});
    return mk(d);
  } catch (std::exception &e) {
    c.fail(e.what()); // a missing or malformed file is the program's error (exit 1), not the device's
  }
}

ValueRef save(HostCall &c) {
  ValueRef path = pathArg(c);
  ValueRef v = c.need(1, "value");
  rt::NamedTensors named;
  if (v->k == K::Dict) {
    for (auto &[k, e] : v->dict) {
      if (e->k != K::Tensor) c.fail("save() stores tensors; `" + k + "` is a " + Interpreter::Impl::kindName(e));
      named.push_back({k, e->t});
    }
  } else if (v->k != K::Tensor) {
    c.fail("save() stores a tensor or a dict of tensors, not a " + Interpreter::Impl::kindName(v));
  }
  try {
    if (v->k == K::Tensor) rt::save(path->s, v->t);
    else rt::save(path->s, named);
  } catch (std::exception &e) {
    c.fail(e.what());
  }
  return none();
}

ValueRef loadCsv(HostCall &c) {
  ValueRef path = pathArg(c);
  DType dt = DType::F32;
  if (auto d = c.arg(1, "dtype")) dt = d->dtype;
  std::string delim = ",";
  if (auto d = c.arg(2, "delimiter")) delim = d->s;
  try {
    return tensor(rt::loadCsv(path->s, dt, delim));
  } catch (std::exception &e) {
    c.fail(e.what());
  }
}

ValueRef loadBytes(HostCall &c) {
  ValueRef path = pathArg(c);
  try {
    return tensor(rt::readBytes(path->s));
  } catch (std::exception &e) {
    c.fail(e.what()); // a missing file is the program's error (exit 1), naming the path
  }
}

// encode_bytes(s): the string's bytes as a 1-d i32 tensor (values 0..255).
ValueRef encodeBytes(HostCall &c) {
  ValueRef s = c.need(0, "s");
  if (s->k != K::Str) c.fail("encode_bytes() takes a string");
  rt::Tensor t = rt::Tensor::empty({static_cast<int64_t>(s->s.size())}, DType::I32);
  int32_t *out = t.data<int32_t>();
  for (size_t i = 0; i < s->s.size(); ++i) out[i] = static_cast<unsigned char>(s->s[i]);
  return tensor(t);
}

// decode_bytes(x): the string whose bytes are x's elements, in order; no UTF-8 check, so that
// what a byte-level model produces is printed as it is.
ValueRef decodeBytes(HostCall &c) {
  ValueRef x = c.need(0, "x");
  if (x->k != K::Tensor || !isInteger(x->t.dtype()) || x->t.shape().size() != 1)
    c.fail("decode_bytes() takes a 1-d integer tensor of byte values");
  rt::Tensor t = x->t.cast(DType::I64);
  const int64_t *v = t.data<int64_t>();
  std::string s(static_cast<size_t>(t.numel()), '\0');
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (v[i] < 0 || v[i] > 255)
      c.fail("decode_bytes(): element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", not a byte (0..255)");
    s[static_cast<size_t>(i)] = static_cast<char>(static_cast<unsigned char>(v[i]));
  }
  return ::tsr::host::str(s);
}

ValueRef writeText(HostCall &c) {
  const ValueRef &path = c.need(0, "path"), &text = c.need(1, "text");
  if (path->k != K::Str || text->k != K::Str) c.fail("write_text() takes a path string and a string");
  std::FILE *f = std::fopen(path->s.c_str(), "wb");
  bool ok = f && std::fwrite(text->s.data(), 1, text->s.size(), f) == text->s.size();
  int err = errno;
  if (f && std::fclose(f) != 0 && ok) { ok = false; err = errno; }
  if (!ok) c.fail("cannot write `" + path->s + "`: " + std::strerror(err));
  return none();
}

// ---- transforms ----

// grad, value_and_grad, checkpoint: the transformed function; calling it compiles one graph
// (callTransform).
ValueRef transformOf(HostCall &c, sema::Transform tr) {
  Value v;
  v.k = K::Transform;
  v.transform = tr;
  v.inner = c.arg(0, "f");
  if (!v.inner) c.fail(c.b.name + "() needs a function");
  if (ValueRef an = tr == sema::Transform::Checkpoint ? nullptr : c.arg(1, "argnums")) {
    v.argnumsTuple = an->k == K::Tuple || an->k == K::List;
    for (auto &n : v.argnumsTuple ? an->items : std::vector<ValueRef>{an}) {
      if (n->k != K::Int) c.fail("argnums are ints");
      v.argnums.push_back(static_cast<int>(n->i));
    }
  }
  if (ValueRef aux = tr == sema::Transform::Checkpoint ? nullptr : c.arg(2, "has_aux")) {
    if (aux->k != K::Bool) c.fail("has_aux is a bool");
    v.hasAux = aux->b;
  }
  return mk(v);
}
ValueRef grad(HostCall &c) { return transformOf(c, sema::Transform::Grad); }
ValueRef valueAndGrad(HostCall &c) { return transformOf(c, sema::Transform::ValueAndGrad); }
ValueRef checkpoint(HostCall &c) { return transformOf(c, sema::Transform::Checkpoint); }
// vmap(f, in_axes=0, out_axes=0): the transformed function; calling it compiles one graph.
ValueRef vmap(HostCall &c) {
  Value v;
  v.k = K::Transform;
  v.transform = sema::Transform::Vmap;
  v.inner = c.arg(0, "f");
  if (!v.inner) c.fail("vmap() needs a function");
  v.inAxes = c.arg(1, "in_axes");
  v.outAxes = c.arg(2, "out_axes");
  return mk(v);
}

// vjp(f, *primals) -> (f(*primals), pullback); the pullback's graph recomputes f.
ValueRef vjp(HostCall &c) {
  if (c.args.empty()) c.fail("vjp() needs a function");
  std::vector<ValueRef> primals(c.args.begin() + 1, c.args.end());
  ValueRef out = c.I.callValue(c.args[0], primals, {}, c.c, c.env);
  Value pb;
  pb.k = K::Transform;
  pb.transform = sema::Transform::Pullback;
  pb.inner = c.args[0];
  pb.items = primals;
  return seq({out, mk(pb)}, false);
}

// tree_map(fn, tree, *rest): fn on corresponding leaves; tuples, lists and dicts are structure
// (as jax.tree_util.tree_map).
ValueRef treeMap(HostCall &c) {
  ValueRef fnv = c.need(0, "fn");
  std::vector<ValueRef> trees(c.args.begin() + 1, c.args.end());
  std::function<ValueRef(const std::vector<ValueRef> &)> map = [&](const std::vector<ValueRef> &ts) -> ValueRef {
    const ValueRef &t0 = ts.at(0);
    if (t0->k == K::List || t0->k == K::Tuple) {
      std::vector<ValueRef> out;
      for (size_t i = 0; i < t0->items.size(); ++i) {
        std::vector<ValueRef> sub;
        for (auto &t : ts) {
          if (t->k != t0->k || t->items.size() != t0->items.size()) c.fail("tree_map: the trees have different structures");
          sub.push_back(t->items[i]);
        }
        out.push_back(map(sub));
      }
      return seq(out, t0->k == K::List);
    }
    if (t0->k == K::Dict) {
      Value d;
      d.k = K::Dict;
      for (auto &[k, v] : t0->dict) {
        std::vector<ValueRef> sub;
        for (auto &t : ts) {
          ValueRef found;
          if (t->k == K::Dict) for (auto &[k2, v2] : t->dict) if (k2 == k) found = v2;
          if (!found) c.fail("tree_map: the trees have different structures (key \"" + k + "\")");
          sub.push_back(found);
        }
        d.dict.push_back({k, map(sub)});
      }
      return mk(d);
    }
    return c.I.callValue(fnv, ts, {}, c.c, c.env);
  };
  return map(trees);
}

} // namespace

HostRule findHostRule(std::string_view name) {
  static const std::unordered_map<std::string_view, HostRule> rules = {
      {"graph", graphRule},
      // Python values
      {"print", print}, {"len", len}, {"range", range}, {"enumerate", enumerate}, {"zip", zip}, {"progress", progress},
      {"time", time}, {"str", str}, {"int", toInt}, {"float", toFloat}, {"bool", toBool}, {"item", item},
      {"to_host", toHost}, {"list", list}, {"tuple", tuple}, {"dict", dict}, {"sorted", sorted}, {"reversed", reversed},
      {"cdiv", cdiv}, {"list_append", listAppend}, {"list_extend", listExtend}, {"list_pop", listPop},
      {"dict_items", dictItems}, {"dict_keys", dictKeys}, {"dict_values", dictValues}, {"dict_get", dictGet},
      // numbers
      {"math", math}, {"abs", abs}, {"round", round}, {"max", max}, {"min", min}, {"sum", sum},
      // random keys
      {"random_key", randomKey}, {"random_split", randomSplit}, {"random_fold_in", randomFoldIn},
      {"random_randint", randomRandint}, {"random_permutation", randomPermutation},
      // tensors and files
      {"tensor", tensorLiteral}, {"load", load}, {"save", save}, {"load_csv", loadCsv}, {"load_bytes", loadBytes}, {"encode_bytes", encodeBytes}, {"decode_bytes", decodeBytes}, {"write_text", writeText},
      // distribution
      {"dist_mesh", distMesh}, {"dist_rank", distRank}, {"dist_world_size", distWorldSize},
      {"shard_spec", shardSpecRule}, {"dist_tensor", distTensorRule},
      // transforms
      {"grad", grad}, {"value_and_grad", valueAndGrad}, {"checkpoint", checkpoint}, {"vmap", vmap}, {"vjp", vjp}, {"tree_map", treeMap},
  };
  auto it = rules.find(name);
  return it == rules.end() ? nullptr : it->second;
}

bool hasHostBuiltinRule(std::string_view rule) { return findHostRule(rule) != nullptr; }

} // namespace tsr::host
