// The private interface of the host interpreter (exec/host/): the environment of a body, the
// constructors of host values, and Interpreter::Impl, whose members are defined by responsibility:
// values, types, eager tensor operations and printing (Interpreter.cpp, with the public entry
// points), statements (Statements.cpp), expressions, subscripts and attributes
// (Expressions.cpp), calls and kernel launches (Calls.cpp); the builtins' host rules are
// HostBuiltins.cpp's. Only exec/host/ includes this header.
#pragma once

#include "exec/host/Interpreter.h"

#include "ir/ExternalModels.h"
#include "ir/eval/Evaluator.h"
#include "ir/lower/LowerGraph.h"
#include "ir/passes/Pipeline.h"
#include "runtime/Formats.h"
#include "exec/KernelLauncher.h"
#include "ir/lower/LowerKernel.h"
#include "sema/Builtins.h"
#include "sema/ExternalModels.h"

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <unistd.h>

#include <map>
#include <set>
#include <string_view>

namespace tsr::host {

using namespace tsr::ast;
using sema::TypeKind;
using sema::TypeRef;
namespace T = sema::T;
using K = Value::K;

struct Env {
  std::map<std::string, ValueRef> vars;
  std::shared_ptr<Env> parent; // a lambda's enclosing scope
  const sema::ModuleInfo *module = nullptr;
};

inline ValueRef mk(Value v) { return std::make_shared<Value>(std::move(v)); }
inline ValueRef none() { static ValueRef n = mk({}); return n; }
inline ValueRef boolean(bool b) { Value v; v.k = K::Bool; v.b = b; return mk(v); }
inline ValueRef integer(int64_t i) { Value v; v.k = K::Int; v.i = i; return mk(v); }
inline ValueRef floating(double f) { Value v; v.k = K::Float; v.f = f; return mk(v); }
inline ValueRef str(std::string s) { Value v; v.k = K::Str; v.s = std::move(s); return mk(v); }
inline ValueRef tensor(rt::Tensor t) { Value v; v.k = K::Tensor; v.t = std::move(t); return mk(v); }
inline ValueRef seq(std::vector<ValueRef> items, bool list) { Value v; v.k = list ? K::List : K::Tuple; v.items = std::move(items); return mk(v); }

struct BreakSignal {};
struct ContinueSignal {};
struct ReturnSignal { ValueRef value; };

// progress(iterable, desc=...): a bar redrawn in place on a terminal (stderr), or a plain line
// at every tenth of the way when stderr is a file or a pipe.
class Progress {
public:
  Progress(std::string desc, int64_t total, bool on)
      : desc_(std::move(desc)), total_(total), on_(on && total > 0), tty_(isatty(2)), start_(std::chrono::steady_clock::now()) {}
  void step(int64_t done) {
    if (!on_) return;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    int pct = static_cast<int>(100 * done / total_);
    if (tty_) {
      const int width = 30;
      int filled = static_cast<int>(width * done / total_);
      std::fprintf(stderr, "\r%s %3d%% |%s%s| %lld/%lld [%.1fs]", desc_.c_str(), pct, std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), static_cast<long long>(done), static_cast<long long>(total_), secs);
      std::fflush(stderr);
    } else if (pct / 10 != lastTenth_ || done == total_) {
      lastTenth_ = pct / 10;
      std::fprintf(stderr, "%s %d/%lld (%d%%) %.1fs\n", desc_.c_str(), static_cast<int>(done), static_cast<long long>(total_), pct, secs);
    }
  }
  void finish() {
    if (on_ && tty_) std::fprintf(stderr, "\n");
  }

private:
  std::string desc_;
  int64_t total_;
  bool on_, tty_;
  int lastTenth_ = -1;
  std::chrono::steady_clock::time_point start_;
};

struct HostCall;
/// A rule of host code for builtins (HostBuiltins.cpp): the call's value, or null when the rule declines
/// (a tensor builtin given tensors), and the call then runs as a graph.
using HostRule = ValueRef (*)(HostCall &);
HostRule findHostRule(std::string_view name);

struct Interpreter::Impl {
  const sema::Program &P;
  GraphExecutor &exec;
  std::ostream &out;
  ir::Module graphs;                          // every graph compiled so far
  std::map<std::string, const ir::Graph *> cache; // signature -> graph
  std::map<std::string, TypeRef> cacheResult;
  AstContext synth;                           // synthetic expressions for eager operations
  std::unique_ptr<exec::KernelLauncher> kernels; // kernels launched from host code and from graphs
  int depth = 0;
  // The entry function (`main`) and its int flags' values as it runs, named in shape errors whose
  // sizes the checker left to run time because they come from a flag.
  const sema::FunctionInfo *entry = nullptr;
  std::map<std::string, int64_t> intFlags;

  Impl(const sema::Program &p, GraphExecutor &e, std::ostream &o, std::shared_ptr<exec::StepBackend> backend)
      : P(p), exec(e), out(o), kernels(std::make_unique<exec::KernelLauncher>(p, std::move(backend))) {
    if (!exec.kernels) exec.kernels = kernels.get();
  }

  [[noreturn]] void fail(const std::string &m, SourceRange r, int code = 1) { throw RuntimeError{m, r, code}; }
  // The source text of `r`'s first line, at most 80 characters: a statement's name in a profile.
  std::string statementText(SourceRange r) const;
  // The program's own error found as it ran (a check of its compiled code that failed, debug
  // mode's or an integer division by zero): exit 1 at the place it names, with a note at the
  // launch or call that ran it (`at`), where that is another place.
  [[noreturn]] void failCheck(const ir::ProgramCheckError &e, SourceRange at);

  // ---- values and types -------------------------------------------------------------------

  static std::string kindName(const ValueRef &v);

  // The checker type of a host value, with its value where it is a compile-time one.
  TypeRef typeOf(const ValueRef &v, SourceRange at);

  // Tensors (and keys, as i64 [2]) of a value, in the order lowering makes parameters.
  void flatten(const ValueRef &v, std::vector<rt::Tensor> &out);

  // Rebuilds a value from a result structure and the graph's outputs.
  ValueRef rebuild(const TypeRef &t, const std::vector<rt::Tensor> &outs, size_t &next);

  static std::string key(const TypeRef &t);

  // ---- eager tensor operations --------------------------------------------------------------

  // Evaluates `e` (a synthetic expression over the names _0, _1, ...) as a graph.
  ValueRef eager(Expr *e, const std::vector<ValueRef> &operands, const sema::ModuleInfo &mod, const void *site);

  // Appends a call's arguments to a synthesized call `node` of an eager graph: each value goes
  // into `operands` and the node refers to it by its operand name (_N), keywords by keyword.
  void passArguments(Call *node, std::vector<ValueRef> &operands, const std::vector<ValueRef> &args,
                     const std::vector<std::pair<std::string, ValueRef>> &kwargs, SourceRange at);

  Name *nameNode(size_t i, SourceRange r) { return synth.make<Name>(r, "_" + std::to_string(i)); }

  static bool hasTensor(const ValueRef &v);
  // Stops the program on a lowering failure of the call or operation at `at` (reported at the
  // error's own range where it has one): what cannot run yet, or an error of the program that
  // lowering found (autodiff's, a shape mismatch of tensors whose shapes the checker could not
  // see), with its code and notes. An error inside a called function (`callee`, when known) also
  // names the call, as the checker's specializations do.
  [[noreturn]] void failCompile(const ir::CompileError &err, SourceRange at, const std::string &callee = "");
  // Notes naming the flags of `main` whose values make the sizes of the expressions within
  // `sites` (for a shape error whose sizes the checker left to run time).
  std::vector<std::string> flagNotes(const std::vector<SourceRange> &sites);

  // ---- statements --------------------------------------------------------------------------

  void block(const Block &b, std::shared_ptr<Env> &env);

  bool truthy(const ValueRef &v, SourceRange at);

  void assign(Expr *target, const ValueRef &v, std::shared_ptr<Env> &env);

  void stmt(Stmt *s, std::shared_ptr<Env> &env);

  std::vector<ValueRef> iterate(const ValueRef &v, SourceRange at);

  // ---- expressions -------------------------------------------------------------------------

  const sema::ModuleInfo &moduleOf(const std::shared_ptr<Env> &env);

  // The value of module `m`'s top-level `id = value` (its last such assignment), evaluated once
  // in an environment of the module; null when the module assigns no value to `id` that way.
  std::map<std::pair<const sema::ModuleInfo *, std::string>, ValueRef> moduleValues;
  ValueRef moduleValue(const sema::ModuleInfo &m, const std::string &id);

  ValueRef lookup(const std::string &id, const std::shared_ptr<Env> &env, SourceRange at);

  ValueRef expr(Expr *e, std::shared_ptr<Env> &env);

  ValueRef binary(BinOp op, const ValueRef &l, const ValueRef &r, Expr *le, Expr *re, SourceRange at, const void *site, std::shared_ptr<Env> &env);

  ValueRef compare(Compare *c, std::shared_ptr<Env> &env);

  bool equal(const ValueRef &a, const ValueRef &b);

  int order(const ValueRef &a, const ValueRef &b, SourceRange at);

  // ---- subscripts and attributes -------------------------------------------------------------

  ValueRef subscript(Subscript *s, std::shared_ptr<Env> &env);

  ValueRef attribute(Attribute *a, std::shared_ptr<Env> &env);

  // ---- kernel launches ---------------------------------------------------------------------

  // A launch's configuration as a grid lambda sees it (`cfg.BM`): a dict marked as such, whose
  // entries are read as attributes.
  static constexpr const char *kConfigMark = "kernel configuration";
  // A KVCache (spec 14): a dict of its storage k, v and its i32 count of positions appended pos,
  // marked so (b: rolling_window), as graph lowering's record of it (ir/lower/Lowering.h).
  static constexpr const char *kCacheMark = "KVCache";
  static bool isCache(const ValueRef &v) { return v && v->k == K::Dict && v->s == kCacheMark; }

  // kernel[grid](args) in host code: the kernel runs on the program's device (exec/KernelLauncher.h)
  // and writes into its tensor arguments in place, so the caller's tensors see its results.
  // On the CPU an autotune space takes its first configuration, as in graphs (LowerGraph).
  ValueRef launchKernel(Call *c, Subscript *sub, const sema::FunctionInfo &k, std::shared_ptr<Env> &env);

  // ---- calls -------------------------------------------------------------------------------

  ValueRef call(Call *c, std::shared_ptr<Env> &env);
  // onnx.load(...) (spec 15): the model's function, with the dict of its tensors for
  // split_params=True; onnx.save(path, f, *examples) writes f as a model; null when `c` is
  // neither (Calls.cpp).
  ValueRef onnxLoad(Call *c, std::shared_ptr<Env> &env);
  ValueRef onnxSave(Call *c, std::shared_ptr<Env> &env);

  ValueRef callValue(const ValueRef &callee, std::vector<ValueRef> args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                     Call *c, std::shared_ptr<Env> &env);

  // A call of grad(f), value_and_grad(f), checkpoint(f) or a pullback: one graph computing the
  // transform's result, compiled per argument signature and cached like other eager graphs. A
  // pullback's graph recomputes the forward pass from the primals (vjp(f, *primals)[1](g)).
  ValueRef callTransform(const ValueRef &t, const std::vector<ValueRef> &args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                         Call *c, std::shared_ptr<Env> &env);

  ValueRef callFunction(const sema::FunctionInfo &fn, const std::vector<ValueRef> &args,
                        const std::vector<std::pair<std::string, ValueRef>> &kwargs, SourceRange at);

  // A graph function: one graph per signature (tensor shapes and dtypes, compile-time values),
  // compiled on first use and cached.
  // The run-time shape guard of a call (spec 5): the symbols of the callee's annotated tensor
  // parameters bind to the arguments' sizes, and a symbol bound to two sizes is an error naming
  // it, both sizes and both arguments, at the call (exit 3). What the checker could decide was
  // decided at compile time; this catches sizes known only now.
  void guardCall(const sema::FunctionInfo &fn, const std::vector<std::pair<std::string, ValueRef>> &bound, SourceRange at);

  ValueRef callGraph(const sema::FunctionInfo &fn, const std::vector<std::pair<std::string, ValueRef>> &bound, SourceRange at);

  // ---- builtins ------------------------------------------------------------------------------

  // A builtin called in host code: its entry's host rule (HostBuiltins.cpp, by name), which
  // may decline (a tensor builtin given tensors); then, for builtins of graph code, the call run
  // as a graph of its own.
  ValueRef builtin(const Value &b, std::vector<ValueRef> args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                   Call *c, std::shared_ptr<Env> &env);

  // ---- printing ------------------------------------------------------------------------------

  std::string display(const ValueRef &v);
  std::string repr(const ValueRef &v) { return v->k == K::Str ? "'" + v->s + "'" : display(v); }

  // Python's repr of a float: the shortest text that reads back exactly.
  static std::string pyFloat(double f);

  // The format mini-language of Python's f-strings, for numbers and strings:
  // [[fill]align][sign][width][,][.precision][type] with types f e g d % s.
  std::string formatSpec(const ValueRef &v0, const std::string &spec, SourceRange at);
};

// ---- builtins of host code ------------------------------------------------------------------
//
// The host rules that builtins' entries name (sema/Builtins.h, `host.rule`), by family: Python's
// values (print, len, range, conversions, sequences, dicts), numbers (math, min, max, sum, abs,
// round), random keys, files, and the autodiff transforms. A rule returns null to decline, and the
// call then runs as a graph (the "graph" rule always declines).

struct HostCall {
  Interpreter::Impl &I;
  const sema::BuiltinInfo &b;
  ValueRef self;
  std::vector<ValueRef> &args;
  const std::vector<std::pair<std::string, ValueRef>> &kwargs;
  Call *c;
  std::shared_ptr<Env> &env;
  SourceRange at;

  ValueRef kw(const char *n) const {
    for (auto &[k, v] : kwargs) if (k == n) return v;
    return nullptr;
  }
  /// The argument for parameter `n` at position `i`, by position or keyword; null if absent.
  ValueRef arg(size_t i, const char *n) const { return i < args.size() ? args[i] : kw(n); }
  ValueRef need(size_t i, const char *n) const {
    ValueRef v = arg(i, n);
    if (!v) fail(b.name + "() needs `" + n + "`");
    return v;
  }
  [[noreturn]] void fail(const std::string &m, int code = 1) const { I.fail(m, at, code); }
  bool anyTensor() const {
    for (auto &a : args) if (Interpreter::Impl::hasTensor(a)) return true;
    for (auto &[k, v] : kwargs) if (Interpreter::Impl::hasTensor(v)) return true;
    return false;
  }
};

} // namespace tsr::host
