// Tessera bundles (`tsrc model.tsr -o model.bundle`, `tsr run model.bundle`): one file holding a
// program's manifest, its host program (the checked source modules), its Graph IR, its schedules,
// and per target the compiled code of its programs (graph steps and kernels). docs/bundle.md is the format's
// specification, byte by byte; this header is its reader and the writer of its container.
//
// This file builds with no LLVM, ANTLR or IR (runtime/ is what a deployed program needs), so a
// runner without a compiler can read bundles. What goes *into* a bundle (lowering, code
// generation) is exec/bundle/BundleWriter.h; what runs one is exec/bundle/RunBundle.h.
//
// Layout (little-endian; docs/bundle.md has every field):
//   [0, 16)    prelude: magic "\x89TSRBND\n", format major and minor (u16 each), CRC-32 of [0, 12)
//   [16, 64)   header: sizes, section count, table offset, file size, CRC-32s of the table and of [0, 60)
//   [64, ...)  section table: one 48-byte entry per section (kind, offset, size, CRC-32, tag)
//   sections   each at a 64-byte aligned offset, gaps zero
//   trailer    16 bytes: "TSRBEND\n", CRC-32 of every byte before the trailer, 4 zero bytes
//
// Every refusal is a BundleError whose kind says which of truncated, corrupted, foreign,
// version-mismatched or no-code-for-this-device it is, with a message naming the place.
#pragma once

#include "runtime/TensorMaps.h"

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::rt::bundle {

/// The bundle format this reader reads and this writer writes. A reader reads every minor
/// version of its major (minor versions only add section kinds and manifest keys, which older
/// readers skip); another major is refused as a version mismatch.
constexpr uint16_t kFormatMajor = 1;
/// Minor 1 added the models a program loads with `onnx.load` (sections 9 and 10, "models").
constexpr uint16_t kFormatMinor = 1;
/// The ABI of the compiled code: codegen::KernelArg (152 bytes: data, shape[8], strides[8], i,
/// f), the CPU entry `void(const KernelArg *, int64_t begin, int64_t end, const int64_t grid[3])`
/// and the PTX kernels' one `.param .b8 args[P*152]`. A bundle of another ABI is refused.
constexpr uint32_t kCodeAbi = 1;

constexpr char kMagic[8] = {'\x89', 'T', 'S', 'R', 'B', 'N', 'D', '\n'};
constexpr char kEndMagic[8] = {'T', 'S', 'R', 'B', 'E', 'N', 'D', '\n'};
constexpr uint64_t kHeaderSize = 64;
constexpr uint64_t kEntrySize = 48;
constexpr uint64_t kTrailerSize = 16;
constexpr uint64_t kAlignment = 64;
/// At most this many sections (a bound on the table a reader allocates).
constexpr uint32_t kMaxSections = 1u << 20;

enum class SectionKind : uint32_t {
  Manifest = 1,  // JSON (UTF-8): section 0, exactly one
  Module = 2,    // one `.tsr` source module (UTF-8)
  GraphIR = 3,   // the Graph IR text of every graph the compiler lowered (ir/Text.h parses it back)
  Schedule = 4,  // the fusion schedules of those graphs and each program's tiles (text)
  TileIR = 5,    // the Tile IR text of every program, one after another (spans in the manifest)
  CpuObject = 6, // an ELF shared object with one entry per CPU program (dlopen)
  Ptx = 7,       // PTX modules of one architecture, one per program, one after another
  Cubin = 8,     // cubins of one architecture, one per program, one after another
  Model = 9,     // the Graph IR text of one model the program loads (`onnx.load`), as imported
  Tensors = 10,  // that model's tensors, raw little-endian, each at a multiple of 64 (spans in the manifest)
};
std::string_view sectionKindName(SectionKind k);

/// Why a bundle is refused.
enum class Refusal : uint8_t { Truncated, Corrupted, Foreign, Version, NoCode };
/// "truncated", "corrupted", "not a bundle", "version mismatch", "no code for the device".
std::string_view refusalName(Refusal r);

/// A refused bundle. what() is "<refusalName>: <details>"; the details name the section, field or
/// architecture at fault.
class BundleError : public std::runtime_error {
public:
  BundleError(Refusal kind, const std::string &details);
  Refusal kind;
  std::string details;
};

/// CRC-32 (ISO-HDLC, zlib's crc32) of `bytes`.
uint32_t crc32(std::string_view bytes);

/// Assembles a bundle's container: sections in the order added, then the manifest as section 0.
class Writer {
public:
  /// Adds a section and returns its index (the manifest takes index 0, so the first section
  /// added is 1). `tag` (at most 16 bytes of ASCII) labels it in the table for people reading a
  /// dump ("module", "ptx sm_90").
  uint32_t add(SectionKind kind, const std::string &tag, std::string bytes);
  /// The bundle's bytes, with `manifest` (JSON) as section 0. Throws std::invalid_argument for a
  /// tag longer than 16 bytes.
  std::string finish(const std::string &manifest) const;

private:
  struct Pending {
    SectionKind kind;
    std::string tag, bytes;
  };
  std::vector<Pending> sections_;
};

/// A byte range inside a section: [offset, offset + size).
struct Span {
  uint64_t offset = 0, size = 0;
};

struct Section {
  SectionKind kind;
  std::string tag;
  uint64_t offset = 0, size = 0;
  uint32_t crc = 0;
};

/// A source module of the host program. `root` says which folder it was found in when the
/// bundle was made: "main" (the main module's folder), "path:N" (the N-th TESSERA_PATH folder) or
/// "stdlib"; `path` is relative to that folder ("model.tsr", "optim/adamw.tsr").
struct ModuleEntry {
  std::string name, path, root, sha256;
  uint32_t section = 0;
};

/// A tensor a model carries (an initializer): its bytes are `data` in the model's Tensors section.
struct ModelTensor {
  std::string name, dtype; // dtype as support/DType.h names it ("f32")
  std::vector<int64_t> shape;
  Span data;
};

/// A model the program loads with `onnx.load` (spec 15), carried so that the bundle runs without
/// the model file and without the importer (exec/bundle/BundleModels.h). `keys` are the paths the
/// runner's checker resolves the program's `onnx.load` calls to, relative to the folder it checks
/// the modules in ("main/models/mlp.onnx", "../mlp.onnx"), or absolute where the program wrote an
/// absolute path.
struct ModelEntry {
  std::string name;              // the model's file name ("mlp.onnx"), for messages
  std::vector<std::string> keys;
  uint32_t graph = 0;            // the Model section
  std::vector<std::string> inputs; // the model's names of its inputs (the graph's first parameters)
  std::optional<uint32_t> tensors; // the Tensors section; none when the model carries none
  std::vector<ModelTensor> constants; // the graph's other parameters' values, in order
};

/// A tuned configuration a bundle carries (manifest key "autotune", present only when the trace
/// run chose one; older readers ignore it; exec/Autotune.h): the launch's
/// key without target and compiler, and the winner.
struct AutotuneWinner {
  std::string target; // "cpu" or "cuda"
  std::string kernel, hash, shape, dtypes, fixed;
  std::vector<std::pair<std::string, int64_t>> config; // the space's entries, in order
};

struct CpuTarget {
  std::string triple;                // "x86_64-pc-linux-gnu" (empty without code)
  std::string cpu;                   // LLVM's name of the compiling machine's CPU ("znver4")
  std::vector<std::string> features; // the ISA extensions the code may use ("avx2", "avx512f")
  std::optional<uint32_t> section;   // the CpuObject; none when the target has no programs
};

struct CudaArch {
  std::string arch; // "sm_80"
  uint32_t ptx = 0; // the Ptx section
  std::optional<uint32_t> cubin;
};

struct CpuCode {
  std::string symbol; // the entry in the CpuObject
  uint32_t params = 0;
};

struct CudaCode {
  std::string entry; // the PTX `.entry`
  Span ptx;
  std::optional<Span> cubin;
  uint32_t threads = 0;
  uint64_t sharedBytes = 0;
  /// The kernel's tensor maps ("tensor_maps", runtime/TensorMaps.h's text; absent: none).
  std::vector<TensorMapSpec> tensorMaps;
  /// A persistent kernel ("persistent": true; codegen/nvptx/PtxKernel.h): the launcher passes the
  /// grid in the parameter block and launches the CTAs that fit on the device at once.
  bool persistent = false;
};

/// One compiled program of a graph's kernel step.
struct Program {
  std::string target;        // "cpu" or "cuda"
  std::string key;           // programKey() of its text: 16 lowercase hex digits
  std::string name;          // the tile function's name, as the executor names it
  std::string graph, kind, part, tiles;
  uint32_t step = 0;
  Span text;                 // in the TileIR section
  std::optional<CpuCode> cpu;
  std::map<std::string, CudaCode> cuda; // by arch
};

/// The key a program is looked up by: FNV-1a 64 of its Tile IR text (tile::toString, without
/// locations) with the function's name cut from the first line (`tile @NAME(` read as `tile @(`),
/// so that the name the executor gives a program does not change its identity. 16 hex digits.
std::string programKey(std::string_view tileText);
/// The text with its name cut, as programKey hashes it (what a lookup compares exactly).
std::string_view programBody(std::string_view tileText);

struct ParseOptions {
  /// Verify every CRC-32. Off only under the test-only TSR_BUNDLE_TEST_SKIP_CHECKSUMS=1, which
  /// exists so that a negative control can show the corruption tests depend on the checksums.
  bool verifyChecksums = true;
  static ParseOptions fromEnvironment();
};

/// A bundle read and validated in memory.
class Bundle {
public:
  /// Validates `bytes` completely — structure, checksums, format version, code ABI, manifest —
  /// and throws BundleError (Truncated, Corrupted, Foreign, Version) at the first problem.
  static Bundle parse(std::string bytes, const ParseOptions &opts = ParseOptions::fromEnvironment());
  /// Reads and parses the file. Throws std::runtime_error ("cannot read FILE: ...") when it cannot
  /// be read, and BundleError as parse.
  static Bundle open(const std::string &path, const ParseOptions &opts = ParseOptions::fromEnvironment());

  uint16_t formatMajor = 0, formatMinor = 0;
  std::string compiler;  // "tsrc 0.1 (Tessera)": informational (docs/bundle.md, versioning)
  std::string build;     // the compiler's build id (support/BuildId.h); empty when absent
  std::string mainPath;  // the main module's path (relative to root "main")
  std::string sourceSha256, irSha256;
  std::vector<Section> sections;
  std::vector<ModuleEntry> modules;
  std::optional<CpuTarget> cpu;
  std::vector<CudaArch> cuda;
  std::vector<Program> programs;
  std::vector<ModelEntry> models;
  std::vector<AutotuneWinner> autotune;
  std::string manifest; // the manifest's JSON text

  std::string_view sectionBytes(uint32_t index) const;
  std::string_view moduleText(const ModuleEntry &m) const { return sectionBytes(m.section); }
  /// The program's Tile IR text (within the TileIR section).
  std::string_view programText(const Program &p) const;
  /// The program of `target` whose key is `key`, or null.
  const Program *find(std::string_view target, std::string_view key) const;
  /// The architectures with CUDA code, in the bundle's order ("sm_80, sm_90").
  std::string cudaArchList() const;

private:
  std::string bytes_;
  uint32_t tileSection_ = 0;
  std::map<std::pair<std::string, std::string>, size_t, std::less<>> index_; // (target, key) -> program
};

/// The device a bundle is asked to run on.
struct Device {
  bool cuda = false;
  std::string name;          // "cpu", "cuda:0"
  int ccMajor = 0, ccMinor = 0;
};

/// Whether `b` has code that runs on `d`; throws BundleError(NoCode) naming both otherwise:
/// - cuda: the bundle has no cuda target ("the bundle has code for the cpu only; the device is
///   cuda:0"), or every architecture it has is newer than the device's (code for sm_N runs on a
///   device of compute capability >= N/10, PTX through the driver's JIT: "the bundle has code for
///   sm_90 only; the device cuda:0 is sm_86");
/// - cpu: the bundle has no cpu target, its CPU code is for another architecture (the triple's
///   first component against this build's), or it needs ISA extensions this CPU lacks
///   (cpuMissingFeatures, runtime/bundle/HostCode.h); a cpu target without code (no programs)
///   runs anywhere.
void checkRunnable(const Bundle &b, const Device &d);

} // namespace tsr::rt::bundle
