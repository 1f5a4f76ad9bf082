// Shared helpers of the pybind11 bindings: numpy views, dict conversions, and
// the define_* functions, one per area of the core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>
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

/// A numpy array that takes over the vector's buffer (no copy: large results).
template <class T>
py::array_t<T> moved(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(static_cast<py::ssize_t>(owned->size()), owned->data(), owner);
}

inline py::dict pairs(const std::vector<std::pair<std::string, double>>& v) {
  py::dict d;
  for (const auto& [k, x] : v) d[py::str(k)] = x;
  return d;
}

// Arguments from Python (model.cpp): a wrong type or range calls `fail(param, bound, shown value)`,
// which throws a named error (model_fail: ModelError "parameter 'p' must be <bound>, got <v>").
using Fail = void (*)(const std::string& param, const std::string& bound, const std::string& got);
void model_fail(const std::string& param, const std::string& bound, const std::string& got);
std::string show(py::handle v);  ///< a short one-line rendering of a value for messages
[[noreturn]] void bad_value(const std::string& param, const std::string& bound, py::handle v, Fail fail = model_fail);
bool is_real(py::handle v);
bool is_list(py::handle v);
double to_real(const std::string& param, py::handle v, Fail fail = model_fail);  ///< finite
/// An integer in [lo, hi] (decimal texts, so any C type's range fits); bool is refused, and a
/// float unless `integral_float` and it is a whole number.
py::int_ to_pyint(const std::string& param, py::handle v, const std::string& lo, const std::string& hi,
                  Fail fail = model_fail, bool integral_float = false);
int64_t to_int(const std::string& param, py::handle v, int64_t lo, int64_t hi, Fail fail = model_fail);
std::vector<double> to_reals(const std::string& param, py::handle v, Fail fail = model_fail);
std::string to_str(const std::string& param, py::handle v, Fail fail = model_fail);
bool to_bool(const std::string& param, py::handle v, Fail fail = model_fail);
std::string did_you_mean(const std::string& key, const std::vector<std::string>& known);

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

/// A read-write property whose setter converts like the constructors (a wrong type or a value
/// outside [lo, hi] is a ModelError naming the field; integers also accept a whole float, 1e6).
/// lo / hi default to the field type's range (bool and double: their own checks).
template <class C, class T>
void def_field(py::class_<C>& cls, const char* name, T C::*field, const char* doc = "", const char* lo = nullptr,
               const char* hi = nullptr) {
  cls.def_property(
      name, [field](const C& o) { return o.*field; },
      [name, field, lo, hi](C& o, py::handle v) {
        if constexpr (std::is_same_v<T, bool>) {
          o.*field = to_bool(name, v);
        } else if constexpr (std::is_integral_v<T>) {
          const std::string l = lo ? lo : std::to_string(std::numeric_limits<T>::min());
          const std::string h = hi ? hi : std::to_string(std::numeric_limits<T>::max());
          o.*field = to_pyint(name, v, l, h, model_fail, true).template cast<T>();
        } else {
          o.*field = to_real(name, v);
        }
      },
      doc);
}

/// The keyword constructor of an options class whose fields are def_field properties: each
/// keyword is assigned through its property (named errors), then validate() (the core's ranges);
/// an unknown keyword is a ModelError listing the options.
template <class C>
void def_kwargs_init(py::class_<C>& cls) {
  py::object type = cls;
  cls.def(py::init([type](py::kwargs kw) {
            C o;
            py::object self = py::cast(&o, py::return_value_policy::reference);
            py::list names = option_names(type);
            std::vector<std::string> known;
            for (auto n : names) known.push_back(n.cast<std::string>());
            for (auto [key, value] : kw) {
              const auto k = py::str(key).cast<std::string>();
              if (std::find(known.begin(), known.end(), k) == known.end()) {
                std::string all;
                for (const auto& n : known) all += (all.empty() ? "" : ", ") + n;
                model_fail(k, "one of the options " + all + did_you_mean(k, known), "an unknown option '" + k + "'");
              }
              self.attr(key) = value;
            }
            o.validate();
            return o;
          }),
          "Keyword arguments set the fields (see option_names()); each is checked.");
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
