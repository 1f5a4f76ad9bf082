// Error types of the aqmchain core.
//
// Library code never prints and never terminates the process: bad input throws
// ModelError (a std::invalid_argument) whose message names the parameter, the
// bound and the value; solver non-convergence is a *status* in the result struct
// (see solvers.hpp), not an exception.
#pragma once

#include <algorithm>
#include <charconv>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace aqm {

/// Bad model input: a parameter outside its domain, thresholds out of order, ...
class ModelError : public std::invalid_argument {
 public:
  ModelError(std::string param, const std::string& what)
      : std::invalid_argument(what), param_(std::move(param)) {}
  /// Dotted name of the offending parameter, e.g. "aqm.p_max".
  const std::string& param() const noexcept { return param_; }

 private:
  std::string param_;
};

/// The state space (or its matrix) would exceed the configured memory budget.
class StateSpaceTooLarge : public ModelError {
 public:
  using ModelError::ModelError;
};

/// Bad solver options (unknown method, tol <= 0, ...).
class OptionError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
  /// An error naming the option (`param`, e.g. "tol"; empty when none is to blame).
  OptionError(const std::string& what, std::string param) : std::invalid_argument(what), param_(std::move(param)) {}
  const std::string& param() const noexcept { return param_; }

 private:
  std::string param_;
};

/// The chain has more than one closed class: no unique stationary vector.
class ReducibleChain : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A numerical back end failed (UMFPACK out of memory, ARPACK error code, ...).
class SolverError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
/// A double as the shortest text that reads back as the same double (0.55, not
/// 0.55000000000000004): std::to_chars without a precision.
/// The digits are the shortest that read back as v; the notation is Python's repr's: plain
/// for decimal exponents in [-4, 16) (1000000000, 0.0001), scientific outside (1e+16, 1e-05).
template <class F>
void put_shortest(std::ostream& os, F v) {
  char buf[128];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const char* e = std::find(buf, r.ptr, 'e');
  if (e != r.ptr) {  // finite: e+XX or e-XX (the buffer is not 0-terminated: parse within it)
    const char* digits = e + 1 + (e[1] == '+');
    int exp = 0;
    std::from_chars(digits, r.ptr, exp);
    if (exp >= -4 && exp < 16) r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  }
  os.write(buf, r.ptr - buf);
}
inline void put(std::ostream& os, double v) { put_shortest(os, v); }
inline void put(std::ostream& os, float v) { put_shortest(os, v); }
inline void put(std::ostream& os, long double v) { put_shortest(os, static_cast<double>(v)); }
template <class T>
void put(std::ostream& os, const T& v) {
  os << v;
}
/// The arguments streamed one after the other; floating-point numbers in their shortest
/// round-trip form (messages and reprs never show 17 digits of binary noise).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (put(os, args), ...);
  return os.str();
}
/// A number with 6 significant digits (sizes and budgets in messages).
inline std::string short_num(double x) {
  std::ostringstream os;
  os.precision(6);
  os << x;
  return os.str();
}
/// OptionError "<family> option 'name' must be in [lo, hi]<what>, got v" unless
/// lo <= v <= hi (a NaN fails too).
template <class T>
void require_option_in(const char* family, const char* name, T v, T lo, T hi, const char* what = "") {
  if (!(v >= lo && v <= hi))
    throw OptionError(cat(family, " option '", name, "' must be in [", lo, ", ", hi, "]", what, ", got ", v), name);
}
/// The enumerator of `all` whose to_string() is `s`; else OptionError
/// "<family> option 'method' must be one of ..., got 's'".
template <class E, size_t N>
E enum_from(const char* family, const std::string& s, const E (&all)[N]) {
  std::string names;
  for (E e : all) {
    if (to_string(e) == s) return e;
    names += (names.empty() ? "" : ", ") + to_string(e);
  }
  throw OptionError(cat(family, " option 'method' must be one of ", names, ", got '", s, "'"), "method");
}
}  // namespace detail

/// Throw ModelError("param must be <bound>, got <value>").
template <class V>
[[noreturn]] void fail_param(const std::string& param, const std::string& bound, const V& value) {
  throw ModelError(param, detail::cat("parameter '", param, "' must be ", bound, ", got ", value));
}

}  // namespace aqm
