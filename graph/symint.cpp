#include "graph/symint.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace ff {

namespace {

// ---- the intern tables ------------------------------------------------------------------------

// An atom of a monomial. NB: FloorDiv and Mod keep their operands as expressions; they exist only
// where simplification could not remove them.
struct Atom {
  enum class Kind : uint8_t { Symbol,
                              FloorDiv,
                              Mod };
  Kind kind = Kind::Symbol;
  SymbolId symbol = -1;
  SymExprId a = 0, b = 0;
  bool unbacked = false;  // Symbol: a size only the run knows (>= 0, never guarded)
};
using AtomId = uint32_t;

// atom^power factors, sorted by atom id.
using Monomial = std::vector<std::pair<AtomId, uint32_t>>;

struct Term {
  int64_t coeff = 0;
  Monomial mono;
};

// constant + sum of coeff * monomial, terms sorted by monomial, no zero coefficients.
struct Poly {
  int64_t constant = 0;
  std::vector<Term> terms;
};

class Interner {
 public:
  Interner() { polys_.emplace_back(); }  // id 0: "no expression"

  SymExprId intern(Poly p) {
    std::vector<int64_t> key{p.constant};
    for (const Term& t : p.terms) {
      key.push_back(t.coeff);
      key.push_back(static_cast<int64_t>(t.mono.size()));
      for (auto [a, k] : t.mono) {
        key.push_back(a);
        key.push_back(k);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, added] = poly_ids_.emplace(std::move(key), static_cast<SymExprId>(polys_.size()));
    if (added) polys_.push_back(std::move(p));
    return it->second;
  }
  AtomId intern(const Atom& a) {
    std::vector<int64_t> key{static_cast<int64_t>(a.kind), a.symbol, a.a, a.b, a.unbacked ? 1 : 0};
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, added] = atom_ids_.emplace(std::move(key), static_cast<AtomId>(atoms_.size()));
    if (added) atoms_.push_back(a);
    return it->second;
  }
  // NB: deques keep references stable while other threads intern.
  const Poly& poly(SymExprId e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (e == 0 || e >= polys_.size()) throw std::logic_error("symint: bad expression id");
    return polys_[e];
  }
  const Atom& atom(AtomId a) {
    std::lock_guard<std::mutex> lock(mu_);
    return atoms_.at(a);
  }

 private:
  std::mutex mu_;
  std::deque<Poly> polys_;
  std::deque<Atom> atoms_;
  std::map<std::vector<int64_t>, SymExprId> poly_ids_;
  std::map<std::vector<int64_t>, AtomId> atom_ids_;
};

Interner& interner() {
  static Interner* table = new Interner();  // NB: never destroyed: SymInts may outlive statics
  return *table;
}

const Poly& poly_of(SymExprId e) { return interner().poly(e); }

Poly constant_poly(int64_t c) {
  Poly p;
  p.constant = c;
  return p;
}

Poly as_poly(const SymInt& x) { return x.is_symbolic() ? poly_of(x.expr()) : constant_poly(x.hint()); }

int64_t checked(__int128 v) {
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min())
    throw std::overflow_error("symint: an expression's coefficient overflows int64");
  return static_cast<int64_t>(v);
}

Poly add(const Poly& a, const Poly& b, int64_t b_sign) {
  Poly r;
  r.constant = checked(static_cast<__int128>(a.constant) + static_cast<__int128>(b_sign) * b.constant);
  size_t i = 0, j = 0;
  auto push = [&](int64_t c, const Monomial& m) {
    if (c != 0) r.terms.push_back({c, m});
  };
  while (i < a.terms.size() || j < b.terms.size()) {
    if (j == b.terms.size() || (i < a.terms.size() && a.terms[i].mono < b.terms[j].mono)) {
      push(a.terms[i].coeff, a.terms[i].mono);
      ++i;
    } else if (i == a.terms.size() || b.terms[j].mono < a.terms[i].mono) {
      push(checked(static_cast<__int128>(b_sign) * b.terms[j].coeff), b.terms[j].mono);
      ++j;
    } else {
      push(checked(static_cast<__int128>(a.terms[i].coeff) + static_cast<__int128>(b_sign) * b.terms[j].coeff),
           a.terms[i].mono);
      ++i;
      ++j;
    }
  }
  return r;
}

Monomial mono_mul(const Monomial& a, const Monomial& b) {
  Monomial r;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].first < b[j].first)) r.push_back(a[i++]);
    else if (i == a.size() || b[j].first < a[i].first) r.push_back(b[j++]);
    else {
      r.emplace_back(a[i].first, a[i].second + b[j].second);
      ++i;
      ++j;
    }
  }
  return r;
}

Poly scale(const Poly& p, int64_t c, const Monomial& m) {
  Poly r;
  if (c == 0) return r;
  if (m.empty()) r.constant = checked(static_cast<__int128>(p.constant) * c);
  else if (p.constant != 0) r.terms.push_back({checked(static_cast<__int128>(p.constant) * c), m});
  for (const Term& t : p.terms) r.terms.push_back({checked(static_cast<__int128>(t.coeff) * c), mono_mul(t.mono, m)});
  std::sort(r.terms.begin(), r.terms.end(), [](const Term& x, const Term& y) { return x.mono < y.mono; });
  return r;
}

Poly mul(const Poly& a, const Poly& b) {
  Poly r = scale(a, b.constant, {});
  for (const Term& t : b.terms) r = add(r, scale(a, t.coeff, t.mono), 1);
  return r;
}

int64_t floordiv_int(int64_t a, int64_t b) {
  if (b == 0) throw std::domain_error("symint: division by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t mod_int(int64_t a, int64_t b) { return a - floordiv_int(a, b) * b; }

Poly atom_poly(const Atom& a) {
  Poly p;
  p.terms.push_back({1, {{interner().intern(a), 1}}});
  return p;
}

SymExprId intern_poly(const Poly& p) { return interner().intern(p); }

// p == q * k for a single-term q (no constant) and an integer k: k, else nothing.
bool divides_exactly(const Poly& p, const Poly& q, Poly* quotient) {
  if (q.constant != 0 || q.terms.size() != 1 || p.constant != 0) return false;
  const Term& d = q.terms[0];
  Poly r;
  for (const Term& t : p.terms) {
    if (t.coeff % d.coeff != 0) return false;
    Monomial m;
    size_t j = 0;
    for (auto [atom, k] : t.mono) {
      if (j < d.mono.size() && d.mono[j].first == atom) {
        if (k < d.mono[j].second) return false;
        if (k > d.mono[j].second) m.emplace_back(atom, k - d.mono[j].second);
        ++j;
      } else {
        m.emplace_back(atom, k);
      }
    }
    if (j != d.mono.size()) return false;
    if (m.empty()) r.constant += t.coeff / d.coeff;
    else r.terms.push_back({t.coeff / d.coeff, m});
  }
  std::sort(r.terms.begin(), r.terms.end(), [](const Term& x, const Term& y) { return x.mono < y.mono; });
  *quotient = r;
  return true;
}

Poly floordiv(const Poly& a, const Poly& b) {
  Poly q;
  if (b.terms.empty()) {
    int64_t c = b.constant;
    if (c == 0) throw std::domain_error("symint: division by zero");
    if (a.terms.empty()) return constant_poly(floordiv_int(a.constant, c));
    if (c == 1) return a;
    if (c > 0) {
      // (c*D + R) // c == D + R // c for integer D: terms with coefficients divisible by c leave.
      Poly out = constant_poly(floordiv_int(a.constant, c));
      Poly rest = constant_poly(mod_int(a.constant, c));
      for (const Term& t : a.terms) {
        if (t.coeff % c == 0) out.terms.push_back({t.coeff / c, t.mono});
        else rest.terms.push_back(t);
      }
      if (rest.terms.empty()) return out;
      Atom at{Atom::Kind::FloorDiv, -1, intern_poly(rest), intern_poly(b)};
      return add(out, atom_poly(at), 1);
    }
  } else if (divides_exactly(a, b, &q)) {
    return q;
  }
  return atom_poly(Atom{Atom::Kind::FloorDiv, -1, intern_poly(a), intern_poly(b)});
}

Poly mod(const Poly& a, const Poly& b) {
  Poly q;
  if (b.terms.empty()) {
    int64_t c = b.constant;
    if (c == 0) throw std::domain_error("symint: modulo by zero");
    if (a.terms.empty()) return constant_poly(mod_int(a.constant, c));
    if (c == 1 || c == -1) return constant_poly(0);
    if (c > 0) {
      Poly rest = constant_poly(mod_int(a.constant, c));
      for (const Term& t : a.terms)
        if (t.coeff % c != 0) rest.terms.push_back(t);
      if (rest.terms.empty()) return rest;
      return atom_poly(Atom{Atom::Kind::Mod, -1, intern_poly(rest), intern_poly(b)});
    }
  } else if (divides_exactly(a, b, &q)) {
    return constant_poly(0);
  }
  return atom_poly(Atom{Atom::Kind::Mod, -1, intern_poly(a), intern_poly(b)});
}

// ---- bounds -----------------------------------------------------------------------------------

// Bounds that hold for every binding of symbols to sizes >= 2; nullopt-like flags mean unbounded.
struct Range {
  bool has_lo = false, has_hi = false;
  __int128 lo = 0, hi = 0;
};

constexpr __int128 kSat = static_cast<__int128>(1) << 100;
__int128 sat(__int128 v) { return v > kSat ? kSat : v < -kSat ? -kSat
                                                              : v; }

Range range_of(SymExprId e);

thread_local bool g_size_oblivious = false;  // SizeObliviousScope

bool treat_as_unbacked(const Atom& a) { return a.unbacked && !g_size_oblivious; }

// a * b saturated at +-kSat without overflowing (|a|, |b| <= kSat).
__int128 sat_mul(__int128 a, __int128 b) {
  if (a == 0 || b == 0) return 0;
  __int128 ma = a < 0 ? -a : a, mb = b < 0 ? -b : b;
  if (ma > kSat / mb) return (a < 0) != (b < 0) ? -kSat : kSat;
  return a * b;
}

Range atom_range(const Atom& a) {
  Range r;
  switch (a.kind) {
    case Atom::Kind::Symbol:
      r.has_lo = true;
      r.lo = treat_as_unbacked(a) ? 0 : 2;
      return r;
    case Atom::Kind::FloorDiv: {
      Range num = range_of(a.a), den = range_of(a.b);
      if (num.has_lo && num.lo >= 0 && den.has_lo && den.lo >= 1) r.has_lo = true;
      return r;
    }
    case Atom::Kind::Mod: {
      Range den = range_of(a.b);
      if (den.has_lo && den.lo >= 1) r.has_lo = true;  // Python's modulo by a positive divisor
      return r;
    }
  }
  return r;
}

Range poly_range(const Poly& p) {
  Range r;
  r.has_lo = r.has_hi = true;
  r.lo = r.hi = p.constant;
  for (const Term& t : p.terms) {
    // Every atom here is >= 0 when it has a lower bound, so the monomial is >= the product of
    // the atoms' lower bounds and unbounded above.
    bool known = true;
    __int128 low = 1;
    for (auto [atom, k] : t.mono) {
      Range ar = atom_range(interner().atom(atom));
      if (!ar.has_lo || ar.lo < 0) {
        known = false;
        break;
      }
      for (uint32_t i = 0; i < k; ++i) low = sat(low * ar.lo);
    }
    if (!known) return Range{};
    if (t.coeff > 0) {
      r.lo = sat(r.lo + t.coeff * low);
      r.has_hi = false;
    } else {
      r.hi = sat(r.hi + t.coeff * low);
      r.has_lo = false;
    }
  }
  return r;
}

Range range_of(SymExprId e) { return poly_range(poly_of(e)); }

// The range of a polynomial over symbols only, written over t = s - lo >= 0 (lo: 2, or 0 for an
// unbacked symbol): where every non-constant coefficient of the expansion has one sign, the
// constant (its value with every symbol at its least) bounds it. Settles what the monomials' own
// bounds do not: s1*s2 - s2 = 2 + 2*t1 + t2 + t1*t2.
Range shifted_range(const Poly& p) {
  std::map<Monomial, __int128> out{{Monomial{}, p.constant}};
  for (const Term& t : p.terms) {
    std::map<Monomial, __int128> acc{{Monomial{}, t.coeff}};
    for (auto [atom, k] : t.mono) {
      const Atom& a = interner().atom(atom);
      if (a.kind != Atom::Kind::Symbol || k > 16) return Range{};
      const bool zero = treat_as_unbacked(a);  // least value 0, else 2
      // (lo + t)^k = sum over j of C(k, j) * lo^(k - j) * t^j
      std::map<Monomial, __int128> next;
      __int128 binom = 1;
      for (uint32_t j = 0; j <= k; ++j) {
        __int128 c = zero ? (j == k ? binom : 0) : binom << (k - j);
        for (const auto& [m, v] : acc) {
          Monomial mm = m;
          if (j) mm.push_back({atom, j});  // NB: a term's atoms come in ascending order: mm stays sorted
          next[mm] = sat(next[mm] + sat_mul(v, c));
        }
        binom = binom * (k - j) / (j + 1);
      }
      acc = std::move(next);
    }
    for (const auto& [m, v] : acc) out[m] = sat(out[m] + v);
  }
  bool any_pos = false, any_neg = false;
  for (const auto& [m, v] : out) {
    if (m.empty()) continue;
    any_pos |= v > 0;
    any_neg |= v < 0;
  }
  Range r;
  r.has_lo = !any_neg;
  r.has_hi = !any_pos;
  r.lo = r.hi = out[Monomial{}];
  return r;
}

// Whether `d REL 0` holds for every binding (true/false), or is not settled by bounds.
enum class Decided { True,
                     False,
                     Unknown };

Decided decide(const Poly& d, SymRel rel) {
  Range r = poly_range(d);
  if (!(r.has_lo && r.lo > 0) && !(r.has_hi && r.hi < 0) && !(r.has_lo && r.has_hi)) {
    Range s = shifted_range(d);
    if (s.has_lo && (!r.has_lo || s.lo > r.lo)) {
      r.has_lo = true;
      r.lo = s.lo;
    }
    if (s.has_hi && (!r.has_hi || s.hi < r.hi)) {
      r.has_hi = true;
      r.hi = s.hi;
    }
  }
  bool pos = r.has_lo && r.lo > 0, neg = r.has_hi && r.hi < 0;
  bool nonneg = r.has_lo && r.lo >= 0, nonpos = r.has_hi && r.hi <= 0;
  bool zero = nonneg && nonpos;
  switch (rel) {
    case SymRel::Eq:
      return zero ? Decided::True : (pos || neg) ? Decided::False
                                                 : Decided::Unknown;
    case SymRel::Ne:
      return zero ? Decided::False : (pos || neg) ? Decided::True
                                                  : Decided::Unknown;
    case SymRel::Lt:
      return neg ? Decided::True : nonneg ? Decided::False
                                          : Decided::Unknown;
    case SymRel::Le:
      return nonpos ? Decided::True : pos ? Decided::False
                                          : Decided::Unknown;
  }
  return Decided::Unknown;
}

bool holds(int64_t v, SymRel rel) {
  switch (rel) {
    case SymRel::Eq: return v == 0;
    case SymRel::Ne: return v != 0;
    case SymRel::Lt: return v < 0;
    case SymRel::Le: return v <= 0;
  }
  return false;
}

thread_local ShapeEnv* g_current_env = nullptr;

bool has_unbacked(const Poly& p) {
  for (const Term& t : p.terms)
    for (auto [atom, k] : t.mono) {
      const Atom& a = interner().atom(atom);
      if (a.kind == Atom::Kind::Symbol ? a.unbacked : has_unbacked(poly_of(a.a)) || has_unbacked(poly_of(a.b))) return true;
    }
  return false;
}

// Decides `a - b REL 0`, recording the outcome as a guard when it depends on the hints.
bool compare(const SymInt& a, const SymInt& b, SymRel rel) {
  if (!a.is_symbolic() && !b.is_symbolic()) return holds(a.hint() - b.hint(), rel);
  Poly d = add(as_poly(a), as_poly(b), -1);
  switch (decide(d, rel)) {
    case Decided::True: return true;
    case Decided::False: return false;
    case Decided::Unknown: break;
  }
  if (has_unbacked(d)) {
    throw UnbackedDecision("deciding " + a.str() + " " + sym_rel_str(rel) + " " + b.str() +
                           " needs the value of a size only the run knows (a data-dependent output)");
  }
  bool result = holds(a.hint() - b.hint(), rel);
  ShapeEnv* env = ShapeEnv::current();
  if (!env) {
    throw SymbolicSpecialization("deciding " + a.str() + " " + sym_rel_str(rel) + " " + b.str() +
                                 " needs a guard, and no shape environment is active");
  }
  // Record what held: `d REL 0` or its negation, written with Eq/Ne/Lt/Le. NB: (in)equalities take
  // the sign that makes the first term positive, so `a == b` and `b == a` are one guard.
  if ((rel == SymRel::Eq || rel == SymRel::Ne) && !d.terms.empty() && d.terms[0].coeff < 0) d = add(constant_poly(0), d, -1);
  SymExprId de = intern_poly(d);
  if (result) {
    env->add_guard({de, rel});
  } else {
    SymExprId neg = intern_poly(add(constant_poly(0), d, -1));
    switch (rel) {
      case SymRel::Eq: env->add_guard({de, SymRel::Ne}); break;
      case SymRel::Ne: env->add_guard({de, SymRel::Eq}); break;
      case SymRel::Lt: env->add_guard({neg, SymRel::Le}); break;  // d >= 0
      case SymRel::Le: env->add_guard({neg, SymRel::Lt}); break;  // d > 0
    }
  }
  return result;
}

SymInt from_poly(const Poly& p, int64_t hint) {
  if (p.terms.empty()) return SymInt(p.constant);
  return SymInt::of_expr(intern_poly(p), hint);
}

template <class NameFn>
std::string poly_str(const Poly& p, NameFn&& name);

template <class NameFn>
std::string atom_str(const Atom& a, NameFn&& name) {
  switch (a.kind) {
    case Atom::Kind::Symbol: return a.unbacked ? "u" + std::to_string(a.symbol) : name(a.symbol);
    case Atom::Kind::FloorDiv: return "((" + poly_str(poly_of(a.a), name) + ") // " + poly_str(poly_of(a.b), name) + ")";
    case Atom::Kind::Mod: return "((" + poly_str(poly_of(a.a), name) + ") % " + poly_str(poly_of(a.b), name) + ")";
  }
  return "?";
}

template <class NameFn>
std::string poly_str(const Poly& p, NameFn&& name) {
  std::string out;
  for (const Term& t : p.terms) {
    std::string m;
    for (auto [atom, k] : t.mono)
      for (uint32_t i = 0; i < k; ++i) m += (m.empty() ? "" : "*") + atom_str(interner().atom(atom), name);
    int64_t c = t.coeff;
    if (!out.empty()) out += c < 0 ? " - " : " + ";
    else if (c < 0) out += "-";
    int64_t mag = c < 0 ? -c : c;
    out += (mag == 1 ? "" : std::to_string(mag) + "*") + m;
  }
  if (p.constant != 0 || out.empty()) {
    if (out.empty()) out = std::to_string(p.constant);
    else out += (p.constant < 0 ? " - " : " + ") + std::to_string(p.constant < 0 ? -p.constant : p.constant);
  }
  return out;
}

std::string symbol_name(SymbolId s) { return "s" + std::to_string(s); }

int64_t eval_poly(const Poly& p, const std::vector<int64_t>& bindings);

int64_t eval_atom(const Atom& a, const std::vector<int64_t>& bindings) {
  switch (a.kind) {
    case Atom::Kind::Symbol: return bindings.at(static_cast<size_t>(a.symbol));
    case Atom::Kind::FloorDiv:
      return floordiv_int(eval_poly(poly_of(a.a), bindings), eval_poly(poly_of(a.b), bindings));
    case Atom::Kind::Mod: return mod_int(eval_poly(poly_of(a.a), bindings), eval_poly(poly_of(a.b), bindings));
  }
  return 0;
}

int64_t eval_poly(const Poly& p, const std::vector<int64_t>& bindings) {
  __int128 v = p.constant;
  for (const Term& t : p.terms) {
    __int128 m = t.coeff;
    for (auto [atom, k] : t.mono) {
      int64_t x = eval_atom(interner().atom(atom), bindings);
      for (uint32_t i = 0; i < k; ++i) m = sat(m * x);
    }
    v = sat(v + m);
  }
  return checked(v);
}

void collect_symbols(const Poly& p, std::vector<SymbolId>* out, bool only_unbacked = false) {
  for (const Term& t : p.terms)
    for (auto [atom, k] : t.mono) {
      const Atom& a = interner().atom(atom);
      if (a.kind == Atom::Kind::Symbol) {
        if (a.unbacked || !only_unbacked) out->push_back(a.symbol);
      } else {
        collect_symbols(poly_of(a.a), out, only_unbacked);
        collect_symbols(poly_of(a.b), out, only_unbacked);
      }
    }
}

}  // namespace

const char* sym_rel_str(SymRel r) {
  switch (r) {
    case SymRel::Eq: return "==";
    case SymRel::Ne: return "!=";
    case SymRel::Lt: return "<";
    case SymRel::Le: return "<=";
  }
  return "?";
}

// ---- SymInt ------------------------------------------------------------------------------------

SymInt SymInt::symbol(SymbolId id, int64_t hint) { return of_expr(sym_of_symbol(id), hint); }

SymInt SymInt::unbacked(SymbolId id, int64_t hint) {
  if (id < 0) throw std::logic_error("symint: negative symbol id");
  return of_expr(intern_poly(atom_poly(Atom{Atom::Kind::Symbol, id, 0, 0, true})), hint);
}

SymInt SymInt::of_expr(SymExprId e, int64_t hint) {
  int64_t c = 0;
  if (e == 0 || sym_constant(e, &c)) return SymInt(e == 0 ? hint : c);
  SymInt r;
  r.v_ = hint;
  r.e_ = e;
  return r;
}

int64_t SymInt::guard_int() const {
  if (e_ != 0) compare(*this, SymInt(v_), SymRel::Eq);
  return v_;
}

SymbolId SymInt::as_symbol() const {
  if (e_ == 0) return -1;
  const Poly& p = poly_of(e_);
  if (p.constant != 0 || p.terms.size() != 1 || p.terms[0].coeff != 1 || p.terms[0].mono.size() != 1 ||
      p.terms[0].mono[0].second != 1)
    return -1;
  const Atom& a = interner().atom(p.terms[0].mono[0].first);
  return a.kind == Atom::Kind::Symbol ? a.symbol : -1;
}

std::string SymInt::str() const { return e_ == 0 ? std::to_string(v_) : sym_str(e_); }

SymInt operator+(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(a.hint() + b.hint());
  return from_poly(add(as_poly(a), as_poly(b), 1), checked(static_cast<__int128>(a.hint()) + b.hint()));
}
SymInt operator-(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(a.hint() - b.hint());
  return from_poly(add(as_poly(a), as_poly(b), -1), checked(static_cast<__int128>(a.hint()) - b.hint()));
}
SymInt operator*(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(a.hint() * b.hint());
  return from_poly(mul(as_poly(a), as_poly(b)), checked(static_cast<__int128>(a.hint()) * b.hint()));
}
SymInt operator/(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(floordiv_int(a.hint(), b.hint()));
  return from_poly(floordiv(as_poly(a), as_poly(b)), floordiv_int(a.hint(), b.hint()));
}
SymInt operator%(const SymInt& a, const SymInt& b) {
  if (!a.is_symbolic() && !b.is_symbolic()) return SymInt(mod_int(a.hint(), b.hint()));
  return from_poly(mod(as_poly(a), as_poly(b)), mod_int(a.hint(), b.hint()));
}
bool operator==(const SymInt& a, const SymInt& b) { return compare(a, b, SymRel::Eq); }
bool operator<(const SymInt& a, const SymInt& b) { return compare(a, b, SymRel::Lt); }
bool operator<=(const SymInt& a, const SymInt& b) { return compare(a, b, SymRel::Le); }

// ---- SymShape ----------------------------------------------------------------------------------

std::vector<int64_t> SymShape::ints() const {
  std::vector<int64_t> out;
  out.reserve(size());
  for (const SymInt& x : *this) out.push_back(x.guard_int());
  return out;
}

std::vector<int64_t> SymShape::hints() const {
  std::vector<int64_t> out;
  out.reserve(size());
  for (const SymInt& x : *this) out.push_back(x.hint());
  return out;
}

bool SymShape::is_symbolic() const {
  return std::any_of(begin(), end(), [](const SymInt& x) { return x.is_symbolic(); });
}

bool SymShape::has_unbacked() const {
  return std::any_of(begin(), end(), [](const SymInt& x) { return sym_has_unbacked(x.expr()); });
}

bool SymShape::same_as(const SymShape& o) const {
  if (size() != o.size()) return false;
  for (size_t i = 0; i < size(); ++i)
    if (!(*this)[i].same_as(o[i])) return false;
  return true;
}

bool operator==(const SymShape& a, const SymShape& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

bool operator==(const SymShape& a, const std::vector<int64_t>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

std::string SymShape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < size(); ++i) s += (i ? ", " : "") + (*this)[i].str();
  return s + "]";
}

// ---- expressions -------------------------------------------------------------------------------

std::vector<SymbolId> sym_free_symbols(SymExprId e) {
  std::vector<SymbolId> out;
  if (e != 0) collect_symbols(poly_of(e), &out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t sym_evaluate(SymExprId e, const std::vector<int64_t>& bindings) { return eval_poly(poly_of(e), bindings); }

std::string sym_str(SymExprId e) { return poly_str(poly_of(e), symbol_name); }

bool sym_has_unbacked(SymExprId e) { return e != 0 && has_unbacked(poly_of(e)); }

std::vector<SymbolId> sym_unbacked_symbols(SymExprId e) {
  std::vector<SymbolId> out;
  if (e != 0) collect_symbols(poly_of(e), &out, /*only_unbacked=*/true);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool sym_constant(SymExprId e, int64_t* value) {
  const Poly& p = poly_of(e);
  if (!p.terms.empty()) return false;
  *value = p.constant;
  return true;
}

SymExprId sym_of_symbol(SymbolId id) {
  if (id < 0) throw std::logic_error("symint: negative symbol id");
  return intern_poly(atom_poly(Atom{Atom::Kind::Symbol, id, 0, 0}));
}

bool sym_divisible(const SymInt& x, int64_t k) {
  if (k <= 0) return false;
  SymInt r = x % SymInt(k);
  return !r.is_symbolic() && r.hint() == 0;
}

SymInt sym_specialize(const SymInt& x, const std::vector<int64_t>& bindings) {
  return x.is_symbolic() ? SymInt(sym_evaluate(x.expr(), bindings)) : x;
}

SymInt sym_substitute(const SymInt& x, const std::vector<std::pair<SymbolId, SymInt>>& values) {
  if (!x.is_symbolic()) return x;
  const std::vector<SymbolId> unbacked = sym_unbacked_symbols(x.expr());
  using K = SymProgram::Op::Kind;
  SymInt r = SymProgram::fold<SymInt>(
      x.expr(), [](int64_t c) { return SymInt(c); },
      [&](SymbolId id) {
        auto it = std::find_if(values.begin(), values.end(), [&](const auto& v) { return v.first == id; });
        // NB: hints only steer decisions, and arithmetic decides nothing: the result takes x's hint.
        if (it != values.end()) return it->second;
        return std::find(unbacked.begin(), unbacked.end(), id) != unbacked.end() ? SymInt::unbacked(id, 2) : SymInt::symbol(id, 2);
      },
      [](K kind, const SymInt& a, const SymInt& b) {
        switch (kind) {
          case K::Add: return a + b;
          case K::Mul: return a * b;
          case K::FloorDiv: return a / b;
          default: return a % b;
        }
      });
  return r.is_symbolic() ? SymInt::of_expr(r.expr(), x.hint()) : SymInt(x.hint());
}

bool sym_guard_holds(const SymGuard& g, const std::vector<int64_t>& bindings) {
  return holds(sym_evaluate(g.expr, bindings), g.rel);
}

// ---- SymProgram ---------------------------------------------------------------------------------

namespace {

void emit_poly(const Poly& p, std::vector<SymProgram::Op>* ops);

void emit_atom(const Atom& a, std::vector<SymProgram::Op>* ops) {
  using K = SymProgram::Op::Kind;
  switch (a.kind) {
    case Atom::Kind::Symbol: ops->push_back({K::Symbol, a.symbol}); return;
    case Atom::Kind::FloorDiv:
    case Atom::Kind::Mod:
      emit_poly(poly_of(a.a), ops);
      emit_poly(poly_of(a.b), ops);
      ops->push_back({a.kind == Atom::Kind::FloorDiv ? K::FloorDiv : K::Mod, 0});
      return;
  }
}

void emit_poly(const Poly& p, std::vector<SymProgram::Op>* ops) {
  using K = SymProgram::Op::Kind;
  ops->push_back({K::Const, p.constant});
  for (const Term& t : p.terms) {
    ops->push_back({K::Const, t.coeff});
    for (auto [atom, k] : t.mono)
      for (uint32_t i = 0; i < k; ++i) {
        emit_atom(interner().atom(atom), ops);
        ops->push_back({K::Mul, 0});
      }
    ops->push_back({K::Add, 0});
  }
}

}  // namespace

SymProgram::SymProgram(const std::vector<SymExprId>& exprs) {
  for (size_t i = 0; i < exprs.size(); ++i) {
    if (exprs[i] == 0) throw std::logic_error("symint: SymProgram of a constant SymInt's empty expression");
    emit_poly(poly_of(exprs[i]), &ops_);
    ops_.push_back({Op::Kind::Output, static_cast<int64_t>(i)});
    outputs_.push_back(i);
  }
  size_t depth = 0;
  for (const Op& op : ops_) {
    switch (op.kind) {
      case Op::Kind::Const:
      case Op::Kind::Symbol: ++depth; break;
      case Op::Kind::Output: --depth; break;
      default: --depth; break;
    }
    max_stack_ = std::max(max_stack_, depth + 1);
  }
}

bool SymProgram::run(const int64_t* bindings, int64_t* stack, int64_t* out) const {
  size_t sp = 0;
  for (const Op& op : ops_) {
    switch (op.kind) {
      case Op::Kind::Const: stack[sp++] = op.value; break;
      case Op::Kind::Symbol: stack[sp++] = bindings[op.value]; break;
      case Op::Kind::Add:
        --sp;
        if (__builtin_add_overflow(stack[sp - 1], stack[sp], &stack[sp - 1])) return false;
        break;
      case Op::Kind::Mul:
        --sp;
        if (__builtin_mul_overflow(stack[sp - 1], stack[sp], &stack[sp - 1])) return false;
        break;
      case Op::Kind::FloorDiv:
      case Op::Kind::Mod: {
        --sp;
        if (stack[sp] == 0) return false;
        int64_t q = floordiv_int(stack[sp - 1], stack[sp]);
        stack[sp - 1] = op.kind == Op::Kind::FloorDiv ? q : stack[sp - 1] - q * stack[sp];
        break;
      }
      case Op::Kind::Output: out[op.value] = stack[--sp]; break;
    }
  }
  return true;
}

// ---- ShapeEnv ----------------------------------------------------------------------------------

SymInt ShapeEnv::new_symbol(int64_t hint, std::string origin) {
  if (hint < 2) throw std::logic_error("symint: a symbol's size must be >= 2 (0 and 1 specialise)");
  auto id = static_cast<SymbolId>(origins_.size());
  origins_.push_back(std::move(origin));
  hints_.push_back(hint);
  unbacked_.push_back(false);
  return SymInt::symbol(id, hint);
}

SymInt ShapeEnv::new_unbacked(std::string origin) {
  auto id = static_cast<SymbolId>(origins_.size());
  // NB: a hint no decision reads (deciding throws UnbackedDecision); typing on meta tensors sizes
  // them by it, so it is large and unlike the sizes users write.
  int64_t hint = kUnbackedHint + 2 * static_cast<int64_t>(num_unbacked_++);
  origins_.push_back(std::move(origin));
  hints_.push_back(hint);
  unbacked_.push_back(true);
  return SymInt::unbacked(id, hint);
}

void ShapeEnv::add_evaluated(SymExprId e) {
  if (e != 0 && std::find(evaluated_.begin(), evaluated_.end(), e) == evaluated_.end()) evaluated_.push_back(e);
}

void ShapeEnv::add_guard(SymGuard g) {
  if (std::find(guards_.begin(), guards_.end(), g) == guards_.end()) guards_.push_back(g);
}

std::vector<SymbolId> ShapeEnv::specialized_symbols() const {
  std::vector<SymbolId> out;
  for (const SymGuard& g : guards_) {
    if (g.rel != SymRel::Eq) continue;
    const Poly& p = poly_of(g.expr);
    if (p.terms.size() != 1 || p.terms[0].mono.size() != 1 || p.terms[0].mono[0].second != 1) continue;
    const Atom& a = interner().atom(p.terms[0].mono[0].first);
    if (a.kind == Atom::Kind::Symbol) out.push_back(a.symbol);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::pair<SymbolId, SymbolId>> ShapeEnv::equal_symbols() const {
  std::vector<std::pair<SymbolId, SymbolId>> out;
  for (const SymGuard& g : guards_) {
    if (g.rel != SymRel::Eq) continue;
    const Poly& p = poly_of(g.expr);
    if (p.constant != 0 || p.terms.size() != 2 || p.terms[0].coeff != -p.terms[1].coeff ||
        (p.terms[0].coeff != 1 && p.terms[0].coeff != -1))
      continue;
    SymbolId s[2];
    bool plain = true;
    for (int i = 0; i < 2; ++i) {
      const Monomial& m = p.terms[static_cast<size_t>(i)].mono;
      plain = plain && m.size() == 1 && m[0].second == 1 && interner().atom(m[0].first).kind == Atom::Kind::Symbol;
      if (plain) s[i] = interner().atom(m[0].first).symbol;
    }
    if (plain) out.push_back({std::min(s[0], s[1]), std::max(s[0], s[1])});
  }
  return out;
}

std::string ShapeEnv::guard_str(const SymGuard& g) const {
  // `lhs - rhs REL 0` prints as `lhs REL rhs`: positive terms left, the rest right.
  auto name = [this](SymbolId s) {
    return static_cast<size_t>(s) < origins_.size() ? origins_[static_cast<size_t>(s)] : symbol_name(s);
  };
  const Poly& p = poly_of(g.expr);
  Poly lhs, rhs;
  rhs.constant = -p.constant;
  for (const Term& t : p.terms) (t.coeff > 0 ? lhs : rhs).terms.push_back(t.coeff > 0 ? t : Term{-t.coeff, t.mono});
  if (lhs.terms.empty() && (g.rel == SymRel::Lt || g.rel == SymRel::Le)) {
    // `c < N` reads better as `N > c`.
    Poly c = constant_poly(-rhs.constant);
    rhs.constant = 0;
    return poly_str(rhs, name) + (g.rel == SymRel::Lt ? " > " : " >= ") + poly_str(c, name);
  }
  return poly_str(lhs, name) + " " + sym_rel_str(g.rel) + " " + poly_str(rhs, name);
}

std::string ShapeEnv::expr_str(SymExprId e) const {
  auto name = [this](SymbolId s) {
    return static_cast<size_t>(s) < origins_.size() ? origins_[static_cast<size_t>(s)] : symbol_name(s);
  };
  return poly_str(poly_of(e), name);
}

ShapeEnv* ShapeEnv::current() { return g_current_env; }

SizeObliviousScope::SizeObliviousScope() : previous_(g_size_oblivious) { g_size_oblivious = true; }
SizeObliviousScope::~SizeObliviousScope() { g_size_oblivious = previous_; }

ShapeEnvScope::ShapeEnvScope(ShapeEnv* env) : previous_(g_current_env) { g_current_env = env; }
ShapeEnvScope::~ShapeEnvScope() { g_current_env = previous_; }

}  // namespace ff
