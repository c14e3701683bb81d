// Unit tests of runtime/bundle (ctest bundle_unit): SHA-256 and CRC-32 against published vectors,
// the container's write/read round trip and its validation, the program key, the device checks,
// and the CPU launcher.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "runtime/CodegenHelpers.h"
#include "runtime/GridLauncher.h"
#include "runtime/bundle/Bundle.h"
#include "runtime/bundle/HostCode.h"
#include "runtime/bundle/Sha256.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

namespace rb = tsr::rt::bundle;

TEST_CASE("sha256: FIPS 180-4 examples and a multi-block message") {
  CHECK(rb::sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(rb::sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(rb::sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  rb::Sha256 h; // one million 'a', fed in uneven pieces
  std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    size_t n = std::min(left, chunk.size());
    h.update(std::string_view(chunk).substr(0, n));
    left -= n;
  }
  CHECK(h.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("crc32: the check value of CRC-32/ISO-HDLC") {
  CHECK(rb::crc32("123456789") == 0xcbf43926u);
  CHECK(rb::crc32("") == 0u);
}

namespace {

const std::string kVersion = std::to_string(rb::kFormatMajor) + "." + std::to_string(rb::kFormatMinor);

// A minimal valid bundle: one module, empty IR sections, no programs, a cpu target without code;
// `models` (JSON), when given, is the manifest's models list, whose sections 5 (model) and 6
// (tensors: 64 bytes) the bundle then has.
std::string minimalBundle(const std::string &format = kVersion, int abi = 1, const std::string &models = "") {
  rb::Writer w;
  w.add(rb::SectionKind::Module, "module", "def main():\n    print(1)\n");
  w.add(rb::SectionKind::GraphIR, "graph-ir", "");
  w.add(rb::SectionKind::Schedule, "schedule", "");
  w.add(rb::SectionKind::TileIR, "tile-ir", "");
  if (!models.empty()) {
    w.add(rb::SectionKind::Model, "model", "graph @m(%x: tensor<4, f32>, %w: tensor<4, f32>) -> (tensor<4, f32>) {\n}\n");
    w.add(rb::SectionKind::Tensors, "tensors", std::string(64, '\0'));
  }
  std::string manifest = R"({"format": ")" + format + R"(", "compiler": "test", "abi": )" + std::to_string(abi) +
                         R"(, "main": "m.tsr", "source_sha256": "x", "ir_sha256": "y",
    "modules": [{"name": "m", "path": "m.tsr", "root": "main", "sha256": "z", "section": 1}],
    "graph_ir": {"section": 2}, "schedule": {"section": 3}, "tile_ir": {"section": 4},
    "targets": {"cpu": {"triple": "", "cpu": "", "features": []}}, "programs": [])" +
                         (models.empty() ? "" : ", \"models\": " + models) + "}";
  return w.finish(manifest);
}

rb::Refusal refusalOf(const std::string &bytes) {
  try {
    rb::Bundle::parse(bytes, rb::ParseOptions{});
  } catch (const rb::BundleError &e) {
    return e.kind;
  }
  FAIL("the bundle was accepted");
  return rb::Refusal::Corrupted;
}

} // namespace

TEST_CASE("container: what the writer writes, the reader reads") {
  const std::string bytes = minimalBundle();
  CHECK(bytes.size() % 64 == 16);
  const rb::Bundle b = rb::Bundle::parse(bytes, rb::ParseOptions{});
  CHECK(b.formatMajor == rb::kFormatMajor);
  CHECK(b.sections.size() == 5);
  for (const rb::Section &s : b.sections) CHECK(s.offset % 64 == 0);
  REQUIRE(b.modules.size() == 1);
  CHECK(b.moduleText(b.modules[0]) == "def main():\n    print(1)\n");
  CHECK(b.mainPath == "m.tsr");
}

TEST_CASE("container: every cut is truncated, every flipped byte corrupted") {
  const std::string bytes = minimalBundle();
  for (size_t n = 0; n < bytes.size(); ++n) { // a part of the magic is a cut too
    INFO("cut at " << n);
    CHECK(refusalOf(bytes.substr(0, n)) == rb::Refusal::Truncated);
  }
  for (size_t i = 0; i < bytes.size(); ++i) { // the magic's bytes make a foreign file
    std::string m = bytes;
    m[i] = char(m[i] ^ 0x5a);
    INFO("byte " << i);
    CHECK(refusalOf(m) == (i < 8 ? rb::Refusal::Foreign : rb::Refusal::Corrupted));
  }
  CHECK(refusalOf(bytes + "x") == rb::Refusal::Corrupted);
}

TEST_CASE("container: foreign files and versions") {
  CHECK(refusalOf("\x7f" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0") == rb::Refusal::Foreign);
  CHECK(refusalOf("TSRB") == rb::Refusal::Foreign);
  std::string v2 = minimalBundle();
  v2[8] = 2; // format 2.0, with the prelude's checksum made right
  const uint32_t c = rb::crc32(std::string_view(v2).substr(0, 12));
  for (int i = 0; i < 4; ++i) v2[size_t(12 + i)] = char(c >> (8 * i));
  CHECK(refusalOf(v2) == rb::Refusal::Version);
  CHECK(refusalOf(minimalBundle(kVersion, 2)) == rb::Refusal::Version);
  CHECK(refusalOf(minimalBundle("1.3")) == rb::Refusal::Corrupted); // the manifest and the header disagree
}

TEST_CASE("models: each tensor's span holds its dtype and shape") {
  auto models = [](const std::string &constant, const char *graph = "5", const char *tensors = "6") {
    return std::string(R"([{"name": "m.onnx", "keys": ["main/m.onnx"], "graph_ir": )") + graph + R"(, "inputs": ["x"], "tensors": )" +
           tensors + R"(, "constants": [)" + constant + "]}]";
  };
  const rb::Bundle b = rb::Bundle::parse(minimalBundle(kVersion, 1, models(R"({"name": "w", "dtype": "f32", "shape": [4], "data": [0, 16]})")),
                                         rb::ParseOptions{});
  REQUIRE(b.models.size() == 1);
  CHECK(b.models[0].keys == std::vector<std::string>{"main/m.onnx"});
  REQUIRE(b.models[0].constants.size() == 1);
  CHECK(b.models[0].constants[0].shape == std::vector<int64_t>{4});
  CHECK(b.models[0].constants[0].data.size == 16);
  // 16 bytes are not 4 f64 values, nor 3 f32 ones; a span past the section's end; no such dtype;
  // a size beyond what the section can hold; sections of the wrong kind.
  for (const std::string &bad : {R"({"name": "w", "dtype": "f64", "shape": [4], "data": [0, 16]})",
                                 R"({"name": "w", "dtype": "f32", "shape": [3], "data": [0, 16]})",
                                 R"({"name": "w", "dtype": "f32", "shape": [4], "data": [56, 16]})",
                                 R"({"name": "w", "dtype": "q7", "shape": [4], "data": [0, 16]})",
                                 R"({"name": "w", "dtype": "f32", "shape": [4611686018427387904, 4], "data": [0, 16]})"}) {
    INFO(bad);
    CHECK(refusalOf(minimalBundle(kVersion, 1, models(bad))) == rb::Refusal::Corrupted);
  }
  const std::string w = R"({"name": "w", "dtype": "f32", "shape": [4], "data": [0, 16]})";
  CHECK(refusalOf(minimalBundle(kVersion, 1, models(w, "6", "6"))) == rb::Refusal::Corrupted);
  CHECK(refusalOf(minimalBundle(kVersion, 1, models(w, "5", "5"))) == rb::Refusal::Corrupted);
  CHECK(refusalOf(minimalBundle(kVersion, 1, R"([{"name": "m.onnx", "keys": [], "graph_ir": 5, "inputs": [], "constants": []}])")) ==
        rb::Refusal::Corrupted);
}

TEST_CASE("container: checksums can be skipped only on purpose") {
  std::string m = minimalBundle();
  const rb::Bundle ok = rb::Bundle::parse(m, rb::ParseOptions{});
  m[size_t(ok.sections[1].offset)] ^= 1; // a byte of the module's text
  CHECK(refusalOf(m) == rb::Refusal::Corrupted);
  rb::ParseOptions skip;
  skip.verifyChecksums = false;
  CHECK(rb::Bundle::parse(m, skip).moduleText(rb::Bundle::parse(m, skip).modules[0]) != "def main():\n    print(1)\n");
}

TEST_CASE("program keys ignore the function's name and nothing else") {
  const std::string a = "tile @ew(%out: tensor<1, f32>) grid 1 {\n}\n";
  const std::string b = "tile @other.name(%out: tensor<1, f32>) grid 1 {\n}\n";
  const std::string c = "tile @ew(%out: tensor<2, f32>) grid 1 {\n}\n";
  CHECK(rb::programKey(a) == rb::programKey(b));
  CHECK(rb::programKey(a) != rb::programKey(c));
  CHECK(rb::programKey(a).size() == 16);
  CHECK(rb::programBody(a) == rb::programBody(b));
}

TEST_CASE("devices: which code runs where") {
  rb::Bundle b = rb::Bundle::parse(minimalBundle(), rb::ParseOptions{});
  rb::Device cpu{false, "cpu", 0, 0}, sm80{true, "cuda:0", 8, 0}, sm86{true, "cuda:0", 8, 6}, sm90{true, "cuda:0", 9, 0};
  CHECK_NOTHROW(rb::checkRunnable(b, cpu));
  CHECK_THROWS_WITH_AS(rb::checkRunnable(b, sm90), "no code for the device: the bundle has code for the cpu only; the device is cuda:0",
                       rb::BundleError);
  b.cuda.push_back({"sm_90", 0, std::nullopt});
  CHECK_NOTHROW(rb::checkRunnable(b, sm90));
  CHECK_THROWS_WITH_AS(rb::checkRunnable(b, sm86),
                       "no code for the device: the bundle has code for sm_90 only; the device cuda:0 is sm_86 (code for sm_N runs on "
                       "compute capability N/10 and later)",
                       rb::BundleError);
  b.cuda.push_back({"sm_80", 0, std::nullopt});
  CHECK_NOTHROW(rb::checkRunnable(b, sm80));
  CHECK_NOTHROW(rb::checkRunnable(b, sm86));
  b.cpu.reset();
  CHECK_THROWS_WITH_AS(rb::checkRunnable(b, cpu), "no code for the device: the bundle has code for cuda (sm_90, sm_80) only; the device is the cpu",
                       rb::BundleError);
  rb::Bundle c = rb::Bundle::parse(minimalBundle(), rb::ParseOptions{});
  c.cpu->section = 0; // pretend it has code, for another machine
  c.cpu->triple = "aarch64-unknown-linux-gnu";
  c.cpu->cpu = "neoverse-v2";
  if (rb::hostArch() == "x86_64")
    CHECK_THROWS_WITH_AS(rb::checkRunnable(c, cpu), "no code for the device: the bundle's cpu code is for aarch64 (aarch64-unknown-linux-gnu); this machine is x86_64",
                         rb::BundleError);
}

TEST_CASE("cpu features: what every x86-64 has is there, names the check does not know are passed over") {
  if (rb::hostArch() == "x86_64") {
    CHECK(rb::cpuMissingFeatures({"sse", "sse2", "cmov", "64bit", "xsave", "no-such-extension"}).empty());
    setenv("TSR_BUNDLE_TEST_CPU_LACKS", "sse2", 1);
    CHECK(rb::cpuMissingFeatures({"sse", "sse2"}) == std::vector<std::string>{"sse2"});
    unsetenv("TSR_BUNDLE_TEST_CPU_LACKS");
  }
}

TEST_CASE("the launcher runs every program of the grid once") {
  static std::vector<std::atomic<int>> hits(5 * 3 * 7);
  auto entry = +[](const tsr::rt::KernelArg *, int64_t begin, int64_t end, const int64_t *) {
    for (int64_t p = begin; p < end; ++p) hits[size_t(p)]++;
  };
  tsr::rt::launchGrid(entry, nullptr, {5, 3, 7});
  for (auto &h : hits) CHECK(h.load() == 1);
  tsr::rt::launchGrid(entry, nullptr, {5, 0, 7}); // a zero axis runs nothing
  for (auto &h : hits) CHECK(h.load() == 1);
  tsr::rt::launchGrid(entry, nullptr, {5, 3, 7}, 0, true); // the caller among the threads
  for (auto &h : hits) CHECK(h.load() == 2);
}

TEST_CASE("an executable that links the bundle runtime exports the generated code's helpers") {
  // What a bundle's shared object links against (runtime/CodegenHelpers.h).
  CHECK(tsr::rt::helpersNotExported().empty());
  CHECK(tsr::rt::codegenHelpers().size() == 5);
}
