// The host interpreter: host values and their checker types, eager tensor operations (one graph
// per expression and operand types), printing, and the public entry points (Interpreter.h).
#include "exec/host/DataParallel.h"
#include "exec/host/InterpreterImpl.h"
#include "exec/host/TensorParallel.h"
#include "runtime/dist/Dist.h"

namespace tsr::host {

namespace {

class EvaluatorExecutor : public GraphExecutor {
public:
  std::vector<rt::Tensor> run(const ir::Module &m, const ir::Graph &g, const std::vector<rt::Tensor> &inputs) override {
    return ir::evaluate(m, g, inputs, kernels);
  }
};

} // namespace

std::unique_ptr<GraphExecutor> makeReferenceExecutor() { return std::make_unique<EvaluatorExecutor>(); }

std::string Interpreter::Impl::kindName(const ValueRef &v) {
  static const char *n[] = {"None", "bool", "int", "float", "str", "tensor", "random key", "list", "tuple", "dict", "function", "builtin", "module", "lambda", "range", "dtype", "transformed function"};
  return n[static_cast<int>(v->k)];
}

TypeRef Interpreter::Impl::typeOf(const ValueRef &v, SourceRange at) {
  switch (v->k) {
  case K::None: return T::none();
  case K::Bool: return T::boolean(v->b);
  case K::Int: return T::integer(Dim::constant(v->i));
  case K::Float: return T::floating(v->f);
  case K::Str: return T::str(v->s);
  case K::Tensor: {
    std::vector<Dim> dims;
    for (int64_t d : v->t.shape()) dims.push_back(Dim::constant(d));
    return T::tensor(dims, v->t.dtype());
  }
  case K::Key: return T::key();
  case K::List: case K::Tuple: {
    std::vector<TypeRef> es;
    for (auto &e : v->items) es.push_back(typeOf(e, at));
    return v->k == K::List ? T::list(es) : T::tuple(es);
  }
  case K::Dict: {
    if (isCache(v)) {
      const rt::Tensor &k = v->dict.at(0).second->t;
      std::vector<Dim> dims;
      for (int64_t d : k.shape()) dims.push_back(Dim::constant(d));
      return T::kvcache(dims, k.dtype(), {}, v->b);
    }
    std::vector<std::pair<std::string, TypeRef>> fs;
    for (auto &[k, e] : v->dict) fs.push_back({k, typeOf(e, at)});
    return T::dict(fs);
  }
  case K::DType: return T::dtypeVal(v->dtype, v->policies);
  case K::Builtin: return T::builtin(v->builtin, v->self ? typeOf(v->self, at) : nullptr);
  case K::Function: return T::function(v->fn);
  case K::Transform: {
    // grad(f), value_and_grad(f, argnums=...), checkpoint(f): the checker's type of the
    // transformed function, which lowering turns back into the transform.
    if (v->transform == sema::Transform::Pullback) fail("a pullback cannot be passed to compiled code", at);
    auto t = std::make_shared<sema::Type>();
    t->kind = TypeKind::Function;
    t->transform = v->transform;
    t->inner = typeOf(v->inner, at);
    t->argnums = v->argnums;
    t->argnumsTuple = v->argnumsTuple;
    t->hasAux = v->hasAux;
    if (v->inAxes) t->inAxes = typeOf(v->inAxes, at);
    if (v->outAxes) t->outAxes = typeOf(v->outAxes, at);
    return t;
  }
  default: fail("a " + kindName(v) + " cannot be passed to compiled code", at);
  }
}

void Interpreter::Impl::flatten(const ValueRef &v, std::vector<rt::Tensor> &out) {
  switch (v->k) {
  case K::Tensor: out.push_back(v->t); return;
  case K::Key: out.push_back(ir::keyTensor(v->key)); return;
  case K::List: case K::Tuple: for (auto &e : v->items) flatten(e, out); return;
  case K::Dict: for (auto &[k, e] : v->dict) flatten(e, out); return;
  default: return;
  }
}

ValueRef Interpreter::Impl::rebuild(const TypeRef &t, const std::vector<rt::Tensor> &outs, size_t &next) {
  switch (t->kind) {
  case TypeKind::Tensor: return tensor(outs.at(next++));
  case TypeKind::Key: { Value v; v.k = K::Key; v.key = ir::keyOf(outs.at(next++)); return mk(v); }
  case TypeKind::None: return none();
  case TypeKind::Bool: return boolean(t->boolValue.value_or(false));
  case TypeKind::Int: return integer(t->intValue && t->intValue->constantValue() ? *t->intValue->constantValue() : 0);
  case TypeKind::Float: return floating(t->floatValue.value_or(0));
  case TypeKind::Str: return str(t->strValue.value_or(""));
  case TypeKind::DTypeVal: { Value v; v.k = K::DType; v.dtype = t->dtype; v.policies = t->policies; return mk(v); }
  case TypeKind::Tuple: case TypeKind::List: {
    std::vector<ValueRef> es;
    for (auto &e : t->elems) es.push_back(rebuild(e, outs, next));
    return seq(es, t->is(TypeKind::List));
  }
  case TypeKind::Dict: {
    Value v;
    v.k = K::Dict;
    for (auto &[k, e] : t->fields) v.dict.push_back({k, rebuild(e, outs, next)});
    return mk(v);
  }
  case TypeKind::KVCache: {
    // The graph's outputs k, v, pos, in the order of lowering's record.
    Value v;
    v.k = K::Dict;
    v.s = kCacheMark;
    v.b = t->rolling;
    for (const char *f : {"k", "v", "pos"}) v.dict.push_back({f, tensor(outs.at(next++))});
    return mk(v);
  }
  default: return none();
  }
}

std::string Interpreter::Impl::key(const TypeRef &t) {
  std::string s = sema::typeStr(t);
  if (t->intValue) s += "=" + t->intValue->str();
  if (t->floatValue) { char b[32]; std::snprintf(b, sizeof b, "=%.17g", *t->floatValue); s += b; }
  if (t->boolValue) s += *t->boolValue ? "=T" : "=F";
  if (t->strValue) s += "=" + *t->strValue;
  for (auto &e : t->elems) s += "," + key(e);
  for (auto &[k, e] : t->fields) s += "," + k + ":" + key(e);
  if (t->self) s += "self:" + key(t->self);
  // Functions and transforms: which function, which transform, which argument numbers.
  if (t->fn) s += "@" + std::to_string(reinterpret_cast<uintptr_t>(t->fn));
  if (t->transform != sema::Transform::None) {
    s += "~" + std::to_string(static_cast<int>(t->transform)) + (t->argnumsTuple ? "tuple" : "") + (t->hasAux ? "aux" : "");
    for (int n : t->argnums) s += "," + std::to_string(n);
  }
  if (t->inner) s += "inner:" + key(t->inner);
  if (t->inAxes) s += "in_axes:" + key(t->inAxes);
  if (t->outAxes) s += "out_axes:" + key(t->outAxes);
  return s;
}

ValueRef Interpreter::Impl::eager(Expr *e, const std::vector<ValueRef> &operands, const sema::ModuleInfo &mod, const void *site) {
  std::vector<ir::EagerInput> inputs;
  std::string k = std::to_string(reinterpret_cast<uintptr_t>(site)) + "|";
  for (size_t i = 0; i < operands.size(); ++i) {
    inputs.push_back({"_" + std::to_string(i), typeOf(operands[i], e->range)});
    k += key(inputs.back().type) + "|";
  }
  // Shards among the operands (tensor parallelism): the graph is lowered knowing which.
  std::vector<const Value *> leaves;
  for (auto &o : operands) leavesOf(o, leaves);
  const auto vp = varyingParams(leaves);
  if (vp) k += varyingKey(*vp);
  // A data-parallel grad / value_and_grad (DataParallel.h): its graph averages its float outputs
  // over the ranks itself, in buckets that overlap the backward. Not with shards, whose outputs'
  // varying axes (tagResult) the buckets' concatenation would mix.
  const std::string dp = vp ? std::string() : dataParallelGraphKey();
  k += dp;
  const ir::Graph *g = nullptr;
  auto it = cache.find(k);
  if (it != cache.end()) {
    g = it->second;
  } else {
    TypeRef result;
    try {
      rt::profile::Scope span("compile", [&] { return "lower an expression of host code to Graph IR"; });
      ir::autodiff::VaryingScope scope(vp ? &*vp : nullptr);
      ir::Graph *lowered = ir::lowerEagerExpression(graphs, P, mod, e, inputs, "eager" + std::to_string(graphs.graphs.size()), &result);
      if (!dp.empty()) addDataParallelMeans(*lowered);
      g = lowered;
    } catch (ir::CompileError &err) {
      failCompile(err, e->range);
    } catch (ir::IRError &err) {
      fail("internal error: " + err.message, e->range, 70);
    }
    cache[k] = g;
    cacheResult[k] = result;
  }
  std::vector<rt::Tensor> ins;
  for (auto &o : operands) flatten(o, ins);
  // The tensors of models loaded by onnx.load that the graph captured (ir/ExternalModels.h).
  if (!ir::appendCaptured(*g, ins)) fail("internal error: graph `" + g->name + "` has parameters its operands do not give", e->range, 70);
  std::vector<rt::Tensor> outs;
  const int64_t ran = rt::dist::collectivesRun();
  try {
    rt::profile::Scope span("graph", [&] { return "graph " + g->name; }, true);
    if (span.recording()) span.add("at", P.sm.describe(e->range));
    outs = exec.run(graphs, *g, ins);
  } catch (const ir::ProgramCheckError &err) {
    failCheck(err, e->range);
  } catch (const ir::ProgramEvalError &err) {
    failCheck(ir::ProgramCheckError(err.message(), {}, err.where()), e->range);
  } catch (std::exception &err) {
    fail(err.what(), e->range, 3);
  }
  reportCollectives(*g, ran);
  if (!dp.empty()) dataParallelGraphRan(*g);
  size_t next = 0;
  ValueRef r = rebuild(cacheResult[k], outs, next);
  if (vp) tagResult(r, *g, *vp);
  return r;
}

void Interpreter::Impl::passArguments(Call *node, std::vector<ValueRef> &operands, const std::vector<ValueRef> &args,
                   const std::vector<std::pair<std::string, ValueRef>> &kwargs, SourceRange at) {
  for (auto &a : args) {
    operands.push_back(a);
    node->args.push_back({ArgKind::Positional, "", nameNode(operands.size() - 1, at), at});
  }
  for (auto &[k, v] : kwargs) {
    operands.push_back(v);
    node->args.push_back({ArgKind::Keyword, k, nameNode(operands.size() - 1, at), at});
  }
}

bool Interpreter::Impl::hasTensor(const ValueRef &v) {
  if (v->k == K::Tensor || v->k == K::Key) return true;
  for (auto &e : v->items) if (hasTensor(e)) return true;
  for (auto &[k, e] : v->dict) if (hasTensor(e)) return true;
  if (v->self && hasTensor(v->self)) return true;
  return false;
}

void Interpreter::Impl::failCompile(const ir::CompileError &err, SourceRange at, const std::string &callee) {
  SourceRange where = err.range.valid() ? err.range : at;
  bool yet = err.kind == DiagKind::NotCompilableYet;
  RuntimeError e{yet ? err.what + " cannot run yet" : err.what, where, 1, yet ? "" : std::string(diagCode(err.kind)), err.notes};
  if (at.valid() && !(where.file == at.file && where.begin >= at.begin && where.end <= at.end))
    e.notes.push_back((callee.empty() ? std::string("as called here (") : "in `" + callee + "` as called here (") + P.sm.describe(at) + ")");
  bool shapes = err.kind == DiagKind::BroadcastMismatch || err.kind == DiagKind::MatmulInner || err.kind == DiagKind::ReshapeCount ||
                err.kind == DiagKind::ConcatMismatch;
  // Only host code's types are searched (`at` is the operation or call in host code): a graph
  // function's body has symbols of its own, which may share a flag's name.
  if (shapes) for (auto &n : flagNotes({at})) e.notes.push_back(n);
  throw e;
}

std::vector<std::string> Interpreter::Impl::flagNotes(const std::vector<SourceRange> &sites) {
  // The checker's types say which sizes are made of a flag's value: `main`'s int parameters are
  // run-time atoms of their own name in every dim computed from them ("n", "2*n"). Dims print
  // atoms by name, so a flag is mentioned where its name is a whole word of a dim's text.
  auto mentions = [](const std::string &text, const std::string &name) {
    auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t i = text.find(name); i != std::string::npos; i = text.find(name, i + 1))
      if ((i == 0 || !word(text[i - 1])) && (i + name.size() == text.size() || !word(text[i + name.size()]))) return true;
    return false;
  };
  std::set<std::string> named;
  for (auto &[expr, type] : P.exprTypes) {
    bool inside = false;
    for (const SourceRange &r : sites)
      inside |= r.valid() && expr->range.file == r.file && expr->range.begin >= r.begin && expr->range.end <= r.end;
    if (!inside || !type) continue;
    std::vector<Dim> dims = type->dims;
    if (type->intValue) dims.push_back(*type->intValue);
    for (const Dim &d : dims)
      for (auto &[flag, value] : intFlags)
        if (mentions(d.str(), flag)) named.insert(flag);
  }
  std::vector<std::string> notes;
  for (const std::string &flag : named)
    notes.push_back("`" + flag + "` is " + std::to_string(intFlags[flag]) + " in this run: the flag --" + flag + " of `" + entry->name + "`");
  return notes;
}

std::string Interpreter::Impl::display(const ValueRef &v) {
  switch (v->k) {
  case K::None: return "None";
  case K::Bool: return v->b ? "True" : "False";
  case K::Int: return std::to_string(v->i);
  case K::Float: return pyFloat(v->f);
  case K::Str: return v->s;
  case K::Tensor: return rt::format(v->t);
  case K::Key: return "key(" + std::to_string(v->key.k0) + ", " + std::to_string(v->key.k1) + ")";
  case K::List: case K::Tuple: {
    std::string s = v->k == K::List ? "[" : "(";
    for (size_t i = 0; i < v->items.size(); ++i) s += (i ? ", " : "") + repr(v->items[i]);
    if (v->k == K::Tuple && v->items.size() == 1) s += ",";
    return s + (v->k == K::List ? "]" : ")");
  }
  case K::Dict: {
    if (isCache(v)) {
      const rt::Tensor &k = v->dict.at(0).second->t, &pos = v->dict.at(2).second->t;
      std::string s = "KVCache(batch=" + std::to_string(k.shape()[0]) + ", heads=" + std::to_string(k.shape()[1]) +
                      ", max_len=" + std::to_string(k.shape()[2]) + ", head_dim=" + std::to_string(k.shape()[3]) +
                      ", dtype=" + std::string(dtypeName(k.dtype())) + (v->b ? ", rolling_window=True" : "");
      return s + ", appended=" + std::to_string(pos.toI64(0)) + ")";
    }
    std::string s = "{";
    for (size_t i = 0; i < v->dict.size(); ++i) s += (i ? ", " : "") + ("'" + v->dict[i].first + "': ") + repr(v->dict[i].second);
    return s + "}";
  }
  case K::DType: return std::string(dtypeName(v->dtype)) + v->policies.str();
  case K::Function: return "<function " + v->fn->name + ">";
  case K::Builtin: return "<builtin " + v->builtin->name + ">";
  case K::Module: return "<module " + v->module->name + ">";
  case K::Lambda: return "<lambda>";
  case K::Range: return "range(" + std::to_string(v->start) + ", " + std::to_string(v->stop) + (v->step != 1 ? ", " + std::to_string(v->step) : "") + ")";
  case K::Transform: {
    // As the checker names them (sema/Types.cpp typeStr).
    const std::string of = v->inner ? display(v->inner) : "<function>";
    switch (v->transform) {
    case sema::Transform::Grad: return "<grad of " + of + ">";
    case sema::Transform::ValueAndGrad: return "<value_and_grad of " + of + ">";
    case sema::Transform::Checkpoint: return "<checkpointed " + of + ">";
    case sema::Transform::Vmap: return "<vmap of " + of + ">";
    case sema::Transform::Pullback: return "<pullback of " + of + ">";
    default: return "<transform of " + of + ">";
    }
  }
  }
  return "?";
}

std::string Interpreter::Impl::pyFloat(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char b[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(b, sizeof b, "%.*g", p, f);
    if (std::strtod(b, nullptr) == f) break;
  }
  std::string s = b;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string Interpreter::Impl::formatSpec(const ValueRef &v0, const std::string &spec, SourceRange at) {
  ValueRef v = v0;
  if (v->k == K::Tensor && v->t.numel() == 1) v = isFloat(v->t.dtype()) ? floating(v->t.toF64(0)) : integer(v->t.toI64(0));
  size_t i = 0;
  char fill = ' ', align = 0;
  if (spec.size() >= 2 && std::strchr("<>^", spec[1])) { fill = spec[0]; align = spec[1]; i = 2; }
  else if (!spec.empty() && std::strchr("<>^", spec[0])) { align = spec[0]; i = 1; }
  std::string sign;
  if (i < spec.size() && std::strchr("+- ", spec[i])) sign = spec[i++];
  bool zero = false;
  if (i < spec.size() && spec[i] == '0') { zero = true; ++i; }
  int width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + (spec[i++] - '0');
  bool comma = false;
  if (i < spec.size() && spec[i] == ',') { comma = true; ++i; }
  int prec = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    prec = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) prec = prec * 10 + (spec[i++] - '0');
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) fail("invalid format spec `" + spec + "`", at);
  std::string body;
  char buf[128];
  if (v->k == K::Str) {
    body = prec >= 0 ? v->s.substr(0, prec) : v->s;
  } else if (v->k == K::Int && (type == 0 || type == 'd')) {
    body = std::to_string(v->i);
    if (comma) {
      std::string d = body[0] == '-' ? body.substr(1) : body, g;
      for (size_t k = 0; k < d.size(); ++k) { if (k && (d.size() - k) % 3 == 0) g += ','; g += d[k]; }
      body = (body[0] == '-' ? "-" : "") + g;
    }
  } else if (v->k == K::Int || v->k == K::Float || v->k == K::Bool) {
    double x = v->k == K::Float ? v->f : static_cast<double>(v->k == K::Bool ? v->b : v->i);
    if (type == '%') { x *= 100; type = 'f'; }
    if (type == 0 && prec < 0) body = pyFloat(x);
    else {
      std::string f = "%." + std::to_string(prec < 0 ? 6 : prec) + (type == 0 ? std::string("g") : std::string(1, type));
      std::snprintf(buf, sizeof buf, f.c_str(), x);
      body = buf;
    }
    if (spec.back() == '%') body += "%";
  } else {
    body = display(v);
  }
  if (!sign.empty() && sign != "-" && !body.empty() && body[0] != '-') body = (sign == "+" ? "+" : " ") + body;
  if (static_cast<int>(body.size()) < width) {
    size_t pad = width - body.size();
    if (zero && !align) body = std::string(pad, '0') + body;
    else if (align == '<' || (!align && v->k == K::Str)) body += std::string(pad, fill);
    else if (align == '^') body = std::string(pad / 2, fill) + body + std::string(pad - pad / 2, fill);
    else body = std::string(pad, fill) + body;
  }
  return body;
}

Interpreter::Interpreter(const sema::Program &p, GraphExecutor &exec, std::ostream &out,
                         std::shared_ptr<exec::StepBackend> kernelBackend)
    : impl_(std::make_unique<Impl>(p, exec, out, std::move(kernelBackend))) {}
Interpreter::~Interpreter() = default;

void Interpreter::Impl::failCheck(const ir::ProgramCheckError &e, SourceRange at) {
  RuntimeError r{e.what(), e.range, 1};
  if (!r.range.valid() && !e.where.empty()) {
    // FILE:LINE:COL of one of the program's files: the start of that line and column.
    const size_t c2 = e.where.rfind(':'), c1 = c2 == std::string::npos ? c2 : e.where.rfind(':', c2 - 1);
    if (c1 != std::string::npos) {
      const std::string path = e.where.substr(0, c1);
      // (the IR names the stdlib's files `stdlib/...`, ir/lower/LowerGraph.cpp's irSourcePoint)
      std::string stdPath;
      if (path.rfind("stdlib/", 0) == 0 && !P.options.stdlibDir.empty())
        stdPath = P.options.stdlibDir + (P.options.stdlibDir.back() == '/' ? "" : "/") + path.substr(7);
      const uint32_t line = uint32_t(std::stoul(e.where.substr(c1 + 1, c2 - c1 - 1)));
      const uint32_t col = uint32_t(std::stoul(e.where.substr(c2 + 1)));
      for (FileId id = 1; P.sm.has(id); ++id) {
        const SourceFile &f = P.sm.file(id);
        if ((f.path() != path && (stdPath.empty() || f.path() != stdPath)) || line < 1 || line > f.lineCount()) continue;
        const uint32_t off = f.lineStart(line) + (col > 0 ? col - 1 : 0);
        r.range = SourceRange{id, off, off + 1};
        break;
      }
    }
    if (!r.range.valid()) r.message = e.where + ": " + r.message;
  }
  if (at.valid() && P.sm.has(at.file) && !(r.range.valid() && r.range.file == at.file && r.range.begin == at.begin))
    r.notes.push_back("reached from " + P.sm.describe(at));
  throw r;
}

int Interpreter::runMain(const std::string &entry, const std::vector<std::string> &flags, std::ostream &err) {
  Impl &I = *impl_;
  const sema::ModuleInfo &m = *I.P.main;
  auto g = m.globals.find(entry);
  if (g == m.globals.end() || g->second.kind != sema::Symbol::Kind::Function) {
    err << "tsr run: the module has no function `" << entry << "`\n";
    return 1;
  }
  const sema::FunctionInfo &fn = *g->second.fn;
  // In a profile, the run of the entry is the outermost span of the host's track.
  rt::profile::nameThisThread("host");
  rt::profile::Scope span("host", [&] { return entry + "()"; });
  // main's parameters become flags (spec 9): --name value, --name=value; bools take
  // true/false/1/0 (or --name alone for true).
  std::vector<std::pair<std::string, ValueRef>> kwargs;
  for (size_t i = 0; i < flags.size(); ++i) {
    std::string f = flags[i];
    if (f == "--help" || f == "-h") {
      err << "usage: tsr run " << m.path << " [flags]\n\nflags of `" << entry << "`:\n";
      for (auto &p : fn.params) {
        TypeRef t = p.annotated ? p.annotated : p.defaultType;
        err << "  --" << p.name << " " << (t ? sema::typeStr(t) : "value");
        if (p.defaultType) {
          if (p.defaultType->intValue) err << " (default " << p.defaultType->intValue->str() << ")";
          else if (p.defaultType->floatValue) err << " (default " << Impl::pyFloat(*p.defaultType->floatValue) << ")";
          else if (p.defaultType->boolValue) err << " (default " << (*p.defaultType->boolValue ? "True" : "False") << ")";
          else if (p.defaultType->strValue) err << " (default \"" << *p.defaultType->strValue << "\")";
        }
        err << "\n";
      }
      return 0;
    }
    if (f.rfind("--", 0) != 0) {
      err << "tsr run: unexpected argument `" << f << "`; flags are --name value\n";
      return 2;
    }
    std::string name = f.substr(2), value;
    size_t eq = name.find('=');
    const sema::ParamInfo *p = fn.param(eq == std::string::npos ? name : name.substr(0, eq));
    if (eq != std::string::npos) { value = name.substr(eq + 1); name = name.substr(0, eq); }
    if (!p) {
      err << "tsr run: `" << entry << "` has no parameter `" << name << "` (see --help)\n";
      return 2;
    }
    TypeRef t = p->annotated ? p->annotated : p->defaultType;
    bool isBool = t && t->is(TypeKind::Bool);
    if (eq == std::string::npos) {
      if (isBool && (i + 1 >= flags.size() || flags[i + 1].rfind("--", 0) == 0)) value = "true";
      else if (i + 1 < flags.size()) value = flags[++i];
      else { err << "tsr run: --" << name << " needs a value\n"; return 2; }
    }
    try {
      size_t used = 0;
      if (t && t->is(TypeKind::Int)) { int64_t v = std::stoll(value, &used); if (used != value.size()) throw std::invalid_argument(""); kwargs.push_back({name, integer(v)}); }
      else if (t && t->is(TypeKind::Float)) { double v = std::stod(value, &used); if (used != value.size()) throw std::invalid_argument(""); kwargs.push_back({name, floating(v)}); }
      else if (isBool) {
        std::string l = value;
        for (auto &ch : l) ch = static_cast<char>(std::tolower(ch));
        if (l == "true" || l == "1" || l == "yes") kwargs.push_back({name, boolean(true)});
        else if (l == "false" || l == "0" || l == "no") kwargs.push_back({name, boolean(false)});
        else throw std::invalid_argument("");
      } else kwargs.push_back({name, str(value)});
    } catch (std::exception &) {
      err << "tsr run: --" << name << " expects " << (t ? sema::typeStr(t) : "a value") << ", not `" << value << "`\n";
      return 2;
    }
  }
  try {
    I.entry = &fn;
    // The module's meshes (dist.mesh at module level) are made before main runs, so that a mesh
    // that does not fit the run's ranks is an error at once, and graphs lowered later see it.
    for (ast::Stmt *st : m.ast->body)
      if (auto *as = dyn_cast<ast::Assign>(st))
        if (auto *c = dyn_cast<ast::Call>(as->value))
          if (auto *a = dyn_cast<ast::Attribute>(c->func); a && a->attr == "mesh")
            if (auto *n = dyn_cast<ast::Name>(a->value); n && n->id == "dist")
              for (ast::Expr *t : as->targets)
                if (auto *name = dyn_cast<ast::Name>(t)) I.moduleValue(m, name->id);
    try {
      I.callFunction(fn, {}, kwargs, fn.def->nameRange);
    } catch (const ir::ProgramEvalError &e) {
      // A check of a replayed CUDA graph, read where host code read a value back
      // (exec/GraphReplay.h: checks are read lazily): the program's error at its op, exit 1, as
      // the call reports it uncaptured.
      I.failCheck(ir::ProgramCheckError(e.message(), {}, e.where()), {});
    }
  } catch (RuntimeError &e) {
    // One write: the ranks of `tsr run --devices N` share stderr, and the same error on two ranks
    // must not interleave field by field.
    err << describe(e) << std::flush;
    return e.exitCode;
  } catch (BreakSignal &) {
    return 0;
  } catch (const std::exception &e) {
    // A failure that no statement caught: a device's asynchronous error surfacing where host code
    // read a value back (it names the launches and their lines), or the host out of memory.
    err << (std::string("error: ") + e.what() + "\n") << std::flush;
    return 3;
  }
  return 0;
}

} // namespace tsr::host
