// `onnx.load(path, split_params=False)` (spec 15): the checker reads the model at compile time,
// through the importer the tool registered (sema/ExternalModels.h), and gives the call the type
// of a graph function whose parameters are the model's inputs (and, split, the dict of its
// tensors first). The function is a FunctionInfo of its own, kept by the Program, with a
// synthetic signature (`def`): calls of it are then checked by callFunction like calls of any
// graph function, the host interpreter binds their arguments as it does for any function, and
// graph lowering inlines the model's Graph IR in place of a body.
//
// `onnx` is not a builtin namespace of the registry: `onnx.load` is a compile-time form resolved
// like an import (its argument names a file relative to the module), recognized here only where
// no local or module name `onnx` is bound.
#include "sema/Checker.h"
#include "sema/ExternalModels.h"

#include <filesystem>

namespace tsr::sema {

using namespace tsr::ast;

namespace {

// A model's input name as a parameter name: letters, digits and `_` (ONNX names may be any
// string: "input.1", "x:0").
std::string paramName(const std::string &n, size_t i) {
  std::string out;
  for (char ch : n) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "x" + std::to_string(i) + "_" + out;
  return out;
}

} // namespace

TypeRef FunctionChecker::onnxCall(Call *c) {
  auto *at = dyn_cast<Attribute>(c->func);
  auto *ns = at ? dyn_cast<Name>(at->value) : nullptr;
  if (!ns || ns->id != "onnx") return nullptr;
  for (FunctionChecker *fc = this; fc; fc = fc->parent_)
    if (fc->lookupLocal("onnx")) return nullptr;
  if (mod_.globals.count("onnx")) return nullptr;

  DiagnosticEngine &D = pc_.P.diags;
  std::string name = "onnx." + at->attr;
  if (at->attr == "save") return onnxSave(c);
  if (at->attr != "load") {
    D.report(DiagKind::NoSuchAttribute, at->attrRange, {"module `onnx`", at->attr});
    return T::unknown();
  }
  if (ctx_ == BodyContext::Kernel) {
    D.report(DiagKind::NotInKernel, c->range, {"`onnx.load`", "load the model in host code or at module level"});
    return T::unknown();
  }
  CallSite site;
  site.name = name;
  site.range = c->range;
  site.calleeRange = c->func->range;
  site.diags = &D;
  for (const Arg &a : c->args) {
    TypeRef t = expr(a.value);
    if (a.kind == ArgKind::Positional) site.args.push_back({t, a.value->range, a.value, ""});
    else if (a.kind == ArgKind::Keyword) {
      ArgInfo ai{t, a.value->range, a.value, a.name};
      ai.keywordRange = {a.range.file, a.range.begin, a.value->range.begin > a.range.begin ? a.value->range.begin - 1 : a.range.end};
      site.keywords.push_back(ai);
    } else {
      D.report(DiagKind::NotCompileTime, a.range, {"the arguments of `onnx.load`"});
      return T::unknown();
    }
  }
  if (!site.expect({"path"}, 1, {"split_params"})) return T::unknown();
  const ArgInfo *pathArg = site.arg(0, "path");
  std::optional<std::string> written = site.constStr(pathArg, "path");
  if (!written) {
    if (pathArg->type->is(TypeKind::Str) || pathArg->type->is(TypeKind::Unknown))
      D.report(DiagKind::NotCompileTime, pathArg->range, {"the model path of `onnx.load` (a string constant, read when the program compiles)"});
    return T::unknown();
  }
  bool split = false;
  if (const ArgInfo *s = site.kwarg("split_params")) {
    std::optional<bool> v = site.constBool(s, "split_params");
    if (!v) {
      if (s->type->is(TypeKind::Bool)) D.report(DiagKind::NotCompileTime, s->range, {"`split_params` of `onnx.load`"});
      return T::unknown();
    }
    split = *v;
  }

  std::string path = resolveModelPath(mod_.path, *written);
  std::string key = path + (split ? "|split" : "");
  auto &known = pc_.P.externalFunctions;
  FunctionInfo *fn = nullptr;
  if (auto it = known.find(key); it != known.end()) {
    fn = it->second.get();
  } else {
    ModelImporter *importer = modelImporter();
    if (!importer) {
      D.report(DiagKind::OnnxLoad, c->range, {*written, "this tool does not link the ONNX importer (use tsrc or tsr)"});
      return T::unknown();
    }
    auto sig = importer->signature(path);
    if (auto *e = std::get_if<ModelLoadError>(&sig)) {
      D.report(e->unsupported ? DiagKind::OnnxUnsupported : DiagKind::OnnxLoad, c->range, {*written, e->message});
      return T::unknown();
    }
    const ModelSignature &s = std::get<ModelSignature>(sig);
    auto info = std::make_unique<FunctionInfo>();
    // Messages name the function by the model's file name; a second model of the same file name
    // (another folder) is told apart by a suffix, as host code's compiled graphs are cached by name.
    std::string base = std::filesystem::path(path).filename().string();
    std::string fname = base;
    for (int n = 2;; ++n) {
      bool taken = false;
      for (auto &[k, f] : known) taken |= f->name == fname && f->externalModel != path;
      if (!taken) break;
      fname = base + "_" + std::to_string(n);
    }
    info->name = fname;
    info->kind = FunctionKind::Graph;
    info->module = &mod_;
    info->externalModel = path;
    info->externalSplit = split;
    info->symbols = s.symbols;
    auto *def = pc_.P.externalAst.make<FunctionDef>(c->range, fname);
    def->nameRange = c->range;
    auto addParam = [&](const std::string &pname, TypeRef t) {
      ParamInfo p;
      p.name = pname;
      p.annotated = std::move(t);
      p.range = c->range;
      info->params.push_back(p);
      Param ap;
      ap.name = pname;
      ap.range = ap.nameRange = c->range;
      def->params.push_back(ap);
    };
    if (split) addParam("params", T::dict(s.params));
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      std::string pname = paramName(s.inputs[i].first, i);
      while (info->param(pname)) pname += "_";
      addParam(pname, s.inputs[i].second);
    }
    info->declaredReturn = s.outputs.size() == 1 ? s.outputs[0] : T::tuple(s.outputs);
    info->inferredReturn = info->declaredReturn;
    info->checked = true;
    info->def = def;
    fn = info.get();
    known[key] = std::move(info);
  }
  pc_.P.externalLoads[c] = {&mod_, *written, path, split};
  TypeRef f = T::function(fn);
  if (!split) return f;
  return T::tuple({f, fn->params[0].annotated});
}

// onnx.save(path, f, *examples): host code writes the graph function `f` specialized to the
// examples' shapes as an ONNX model. The call of `f` on the examples is checked as a call.
TypeRef FunctionChecker::onnxSave(Call *c) {
  DiagnosticEngine &D = pc_.P.diags;
  if (ctx_ != BodyContext::Host) {
    if (ctx_ == BodyContext::Graph) D.report(DiagKind::NotInGraph, c->range, {"`onnx.save`", "it writes a file: call it from host code"});
    else if (ctx_ == BodyContext::Kernel) D.report(DiagKind::NotInKernel, c->range, {"`onnx.save`", "call it from host code"});
    else D.report(DiagKind::OutsideFunction, c->range, {"onnx.save"});
    return T::unknown();
  }
  Args args;
  for (const Arg &a : c->args) {
    TypeRef t = expr(a.value);
    if (a.kind == ArgKind::Positional) {
      args.positional.push_back({t, a.value->range, a.value, ""});
    } else {
      SourceRange kr = {a.range.file, a.range.begin, a.value->range.begin > a.range.begin ? a.value->range.begin - 1 : a.range.end};
      if (a.kind == ArgKind::Keyword) D.report(DiagKind::UnknownKeyword, kr, {"onnx.save", a.name});
      else D.report(DiagKind::NotCompileTime, a.range, {"the arguments of `onnx.save`"});
      return T::none();
    }
  }
  if (args.positional.size() < 2) {
    D.report(DiagKind::MissingArg, c->range, {"onnx.save", args.positional.empty() ? "path" : "f"});
    return T::none();
  }
  const ArgInfo &path = args.positional[0], &f = args.positional[1];
  if (!path.type->is(TypeKind::Str) && !path.type->is(TypeKind::Unknown))
    D.report(DiagKind::ArgKind, path.range, {"onnx.save", "a string", "path", typeStr(path.type)});
  if (f.type->is(TypeKind::Unknown)) return T::none();
  if (!f.type->is(TypeKind::Function) || !f.type->fn || f.type->transform != Transform::None || f.type->fn->kind != FunctionKind::Graph) {
    D.report(DiagKind::ArgKind, f.range, {"onnx.save", "a graph function (@jit, or a model from onnx.load)", "f", typeStr(f.type)});
    return T::none();
  }
  Args call;
  call.positional.assign(args.positional.begin() + 2, args.positional.end());
  callFunction(f.type->fn, call, c->range, f.range, nullptr);
  return T::none();
}

} // namespace tsr::sema
