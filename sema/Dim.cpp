// Symbolic dimensions: Laurent polynomials with exact rational coefficients (see Dim.h).
//
// One room (over 1,000 lines): the canonical form is one invariant that every operation here
// keeps (sorted monomials, exact rationals, opaque atoms' tags), and the parser and printer of the
// same form round-trip it; a split would scatter that invariant over files.
//
// Atoms are keyed by strings inside a monomial:
//   - a named symbol is its identifier ("B");
//   - an unknown is "?N";
//   - an opaque atom is its text followed by one tag byte in [0x10, 0x17] whose low bits are flags
//     (kFlagUnknown, kFlagOverflow, kFlagDerived). Identifiers and "?N" never end in such a byte,
//     so the three kinds cannot collide, and opaque("B") is not the symbol B.
// A *derived* opaque atom is one Dim built itself (min, max, division by a non-monomial, or a
// result int64 could not hold); its text is in the dim-string syntax, so Dim can read it back:
// dividing by a quotient atom "1/(X)" gives back X (see DimImpl::expandReciprocals). Opaque atoms
// made by Dim::opaque() are never read back, because their text may use an operator with other
// semantics (e.g. a floor division "D // (H + 1)"). substitute() leaves every opaque atom alone.
//
// Printing (Dim::str):
//   - terms in canonical order joined by " + " / " - "; zero is "0"; constants are "64", "-3";
//   - a coefficient is a leading factor: "3*D"; 1 and -1 are omitted: "D", "-D";
//   - negative exponents and coefficient denominators form a divisor: D*H^-1 -> "D/H",
//     D*H^-2 -> "D/(H*H)", 1/2*D -> "D/2", 3/2*D*H^-1 -> "3*D/(2*H)", H^-1 -> "1/H";
//   - powers print as repeated products ("B*B", "D/(H*H)") up to exponent 16, beyond that as
//     "B^17" (which Dim::parse does not accept);
//   - a sum with rational coefficients prints over the common denominator: "(S + 1)/2";
//   - opaque atoms print their text, parenthesised where an operator would otherwise bind into
//     them.
// Apart from powers beyond 16, unknowns, min/max atoms and opaque atoms from Dim::opaque(),
// parse(str()) gives back an equal Dim.
#include "sema/Dim.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <set>
#include <utility>

namespace tsr {

namespace {

using i128 = __int128;

constexpr i128 kI64Max = std::numeric_limits<int64_t>::max();
constexpr i128 kI64Min = std::numeric_limits<int64_t>::min();

// Bounds that keep every operation cheap on hostile input. Real extents have a handful of terms;
// beyond these the result becomes an opaque atom (sound, just not normalised).
constexpr size_t kMaxTerms = 256;      // terms in one polynomial
constexpr size_t kMaxWork = 256 * 256; // term products in one multiplication
constexpr size_t kMaxText = 4096;      // characters of an opaque atom text Dim builds
constexpr int kMaxDepth = 256;         // parenthesis nesting accepted by parse()
constexpr int64_t kMaxRepeat = 16;     // largest exponent printed as a repeated product
constexpr int kMaxReparse = 8;         // nesting of read-backs of derived atom texts

constexpr unsigned char kTagBase = 0x10;
constexpr unsigned kFlagUnknown = 1;  // the text mentions an unknown "?N"
constexpr unsigned kFlagOverflow = 2; // int64 arithmetic could not represent the value
constexpr unsigned kFlagDerived = 4;  // built by Dim itself; text re-evaluable by the parser

enum class Kind { Symbol, Unknown, Opaque };

bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isIdentChar(char c) { return isIdentStart(c) || isDigit(c); }

bool isIdentifier(std::string_view s) {
  if (s.empty() || !isIdentStart(s[0]))
    return false;
  return std::all_of(s.begin(), s.end(), isIdentChar);
}

Kind kindOf(const std::string &key) {
  if (key.empty())
    return Kind::Symbol;
  unsigned char last = static_cast<unsigned char>(key.back());
  if (last >= kTagBase && last < kTagBase + 8)
    return Kind::Opaque;
  if (key[0] == '?')
    return Kind::Unknown;
  return Kind::Symbol;
}

unsigned opaqueFlags(const std::string &key) {
  return static_cast<unsigned char>(key.back()) - kTagBase;
}

std::string_view displayOf(const std::string &key) {
  std::string_view v(key);
  if (kindOf(key) == Kind::Opaque)
    v.remove_suffix(1);
  return v;
}

bool mentionsUnknown(std::string_view text) {
  for (size_t i = 0; i + 1 < text.size(); ++i)
    if (text[i] == '?' && isDigit(text[i + 1]))
      return true;
  return false;
}

std::string hex64(uint64_t v) {
  static const char *digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4)
    s[i] = digits[v & 15];
  return s;
}

// The key of an opaque atom. Texts Dim builds itself (`built`) past kMaxText are replaced by a
// fixed-size digest so that repeated composition cannot grow them without bound; such an atom is
// no longer derived. Texts given to Dim::opaque() are kept whole.
std::string opaqueKey(std::string text, unsigned flags, bool built = true) {
  if (built && text.size() > kMaxText) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (unsigned char c : text)
      h = (h ^ c) * 1099511628211ull;
    text = "(large expression #" + hex64(h) + ")";
    flags &= ~kFlagDerived;
  }
  if (mentionsUnknown(text))
    flags |= kFlagUnknown;
  text.push_back(static_cast<char>(kTagBase + (flags & 7)));
  return text;
}

std::string i128ToString(i128 v) {
  if (v == 0)
    return "0";
  bool neg = v < 0;
  unsigned __int128 u =
      neg ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string s;
  while (u) {
    s.push_back(static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  if (neg)
    s.push_back('-');
  std::reverse(s.begin(), s.end());
  return s;
}

i128 absI128(i128 v) { return v < 0 ? -v : v; }

i128 gcdI128(i128 a, i128 b) {
  a = absI128(a);
  b = absI128(b);
  while (b) {
    i128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// Reduces n/d (d != 0) to lowest terms; nullopt if it does not fit int64.
std::optional<Rational> makeRational(i128 n, i128 d) {
  if (d < 0) {
    n = -n;
    d = -d;
  }
  i128 g = gcdI128(n, d);
  if (g > 1) {
    n /= g;
    d /= g;
  }
  if (n < kI64Min || n > kI64Max || d > kI64Max)
    return std::nullopt;
  return Rational{static_cast<int64_t>(n), static_cast<int64_t>(d)};
}

// Operands are int64 and denominators positive, so every intermediate fits in 127 bits.
std::optional<Rational> ratAdd(const Rational &a, const Rational &b) {
  return makeRational(static_cast<i128>(a.num) * b.den + static_cast<i128>(b.num) * a.den,
                      static_cast<i128>(a.den) * b.den);
}
std::optional<Rational> ratMul(const Rational &a, const Rational &b) {
  return makeRational(static_cast<i128>(a.num) * b.num, static_cast<i128>(a.den) * b.den);
}
std::optional<Rational> ratDiv(const Rational &a, const Rational &b) {
  if (b.num == 0)
    return std::nullopt;
  return makeRational(static_cast<i128>(a.num) * b.den, static_cast<i128>(a.den) * b.num);
}
std::optional<Rational> ratNeg(const Rational &a) {
  return makeRational(-static_cast<i128>(a.num), a.den);
}

// True if `text` is balanced and has no operator outside parentheses, so it can stand as one
// factor of a product without parentheses ("D", "min(64, D)", "(S + 1)").
bool isSimpleText(std::string_view text) {
  if (text.empty())
    return false;
  int depth = 0;
  for (char c : text) {
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (--depth < 0)
        return false;
    } else if (depth == 0 && !(isIdentChar(c) || c == '?' || c == '.')) {
      return false;
    }
  }
  return depth == 0;
}

// True if `text` must be parenthesised as a factor or operand. 2^63 as a bare literal would
// combine with a preceding minus into INT64_MIN, so that overflow atom is parenthesised too.
bool needsParens(std::string_view text) {
  return !isSimpleText(text) || text == "9223372036854775808";
}

// True for "1/(X)" where the parenthesis opened after "1/" closes at the end: the reciprocal of
// a non-monomial, which prints as a divisor.
bool isReciprocalText(std::string_view text) {
  if (text.size() < 5 || text.substr(0, 3) != "1/(" || text.back() != ')')
    return false;
  int depth = 0;
  for (size_t i = 2; i < text.size(); ++i) {
    if (text[i] == '(')
      ++depth;
    else if (text[i] == ')' && --depth == 0)
      return i + 1 == text.size();
  }
  return false;
}

std::string joinFactors(const std::vector<std::string> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i)
      s += '*';
    s += v[i];
  }
  return s;
}

void pushPower(std::vector<std::string> &out, const std::string &factor, int64_t k) {
  if (k <= kMaxRepeat) {
    for (int64_t i = 0; i < k; ++i)
      out.push_back(factor);
  } else {
    out.push_back(factor + "^" + std::to_string(k));
  }
}

enum class Fail { None, Overflow, TooBig };

std::atomic<uint64_t> gNextUnknown{1};

// Reading back an atom's text can meet further atoms to read back; past kMaxReparse levels the
// atom is kept as it is, which bounds the stack.
thread_local int tReparseDepth = 0;

} // namespace

Rational Rational::of(int64_t n, int64_t d) {
  if (d == 0)
    return Rational{0, 1};
  // Only INT64_MIN / -1 does not fit; it saturates.
  return makeRational(n, d).value_or(Rational{std::numeric_limits<int64_t>::max(), 1});
}

bool Rational::operator<(const Rational &o) const {
  return static_cast<i128>(num) * o.den < static_cast<i128>(o.num) * den;
}

// Constant term last; otherwise total degree descending, then atoms in name order with the higher
// power first, a monomial that is a prefix of another coming first.
bool Dim::MonoLess::operator()(const Monomial &a, const Monomial &b) const {
  if (a.empty() || b.empty())
    return !a.empty() && b.empty();
  int64_t da = 0, db = 0;
  for (const auto &[k, e] : a)
    da += e;
  for (const auto &[k, e] : b)
    db += e;
  if (da != db)
    return da > db;
  auto ia = a.begin(), ib = b.begin();
  for (; ia != a.end() && ib != b.end(); ++ia, ++ib) {
    if (ia->first != ib->first)
      return ia->first < ib->first;
    if (ia->second != ib->second)
      return ia->second > ib->second;
  }
  return ia == a.end() && ib != b.end();
}

struct DimImpl {
  using Mono = Dim::Monomial;
  using Terms = decltype(Dim::terms_);

  static const Terms &terms(const Dim &d) { return d.terms_; }

  static Dim fromTerms(Terms t) {
    Dim d;
    d.terms_ = std::move(t);
    return d;
  }

  static Dim atom(std::string key, int exp = 1) {
    Dim d;
    d.terms_.emplace(Mono{{std::move(key), exp}}, Rational{1, 1});
    return d;
  }

  static Dim constantOf(const Rational &c) {
    Dim d;
    if (c.num != 0)
      d.terms_.emplace(Mono{}, c);
    return d;
  }

  // Adds c * m into t, dropping the term if it cancels. False on overflow.
  static bool accumulate(Terms &t, const Mono &m, const Rational &c) {
    auto it = t.find(m);
    if (it == t.end()) {
      if (c.num != 0)
        t.emplace(m, c);
      return true;
    }
    auto s = ratAdd(it->second, c);
    if (!s)
      return false;
    if (s->num == 0)
      t.erase(it);
    else
      it->second = *s;
    return true;
  }

  // a * b^sign (sign is +1 or -1); nullopt if an exponent overflows int.
  static std::optional<Mono> monoMul(const Mono &a, const Mono &b, int sign) {
    Mono out = a;
    for (const auto &[k, e] : b) {
      int eb = e;
      if (sign < 0 && __builtin_sub_overflow(0, e, &eb))
        return std::nullopt;
      int &slot = out[k];
      int sum;
      if (__builtin_add_overflow(slot, eb, &sum))
        return std::nullopt;
      if (sum == 0)
        out.erase(k);
      else
        slot = sum;
    }
    return out;
  }

  static Fail add(const Terms &a, const Terms &b, bool negate, Terms &out) {
    out = a;
    for (const auto &[m, c] : b) {
      std::optional<Rational> cc = negate ? ratNeg(c) : std::optional<Rational>(c);
      if (!cc || !accumulate(out, m, *cc))
        return Fail::Overflow;
    }
    return out.size() > kMaxTerms ? Fail::TooBig : Fail::None;
  }

  static Fail mul(const Terms &a, const Terms &b, Terms &out) {
    out.clear();
    if (a.size() * b.size() > kMaxWork)
      return Fail::TooBig;
    for (const auto &[ma, ca] : a) {
      for (const auto &[mb, cb] : b) {
        auto m = monoMul(ma, mb, 1);
        auto c = ratMul(ca, cb);
        if (!m || !c || !accumulate(out, *m, *c))
          return Fail::Overflow;
      }
    }
    return out.size() > kMaxTerms ? Fail::TooBig : Fail::None;
  }

  // Flags an atom built from `d` inherits: unknown and overflow from its atoms, and "derived"
  // only if every opaque atom in it is derived (else its text may not be re-evaluable).
  static unsigned inheritedFlags(const Dim &d) {
    unsigned f = kFlagDerived;
    for (const auto &[m, c] : d.terms_) {
      for (const auto &[k, e] : m) {
        Kind kind = kindOf(k);
        if (kind == Kind::Unknown) {
          f |= kFlagUnknown;
        } else if (kind == Kind::Opaque) {
          unsigned of = opaqueFlags(k);
          f |= of & (kFlagUnknown | kFlagOverflow);
          if (!(of & kFlagDerived))
            f &= ~kFlagDerived;
        }
      }
    }
    return f;
  }

  // The text of `d` as an operand of a binary operator.
  static std::string operandText(const Dim &d) {
    std::string s = d.str();
    return needsParens(s) ? "(" + s + ")" : s;
  }

  // An opaque atom standing for `a op b`, for results the polynomial form cannot hold.
  static Dim failed(Fail why, const Dim &a, const char *op, const Dim &b) {
    std::string sa = operandText(a), sb = operandText(b);
    bool commutative = op[0] == '+' || op[0] == '*';
    if (commutative && sb < sa)
      std::swap(sa, sb);
    unsigned flags = combinedFlags(a, b);
    if (why == Fail::Overflow)
      flags |= kFlagOverflow;
    std::string sep = op[0] == '*' || op[0] == '/' ? std::string(op) : " " + std::string(op) + " ";
    return atom(opaqueKey(sa + sep + sb, flags));
  }

  static unsigned combinedFlags(const Dim &a, const Dim &b) {
    unsigned fa = inheritedFlags(a), fb = inheritedFlags(b);
    return (fa & fb & kFlagDerived) | ((fa | fb) & (kFlagUnknown | kFlagOverflow));
  }

  // p = c * m * prim, where prim has coprime integer coefficients, a positive leading coefficient
  // and no atom common to all its terms (all exponents >= 0). p must be nonzero.
  struct Content {
    Rational c;
    Mono m;
    Terms prim;
  };
  static std::optional<Content> content(const Terms &p) {
    Content out;
    std::set<std::string> keys;
    for (const auto &[m, c] : p)
      for (const auto &[k, e] : m)
        keys.insert(k);
    for (const auto &k : keys) {
      int lo = 0;
      bool first = true;
      for (const auto &[m, c] : p) {
        auto it = m.find(k);
        int e = it == m.end() ? 0 : it->second;
        lo = first ? e : std::min(lo, e);
        first = false;
      }
      if (lo != 0)
        out.m[k] = lo;
    }
    // The content takes the sign of the term that leads once the monomial is divided out.
    std::map<Mono, int, Dim::MonoLess> leadSign;
    for (const auto &[m, c] : p) {
      auto nm = monoMul(m, out.m, -1);
      if (!nm)
        return std::nullopt;
      leadSign.emplace(std::move(*nm), c.num < 0 ? -1 : 1);
    }
    i128 g = 0, l = 1;
    for (const auto &[m, c] : p) {
      g = gcdI128(g, c.num);
      l = l / gcdI128(l, c.den) * c.den;
      if (l > kI64Max)
        return std::nullopt;
    }
    auto c = makeRational(leadSign.begin()->second * g, l);
    if (!c || c->num == 0)
      return std::nullopt;
    out.c = *c;
    for (const auto &[m, coef] : p) {
      auto nm = monoMul(m, out.m, -1);
      auto nc = ratDiv(coef, out.c);
      if (!nm || !nc)
        return std::nullopt;
      out.prim.emplace(std::move(*nm), *nc);
    }
    return out;
  }

  // base^e by repeated squaring; Dim's operators turn overflow into opaque atoms.
  static Dim power(const Dim &base, int64_t e) {
    if (e == 0)
      return Dim::constant(1);
    uint64_t n = e < 0 ? 0 - static_cast<uint64_t>(e) : static_cast<uint64_t>(e);
    Dim result = Dim::constant(1), sq = base;
    while (true) {
      if (n & 1)
        result = result * sq;
      n >>= 1;
      if (!n)
        break;
      sq = sq * sq;
    }
    if (e > 0)
      return result;
    if (auto inv = Dim::constant(1).divide(result))
      return *inv;
    // A substituted zero under a division: no value.
    return atom(
        opaqueKey("1/(" + result.str() + ")", kFlagOverflow | combinedFlags(result, result)));
  }

  static std::optional<Dim> parse(std::string_view text, bool internal, std::string *error,
                                  size_t *errorOffset);

  // Reads back the text of a derived atom (see DimParser's internal mode); nullopt if it does not
  // parse or read-backs are nested too deeply.
  static std::optional<Dim> reparse(std::string_view text) {
    if (tReparseDepth >= kMaxReparse)
      return std::nullopt;
    ++tReparseDepth;
    auto d = parse(text, true, nullptr, nullptr);
    --tReparseDepth;
    return d;
  }

  static bool isNegativeReciprocal(const std::string &key, int e) {
    return e < 0 && kindOf(key) == Kind::Opaque && (opaqueFlags(key) & kFlagDerived) &&
           isReciprocalText(displayOf(key));
  }

  // (1/(X))^-k is X^k: dividing by a quotient atom gives back the polynomial it came from, so
  // that 1/(1/(H + 1)) is H + 1 and prints as text that parses back to it.
  static Dim expandReciprocals(const Dim &d) {
    bool any = false;
    for (const auto &[m, c] : d.terms_)
      for (const auto &[k, e] : m)
        any = any || isNegativeReciprocal(k, e);
    if (!any)
      return d;
    Dim result;
    for (const auto &[m, c] : d.terms_) {
      Dim t = constantOf(c);
      Mono rest;
      for (const auto &[k, e] : m) {
        if (isNegativeReciprocal(k, e)) {
          if (auto x = reparse(displayOf(k).substr(2))) {
            t = t * power(*x, -static_cast<int64_t>(e));
            continue;
          }
        }
        rest.emplace(k, e);
      }
      Terms rt;
      rt.emplace(std::move(rest), Rational{1, 1});
      result = result + t * fromTerms(std::move(rt));
    }
    return result;
  }
};

// Recursive descent over dim strings. Recursion happens only at '(' (and at min/max calls in
// internal mode), bounded by kMaxDepth; chains of operators and unary signs are loops.
//
// Internal mode reads back the texts of derived opaque atoms: it also accepts unknowns "?N",
// min(a, b), max(a, b) and integer powers "X^k".
class DimParser {
public:
  DimParser(std::string_view s, bool internal) : s_(s), internal_(internal) {}

  std::optional<Dim> run(std::string *error, size_t *errorOffset) {
    std::optional<Dim> result;
    skipWs();
    if (atEnd()) {
      fail(pos_, "empty dimension");
    } else {
      result = expr();
      skipWs();
      if (result && !atEnd()) {
        if (peek() == ')')
          fail(pos_, "unmatched `)`");
        else
          failAfterOperand("expected an operator");
        result.reset();
      }
    }
    if (failed_) {
      if (error)
        *error = message_;
      if (errorOffset)
        *errorOffset = errorPos_;
      return std::nullopt;
    }
    return result;
  }

private:
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool internal_;
  bool failed_ = false;
  std::string message_;
  size_t errorPos_ = 0;
  std::string lastDigits_; // the last integer literal read, without separators or leading zeros

  bool atEnd() const { return pos_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  void skipWs() {
    while (!atEnd() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
      ++pos_;
  }
  std::nullopt_t fail(size_t at, std::string msg) {
    if (!failed_) {
      failed_ = true;
      message_ = std::move(msg);
      errorPos_ = at;
    }
    return std::nullopt;
  }

  std::optional<Dim> expr() {
    auto lhs = term();
    while (lhs) {
      skipWs();
      char c = peek();
      if (c != '+' && c != '-')
        break;
      ++pos_;
      skipWs();
      // "D - 9223372036854775808" adds INT64_MIN, which a positive literal cannot hold.
      bool addNegated = c == '-' && atMinMagnitudeLiteral();
      auto rhs = term(addNegated);
      if (!rhs)
        return std::nullopt;
      lhs = c == '+' || addNegated ? *lhs + *rhs : *lhs - *rhs;
    }
    return lhs;
  }

  std::optional<Dim> term(bool negateFirst = false) {
    auto lhs = unary(negateFirst);
    while (lhs) {
      skipWs();
      char c = peek();
      if (c == '*') {
        if (peek(1) == '*')
          return fail(pos_, "`**` is not allowed in a dimension");
        ++pos_;
        auto rhs = unary();
        if (!rhs)
          return std::nullopt;
        lhs = *lhs * *rhs;
      } else if (c == '/') {
        pos_ += peek(1) == '/' ? 2 : 1;
        skipWs();
        size_t at = pos_;
        auto rhs = unary();
        if (!rhs)
          return std::nullopt;
        auto q = lhs->divide(*rhs);
        if (!q)
          return fail(at, "division by zero");
        lhs = std::move(q);
      } else {
        break;
      }
    }
    return lhs;
  }

  // True at the literal 9223372036854775808 (2^63) not followed by a power.
  bool atMinMagnitudeLiteral() const {
    std::string digits;
    size_t p = pos_;
    while (p < s_.size() && (isDigit(s_[p]) || s_[p] == '_')) {
      if (s_[p] != '_')
        digits.push_back(s_[p]);
      ++p;
    }
    size_t nz = digits.find_first_not_of('0');
    if (nz == std::string::npos || digits.substr(nz) != "9223372036854775808")
      return false;
    while (p < s_.size() && s_[p] == ' ')
      ++p;
    return !(internal_ && p < s_.size() && s_[p] == '^');
  }

  std::optional<Dim> unary(bool negateFirst = false) {
    bool negate = negateFirst;
    while (true) {
      skipWs();
      if (peek() == '-')
        negate = !negate;
      else if (peek() != '+')
        break;
      ++pos_;
    }
    std::optional<Dim> v;
    if (negate && isDigit(peek())) {
      // -9223372036854775808 is an int64 although its magnitude is not.
      v = number();
      skipWs();
      if (v && lastDigits_ == "9223372036854775808" && !(internal_ && peek() == '^'))
        return Dim::constant(std::numeric_limits<int64_t>::min());
    } else {
      v = primary();
    }
    v = postfix(std::move(v));
    if (v && negate)
      v = Dim() - *v;
    return v;
  }

  std::optional<Dim> postfix(std::optional<Dim> v) {
    if (!v || !internal_)
      return v;
    skipWs();
    if (peek() != '^')
      return v;
    ++pos_;
    skipWs();
    bool neg = peek() == '-';
    if (neg)
      ++pos_;
    size_t start = pos_;
    int64_t e = 0;
    while (isDigit(peek())) {
      e = e * 10 + (peek() - '0');
      if (e > std::numeric_limits<int>::max())
        return fail(start, "exponent out of range");
      ++pos_;
    }
    if (pos_ == start)
      return fail(pos_, "expected an exponent");
    return DimImpl::power(*v, neg ? -e : e);
  }

  std::optional<Dim> primary() {
    skipWs();
    if (atEnd())
      return fail(pos_, "expected a number, a name or `(`");
    char c = peek();
    size_t start = pos_;
    if (isDigit(c))
      return number();
    if (isIdentStart(c)) {
      while (isIdentChar(peek()))
        ++pos_;
      std::string name(s_.substr(start, pos_ - start));
      if (internal_ && (name == "min" || name == "max")) {
        skipWs();
        if (peek() == '(')
          return call(name == "min");
      }
      return Dim::symbol(name);
    }
    if (c == '?' && internal_ && isDigit(peek(1))) {
      ++pos_;
      while (isDigit(peek()))
        ++pos_;
      return DimImpl::atom(std::string(s_.substr(start, pos_ - start)));
    }
    if (c == '(') {
      if (++depth_ > kMaxDepth)
        return fail(pos_, "dimension nested more than 256 parentheses deep");
      ++pos_;
      auto v = expr();
      if (!v)
        return std::nullopt;
      skipWs();
      if (peek() != ')')
        return atEnd() ? fail(pos_, "expected `)`")
                       : failAfterOperand("expected an operator or `)`");
      ++pos_;
      --depth_;
      return v;
    }
    if (c == ')' || c == '*' || c == '/' || c == ',')
      return fail(pos_, "expected a number, a name or `(`");
    return failUnexpected();
  }

  std::nullopt_t failUnexpected() {
    char c = peek();
    if (c > ' ' && c < 0x7f)
      return fail(pos_, std::string("unexpected character `") + c + "`");
    return fail(pos_, "unexpected character");
  }

  // Something follows a complete operand that cannot continue the expression.
  std::nullopt_t failAfterOperand(const char *expected) {
    char c = peek();
    if (isIdentChar(c) || c == '(' || c == '?' || c == '^' || c == ',' || c == '*' || c == '/')
      return fail(pos_, expected);
    return failUnexpected();
  }

  // Decimal integer with Python's '_' separators (only between digits).
  std::optional<Dim> number() {
    size_t start = pos_;
    std::string digits;
    while (true) {
      if (isDigit(peek())) {
        digits.push_back(peek());
        ++pos_;
      } else if (peek() == '_' && isDigit(peek(1)) && !digits.empty()) {
        ++pos_;
      } else {
        break;
      }
    }
    if (isIdentChar(peek()))
      return fail(start, "invalid integer literal");
    size_t nz = digits.find_first_not_of('0');
    digits = nz == std::string::npos ? "0" : digits.substr(nz);
    lastDigits_ = digits;
    int64_t v = 0;
    for (char d : digits) {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, d - '0', &v))
        return DimImpl::atom(opaqueKey(digits, kFlagOverflow | kFlagDerived));
    }
    return Dim::constant(v);
  }

  std::optional<Dim> call(bool isMin) {
    if (++depth_ > kMaxDepth)
      return fail(pos_, "dimension nested more than 256 parentheses deep");
    ++pos_; // '('
    auto a = expr();
    if (!a)
      return std::nullopt;
    skipWs();
    if (peek() != ',')
      return fail(pos_, "expected `,`");
    ++pos_;
    auto b = expr();
    if (!b)
      return std::nullopt;
    skipWs();
    if (peek() != ')')
      return fail(pos_, "expected `)`");
    ++pos_;
    --depth_;
    return isMin ? Dim::min(*a, *b) : Dim::max(*a, *b);
  }
};

std::optional<Dim> DimImpl::parse(std::string_view text, bool internal, std::string *error,
                                  size_t *errorOffset) {
  return DimParser(text, internal).run(error, errorOffset);
}

Dim::Dim() = default;

Dim Dim::constant(int64_t value) { return DimImpl::constantOf(Rational{value, 1}); }

Dim Dim::symbol(std::string_view name) {
  if (!isIdentifier(name))
    return opaque(name);
  return DimImpl::atom(std::string(name));
}

Dim Dim::opaque(std::string_view text) {
  return DimImpl::atom(opaqueKey(std::string(text), 0, false));
}

Dim Dim::unknown() {
  return DimImpl::atom("?" + std::to_string(gNextUnknown.fetch_add(1, std::memory_order_relaxed)));
}

std::optional<Dim> Dim::parse(std::string_view text, std::string *error, size_t *errorOffset) {
  return DimImpl::parse(text, false, error, errorOffset);
}

Dim Dim::operator+(const Dim &o) const {
  DimImpl::Terms out;
  Fail f = DimImpl::add(terms_, o.terms_, false, out);
  return f == Fail::None ? DimImpl::fromTerms(std::move(out)) : DimImpl::failed(f, *this, "+", o);
}

Dim Dim::operator-(const Dim &o) const {
  DimImpl::Terms out;
  Fail f = DimImpl::add(terms_, o.terms_, true, out);
  return f == Fail::None ? DimImpl::fromTerms(std::move(out)) : DimImpl::failed(f, *this, "-", o);
}

Dim Dim::operator*(const Dim &o) const {
  DimImpl::Terms out;
  Fail f = DimImpl::mul(terms_, o.terms_, out);
  return f == Fail::None ? DimImpl::fromTerms(std::move(out)) : DimImpl::failed(f, *this, "*", o);
}

// By a monomial: exact, term by term. By a non-monomial b: both sides are split into content and
// primitive part (see DimImpl::content); equal primitive parts cancel ((B*S + B)/(S + 1) = B),
// otherwise the quotient of the primitive parts becomes one opaque atom "1/(b')" or "(a')/(b')"
// multiplied by the quotient of the contents, so D/(H + 1) * 2 == (2*D)/(H + 1).
std::optional<Dim> Dim::divide(const Dim &o) const {
  if (o.terms_.empty())
    return std::nullopt;
  if (terms_.empty())
    return Dim();
  if (o.terms_.size() == 1) {
    const auto &[dm, dc] = *o.terms_.begin();
    DimImpl::Terms out;
    for (const auto &[m, c] : terms_) {
      auto nm = DimImpl::monoMul(m, dm, -1);
      auto nc = ratDiv(c, dc);
      if (!nm || !nc)
        return DimImpl::failed(Fail::Overflow, *this, "/", o);
      out.emplace(std::move(*nm), *nc);
    }
    return DimImpl::expandReciprocals(DimImpl::fromTerms(std::move(out)));
  }
  auto ca = DimImpl::content(terms_);
  auto cb = DimImpl::content(o.terms_);
  if (!ca || !cb)
    return DimImpl::failed(Fail::Overflow, *this, "/", o);
  auto coef = ratDiv(ca->c, cb->c);
  auto mono = DimImpl::monoMul(ca->m, cb->m, -1);
  if (!coef || !mono)
    return DimImpl::failed(Fail::Overflow, *this, "/", o);
  DimImpl::Terms scale;
  scale.emplace(std::move(*mono), *coef);
  Dim factor = DimImpl::fromTerms(std::move(scale));
  if (ca->prim == cb->prim)
    return DimImpl::expandReciprocals(factor);
  Dim num = DimImpl::fromTerms(ca->prim), den = DimImpl::fromTerms(cb->prim);
  std::string text =
      num.isOne() ? "1/(" + den.str() + ")" : "(" + num.str() + ")/(" + den.str() + ")";
  return DimImpl::expandReciprocals(
      factor * DimImpl::atom(opaqueKey(std::move(text), DimImpl::combinedFlags(num, den))));
}

namespace {

// min or max: folded when the operands differ by a constant (in particular when both are
// constants or equal), otherwise an opaque atom with the operands in a canonical order.
Dim minMax(const Dim &a, const Dim &b, bool isMin) {
  if (a == b)
    return a;
  Dim diff = a - b;
  if (diff.isConstant() && !DimImpl::terms(diff).empty()) {
    bool aLess = DimImpl::terms(diff).begin()->second.num < 0;
    return aLess == isMin ? a : b;
  }
  // Constants first (by value), then by text, then by the total order.
  auto before = [](const Dim &x, const Dim &y) {
    if (x.isConstant() != y.isConstant())
      return x.isConstant();
    if (x.isConstant())
      return x < y;
    std::string sx = x.str(), sy = y.str();
    if (sx != sy)
      return sx < sy;
    return x < y;
  };
  const Dim &first = before(b, a) ? b : a;
  const Dim &second = &first == &a ? b : a;
  std::string text = std::string(isMin ? "min(" : "max(") + first.str() + ", " + second.str() + ")";
  return DimImpl::atom(opaqueKey(std::move(text), DimImpl::combinedFlags(a, b)));
}

} // namespace

Dim Dim::min(const Dim &a, const Dim &b) { return minMax(a, b, true); }
Dim Dim::max(const Dim &a, const Dim &b) { return minMax(a, b, false); }

bool Dim::isConstant() const {
  return terms_.empty() || (terms_.size() == 1 && terms_.begin()->first.empty());
}

std::optional<int64_t> Dim::constantValue() const {
  if (terms_.empty())
    return 0;
  if (terms_.size() != 1)
    return std::nullopt;
  const auto &[m, c] = *terms_.begin();
  if (!m.empty() || !c.isInteger())
    return std::nullopt;
  return c.num;
}

bool Dim::isUnknown() const {
  if (terms_.size() != 1)
    return false;
  const auto &[m, c] = *terms_.begin();
  return c == Rational{1, 1} && m.size() == 1 && m.begin()->second == 1 &&
         kindOf(m.begin()->first) == Kind::Unknown;
}

bool Dim::hasUnknown() const { return DimImpl::inheritedFlags(*this) & kFlagUnknown; }

bool Dim::overflowed() const { return DimImpl::inheritedFlags(*this) & kFlagOverflow; }

bool Dim::isSymbol() const {
  if (terms_.size() != 1)
    return false;
  const auto &[m, c] = *terms_.begin();
  return c == Rational{1, 1} && m.size() == 1 && m.begin()->second == 1 &&
         kindOf(m.begin()->first) == Kind::Symbol;
}

std::vector<std::string> Dim::symbols() const {
  std::set<std::string> names;
  for (const auto &[m, c] : terms_)
    for (const auto &[k, e] : m)
      if (kindOf(k) == Kind::Symbol)
        names.insert(k);
  return {names.begin(), names.end()};
}

// Symbols are replaced simultaneously (an env value is not substituted again) and each term is
// rebuilt with Dim's operators, so the result is normalised. Unknowns and opaque atoms are kept,
// including the ones Dim built (min(64, N) stays as it is); callers rely on that to tell
// polynomial Dims from ones with opaque parts.
Dim Dim::substitute(const std::map<std::string, Dim> &env) const {
  if (env.empty())
    return *this;
  Dim result;
  for (const auto &[m, c] : terms_) {
    Dim t = DimImpl::constantOf(c);
    for (const auto &[key, e] : m) {
      auto it = kindOf(key) == Kind::Symbol ? env.find(key) : env.end();
      t = t * (it != env.end() ? DimImpl::power(it->second, e) : DimImpl::atom(key, e));
    }
    result = result + t;
  }
  return result;
}

bool Dim::operator==(const Dim &o) const { return terms_ == o.terms_; }

bool Dim::operator<(const Dim &o) const {
  MonoLess less;
  auto a = terms_.begin(), b = o.terms_.begin();
  for (; a != terms_.end() && b != o.terms_.end(); ++a, ++b) {
    if (less(a->first, b->first))
      return true;
    if (less(b->first, a->first))
      return false;
    if (a->second != b->second)
      return a->second < b->second;
  }
  return a == terms_.end() && b != o.terms_.end();
}

namespace {

// One term without its sign: |num|/den * monomial, e.g. "3*D/(2*H)". Quotient atoms "1/(X)"
// (not overflow atoms of that text) divide separately, "D/(2*H)/(H + 1)", so that the text
// parses back to the same atoms.
template <class Mono> std::string renderTerm(const Mono &m, i128 absNum, i128 den) {
  std::vector<std::string> num, dens, recips;
  if (absNum != 1)
    num.push_back(i128ToString(absNum));
  if (den != 1)
    dens.push_back(i128ToString(den));
  for (const auto &[key, e] : m) {
    std::string_view text = displayOf(key);
    int64_t k = e;
    std::string factor;
    bool opaque = kindOf(key) == Kind::Opaque;
    if (opaque && (opaqueFlags(key) & (kFlagDerived | kFlagOverflow)) == kFlagDerived &&
        isReciprocalText(text)) {
      factor = std::string(text.substr(2));
      if (k > 0)
        pushPower(recips, factor, k);
      else
        pushPower(num, factor, -k);
      continue;
    } else if (opaque && needsParens(text)) {
      factor = "(" + std::string(text) + ")";
    } else {
      factor = std::string(text);
    }
    if (k > 0)
      pushPower(num, factor, k);
    else
      pushPower(dens, factor, -k);
  }
  std::string s = num.empty() ? "1" : joinFactors(num);
  if (dens.size() == 1)
    s += "/" + dens[0];
  else if (dens.size() > 1)
    s += "/(" + joinFactors(dens) + ")";
  for (const auto &r : recips)
    s += "/" + r;
  return s;
}

// The terms joined with their signs. With scale > 1 (a common multiple of the denominators) each
// coefficient is multiplied by it, so all print as integers; `negate` flips every sign.
template <class Terms> std::string renderSum(const Terms &terms, i128 scale, bool negate) {
  std::string s;
  bool first = true;
  for (const auto &[m, c] : terms) {
    i128 num = scale == 1 ? c.num : static_cast<i128>(c.num) * (scale / c.den);
    i128 den = scale == 1 ? c.den : 1;
    if (negate)
      num = -num;
    if (first)
      s += num < 0 ? "-" : "";
    else
      s += num < 0 ? " - " : " + ";
    s += renderTerm(m, absI128(num), den);
    first = false;
  }
  return s;
}

} // namespace

std::string Dim::str() const {
  if (terms_.empty())
    return "0";
  if (terms_.size() == 1) {
    const auto &[m, c] = *terms_.begin();
    if (c == Rational{1, 1} && m.size() == 1 && m.begin()->second == 1 &&
        kindOf(m.begin()->first) == Kind::Opaque)
      return std::string(displayOf(m.begin()->first));
    return renderSum(terms_, 1, false);
  }
  // A sum with fractional coefficients prints over their common denominator: "(S + 1)/2".
  i128 l = 1;
  for (const auto &[m, c] : terms_) {
    l = l / gcdI128(l, c.den) * c.den;
    if (l > kI64Max)
      return renderSum(terms_, 1, false);
  }
  if (l == 1)
    return renderSum(terms_, 1, false);
  for (const auto &[m, c] : terms_) {
    i128 scaled = static_cast<i128>(c.num) * (l / c.den);
    if (scaled > kI64Max || scaled < -kI64Max)
      return renderSum(terms_, 1, false); // keep every printed number a parseable int64
  }
  bool negative = terms_.begin()->second.num < 0;
  return (negative ? "-(" : "(") + renderSum(terms_, l, negative) + ")/" + i128ToString(l);
}

} // namespace tsr
