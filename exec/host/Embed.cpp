// The interpreter's entry points for embedders (Interpreter.h: function, call, vjp, describe):
// what the Python package (python/) calls a bundle's or a source's functions through.
#include "exec/host/InterpreterImpl.h"

#include <sstream>

namespace tsr::host {

ValueRef Interpreter::function(const std::string &name) const {
  const sema::ModuleInfo &m = *impl_->P.main;
  auto g = m.globals.find(name);
  if (g == m.globals.end() || g->second.kind != sema::Symbol::Kind::Function) return nullptr;
  Value v;
  v.k = K::Function;
  v.fn = g->second.fn;
  return mk(v);
}

ValueRef Interpreter::call(const ValueRef &callee, const std::vector<ValueRef> &args) {
  Impl &I = *impl_;
  auto env = std::make_shared<Env>();
  env->module = I.P.main;
  return I.callValue(callee, args, {}, nullptr, env);
}

ValueRef Interpreter::vjp(const ValueRef &callee, const std::vector<ValueRef> &args) {
  Value b;
  b.k = K::Builtin;
  b.builtin = sema::findBuiltin("vjp");
  std::vector<ValueRef> all{callee};
  all.insert(all.end(), args.begin(), args.end());
  return call(mk(b), all);
}

std::string Interpreter::describe(const RuntimeError &e) const {
  const sema::Program &P = impl_->P;
  std::ostringstream out;
  if (e.range.valid() && P.sm.has(e.range.file)) {
    out << P.sm.describe(e.range) << ": error" << (e.code.empty() ? "" : "[" + e.code + "]") << ": " << e.message << "\n";
    const SourceFile &f = P.sm.file(e.range.file);
    LineCol lc = f.lineCol(e.range.begin);
    out << "   " << lc.line << " | " << f.lineText(lc.line) << "\n";
  } else {
    out << "error" << (e.code.empty() ? "" : "[" + e.code + "]") << ": " << e.message << "\n";
  }
  for (auto &n : e.notes) out << "note: " << n << "\n";
  return out.str();
}

} // namespace tsr::host
