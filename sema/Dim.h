// Symbolic dimensions: the shape algebra of Tessera's checker.
//
// A `Dim` is one extent of a tensor or tile. It is a Laurent polynomial with rational coefficients
// over *atoms*. An atom is a named symbol ("B", "D", "heads"), which stands for a positive integer,
// or an opaque term (an unknown extent "?3", or a term the algebra cannot normalise such as
// "min(64, D)" or "D // (H + 1)"), compared by its canonical text.
//
// Because every symbol is a positive integer, division by a monomial is exact in the algebra:
// "D/H" is D * H^-1, and H * (D/H) normalises to D, which is how `reshape` decides element counts
// symbolically (spec section 5). Whether D is divisible by H at run time is a separate guard.
// Division by a non-monomial yields an opaque atom.
//
// Canonical form: terms sorted by monomial (by total degree descending, then lexicographically by
// atom names), zero coefficients dropped; two Dims are equal iff their canonical forms are equal.
// The printed form uses the surface syntax of dim strings: "3*D", "D/H", "B*S + 1", "2*B*H".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tsr {

/// An exact rational number p/q with q > 0 and gcd(p, q) = 1. Overflow is not expected for the
/// magnitudes of tensor extents; operations that would overflow int64 saturate the result into
/// an opaque atom at the Dim level (see Dim::overflowed()).
struct Rational {
  int64_t num = 0;
  int64_t den = 1;
  static Rational of(int64_t n, int64_t d = 1);
  bool isInteger() const { return den == 1; }
  bool operator==(const Rational &o) const { return num == o.num && den == o.den; }
  bool operator!=(const Rational &o) const { return !(*this == o); }
  bool operator<(const Rational &o) const;
};

class Dim {
public:
  /// Zero. Extents are never negative; 0 is a legal (empty) extent.
  Dim();
  static Dim constant(int64_t value);
  /// A named positive-integer symbol, e.g. "B". A name that is not an identifier
  /// ([A-Za-z_][A-Za-z0-9_]*) gives an opaque atom of that text instead.
  static Dim symbol(std::string_view name);
  /// An opaque atom identified by its text, e.g. "min(64, D)". Equal texts are the same atom.
  /// It is distinct from the symbol of the same name and from the atoms Dim builds itself (min,
  /// max, quotients) of the same text.
  static Dim opaque(std::string_view text);
  /// A fresh unknown extent ("?N"); never equal to any other Dim but itself (copies of it).
  static Dim unknown();

  /// Parses the text of a dim string as written in `Tensor["3*D", "D/H", ...]`:
  /// integers, names, + - * / // and parentheses. `/` and `//` both mean exact division.
  /// Precedence and associativity are Python's (unary minus binds tighter than * and /).
  /// Integers take Python's '_' separators; a literal beyond int64 gives an overflowed() atom.
  /// Constants may come out non-integral ("7/2"); whether that is allowed is the caller's call.
  /// Returns nullopt and sets *error (with a 0-based character offset in *errorOffset) on a
  /// syntax error, on division by zero, and on nesting deeper than 256 parentheses.
  static std::optional<Dim> parse(std::string_view text, std::string *error = nullptr,
                                  size_t *errorOffset = nullptr);

  Dim operator+(const Dim &o) const;
  Dim operator-(const Dim &o) const;
  Dim operator*(const Dim &o) const;
  /// Exact division: by a monomial (c * product of atoms^k), a Laurent polynomial; otherwise an
  /// opaque atom "(a)/(b)". Division by the zero Dim gives nullopt.
  /// For a non-monomial divisor, rational and monomial factors common to all terms are taken out
  /// first, so (B*S + B)/(S + 1) is B, and 2*D/(H + 1) is 2*D times the atom "1/(H + 1)".
  std::optional<Dim> divide(const Dim &o) const;
  /// min/max of two Dims: folded when both are constants or equal (more generally, when they
  /// differ by a constant), otherwise an opaque atom "min(64, D)" with the operands in a
  /// canonical order (constants first), so min(a, b) == min(b, a).
  static Dim min(const Dim &a, const Dim &b);
  static Dim max(const Dim &a, const Dim &b);

  bool isConstant() const;                    // no atoms (including zero)
  std::optional<int64_t> constantValue() const; // integer constant value, if constant and integral
  bool isOne() const { return constantValue() == std::optional<int64_t>(1); }
  /// True if this Dim is exactly one unknown atom ("?N").
  bool isUnknown() const;
  /// True if any atom of this Dim is an unknown ("?N").
  bool hasUnknown() const;
  /// True if some atom stands for a result that int64 arithmetic could not represent (e.g.
  /// "9223372036854775807 + 1", or a substituted 0 under a division). Such an extent is an error.
  bool overflowed() const;
  /// True if this Dim is a single named symbol with coefficient 1 (e.g. "B").
  bool isSymbol() const;
  /// Names of the named symbols this Dim mentions (not opaque atoms or unknowns), sorted.
  std::vector<std::string> symbols() const;

  /// Replaces named symbols by Dims (a call binding the callee's symbols from its arguments).
  /// Replacement is simultaneous, and the result is normalised again. Unknowns and all opaque
  /// atoms are kept as they are, including min/max/quotient atoms that mention a replaced symbol
  /// (min(64, N) with N = 128 stays "min(64, N)").
  Dim substitute(const std::map<std::string, Dim> &env) const;

  bool operator==(const Dim &o) const;
  bool operator!=(const Dim &o) const { return !(*this == o); }
  bool operator<(const Dim &o) const; // total order on canonical forms, for use as a map key

  /// Canonical surface text: "3*D", "D/H", "B*S + 1", "?2", "64", "0". Negative powers and
  /// rational coefficients print as a divisor: "D/(H*H)", "D/2", "3*D/(2*H)", "1/H"; a sum with
  /// fractions prints over a common denominator: "(S + 1)/2". Powers print as repeated products
  /// up to 16 ("B*B"), beyond that as "B^17". For Dims without unknowns, min/max, such powers or
  /// Dim::opaque() atoms, parse(str()) gives back an equal Dim.
  std::string str() const;

private:
  // monomial: atom name -> nonzero exponent; the polynomial: monomial -> nonzero coefficient.
  using Monomial = std::map<std::string, int>;
  struct MonoLess {
    bool operator()(const Monomial &a, const Monomial &b) const;
  };
  std::map<Monomial, Rational, MonoLess> terms_;
  friend struct DimTestAccess;
  friend struct DimImpl; // helpers private to Dim.cpp
};

} // namespace tsr
