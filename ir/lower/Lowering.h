// The private interface of graph lowering (ir/lower/): the compile-time values that a graph
// function's body runs over (LV), and the Lowering class, whose members are defined by
// responsibility: values and conversions (LowerValues.cpp), statements and calls of functions
// (LowerStatements.cpp), expressions (LowerExpressions.cpp), the autodiff transforms
// (LowerTransforms.cpp), builtins (LowerBuiltins.cpp); LowerGraph.cpp drives it. Only ir/lower/
// includes this header.
#pragma once

#include "ir/lower/LowerGraph.h"
#include "ir/lower/LowerKernel.h"

#include "ir/autodiff/Autodiff.h"
#include "sema/Builtins.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace tsr::ir::lowering {

using namespace tsr::ast;
using sema::FunctionInfo;
using sema::FunctionKind;
using sema::ModuleInfo;
using sema::TypeKind;
using sema::TypeRef;

// ---- compile-time values ----------------------------------------------------------------------

struct LV;
using LVRef = std::shared_ptr<const LV>;

struct LV {
  enum class K : uint8_t { None, Bool, Int, Float, Str, DType, Tensor, Key, Tuple, List, Dict, Function, Builtin, Module, Lambda, Transformed };
  K kind = K::None;
  bool b = false;
  Dim i;                    // Int: a size, constant or symbolic
  double f = 0;
  std::string s;
  DTypeAttr dt{DType::F32, {}};
  Value *v = nullptr;       // Tensor, Key; an Int that is a run-time value has it too
  bool weak = false;        // Tensor: a run-time Python float (weakly typed, as a constant float)
  std::vector<LVRef> elems;
  std::vector<std::pair<std::string, LVRef>> fields;
  const FunctionInfo *fn = nullptr;
  const sema::BuiltinInfo *builtin = nullptr;
  LVRef self;               // a method's receiver
  const ModuleInfo *module = nullptr;
  const Lambda *lambda = nullptr;
  // Transformed: grad, value_and_grad or checkpoint of `inner`, or a vjp's pullback (`tape`).
  sema::Transform transform = sema::Transform::None;
  LVRef inner;
  std::vector<int> argnums;
  bool tupleArgnums = false;
  bool hasAux = false; // has_aux=True: `inner` returns (scalar, aux), aux passed through
  std::shared_ptr<const struct Tape> tape;
  LVRef inAxes, outAxes; // vmap: pytrees of ints and None (null: 0)
};

// What vjp recorded for its pullback: the span of the forward ops, the differentiated leaves
// (aliases of the primals' float tensors), the output's leaves and the structures.
struct Tape {
  size_t begin = 0, end = 0;
  std::vector<Value *> inputs, outputs;
  LVRef out;
  std::vector<LVRef> primals;
};

inline LVRef mk(LV v) { return std::make_shared<const LV>(std::move(v)); }
inline LVRef none() { return mk({}); }
inline LVRef boolean(bool b) { LV v; v.kind = LV::K::Bool; v.b = b; return mk(v); }
inline LVRef integer(Dim d, Value *rt = nullptr) { LV v; v.kind = LV::K::Int; v.i = std::move(d); v.v = rt; return mk(v); }
inline LVRef floating(double f) { LV v; v.kind = LV::K::Float; v.f = f; return mk(v); }
inline LVRef str(std::string s) { LV v; v.kind = LV::K::Str; v.s = std::move(s); return mk(v); }
inline LVRef tensor(Value *x) { LV v; v.kind = x->type.isKey() ? LV::K::Key : LV::K::Tensor; v.v = x; return mk(v); }
// A Python float known only at run time (a positional float parameter): a 0-d f32 tensor that
// arithmetic treats as weakly typed (spec 6), so that it changes no dtype, as a constant would not.
inline LVRef weakFloat(Value *x) { LV v; v.kind = LV::K::Tensor; v.v = x; v.weak = true; return mk(v); }
inline LVRef tuple(std::vector<LVRef> e, bool list = false) { LV v; v.kind = list ? LV::K::List : LV::K::Tuple; v.elems = std::move(e); return mk(v); }

// A KVCache (spec 14) is a dict of its storage "k" and "v" [batch, heads, max_len, head_dim] and
// "pos", the i32 count of positions appended, marked by s = "KVCache" and b = rolling_window, so
// that every pytree walk (outputs, parameters, autodiff leaves) treats it as the record it is.
inline bool isCache(const LVRef &v) { return v && v->kind == LV::K::Dict && v->s == "KVCache"; }
inline LVRef cacheValue(Value *k, Value *v, Value *pos, bool rolling) {
  LV c;
  c.kind = LV::K::Dict;
  c.s = "KVCache";
  c.b = rolling;
  c.fields = {{"k", tensor(k)}, {"v", tensor(v)}, {"pos", tensor(pos)}};
  return mk(c);
}
inline Value *cacheField(const LVRef &c, const char *name) {
  for (auto &f : c->fields) if (f.first == name) return f.second->v;
  return nullptr;
}

struct Returned {
  LVRef value;
};

TypeRef structureOf(const LVRef &v, SourceRange at);

class Lowering {
public:
  Lowering(Module &m, const sema::Program &p, Graph &g) : m_(m), p_(p), g_(g) {}
  const sema::Program &program() const { return p_; }

  /// Evaluates an expression of `mod` with names bound to values (eager host operations).
  LVRef evalWith(const ModuleInfo &mod, Expr *e, std::map<std::string, LVRef> env);
  Value *tensorOf(const LVRef &x, SourceRange at) { return asTensor(x, std::nullopt, at); }

  LVRef callFunction(const FunctionInfo &fn, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at);

  struct Frame {
    const FunctionInfo *fn;
    const ModuleInfo *module;
    std::map<std::string, LVRef> env;
  };

  Loc loc(SourceRange r);

  [[noreturn]] void unsupported(const std::string &what, SourceRange r) { throw CompileError{what, r}; }

  Value *op(OpKind k, std::vector<Value *> operands, std::vector<Attr> attrs, SourceRange at);

  // ---- values to tensors --------------------------------------------------------------------

  Value *constant(double value, DType dt, SourceRange at);

  // A Python number beside a tensor of dtype `other` (weak typing, spec 6).
  Value *asTensor(const LVRef &x, std::optional<DType> other, SourceRange at);

  static std::string kindName(const LVRef &x);

  static bool isNumber(const LVRef &x) { return x->kind == LV::K::Int || x->kind == LV::K::Float || x->kind == LV::K::Bool; }

  std::optional<int64_t> constInt(const LVRef &x);
  Dim dimOf(const LVRef &x, SourceRange at);
  std::vector<Dim> shapeOf(const LVRef &x, SourceRange at);
  std::vector<int64_t> intsOf(const LVRef &x, SourceRange at);
  bool truthy(const LVRef &x, SourceRange at);

  // ---- statements -------------------------------------------------------------------------

  std::map<std::string, LVRef> &env() { return frames_.back()->env; }

  void block(const Block &b);

  void assign(Expr *target, const LVRef &v, SourceRange at);

  void stmt(Stmt *s);

  std::vector<LVRef> iterate(const LVRef &it, SourceRange at);

  // ---- expressions ------------------------------------------------------------------------

  LVRef evalIn(const ModuleInfo &mod, Expr *e);

  LVRef lookup(const std::string &id, SourceRange at);

  LVRef expr(Expr *e);

  // `dtype @policy`: the policy is read as written (the checker has validated it).
  LVRef policy(const LVRef &dt, Expr *rhs);

  LVRef numberOp(BinOp op, const LVRef &a, const LVRef &b, SourceRange at);

  // Arithmetic with a run-time Python float: beside a tensor, the float takes the dtype that a
  // constant float would (promoteWithWeak); with numbers and other run-time floats, it is Python
  // float arithmetic, computed in f32, whose result is again a weak run-time float.
  LVRef weakBinary(BinOp bop, const LVRef &a, const LVRef &b, SourceRange at);

  LVRef binary(BinOp bop, const LVRef &a, const LVRef &b, SourceRange at);

  LVRef compare(Compare *c);

  Value *index0(Value *x, int64_t i, SourceRange at);

  LVRef subscript(Subscript *s);

  // Basic indexing: ints, slices (positive steps), None and `...`, lowered to slice + reshape.
  Value *indexTensor(Value *x, Subscript *s);

  LVRef attribute(Attribute *a);
  // An attribute of a KVCache (length, appended, k, v, max_len, rolling_window, append):
  // ir/lower/builtins/State.cpp.
  LVRef cacheAttribute(const LVRef &cache, const std::string &name, SourceRange at);

  // kernel[grid](args): one kernel_call op. Kernels write into their tensor arguments; in the
  // graph the call returns the written tensors as new values, and the caller's names for them
  // are rebound, so the graph stays pure. On the CPU an autotune space takes its first
  // configuration (issue: autotuning on the GPU chooses among them).
  LVRef launch(Call *c, Subscript *sub);

  LVRef call(Call *c);

  // onnx.load(...) in graph code (LowerExternal.cpp): the model's function value, or null when
  // `c` is no such call.
  LVRef onnxLoad(Call *c);
  // A call of a model loaded by onnx.load: its Graph IR inlined here, with `env` the bound
  // arguments of its synthetic signature (LowerExternal.cpp).
  LVRef callExternal(const FunctionInfo &fn, const std::map<std::string, LVRef> &env, SourceRange at);

  // Calls a function value: a graph or inline function, a lambda, a builtin or a transformed
  // function.
  LVRef callValue(const LVRef &callee, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at);

  std::map<std::string, LVRef> env_copy() { return frames_.back()->env; }

  // ---- autodiff (docs/ir.md, "Autodiff"; LowerTransforms.cpp) -------------------------------

  std::string locText(Loc l) const;

  // A diagnostic of autodiff, reported at the transform's call.
  [[noreturn]] void autodiffError(DiagKind k, std::vector<std::string> args, SourceRange at, std::vector<std::string> notes = {});

  // Runs a transform of ir/autodiff, turning its errors into diagnostics at `at`.
  template <typename F> auto runAutodiff(F &&f, SourceRange at) -> decltype(f()) {
    try {
      return f();
    } catch (autodiff::AutodiffError &e) {
      std::vector<std::string> notes;
      if (std::string where = locText(e.loc); !where.empty()) notes.push_back("the operation is at " + where);
      if (e.kind == autodiff::AutodiffError::Kind::Structure) autodiffError(DiagKind::AutodiffStructure, {"custom_vjp", e.what}, at, notes);
      if (e.what.find("kernel") != std::string::npos)
        notes.push_back("give the kernel a gradient with @custom_vjp(fwd=..., bwd=...) on a function that launches it");
      autodiffError(DiagKind::NonDifferentiable, {e.what}, at, notes);
    } catch (IRError &e) {
      throw CompileError{"internal: autodiff: " + e.message, at};
    }
  }

  // The tensor leaves of a pytree, in the order collectOutputs uses (keys included when asked).
  static void tensorLeaves(const LVRef &v, std::vector<Value *> &out, bool keys = false);

  static bool isFloatTensor(const LVRef &v) { return v->kind == LV::K::Tensor && autodiff::differentiable(v->v->type); }

  // A copy of the pytree `v` whose float tensors are fresh aliases, appended to `inputs`. With
  // `strict` (grad's arguments) every leaf must be a float tensor: anything else is
  // GradNonFloat, named by its path (`argument 0["step"]`).
  LVRef aliasLeaves(const LVRef &v, std::vector<Value *> &inputs, SourceRange at, bool strict, const std::string &path);

  // `like` with its float tensor leaves replaced by `vals[next++]`, in aliasLeaves' order; other
  // tensors become zeros of their type and other leaves None (they have no derivative).
  LVRef replaceLeaves(const LVRef &like, const std::vector<Value *> &vals, size_t &next, SourceRange at);

  // The leaves of `given` (a cotangent or tangent) at the float tensor leaves of `like`, as
  // tensors of those leaves' types: numbers become constants; None gives null (zero). False when
  // the structures differ.
  bool matchLeaves(const LVRef &like, const LVRef &given, std::vector<Value *> &out, SourceRange at);

  std::string structureText(const LVRef &v, SourceRange at);

  static std::string functionName(const LVRef &f);

  autodiff::Span span(size_t begin, size_t end, std::vector<Value *> inputs, std::vector<Value *> outputs);

  // Lowers f(args) inline as the span to differentiate.
  LVRef lowerSpan(const LVRef &f, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at, size_t &begin, size_t &end);

  LVRef callTransformed(const LV &t, std::vector<LVRef> args, const std::map<std::string, LVRef> &kwargs, SourceRange at);

  // grad(f, argnums)(*args) and value_and_grad: reverse mode from a scalar output, seeded with
  // 1, or with k under @loss_scale(k) (spec 6), whose gradients are then divided by k.
  LVRef gradCall(const LV &t, std::vector<LVRef> args, const std::map<std::string, LVRef> &kwargs, SourceRange at);

  // vjp(f, *primals) -> (out, pullback).
  LVRef vjpCall(const std::vector<LVRef> &all, SourceRange at);

  // jvp(f, primals, tangents) -> (out, tangent_out).
  LVRef jvpCall(const LVRef &f, const LVRef &primalsArg, const LVRef &tangentsArg, SourceRange at);

  // A function with @custom_vjp(fwd=..., bwd=...) called while differentiating: its forward
  // function runs (returning the output and the residuals), and a region records how the
  // backward function maps the output's cotangent to the positional arguments' cotangents.
  LVRef customVjpCall(const FunctionInfo &fn, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at);

  // vmap(f, in_axes, out_axes)(*args) (LowerVmap.cpp): f lowered on one example, its ops
  // batched by ir/autodiff/Batching.h.
  LVRef vmapCall(const LV &t, std::vector<LVRef> args, const std::map<std::string, LVRef> &kwargs, SourceRange at);

  // scan(f, init, xs, length, reverse) (LowerScan.cpp): one scan region op whose body is f
  // lowered once into a graph of its own.
  LVRef scanCall(const LVRef &f, LVRef init, const LVRef &xs, const LVRef &length, bool reverse, SourceRange at);

  // ---- builtins ------------------------------------------------------------------------------

  LVRef arg(const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kw, size_t i, const char *name);

  DTypeAttr dtypeArg(const LVRef &v, DTypeAttr dflt);

  Value *reduce(OpKind k, Value *x, const LVRef &axisArg, bool keep, SourceRange at);

  // The number of elements a reduction over `axisArg` (all axes when None) combines, as a
  // scalar of dtype `dt`. Each symbolic axis is read separately (dim_value floors it), and the
  // product is formed at run time: a stepped slice's extent "(N + 1)/2" is floored on its own,
  // whereas the product of the symbolic dims would floor 2 * (N + 1)/2 = N + 1 only once.
  Value *reducedCount(Value *x, const LVRef &axisArg, DType dt, SourceRange at);

  LVRef builtin(const LV &b, std::vector<LVRef> args, const std::map<std::string, LVRef> &kw, SourceRange at, SourceRange calleeRange);

  Module &m_;
  const sema::Program &p_;
  Graph &g_;
  std::vector<Frame *> frames_;
  int depth_ = 0;
  // Autodiff: the regions recorded so far (checkpoints, custom_vjp calls), stop_gradient's
  // results, and how many differentiated calls are being lowered.
  std::vector<autodiff::Region> regions_;
  std::unordered_set<const Value *> constants_;
  int diffDepth_ = 0;
};

} // namespace tsr::ir::lowering
