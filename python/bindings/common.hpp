// Shared helpers of the pybind11 bindings: numpy views, dict conversions, and
// the define_* functions, one per area of the core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

namespace aqmpy {

namespace py = pybind11;

/// Read-only numpy view of a vector owned by `owner` (kept alive by the view).
template <class T>
py::array_t<T> view(const std::vector<T>& v, py::handle owner) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()), v.data(), owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

template <class T>
py::array_t<T> copy(const std::vector<T>& v) {
  return py::array_t<T>(static_cast<py::ssize_t>(v.size()), v.data());
}

inline py::dict pairs(const std::vector<std::pair<std::string, double>>& v) {
  py::dict d;
  for (const auto& [k, x] : v) d[py::str(k)] = x;
  return d;
}

/// The names of a bound options class's read-write fields, in definition order
/// (names, types and defaults are written once, in the def_readwrite calls).
py::list option_names(py::object cls);

/// The fields every solver family's result shares (aqm::ConvergenceReport): status,
/// methods (names from the core's to_string), note, residual, iterations, operator
/// applications, seconds and extra as dicts.
template <class R>
py::class_<R>& def_report(py::class_<R>& cls) {
  cls.def_property_readonly("converged", &R::converged)
      .def_property_readonly("status", [](const R& r) { return to_string(r.status); })
      .def_property_readonly("requested", [](const R& r) { return to_string(r.requested); })
      .def_property_readonly("method", [](const R& r) { return to_string(r.method); })
      .def_readonly("fallback", &R::fallback)
      .def_readonly("note", &R::note)
      .def_readonly("residual", &R::residual)
      .def_readonly("iterations", &R::iterations)
      .def_readonly("operator_applications", &R::operator_applications)
      .def_property_readonly("seconds", [](const R& r) { return pairs(r.seconds); })
      .def_property_readonly("extra", [](const R& r) { return pairs(r.extra); });
  return cls;
}

/// The static option_names() and defaults() of an options class (read from its
/// read-write fields and a default-constructed instance: written once, in C++).
template <class C>
py::class_<C>& def_option_statics(py::class_<C>& cls) {
  py::object type = cls;
  cls.def_static("option_names", [type]() { return option_names(type); });
  cls.def_static("defaults", [type]() {
    py::object o = type();
    py::dict d;
    for (const auto& name : option_names(type)) d[name] = o.attr(name);
    return d;
  });
  return cls;
}

/// While alive on the main thread, Ctrl-C (SIGINT) asks the core's long loops to
/// stop (they throw aqm::Interrupted, raised as KeyboardInterrupt) instead of
/// waiting for the GIL to come back.  Use before py::gil_scoped_release in
/// call_guard<InterruptGuard, py::gil_scoped_release>.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  bool active_ = false;     // the outermost guard on the main thread
  bool installed_ = false;
  void* previous_ = nullptr;  // struct sigaction
};

void init_main_thread();
void define_errors(py::module_& m);
void define_model(py::module_& m);
void define_state(py::module_& m);
void define_solvers(py::module_& m);
void define_transient(py::module_& m);
void define_transient_analysis(py::module_& m);
void define_analysis(py::module_& m);
void define_simulator(py::module_& m);

}  // namespace aqmpy
