// The ONNX importer's driver: parses the model, converts older opsets, binds the inputs and
// initializers, converts the nodes in order through the rules of onnx/Ops.def (evaluating at
// import time every node whose inputs are all known), and collects the outputs.
#include "onnx/Importer.h"

#include "ir/Verifier.h"
#include "ir/eval/Evaluator.h"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

namespace tsr::onnxio {

// ---- Node: attributes ----

const onnx::AttributeProto *Node::attr(const std::string &name) const {
  for (auto &a : proto.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
int64_t Node::i(const std::string &name, int64_t dflt) const {
  auto *a = attr(name);
  return a ? a->i() : dflt;
}
double Node::f(const std::string &name, double dflt) const {
  auto *a = attr(name);
  return a ? a->f() : dflt;
}
std::string Node::s(const std::string &name, const std::string &dflt) const {
  auto *a = attr(name);
  return a ? a->s() : dflt;
}
std::optional<std::vector<int64_t>> Node::ints(const std::string &name) const {
  auto *a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}
std::optional<std::vector<double>> Node::floats(const std::string &name) const {
  auto *a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<double>(a->floats().begin(), a->floats().end());
}

// ---- Importer: values and ops ----

namespace {

std::string identifier(const std::string &s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "v" + out;
  return out;
}

std::string uniqueParamName(const ir::Graph &g, const std::string &base) {
  std::string name = identifier(base);
  auto taken = [&](const std::string &n) {
    for (auto *p : g.params)
      if (p->name == n) return true;
    return false;
  };
  if (!taken(name)) return name;
  for (int i = 1;; ++i)
    if (!taken(name + "_" + std::to_string(i))) return name + "_" + std::to_string(i);
}

} // namespace

ir::Value *Importer::tensor(rt::Tensor t, const std::string &name) {
  if (t.ndim() == 0) {
    const DType dt = t.dtype();
    if (isFloat(dt)) return op(ir::OpKind::Constant, {}, {{"value", t.toF64(0)}, {"shape", std::vector<Dim>{}}, {"dtype", ir::DTypeAttr{dt, {}}}});
    return op(ir::OpKind::Constant, {}, {{"value", t.toI64(0)}, {"shape", std::vector<Dim>{}}, {"dtype", ir::DTypeAttr{dt, {}}}});
  }
  std::vector<Dim> dims;
  for (int64_t d : t.shape()) dims.push_back(Dim::constant(d));
  // A parameter of the model's graph even while a scan's body is built: the body closes over it.
  ir::Value *p = root_->addParam(uniqueParamName(*root_, name.empty() ? "const" : name), ir::Type::tensor(dims, t.dtype()));
  constants.push_back(std::move(t));
  constantNames.push_back(name);
  return p;
}

ir::Value *Importer::v(Val &x) {
  if (x.v) return x.v;
  if (!x.k) throw BadModel("an input is missing");
  if (!folding && !x.name.empty() && x.k->ndim() > 0) {
    // A named tensor (an initializer, a constant's output) is one parameter however often used.
    // (A scalar is a constant op of the graph being built, which may be a scan's body: not kept.)
    auto it = materialized_.find(x.name);
    if (it != materialized_.end()) return x.v = it->second;
    return x.v = materialized_[x.name] = tensor(*x.k, x.name);
  }
  x.v = tensor(*x.k, x.name);
  return x.v;
}

const rt::Tensor &Importer::known(const Val &x, const char *what) {
  if (!x.k && modelInputs.count(x.name)) needKnown.insert(x.name);
  if (!x.k)
    if (auto it = inputsOf.find(x.name); it != inputsOf.end()) needKnown.insert(it->second.begin(), it->second.end());
  if (!x.k) throw Unsupported(std::string("the ") + what + " must be known when the model is imported (a constant or "
                              "computed from constants and static shapes); a data-dependent " + what + " is not supported");
  return *x.k;
}
std::vector<int64_t> Importer::knownInts(const Val &x, const char *what) {
  const rt::Tensor &t = known(x, what);
  std::vector<int64_t> out(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[size_t(i)] = t.toI64(i);
  return out;
}
std::vector<double> Importer::knownFloats(const Val &x, const char *what) {
  const rt::Tensor &t = known(x, what);
  std::vector<double> out(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[size_t(i)] = t.toF64(i);
  return out;
}

ir::Value *Importer::op(ir::OpKind k, std::vector<ir::Value *> operands, std::vector<ir::Attr> attrs) {
  try {
    return g_->add(k, std::move(operands), std::move(attrs), loc_);
  } catch (const ir::IRError &e) {
    throw BadModel(std::string(ir::opSpelling(k)) + ": " + e.message);
  }
}
namespace {
/// A rule's constant as an integer: a rule meant for floats given an integer operand (a damaged
/// model's IsInf of int32) asks for inf, which no integer holds.
int64_t integerConstant(double value, DType dt) {
  if (!(value >= -9.2e18 && value <= 9.2e18))
    throw BadModel("the constant " + std::to_string(value) + " has no value of " + std::string(dtypeName(dt)) + " (an operand of the wrong dtype?)");
  return int64_t(value);
}
} // namespace

ir::Value *Importer::scalar(double value, DType dt) {
  if (isFloat(dt)) return op(ir::OpKind::Constant, {}, {{"value", value}, {"shape", std::vector<Dim>{}}, {"dtype", ir::DTypeAttr{dt, {}}}});
  return op(ir::OpKind::Constant, {}, {{"value", integerConstant(value, dt)}, {"shape", std::vector<Dim>{}}, {"dtype", ir::DTypeAttr{dt, {}}}});
}
ir::Value *Importer::full(const std::vector<Dim> &shape, double value, DType dt) {
  if (isFloat(dt)) return op(ir::OpKind::Constant, {}, {{"value", value}, {"shape", shape}, {"dtype", ir::DTypeAttr{dt, {}}}});
  return op(ir::OpKind::Constant, {}, {{"value", integerConstant(value, dt)}, {"shape", shape}, {"dtype", ir::DTypeAttr{dt, {}}}});
}
ir::Value *Importer::cast(ir::Value *x, DType dt) {
  if (x->type.dtype == dt) return x;
  return op(ir::OpKind::Cast, {x}, {{"dtype", ir::DTypeAttr{dt, {}}}});
}
ir::Value *Importer::reshape(ir::Value *x, std::vector<Dim> shape) {
  if (x->type.dims == shape) return x;
  return op(ir::OpKind::Reshape, {x}, {{"shape", std::move(shape)}});
}
ir::Value *Importer::transpose(ir::Value *x, std::vector<int64_t> perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == int64_t(i);
  if (identity) return x;
  return op(ir::OpKind::Transpose, {x}, {{"perm", std::move(perm)}});
}
ir::Value *Importer::broadcastTo(ir::Value *x, std::vector<Dim> shape) {
  if (x->type.dims == shape) return x;
  return op(ir::OpKind::BroadcastTo, {x}, {{"shape", std::move(shape)}});
}
ir::Value *Importer::reduce(ir::OpKind k, ir::Value *x, std::vector<int64_t> axes, bool keepdims) {
  return op(k, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
}
ir::Value *Importer::sliceAxis(ir::Value *x, size_t axis, Dim start, Dim stop, int64_t step) {
  const size_t r = x->type.rank();
  std::vector<Dim> b(r, Dim::constant(0)), e = x->type.dims;
  std::vector<int64_t> s(r, 1);
  b[axis] = start;
  e[axis] = stop;
  s[axis] = step;
  return op(ir::OpKind::Slice, {x}, {{"start", b}, {"stop", e}, {"step", s}});
}
ir::Value *Importer::concat(std::vector<ir::Value *> xs, int64_t axis) {
  if (xs.size() == 1) return xs[0];
  return op(ir::OpKind::Concat, std::move(xs), {{"axis", axis}});
}
ir::Value *Importer::iota(std::vector<Dim> shape, int64_t axis, DType dt) {
  return op(ir::OpKind::Iota, {}, {{"shape", std::move(shape)}, {"axis", axis}, {"dtype", ir::DTypeAttr{dt, {}}}});
}

std::vector<int64_t> Importer::staticShape(ir::Value *x, const char *what) {
  std::vector<int64_t> out;
  for (const Dim &d : x->type.dims) {
    auto c = d.constantValue();
    if (!c) throw Unsupported(std::string("the ") + what + " needs static sizes; it has the symbolic dim " + d.str());
    out.push_back(*c);
  }
  return out;
}
size_t Importer::axis(int64_t a, size_t rank) {
  const int64_t r = int64_t(rank);
  if (a < -r || a >= r) throw BadModel("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return size_t(a < 0 ? a + r : a);
}

// ---- the rule table ----

const Rule *findRule(const std::string &opType) {
  static const std::unordered_map<std::string, Rule> table = {
#define TSR_ONNX_OP(Name, Family) {#Name, rule##Name},
#include "onnx/Ops.def"
  };
  auto it = table.find(opType);
  return it == table.end() ? nullptr : &it->second;
}

// ---- converting nodes ----

std::vector<Val> Importer::convertNode(const onnx::NodeProto &np, int64_t opset) {
  // The training domain's Gradient (ops/Training.cpp) is the one operator of another domain.
  static const Rule gradient = ruleGradient;
  const bool training = np.domain() == "ai.onnx.preview.training" && np.op_type() == "Gradient";
  if (!np.domain().empty() && np.domain() != "ai.onnx" && !training)
    throw Unsupported("operators of the domain `" + np.domain() + "` are not supported");
  const Rule *rule = training ? &gradient : findRule(np.op_type());
  if (!rule) throw Unsupported("the operator " + np.op_type() + " is not supported");
  Node n{np, {}, 0, opset};
  for (auto &name : np.input()) {
    if (name.empty()) {
      n.in.emplace_back();
      continue;
    }
    auto it = env.find(name);
    if (it == env.end()) throw BadModel("the input `" + name + "` is not defined before this node");
    n.in.push_back(it->second);
    n.in.back().name = name;
  }
  for (auto &x : n.in)
    if (x.str && !takesStrings(np.op_type()))
      throw Unsupported("the operator " + np.op_type() + " does not take string tensors (Tessera has no string dtype: strings "
                        "exist only at import time, for StringNormalizer, Identity, Cast and CastLike)");
  n.numOutputs = size_t(np.output_size());
  // Control flow (If, Loop, Scan: ops/Control.cpp) reads values of the enclosing graph that are
  // not its inputs, so it is never evaluated as a whole here; its subgraphs' nodes are, one by one.
  bool regions = false;
  for (auto &a : np.attribute())
    if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS) {
      if (np.op_type() != "If" && np.op_type() != "Loop" && np.op_type() != "Scan")
        throw Unsupported("subgraph attributes (`" + a.name() + "`) are not supported");
      regions = true;
    }

  // A node whose inputs are all known runs now, on the reference evaluator, so that shape
  // computations (Shape -> Gather -> Concat -> Reshape) give the known values rules need. Random
  // operators are not in the table, so every rule here is a function of its inputs.
  bool allKnown = true;
  for (auto &x : n.in) allKnown &= !x.present() || x.k.has_value();
  if (!allKnown || folding || regions) return (*rule)(*this, n);

  ir::Module scratch;
  ir::Graph *sg = scratch.graphs.emplace_back(std::make_unique<ir::Graph>("fold")).get();
  ir::Graph *saved = g_, *savedRoot = root_;
  std::vector<rt::Tensor> savedConstants = std::move(constants);
  std::vector<std::string> savedNames = std::move(constantNames);
  constants.clear();
  constantNames.clear();
  g_ = root_ = sg;
  folding = true;
  const ir::Loc savedLoc = loc_;
  loc_ = {}; // the scratch module has no file table
  struct Restore {
    Importer &I;
    ir::Graph *g, *root;
    std::vector<rt::Tensor> &c;
    std::vector<std::string> &nm;
    ir::Loc loc;
    ~Restore() {
      I.loc_ = loc;
      I.g_ = g;
      I.root_ = root;
      I.constants = std::move(c);
      I.constantNames = std::move(nm);
      I.folding = false;
    }
  } restore{*this, saved, savedRoot, savedConstants, savedNames, savedLoc};
  std::vector<Val> out = (*rule)(*this, n); // inputs become parameters of the scratch graph when used
  // The tensors the rule computed, outputs and elements of output sequences alike.
  std::vector<Val *> computed;
  std::vector<std::shared_ptr<std::vector<Val>>> seqs; // copies of the output sequences, filled in
  for (Val &x : out) {
    if (x.seq) {
      auto copy = std::make_shared<std::vector<Val>>(*x.seq);
      for (Val &e : *copy)
        if (e.v && !e.k) computed.push_back(&e);
      x.seq = copy;
      seqs.push_back(copy);
    } else if (x.v && !x.k) {
      computed.push_back(&x);
    }
  }
  for (Val *x : computed) sg->outputs.push_back(x->v);
  // A shape in the model may ask for any size (a fuzzed Expand of a constant): the evaluation is
  // refused before it allocates beyond a bound, rather than exhausting memory.
  constexpr int64_t kMaxFoldElements = int64_t(1) << 26;
  for (const ir::Op *o : sg->ops)
    for (const ir::Value *r : o->results) {
      int64_t count = 1;
      for (const Dim &d : r->type.dims) {
        auto c = d.constantValue();
        if (!c) break;
        count = (*c != 0 && count > kMaxFoldElements / *c) ? kMaxFoldElements + 1 : count * *c;
      }
      if (count > kMaxFoldElements)
        throw Unsupported("evaluating the node at import time would make a tensor of " + r->type.str() + ", more than 2^26 elements");
    }
  if (!computed.empty()) {
    std::vector<rt::Tensor> results;
    try {
      results = ir::evaluate(scratch, *sg, constants);
    } catch (const std::exception &e) {
      throw BadModel(std::string("evaluating the node at import time: ") + e.what());
    }
    for (size_t j = 0; j < computed.size(); ++j) *computed[j] = ofKnown(results[j]);
  }
  for (auto &x : out)
    if (x.k) x.v = nullptr; // values of the scratch graph
  for (auto &s : seqs)
    for (Val &e : *s)
      if (e.k) e.v = nullptr;
  return out;
}

void Importer::convertNodes(const onnx::GraphProto &gp, int64_t opset) {
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto &np = gp.node(i);
    currentNode = np.name();
    currentOp = np.op_type();
    loc_ = ir::Loc{m_.fileIndex(currentFile), uint32_t(i + 1), 1};
    std::vector<Val> out = convertNode(np, opset);
    std::set<std::string> from;
    for (auto &name : np.input()) {
      if (modelInputs.count(name)) from.insert(name);
      if (auto it = inputsOf.find(name); it != inputsOf.end()) from.insert(it->second.begin(), it->second.end());
    }
    for (int j = 0; j < np.output_size(); ++j) {
      if (!from.empty() && !np.output(j).empty()) inputsOf[np.output(j)] = from;
      if (np.output(j).empty()) continue;
      if (size_t(j) >= out.size() || !out[size_t(j)].present())
        throw Unsupported("the output " + std::to_string(j) + " (`" + np.output(j) + "`) is not supported");
      Val x = out[size_t(j)];
      x.name = np.output(j);
      env[np.output(j)] = std::move(x);
    }
  }
}

// ---- the model ----

namespace {

int64_t defaultOpset(const onnx::ModelProto &m) {
  for (auto &o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

ir::Type typeOfValueInfo(const onnx::ValueInfoProto &vi) {
  if (!vi.type().has_tensor_type()) throw Unsupported("the input `" + vi.name() + "` is not a tensor (sequences and maps are not supported)");
  const auto &tt = vi.type().tensor_type();
  DType dt = dtypeOfElem(tt.elem_type());
  std::vector<Dim> dims;
  if (!tt.has_shape()) throw Unsupported("the input `" + vi.name() + "` has no shape (its rank must be known)");
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto &d = tt.shape().dim(i);
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) throw BadModel("the input `" + vi.name() + "` has a negative size");
      dims.push_back(Dim::constant(d.dim_value()));
    } else if (d.has_dim_param() && !d.dim_param().empty()) {
      dims.push_back(Dim::symbol(identifier(d.dim_param())));
    } else {
      dims.push_back(Dim::symbol(identifier(vi.name() + "_d" + std::to_string(i))));
    }
  }
  return ir::Type::tensor(std::move(dims), dt);
}

} // namespace

std::variant<ImportedModel, ImportError> importModel(const std::string &path, ir::Module &module, const ImportOptions &options) {
  ImportError err;
  err.file = path;
  // Only a regular file: a device such as /dev/zero or a FIFO would be read forever.
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    err.message = "not a regular file";
    return err;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    err.message = "cannot open the file";
    return err;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return importModelBytes(ss.str(), path, module, options);
}

std::variant<ImportedModel, ImportError> importModelBytes(const std::string &bytes, const std::string &path, ir::Module &module,
                                                          const ImportOptions &options) {
  ImportError err;
  err.file = path;
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes) || !model.has_graph() || model.ir_version() <= 0) {
    err.message = "not an ONNX model (the file does not parse as an ONNX ModelProto with a graph)";
    return err;
  }
  const int64_t opset = defaultOpset(model);
  err.opset = opset;
  if (opset <= 0) {
    err.message = "the model imports no opset of the default ONNX domain";
    err.unsupported = true;
    return err;
  }
  if (opset > kMaxOpset) {
    err.message = "opset " + std::to_string(opset) + " is newer than the importer supports (" + std::to_string(kMinOpset) + " to " +
                  std::to_string(kMaxOpset) + ")";
    err.unsupported = true;
    return err;
  }
  int64_t readOpset = opset;
  if (opset < kMinOpset) {
    // The converter trusts its input (a graph output that no node computes crashes it): ONNX's
    // checker, and every name defined before it is used.
    try {
      onnx::checker::check_model(model);
    } catch (const std::exception &e) {
      err.message = std::string("the model is not valid ONNX (ONNX's checker): ") + e.what();
      return err;
    }
    std::set<std::string> defined;
    for (auto &t : model.graph().initializer()) defined.insert(t.name());
    for (auto &vi : model.graph().input()) defined.insert(vi.name());
    for (auto &nd : model.graph().node()) {
      for (auto &i : nd.input())
        if (!i.empty() && !defined.count(i)) {
          err.message = "node `" + nd.name() + "` (" + nd.op_type() + ") uses `" + i + "`, which nothing defines before it";
          return err;
        }
      for (auto &o : nd.output()) defined.insert(o);
    }
    for (auto &vi : model.graph().output())
      if (!defined.count(vi.name())) {
        err.message = "the output `" + vi.name() + "` is not computed by any node";
        return err;
      }
    try {
      // The converter's adapters read the shapes of the values they rewrite.
      onnx::shape_inference::InferShapes(model);
    } catch (const std::exception &) {
      // Converted without them: an adapter that needs one reports it below.
    }
    try {
      model = onnx::version_conversion::ConvertVersion(model, int(kMaxOpset));
      readOpset = kMaxOpset;
    } catch (const std::exception &e) {
      err.message = "ONNX's version converter could not convert opset " + std::to_string(opset) + " to " + std::to_string(kMaxOpset) + ": " + e.what();
      err.unsupported = true;
      return err;
    }
  }

  ir::Graph *g = module.graphs.emplace_back(std::make_unique<ir::Graph>(options.graphName)).get();
  const std::string baseDir = std::filesystem::path(path).parent_path().string();
  Importer I(module, g, baseDir.empty() ? "." : baseDir);
  I.currentFile = path;
  ImportedModel out;
  out.graph = g;
  out.opset = opset;
  const onnx::GraphProto &gp = model.graph();
  try {
    std::set<std::string> initializers;
    for (auto &t : gp.initializer()) {
      initializers.insert(t.name());
      Val x = Importer::ofKnown(tensorOfProto(t, I.baseDir()));
      x.name = t.name();
      I.env[t.name()] = std::move(x);
    }
    if (gp.sparse_initializer_size()) throw Unsupported("sparse initializers are not supported");
    size_t position = 0;
    for (auto &vi : gp.input()) {
      if (initializers.count(vi.name())) continue;
      const size_t at = position++;
      err.modelInputs.push_back(vi.name());
      if (vi.type().has_tensor_type() && vi.type().tensor_type().elem_type() == onnx::TensorProto::STRING) {
        auto it = options.knownStrings.find(vi.name());
        if (it == options.knownStrings.end()) {
          I.needKnown.insert(vi.name());
          throw Unsupported("the input `" + vi.name() + "` is a tensor of strings: Tessera has no string dtype, so a string "
                            "input must be given when the model is imported (its value is computed with at import time)");
        }
        Val x;
        x.str = std::make_shared<const StringTensor>(it->second);
        x.name = vi.name();
        I.env[vi.name()] = std::move(x);
        continue;
      }
      if (auto it = options.knownInputs.find(vi.name()); it != options.knownInputs.end()) {
        Val x = Importer::ofKnown(it->second);
        x.name = vi.name();
        I.env[vi.name()] = std::move(x);
        continue;
      }
      ir::Value *p = g->addParam(uniqueParamName(*g, vi.name()), typeOfValueInfo(vi));
      I.env[vi.name()] = Importer::of(p);
      I.modelInputs.insert(vi.name());
      out.inputNames.push_back(vi.name());
      out.inputIndices.push_back(at);
    }
    out.numInputs = g->params.size();
    I.convertNodes(gp, readOpset);
    I.currentNode.clear();
    I.currentOp.clear();
    for (auto &vi : gp.output()) {
      auto it = I.env.find(vi.name());
      if (it == I.env.end()) throw BadModel("the output `" + vi.name() + "` is not computed by any node");
      if (it->second.seq) throw Unsupported("the output `" + vi.name() + "` is a sequence (a graph's outputs must be tensors)");
      out.outputNames.push_back(vi.name());
      if (it->second.str) {
        out.stringOutputs.push_back(*it->second.str);
        continue;
      }
      out.stringOutputs.push_back(std::nullopt);
      g->outputs.push_back(I.v(it->second));
    }
  } catch (const Unsupported &e) {
    err.needKnown.assign(I.needKnown.begin(), I.needKnown.end());
    err.node = I.currentNode;
    err.opType = I.currentOp;
    err.message = e.what();
    err.unsupported = true;
    return err;
  } catch (const std::exception &e) {
    err.node = I.currentNode;
    err.opType = I.currentOp;
    err.message = e.what();
    return err;
  }
  out.constants = std::move(I.constants);
  out.constantNames = std::move(I.constantNames);
  // Parameters were added as the nodes first used them, among the ops: number the values in the
  // order the text form lists them, so that the printed graph parses back (a bundle carries it).
  g->renumber();
  if (auto problems = ir::verify(*g); !problems.empty()) {
    err.message = "internal error: the imported graph does not verify: " + problems[0];
    return err;
  }
  return out;
}

} // namespace tsr::onnxio
