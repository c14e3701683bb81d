// The text form of Tile IR: what `tsrc --emit=tile` prints, what golden tests and tools read
// back, and (without locations) the identity of a tile function for compilation caches.
// parseTileModule(print(m)) prints identically.
//
//   tile @saxpy(%x: tensor<1, f32>, %y: tensor<1, f32>, %alpha: f32) grid 1 config {BLOCK = 1024} {
//     %3 = program_id {axis = 0} : i64 loc("saxpy.tsr":4:10)
//     %4 = constant {value = 1024, shape = [], dtype = dtype i64} : i64
//     %9 = for %5 = %lo to %hi step %st iter(%6 = %acc0) {
//       %7 = add %6, %6 : tile<64x64xf32>
//       yield %7
//     } {stages = 2} : tile<64x64xf32> loc("gemm.tsr":9:5)
//     %11 = if %c {
//       yield %a
//     } else {
//       yield %b
//     } : f32
//     store_box %y, %3, %8 {box = [1024]}
//   }
//
// Types: `tile<64x32xf32>` (a tile), `f32` (a scalar), `tensor<2, bf16>` (a tensor parameter of
// rank 2). Values are numbered canonically when printed: parameters by name, then every block
// argument and op result in definition order (a region's values before its op's results), so
// the text does not depend on the order a builder created values in. Attribute values are those
// of the Graph IR text (ir/Text.h): integers, floats (with `.`, `e`, `inf` or `nan`), true/false,
// strings, int lists and `dtype bf16 @accum(f32)`. An op without results has no `:` part.
#pragma once

#include "ir/tile/TileIR.h"

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

namespace tsr::tile {

/// Prints one function; locations name files of `m`'s file table (none when withLocations is
/// false or `m` is null).
void printFunction(std::ostream &os, const Function &f, const Module *m, bool withLocations = true);
void printModule(std::ostream &os, const Module &m, bool withLocations = true);
std::string toString(const Module &m, bool withLocations = true);
/// The function's text without locations: its identity (equal programs, equal text).
std::string toString(const Function &f);

/// Parses the text form (one or more functions). Throws TileError with "line:col: message" on
/// malformed text (unknown ops, undefined values, malformed types or attributes). The result is
/// not verified: run tile::verify on each function.
std::unique_ptr<Module> parseTileModule(const std::string &text);

/// A stable content hash of a function (64-bit FNV-1a of toString(f)): equal across runs and
/// machines, for compilation caches.
uint64_t contentHash(const Function &f);

} // namespace tsr::tile
