// The bundle container (Bundle.h; docs/bundle.md is the specification). parse() checks in the
// order that makes each refusal name its cause: the magic (foreign), the prelude's checksum and
// the format version (corrupted, version), the header, the length (truncated: the header says
// how long the bundle is, so a cut anywhere is told apart from a flipped byte), the section
// table, each section's CRC-32, the whole-file CRC-32, and then the manifest's contents.
#include "runtime/bundle/Bundle.h"

#include "runtime/bundle/HostCode.h"
#include "runtime/Numeric.h"
#include "support/DType.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tsr::rt::bundle {

using json = nlohmann::json;

std::string_view sectionKindName(SectionKind k) {
  switch (k) {
  case SectionKind::Manifest: return "manifest";
  case SectionKind::Module: return "module";
  case SectionKind::GraphIR: return "graph-ir";
  case SectionKind::Schedule: return "schedule";
  case SectionKind::TileIR: return "tile-ir";
  case SectionKind::CpuObject: return "cpu-object";
  case SectionKind::Ptx: return "ptx";
  case SectionKind::Cubin: return "cubin";
  case SectionKind::Model: return "model";
  case SectionKind::Tensors: return "tensors";
  }
  return "unknown";
}

std::string_view refusalName(Refusal r) {
  switch (r) {
  case Refusal::Truncated: return "truncated";
  case Refusal::Corrupted: return "corrupted";
  case Refusal::Foreign: return "not a bundle";
  case Refusal::Version: return "version mismatch";
  case Refusal::NoCode: return "no code for the device";
  }
  return "refused";
}

BundleError::BundleError(Refusal k, const std::string &d)
    : std::runtime_error(std::string(refusalName(k)) + ": " + d), kind(k), details(d) {}

uint32_t crc32(std::string_view bytes) {
  uLong c = ::crc32(0L, Z_NULL, 0);
  // crc32_z takes a size_t length (zlib 1.2.9+), so sections above 4 GiB need no loop.
  return uint32_t(::crc32_z(c, reinterpret_cast<const Bytef *>(bytes.data()), bytes.size()));
}

namespace {

void put16(std::string &s, size_t at, uint16_t v) {
  for (int i = 0; i < 2; ++i) s[at + size_t(i)] = char(v >> (8 * i));
}
void put32(std::string &s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + size_t(i)] = char(v >> (8 * i));
}
void put64(std::string &s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + size_t(i)] = char(v >> (8 * i));
}
uint16_t get16(std::string_view s, size_t at) {
  return uint16_t(uint8_t(s[at]) | uint16_t(uint8_t(s[at + 1])) << 8);
}
uint32_t get32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | uint8_t(s[at + size_t(i)]);
  return v;
}
uint64_t get64(std::string_view s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | uint8_t(s[at + size_t(i)]);
  return v;
}

uint64_t alignUp(uint64_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; }

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

std::string firstBytes(std::string_view s) {
  std::string r;
  for (size_t i = 0; i < s.size() && i < 8; ++i) {
    char b[4];
    std::snprintf(b, sizeof b, "%02x", uint8_t(s[i]));
    r += (i ? " " : "") + std::string(b);
  }
  return r;
}

[[noreturn]] void refuse(Refusal k, const std::string &details) { throw BundleError(k, details); }

std::string describeSection(size_t i, const Section &s) {
  return "section " + std::to_string(i) + " (" + std::string(sectionKindName(s.kind)) +
         (s.tag.empty() || s.tag == sectionKindName(s.kind) ? "" : " `" + s.tag + "`") + ", bytes " + std::to_string(s.offset) +
         ".." + std::to_string(s.offset + s.size) + ")";
}

// ---- the manifest, validated field by field (every inconsistency is a corruption) ----

struct ManifestReader {
  const std::vector<Section> &sections;

  [[noreturn]] void bad(const std::string &where, const std::string &what) const {
    refuse(Refusal::Corrupted, "the manifest's " + where + " " + what);
  }
  const json &field(const json &o, const char *key, const std::string &where) const {
    if (!o.is_object()) bad(where, "is not an object");
    auto it = o.find(key);
    if (it == o.end()) bad(where, "has no `" + std::string(key) + "`");
    return *it;
  }
  std::string str(const json &o, const char *key, const std::string &where) const {
    const json &v = field(o, key, where);
    if (!v.is_string()) bad(where + "." + key, "is not a string");
    return v.get<std::string>();
  }
  uint64_t uint(const json &o, const char *key, const std::string &where) const {
    const json &v = field(o, key, where);
    if (!v.is_number_unsigned()) bad(where + "." + key, "is not a non-negative integer");
    return v.get<uint64_t>();
  }
  uint32_t section(const json &o, const char *key, SectionKind kind, const std::string &where) const {
    uint64_t i = uint(o, key, where);
    if (i >= sections.size()) bad(where + "." + key, "names section " + std::to_string(i) + " of " + std::to_string(sections.size()));
    if (sections[i].kind != kind)
      bad(where + "." + key, "names section " + std::to_string(i) + ", a " + std::string(sectionKindName(sections[i].kind)) +
                                 " section, not " + std::string(sectionKindName(kind)));
    return uint32_t(i);
  }
  Span span(const json &o, const char *key, uint32_t within, const std::string &where) const {
    const json &v = field(o, key, where);
    if (!v.is_array() || v.size() != 2 || !v[0].is_number_unsigned() || !v[1].is_number_unsigned())
      bad(where + "." + key, "is not an [offset, size] pair");
    Span s{v[0].get<uint64_t>(), v[1].get<uint64_t>()};
    const uint64_t size = sections[within].size;
    if (s.offset > size || s.size > size - s.offset)
      bad(where + "." + key, "reaches past the end of section " + std::to_string(within));
    return s;
  }
};

} // namespace

// ---- writing ----

uint32_t Writer::add(SectionKind kind, const std::string &tag, std::string bytes) {
  if (tag.size() > 16) throw std::invalid_argument("bundle section tag longer than 16 bytes: " + tag);
  sections_.push_back({kind, tag, std::move(bytes)});
  return uint32_t(sections_.size());
}

std::string Writer::finish(const std::string &manifest) const {
  std::vector<const Pending *> all;
  Pending m{SectionKind::Manifest, "manifest", manifest};
  all.push_back(&m);
  for (const Pending &p : sections_) all.push_back(&p);
  const uint64_t n = all.size();
  const uint64_t tableEnd = kHeaderSize + n * kEntrySize;
  std::vector<uint64_t> offsets;
  uint64_t at = alignUp(tableEnd);
  for (const Pending *p : all) {
    offsets.push_back(at);
    at = alignUp(at + p->bytes.size());
  }
  const uint64_t fileSize = at + kTrailerSize;
  std::string out(fileSize, '\0');
  std::memcpy(out.data(), kMagic, 8);
  put16(out, 8, kFormatMajor);
  put16(out, 10, kFormatMinor);
  put32(out, 12, crc32(std::string_view(out).substr(0, 12)));
  put32(out, 16, uint32_t(kHeaderSize));
  put32(out, 20, uint32_t(n));
  put64(out, 24, kHeaderSize);
  put64(out, 32, fileSize);
  put32(out, 40, 0); // flags
  for (uint64_t i = 0; i < n; ++i) {
    const size_t e = size_t(kHeaderSize + i * kEntrySize);
    put32(out, e, uint32_t(all[i]->kind));
    put64(out, e + 8, offsets[i]);
    put64(out, e + 16, all[i]->bytes.size());
    put32(out, e + 24, crc32(all[i]->bytes));
    std::memcpy(out.data() + e + 32, all[i]->tag.data(), all[i]->tag.size());
    std::memcpy(out.data() + offsets[i], all[i]->bytes.data(), all[i]->bytes.size());
  }
  put32(out, 44, crc32(std::string_view(out).substr(kHeaderSize, n * kEntrySize)));
  put32(out, 60, crc32(std::string_view(out).substr(0, 60)));
  std::memcpy(out.data() + at, kEndMagic, 8);
  put32(out, size_t(at + 8), crc32(std::string_view(out).substr(0, at)));
  return out;
}

// ---- reading ----

ParseOptions ParseOptions::fromEnvironment() {
  ParseOptions o;
  const char *v = std::getenv("TSR_BUNDLE_TEST_SKIP_CHECKSUMS");
  o.verifyChecksums = !(v && std::string(v) == "1");
  return o;
}

Bundle Bundle::open(const std::string &path, const ParseOptions &opts) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + path + ": a read error");
  return parse(std::move(ss).str(), opts);
}

Bundle Bundle::parse(std::string bytes, const ParseOptions &opts) {
  Bundle b;
  b.bytes_ = std::move(bytes);
  const std::string_view s = b.bytes_;
  const uint64_t have = s.size();
  const bool sums = opts.verifyChecksums;

  // The prelude: magic, version, and the version's own checksum.
  const std::string_view magic(kMagic, 8);
  if (have < 8) {
    if (have == 0) refuse(Refusal::Truncated, "the file is empty");
    if (magic.substr(0, have) == s) refuse(Refusal::Truncated, "the file has " + std::to_string(have) + " bytes, a part of the magic");
    refuse(Refusal::Foreign, "a Tessera bundle starts with 89 54 53 52 42 4e 44 0a (\"\\x89TSRBND\\n\"); this file starts with " + firstBytes(s));
  }
  if (s.substr(0, 8) != magic)
    refuse(Refusal::Foreign, "a Tessera bundle starts with 89 54 53 52 42 4e 44 0a (\"\\x89TSRBND\\n\"); this file starts with " + firstBytes(s));
  if (have < 16) refuse(Refusal::Truncated, "the file has " + std::to_string(have) + " bytes; it ends inside the 16-byte prelude");
  if (sums && get32(s, 12) != crc32(s.substr(0, 12)))
    refuse(Refusal::Corrupted, "the prelude (magic and format version, bytes 0..12) fails its CRC-32 (stored " + hex32(get32(s, 12)) +
                                   ", computed " + hex32(crc32(s.substr(0, 12))) + ")");
  b.formatMajor = get16(s, 8);
  b.formatMinor = get16(s, 10);
  if (b.formatMajor != kFormatMajor)
    refuse(Refusal::Version, "the bundle is format " + std::to_string(b.formatMajor) + "." + std::to_string(b.formatMinor) +
                                 "; this reader reads format " + std::to_string(kFormatMajor) + ".x (any minor version of " +
                                 std::to_string(kFormatMajor) + ")");

  // The header.
  if (have < kHeaderSize) refuse(Refusal::Truncated, "the file has " + std::to_string(have) + " bytes; it ends inside the 64-byte header");
  if (sums && get32(s, 60) != crc32(s.substr(0, 60)))
    refuse(Refusal::Corrupted, "the header (bytes 0..64) fails its CRC-32 (stored " + hex32(get32(s, 60)) + ", computed " +
                                   hex32(crc32(s.substr(0, 60))) + ")");
  const uint32_t headerSize = get32(s, 16), count = get32(s, 20);
  const uint64_t tableAt = get64(s, 24), fileSize = get64(s, 32);
  const uint32_t flags = get32(s, 40);
  if (headerSize != kHeaderSize) refuse(Refusal::Corrupted, "the header gives its size as " + std::to_string(headerSize) + ", not 64");
  if (flags != 0) refuse(Refusal::Corrupted, "the header's flags are " + hex32(flags) + "; format 1 defines none");
  if (count == 0 || count > kMaxSections) refuse(Refusal::Corrupted, "the header gives " + std::to_string(count) + " sections");
  if (tableAt != kHeaderSize) refuse(Refusal::Corrupted, "the header puts the section table at byte " + std::to_string(tableAt) + ", not 64");
  const uint64_t tableEnd = tableAt + uint64_t(count) * kEntrySize;
  if (fileSize < alignUp(tableEnd) + kTrailerSize || fileSize % kAlignment != kTrailerSize % kAlignment)
    refuse(Refusal::Corrupted, "the header gives a file size of " + std::to_string(fileSize) + " bytes, impossible for " +
                                   std::to_string(count) + " sections");

  // The length: a cut is reported as such, wherever it falls.
  if (have < fileSize) {
    std::string where = "the section table";
    if (have >= tableEnd) {
      where = "the trailer";
      for (uint32_t i = 0; i < count; ++i) {
        const size_t e = size_t(tableAt + uint64_t(i) * kEntrySize);
        const uint64_t off = get64(s, e + 8), size = get64(s, e + 16);
        if (have < off) { where = "the padding before section " + std::to_string(i); break; }
        if (have < off + size) {
          where = "section " + std::to_string(i) + " (" + std::string(sectionKindName(SectionKind(get32(s, e)))) + ")";
          break;
        }
      }
    }
    refuse(Refusal::Truncated, "the file has " + std::to_string(have) + " bytes, but the bundle has " + std::to_string(fileSize) +
                                   "; it ends inside " + where);
  }
  if (have > fileSize)
    refuse(Refusal::Corrupted, std::to_string(have - fileSize) + " bytes follow the end of the bundle (byte " + std::to_string(fileSize) + ")");

  // The section table.
  if (sums && get32(s, 44) != crc32(s.substr(tableAt, tableEnd - tableAt)))
    refuse(Refusal::Corrupted, "the section table (bytes " + std::to_string(tableAt) + ".." + std::to_string(tableEnd) +
                                   ") fails its CRC-32 (stored " + hex32(get32(s, 44)) + ", computed " +
                                   hex32(crc32(s.substr(tableAt, tableEnd - tableAt))) + ")");
  const uint64_t trailerAt = fileSize - kTrailerSize;
  uint64_t next = alignUp(tableEnd);
  for (uint32_t i = 0; i < count; ++i) {
    const size_t e = size_t(tableAt + uint64_t(i) * kEntrySize);
    Section sec;
    sec.kind = SectionKind(get32(s, e));
    sec.offset = get64(s, e + 8);
    sec.size = get64(s, e + 16);
    sec.crc = get32(s, e + 24);
    const std::string_view tag = s.substr(e + 32, 16);
    sec.tag = std::string(tag.substr(0, std::min(tag.find('\0'), tag.size())));
    const std::string at = "section " + std::to_string(i);
    if (get32(s, e + 4) != 0 || get32(s, e + 28) != 0) refuse(Refusal::Corrupted, at + ": its table entry's reserved fields are not zero");
    if (sec.offset % kAlignment != 0) refuse(Refusal::Corrupted, at + " starts at byte " + std::to_string(sec.offset) + ", not a multiple of 64");
    if (sec.offset < next) refuse(Refusal::Corrupted, at + " starts at byte " + std::to_string(sec.offset) + ", inside what precedes it");
    if (sec.offset > trailerAt || sec.size > trailerAt - sec.offset)
      refuse(Refusal::Corrupted, at + " (bytes " + std::to_string(sec.offset) + ".." + std::to_string(sec.offset + sec.size) +
                                     ") reaches past the trailer at byte " + std::to_string(trailerAt));
    next = alignUp(sec.offset + sec.size);
    b.sections.push_back(sec);
  }
  if (next != trailerAt) refuse(Refusal::Corrupted, "the trailer is at byte " + std::to_string(trailerAt) + ", not after the last section (" + std::to_string(next) + ")");
  if (s.substr(size_t(trailerAt), 8) != std::string_view(kEndMagic, 8) || get32(s, size_t(trailerAt) + 12) != 0)
    refuse(Refusal::Corrupted, "the trailer (bytes " + std::to_string(trailerAt) + ".." + std::to_string(fileSize) + ") is not \"TSRBEND\\n\", a CRC-32 and 4 zero bytes");

  // Checksums: each section's, then the whole file's (which then covers the padding and trailer).
  if (sums) {
    for (size_t i = 0; i < b.sections.size(); ++i) {
      const Section &sec = b.sections[i];
      const uint32_t got = crc32(s.substr(size_t(sec.offset), size_t(sec.size)));
      if (got != sec.crc)
        refuse(Refusal::Corrupted, describeSection(i, sec) + " fails its CRC-32 (stored " + hex32(sec.crc) + ", computed " + hex32(got) + ")");
    }
    const uint32_t whole = crc32(s.substr(0, size_t(trailerAt)));
    if (whole != get32(s, size_t(trailerAt) + 8))
      refuse(Refusal::Corrupted, "the whole-file CRC-32 fails (stored " + hex32(get32(s, size_t(trailerAt) + 8)) + ", computed " +
                                     hex32(whole) + ") while every section's passes: a byte between the sections changed");
  }

  // The manifest.
  if (b.sections[0].kind != SectionKind::Manifest) refuse(Refusal::Corrupted, "section 0 is not the manifest");
  b.manifest = std::string(b.sectionBytes(0));
  json m;
  try {
    m = json::parse(b.manifest);
  } catch (const json::exception &e) {
    refuse(Refusal::Corrupted, std::string("the manifest is not JSON: ") + e.what());
  }
  ManifestReader r{b.sections};
  const std::string version = std::to_string(b.formatMajor) + "." + std::to_string(b.formatMinor);
  if (r.str(m, "format", "top level") != version)
    refuse(Refusal::Corrupted, "the manifest says format " + r.str(m, "format", "top level") + ", the header " + version);
  const uint64_t abi = r.uint(m, "abi", "top level");
  if (abi != kCodeAbi)
    refuse(Refusal::Version, "the bundle's code ABI is " + std::to_string(abi) + "; this runner runs ABI " + std::to_string(kCodeAbi) +
                                 " (docs/bundle.md, versioning)");
  b.compiler = r.str(m, "compiler", "top level");
  if (m.contains("build")) b.build = r.str(m, "build", "top level");
  b.mainPath = r.str(m, "main", "top level");
  b.sourceSha256 = r.str(m, "source_sha256", "top level");
  b.irSha256 = r.str(m, "ir_sha256", "top level");
  const json &mods = r.field(m, "modules", "top level");
  if (!mods.is_array() || mods.empty()) r.bad("modules", "is not a non-empty list");
  for (size_t i = 0; i < mods.size(); ++i) {
    const std::string w = "modules[" + std::to_string(i) + "]";
    ModuleEntry e{r.str(mods[i], "name", w), r.str(mods[i], "path", w), r.str(mods[i], "root", w), r.str(mods[i], "sha256", w),
                  r.section(mods[i], "section", SectionKind::Module, w)};
    if (e.path.empty() || e.path[0] == '/' || e.path.find("..") != std::string::npos)
      r.bad(w + ".path", "`" + e.path + "` is not a relative path inside its folder");
    b.modules.push_back(e);
  }
  if (std::none_of(b.modules.begin(), b.modules.end(), [&](const ModuleEntry &e) { return e.root == "main" && e.path == b.mainPath; }))
    r.bad("main", "names no module of root `main`");
  r.section(r.field(m, "graph_ir", "top level"), "section", SectionKind::GraphIR, "graph_ir");
  r.section(r.field(m, "schedule", "top level"), "section", SectionKind::Schedule, "schedule");
  b.tileSection_ = r.section(r.field(m, "tile_ir", "top level"), "section", SectionKind::TileIR, "tile_ir");

  const json &targets = r.field(m, "targets", "top level");
  if (!targets.is_object()) r.bad("targets", "is not an object");
  if (auto it = targets.find("cpu"); it != targets.end()) {
    CpuTarget c;
    c.triple = r.str(*it, "triple", "targets.cpu");
    c.cpu = r.str(*it, "cpu", "targets.cpu");
    const json &f = r.field(*it, "features", "targets.cpu");
    if (!f.is_array()) r.bad("targets.cpu.features", "is not a list");
    for (const json &x : f) {
      if (!x.is_string()) r.bad("targets.cpu.features", "has a non-string");
      c.features.push_back(x.get<std::string>());
    }
    if (it->contains("section")) c.section = r.section(*it, "section", SectionKind::CpuObject, "targets.cpu");
    b.cpu = c;
  }
  if (auto it = targets.find("cuda"); it != targets.end()) {
    const json &archs = r.field(*it, "archs", "targets.cuda");
    if (!archs.is_array() || archs.empty()) r.bad("targets.cuda.archs", "is not a non-empty list");
    for (size_t i = 0; i < archs.size(); ++i) {
      const std::string w = "targets.cuda.archs[" + std::to_string(i) + "]";
      CudaArch a;
      a.arch = r.str(archs[i], "arch", w);
      if (a.arch.size() < 4 || a.arch.rfind("sm_", 0) != 0 || a.arch.find_first_not_of("0123456789", 3) != std::string::npos)
        r.bad(w + ".arch", "`" + a.arch + "` is not sm_NN");
      a.ptx = r.section(archs[i], "ptx", SectionKind::Ptx, w);
      if (archs[i].contains("cubin")) a.cubin = r.section(archs[i], "cubin", SectionKind::Cubin, w);
      b.cuda.push_back(a);
    }
  }
  if (!b.cpu && b.cuda.empty()) r.bad("targets", "names no target");

  const json &progs = r.field(m, "programs", "top level");
  if (!progs.is_array()) r.bad("programs", "is not a list");
  for (size_t i = 0; i < progs.size(); ++i) {
    const json &j = progs[i];
    const std::string w = "programs[" + std::to_string(i) + "]";
    Program p;
    p.target = r.str(j, "target", w);
    p.key = r.str(j, "key", w);
    p.name = r.str(j, "name", w);
    p.graph = r.str(j, "graph", w);
    p.kind = r.str(j, "kind", w);
    p.part = r.str(j, "part", w);
    p.tiles = r.str(j, "tiles", w);
    p.step = uint32_t(r.uint(j, "step", w));
    p.text = r.span(j, "text", b.tileSection_, w);
    if (programKey(b.programText(p)) != p.key) r.bad(w + ".key", "is not the key of the program's text");
    if (p.target == "cpu") {
      if (!b.cpu || !b.cpu->section) r.bad(w, "is a cpu program, but the bundle has no cpu code");
      const json &c = r.field(j, "cpu", w);
      p.cpu = CpuCode{r.str(c, "symbol", w + ".cpu"), uint32_t(r.uint(c, "params", w + ".cpu"))};
    } else if (p.target == "cuda") {
      const json &c = r.field(j, "cuda", w);
      if (!c.is_object()) r.bad(w + ".cuda", "is not an object");
      for (auto item : c.items()) {
        const std::string arch = item.key();
        const json &code = item.value();
        const std::string wa = w + ".cuda." + arch;
        auto a = std::find_if(b.cuda.begin(), b.cuda.end(), [&](const CudaArch &x) { return x.arch == arch; });
        if (a == b.cuda.end()) r.bad(wa, "is an architecture the bundle's targets do not list");
        CudaCode cc;
        cc.entry = r.str(code, "entry", wa);
        cc.ptx = r.span(code, "ptx", a->ptx, wa);
        if (code.contains("cubin")) {
          if (!a->cubin) r.bad(wa + ".cubin", "points into a cubin section the architecture does not have");
          cc.cubin = r.span(code, "cubin", *a->cubin, wa);
        }
        cc.threads = uint32_t(r.uint(code, "threads", wa));
        cc.sharedBytes = r.uint(code, "shared", wa);
        if (code.contains("tensor_maps")) {
          auto maps = parseTensorMaps(r.str(code, "tensor_maps", wa));
          if (!maps) r.bad(wa + ".tensor_maps", "is not a list of tensor maps (runtime/TensorMaps.h)");
          for (const TensorMapSpec &m : *maps)
            if (m.param < 0 || m.box.empty()) r.bad(wa + ".tensor_maps", "names a parameter or box that cannot be");
          cc.tensorMaps = std::move(*maps);
        }
        if (code.contains("persistent")) {
          if (!code["persistent"].is_boolean()) r.bad(wa + ".persistent", "is not true or false");
          cc.persistent = code["persistent"].get<bool>();
        }
        p.cuda[arch] = cc;
      }
    } else {
      r.bad(w + ".target", "is `" + p.target + "`, not cpu or cuda");
    }
    if (!b.index_.emplace(std::make_pair(p.target, p.key), b.programs.size()).second) r.bad(w, "repeats the key " + p.key);
    b.programs.push_back(std::move(p));
  }

  // Tuned configurations (exec/Autotune.h): strings, and a config of names and ints.
  if (auto it = m.find("autotune"); it != m.end()) {
    if (!it->is_array()) r.bad("autotune", "is not a list");
    for (size_t i = 0; i < it->size(); ++i) {
      const json &j = (*it)[i];
      const std::string w = "autotune[" + std::to_string(i) + "]";
      AutotuneWinner a;
      a.target = r.str(j, "target", w);
      if (a.target != "cpu" && a.target != "cuda") r.bad(w + ".target", "is `" + a.target + "`, not cpu or cuda");
      a.kernel = r.str(j, "kernel", w);
      a.hash = r.str(j, "hash", w);
      auto text = [&](const char *key) {
        const json &v = r.field(j, key, w);
        if (!v.is_string()) r.bad(w + "." + key, "is not a string");
        return v.get<std::string>();
      };
      a.shape = text("shape");
      a.dtypes = text("dtypes");
      a.fixed = text("fixed");
      const json &c = r.field(j, "config", w);
      if (!c.is_array() || c.empty()) r.bad(w + ".config", "is not a non-empty list");
      for (const json &e : c) {
        if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number_integer())
          r.bad(w + ".config", "has an entry that is not [NAME, INT]");
        a.config.push_back({e[0].get<std::string>(), e[1].get<int64_t>()});
      }
      b.autotune.push_back(std::move(a));
    }
  }

  // The models (format 1.1): each tensor's span must hold exactly its dtype and shape.
  if (auto it = m.find("models"); it != m.end()) {
    if (!it->is_array()) r.bad("models", "is not a list");
    for (size_t i = 0; i < it->size(); ++i) {
      const json &j = (*it)[i];
      const std::string w = "models[" + std::to_string(i) + "]";
      ModelEntry e;
      e.name = r.str(j, "name", w);
      e.graph = r.section(j, "graph_ir", SectionKind::Model, w);
      auto strings = [&](const char *key) {
        const json &v = r.field(j, key, w);
        if (!v.is_array()) r.bad(w + "." + key, "is not a list");
        std::vector<std::string> out;
        for (const json &x : v) {
          if (!x.is_string() || x.get<std::string>().empty()) r.bad(w + "." + key, "has an entry that is not a non-empty string");
          out.push_back(x.get<std::string>());
        }
        return out;
      };
      e.keys = strings("keys");
      if (e.keys.empty()) r.bad(w + ".keys", "is empty");
      e.inputs = strings("inputs");
      const json &cs = r.field(j, "constants", w);
      if (!cs.is_array()) r.bad(w + ".constants", "is not a list");
      if (!cs.empty()) e.tensors = r.section(j, "tensors", SectionKind::Tensors, w);
      for (size_t k = 0; k < cs.size(); ++k) {
        const std::string wc = w + ".constants[" + std::to_string(k) + "]";
        ModelTensor t;
        t.name = r.str(cs[k], "name", wc);
        t.dtype = r.str(cs[k], "dtype", wc);
        auto dt = dtypeFromName(t.dtype);
        if (!dt) r.bad(wc + ".dtype", "`" + t.dtype + "` is not a dtype");
        const json &shape = r.field(cs[k], "shape", wc);
        if (!shape.is_array()) r.bad(wc + ".shape", "is not a list");
        // Sizes are bounded by the section they must fit in, so the product cannot overflow.
        uint64_t numel = 1;
        for (const json &d : shape) {
          const uint64_t n = d.is_number_unsigned() ? d.get<uint64_t>() : ~uint64_t(0);
          if (n > b.sections[*e.tensors].size || (n && numel > b.sections[*e.tensors].size / n)) r.bad(wc + ".shape", "has sizes its section cannot hold");
          t.shape.push_back(int64_t(n));
          numel *= n;
        }
        t.data = r.span(cs[k], "data", *e.tensors, wc);
        if (t.data.size != numel * dtypeSize(*dt)) r.bad(wc + ".data", "does not hold " + std::to_string(numel) + " " + t.dtype + " values");
        e.constants.push_back(std::move(t));
      }
      b.models.push_back(std::move(e));
    }
  }
  return b;
}

std::string_view Bundle::sectionBytes(uint32_t index) const {
  const Section &s = sections.at(index);
  return std::string_view(bytes_).substr(size_t(s.offset), size_t(s.size));
}

std::string_view Bundle::programText(const Program &p) const {
  return sectionBytes(tileSection_).substr(size_t(p.text.offset), size_t(p.text.size));
}

const Program *Bundle::find(std::string_view target, std::string_view key) const {
  auto it = index_.find(std::make_pair(std::string(target), std::string(key)));
  return it == index_.end() ? nullptr : &programs[it->second];
}

std::string Bundle::cudaArchList() const {
  std::string s;
  for (const CudaArch &a : cuda) s += (s.empty() ? "" : ", ") + a.arch;
  return s;
}

std::string_view programBody(std::string_view text) {
  // "tile @NAME(...": the name runs from after '@' to the first '('.
  const size_t at = text.find('@'), open = text.find('(');
  if (text.rfind("tile @", 0) != 0 || open == std::string_view::npos || at > open) return text;
  return text.substr(open);
}

std::string programKey(std::string_view text) {
  uint64_t h = 1469598103934665603ull; // FNV-1a 64
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  mix("tile @");
  mix(programBody(text));
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

void checkRunnable(const Bundle &b, const Device &d) {
  auto targetsText = [&] {
    std::string t;
    if (b.cpu) t = "the cpu";
    if (!b.cuda.empty()) t += std::string(t.empty() ? "" : " and ") + "cuda (" + b.cudaArchList() + ")";
    return t;
  };
  if (d.cuda) {
    if (b.cuda.empty()) refuse(Refusal::NoCode, "the bundle has code for " + targetsText() + " only; the device is " + d.name);
    const int have = d.ccMajor * 10 + d.ccMinor;
    bool runs = false;
    for (const CudaArch &a : b.cuda) runs = runs || std::atoi(a.arch.c_str() + 3) <= have;
    if (!runs)
      refuse(Refusal::NoCode, "the bundle has code for " + b.cudaArchList() + " only; the device " + d.name + " is sm_" +
                                  std::to_string(have) + " (code for sm_N runs on compute capability N/10 and later)");
    return;
  }
  if (!b.cpu) refuse(Refusal::NoCode, "the bundle has code for " + targetsText() + " only; the device is the cpu");
  if (!b.cpu->section) return; // no programs: nothing of the bundle's runs on the CPU
  const std::string arch = b.cpu->triple.substr(0, b.cpu->triple.find('-'));
  if (arch != hostArch())
    refuse(Refusal::NoCode, "the bundle's cpu code is for " + arch + " (" + b.cpu->triple + "); this machine is " + std::string(hostArch()));
  const std::vector<std::string> missing = cpuMissingFeatures(b.cpu->features);
  if (!missing.empty()) {
    std::string list;
    for (const std::string &f : missing) list += (list.empty() ? "" : ", ") + f;
    refuse(Refusal::NoCode, "the bundle's cpu code is for " + b.cpu->cpu + " (" + arch + ") and uses " + list +
                                ", which this CPU lacks");
  }
}

} // namespace tsr::rt::bundle
