// The decorators of spec sections 3, 7, 8 and 10, listed once: the checker applies them
// (ProgramChecker::analyzeDecorators, by kind) and the language server describes them on hover
// from the same entry. Also the `tessera` module, whose members are the builtins and dtypes
// (`import tessera as ts`: ts.exp, @ts.jit).
#pragma once

#include "frontend/Ast.h"
#include "sema/Types.h"

#include <string>
#include <string_view>
#include <vector>

namespace tsr::sema {

struct ModuleInfo;

enum class DecoratorKind : uint8_t { Jit, Inline, Kernel, KernelAutotune, KernelSchedule, Autodiff, CustomVjp, Distribute };

struct DecoratorInfo {
  DecoratorKind kind;
  std::string_view name; // as written after `@`: "jit", "kernel.autotune"
  std::string_view says; // what it does to a function, `{}` standing for the function's name
};

/// The decorator named `dotted` ("kernel.schedule"), or null.
const DecoratorInfo *findDecorator(std::string_view dotted);
const std::vector<DecoratorInfo> &allDecorators();
/// `says` with the function's name (in backticks) in place of `{}`.
std::string describeDecorator(const DecoratorInfo &d, const std::string &function);

/// The type of the `tessera` module (`import tessera`), and whether a type is it.
TypeRef tesseraModule();
bool isTesseraModule(const TypeRef &t);
/// A decorator's dotted name as written in module `m`, without the tessera module's alias
/// (`import tessera as ts`: @ts.jit is @jit).
std::string decoratorName(const ModuleInfo &m, const ast::Decorator &d);

} // namespace tsr::sema
