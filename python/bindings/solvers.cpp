// Bindings of the stationary solvers: options (every one from the core's table
// kStationaryOptions: properties, keyword constructor, options() / option_names() / defaults()),
// result, DirectSolver, solve_stationary.
#include "common.hpp"

#include "aqmchain/solvers/stationary.hpp"

namespace aqmpy {

using namespace aqm;

namespace {

py::list methods() {
  py::list out;
  for (Method x : kAllMethods) out.append(to_string(x));
  return out;
}

/// Real enums, their Python names the core's to_string names.
void define_enums(py::module_& m) {
  py::enum_<Method> method(m, "Method", "Stationary methods.");
  for (Method x : kAllMethods) method.value(to_string(x).c_str(), x);
  py::enum_<Status> status(m, "Status", "Convergence status of every solver family.");
  for (Status x : kAllStatuses) status.value(to_string(x).c_str(), x);
}

void option_fail(const std::string& param, const std::string& bound, const std::string& got) {
  throw OptionError(detail::cat("solver option '", param, "' must be ", bound, ", got ", got), param);
}

const OptionRow* option_row(const std::string& name) {
  for (const OptionRow& r : kStationaryOptions)
    if (name == r.name) return &r;
  return nullptr;
}

std::vector<std::string> option_list() {
  std::vector<std::string> out;
  for (const OptionRow& r : kStationaryOptions) out.emplace_back(r.name);
  return out;
}

py::object get_option(const OptionRow& r, const StationaryOptions& o) {
  switch (r.type) {
    case OptionType::Int: return py::int_(r.get_int(o));
    case OptionType::Real: return py::float_(o.*r.real);
    case OptionType::Choice: return py::str(r.get_text(o));
    case OptionType::RealList: return py::cast(o.*r.list);
  }
  return py::none();
}

/// After setting row r: the core's validate() on the row's own bound (an error naming another
/// option, set out of range by an earlier assignment, is left to the constructor's validate()).
template <class Restore>
void recheck(const OptionRow& r, StationaryOptions& o, Restore restore) {
  try {
    o.validate();
  } catch (const OptionError& e) {
    if (e.param() != r.name) return;
    restore();
    throw;
  }
}

/// Python value -> the row's field: a wrong type or a value out of the row's bounds is an
/// OptionError naming the option, the bound and the value (validate() checks the whole again).
void set_option(const OptionRow& r, StationaryOptions& o, py::handle v) {
  const std::string name = r.name;
  switch (r.type) {
    case OptionType::Int: {  // the core's bound in both messages: "an integer in [lo, hi]", "in [lo, hi]"
      if (py::isinstance<py::bool_>(v) || !PyIndex_Check(v.ptr())) bad_value(name, "an integer " + option_bound(r), v, option_fail);
      const py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
      if (!i) throw py::error_already_set();
      int overflow = 0;
      const long x = PyLong_AsLongAndOverflow(i.ptr(), &overflow);
      if (overflow || x < r.lo || x > r.hi || !r.set_int(o, x)) bad_value(name, option_bound(r), i, option_fail);
      return;
    }
    case OptionType::Real: {
      const double x = to_real(name, v, option_fail), keep = o.*r.real;
      o.*r.real = x;
      try {
        recheck(r, o, [&] { o.*r.real = keep; });
      } catch (const OptionError&) {  // the value as Python shows it (2.0, not 2)
        bad_value(name, option_bound(r), v, option_fail);
      }
      return;
    }
    case OptionType::Choice: {
      if (!r.choices && py::isinstance<Method>(v)) {  // the Method enum
        o.method = v.cast<Method>();
        return;
      }
      const std::string x = to_str(name, v, option_fail), keep = r.get_text(o);
      r.set_text(o, x);  // method_from throws for an unknown method
      recheck(r, o, [&] { r.set_text(o, keep); });
      return;
    }
    case OptionType::RealList: {
      std::vector<double> x = to_reals(name, v, option_fail), keep = o.*r.list;
      o.*r.list = std::move(x);
      recheck(r, o, [&] { o.*r.list = keep; });
      return;
    }
  }
}

void define_options(py::module_& m) {
  py::class_<StationaryOptions> options_class(
      m, "StationaryOptions",
      "Options of the stationary solvers (the core's table of options: StationaryOptions.options()); keyword "
      "arguments set the fields, a wrong type or range is an OptionError naming the option.");
  options_class
      .def(py::init([](py::kwargs kw) {
             StationaryOptions o;
             for (auto [key, value] : kw) {
               const auto k = py::str(key).cast<std::string>();
               const OptionRow* r = option_row(k);
               if (!r) {
                 std::string known;
                 for (const auto& n : option_list()) known += (known.empty() ? "" : ", ") + n;
                 const std::string hint = did_you_mean(k, option_list());
                 throw OptionError("unknown solver option '" + k + "'" + (hint.empty() ? " (known: " + known + ")" : hint),
                                   k);
               }
               set_option(*r, o, value);
             }
             o.validate();
             return o;
           }),
           "StationaryOptions(**options): the options by name (see options()), each checked.")
      .def("validate", &StationaryOptions::validate)
      .def_static(
          "int_ranges",
          []() {
            py::dict o;
            for (const OptionRow& r : kStationaryOptions)
              if (r.type == OptionType::Int) o[r.name] = py::make_tuple(static_cast<long>(r.lo), static_cast<long>(r.hi));
            return o;
          },
          "The integer options and their ranges {name: (lo, hi)} (defined once, in the core).")
      .def_static(
          "options",
          []() {
            const StationaryOptions d;
            py::list out;
            static const char* types[] = {"int", "real", "choice", "real_list"};
            for (const OptionRow& r : kStationaryOptions) {
              py::dict row;
              row["name"] = r.name;
              row["type"] = types[static_cast<int>(r.type)];
              row["bound"] = option_bound(r);
              row["lo"] = r.type == OptionType::Int ? py::object(py::int_(static_cast<long>(r.lo)))
                                                     : py::object(py::float_(r.lo));
              row["hi"] = r.type == OptionType::Int ? py::object(py::int_(static_cast<long>(r.hi)))
                          : r.hi >= kUnbounded      ? py::object(py::float_(INFINITY))
                                                    : py::object(py::float_(r.hi));
              row["lo_open"] = r.lo_open;
              row["hi_open"] = r.hi_open;
              py::list choices;
              if (r.type == OptionType::Choice) {
                if (!r.choices) {
                  choices = methods();
                } else {
                  std::string all = r.choices, item;
                  for (size_t i = 0; i <= all.size(); ++i) {
                    if (i == all.size() || all[i] == ',') {
                      choices.append(item);
                      item.clear();
                    } else if (all[i] != ' ') {
                      item += all[i];
                    }
                  }
                }
              }
              row["choices"] = choices;
              row["default"] = get_option(r, d);
              row["doc"] = r.doc;
              out.append(row);
            }
            return out;
          },
          "The core's table of solver options, one dict per option: name, type (int, real, choice, real_list), "
          "bound (as messages show it), lo, hi, lo_open, hi_open, choices, default, doc.")
      .def_static("option_names", []() { return py::cast(option_list()); },
                  "The names of the solver options, in the table's order.")
      .def_static(
          "defaults",
          []() {
            const StationaryOptions d;
            py::dict out;
            for (const OptionRow& r : kStationaryOptions) out[r.name] = get_option(r, d);
            return out;
          },
          "{name: default} of the solver options.");
  // one property per row of the core's table (no binding code per option)
  for (const OptionRow& r : kStationaryOptions)
    options_class.def_property(
        r.name, [&r](const StationaryOptions& o) { return get_option(r, o); },
        [&r](StationaryOptions& o, py::handle v) { set_option(r, o, v); }, r.doc);
  m.def("stationary_methods", &methods, "Names of the stationary methods.");
  m.def(
      "stationary_method_descriptions",
      []() {
        py::dict out;
        for (const MethodInfo& x : kMethodInfo) out[x.name] = x.description;
        return out;
      },
      "{name: one-line description} of the stationary methods, in the docs' order (the core's registry).");
  m.def(
      "stationary_method_guide",
      []() {
        py::list out;
        for (const MethodInfo& x : kMethodInfo) {
          py::dict d;
          d["name"] = x.name, d["description"] = x.description, d["use_when"] = x.use_when, d["cost"] = x.cost;
          out.append(d);
        }
        return out;
      },
      "The stationary methods' rows of the solvers guide (name, description, use_when, cost), in the docs' order "
      "(the core's registry).");
}

void define_result(py::module_& m) {
  py::class_<StationaryResult> stationary_result(m, "StationaryResult");
  def_report(stationary_result)
      .def_property_readonly("pi", [](py::object self) { return view(self.cast<const StationaryResult&>().pi, self); })
      .def_readonly("mass_error", &StationaryResult::mass_error)
      .def_readonly("clipped_mass", &StationaryResult::clipped_mass)
      .def_property_readonly(
          "warm_state",
          [](const StationaryResult& r) -> py::object {
            if (!r.warm_state) return py::none();
            return py::cast(WarmStateHandle{r.warm_state});
          },
          "what this solve keeps for a warm re-solve (krylov; None otherwise)")
      .def_property_readonly("matvecs", [](const StationaryResult& r) { return r.operator_applications; },
                             "alias of operator_applications")
      .def_property_readonly(
          "methods_tried",
          [](const StationaryResult& r) {
            py::list out;
            for (const MethodAttempt& a : r.methods_tried) {
              py::dict d;
              d["method"] = to_string(a.method);
              d["seconds"] = a.seconds;
              d["status"] = to_string(a.status);
              d["iterations"] = a.iterations;
              d["why"] = a.why;
              out.append(d);
            }
            return out;
          },
          "the methods run, in order: method, seconds, status, iterations, why (empty when it converged)");
}

}  // namespace

void define_solvers(py::module_& m) {
  define_enums(m);
  define_options(m);
  define_result(m);
  py::class_<DirectSolver>(m, "DirectSolver")
      .def(py::init<StationaryOptions>(), py::arg("options") = StationaryOptions{})
      .def(
          "solve", [](DirectSolver& s, const Chain& chain) { return s.solve(MarkovOperator(chain)); }, py::arg("chain"),
          py::call_guard<InterruptGuard, py::gil_scoped_release>())
      .def_property_readonly("analyses", &DirectSolver::analyses)
      .def_property_readonly("solves", &DirectSolver::solves);
  py::class_<WarmStateHandle>(m, "WarmState",
                              "What a krylov solve keeps for a warm re-solve of a chain with the same states: "
                              "krylov_recycle directions of its Krylov space (harmonic Ritz vectors), recycled.")
      .def_property_readonly("states", [](const WarmStateHandle& h) { return warm_state_info(*h.state).states; })
      .def_property_readonly("vectors", [](const WarmStateHandle& h) { return warm_state_info(*h.state).vectors; },
                             "recycled directions (one entry per state each)")
      .def_property_readonly("bytes", [](const WarmStateHandle& h) { return warm_state_info(*h.state).bytes; },
                             "memory held");
  m.def(
      "solve_stationary",
      [](const Chain& chain, const StationaryOptions& o, const WarmStateHandle* warm) {
        if (!warm || !warm->state) return solve_stationary(MarkovOperator(chain), o);
        StationaryOptions w = o;
        w.warm = warm->state;
        return solve_stationary(MarkovOperator(chain), w);
      },
      py::arg("chain"), py::arg("options") = StationaryOptions{}, py::arg("warm_state") = nullptr,
      py::call_guard<InterruptGuard, py::gil_scoped_release>(),
      "warm_state: what an earlier krylov solve of a chain with the same states kept (its result's warm_state), "
      "reused when it fits: the answer is the same, only the work differs (result.extra says what was reused).");
}

}  // namespace aqmpy
