// Tensor files: what `load`, `save` and `load_csv` read and write (spec section 9).
//
// - .npy: NumPy's format, versions 1.0, 2.0 and 3.0 ("A Simple File Format for NumPy Arrays",
//   NEP 1, numpy.lib.format). Read: little- or big-endian '<f8' '<f4' '<f2' '<i8' '<i4' '|i1'
//   '|b1', plus '|u1' '<i2' '<u2' (widened to i32) and '<u4' (widened to i64), since Tessera has
//   no such dtypes and the widening is exact. C order only: Fortran-order files are rejected.
//   Written: version 1.0 (2.0 when the header exceeds 65535 bytes), little-endian. NumPy has no
//   bfloat16 and no fp8, so bf16, fp8_e4m3 and fp8_e5m2 tensors are written as '<f4' (an exact
//   widening: loading gives f32) and tf32 as '<f4'.
// - .npz: a zip archive of .npy members named NAME.npy (numpy.savez). Read: stored and deflated
//   members (zlib inflate), CRC-checked; zip64 archives (over 4 GiB or 65535 members) and
//   encrypted members are rejected. The zip64 extra field that numpy.savez writes into local
//   headers is fine: sizes are taken from the central directory. Written: stored members, in
//   order, dated 1980-01-01 so that equal tensors give equal files.
// - .safetensors (github.com/huggingface/safetensors, "Format"): an 8-byte little-endian header
//   size N, N bytes of JSON {"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin,
//   end]}, ..., "__metadata__": {"key": "value"}}, then the data buffer; offsets are relative to
//   the buffer. Dtypes F64 F32 F16 BF16 I64 I32 I8 BOOL F8_E4M3 F8_E5M2 map to Tessera's, U8 I16
//   U16 are widened to i32 and U32 to i64. As the reference implementation, the tensors must
//   cover the buffer exactly (no overlaps, no holes) and the header is at most 100 MB. Written:
//   tensors ordered by element size (largest first) then name, packed, the header padded with
//   spaces to a multiple of 8 bytes; tf32 as F32.
// - CSV: see loadCsv.
// - IDX (MNIST's format, plain or gzip-compressed): see readIdx.
// - Raw bytes (`load_bytes`): see readBytes.
//
// Every problem with a file (missing, unreadable, malformed, truncated, unsupported) is a
// FormatError whose message starts with the path as given; nothing in here crashes on bad input.
// Writes go to a temporary file in the same folder that is renamed over PATH when complete, so a
// failed save leaves any previous file intact.
#pragma once

#include "runtime/Tensor.h"

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tsr::rt {

/// A file that cannot be read or written as asked. what() is "PATH: what is wrong".
class FormatError : public std::runtime_error {
public:
  FormatError(const std::string &path, const std::string &message);
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

/// Named tensors in file order (a .npz's member order, a .safetensors header's key order).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
/// Safetensors' __metadata__: string keys and values, in header order.
using Metadata = std::vector<std::pair<std::string, std::string>>;

Tensor readNpy(const std::string &path);
void writeNpy(const std::string &path, const Tensor &t);
/// The bytes of a .npy file; `where` names the source in error messages (a path, "a.npz: w.npy").
Tensor decodeNpy(const void *bytes, size_t size, const std::string &where);
std::vector<unsigned char> encodeNpy(const Tensor &t);

/// Member names without their ".npy". Directory entries are skipped; a member that is not a .npy
/// file, or a name given twice, is an error.
NamedTensors readNpz(const std::string &path);
/// Throws FormatError for an empty or repeated name, or a member of 4 GiB or more (which needs
/// zip64).
void writeNpz(const std::string &path, const NamedTensors &tensors);

struct SafetensorsFile {
  NamedTensors tensors;
  Metadata metadata;
};
SafetensorsFile readSafetensors(const std::string &path);
/// Throws FormatError for an empty or repeated name, or the name "__metadata__".
void writeSafetensors(const std::string &path, const NamedTensors &tensors, const Metadata &metadata = {});

/// load_csv(path, dtype=f32, delimiter=","): a 2-d tensor [rows, columns] of numbers, from a plain
/// or gzip-compressed file (zlib's gzread reads both, so the name need not end in .gz).
/// - Lines end with \n or \r\n; a UTF-8 byte-order mark is skipped. Blank lines and lines whose
///   first non-blank character is '#' are skipped (numpy.loadtxt's default comment character).
/// - Fields are separated by exactly `delimiter` (not empty; " " does not merge runs of spaces);
///   spaces and tabs around a field and one pair of double quotes around it are removed.
/// - Floats parse as C's strtod does (nan, inf, 1e-3, overflow to ±inf), independent of the
///   locale; f32 and f64 are correctly rounded from the decimal, narrower floats round from f64;
///   integer dtypes take integers (or integral floats such as 3.0 or 1e3) in the dtype's range;
///   bool takes true/false (any case) or a number (nonzero is true).
/// - Errors name the line (1-based, counting every line) and field: an empty or non-numeric
///   field (with a hint when it is the first row: load_csv has no header support), a row with a
///   different number of fields than the first ("ragged"), a value out of range, a corrupt or
///   truncated gzip stream. No rows gives a [0, 0] tensor.
Tensor loadCsv(const std::string &path, DType dtype = DType::F32, std::string_view delimiter = ",");

/// readIdx(path): an IDX file (LeCun et al., "The MNIST database", section "FILE FORMATS"), plain
/// or gzip-compressed: a 4-byte magic number 0x00 0x00 TYPE NDIM, NDIM big-endian u32 sizes, then
/// the elements in C order, big-endian.
/// - Shape: the header's sizes (NDIM from 1 to 255). Dtype by TYPE: 0x08 unsigned byte and 0x0B
///   16-bit integer load as i32 (Tessera has neither; the widening is exact), 0x09 as i8, 0x0C as
///   i32, 0x0D as f32, 0x0E as f64.
/// - Errors (FormatError naming the file): a missing or unreadable file, a magic number that is
///   not IDX's, an unknown TYPE, no dimensions, a header or data shorter than the header says,
///   bytes after the data, sizes describing more than 2^40 bytes, corrupt gzip data. Memory grows
///   with the bytes actually read, so a damaged header cannot make it allocate what it claims.
Tensor readIdx(const std::string &path);
/// The bytes of a whole (uncompressed) IDX file; `where` names it in error messages.
Tensor decodeIdx(const void *bytes, size_t size, const std::string &where);
/// Whether `load` reads the path as IDX: a file name (less a trailing ".gz") ending in ".idx", or
/// LeCun's naming, "idx" and the dimension count after a '-', '.' or '_' and before a '-'
/// (train-images-idx3-ubyte, t10k-labels.idx1-ubyte.gz).
bool isIdxPath(const std::string &path);

/// readBytes(path): the bytes of a file as they are stored, a 1-d i32 tensor [size] of values
/// 0..255 (Tessera has no u8; the widening is exact, as for IDX's unsigned bytes). No
/// decompression: a .gz file gives its compressed bytes. An empty file gives a [0] tensor.
/// - Errors (FormatError naming the file): a missing or unreadable file, a directory.
Tensor readBytes(const std::string &path);

/// What `load(path)` returns: one tensor (.npy) or a dict (.npz, .safetensors).
struct Loaded {
  bool isDict = false;
  Tensor tensor;       ///< when !isDict
  NamedTensors dict;   ///< when isDict
  Metadata metadata;   ///< .safetensors __metadata__
};
/// Dispatches on the extension (.npy, .npz, .safetensors; case-insensitive), and on isIdxPath for
/// IDX files (one tensor). Any other name is a FormatError that lists the supported ones.
Loaded load(const std::string &path);
/// save(path, tensor): .npy; for .npz and .safetensors the tensor is stored under the name
/// "arr_0" (numpy.savez's name for a positional array).
void save(const std::string &path, const Tensor &t);
/// save(path, dict): .npz or .safetensors; a .npy path is an error (it holds one tensor).
void save(const std::string &path, const NamedTensors &tensors, const Metadata &metadata = {});

} // namespace tsr::rt
