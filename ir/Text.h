// The text form of Graph IR: what `tsrc --emit=graph` prints, and what golden tests and tools
// read back. printModule and parseModule round-trip: parse(print(m)) prints identically.
//
//   graph @mlp(%x: tensor<"B", "D", bf16 @accum(f32)>, %w: tensor<"D", "H", bf16>) -> (tensor<"B", "H", bf16>) {
//     %2 = matmul %x, %w : tensor<"B", "H", bf16 @accum(f32)> loc("mlp.tsr":6:9)
//     %3 = reduce_sum %2 {axes = [1], keepdims = false} : tensor<"B", bf16 @accum(f32)>
//     return %3
//   }
//
// Attribute values: integers, floats (always with `.`, `e`, `inf` or `nan`), true/false,
// strings, int lists `[0, 1]`, shapes `<"B", 64>` (the dims of a tensor type), and dtypes
// `dtype bf16 @accum(f32)`.
#pragma once

#include "ir/IR.h"

#include <iosfwd>
#include <string>

namespace tsr::ir {

void printGraph(std::ostream &os, const Graph &g, const Module &m, bool withLocations = true);
void printModule(std::ostream &os, const Module &m, bool withLocations = true);
std::string toString(const Module &m, bool withLocations = true);

/// Parses the text form. Throws IRError with "line:col: message" on malformed text.
std::unique_ptr<Module> parseModuleText(const std::string &text);

/// A stable content hash of a graph (its printed text without locations): equal programs hash
/// equal across runs and machines, for bundle and compilation caches. 64-bit FNV-1a.
uint64_t contentHash(const Graph &g, const Module &m);

/// contentHash without the graph's own name: two graphs that differ only in name (the same
/// expression of host code lowered at two call sites, `eager36` and `eager39`) hash equal, so an
/// executor keyed by it plans and compiles their programs once.
uint64_t structureHash(const Graph &g, const Module &m);

} // namespace tsr::ir
