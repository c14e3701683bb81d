// The host interpreter: calls of functions, lambdas, transforms and builtins, and kernel launches.
#include "exec/host/InterpreterImpl.h"
#include "exec/host/DataParallel.h"
#include "exec/host/TensorParallel.h"
#include "runtime/dist/Dist.h"

namespace tsr::host {

ValueRef Interpreter::Impl::launchKernel(Call *c, Subscript *sub, const sema::FunctionInfo &k, std::shared_ptr<Env> &env) {
  std::vector<ir::Attr> attrs = ir::launchConfig(k);
  std::vector<ValueRef> positional;
  std::vector<std::pair<std::string, ValueRef>> keywords;
  for (const Arg &a : c->args) {
    if (a.kind == ArgKind::Positional) positional.push_back(expr(a.value, env));
    else if (a.kind == ArgKind::Keyword) keywords.push_back({a.name, expr(a.value, env)});
    else fail("`*` and `**` arguments of a kernel launch cannot run yet", a.range);
  }
  Value cfg;
  cfg.k = K::Dict;
  cfg.s = kConfigMark;
  auto number = [](const ir::AttrValue &v) -> ValueRef {
    if (auto *i = std::get_if<int64_t>(&v)) return integer(*i);
    if (auto *b = std::get_if<bool>(&v)) return boolean(*b);
    if (auto *f = std::get_if<double>(&v)) return floating(*f);
    return nullptr;
  };
  for (auto &a : attrs)
    if (ValueRef v = number(a.value)) cfg.dict.push_back({a.name, v});
  std::vector<rt::Tensor> args;
  // A written argument must be a named tensor: an expression's value (a slice, a cast) is a new
  // tensor here, so the kernel's writes would not reach what the expression reads.
  std::vector<Expr *> argExprs;
  for (const Arg &a : c->args) if (a.kind == ArgKind::Positional) argExprs.push_back(a.value);
  std::vector<size_t> written = exec::KernelLauncher::writtenOperands(k);
  size_t ai = 0, runtimeIndex = 0;
  for (const Param &p : k.def->params) {
    ValueRef v;
    Expr *argExpr = p.kind == ParamKind::Positional && ai < argExprs.size() ? argExprs[ai] : nullptr;
    for (auto &[name, x] : keywords) if (name == p.name) v = x;
    for (const Arg &a : c->args) if (a.kind == ArgKind::Keyword && a.name == p.name) argExpr = a.value;
    if (!v && p.kind == ParamKind::Positional && ai < positional.size()) v = positional[ai++];
    if (p.kind != ParamKind::KeywordOnly && std::find(written.begin(), written.end(), runtimeIndex++) != written.end() &&
        argExpr && argExpr->kind != Kind::Name)
      fail("a kernel writing into a tensor that has no name cannot run yet (pass a named tensor)", argExpr->range);
    if (p.kind == ParamKind::KeywordOnly) {
      bool configured = false;
      for (auto &a : attrs) configured |= a.name == p.name;
      if (configured) continue; // the autotune space or the schedule sets it
      if (!v && p.defaultValue) {
        auto scope = std::make_shared<Env>();
        scope->module = k.module;
        v = expr(p.defaultValue, scope);
      }
      if (!v) fail("the launch of `" + k.name + "` is missing the compile-time argument `" + p.name + "`", c->range);
      if (v->k == K::Int) attrs.push_back({p.name, v->i});
      else if (v->k == K::Bool) attrs.push_back({p.name, v->b});
      else if (v->k == K::Float) attrs.push_back({p.name, v->f});
      else fail("the compile-time argument `" + p.name + "` of a kernel must be an int, a float or a bool, not a " + kindName(v), c->range);
      cfg.dict.push_back({p.name, v});
      continue;
    }
    if (!v) fail("the launch of `" + k.name + "` is missing the argument `" + p.name + "`", c->range);
    if (v->k == K::Tensor) { args.push_back(v->t); continue; }
    // A number for a scalar parameter: its annotation's dtype (`alpha: f32`), else the number's.
    DType d = v->k == K::Float ? DType::F32 : v->k == K::Bool ? DType::Bool : DType::I64;
    if (auto *n = p.annotation ? dyn_cast<Name>(p.annotation) : nullptr)
      if (auto a = dtypeFromName(n->id)) d = *a;
    if (v->k == K::Int) args.push_back(rt::Tensor::fromI64({}, d, std::vector<int64_t>{v->i}));
    else if (v->k == K::Float) args.push_back(rt::Tensor::scalar(v->f, d));
    else if (v->k == K::Bool) args.push_back(rt::Tensor::fromI64({}, d, std::vector<int64_t>{v->b}));
    else fail("a " + kindName(v) + " cannot be passed to a kernel", c->range);
  }
  // The grid: ints, a tuple of ints, or a lambda of the configuration giving either.
  ValueRef grid;
  if (sub->indices.size() == 1) grid = expr(sub->indices[0], env);
  else {
    std::vector<ValueRef> es;
    for (Expr *i : sub->indices) es.push_back(expr(i, env));
    grid = seq(es, false);
  }
  // The grid for a configuration (the autotune space's entries of `cfgAttrs` replace those of
  // `cfg`): what an autotuner times each configuration with (exec/Autotune.h).
  auto gridOf = [&](const std::vector<ir::Attr> &cfgAttrs) {
    Value c = cfg;
    for (auto &a : cfgAttrs)
      if (ValueRef v = number(a.value))
        for (auto &[name, x] : c.dict)
          if (name == a.name) x = v;
    for (const char *knob : {"warps", "stages"}) {
      bool present = false;
      for (auto &[name, x] : c.dict) present |= name == knob;
      if (!present) c.dict.push_back({knob, integer(std::string(knob) == "warps" ? 4 : 2)});
    }
    ValueRef g = grid->k == K::Lambda ? callValue(grid, {mk(c)}, {}, nullptr, env) : grid;
    std::vector<int64_t> sizes;
    auto size = [&](const ValueRef &x) {
      if (x->k != K::Int) fail("a grid is made of ints, not a " + kindName(x), sub->range);
      sizes.push_back(x->i);
    };
    if (g->k == K::Tuple || g->k == K::List) for (auto &x : g->items) size(x);
    else size(g);
    return sizes;
  };
  try {
    if (k.autotune && k.space.size() > 0) {
      // (choose() adds the grid's rank, part of a launch's identity, from the first configuration
      // whose grid can be computed.)
      attrs = kernels->choose(k, attrs, args, [&](const std::vector<ir::Attr> &a) {
        try {
          return gridOf(a);
        } catch (const RuntimeError &e) {
          throw std::runtime_error("its grid: " + e.message);
        }
      });
      attrs.erase(std::remove_if(attrs.begin(), attrs.end(), [](const ir::Attr &a) { return a.name == "grid"; }), attrs.end());
    }
    std::vector<int64_t> sizes = gridOf(attrs);
    attrs.push_back({"grid", std::vector<Dim>(sizes.size(), Dim::unknown())});
    kernels->launch(k, attrs, args, sizes);
  } catch (const ir::ProgramCheckError &e) {
    failCheck(e, c->range);
  } catch (const exec::LaunchError &e) {
    if (!e.construct.empty()) fail(e.construct + " cannot run yet", e.range.valid() ? e.range : c->range);
    fail(e.what(), c->range);
  } catch (const exec::NoCodeError &e) {
    fail(e.what(), c->range, 3);
  } catch (const std::exception &e) {
    fail("internal error: kernel `" + k.name + "`: " + e.what(), c->range, 70);
  }
  return none();
}

ValueRef Interpreter::Impl::call(Call *c, std::shared_ptr<Env> &env) {
  if (ValueRef model = onnxLoad(c, env)) return model;
  if (auto *sub = dyn_cast<Subscript>(c->func); sub && (sub->value->kind == Kind::Name || sub->value->kind == Kind::Attribute)) {
    ValueRef base = expr(sub->value, env);
    if (base->k == K::Function && base->fn->kind == sema::FunctionKind::Kernel) return launchKernel(c, sub, *base->fn, env);
  }
  ValueRef callee = expr(c->func, env);
  std::vector<ValueRef> args;
  std::vector<std::pair<std::string, ValueRef>> kwargs;
  for (const Arg &a : c->args) {
    if (a.kind == ArgKind::Positional) args.push_back(expr(a.value, env));
    else if (a.kind == ArgKind::Keyword) kwargs.push_back({a.name, expr(a.value, env)});
    else if (a.kind == ArgKind::Star) for (auto &x : iterate(expr(a.value, env), a.value->range)) args.push_back(x);
    else fail("`**` arguments cannot run yet", a.range);
  }
  return callValue(callee, args, kwargs, c, env);
}

ValueRef Interpreter::Impl::onnxLoad(Call *c, std::shared_ptr<Env> &env) {
  auto *at = dyn_cast<Attribute>(c->func);
  auto *ns = at ? dyn_cast<Name>(at->value) : nullptr;
  if (!ns || ns->id != "onnx" || (at->attr != "load" && at->attr != "save")) return nullptr;
  // A name `onnx` the program binds is its own (the checker resolved it so too).
  for (Env *e = env.get(); e; e = e->parent.get())
    if (e->vars.count("onnx")) return nullptr;
  const sema::ModuleInfo &m = moduleOf(env);
  if (m.globals.count("onnx")) return nullptr;
  if (at->attr == "save") return onnxSave(c, env);
  // The checker read the model and made its function (sema/CheckOnnx.cpp), and recorded the call.
  auto load = P.externalLoads.find(c);
  auto it = load == P.externalLoads.end() ? P.externalFunctions.end() : P.externalFunctions.find(load->second.key());
  if (it == P.externalFunctions.end()) fail("`onnx.load` of a model the checker did not read", c->range, 70);
  const bool split = load->second.split;
  Value f;
  f.k = K::Function;
  f.fn = it->second.get();
  if (!split) return mk(f);
  ir::ModelGraphSource *src = ir::modelGraphSource();
  const ir::ModelGraph *mg = src ? src->graph(load->second.path) : nullptr;
  if (!mg) fail("`onnx.load`: this tool does not link the ONNX importer", c->range);
  Value d;
  d.k = K::Dict;
  for (size_t i = 0; i < mg->constants.size(); ++i) d.dict.push_back({mg->constantNames[i], tensor(mg->constants[i])});
  return seq({mk(f), mk(d)}, false);
}

// onnx.save(path, f, *examples): `f` lowered for the examples' types (as a call of it would be),
// through the Graph IR pipeline, and written by the exporter (ir::ModelWriter, onnx/Export.h).
ValueRef Interpreter::Impl::onnxSave(Call *c, std::shared_ptr<Env> &env) {
  std::vector<ValueRef> args;
  for (const Arg &a : c->args) args.push_back(expr(a.value, env));
  if (args.size() < 2 || args[0]->k != K::Str || args[1]->k != K::Function || args[1]->fn->kind != sema::FunctionKind::Graph)
    fail("`onnx.save` takes a path, a graph function and its example arguments", c->range);
  const sema::FunctionInfo &fn = *args[1]->fn;
  if (args.size() - 2 != fn.def->params.size())
    fail("`onnx.save` of `" + fn.name + "` needs one example per parameter (" + std::to_string(fn.def->params.size()) + "), not " +
             std::to_string(args.size() - 2),
         c->range);
  std::vector<std::pair<std::string, TypeRef>> params;
  for (size_t i = 0; i < fn.def->params.size(); ++i) params.push_back({fn.def->params[i].name, typeOf(args[i + 2], c->range)});
  ir::ModelWriter *writer = ir::modelWriter();
  if (!writer) fail("`onnx.save`: this tool does not link the ONNX exporter", c->range);
  ir::Module module;
  std::string err;
  try {
    ir::Graph *g = ir::lowerGraphFunction(module, P, fn, params, fn.name);
    ir::runGraphPipeline(*g, true);
    err = writer->write(module, *g, args[0]->s);
  } catch (ir::CompileError &e) {
    failCompile(e, c->range, fn.name);
  } catch (ir::IRError &e) {
    fail("internal error: " + e.message, c->range, 70);
  }
  if (!err.empty()) fail("`onnx.save`: " + err, c->range, err.rfind("internal error", 0) == 0 ? 70 : 1);
  return none();
}

ValueRef Interpreter::Impl::callValue(const ValueRef &callee, std::vector<ValueRef> args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                   Call *c, std::shared_ptr<Env> &env) {
  SourceRange at = c ? c->range : SourceRange{};
  switch (callee->k) {
  case K::Function:
    if (auto axes = dataParallelAxes(*callee->fn)) // @distribute(strategy="data_parallel"): DataParallel.h
      return callDataParallel(*this, *callee->fn, *axes, args, [&](const std::vector<ValueRef> &a) { return callFunction(*callee->fn, a, kwargs, at); }, at);
    return callFunction(*callee->fn, args, kwargs, at);
  case K::Lambda: {
    auto scope = std::make_shared<Env>();
    scope->parent = callee->closure;
    size_t i = 0;
    for (const Param &p : callee->lambda->params) {
      if (i < args.size()) scope->vars[p.name] = args[i++];
      else if (p.defaultValue) scope->vars[p.name] = expr(p.defaultValue, callee->closure);
      else fail("the lambda is missing the argument `" + p.name + "`", at);
    }
    return expr(callee->lambda->body, scope);
  }
  case K::Builtin: return builtin(*callee, args, kwargs, c, env);
  case K::Transform:
    if (callee->inner && callee->inner->k == K::Function &&
        (callee->transform == sema::Transform::Grad || callee->transform == sema::Transform::ValueAndGrad))
      if (auto axes = dataParallelAxes(*callee->inner->fn))
        return callDataParallel(*this, *callee->inner->fn, *axes, args,
                                [&](const std::vector<ValueRef> &a) { return callTransform(callee, a, kwargs, c, env); }, at, true);
    return callTransform(callee, args, kwargs, c, env);
  case K::DType:
    // A dtype whose name is also a builtin's (`bool`): calling it calls the builtin.
    if (const sema::BuiltinInfo *b = callee->policies.empty() ? sema::findBuiltin(dtypeName(callee->dtype)) : nullptr) {
      Value v;
      v.k = K::Builtin;
      v.builtin = b;
      return builtin(v, args, kwargs, c, env);
    }
    fail("a " + kindName(callee) + " is not callable", at);
  default: fail("a " + kindName(callee) + " is not callable", at);
  }
}

ValueRef Interpreter::Impl::callTransform(const ValueRef &t, const std::vector<ValueRef> &args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                       Call *c, std::shared_ptr<Env> &env) {
  SourceRange at = c ? c->range : SourceRange{};
  std::vector<ValueRef> operands;
  Expr *func = nullptr;
  if (t->inner && t->inner->k == K::Lambda) {
    if (t->transform == sema::Transform::Pullback) fail("vjp of a lambda cannot run yet; name the function", at);
    // A lambda: the graph computes `transform(lambda CAPTURED..., PARAMS: BODY,
    // argnums=...)(captured..., args...)`, so that the values the lambda captures from host
    // code are the graph's inputs (and not differentiated: argnums move past them).
    const Lambda *lam = t->inner->lambda;
    std::vector<std::string> captured;
    std::function<void(Node *)> walk = [&](Node *n) {
      if (auto *nm = dyn_cast<Name>(n)) {
        bool param = false;
        for (const Param &p : lam->params) param |= p.name == nm->id;
        bool seen = std::find(captured.begin(), captured.end(), nm->id) != captured.end();
        if (!param && !seen)
          for (Env *e = t->inner->closure.get(); e; e = e->parent.get())
            if (e->vars.count(nm->id)) { captured.push_back(nm->id); break; }
      }
      forEachChild(n, walk);
    };
    walk(lam->body);
    Value vb;
    vb.k = K::Builtin;
    vb.builtin = sema::findBuiltin(t->transform == sema::Transform::Grad           ? "grad"
                                   : t->transform == sema::Transform::ValueAndGrad ? "value_and_grad"
                                   : t->transform == sema::Transform::Vmap         ? "vmap"
                                                                                   : "checkpoint");
    operands.push_back(mk(vb));
    auto *wrapped = synth.make<Lambda>(lam->range);
    for (const std::string &name : captured) {
      Param p;
      p.name = name;
      wrapped->params.push_back(p);
      ValueRef v;
      for (Env *e = t->inner->closure.get(); e && !v; e = e->parent.get())
        if (auto it = e->vars.find(name); it != e->vars.end()) v = it->second;
      operands.push_back(v);
    }
    for (const Param &p : lam->params) wrapped->params.push_back(p);
    wrapped->body = lam->body;
    auto *inner = synth.make<Call>(at, nameNode(0, at));
    inner->args.push_back({ArgKind::Positional, "", wrapped, at});
    if (t->transform == sema::Transform::Vmap) {
      // in_axes with None for every captured value (passed as a compile-time operand); an int
      // or None given for all arguments is repeated for each of the lambda's.
      std::vector<ValueRef> specs(captured.size(), none());
      if (t->inAxes && (t->inAxes->k == K::Tuple || t->inAxes->k == K::List))
        specs.insert(specs.end(), t->inAxes->items.begin(), t->inAxes->items.end());
      else
        for (size_t i = 0; i < lam->params.size(); ++i) specs.push_back(t->inAxes ? t->inAxes : integer(0));
      operands.push_back(seq(specs, false));
      inner->args.push_back({ArgKind::Keyword, "in_axes", nameNode(operands.size() - 1, at), at});
      if (t->outAxes) {
        operands.push_back(t->outAxes);
        inner->args.push_back({ArgKind::Keyword, "out_axes", nameNode(operands.size() - 1, at), at});
      }
    } else if (t->transform != sema::Transform::Checkpoint) {
      std::vector<int> nums = t->argnums.empty() ? std::vector<int>{0} : t->argnums;
      Expr *an = nullptr;
      if (t->argnumsTuple) {
        auto *tup = synth.make<ast::Tuple>(at);
        for (int n : nums) tup->elts.push_back(synth.make<IntLit>(at, n + static_cast<int64_t>(captured.size())));
        an = tup;
      } else {
        an = synth.make<IntLit>(at, nums[0] + static_cast<int64_t>(captured.size()));
      }
      inner->args.push_back({ArgKind::Keyword, "argnums", an, at});
      if (t->hasAux) inner->args.push_back({ArgKind::Keyword, "has_aux", synth.make<BoolLit>(at, true), at});
    }
    auto *node = synth.make<Call>(at, inner);
    for (size_t i = 1; i <= captured.size(); ++i) node->args.push_back({ArgKind::Positional, "", nameNode(i, at), at});
    passArguments(node, operands, args, kwargs, at);
    return eager(node, operands, moduleOf(env), c ? static_cast<const void *>(c) : static_cast<const void *>(t.get()));
  }
  if (t->transform == sema::Transform::Pullback) {
    Value vb;
    vb.k = K::Builtin;
    vb.builtin = sema::findBuiltin("vjp");
    operands.push_back(mk(vb));
    operands.push_back(t->inner);
    for (auto &p : t->items) operands.push_back(p);
    auto *vc = synth.make<Call>(at, nameNode(0, at));
    for (size_t i = 1; i < operands.size(); ++i) vc->args.push_back({ArgKind::Positional, "", nameNode(i, at), at});
    auto *sub = synth.make<Subscript>(at, vc);
    sub->indices.push_back(synth.make<IntLit>(at, 1));
    func = sub;
  } else {
    operands.push_back(t);
    func = nameNode(0, at);
  }
  auto *node = synth.make<Call>(at, func);
  passArguments(node, operands, args, kwargs, at);
  return eager(node, operands, moduleOf(env), c ? static_cast<const void *>(c) : static_cast<const void *>(t.get()));
}

ValueRef Interpreter::Impl::callFunction(const sema::FunctionInfo &fn, const std::vector<ValueRef> &args,
                      const std::vector<std::pair<std::string, ValueRef>> &kwargs, SourceRange at) {
  if (fn.kind == sema::FunctionKind::Kernel) fail("kernel `" + fn.name + "` must be launched with a grid", at);
  // Bind arguments to parameters.
  std::vector<std::pair<std::string, ValueRef>> bound;
  size_t ai = 0;
  for (const Param &p : fn.def->params) {
    ValueRef v;
    for (auto &[k, x] : kwargs) if (k == p.name) v = x;
    if (!v && p.kind == ParamKind::Positional && ai < args.size()) v = args[ai++];
    if (!v && p.defaultValue) {
      auto scope = std::make_shared<Env>();
      scope->module = fn.module;
      v = expr(p.defaultValue, scope);
    }
    if (!v) fail("`" + fn.name + "` is missing the argument `" + p.name + "`", at);
    bound.push_back({p.name, v});
  }
  if (&fn == entry)
    for (auto &[k, v] : bound)
      if (v->k == K::Int) intFlags[k] = v->i;
  if (fn.kind == sema::FunctionKind::Graph) return callGraph(fn, bound, at);
  if (++depth > 500) fail("recursion deeper than 500 calls", at);
  auto scope = std::make_shared<Env>();
  scope->module = fn.module;
  for (auto &[k, v] : bound) scope->vars[k] = v;
  ValueRef result = none();
  try {
    block(fn.def->body, scope);
  } catch (ReturnSignal &r) {
    result = r.value;
  }
  --depth;
  return result;
}

// A call's shape guard: the sizes the arguments bring against the callee's annotations. A size
// that does not fit is the program's error found before anything runs (exit 1, as a shape
// mismatch the checker reports), not a fault of the device (exit 3).
void Interpreter::Impl::guardCall(const sema::FunctionInfo &fn, const std::vector<std::pair<std::string, ValueRef>> &bound, SourceRange at) {
  std::map<std::string, std::pair<int64_t, std::string>> sizes; // symbol -> (size, argument)
  for (auto &[n, v] : bound) {
    const sema::ParamInfo *p = fn.param(n);
    if (!p || !p->annotated || !p->annotated->is(TypeKind::Tensor) || v->k != K::Tensor) continue;
    const TypeRef &want = p->annotated;
    if (!want->rankKnown) continue;
    const auto &shape = v->t.shape();
    if (shape.size() != want->dims.size()) {
      fail("argument `" + n + "` of `" + fn.name + "` has rank " + std::to_string(shape.size()) + ", but the parameter is " +
               sema::typeStr(want),
           at);
    }
    for (size_t i = 0; i < shape.size(); ++i) {
      const Dim &d = want->dims[i];
      if (auto c = d.constantValue()) {
        if (*c != shape[i])
          fail("argument `" + n + "` of `" + fn.name + "` has size " + std::to_string(shape[i]) + " in axis " + std::to_string(i) +
                   ", but the parameter is " + sema::typeStr(want),
               at);
        continue;
      }
      if (!d.isSymbol()) continue;
      std::string sym = d.symbols()[0];
      auto [it, fresh] = sizes.emplace(sym, std::make_pair(shape[i], n));
      if (!fresh && it->second.first != shape[i])
        fail("shape guard failed: symbol \"" + sym + "\" is bound to " + std::to_string(it->second.first) + " by `" + it->second.second +
                 "` and to " + std::to_string(shape[i]) + " by `" + n + "` in this call of `" + fn.name + "`",
             at);
    }
  }
}

ValueRef Interpreter::Impl::callGraph(const sema::FunctionInfo &fn, const std::vector<std::pair<std::string, ValueRef>> &bound, SourceRange at) {
  guardCall(fn, bound, at);
  std::vector<std::pair<std::string, TypeRef>> params;
  std::string k = "fn:" + fn.module->name + "." + fn.name + "|";
  // A float given to a positional parameter is a run-time value, a 0-d f32 input (spec 3:
  // keyword-only parameters are the compile-time ones), so that a learning rate that changes
  // every step reuses one compiled graph instead of compiling a graph per value.
  auto runtimeFloat = [&](size_t i) {
    return bound[i].second->k == K::Float && i < fn.def->params.size() && fn.def->params[i].kind == ParamKind::Positional;
  };
  for (size_t i = 0; i < bound.size(); ++i) {
    const auto &[n, v] = bound[i];
    TypeRef t = runtimeFloat(i) ? T::floating() : typeOf(v, at);
    params.push_back({n, t});
    k += n + "=" + key(t) + "|";
  }
  // Shards among the arguments (tensor parallelism): the graph is lowered knowing which. A
  // float passed at run time is one parameter of its own, the same on every rank.
  std::vector<const Value *> leaves;
  for (size_t i = 0; i < bound.size(); ++i) {
    if (runtimeFloat(i)) leaves.push_back(nullptr);
    else leavesOf(bound[i].second, leaves);
  }
  const auto vp = varyingParams(leaves);
  if (vp) k += varyingKey(*vp);
  const ir::Graph *g = nullptr;
  auto it = cache.find(k);
  if (it != cache.end()) {
    g = it->second;
  } else {
    try {
      TypeRef structure;
      rt::profile::Scope span("compile", [&] { return "lower " + fn.name + " to Graph IR"; });
      ir::autodiff::VaryingScope scope(vp ? &*vp : nullptr);
      ir::Graph *lowered = ir::lowerGraphFunction(graphs, P, fn, params, fn.name + "#" + std::to_string(graphs.graphs.size()), &structure);
      ir::runGraphPipeline(*lowered, true);
      g = lowered;
      cacheResult[k] = structure;
    } catch (ir::CompileError &err) {
      failCompile(err, at, fn.name);
    } catch (ir::IRError &err) {
      fail("internal error: " + err.message, at, 70);
    }
    cache[k] = g;
  }
  std::vector<rt::Tensor> ins;
  for (size_t i = 0; i < bound.size(); ++i) {
    if (runtimeFloat(i)) {
      const double value[] = {bound[i].second->f};
      ins.push_back(rt::Tensor::fromF64({}, DType::F32, value));
    } else {
      flatten(bound[i].second, ins);
    }
  }
  // The tensors of models loaded by onnx.load that the graph captured (ir/ExternalModels.h).
  if (!ir::appendCaptured(*g, ins)) fail("internal error: graph `" + g->name + "` has parameters its call does not give", at, 70);
  std::vector<rt::Tensor> outs;
  const int64_t ran = rt::dist::collectivesRun();
  try {
    rt::profile::Scope span("graph", [&] { return "graph " + g->name; }, true);
    if (span.recording()) span.add("at", P.sm.describe(at));
    outs = exec.run(graphs, *g, ins);
  } catch (const ir::ProgramCheckError &e) {
    failCheck(e, at);
  } catch (const ir::ProgramEvalError &e) {
    failCheck(ir::ProgramCheckError(e.message(), {}, e.where()), at);
  } catch (std::exception &err) {
    fail(err.what(), at, 3);
  }
  reportCollectives(*g, ran);
  // The result's structure, as lowering found it (pytrees of tensors, such as a train step's
  // loss and gradients); a flat tuple of the outputs when it has none.
  ValueRef r;
  if (auto st = cacheResult.find(k); st != cacheResult.end() && st->second) {
    size_t next = 0;
    r = rebuild(st->second, outs, next);
  } else if (outs.size() == 1) {
    r = tensor(outs[0]);
  } else {
    std::vector<ValueRef> es;
    for (auto &o : outs) es.push_back(tensor(o));
    r = seq(es, false);
  }
  if (vp) tagResult(r, *g, *vp);
  return r;
}

ValueRef Interpreter::Impl::builtin(const Value &b, std::vector<ValueRef> args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                                   Call *c, std::shared_ptr<Env> &env) {
  const sema::BuiltinInfo &e = *b.builtin;
  SourceRange at = c ? c->range : SourceRange{};
  HostCall call{*this, e, b.self, args, kwargs, c, env, at};
  if (HostRule rule = e.host.given() ? findHostRule(e.host.rule) : nullptr)
    if (ValueRef v = rule(call)) return v;
  const std::string &name = e.name;
  // Everything else with tensors is a graph: the call, with its arguments as parameters.
  if (!(b.builtin->contexts & sema::InGraph)) fail("`" + name + "` cannot run yet", at);
  std::vector<ValueRef> operands;
  auto *node = synth.make<Call>(at, nullptr);
  SourceRange calleeAt = c ? c->func->range : at;
  if (b.self) {
    // A method is called as one (`_0.reshape(3, 2)`): its rule reads the arguments after the
    // receiver as a method's (x.reshape(3, 2) is reshape(x, (3, 2))).
    operands.push_back(b.self);
    node->func = synth.make<Attribute>(calleeAt, nameNode(0, calleeAt), name, calleeAt);
  } else {
    operands.push_back(mk(b));
    node->func = nameNode(0, calleeAt);
  }
  passArguments(node, operands, args, kwargs, at);
  return eager(node, operands, moduleOf(env), c);
}

} // namespace tsr::host
