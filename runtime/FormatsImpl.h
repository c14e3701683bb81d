// What the tensor file readers share, private to runtime/ (Formats.cpp: .npy, .npz, .safetensors;
// Csv.cpp: CSV): the error of a file, and how a message quotes a name or field read from one.
#pragma once

#include <string>
#include <string_view>

namespace tsr::rt::formats {

/// Throws FormatError(where, msg).
[[noreturn]] void fail(const std::string &where, const std::string &msg);
/// A file or field quoted for a message: printable ASCII kept, the rest escaped, cut at 40.
std::string quote(std::string_view s);

} // namespace tsr::rt::formats
