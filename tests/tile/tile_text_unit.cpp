// Unit tests of the Tile IR text form (ir/tile/TileText.h): printing, parsing back, the canonical
// numbering of values, the content hash, and errors on malformed text.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "ir/tile/TileText.h"

#include <string>

using namespace tsr;
using namespace tsr::tile;

namespace {

Attr dt(DType d) { return {"dtype", ir::DTypeAttr{d, {}}}; }

// saxpy with a loop carrying a tile, built as kernel lowering builds it: the `for` op (and its
// results) before the values of its body.
std::unique_ptr<Module> saxpyLoop(double scale) {
  auto m = std::make_unique<Module>();
  auto f = std::make_unique<Function>("saxpy");
  Value *x = f->addParam("x", Type::tensor(1, DType::F32));
  Value *a = f->addParam("alpha", Type::scalar(DType::F32));
  f->config.push_back({"BLOCK", int64_t(8)});
  Loc l{m->fileIndex("saxpy.tsr"), 4, 10};
  Block *b = f->body;
  Value *pid = f->add(b, OpKind::ProgramId, {}, {{"axis", int64_t(0)}}, l);
  Value *zero = f->add(b, OpKind::Constant, {}, {{"value", int64_t(0)}, {"shape", std::vector<int64_t>{}}, dt(DType::I64)}, l);
  Value *two = f->add(b, OpKind::Constant, {}, {{"value", int64_t(2)}, {"shape", std::vector<int64_t>{}}, dt(DType::I64)}, l);
  Value *one = f->add(b, OpKind::Constant, {}, {{"value", int64_t(1)}, {"shape", std::vector<int64_t>{}}, dt(DType::I64)}, l);
  Value *t = f->add(b, OpKind::LoadBox, {x, pid}, {{"box", std::vector<int64_t>{8}}, {"other", -INFINITY}}, l);
  Op *loop = f->addWithTypes(b, OpKind::For, {zero, two, one, t}, {{"stages", int64_t(2)}}, {t->type}, l);
  Block *body = f->newBlock(loop);
  f->addBlockArg(body, Type::scalar(DType::I64));
  Value *acc = f->addBlockArg(body, t->type);
  Value *s = f->add(body, OpKind::Constant, {}, {{"value", scale}, {"shape", std::vector<int64_t>{8}}, dt(DType::F32)}, l);
  Value *ab = f->add(body, OpKind::Broadcast, {a}, {{"shape", std::vector<int64_t>{8}}}, l);
  Value *next = f->add(body, OpKind::Mul, {f->add(body, OpKind::Mul, {acc, s}, {}, l), ab}, {}, l);
  f->addWithTypes(body, OpKind::Yield, {next}, {}, {}, l);
  f->add(b, OpKind::StoreBox, {x, pid, loop->result()}, {{"box", std::vector<int64_t>{8}}}, l);
  m->functions.push_back(std::move(f));
  return m;
}

} // namespace

TEST_CASE("a built function is well formed, prints, and parses back to the same text") {
  auto m = saxpyLoop(0.5);
  CHECK(verify(*m->functions[0]).empty());
  std::string text = toString(*m);
  auto back = parseTileModule(text);
  REQUIRE(back->functions.size() == 1);
  CHECK(verify(*back->functions[0]).empty());
  CHECK(toString(*back) == text);
  CHECK(text.find("loc(\"saxpy.tsr\":4:10)") != std::string::npos);
  CHECK(text.find("other = -inf") != std::string::npos);
  CHECK(text.find("} {stages = 2} : tile<8xf32>") != std::string::npos);
}

TEST_CASE("values are numbered in definition order whatever order the builder made them in") {
  auto m = saxpyLoop(0.5);
  std::string text = toString(*m->functions[0]);
  // Parameters 0-1; program_id, three constants and the load 2-6; the loop's iv and carried
  // value 7-8, its body 9-12; the loop's result 13.
  CHECK(text.find("%2 = program_id") != std::string::npos);
  CHECK(text.find("%13 = for %7 = %3 to %4 step %5 iter(%8 = %6) {") != std::string::npos);
  CHECK(text.find("store_box %x, %2, %13") != std::string::npos);
}

TEST_CASE("the content hash ignores locations and tells different programs apart") {
  auto a = saxpyLoop(0.5), b = saxpyLoop(0.5), c = saxpyLoop(0.25);
  b->functions[0]->body->ops[0]->loc = {b->fileIndex("elsewhere.tsr"), 99, 1};
  CHECK(contentHash(*a->functions[0]) == contentHash(*b->functions[0]));
  CHECK(contentHash(*a->functions[0]) != contentHash(*c->functions[0]));
  CHECK(toString(*a->functions[0]).find("loc(") == std::string::npos);
  auto parsed = parseTileModule(toString(*a));
  CHECK(contentHash(*parsed->functions[0]) == contentHash(*a->functions[0]));
}

TEST_CASE("malformed text is a TileError with a line and column") {
  std::string text = toString(*saxpyLoop(0.5));
  auto errorOf = [](const std::string &t) -> std::string {
    try {
      parseTileModule(t);
    } catch (const TileError &e) {
      return e.message;
    }
    return "";
  };
  std::string bad = text;
  bad.replace(bad.find("mul %"), 3, "mux");
  // The first `mul` is line 10, inside the loop (4 spaces of indentation), after `%11 = `.
  CHECK(errorOf(bad) == "10:11: unknown op `mux`");
  CHECK(errorOf(text.substr(0, text.size() / 2)) != "");
  CHECK(errorOf("tile @f(%x: tensor<1, f32>) grid 1 {\n  yield %y\n}\n") == "2:9: use of undefined value %y");
  CHECK(errorOf("tile @f() grid 1 {\n  %1 = constant {value = 1, shape = [], dtype = dtype i64} : tile<2xq8>\n}\n").find("unknown dtype") != std::string::npos);
}

TEST_CASE("a region's values are not visible after it") {
  std::string text = "tile @f(%x: tensor<1, f32>) grid 1 {\n"
                     "  %1 = constant {value = 0, shape = [], dtype = dtype i64} : i64\n"
                     "  for %2 = %1 to %1 step %1 {\n"
                     "    %3 = constant {value = 1, shape = [], dtype = dtype i64} : i64\n"
                     "    yield\n"
                     "  }\n"
                     "  %4 = add %3, %3 : i64\n"
                     "}\n";
  try {
    parseTileModule(text);
    FAIL("expected an error");
  } catch (const TileError &e) {
    CHECK(e.message == "7:12: use of undefined value %3");
  }
}
