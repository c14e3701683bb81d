#include "onnx/Export.h"

#include "ir/ExternalModels.h"
#include "ir/Scan.h"
#include "runtime/Tensor.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <functional>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace tsr::onnxio {

namespace {

using ir::OpKind;

// An op that has no ONNX form, or a graph the exporter cannot write (a symbolic shape).
struct NoForm : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int32_t elemOf(DType d) {
  using T = onnx::TensorProto;
  switch (d) {
  case DType::F32: return T::FLOAT;
  case DType::F64: return T::DOUBLE;
  case DType::F16: return T::FLOAT16;
  case DType::BF16: return T::BFLOAT16;
  case DType::I8: return T::INT8;
  case DType::I32: return T::INT32;
  case DType::I64: return T::INT64;
  case DType::Bool: return T::BOOL;
  default: break;
  }
  throw NoForm("the dtype " + std::string(dtypeName(d)) + " has no ONNX element type the exporter writes");
}

bool isFloatType(DType d) { return isFloat(d); }

class Exporter {
public:
  Exporter(const ir::Module &m, onnx::GraphProto &g) : m_(m), g_(g) {}

  void run(const ir::Graph &graph) {
    graph_ = &graph;
    for (const ir::Value *p : graph.params) {
      std::string name = p->name.empty() ? "input_" + std::to_string(p->id) : p->name;
      names_[p] = name;
      if (auto t = ir::capturedConstant(p->name)) {
        initializer(name, *t);
        continue;
      }
      valueInfo(g_.add_input(), name, p->type);
    }
    ops(graph);
    for (size_t i = 0; i < graph.outputs.size(); ++i) {
      std::string out = "output_" + std::to_string(i);
      node("Identity", {name(graph.outputs[i])}, out);
      valueInfo(g_.add_output(), out, graph.outputs[i]->type);
    }
  }

  // A scan op's body as the body of ONNX's Scan: the consts are the enclosing graph's values,
  // read by their names (ONNX's outer-scope references); the carries and one step's slices are
  // the subgraph's inputs; its outputs the next carries, then the step's ys.
  void runBody(const ir::Graph &body, const std::vector<std::string> &constNames) {
    graph_ = &body;
    for (size_t i = 0; i < body.params.size(); ++i) {
      const ir::Value *p = body.params[i];
      if (i < constNames.size()) {
        names_[p] = constNames[i];
        continue;
      }
      names_[p] = fresh("step_in");
      valueInfo(g_.add_input(), names_[p], p->type);
    }
    ops(body);
    for (const ir::Value *o : body.outputs) {
      std::string out = fresh("step_out");
      node("Identity", {name(o)}, out);
      valueInfo(g_.add_output(), out, o->type);
    }
  }

  [[noreturn]] void noForm(const std::string &what) {
    std::string where;
    if (op_ && op_->loc.valid() && op_->loc.file <= m_.files.size())
      where = " (at " + m_.files[op_->loc.file - 1] + ":" + std::to_string(op_->loc.line) + ":" + std::to_string(op_->loc.col) + ")";
    throw NoForm(what + where);
  }

private:
  void ops(const ir::Graph &graph) {
    for (const ir::Op *o : graph.ops) {
      op_ = o;
      if (o->kind == OpKind::Scan) {
        scan(*o);
        continue;
      }
      names_[o->results.at(0)] = lower(*o);
    }
  }

  // Graph IR's scan as ONNX's Scan (opset 9+): the xs scanned along axis 0, the ys stacked along
  // axis 0; `reverse` runs the steps from the last row and puts step i's y at row i, which is
  // ONNX's reversed input and prepended output.
  void scan(const ir::Op &o) {
    auto s = ir::scanShape(o);
    if (!s || !o.body) noForm("a scan without its counts or body");
    if (s->xs == 0) noForm("a scan over no input (`length` alone; ONNX's Scan needs a scanned input)");
    std::vector<std::string> constNames;
    for (size_t i = 0; i < s->consts; ++i) constNames.push_back(name(o.operands[i]));
    onnx::NodeProto *n = g_.add_node();
    n->set_op_type("Scan");
    n->set_name(fresh("n"));
    for (size_t i = s->consts; i < o.operands.size(); ++i) n->add_input(name(o.operands[i]));
    auto *a = n->add_attribute();
    a->set_name("body");
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto *bg = a->mutable_g();
    bg->set_name(fresh("scan_body"));
    Exporter sub(m_, *bg);
    sub.root_ = root_;
    sub.next_ = next_;
    sub.runBody(*o.body, constNames);
    attrInt(*n, "num_scan_inputs", int64_t(s->xs));
    if (s->reverse) {
      attrInts(*n, "scan_input_directions", std::vector<int64_t>(s->xs, 1));
      const size_t ys = o.results.size() - s->carries;
      if (ys) attrInts(*n, "scan_output_directions", std::vector<int64_t>(ys, 1));
    }
    for (const ir::Value *r : o.results) {
      names_[r] = fresh("scan");
      n->add_output(names_[r]);
    }
  }

  std::string name(const ir::Value *v) { return names_.at(v); }
  std::string fresh(const std::string &base) { return base + "_" + std::to_string((*next_)++); }

  void valueInfo(onnx::ValueInfoProto *vi, const std::string &name, const ir::Type &t) {
    vi->set_name(name);
    auto *tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elemOf(t.dtype));
    auto *shape = tt->mutable_shape();
    for (const Dim &d : t.dims) {
      auto *dim = shape->add_dim();
      if (auto c = d.constantValue()) dim->set_dim_value(*c);
      else dim->set_dim_param(d.str()); // a symbolic size of a generic function stays a name
    }
  }

  void initializer(const std::string &name, const rt::Tensor &t) {
    onnx::TensorProto *p = root_->add_initializer(); // the model's graph, also for a Scan's body
    p->set_name(name);
    p->set_data_type(elemOf(t.dtype()));
    for (int64_t d : t.shape()) p->add_dims(d);
    rt::Tensor c = t.clone(); // contiguous, on the host
    p->set_raw_data(std::string(static_cast<const char *>(c.data()), c.nbytes()));
  }

  std::string constI64(const std::vector<int64_t> &v) {
    std::string n = fresh("c");
    initializer(n, rt::Tensor::fromI64({int64_t(v.size())}, DType::I64, v));
    return n;
  }
  std::string scalar(double v, DType d) {
    std::string n = fresh("c");
    const double value[] = {v};
    initializer(n, rt::Tensor::fromF64({}, d, value));
    return n;
  }

  // A node; its one output is `out`, or a fresh name.
  std::string node(const std::string &type, const std::vector<std::string> &ins, std::string out = "",
                   const std::function<void(onnx::NodeProto &)> &attrs = {}) {
    if (out.empty()) out = fresh(type);
    onnx::NodeProto *n = g_.add_node();
    n->set_op_type(type);
    n->set_name(fresh("n"));
    for (auto &i : ins) n->add_input(i);
    n->add_output(out);
    if (attrs) attrs(*n);
    return out;
  }
  static void attrInt(onnx::NodeProto &n, const std::string &k, int64_t v) {
    auto *a = n.add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attrInts(onnx::NodeProto &n, const std::string &k, const std::vector<int64_t> &v) {
    auto *a = n.add_attribute();
    a->set_name(k);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  std::string cast(const std::string &x, DType from, DType to) {
    if (from == to) return x;
    return node("Cast", {x}, "", [&](onnx::NodeProto &n) { attrInt(n, "to", elemOf(to)); });
  }
  // Operand i cast to `to`.
  std::string in(const ir::Op &o, size_t i, DType to) { return cast(name(o.operands.at(i)), o.operands[i]->type.dtype, to); }
  std::string in(const ir::Op &o, size_t i) { return name(o.operands.at(i)); }

  std::vector<int64_t> known(const std::vector<Dim> &dims, const char *what) {
    std::vector<int64_t> out;
    for (const Dim &d : dims) {
      auto c = d.constantValue();
      if (!c) noForm(std::string(opSpelling(op_->kind)) + " with the symbolic " + what + " " + d.str() + " (export a function specialized to sizes)");
      out.push_back(*c);
    }
    return out;
  }

  // A shape as an int64 tensor: constants, and the symbolic sizes of a generic function read from
  // the shape of an input that has them (Shape, Slice, Concat).
  std::string shapeTensor(const std::vector<Dim> &dims) {
    std::vector<std::string> parts;
    std::vector<int64_t> run;
    auto flush = [&] {
      if (!run.empty()) parts.push_back(constI64(run));
      run.clear();
    };
    for (const Dim &d : dims) {
      if (auto c = d.constantValue()) {
        run.push_back(*c);
        continue;
      }
      flush();
      std::string part;
      for (const ir::Value *p : graph_->params)
        for (size_t i = 0; i < p->type.dims.size() && part.empty(); ++i)
          if (p->type.dims[i] == d)
            part = node("Slice", {node("Shape", {name(p)}), constI64({int64_t(i)}), constI64({int64_t(i) + 1})});
      if (part.empty()) noForm(std::string(opSpelling(op_->kind)) + " with the size " + d.str() + ", which no input's shape gives (export a function specialized to sizes)");
      parts.push_back(part);
    }
    flush();
    if (parts.empty()) return constI64({});
    if (parts.size() == 1) return parts[0];
    return node("Concat", parts, "", [](onnx::NodeProto &n) { attrInt(n, "axis", 0); });
  }

  std::string lower(const ir::Op &o) {
    const ir::Type &rt = o.results[0]->type;
    const DType r = rt.dtype;
    auto unary = [&](const char *t) { return node(t, {in(o, 0, r)}); };
    auto binary = [&](const char *t) { return node(t, {in(o, 0, r), in(o, 1, r)}); };
    switch (o.kind) {
    case OpKind::Neg: return unary("Neg");
    case OpKind::Abs: return unary("Abs");
    case OpKind::Exp: return unary("Exp");
    case OpKind::Log: return unary("Log");
    case OpKind::Sqrt: return unary("Sqrt");
    case OpKind::Tanh: return unary("Tanh");
    case OpKind::Sigmoid: return unary("Sigmoid");
    case OpKind::Relu: return unary("Relu");
    case OpKind::Sin: return unary("Sin");
    case OpKind::Cos: return unary("Cos");
    case OpKind::Erf: return unary("Erf");
    case OpKind::Floor: return unary("Floor");
    case OpKind::Ceil: return unary("Ceil");
    case OpKind::Round: return unary("Round"); // half to even, as Graph IR's
    case OpKind::Sign: return unary("Sign");
    case OpKind::Rsqrt: return node("Reciprocal", {unary("Sqrt")});
    case OpKind::Log1p: return node("Log", {node("Add", {in(o, 0, r), scalar(1, r)})});
    case OpKind::Expm1: return node("Sub", {unary("Exp"), scalar(1, r)});
    case OpKind::Exp2: return node("Pow", {scalar(2, r), in(o, 0, r)});
    case OpKind::Log2: return node("Div", {unary("Log"), scalar(std::log(2.0), r)});
    case OpKind::Silu: {
      std::string x = in(o, 0, r);
      return node("Mul", {x, node("Sigmoid", {x})});
    }
    case OpKind::Gelu: {
      std::string x = in(o, 0, r);
      const std::string *approx = o.attrAs<std::string>("approximate");
      std::string inner;
      if (approx && *approx == "tanh") {
        // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
        std::string x3 = node("Mul", {x, node("Mul", {x, x})});
        std::string s = node("Add", {x, node("Mul", {x3, scalar(0.044715, r)})});
        inner = node("Tanh", {node("Mul", {s, scalar(std::sqrt(2.0 / M_PI), r)})});
      } else {
        inner = node("Erf", {node("Mul", {x, scalar(1.0 / std::sqrt(2.0), r)})});
      }
      return node("Mul", {node("Mul", {x, scalar(0.5, r)}), node("Add", {inner, scalar(1, r)})});
    }
    case OpKind::Not:
      if (r != DType::Bool) noForm("`not` of integers (bitwise; opset 17 has no BitwiseNot)");
      return unary("Not");
    case OpKind::Cast: return in(o, 0, r);
    case OpKind::Add: return binary("Add");
    case OpKind::Sub: return binary("Sub");
    case OpKind::Mul: return binary("Mul");
    case OpKind::Div: return binary("Div");
    case OpKind::Pow: return binary("Pow");
    case OpKind::Max: return binary("Max");
    case OpKind::Min: return binary("Min");
    case OpKind::FloorDiv:
      if (!isFloatType(r)) noForm("`//` of integers (ONNX's Div truncates)");
      return node("Floor", {binary("Div")});
    case OpKind::Mod: {
      if (!isFloatType(r))
        return node("Mod", {in(o, 0, r), in(o, 1, r)}, "", [](onnx::NodeProto &n) { attrInt(n, "fmod", 0); }); // the divisor's sign, as Python
      // Python's float %: a - floor(a / b) * b (ONNX's fmod=1 takes the dividend's sign).
      std::string a = in(o, 0, r), b = in(o, 1, r);
      return node("Sub", {a, node("Mul", {node("Floor", {node("Div", {a, b})}), b})});
    }
    case OpKind::And: case OpKind::Or: case OpKind::Xor:
      if (r != DType::Bool) noForm(std::string("`") + std::string(opSpelling(o.kind)) + "` of integers (opset 17 has no bitwise operators)");
      return binary(o.kind == OpKind::And ? "And" : o.kind == OpKind::Or ? "Or" : "Xor");
    case OpKind::Eq: case OpKind::Ne: case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge: {
      DType a = o.operands[0]->type.dtype, b = o.operands[1]->type.dtype, c = a;
      if (a != b) c = (isFloatType(a) != isFloatType(b)) ? (isFloatType(a) ? a : b) : (dtypeBits(a) >= dtypeBits(b) ? a : b);
      std::string x = in(o, 0, c), y = in(o, 1, c);
      switch (o.kind) {
      case OpKind::Eq: return node("Equal", {x, y});
      case OpKind::Ne: return node("Not", {node("Equal", {x, y})});
      case OpKind::Lt: return node("Less", {x, y});
      case OpKind::Le: return node("LessOrEqual", {x, y});
      case OpKind::Gt: return node("Greater", {x, y});
      default: return node("GreaterOrEqual", {x, y});
      }
    }
    case OpKind::Where: return node("Where", {in(o, 0), in(o, 1, r), in(o, 2, r)});
    case OpKind::ReduceSum: case OpKind::ReduceMax: case OpKind::ReduceMin: case OpKind::ReduceProd: {
      const auto *axes = o.attrAs<std::vector<int64_t>>("axes");
      const bool *keep = o.attrAs<bool>("keepdims");
      int64_t keepdims = keep && *keep ? 1 : 0;
      std::string x = in(o, 0, r);
      if (o.kind == OpKind::ReduceSum) {
        // Opset 13+: ReduceSum takes its axes as an input.
        std::vector<std::string> ins{x};
        if (axes) ins.push_back(constI64(*axes));
        return node("ReduceSum", ins, "", [&](onnx::NodeProto &n) { attrInt(n, "keepdims", keepdims); });
      }
      const char *t = o.kind == OpKind::ReduceMax ? "ReduceMax" : o.kind == OpKind::ReduceMin ? "ReduceMin" : "ReduceProd";
      return node(t, {x}, "", [&](onnx::NodeProto &n) {
        if (axes) attrInts(n, "axes", *axes);
        attrInt(n, "keepdims", keepdims);
      });
    }
    case OpKind::ArgMax: case OpKind::ArgMin: {
      const auto *axes = o.attrAs<std::vector<int64_t>>("axes");
      const bool *keep = o.attrAs<bool>("keepdims");
      const char *t = o.kind == OpKind::ArgMax ? "ArgMax" : "ArgMin";
      std::string x = in(o, 0);
      int64_t axis = 0;
      if (!axes) {
        if (keep && *keep) noForm(std::string(opSpelling(o.kind)) + " over every axis with keepdims");
        x = node("Reshape", {x, constI64({-1})});
      } else if (axes->size() == 1) {
        axis = (*axes)[0];
      } else {
        noForm(std::string(opSpelling(o.kind)) + " over several axes");
      }
      return node(t, {x}, "", [&](onnx::NodeProto &n) {
        attrInt(n, "axis", axis);
        attrInt(n, "keepdims", keep && *keep ? 1 : 0);
      });
    }
    case OpKind::MatMul: return node("MatMul", {in(o, 0, r), in(o, 1, r)});
    case OpKind::Conv: case OpKind::ConvTranspose: case OpKind::AvgPool:
    case OpKind::MaxPool: {
      // ONNX's attribute names; pads begins then ends as Graph IR's. A negative end pad (the
      // internal form of a gradient) is ConvTranspose's output_padding; other negative pads and
      // max_pool's two-operand form have no ONNX form.
      const bool conv = o.kind == OpKind::Conv || o.kind == OpKind::ConvTranspose;
      if (o.kind == OpKind::MaxPool && o.operands.size() != 1) break;
      std::vector<int64_t> pads = *o.attrAs<std::vector<int64_t>>("pads"), outPad;
      const size_t ns = pads.size() / 2;
      if (o.kind == OpKind::ConvTranspose)
        for (size_t i = 0; i < ns; ++i) {
          outPad.push_back(pads[ns + i] < 0 ? -pads[ns + i] : 0);
          if (pads[ns + i] < 0) pads[ns + i] = 0;
        }
      for (int64_t p : pads) if (p < 0) noForm("`" + std::string(opSpelling(o.kind)) + "` with a negative padding has no ONNX form");
      const char *type = o.kind == OpKind::Conv ? "Conv" : o.kind == OpKind::ConvTranspose ? "ConvTranspose" : o.kind == OpKind::MaxPool ? "MaxPool" : "AveragePool";
      std::vector<std::string> ins{in(o, 0, conv ? r : o.operands[0]->type.dtype)};
      if (conv) ins.push_back(in(o, 1, r));
      return node(type, ins, "", [&](onnx::NodeProto &n) {
        if (auto *k = o.attrAs<std::vector<int64_t>>("kernel")) attrInts(n, "kernel_shape", *k);
        attrInts(n, "strides", *o.attrAs<std::vector<int64_t>>("strides"));
        attrInts(n, "pads", pads);
        if (o.kind != OpKind::AvgPool) attrInts(n, "dilations", *o.attrAs<std::vector<int64_t>>("dilations"));
        if (conv) attrInt(n, "group", *o.attrAs<int64_t>("groups"));
        if (!outPad.empty()) attrInts(n, "output_padding", outPad);
        if (!conv) attrInt(n, "ceil_mode", o.attrAs<bool>("ceil_mode") && *o.attrAs<bool>("ceil_mode") ? 1 : 0);
        if (o.kind == OpKind::AvgPool) attrInt(n, "count_include_pad", *o.attrAs<bool>("count_include_pad") ? 1 : 0);
      });
    }
    case OpKind::Reshape: return node("Reshape", {in(o, 0), shapeTensor(*o.attrAs<std::vector<Dim>>("shape"))});
    case OpKind::BroadcastTo: return node("Expand", {in(o, 0), shapeTensor(*o.attrAs<std::vector<Dim>>("shape"))});
    case OpKind::Transpose: return node("Transpose", {in(o, 0)}, "", [&](onnx::NodeProto &n) { attrInts(n, "perm", *o.attrAs<std::vector<int64_t>>("perm")); });
    case OpKind::Slice: {
      auto start = known(*o.attrAs<std::vector<Dim>>("start"), "slice bound");
      // A stop at a symbolic extent is the end of the axis.
      std::vector<Dim> stops = *o.attrAs<std::vector<Dim>>("stop");
      for (size_t i = 0; i < stops.size(); ++i)
        if (!stops[i].constantValue() && stops[i] == o.operands[0]->type.dims[i]) stops[i] = Dim::constant(std::numeric_limits<int64_t>::max());
      auto stop = known(stops, "slice bound");
      const auto &step = *o.attrAs<std::vector<int64_t>>("step");
      std::vector<int64_t> axes;
      for (size_t i = 0; i < start.size(); ++i) axes.push_back(int64_t(i));
      return node("Slice", {in(o, 0), constI64(start), constI64(stop), constI64(axes), constI64(step)});
    }
    case OpKind::Reverse: {
      const auto &axes = *o.attrAs<std::vector<int64_t>>("axes");
      std::vector<int64_t> starts(axes.size(), -1), ends(axes.size(), std::numeric_limits<int64_t>::min()), steps(axes.size(), -1);
      return node("Slice", {in(o, 0), constI64(starts), constI64(ends), constI64(axes), constI64(steps)});
    }
    case OpKind::Concat: {
      std::vector<std::string> ins;
      for (size_t i = 0; i < o.operands.size(); ++i) ins.push_back(in(o, i, r));
      return node("Concat", ins, "", [&](onnx::NodeProto &n) { attrInt(n, "axis", *o.attrAs<int64_t>("axis")); });
    }
    case OpKind::Gather: // torch.gather
      return node("GatherElements", {in(o, 0), in(o, 1)}, "", [&](onnx::NodeProto &n) { attrInt(n, "axis", *o.attrAs<int64_t>("axis")); });
    case OpKind::Take: return node("Gather", {in(o, 0), in(o, 1)}, "", [&](onnx::NodeProto &n) { attrInt(n, "axis", *o.attrAs<int64_t>("axis")); });
    case OpKind::Constant: {
      const ir::AttrValue *v = o.attr("value");
      double value = 0;
      if (v) {
        if (auto *d = std::get_if<double>(v)) value = *d;
        else if (auto *i = std::get_if<int64_t>(v)) value = double(*i);
        else if (auto *b = std::get_if<bool>(v)) value = *b;
      }
      std::string n = fresh("c");
      initializer(n, rt::Tensor::full({}, r, value));
      return node("Expand", {n, shapeTensor(rt.dims)});
    }
    case OpKind::Iota: {
      std::vector<int64_t> shape = known(rt.dims, "shape");
      int64_t axis = *o.attrAs<int64_t>("axis");
      if (axis < 0) axis += int64_t(shape.size());
      rt::Tensor t = rt::Tensor::empty(shape, r);
      int64_t inner = 1;
      for (size_t i = size_t(axis) + 1; i < shape.size(); ++i) inner *= shape[i];
      for (int64_t i = 0; i < t.numel(); ++i) t.fromF64(i, double((i / inner) % shape[size_t(axis)]));
      std::string n = fresh("iota");
      initializer(n, t);
      return n;
    }
    case OpKind::DimValue: {
      // A symbolic size of a generic function: read from the shape of an input that has it.
      const Dim &d = o.attrAs<std::vector<Dim>>("dim")->at(0);
      if (!d.constantValue())
        for (const ir::Value *p : graph_->params)
          for (size_t i = 0; i < p->type.dims.size(); ++i)
            if (p->type.dims[i] == d) {
              const int64_t index[] = {int64_t(i)};
              std::string k = fresh("c");
              initializer(k, rt::Tensor::fromI64({}, DType::I64, index));
              return node("Gather", {node("Shape", {name(p)}), k});
            }
      auto v = known(*o.attrAs<std::vector<Dim>>("dim"), "dim");
      std::string n = fresh("dim");
      const int64_t value[] = {v[0]};
      initializer(n, rt::Tensor::fromI64({}, DType::I64, value));
      return n;
    }
    default: break;
    }
    noForm("the operation `" + std::string(opSpelling(o.kind)) + "` has no ONNX form");
  }

  const ir::Module &m_;
  onnx::GraphProto &g_;
  const ir::Op *op_ = nullptr;
  const ir::Graph *graph_ = nullptr;
  std::unordered_map<const ir::Value *, std::string> names_;
  onnx::GraphProto *root_ = &g_; // where initializers go
  size_t count_ = 0;
  size_t *next_ = &count_; // fresh names are unique in the whole model, subgraphs included
};

} // namespace

std::string exportGraph(const ir::Module &m, const ir::Graph &g, const std::string &path) {
  onnx::ModelProto model;
  model.set_ir_version(8); // ONNX 1.12's
  model.set_producer_name("tessera");
  model.set_producer_version("0.1");
  auto *opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kExportOpset);
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name(g.name);
  try {
    Exporter(m, *graph).run(g);
  } catch (NoForm &e) {
    return "graph `" + g.name + "`: " + e.what();
  }
  try {
    onnx::checker::check_model(model);
  } catch (std::exception &e) {
    return "internal error: the exported model of `" + g.name + "` fails ONNX's checker: " + e.what();
  }
  std::ofstream f(path, std::ios::binary);
  if (!f || !model.SerializeToOstream(&f)) return "cannot write `" + path + "`";
  return "";
}

} // namespace tsr::onnxio
