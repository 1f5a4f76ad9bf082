// Kind registries: the parameters of a kind (drop function, source, ...) written once.
//
// Each kind of drop function and of source is one table entry (drop.cpp, source.cpp) that
// names its parameters with their type, default and bound.  The table drives the core's
// construction from named values (`DropFunction::make`, `Source::make`), the bindings'
// constructors and `.kind`, the model-file loader's keys, the reprs and the docs' key
// reference.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace aqm {

/// The type of a kind's parameter.
enum class ParamType {
  Real,        ///< a finite double
  Int,         ///< an integer (int32)
  RealList,    ///< a list of doubles
  RealMatrix,  ///< a list of lists of doubles
  PointList,   ///< a list of [x, y] pairs
};

/// "a number", "an integer", "a list of numbers", ... (for messages and the docs).
std::string to_string(ParamType t);

/// One parameter of a kind.
struct ParamSpec {
  std::string name;
  ParamType type = ParamType::Real;
  bool required = true;
  double fallback = 0.0;  ///< the value an optional scalar takes when absent
  std::string bound;      ///< its domain, as the docs show it ("in [0, 1]", "> min_th", ...)
  std::string doc;        ///< one line
  int64_t int_lo = 0, int_hi = 0;  ///< ParamType::Int: the range the bindings and the loader check
  bool zero_default = false;       ///< optional; 0 (or absent) means the default (a model file omits the key)
};

/// A parameter's value (the field of its type holds it).
struct ParamValue {
  double real = 0.0;
  int64_t integer = 0;
  std::vector<double> list;
  std::vector<std::vector<double>> matrix;  ///< RealMatrix, PointList
  bool given = false;                       ///< false: an optional parameter left out

  static ParamValue of(double v) {
    ParamValue p;
    p.real = v, p.given = true;
    return p;
  }
  static ParamValue of_int(int64_t v) {
    ParamValue p;
    p.integer = v, p.real = static_cast<double>(v), p.given = true;
    return p;
  }
  static ParamValue of(std::vector<double> v) {
    ParamValue p;
    p.list = std::move(v), p.given = true;
    return p;
  }
  static ParamValue of(std::vector<std::vector<double>> v) {
    ParamValue p;
    p.matrix = std::move(v), p.given = true;
    return p;
  }
};

/// Values by parameter name, in the order of the kind's `params`.
using ParamValues = std::vector<std::pair<std::string, ParamValue>>;

/// The value of `name` in `v` (an absent one: not given).
const ParamValue& param_value(const ParamValues& v, const std::string& name);

/// "a, b or c" (for the kind lists inside error messages).
std::string or_list(const std::vector<std::string>& names);

}  // namespace aqm
