// Bindings of the stationary solvers: options (the integer ones from the core's
// kIntOptionRanges, the others in the def_readwrite calls below), result, DirectSolver,
// solve_stationary.
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

void define_options(py::module_& m) {
  py::class_<StationaryOptions> options_class(m, "StationaryOptions",
                                "Options of the stationary solvers; keyword arguments set the fields (checked in Python, validated here).");
  options_class
      .def(py::init<>())
      .def_property(
          "method", [](const StationaryOptions& o) { return to_string(o.method); },
          [](StationaryOptions& o, py::object v) {
            o.method = py::isinstance<Method>(v) ? v.cast<Method>() : method_from(py::str(v).cast<std::string>());
          })
      .def_readwrite("tol", &StationaryOptions::tol)
      .def_readwrite("ordering", &StationaryOptions::ordering)
      .def_readwrite("strategy", &StationaryOptions::strategy)
      .def_readwrite("direct_max_gb", &StationaryOptions::direct_max_gb)
      .def_readwrite("auto_direct_max_flops", &StationaryOptions::auto_direct_max_flops)
      .def_readwrite("arnoldi_max_gb", &StationaryOptions::arnoldi_max_gb)
      .def_readwrite("x0", &StationaryOptions::x0)
      .def("validate", &StationaryOptions::validate)
      .def_static(
          "int_ranges",
          []() {
            py::dict o;
            for (const IntOptionRange& r : kIntOptionRanges) o[r.name] = py::make_tuple(r.lo, r.hi);
            return o;
          },
          "The integer options and their ranges {name: (lo, hi)} (defined once, in the core).");
  // the integer options from the core's table (no binding code per option)
  for (const IntOptionRange& r : kIntOptionRanges)
    options_class.def_property(
        r.name, [&r](const StationaryOptions& o) { return r.get(o); },
        [&r](StationaryOptions& o, long v) {
          if (!r.set(o, v)) detail::require_option_in<long>("solver", r.name, v, r.lo, r.hi, r.note);
        });
  def_option_statics(options_class);
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
  m.def(
      "solve_stationary",
      [](const Chain& chain, const StationaryOptions& o) { return solve_stationary(MarkovOperator(chain), o); },
      py::arg("chain"), py::arg("options") = StationaryOptions{},
        py::call_guard<InterruptGuard, py::gil_scoped_release>());
}

}  // namespace aqmpy
