#include "exec/KernelLauncher.h"

#include "exec/Autotune.h"
#include "runtime/DiskCache.h"
#include "ir/lower/LowerKernel.h"
#include "ir/tile/TileText.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace tsr::exec {

using namespace tsr::ast;

namespace {

// The static shape of a type whose dims are all constants (argTypes' types).
std::vector<int64_t> shapeOf(const ir::Type &t) {
  std::vector<int64_t> s;
  for (const Dim &d : t.dims) s.push_back(d.constantValue().value_or(-1));
  return s;
}

// The type each argument has for the kernel: its view's shape where it has one.
std::vector<ir::Type> argTypes(const std::vector<rt::Tensor> &args, const KernelLauncher::Views *views) {
  std::vector<ir::Type> types;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool viewed = views && i < views->size() && (*views)[i];
    std::vector<Dim> dims;
    for (int64_t d : viewed ? (*views)[i]->shape : args[i].shape()) dims.push_back(Dim::constant(d));
    types.push_back(ir::Type::tensor(std::move(dims), args[i].dtype()));
  }
  return types;
}

// One index check of a kernel lowered in debug mode (ir/lower/kernel/DebugChecks.cpp): its
// `debug_sites` entry, ACCESS|TENSOR|AXIS, and the place of its atomic_add into the record
// (FILE:LINE:COL from the module's file table).
struct DebugSite {
  std::string access, tensor, where;
  int64_t axis = 0;
};
using DebugSites = std::vector<DebugSite>;

// The place of check s: the location of the atomic_add into `record` at offset 3s.
void placeChecks(const tile::Function &f, const tile::Module &m, const tile::Value *record, DebugSites &sites) {
  std::function<void(const tile::Block &)> walk = [&](const tile::Block &b) {
    for (const tile::Op *op : b.ops) {
      for (const tile::Block *r : op->regions) walk(*r);
      if (op->kind != tile::OpKind::AtomicAdd || op->operands.size() < 2 || op->operands[0] != record) continue;
      const tile::Op *c = op->operands[1]->def;
      const int64_t *at = c && c->kind == tile::OpKind::Constant ? c->attrAs<int64_t>("value") : nullptr;
      if (!at || *at % 3 != 0 || size_t(*at / 3) >= sites.size() || !op->loc.valid() || op->loc.file > m.files.size()) continue;
      sites[size_t(*at / 3)].where =
          m.files[op->loc.file - 1] + ":" + std::to_string(op->loc.line) + ":" + std::to_string(op->loc.col);
    }
  };
  walk(*f.body);
}

// The index of deterministic mode's ticket parameter (ir/lower/kernel/AtomicOrder.cpp), or -1.
int64_t orderedAtomicsParam(const tile::Function &f) {
  for (const ir::Attr &a : f.config)
    if (a.name == "ordered_atomics")
      if (const int64_t *i = std::get_if<int64_t>(&a.value)) return *i;
  return -1;
}

DebugSites debugSites(const tile::Function &f, const tile::Module &m) {
  DebugSites out;
  const std::string *text = nullptr;
  for (const ir::Attr &a : f.config)
    if (a.name == "debug_sites") text = std::get_if<std::string>(&a.value);
  if (!text) return out;
  auto split = [](const std::string &s, char sep) {
    std::vector<std::string> parts;
    size_t from = 0;
    for (size_t at; (at = s.find(sep, from)) != std::string::npos; from = at + 1) parts.push_back(s.substr(from, at - from));
    parts.push_back(s.substr(from));
    return parts;
  };
  for (const std::string &entry : split(*text, ';')) {
    auto p = split(entry, '|');
    if (p.size() != 3) throw std::runtime_error("internal error: a malformed debug_sites entry `" + entry + "` in @" + f.name);
    out.push_back(DebugSite{p[0], p[1], "", std::stoll(p[2])});
  }
  // The record is the last parameter but deterministic mode's ticket (orderedAtomicsParam).
  const int64_t ticket = orderedAtomicsParam(f);
  const size_t record = f.params.size() - (ticket >= 0 ? 2 : 1);
  if (record < f.params.size()) placeChecks(f, m, f.params[record], out);
  return out;
}

// The first check of `record` (3 slots per check: count, an index, the extent) that failed.
void raiseIndexCheck(const sema::FunctionInfo &k, const DebugSites &sites, const rt::Tensor &record) {
  const auto *r = static_cast<const int64_t *>(record.data());
  for (size_t i = 0; i < sites.size(); ++i) {
    const int64_t count = r[3 * i], index = r[3 * i + 1], extent = r[3 * i + 2];
    if (count == 0) continue;
    const DebugSite &s = sites[i];
    std::string m = "index out of bounds in kernel `" + k.name + "`: " + s.access + " of `" + s.tensor + "` at index " +
                    std::to_string(index) + " along axis " + std::to_string(s.axis) + ", whose extent is " + std::to_string(extent);
    if (count > 1) m += " (out of bounds " + std::to_string(count) + " times in this launch)";
    throw ir::ProgramCheckError(m, {}, s.where);
  }
}

} // namespace

struct KernelLauncher::Entry {
  const tile::Function *fn = nullptr;
  std::shared_ptr<const BackendProgram> compiled;
  std::string site; // the kernel's definition, "file:line:col", for launch errors
};

KernelLauncher::KernelLauncher(const sema::Program &p, std::shared_ptr<StepBackend> backend)
    : P_(p), backend_(std::move(backend)) {
  if (!backend_) throw std::invalid_argument("KernelLauncher: no StepBackend (exec/cpu/CpuBackend.h's cpuBackend() for the host CPU)");
}
KernelLauncher::~KernelLauncher() = default;

std::vector<size_t> KernelLauncher::writtenOperands(const sema::FunctionInfo &k) {
  std::vector<std::string> names = ir::kernelWrittenParams(k);
  std::vector<size_t> out;
  for (const std::string &w : names) {
    size_t pos = 0;
    for (const sema::ParamInfo &prm : k.params) {
      if (prm.compileTime()) continue;
      if (prm.name == w) {
        out.push_back(pos);
        break;
      }
      ++pos;
    }
  }
  return out;
}

const KernelLauncher::Entry &KernelLauncher::entry(const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs,
                                                   const std::vector<rt::Tensor> &args, const Views *views) const {
  std::vector<ir::Type> types = argTypes(args, views);
  std::string key = k.module->name + "." + k.name + "|";
  for (const ir::Type &t : types) key += t.str() + ";";
  std::vector<ir::Attr> config;
  for (const ir::Attr &a : attrs) {
    if (a.name == "callee") continue;
    if (a.name == "grid") {
      // Only the grid's rank reaches the kernel.
      if (auto *g = std::get_if<std::vector<Dim>>(&a.value)) key += "grid" + std::to_string(g->size()) + ",";
      config.push_back(a);
      continue;
    }
    config.push_back(a);
    key += a.name + "=";
    if (auto *i = std::get_if<int64_t>(&a.value)) key += std::to_string(*i);
    else if (auto *b = std::get_if<bool>(&a.value)) key += *b ? "true" : "false";
    else if (auto *d = std::get_if<double>(&a.value)) key += std::to_string(*d);
    key += ",";
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return *it->second;
  auto e = std::make_unique<Entry>();
  try {
    e->fn = ir::lowerKernel(module_, P_, k, types, config, (k.module->name.empty() ? "" : k.module->name + ".") + k.name);
  } catch (const ir::CompileError &err) {
    std::string where;
    if (err.range.valid() && P_.sm.has(err.range.file)) {
      const SourceFile &f = P_.sm.file(err.range.file);
      LineCol lc = f.lineCol(err.range.begin);
      where = f.path() + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.column) + ": ";
    }
    throw LaunchError(where + err.what + " cannot run yet", err.range, err.what);
  }
  if (auto b = batch_.find(batch_.empty() ? std::string() : tile::toString(*e->fn)); b != batch_.end()) {
    e->compiled = b->second;
    batch_.erase(b);
  } else {
    rt::profile::Scope span("compile", [&] { return "compile kernel " + k.name; });
    e->compiled = backend_->compile(*e->fn, {});
  }
  if (k.def && P_.sm.has(k.def->range.file)) {
    const SourceFile &f = P_.sm.file(k.def->range.file);
    LineCol lc = f.lineCol(k.def->nameRange.begin);
    e->site = f.path() + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.column);
  }
  return *cache_.emplace(key, std::move(e)).first->second;
}

const tile::Function &KernelLauncher::lowered(const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs,
                                              const std::vector<rt::Tensor> &args) const {
  return *entry(k, attrs, args).fn;
}

void KernelLauncher::launch(const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs, std::vector<rt::Tensor> &args,
                            const std::vector<int64_t> &grid, const Views *views) const {
  if (grid.empty() || grid.size() > 3) throw LaunchError("kernel `" + k.name + "`: a grid has 1 to 3 axes, not " + std::to_string(grid.size()), {}, "");
  std::array<int64_t, 3> g{1, 1, 1};
  for (size_t i = 0; i < grid.size(); ++i) {
    if (grid[i] < 0) throw LaunchError("kernel `" + k.name + "`: grid axis " + std::to_string(i) + " has the negative size " + std::to_string(grid[i]), {}, "");
    g[i] = grid[i];
  }
  const Entry &e = entry(k, attrs, args, views);
  const tile::Function &f = *e.fn;
  DebugSites sites;
  {
    std::lock_guard<std::mutex> lock(mu_); // module_'s file table grows as kernels are lowered
    sites = debugSites(f, module_);
  }
  const int64_t ticketParam = orderedAtomicsParam(f);
  if (f.params.size() != args.size() + (sites.empty() ? 0 : 1) + (ticketParam >= 0 ? 1 : 0))
    throw LaunchError("kernel `" + k.name + "`: " + std::to_string(args.size()) + " arguments for " + std::to_string(f.params.size()) + " parameters", {}, "");
  std::vector<rt::KernelArg> kargs(args.size());
  const std::vector<size_t> written = writtenOperands(k);
  for (size_t i = 0; i < args.size(); ++i) {
    const tile::Type &t = f.params[i]->type;
    rt::Tensor &a = args[i];
    const ir::KernelRunner::StridedView *view = views && i < views->size() && (*views)[i] ? &*(*views)[i] : nullptr;
    if (t.isTensor()) {
      const std::vector<int64_t> shape = view ? view->shape : a.shape();
      if (int64_t(shape.size()) != static_cast<int64_t>(t.rank) || a.dtype() != t.dtype)
        throw LaunchError("kernel `" + k.name + "`: argument `" + f.params[i]->name + "` is a " + std::string(dtypeName(a.dtype())) + " tensor of shape " +
                              rt::formatShape(shape) + ", not of rank " + std::to_string(t.rank) + " and dtype " + std::string(dtypeName(t.dtype)), {}, "");
      if (shape.size() > size_t(rt::kMaxRank)) throw LaunchError("kernel `" + k.name + "`: a tensor of rank above " + std::to_string(rt::kMaxRank), {}, "");
      const bool writes = std::find(written.begin(), written.end(), i) != written.end();
      if (view) {
        if (writes) throw LaunchError("kernel `" + k.name + "`: argument `" + f.params[i]->name + "` is written and cannot be a view", {}, "");
        // The view's elements lie inside its tensor's storage (a kernel checks indices against
        // the view's shape only).
        int64_t lo = view->offset, hi = view->offset;
        bool empty = view->strides.size() != shape.size();
        for (size_t d = 0; d < shape.size() && !empty; ++d) {
          if (shape[d] == 0) empty = true;
          else (view->strides[d] < 0 ? lo : hi) += (shape[d] - 1) * view->strides[d];
        }
        if (view->strides.size() != shape.size() || (!empty && (lo < 0 || hi >= a.numel())))
          throw LaunchError("kernel `" + k.name + "`: argument `" + f.params[i]->name + "` is a view outside its tensor's " +
                                std::to_string(a.numel()) + " elements", {}, "");
      }
      kargs[i].data = backend_->address(a, writes, k.name.c_str()) + (view ? view->offset * int64_t(a.itemsize()) : 0);
      const std::vector<int64_t> strides = view ? view->strides : a.strides();
      for (size_t d = 0; d < shape.size(); ++d) {
        kargs[i].shape[d] = shape[d];
        kargs[i].strides[d] = strides[d];
      }
    } else {
      if (a.numel() != 1) throw LaunchError("kernel `" + k.name + "`: scalar argument `" + f.params[i]->name + "` has " + std::to_string(a.numel()) + " elements", {}, "");
      if (isFloat(t.dtype)) kargs[i].f = a.toF64(0);
      else kargs[i].i = a.toI64(0);
    }
  }
  if (g[0] == 0 || g[1] == 0 || g[2] == 0) return;
  // The parameters the modes add after the kernel's own, zeroed for each launch: debug mode's
  // record, then deterministic mode's ticket (its programs' order of atomics).
  auto hidden = [&](const rt::Tensor &t, const char *forWhat) {
    rt::KernelArg r;
    r.data = backend_->address(t, true, forWhat);
    r.shape[0] = t.numel();
    r.strides[0] = 1;
    kargs.push_back(r);
  };
  rt::Tensor record, ticket;
  if (!sites.empty()) {
    record = rt::Tensor::zeros({int64_t(3 * sites.size())}, DType::I64);
    hidden(record, "debug-mode index checks");
  }
  if (ticketParam >= 0) {
    ticket = rt::Tensor::zeros({2}, DType::I32);
    hidden(ticket, "deterministic mode's order of atomics");
  }
  launchProfiled(*backend_, *e.compiled, kargs, g, LaunchSite{f.name, e.site});
  if (!sites.empty()) raiseIndexCheck(k, sites, record);
}

namespace {

std::string attrText(const ir::AttrValue &v) {
  if (auto *i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto *b = std::get_if<bool>(&v)) return *b ? "1" : "0";
  if (auto *d = std::get_if<double>(&v)) {
    std::ostringstream os;
    os << std::setprecision(17) << *d;
    return os.str();
  }
  return "?";
}

// The autotuner's key of a launch of `k` (exec/Autotune.h).
autotune::Key tuningKey(const sema::Program &P, const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs,
                        const std::vector<ir::Type> &args, const StepBackend &backend) {
  autotune::Key key;
  key.kernel = (k.module->name.empty() ? "" : k.module->name + ".") + k.name;
  // The kernel's source text (its def; decorators apart) and its space and key.
  std::string source;
  if (k.def && P.sm.has(k.def->range.file)) {
    const std::string &text = P.sm.file(k.def->range.file).text();
    if (k.def->range.end <= text.size()) source = text.substr(k.def->range.begin, k.def->range.end - k.def->range.begin);
  }
  for (auto &[name, values] : k.space) {
    source += "|" + name + "=";
    for (int64_t v : values) source += std::to_string(v) + ",";
  }
  for (auto &n : k.autotuneKey) source += "|key " + n;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rt::fnv1a64(source)));
  key.hash = buf;
  // The key dims' values at this launch (all shapes when the key is empty).
  auto inSpace = [&](const std::string &n) {
    for (auto &[name, values] : k.space) if (name == n) return true;
    return false;
  };
  if (k.autotuneKey.empty()) {
    for (const ir::Type &t : args) key.shape += (key.shape.empty() ? "" : " ") + rt::formatShape(shapeOf(t));
  } else {
    for (const std::string &n : k.autotuneKey) {
      std::optional<int64_t> value;
      size_t pos = 0;
      for (const sema::ParamInfo &prm : k.params) {
        if (prm.compileTime()) {
          if (prm.name == n)
            for (const ir::Attr &a : attrs)
              if (a.name == n)
                if (auto *i = std::get_if<int64_t>(&a.value)) value = *i;
          continue;
        }
        const size_t at = pos++;
        if (value || !prm.annotated || !prm.annotated->is(sema::TypeKind::Tensor) || at >= args.size()) continue;
        const auto &dims = prm.annotated->dims;
        for (size_t d = 0; d < dims.size() && d < args[at].dims.size(); ++d)
          if (dims[d].isSymbol() && dims[d].str() == n) {
            value = shapeOf(args[at])[d];
            break;
          }
      }
      key.shape += (key.shape.empty() ? "" : " ") + n + "=" + (value ? std::to_string(*value) : std::string("?"));
    }
  }
  for (const ir::Type &t : args) key.dtypes += (key.dtypes.empty() ? "" : " ") + std::string(dtypeName(t.dtype));
  for (const ir::Attr &a : attrs) {
    if (a.name == "callee" || inSpace(a.name)) continue;
    std::string v = a.name == "grid" ? (std::get_if<std::vector<Dim>>(&a.value) ? std::to_string(std::get<std::vector<Dim>>(a.value).size()) : "?")
                                     : attrText(a.value);
    key.fixed += (key.fixed.empty() ? "" : " ") + (a.name == "grid" ? std::string("grid_rank") : a.name) + "=" + v;
  }
  key.target = backend.tuningTarget();
  return key;
}

} // namespace

std::vector<ir::Attr> KernelLauncher::choose(const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs,
                                             const std::vector<rt::Tensor> &args, const GridFor &gridFor, const Views *views) const {
  namespace at = autotune;
  if (!k.autotune) return attrs;
  const std::vector<at::Config> space = at::configurations(k);
  auto withConfig = [&](const at::Config &c) {
    std::vector<ir::Attr> a = attrs;
    for (auto &[n, v] : c) {
      bool set = false;
      for (ir::Attr &x : a)
        if (x.name == n) x.value = v, set = true;
      if (!set) a.push_back({n, v});
    }
    return a;
  };
  if (space.size() <= 1) return space.empty() ? attrs : withConfig(space[0]);
  const at::Mode mode = at::mode(*backend_);
  if (mode == at::Mode::Off) return withConfig(space[0]);
  // TSR_AUTOTUNE_TEST_BREAK (the negative controls of tests/autotune only): `scratch` times on
  // the real operands, `key` leaves the key dims out of the key, `skip` lets a failing
  // configuration's error through.
  const char *brokenEnv = std::getenv("TSR_AUTOTUNE_TEST_BREAK");
  const std::string broken = brokenEnv ? brokenEnv : "";
  // The grid's rank is part of the key: a host launch's, from the first configuration whose grid
  // can be computed (a kernel_call has its `grid`).
  std::vector<ir::Attr> keyed = attrs;
  if (std::none_of(attrs.begin(), attrs.end(), [](const ir::Attr &a) { return a.name == "grid"; })) {
    size_t rank = 1;
    for (const at::Config &c : space) {
      try {
        rank = gridFor(withConfig(c)).size();
        break;
      } catch (...) {
        // this configuration is skipped below with its reason
      }
    }
    keyed.push_back({"grid", std::vector<Dim>(rank, Dim::unknown())});
  }
  const std::vector<ir::Type> types = argTypes(args, views);
  at::Key key = tuningKey(P_, k, keyed, types, *backend_);
  if (broken == "key") key.shape.clear();
  const bool report = at::verbose();
  at::Source from = at::Source::First;
  if (std::optional<at::Config> c = at::lookup(key, space, &from)) {
    if (report && from != at::Source::Memo)
      std::cerr << "autotune: " << key.describe() << ": " << at::configText(*c)
                << (from == at::Source::Bundle ? " (from the bundle)" : " (recorded in " + rt::DiskCache::process().dir() + "/autotune)")
                << ", nothing timed\n";
    return withConfig(*c);
  }
  if (mode == at::Mode::Cached || at::failedBefore(key)) {
    if (report && from != at::Source::Memo)
      std::cerr << "autotune: " << key.describe() << ": no record, the space's first " << at::configText(space[0])
                << " (--autotune=cached times nothing)\n";
    return withConfig(space[0]);
  }
  // Full: every configuration on scratch copies of the written operands.
  if (report) std::cerr << "autotune: " << key.describe() << ": timing " << space.size() << " configurations\n";
  at::Record rec;
  double best = std::numeric_limits<double>::infinity();
  const std::vector<size_t> written = writtenOperands(k);
  auto oneLine = [](std::string s) {
    for (char &ch : s) if (ch == '\n') ch = ' ';
    return s.size() > 300 ? s.substr(0, 300) + "..." : s;
  };
  // Every configuration's program compiled at once, on every core where the backend can
  // (StepBackend::compileAll): the launches below find them in the backend's caches (the host
  // JIT's per text, the persistent cache's PTX). Failures are left to the loop to report.
  {
    tile::Module batch;
    std::vector<CompileRequest> requests;
    for (const at::Config &c : space) {
      std::vector<ir::Attr> config;
      for (const ir::Attr &a : withConfig(c))
        if (a.name != "callee") config.push_back(a);
      try {
        requests.push_back({ir::lowerKernel(batch, P_, k, types, config, (k.module->name.empty() ? "" : k.module->name + ".") + k.name), {}});
      } catch (...) {
        // reported by the loop
      }
    }
    if (requests.size() > 1) {
      rt::profile::Scope span("compile", [&] { return "compile " + std::to_string(requests.size()) + " configurations of " + k.name; });
      std::vector<std::shared_ptr<const BackendProgram>> codes = backend_->compileAll(requests);
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < codes.size(); ++i)
        if (codes[i]) batch_[tile::toString(*requests[i].fn)] = codes[i];
    }
  }
  for (const at::Config &c : space) {
    const std::string text = at::configText(c);
    const std::vector<ir::Attr> a = withConfig(c);
    std::string failed;
    double median = 0;
    try {
      std::vector<int64_t> grid = gridFor(a);
      entry(k, a, args, views); // lowering and compilation, apart from the timed launches
      std::vector<rt::Tensor> scratch = args;
      for (size_t w : written)
        if (w < scratch.size() && broken != "scratch") scratch[w] = args[w].clone();
      median = at::medianMs(*backend_, [&] { launch(k, a, scratch, grid, views); });
    } catch (const std::exception &e) {
      if (broken == "skip") throw;
      failed = oneLine(e.what());
    } catch (...) {
      failed = "an unknown error";
    }
    if (!failed.empty()) {
      std::cerr << "note: autotune: kernel `" << k.name << "`: configuration " << text << " skipped: " << failed << "\n";
      rec.skipped.push_back({text, failed});
      continue;
    }
    if (report) std::cerr << "autotune:   " << text << ": " << at::formatMs(median) << "\n";
    rec.timesMs.push_back({text, median});
    if (median < best) {
      best = median;
      rec.winner = c;
    }
  }
  if (rec.timesMs.empty()) {
    // Nothing ran: the first configuration runs on the real operands and reports its own error.
    if (report) std::cerr << "autotune: " << key.describe() << ": every configuration failed; the space's first runs\n";
    at::noteFailed(key);
    return withConfig(space[0]);
  }
  at::store(key, rec);
  if (report)
    std::cerr << "autotune: " << key.describe() << ": winner " << at::configText(rec.winner) << " (" << at::formatMs(best) << ", "
              << rec.timesMs.size() << " timed, " << rec.skipped.size() << " skipped)\n";
  return withConfig(rec.winner);
}

std::vector<size_t> KernelLauncher::writtenOperands(const ir::Op &op) const {
  const std::string *callee = op.attrAs<std::string>("callee");
  if (const sema::FunctionInfo *k = callee ? ir::findKernel(P_, *callee) : nullptr) return writtenOperands(*k);
  return ir::KernelRunner::writtenOperands(op);
}

std::vector<rt::Tensor> KernelLauncher::runTuned(const ir::Op &op, std::vector<rt::Tensor> &operands, const std::vector<int64_t> &grid,
                                                 const std::vector<std::vector<int64_t>> &gridSpace) const {
  return runWith(op, operands, grid, gridSpace, nullptr);
}

std::optional<std::vector<rt::Tensor>> KernelLauncher::runViews(const ir::Op &op, std::vector<rt::Tensor> &operands, const Views &views,
                                                                const std::vector<int64_t> &grid,
                                                                const std::vector<std::vector<int64_t>> &gridSpace) const {
  return runWith(op, operands, grid, gridSpace, &views);
}

std::vector<rt::Tensor> KernelLauncher::run(const ir::Op &op, std::vector<rt::Tensor> &operands, const std::vector<int64_t> &grid) const {
  return runWith(op, operands, grid, {}, nullptr);
}

std::vector<rt::Tensor> KernelLauncher::runWith(const ir::Op &op, std::vector<rt::Tensor> &operands, const std::vector<int64_t> &grid,
                                                const std::vector<std::vector<int64_t>> &gridSpace, const Views *views) const {
  const std::string *callee = op.attrAs<std::string>("callee");
  const sema::FunctionInfo *k = callee ? ir::findKernel(P_, *callee) : nullptr;
  if (!k) throw LaunchError("kernel_call of an unknown kernel `" + (callee ? *callee : std::string("?")) + "`", {}, "");
  const std::vector<autotune::Config> space = gridSpace.empty() ? std::vector<autotune::Config>{} : autotune::configurations(*k);
  const char *brokenEnv = std::getenv("TSR_AUTOTUNE_TEST_BREAK"); // `graph`: as if the op had no grid_space
  std::vector<ir::Attr> attrs = op.attrs;
  std::vector<int64_t> g = grid;
  if (!space.empty() && space.size() == gridSpace.size() && !(brokenEnv && std::string(brokenEnv) == "graph")) {
    attrs.clear();
    for (const ir::Attr &a : op.attrs)
      if (a.name != "grid_space") attrs.push_back(a);
    // The grid of the configuration whose space entries `a` has.
    auto gridOf = [&](const std::vector<ir::Attr> &a) -> const std::vector<int64_t> * {
      for (size_t i = 0; i < space.size(); ++i) {
        bool same = true;
        for (auto &[n, v] : space[i])
          for (const ir::Attr &x : a)
            if (x.name == n) same &= std::get_if<int64_t>(&x.value) && *std::get_if<int64_t>(&x.value) == v;
        if (same) return &gridSpace[i];
      }
      return nullptr;
    };
    attrs = choose(
        *k, attrs, operands,
        [&](const std::vector<ir::Attr> &a) {
          if (const std::vector<int64_t> *gs = gridOf(a)) return *gs;
          throw std::runtime_error("its grid is not known");
        },
        views);
    if (const std::vector<int64_t> *gs = gridOf(attrs)) g = *gs;
  }
  launch(*k, attrs, operands, g, views);
  std::vector<rt::Tensor> out;
  for (size_t w : writtenOperands(*k))
    if (w < operands.size()) out.push_back(operands[w]);
  return out;
}

} // namespace tsr::exec
