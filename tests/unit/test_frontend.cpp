// Front-end units: layout, literals, f-strings, source ranges and syntax diagnostics.
#include "frontend/Parser.h"

#include <doctest/doctest.h>
#include <sstream>

using namespace tsr;
using namespace tsr::ast;

namespace {
struct Parsed {
  SourceManager sm;
  DiagnosticEngine diags{sm};
  std::unique_ptr<Module> mod;
  explicit Parsed(std::string text) {
    FileId id = sm.addFile("t.tsr", std::move(text));
    mod = parseModule(sm, diags, id, "t");
  }
  std::string codes() const {
    std::string s;
    for (auto &d : diags.diagnostics()) s += std::string(diagCode(d.kind)) + " ";
    return s;
  }
  LineCol at(SourceRange r) const { return sm.file(r.file).lineCol(r.begin); }
  std::string ast() const {
    std::ostringstream os;
    printAst(os, *mod, sm);
    return os.str();
  }
};
} // namespace

TEST_CASE("blocks, indentation and blank lines") {
  Parsed p("def f(x):\n\n    # comment\n    if x:\n        return 1\n    else:\n        return 2\n");
  CHECK(p.codes() == "");
  REQUIRE(p.mod->body.size() == 1);
  auto *f = dyn_cast<FunctionDef>(p.mod->body[0]);
  REQUIRE(f);
  CHECK(f->name == "f");
  REQUIRE(f->body.size() == 1);
  auto *i = dyn_cast<If>(f->body[0]);
  REQUIRE(i);
  CHECK(i->body.size() == 1);
  CHECK(i->orelse.size() == 1);
}

TEST_CASE("newlines inside brackets and line joins are ignored") {
  Parsed p("x = (1 +\n     2)\ny = 1 + \\\n    2\nz = [\n  1,\n  2,\n]\n");
  CHECK(p.codes() == "");
  CHECK(p.mod->body.size() == 3);
}

TEST_CASE("unexpected indent is reported once, at the indented token") {
  Parsed p("def main():\n    x = 1\n      y = 2\n      z = 3\n");
  CHECK(p.codes() == "E0004 ");
  REQUIRE(p.diags.diagnostics().size() == 1);
  LineCol lc = p.at(p.diags.diagnostics()[0].range);
  CHECK(lc.line == 3);
  CHECK(lc.column == 7);
}

TEST_CASE("a block header without a body") {
  Parsed p("def f():\nx = 1\n");
  CHECK(p.codes() == "E0006 ");
  CHECK(p.diags.diagnostics()[0].message == "expected an indented block after `def`");
}

TEST_CASE("tabs in indentation are an error") {
  Parsed p("def f():\n\treturn 1\n");
  CHECK(p.codes().find("E0003") != std::string::npos);
}

TEST_CASE("unclosed and unmatched brackets") {
  Parsed a("x = (1, 2\ny = 3\n");
  CHECK(a.codes() == "E0011 ");
  Parsed b("x = [1, 2)\n");
  CHECK(b.codes() == "E0012 ");
  Parsed c("x = 1)\n");
  CHECK(c.codes() == "E0012 ");
}

TEST_CASE("several independent syntax errors are reported") {
  Parsed p("x = = 1\ny = 2\nz = ) \nw = 3 3\n");
  CHECK(p.diags.errorCount() == 3);
}

TEST_CASE("number literals") {
  Parsed p("a = 42\nb = 0x2A\nc = 1_000\nd = 1.5\ne = .5\nf = 1e-5\ng = -3\n");
  CHECK(p.codes() == "");
  auto val = [&](size_t i) { return static_cast<Assign *>(p.mod->body[i])->value; };
  CHECK(dyn_cast<IntLit>(val(0))->value == 42);
  CHECK(dyn_cast<IntLit>(val(1))->value == 42);
  CHECK(dyn_cast<IntLit>(val(2))->value == 1000);
  CHECK(dyn_cast<FloatLit>(val(3))->value == 1.5);
  CHECK(dyn_cast<FloatLit>(val(4))->value == 0.5);
  CHECK(dyn_cast<FloatLit>(val(5))->value == doctest::Approx(1e-5));
  CHECK(dyn_cast<IntLit>(val(6))->value == -3);
  Parsed big("x = 99999999999999999999999\n");
  CHECK(big.codes() == "E0014 ");
}

TEST_CASE("string literals: escapes, raw strings, concatenation") {
  Parsed p("a = 'x\\ty'\nb = r'x\\ty'\nc = 'ab' \"cd\"\nd = '''multi\nline'''\ne = '\\u00e9'\n");
  CHECK(p.codes() == "");
  auto str = [&](size_t i) { return dyn_cast<StrLit>(static_cast<Assign *>(p.mod->body[i])->value)->value; };
  CHECK(str(0) == "x\ty");
  CHECK(str(1) == "x\\ty");
  CHECK(str(2) == "abcd");
  CHECK(str(3) == "multi\nline");
  CHECK(str(4) == "\xc3\xa9");
  Parsed bad("a = '\\q'\n");
  CHECK(bad.codes() == "E0016 ");
  Parsed open("a = 'abc\n");
  CHECK(open.codes() == "E0007 ");
}

TEST_CASE("f-strings: fields, conversions, format specs and ranges") {
  Parsed p("s = f\"step {i}: {loss:.4f} {{x}} {name!r}\"\n");
  CHECK(p.codes() == "");
  auto *f = dyn_cast<FString>(static_cast<Assign *>(p.mod->body[0])->value);
  REQUIRE(f);
  std::vector<std::string> kinds;
  for (auto &part : f->parts) kinds.push_back(part.expr ? "E" : "T:" + part.text);
  REQUIRE(f->parts.size() == 6);
  CHECK(kinds[0] == "T:step ");
  CHECK(f->parts[3].formatSpec == ".4f");
  CHECK(kinds[4] == "T: {x} ");
  CHECK(f->parts[5].conversion == 'r');
  // The field's expression carries its position in the file.
  LineCol lc = p.at(f->parts[1].expr->range);
  CHECK(lc.column == 12);
  Parsed bad("s = f\"{}\"\n");
  CHECK(bad.codes() == "E0015 ");
  Parsed bad2("s = f\"{x +}\"\n");
  CHECK(bad2.codes() == "E0015 ");
}

TEST_CASE("decorators, keyword-only parameters and annotations") {
  Parsed p("@kernel.autotune(space=dict(BM=[64]), key=[\"M\"])\n@jit @autodiff\n"
           "def f(a: Tensor[\"M\", bf16 @accum(f32)], b=1, *, BM: int, c: str = \"x\") -> f32:\n    pass\n");
  CHECK(p.codes() == "");
  auto *f = dyn_cast<FunctionDef>(p.mod->body[0]);
  REQUIRE(f);
  REQUIRE(f->decorators.size() == 3);
  CHECK(f->decorators[0].dotted() == "kernel.autotune");
  CHECK(f->decorators[0].hasCall);
  CHECK(f->decorators[2].dotted() == "autodiff");
  REQUIRE(f->params.size() == 4);
  CHECK(f->params[0].kind == ParamKind::Positional);
  CHECK(f->params[2].kind == ParamKind::KeywordOnly);
  CHECK(f->params[3].defaultValue != nullptr);
  CHECK(f->returns != nullptr);
  // The function's range starts at `def`, not at its first decorator.
  CHECK(p.at(f->range).line == 3);
}

TEST_CASE("expressions: precedence, slices, launches, lambdas, comprehensions") {
  Parsed p("y = a + b * c ** -d @ e\n"
           "z = x[:, 0:64, ..., None]\n"
           "g[lambda cfg: (cdiv(M, cfg.BM), 2)](A, B, C)\n"
           "w = [k for k in ks if k]\n"
           "v = a if c else b\n"
           "u = not a and b or c < d <= e\n");
  CHECK(p.codes() == "");
  std::string text = p.ast();
  CHECK(text.find("Binary +") != std::string::npos);
  CHECK(text.find("Binary **") != std::string::npos);
  CHECK(text.find("Slice") != std::string::npos);
  CHECK(text.find("Lambda") != std::string::npos);
  CHECK(text.find("Comprehension list") != std::string::npos);
  CHECK(text.find("Compare < <=") != std::string::npos);
  // a + ((b * (c ** -d)) @ e): the top operator is +.
  auto *top = dyn_cast<Binary>(static_cast<Assign *>(p.mod->body[0])->value);
  REQUIRE(top);
  CHECK(top->op == BinOp::Add);
}

TEST_CASE("invalid assignment targets") {
  Parsed p("f(x) = 1\n1 = x\na + b = 3\n");
  CHECK(p.codes() == "E0019 E0019 E0019 ");
}

TEST_CASE("nesting limits give a diagnostic, not a crash") {
  std::string deep = "x = " + std::string(300, '(') + "1" + std::string(300, ')') + "\n";
  Parsed a(deep);
  CHECK(a.codes() == "E0013 ");
  std::string unary = "x = " + std::string(5000, '~') + "1\n";
  Parsed b(unary);
  CHECK(b.codes().find("E0013") != std::string::npos);
  std::string chain = "x = 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  Parsed c(chain + "\n");
  CHECK(c.codes() == "E0013 ");
  std::string indent;
  for (int i = 0; i < 150; ++i) indent += std::string(i, ' ') + "if x:\n";
  indent += std::string(150, ' ') + "pass\n";
  Parsed d(indent);
  CHECK(d.codes().find("E0013") != std::string::npos);
}

TEST_CASE("unexpected characters are reported and skipped") {
  Parsed p("x = 1 $ 2\ny = `\n");
  CHECK(p.codes() == "E0008 E0008 ");
}

TEST_CASE("source columns count code points") {
  Parsed p("s = 'é' + x$\n");
  REQUIRE(p.diags.diagnostics().size() == 1);
  CHECK(p.at(p.diags.diagnostics()[0].range).column == 12);
}

TEST_CASE("diagnostic rendering: location, code, caret, notes") {
  SourceManager sm;
  DiagnosticEngine d(sm);
  FileId id = sm.addFile("m.tsr", "def f():\n    y = x @ w\n");
  d.report(DiagKind::MatmulInner, {id, 17, 22}, {"\"D\"", "\"H\""});
  d.note("x is Tensor[\"B\", \"D\", f32]", {id, 4, 5});
  std::ostringstream os;
  d.render(os);
  CHECK(os.str() ==
        "m.tsr:2:9: error[E0302]: matmul inner dimensions differ: \"D\" vs \"H\"\n"
        "   2 |     y = x @ w\n"
        "     |         ^^^^^\n"
        "note: x is Tensor[\"B\", \"D\", f32] (m.tsr:1:5)\n");
}

#include "sema/ExternalModels.h"
#include <filesystem>

TEST_CASE("an onnx.load path resolves from a source without a file name") {
  // A buffer with no path (standard input, an unsaved editor buffer, the fuzzer's input) made
  // std::filesystem::absolute("") throw out of the checker.
  namespace fs = std::filesystem;
  std::string p;
  CHECK_NOTHROW(p = tsr::sema::resolveModelPath("", "m.onnx"));
  CHECK(p == (fs::current_path() / "m.onnx").lexically_normal().string());
  CHECK(tsr::sema::resolveModelPath("/a/b/model.tsr", "../m.onnx") == "/a/m.onnx");
  CHECK(tsr::sema::resolveModelPath("/a/b/model.tsr", "/x/m.onnx") == "/x/m.onnx");
}
