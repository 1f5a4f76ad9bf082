// Bindings of the model layer: sources, service, drop functions, AQM, grid, model.
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>

#include "aqmchain/model/features.hpp"
#include "aqmchain/model/filter.hpp"
#include "aqmchain/model/model.hpp"
#include "aqmchain/model/queue_generator.hpp"
#include "aqmchain/model/scenario.hpp"

namespace aqmpy {

using namespace aqm;

// ---------------------------------------------------------------- arguments from Python, by the registries
// A wrong type is a ModelError naming the parameter, the bound and the value (not pybind's
// TypeError that names none): the constructors of the registries' kinds convert here, and the
// options classes (solvers.cpp, simulation.cpp) through the same functions (declared in common.hpp).

/// A short, one-line rendering of a Python value for an error message (never fails).
std::string show(py::handle v) {
  try {
    if (py::isinstance<py::bool_>(v)) return v.ptr() == Py_True ? "True" : "False";
    if (py::isinstance<py::float_>(v)) {
      const double d = v.cast<double>();
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      return py::repr(py::float_(d)).cast<std::string>();
    }
    if (py::isinstance<py::int_>(v)) {
      const auto bits = py::int_(v.attr("bit_length")()).cast<long long>();
      if (bits > 200) return detail::cat("an integer of about ", static_cast<long long>(bits * 0.30103) + 1, " digits");
      return py::str(v).cast<std::string>();
    }
    std::string text = py::repr(v).cast<std::string>(), out;
    for (char c : text) {  // whitespace runs as one space
      if (c == '\n' || c == '\t' || c == '\r') c = ' ';
      if (!(c == ' ' && !out.empty() && out.back() == ' ')) out += c;
    }
    return out.size() <= 60 ? out : out.substr(0, 57) + "...";
  } catch (const py::error_already_set&) {
    return "a " + std::string(Py_TYPE(v.ptr())->tp_name);
  }
}

void model_fail(const std::string& param, const std::string& bound, const std::string& got) {
  fail_param(param, bound, got);
}

[[noreturn]] void bad_value(const std::string& param, const std::string& bound, py::handle v, Fail fail) {
  fail(param, bound, show(v));
  throw std::logic_error("unreachable");
}

bool is_real(py::handle v) {
  static const py::object real = py::module_::import("numbers").attr("Real");
  return !py::isinstance<py::bool_>(v) && py::isinstance(v, real);
}

double to_real(const std::string& param, py::handle v, Fail fail) {
  if (!is_real(v)) bad_value(param, "a finite number", v, fail);
  double d;
  try {
    d = py::float_(py::reinterpret_borrow<py::object>(v)).cast<double>();
  } catch (const py::error_already_set&) {  // an integer beyond the double range
    bad_value(param, "a finite number", v, fail);
  }
  if (!std::isfinite(d)) bad_value(param, "a finite number", v, fail);
  return d;
}

py::int_ to_pyint(const std::string& param, py::handle v, const std::string& lo, const std::string& hi, Fail fail,
                  bool integral_float) {
  const std::string range = "an integer in [" + lo + ", " + hi + "]";
  py::object x = py::reinterpret_borrow<py::object>(v);
  if (integral_float && py::isinstance<py::float_>(v)) {  // 1e6 for a count; 1.5, nan and inf are refused
    const double d = v.cast<double>();
    if (!(std::isfinite(d) && d == std::floor(d))) bad_value(param, range, v, fail);
    x = py::reinterpret_steal<py::object>(PyLong_FromDouble(d));
  }
  if (py::isinstance<py::bool_>(x) || !PyIndex_Check(x.ptr())) bad_value(param, range, v, fail);
  const py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(x.ptr()));
  if (!i) throw py::error_already_set();
  const py::int_ plo(py::module_::import("builtins").attr("int")(lo)), phi(py::module_::import("builtins").attr("int")(hi));
  if (py::bool_(i.attr("__lt__")(plo)).cast<bool>()) bad_value(param, ">= " + lo, i, fail);
  if (py::bool_(i.attr("__gt__")(phi)).cast<bool>()) bad_value(param, "<= " + hi, i, fail);
  return i;
}

int64_t to_int(const std::string& param, py::handle v, int64_t lo, int64_t hi, Fail fail) {
  return to_pyint(param, v, detail::cat(lo), detail::cat(hi), fail, false).cast<int64_t>();
}

bool is_list(py::handle v) {
  return !(py::isinstance<py::str>(v) || py::isinstance<py::bytes>(v) || py::isinstance<py::dict>(v)) &&
         py::hasattr(v, "__iter__");
}

std::vector<double> to_reals(const std::string& param, py::handle v, Fail fail) {
  if (!is_list(v)) bad_value(param, "a list", v, fail);
  // a 1-D float64 numpy array (a starting vector of millions of states): copied at once
  if (py::isinstance<py::array_t<double>>(v)) {
    const auto a = py::reinterpret_borrow<py::array_t<double>>(v);
    if (a.ndim() == 1) {
      std::vector<double> out(static_cast<size_t>(a.shape(0)));
      const auto r = a.unchecked<1>();
      for (py::ssize_t i = 0; i < a.shape(0); ++i) {
        out[static_cast<size_t>(i)] = r(i);
        if (!std::isfinite(r(i))) bad_value(detail::cat(param, "[", i, "]"), "a finite number", py::float_(r(i)), fail);
      }
      return out;
    }
  }
  std::vector<double> out;
  size_t i = 0;
  for (py::handle x : v) out.push_back(to_real(detail::cat(param, "[", i++, "]"), x, fail));
  return out;
}

namespace {


std::vector<std::vector<double>> to_matrix(const std::string& param, py::handle v, bool pairs) {
  if (!is_list(v)) bad_value(param, "a list of lists", v);
  std::vector<std::vector<double>> out;
  size_t i = 0;
  for (py::handle row : v) {
    const std::string ri = detail::cat(param, "[", i++, "]");
    if (!is_list(row)) bad_value(ri, "a list", row);
    out.push_back(to_reals(ri, row));
    if (pairs && out.back().size() != 2) bad_value(ri, "a pair [avg, p]", row);
  }
  return out;
}

ParamValue to_param(const ParamSpec& ps, const std::string& param, py::handle v) {
  switch (ps.type) {
    case ParamType::Real: return ParamValue::of(to_real(param, v));
    case ParamType::Int: return ParamValue::of_int(to_int(param, v, ps.int_lo, ps.int_hi));
    case ParamType::RealList: return ParamValue::of(to_reals(param, v));
    case ParamType::RealMatrix: return ParamValue::of(to_matrix(param, v, false));
    case ParamType::PointList: return ParamValue::of(to_matrix(param, v, true));
  }
  return {};
}

}  // namespace

std::string to_str(const std::string& param, py::handle v, Fail fail) {
  if (!py::isinstance<py::str>(v)) bad_value(param, "a string", v, fail);
  return v.cast<std::string>();
}

bool to_bool(const std::string& param, py::handle v, Fail fail) {
  static const py::object np_bool = py::module_::import("numpy").attr("bool_");
  if (!py::isinstance<py::bool_>(v) && !py::isinstance(v, np_bool)) bad_value(param, "a boolean (true or false)", v, fail);
  return py::bool_(py::reinterpret_borrow<py::object>(v)).cast<bool>();
}

namespace {

/// An instance of a bound class T (ModelError "must be an aqmchain.<T>" otherwise).
template <class T>
T to_instance(const std::string& param, py::handle v) {
  if (!py::isinstance<T>(v)) {
    const auto cls = py::type::of<T>().attr("__name__").template cast<std::string>();
    bad_value(param, "an aqmchain." + cls, v);
  }
  return v.cast<T>();
}

}  // namespace

/// " (did you mean 'x'?)" for a misspelt key with a close known one, else "".
std::string did_you_mean(const std::string& key, const std::vector<std::string>& known) {
  const py::list close = py::module_::import("difflib").attr("get_close_matches")(key, known, 2, 0.6);
  if (close.empty()) return "";
  std::string s = " (did you mean ";
  for (size_t i = 0; i < close.size(); ++i) s += (i ? " or '" : "'") + close[i].cast<std::string>() + "'";
  return s + "?)";
}

namespace {

/// Keyword arguments of a constructor whose names are checked (TypeError for an unknown one,
/// with the close known names); values are read by name.
struct Kwargs {
  py::kwargs kw;
  Kwargs(const std::string& fn, py::kwargs given, const std::vector<std::string>& known) : kw(std::move(given)) {
    for (auto [key, value] : kw) {
      const auto k = py::str(key).cast<std::string>();
      if (std::find(known.begin(), known.end(), k) == known.end())
        throw py::type_error(fn + "() got an unexpected keyword argument '" + k + "'" + did_you_mean(k, known));
    }
  }
  bool has(const char* k) const { return kw.contains(k); }
  py::object get(const char* k) const { return kw.contains(k) ? py::object(kw[k]) : py::object(); }
};

/// The arguments of a call (positional in the order of `params`, or by keyword), converted.
ParamValues bind_params(const std::vector<ParamSpec>& params, const std::string& fn, const std::string& prefix,
                        const py::args& args, const py::kwargs& kwargs) {
  if (args.size() > params.size())
    throw py::type_error(detail::cat(fn, "() takes ", params.size(), " arguments, got ", args.size()));
  std::vector<py::object> given(params.size());
  for (size_t i = 0; i < args.size(); ++i) given[i] = args[i];
  for (auto [key, value] : kwargs) {
    const auto k = key.cast<std::string>();
    size_t i = 0;
    while (i < params.size() && params[i].name != k) ++i;
    if (i == params.size()) throw py::type_error(fn + "() got an unexpected keyword argument '" + k + "'");
    if (given[i]) throw py::type_error(fn + "() got multiple values for argument '" + k + "'");
    given[i] = py::reinterpret_borrow<py::object>(value);
  }
  ParamValues out;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string param = prefix + params[i].name;
    if (!given[i] || (!params[i].required && given[i].is_none())) {
      if (params[i].required) throw py::type_error(fn + "() missing required argument '" + params[i].name + "'");
      out.emplace_back(params[i].name, ParamValue{});
      continue;
    }
    out.emplace_back(params[i].name, to_param(params[i], param, given[i]));
  }
  return out;
}

py::object from_param(const ParamSpec& ps, const ParamValue& v) {
  switch (ps.type) {
    case ParamType::Real: return py::float_(v.real);
    case ParamType::Int: return py::int_(v.integer);
    case ParamType::RealList: return py::cast(v.list);
    case ParamType::RealMatrix:
    case ParamType::PointList: return py::cast(v.matrix);
  }
  return py::none();
}

py::dict param_info(const ParamSpec& ps) {
  py::dict d;
  d["name"] = ps.name;
  d["type"] = to_string(ps.type);
  d["required"] = ps.required;
  d["default"] = ps.required ? py::object(py::none()) : py::object(py::float_(ps.fallback));
  d["bound"] = ps.bound;
  d["doc"] = ps.doc;
  d["zero_default"] = ps.zero_default;
  d["int_range"] = ps.type == ParamType::Int ? py::object(py::make_tuple(ps.int_lo, ps.int_hi)) : py::object(py::none());
  return d;
}

/// Python signature text of a kind's constructor, for its docstring.
std::string signature(const std::string& fn, const std::vector<ParamSpec>& params, const std::string& ret) {
  std::string s = fn + "(";
  for (size_t i = 0; i < params.size(); ++i) {
    s += (i ? ", " : "") + params[i].name;
    if (!params[i].required) s += params[i].zero_default ? "=0.0" : "=None";
  }
  return s + ") -> " + ret;
}

std::vector<ParamSpec> drop_params(const DropKindSpec& k) {
  std::vector<ParamSpec> out;
  for (const auto& [ps, field] : k.params) out.push_back(ps);
  return out;
}

py::dict args_dict(const std::vector<ParamSpec>& params, const ParamValues& values) {
  py::dict d;
  for (const auto& ps : params) {
    const ParamValue& v = param_value(values, ps.name);
    if (v.given) d[py::str(ps.name)] = from_param(ps, v);
  }
  return d;
}

void define_sources(py::module_& m) {
  py::class_<Source> source(m, "Source", "Arrival source. Build with the static constructors.");
  {
    py::options opts;
    opts.disable_function_signatures();
    for (const SourceKindSpec& k : source_kinds()) {  // one constructor per registry entry
      const SourceKindSpec* spec = &k;
      source.def_static(
          k.name.c_str(),
          [spec](const py::args& args, const py::kwargs& kwargs) {
            return spec->make(bind_params(spec->params, spec->name, "source.", args, kwargs));
          },
          (signature(k.name, k.params, "Source") + "\n\n" + k.doc).c_str());
    }
    source.def_static(
        "ssmp_from_mean",
        [](py::handle mean, py::handle a, py::handle n) {
          const ParamSpec& ns = source_kind(Source::Kind::SSMP).params[0];
          return Source::ssmp_from_mean(to_real("source.mean", mean), to_real("source.a", a),
                                        static_cast<int>(to_int("source.n", n, ns.int_lo, ns.int_hi)));
        },
        py::arg("mean"), py::arg("a"), py::arg("n"),
        "ssmp_from_mean(mean, a, n) -> Source\n\nThe SSMP with n states and this a whose mean arrival rate is "
        "`mean` (q solved for).");
    source.def_static(
        "make",
        [](const std::string& kind, const py::kwargs& kwargs) {
          const SourceKindSpec& spec = source_kind(kind);
          return spec.make(bind_params(spec.params, spec.name, "source.", py::args(), kwargs));
        },
        py::arg("kind"),
        "make(kind, **params) -> Source\n\nThe source of this kind (a name of Source.kinds()) from its parameters "
        "by name.");
  }
  source
      .def_property_readonly_static(
          "kinds",
          [](py::object) {
            py::list out;
            for (const auto& k : source_kinds()) {
              py::dict d;
              d["name"] = k.name, d["doc"] = k.doc, d["continuous"] = k.continuous;
              py::list ps;
              for (const auto& p : k.params) ps.append(param_info(p));
              d["params"] = ps;
              out.append(d);
            }
            return out;
          },
          "The source kinds (the core's registry): name, doc, continuous, params (name, type, required, "
          "default, bound, doc, int_range).")
      .def(
          "args", [](const Source& s) { return args_dict(source_kind(s.kind).params, s.args()); },
          "The parameters by name, as a model file writes them (Source.make(s.kind, **s.args()) rebuilds it).")
      .def_property_readonly("kind", &Source::kind_name, "The kind's name (one of Source.kinds).")
      .def_property_readonly("continuous", &Source::continuous, "True for the continuous-time kinds (Poisson, MMPP).")
      .def_readonly("matrix", &Source::matrix,
                    "The modulator: a row-stochastic matrix (slotted kinds; [[1]] for Bernoulli) or a generator "
                    "(continuous kinds; [[0]] for Poisson).")
      .def_readonly("arrival", &Source::arrival,
                    "Per modulator state: the arrival probability per slot, or the arrival rate (continuous time).")
      .def_readonly("n", &Source::ssmp_n, "SSMP: the number of modulator states (0 for the other kinds).")
      .def_readonly("q", &Source::ssmp_q, "SSMP: the parameter q (0 for the other kinds).")
      .def_readonly("a", &Source::ssmp_a, "SSMP: the parameter a (0 for the other kinds).")
      .def_readonly("counts", &Source::batch,
                    "Batch sources: per modulator state the pmf of the number of arrivals in a slot, k = 0..B "
                    "(empty for the other kinds; see count_pmf()).")
      .def_property_readonly("max_batch", &Source::max_batch,
                             "Most arrivals in one slot: B of a batch source, 1 for the other kinds.")
      .def("count_pmf", &Source::count_pmf,
           "Per modulator state the pmf of the number of arrivals in a slot, k = 0..max_batch "
           "(one-arrival kinds: [1 - p, p]).")
      .def_property_readonly("states", &Source::states, "The number of modulator states.")
      .def("mean_rate", &Source::mean_rate, "Mean arrival rate: sum over the modulator states of pi_i times the rate.")
      .def("modulator_stationary", &Source::modulator_stationary, "The modulator's stationary vector pi.")
      .def_property_readonly_static("max_ssmp_n", [](py::object) { return kMaxSsmpStates; },
                                    "Largest SSMP n (modulator states) the core accepts.")
      .def_property_readonly_static("max_modulator_states", [](py::object) { return kMaxModulatorStates; },
                                    "Largest modulator (MMBP matrix, MMPP generator) the core accepts.")
      .def_property_readonly_static("max_batch_size", [](py::object) { return kMaxBatch; },
                                    "Largest B (arrivals in one slot) of a batch source the core accepts.")
      .def("__repr__", &Source::describe);
  m.def(
      "ssmp_q_for_mean",
      [](py::handle mean, py::handle a, py::handle n) {
        const ParamSpec& ns = source_kind(Source::Kind::SSMP).params[0];
        return ssmp_q_for_mean(to_real("source.mean", mean), to_real("source.a", a),
                               static_cast<int>(to_int("source.n", n, ns.int_lo, ns.int_hi)));
      },
      py::arg("mean"), py::arg("a"), py::arg("n"),
        "The SSMP parameter q whose arrival rate (the stationary probability of the arrival state 0) is "
        "`mean`, for this a and n states; raises ModelError if no q in (0, a] fits.");

  py::class_<HurstReport>(m, "HurstReport",
                          "The Hurst parameter of a source from its exact aggregated variances (returned by hurst()).")
      .def_readonly("asymptotic", &HurstReport::asymptotic,
                    "SSMP's asymptotic H = 1 - ln q / (2 ln(a / q)); meaningful only if asymptotic_valid.")
      .def_readonly("asymptotic_valid", &HurstReport::asymptotic_valid, "True when q > 1 and a > q^2.")
      .def_readonly("variance_time", &HurstReport::variance_time,
                    "Least-squares variance-time estimate of H over `levels`.")
      .def_readonly("levels", &HurstReport::levels, "The aggregation levels m of the fit.")
      .def_readonly("variances", &HurstReport::variances, "The exact Var(X^(m)) at those levels.");
  m.def(
      "hurst",
      [](const Source& s, py::handle lo, py::handle hi) {
        return hurst(s, static_cast<int>(to_int("log2_lo", lo, 0, 30)), static_cast<int>(to_int("log2_hi", hi, 1, 30)));
      },
      py::arg("source"), py::arg("log2_lo") = 0, py::arg("log2_hi") = 20,
        "Asymptotic and exact variance-time Hurst parameter of a source.");
}

void define_service(py::module_& m) {
  py::class_<Service>(m, "Service", "Geometric service per slot, or exponential service (continuous time).")
      .def(py::init([](py::handle mu) { return Service::geometric(to_real("service.mu", mu)); }),
           py::arg("mu") = py::none())
      .def_static(
          "geometric", [](py::handle mu) { return Service::geometric(to_real("service.mu", mu)); }, py::arg("mu"),
          "Geometric service: the packet in service leaves at the end of a slot with probability mu.")
      .def_static(
          "exponential", [](py::handle mu) { return Service::exponential(to_real("service.mu", mu)); }, py::arg("mu"),
                  "Exponential service with rate mu per unit time (continuous time).")
      .def_property_readonly(
          "kind", [](const Service& s) { return s.kind == Service::Kind::Geometric ? "geometric" : "exponential"; },
          "'geometric' (slotted) or 'exponential' (continuous time).")
      .def_readonly("mu", &Service::mu, "The service probability per slot, or the service rate (continuous time).")
      .def("__repr__", [](const Service& s) {
        return detail::cat("Service.", s.kind == Service::Kind::Geometric ? "geometric" : "exponential", "(mu=", s.mu,
                           ")");
      });
}

py::object drop_call(const DropFunction& f, py::object x) {
  if (py::isinstance<py::float_>(x) || py::isinstance<py::int_>(x)) return py::float_(f(x.cast<double>()));
  auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(x);
  if (!a) throw py::type_error("DropFunction expects a number or an array of numbers");
  py::array_t<double> out(a.request().shape);
  const double* in = a.data();
  double* o = out.mutable_data();
  for (py::ssize_t i = 0; i < a.size(); ++i) o[i] = f(in[i]);
  return std::move(out);
}

void define_drop(py::module_& m) {
  py::class_<DropFunction> drop(m, "DropFunction", "AQM drop function p(avg).");
  {
    py::options opts;
    opts.disable_function_signatures();
    for (const DropKindSpec& k : drop_kinds()) {  // one constructor per registry entry
      const DropKindSpec* spec = &k;
      drop.def_static(
          k.name.c_str(),
          [spec](const py::args& args, const py::kwargs& kwargs) {
            return DropFunction::make(spec->name, bind_params(drop_params(*spec), spec->name, "aqm.", args, kwargs));
          },
          (signature(k.name, drop_params(k), "DropFunction") + "\n\n" + k.doc).c_str());
    }
    drop.def_static(
        "make",
        [](const std::string& kind, const py::kwargs& kwargs) {
          const DropKindSpec& spec = drop_kind(kind);
          return DropFunction::make(kind, bind_params(drop_params(spec), kind, "aqm.", py::args(), kwargs));
        },
        py::arg("kind"),
        "make(kind, **params) -> DropFunction\n\nThe drop function of this kind (a name of DropFunction.kinds()) "
        "from its parameters by name.");
  }
  drop.def_property_readonly_static(
          "kinds",
          [](py::object) {
            py::list out;
            for (const auto& k : drop_kinds()) {
              py::dict d;
              d["name"] = k.name, d["doc"] = k.doc, d["title"] = k.title, d["band"] = k.band;
              d["scales_p_max"] = (k.traits & DropKindSpec::kScalesPMax) != 0;
              d["thresholds"] = (k.traits & DropKindSpec::kThresholds) != 0;
              py::list ps;
              for (const auto& p : drop_params(k)) ps.append(param_info(p));
              d["params"] = ps;
              out.append(d);
            }
            return out;
          },
          "The drop function kinds (the core's registry): name, doc, title (plots), band (the early-drop region's "
          "name), scales_p_max (adaptive RED and the dynamic max_th apply), thresholds (modified RED and flow "
          "comparison apply), params (name, type, required, default, bound, doc).")
      .def(
          "args", [](const DropFunction& f) { return args_dict(drop_params(drop_kind(f.kind)), f.args()); },
          "The parameters by name (DropFunction.make(f.kind, **f.args()) rebuilds it).")
      .def_property_readonly("kind", &DropFunction::name, "The kind's name (one of DropFunction.kinds).")
      .def_readonly("lo", &DropFunction::lo,
          "The lower threshold: min_th (RED family, SRED, polynomial) or k_l (DSRED).")
      .def_readonly("hi", &DropFunction::hi,
          "The upper threshold: max_th (RED family, polynomial), k_h (DSRED) or q_max (SRED; 0: the buffer).")
      .def_readonly("p_max", &DropFunction::p_max,
          "The drop probability reached at max_th (red, gentle_red, nlred).")
      .def_readonly("gamma", &DropFunction::gamma,
          "DSRED: 1 - gamma is the drop probability at the middle point (k_l + k_h) / 2.")
      .def_readonly("seg", &DropFunction::seg,
          "SRED's segment point (0: the default 0.6 q_max).")
      .def_readonly("coeffs", &DropFunction::coeffs,
          "Polynomial: the coefficients c_0, c_1, ... in x.")
      .def_readonly("points", &DropFunction::points,
          "Table: the (avg, p) points.")
      .def("__call__", &drop_call, py::arg("avg"), "p(avg), elementwise for arrays")
      .def("breakpoints", &DropFunction::breakpoints, py::arg("buffer"),
           "Kinks and jumps of p(avg) inside (0, buffer), sorted.")
      .def("__repr__", [](const DropFunction& f) { return "DropFunction." + f.name() + "(...)"; });
}

Aqm make_aqm(DropFunction drop, double w, const std::string& update, const std::string& policy, double ecn,
             const std::string& filter, std::vector<double> a_coef, std::vector<double> b_coef,
             std::optional<std::vector<double>> triple, const std::string& spacing, int count_max, double count_tail, bool adaptive, int64_t interval,
             double target_lo, double target_hi, double increment, double decrease, double p_max_high,
             double p_max_low, const std::string& clock, double p_max_step, double max_clock_states,
             const std::string& weight, const std::string& autored_p, bool dynamic_max_th, double max_th_growth,
             const std::string& modified, bool flow_compare, const std::string& semantics, double ptc,
             bool idle_correction, bool hard_drop) {
  Aqm a;
  a.semantics = semantics_from(semantics);
  a.ptc = ptc;
  a.idle_correction = idle_correction;
  a.hard_drop = hard_drop;
  a.modified = modified_from(modified);
  a.flow_compare = flow_compare;
  a.dynamic_max_th = dynamic_max_th;
  a.max_th_growth = max_th_growth;
  a.weight = weight_from(weight);
  a.autored_p = autored_p_from(autored_p);
  a.spacing = spacing_from(spacing);
  a.count_max = count_max;
  a.count_tail = count_tail;
  a.adaptive = Adaptive{adaptive,   interval,  target_lo,           target_hi, increment, decrease,
                        p_max_high, p_max_low, clock_from(clock), p_max_step, max_clock_states};
  a.drop = std::move(drop);
  a.w = w;
  a.update = update_rule_from(update);
  a.policy = drop_policy_from(policy);
  a.ecn = ecn;
  a.filter = filter_kind_from(filter);
  if (triple) {  // given, even empty: its own errors (an empty list is not "absent")
    if (a.filter != FilterKind::Redwm)
      fail_param("aqm.triple", "absent unless aqm.filter = \"redwm\"", "a list");
    if (!a_coef.empty() || !b_coef.empty())
      fail_param(a_coef.empty() ? "aqm.b" : "aqm.a", "absent when aqm.triple is given (one form of the coefficients)",
                 "a list");
    Aqm::from_triple(*triple, a_coef, b_coef);
  }
  a.a = std::move(a_coef);
  a.b = std::move(b_coef);
  // w <= 1 in slotted models, any rate > 0 in continuous ones: the model (which
  // knows its time kind) checks the upper bound; here w > 1 is let through.
  a.validate("aqm", /*w_is_rate=*/w > 1.0 && !a.ns3());
  return a;
}

GridSpec make_grid(int k, std::vector<double> points, const std::string& mapping, const std::string& refine,
                   int s_k, std::vector<double> s_points, double step_min, double p_step, double growth,
                   double mass_tol, double state_budget, int presolve_k) {
  GridSpec g;
  g.k = k;
  g.points = std::move(points);
  g.mapping = mapping_from(mapping);
  g.refine = refine_from(refine);
  g.refine_options = RefineOptions{step_min, p_step, growth, mass_tol, state_budget, presolve_k};
  g.refine_options.validate("grid");
  g.s_k = s_k;
  g.s_points = std::move(s_points);
  if (g.s_k < 0) fail_param("grid.s_k", ">= 1 (or 0: automatic)", g.s_k);
  if (g.s_k != 0 && !g.s_points.empty())
    fail_param("grid.s_points", "absent when grid.s_k is given (one form of the s grid)", "a list");
  return g;
}

/// A warning (not an error) for a lower threshold at or above the buffer: the AQM never acts.
void warn_thresholds(const Model& md) {
  const DropKindSpec& k = drop_kind(md.aqm.drop.kind);
  if (k.band.empty() || k.params.empty() || md.aqm.drop.lo < md.buffer) return;
  const std::string lo = py::str(py::float_(md.aqm.drop.lo).attr("__format__")("g")).cast<std::string>();
  const std::string msg = "aqm." + k.params[0].first.name + " = " + lo + " is not below the buffer (model.buffer = " +
                          std::to_string(md.buffer) + "): avg never exceeds it, so the AQM never drops or marks";
  if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) != 0) throw py::error_already_set();
}

/// GridSpec(**kwargs): names, types and the integer ranges checked here, the rest by the core.
GridSpec make_grid_py(const py::kwargs& kwargs) {
  const GridSpec d{};
  const RefineOptions r{};
  const std::vector<std::string> known = {"k", "points", "mapping", "refine", "s_k", "s_points", "step_min",
                                          "p_step", "growth", "mass_tol", "state_budget", "presolve_k"};
  const Kwargs kw("GridSpec", kwargs, known);
  auto real_or = [&](const char* k, double dflt) { return kw.has(k) ? to_real(std::string("grid.") + k, kw.get(k)) : dflt; };
  auto int_or = [&](const char* k, int dflt, int64_t lo) {
    return kw.has(k) ? static_cast<int>(to_int(std::string("grid.") + k, kw.get(k), lo, INT32_MAX)) : dflt;
  };
  auto list_or = [&](const char* k) {
    return kw.has(k) && !kw.get(k).is_none() ? to_reals(std::string("grid.") + k, kw.get(k)) : std::vector<double>{};
  };
  const int k = int_or("k", d.k, 1);
  const std::string mapping = kw.has("mapping") ? to_str("grid.mapping", kw.get("mapping")) : to_string(d.mapping);
  const std::string refine = kw.has("refine") ? to_str("grid.refine", kw.get("refine")) : to_string(d.refine);
  const int s_k = int_or("s_k", d.s_k, 0);
  std::vector<double> points = list_or("points"), s_points = list_or("s_points");
  return make_grid(k, std::move(points), mapping, refine, s_k, std::move(s_points), real_or("step_min", r.step_min),
                   real_or("p_step", r.p_step), real_or("growth", r.growth), real_or("mass_tol", r.mass_tol),
                   real_or("state_budget", r.state_budget), int_or("presolve_k", r.presolve_k, -INT32_MAX));
}

/// The stateful AQM's keys by the feature that uses them: a key given while its feature is off
/// is refused (one check for Aqm() and the model file).
void feature_keys(const Aqm& a, const Kwargs& kw) {
  const bool dyn = a.dynamic_max_th;
  if (a.weight == Weight::Static && !dyn && kw.has("autored_p"))
    bad_value("aqm.autored_p", "given only with aqm.weight = \"autored\" or aqm.dynamic_max_th = true",
              kw.get("autored_p"));
  for (const AqmFeature& f : aqm_features()) {  // the keys of a feature that is off (the core's table)
    const bool on = f.name == "adaptive"         ? a.adaptive.enabled
                    : f.name == "dynamic_max_th" ? dyn
                    : f.name == "semantics"      ? a.ns3()
                                                 : true;
    if (on || !f.refuse_when_off) continue;
    std::vector<std::string> extra;
    for (const auto& k : f.keys)
      if (kw.has(k.c_str())) extra.push_back(k);
    std::sort(extra.begin(), extra.end());
    if (!extra.empty())
      bad_value("aqm." + extra[0], "given only with aqm." + f.name + " = " + f.on, kw.get(extra[0].c_str()));
  }
}

std::vector<double> coefficients(const std::string& param, py::handle v) {
  std::vector<double> c = to_reals(param, v);
  if (c.size() > static_cast<size_t>(kMaxFilterCoefficients))
    fail_param(param, detail::cat("a list of at most ", kMaxFilterCoefficients, " coefficients"),
               detail::cat(c.size(), " coefficients"));
  return c;
}

/// Aqm(**kwargs): names and types checked here (stateful keys by the type of their default,
/// integer keys in their core ranges), values by Aqm::validate.
Aqm make_aqm_py(const py::kwargs& kwargs) {
  const Aqm d{};
  const Adaptive ad{};
  std::vector<std::string> known = {"drop", "w", "update", "policy", "ecn", "filter", "a", "b", "triple",
                                    "spacing", "count_max", "adaptive", "weight", "autored_p", "dynamic_max_th",
                                    "max_th_growth", "modified", "flow_compare", "semantics"};
  for (const AqmFeature& f : aqm_features())
    for (const auto& k : f.keys)
      if (std::find(known.begin(), known.end(), k) == known.end()) known.push_back(k);
  const Kwargs kw("Aqm", kwargs, known);
  auto p = [](const char* k) { return std::string("aqm.") + k; };
  auto real_or = [&](const char* k, double dflt) { return kw.has(k) ? to_real(p(k), kw.get(k)) : dflt; };
  auto str_or = [&](const char* k, const std::string& dflt) { return kw.has(k) ? to_str(p(k), kw.get(k)) : dflt; };
  auto bool_or = [&](const char* k, bool dflt) { return kw.has(k) ? to_bool(p(k), kw.get(k)) : dflt; };
  auto coef = [&](const char* k) {
    return kw.has(k) && !kw.get(k).is_none() ? std::optional<std::vector<double>>(coefficients(p(k), kw.get(k)))
                                             : std::nullopt;
  };
  const double w = real_or("w", d.w);
  const std::string update = str_or("update", to_string(d.update)), policy = str_or("policy", to_string(d.policy));
  const double ecn = real_or("ecn", d.ecn);
  const std::string filter = str_or("filter", to_string(d.filter));
  const auto a = coef("a"), b = coef("b"), triple = coef("triple");
  const std::string spacing = str_or("spacing", to_string(d.spacing));
  const int count_max = kw.has("count_max") ? static_cast<int>(to_int("aqm.count_max", kw.get("count_max"), 1, kMaxCountMax))
                                            : d.count_max;
  const double count_tail = kw.has("count_tail") ? to_real("aqm.count_tail", kw.get("count_tail")) : d.count_tail;
  const bool adaptive = bool_or("adaptive", ad.enabled);
  const int64_t interval =
      kw.has("interval") ? to_int("aqm.interval", kw.get("interval"), 1, kMaxAdaptiveInterval) : ad.interval;
  const double target_lo = real_or("target_lo", ad.target_lo), target_hi = real_or("target_hi", ad.target_hi);
  const double increment = real_or("increment", ad.increment), decrease = real_or("decrease", ad.decrease);
  const double p_max_high = real_or("p_max_high", ad.p_max_high), p_max_low = real_or("p_max_low", ad.p_max_low);
  const std::string clock = str_or("clock", to_string(ad.clock));
  const double p_max_step = real_or("p_max_step", ad.p_max_step);
  const double max_clock_states = real_or("max_clock_states", ad.max_clock_states);
  const std::string weight = str_or("weight", to_string(d.weight)), autored_p = str_or("autored_p", to_string(d.autored_p));
  const bool dynamic_max_th = bool_or("dynamic_max_th", d.dynamic_max_th);
  const double max_th_growth = real_or("max_th_growth", d.max_th_growth);
  const std::string modified = str_or("modified", to_string(d.modified));
  const bool flow_compare = bool_or("flow_compare", d.flow_compare);
  const std::string semantics = str_or("semantics", to_string(d.semantics));
  const double ptc = real_or("ptc", d.ptc);
  const bool idle_correction = bool_or("idle_correction", d.idle_correction), hard_drop = bool_or("hard_drop", d.hard_drop);
  {  // the feature switches, before the values: a key of a feature that is off is refused by name
    Aqm sw;
    sw.semantics = semantics_from(semantics);
    sw.dynamic_max_th = dynamic_max_th;
    sw.weight = weight_from(weight);
    sw.adaptive.enabled = adaptive;
    feature_keys(sw, kw);
  }
  DropFunction drop = kw.has("drop") && !kw.get("drop").is_none() ? to_instance<DropFunction>("aqm.drop", kw.get("drop"))
                                                                  : DropFunction::none();
  return make_aqm(std::move(drop), w, update, policy, ecn, filter, a.value_or(std::vector<double>{}),
                  b.value_or(std::vector<double>{}), triple, spacing, count_max, count_tail, adaptive, interval, target_lo,
                  target_hi, increment, decrease, p_max_high, p_max_low, clock, p_max_step, max_clock_states, weight,
                  autored_p, dynamic_max_th, max_th_growth, modified, flow_compare, semantics, ptc, idle_correction,
                  hard_drop);
}

Model make_model(py::handle buffer, py::handle source, py::handle service, py::handle aqm, py::handle grid,
                 py::handle time, py::handle classes) {
  Model md;
  md.buffer = static_cast<int>(to_int("model.buffer", buffer, 1, kMaxBuffer));
  md.time = time_kind_from(to_str("model.time", time));
  if (!classes.is_none()) {
    if (!is_list(classes)) bad_value("classes", "a list of aqmchain.TrafficClass", classes);
    size_t i = 0;
    for (py::handle c : classes) md.classes.push_back(to_instance<TrafficClass>(detail::cat("class[", i++, "]"), c));
  }
  md.source = to_instance<Source>("source", source);
  md.service = to_instance<Service>("service", service);
  if (!aqm.is_none()) md.aqm = to_instance<Aqm>("aqm", aqm);
  if (!grid.is_none()) md.grid = to_instance<GridSpec>("grid", grid);
  md.validate();
  warn_thresholds(md);
  return md;
}

TrafficClass make_class(py::handle name_, py::handle share_, py::handle ecn, py::handle mice, py::handle flows,
                        py::handle flow_weights) {
  const std::string name = to_str("class.name", name_);
  const std::vector<double> share =
      is_real(share_) ? std::vector<double>{to_real("class.share", share_)} : to_reals("class.share", share_);
  TrafficClass k{name,
                 share,
                 to_real("class.ecn", ecn),
                 to_bool("class.mice", mice),
                 static_cast<int>(to_int("class.flows", flows, 1, INT32_MAX)),
                 flow_weights.is_none() ? std::vector<double>{} : to_reals("class.flow_weights", flow_weights)};
  // the per-state share count is checked against the source by Model::validate
  k.validate("class", k.share.empty() ? 1 : static_cast<int>(k.share.size()));
  return k;
}

void define_classes(py::module_& m) {
  py::class_<TrafficClass>(m, "TrafficClass",
                           "A traffic class: share of the arrivals (one number, or one per modulator state), the "
                           "probability that its packets are ECN-capable, the mice flag (protected by modified RED) "
                           "and its flows (uniform, or by flow_weights).")
      .def(py::init(&make_class), py::arg("name"), py::arg("share"), py::arg("ecn") = TrafficClass{}.ecn,
           py::arg("mice") = TrafficClass{}.mice, py::arg("flows") = TrafficClass{}.flows,
           py::arg("flow_weights") = py::none())
      .def_readonly("name", &TrafficClass::name, "The class's name (the key of its metrics).")
      .def_readonly("share", &TrafficClass::share,
                    "Probability that an arrival is of this class: one number, or one per modulator state.")
      .def_readonly("ecn", &TrafficClass::ecn, "Probability that a packet of this class is ECN-capable.")
      .def_readonly("mice", &TrafficClass::mice, "True for short flows that modified RED protects.")
      .def_readonly("flows", &TrafficClass::flows, "Number of flows of the class (>= 1).")
      .def_readonly("flow_weights", &TrafficClass::flow_weights,
                    "Share of each flow within the class (empty: uniform over the flows).")
      .def("__repr__", [](const TrafficClass& k) {
        const py::object share = k.share.size() == 1 ? py::object(py::float_(k.share[0])) : py::object(py::cast(k.share));
        return "TrafficClass('" + k.name + "', share=" + py::repr(share).cast<std::string>() +
               ", ecn=" + py::repr(py::float_(k.ecn)).cast<std::string>() + ", mice=" + (k.mice ? "True" : "False") +
               ", flows=" + std::to_string(k.flows) + ")";
      });
}

void define_aqm_grid_model(py::module_& m) {
  define_classes(m);
  py::class_<Aqm>(m, "Aqm",
                  "Moving average (EWMA weight w, or REDwM coefficients a, b / the triple), drop function, drop "
                  "policy and ECN.")
      .def(py::init([](const py::kwargs& kw) { return make_aqm_py(kw); }),
           "Aqm(*, drop=DropFunction.none(), w=0.002, update='per_slot', policy='tail', ecn=0.0, filter='ewma', a=None, "
           "b=None, triple=None, **stateful) with the stateful keys of Aqm.stateful_defaults() and Aqm.class_defaults(). "
           "modified = 'front' | 'random' protects mice and ECN-capable arrivals (\"Modified RED Algorithm to Improve "
           "The Performance of Web Traffic\"); flow_compare = True drops an arrival and a waiting packet of the same "
           "flow (FDynamicAutoRED's flow comparison); see docs/classes.md. "
           "filter = 'redwm' takes a = [a_1, ..., a_k] and b = [b_0, ..., b_m], or triple = [x, y, z] "
           "(b_0 = x, b_1 = y, a_2 = z, a_1 = 1 - x - y - z).")
      .def_static(
          "stateful_defaults",
          []() {
            const Aqm a{};
            const Adaptive d{};
            py::dict o;
            o["spacing"] = to_string(a.spacing), o["count_max"] = a.count_max, o["count_tail"] = a.count_tail;
            o["adaptive"] = d.enabled;
            o["interval"] = d.interval, o["target_lo"] = d.target_lo, o["target_hi"] = d.target_hi;
            o["increment"] = d.increment, o["decrease"] = d.decrease, o["p_max_high"] = d.p_max_high;
            o["p_max_low"] = d.p_max_low, o["clock"] = to_string(d.clock), o["p_max_step"] = d.p_max_step;
            o["max_clock_states"] = d.max_clock_states;
            o["weight"] = to_string(a.weight), o["autored_p"] = to_string(a.autored_p);
            o["dynamic_max_th"] = a.dynamic_max_th, o["max_th_growth"] = a.max_th_growth;
            o["semantics"] = to_string(a.semantics), o["ptc"] = a.ptc, o["idle_correction"] = a.idle_correction;
            o["hard_drop"] = a.hard_drop;
            return o;
          },
          "Names and defaults of the stateful-AQM keys (drop spacing, adaptive RED).")
      .def_property_readonly_static(
          "features",
          [](py::object) {
            py::list out;
            for (const AqmFeature& f : aqm_features()) {
              py::dict d;
              d["name"] = f.name, d["off"] = f.off, d["keys"] = f.keys, d["refuse_when_off"] = f.refuse_when_off;
              d["doc"] = f.doc, d["on"] = f.on;
              out.append(d);
            }
            return out;
          },
          "The stateful AQM's features (the core's table): name (the switch), off (its value when off), keys "
          "(read only by it), refuse_when_off, doc.")
      .def_static(
          "stateful_ranges",
          []() {
            py::dict o;
            o["count_max"] = py::make_tuple(1, kMaxCountMax);
            o["interval"] = py::make_tuple(int64_t{1}, kMaxAdaptiveInterval);
            return o;
          },
          "Ranges {name: (lo, hi)} of the integer stateful-AQM keys (defined once, in the core).")
      .def_static(
          "class_defaults",
          []() {
            const Aqm a{};
            py::dict o;
            o["modified"] = to_string(a.modified), o["flow_compare"] = a.flow_compare;
            return o;
          },
          "Names and defaults of the class-aware AQM keys (modified RED, flow comparison).")
      .def_property_readonly("modified", [](const Aqm& a) { return to_string(a.modified); },
          "Modified RED for mice and ECN-capable arrivals: 'none', 'front' or 'random' (model file aqm.modified).")
      .def_readonly("flow_compare", &Aqm::flow_compare,
          "True: the flow comparison drops an arrival and a random waiting packet of the same flow (aqm.flow_compare).")
      .def_property_readonly("semantics", [](const Aqm& a) { return to_string(a.semantics); },
          "Whose RED rules: 'default' (aqmchain's) or 'ns3' (ns-3's RedQueueDisc, continuous time; docs/ns3.md).")
      .def_readonly("ptc", &Aqm::ptc,
          "ns-3 semantics: packets per unit time of the idle-time correction (0: the service rate) (aqm.ptc).")
      .def_readonly("idle_correction", &Aqm::idle_correction,
          "ns-3 semantics: avg decays over idle periods by (1 - w)^floor(ptc x idle time) (aqm.idle_correction).")
      .def_readonly("hard_drop", &Aqm::hard_drop,
          "ns-3 semantics: forced decisions drop even ECN-capable arrivals (UseHardDrop) (aqm.hard_drop).")
      .def_property_readonly("spacing", [](const Aqm& a) { return to_string(a.spacing); },
          "Drop spacing: 'none', 'count' or 'wait' (aqm.spacing).")
      .def_readonly("count_max", &Aqm::count_max,
          "The largest count the chain may carry under drop spacing (aqm.count_max).")
      .def_readonly("count_tail", &Aqm::count_tail,
          "The largest stationary mass the stationary solve leaves at a truncated count's cap (aqm.count_tail).")
      .def_readonly("count_trunc", &Aqm::count_trunc,
          "The count's working cap (0: the exact cap); set by the stationary solve, see Model.with_count_cap.")
      .def_readonly("count_trunc_at", &Aqm::count_trunc_at,
          "The count's working caps per avg grid point (empty: count_trunc everywhere); see Model.with_count_caps.")
      .def_property_readonly("weight", [](const Aqm& a) { return to_string(a.weight); },
          "The EWMA weight rule: 'static' (w) or 'autored' (AutoRED's dynamic weight, w its floor) (aqm.weight).")
      .def_property_readonly("autored_p", [](const Aqm& a) { return to_string(a.autored_p); },
          "AutoRED's P_t: 'drop' (p(avg) before the update) or 'queue' (q / N) (aqm.autored_p).")
      .def_readonly("dynamic_max_th", &Aqm::dynamic_max_th,
          "True: FDynamicAutoRED's dynamic max_th (aqm.dynamic_max_th).")
      .def_readonly("max_th_growth", &Aqm::max_th_growth,
          "The raised cur_max_th is max_th (1 + max_th_growth) (aqm.max_th_growth).")
      .def_property_readonly("adaptive", [](const Aqm& a) { return a.adaptive.enabled; },
          "True: adaptive RED, p_max moves every `interval` slots (aqm.adaptive).")
      .def_property_readonly("interval", [](const Aqm& a) { return a.adaptive.interval; },
          "Adaptive RED: slots between p_max updates (the mean interval under the geometric clock) (aqm.interval).")
      .def_property_readonly("target_lo", [](const Aqm& a) { return a.adaptive.target_lo; },
          "Adaptive RED: lower end of avg's target band, a fraction of the way from min_th to max_th (aqm.target_lo).")
      .def_property_readonly("target_hi", [](const Aqm& a) { return a.adaptive.target_hi; },
          "Adaptive RED: upper end of avg's target band, a fraction of the way from min_th to max_th (aqm.target_hi).")
      .def_property_readonly("increment", [](const Aqm& a) { return a.adaptive.increment; },
          "Adaptive RED: p_max grows by min(increment, p_max / 4) above the band (aqm.increment).")
      .def_property_readonly("decrease", [](const Aqm& a) { return a.adaptive.decrease; },
          "Adaptive RED: p_max is multiplied by this below the band (aqm.decrease).")
      .def_property_readonly("p_max_high", [](const Aqm& a) { return a.adaptive.p_max_high; },
          "Adaptive RED: p_max grows only while at most this (aqm.p_max_high).")
      .def_property_readonly("p_max_low", [](const Aqm& a) { return a.adaptive.p_max_low; },
          "Adaptive RED: p_max decreases only while at least this (aqm.p_max_low).")
      .def_property_readonly("clock", [](const Aqm& a) { return to_string(a.adaptive.clock); },
          "Adaptive RED's update clock: 'geometric' or 'exact' (a phase counter) (aqm.clock).")
      .def_property_readonly("p_max_step", [](const Aqm& a) { return a.adaptive.p_max_step; },
          "Adaptive RED: the chain's p_max grid step (aqm.p_max_step).")
      .def_property_readonly("max_clock_states", [](const Aqm& a) { return a.adaptive.max_clock_states; },
          "Adaptive RED: the exact clock is refused above this many product states (aqm.max_clock_states).")
      .def_readonly("drop", &Aqm::drop,
          "The drop function p(avg) (DropFunction).")
      .def_readonly("w", &Aqm::w,
          "The EWMA weight (filter 'ewma'); in continuous time a rate per unit time (aqm.w).")
      .def_readonly("ecn", &Aqm::ecn,
          "Probability that an arrival is ECN-capable: an AQM drop marks it instead (aqm.ecn).")
      .def_property_readonly("update", [](const Aqm& a) { return to_string(a.update); },
          "When the filter advances: 'per_slot' or 'per_arrival' (aqm.update).")
      .def_property_readonly("policy", [](const Aqm& a) { return to_string(a.policy); },
          "Where a dropped packet is taken from: 'tail', 'front' or 'random' (aqm.policy).")
      .def_property_readonly("filter", [](const Aqm& a) { return to_string(a.filter); },
          "The moving average: 'ewma' (RED's, weight w) or 'redwm' (coefficients a, b) (aqm.filter).")
      .def_readonly("a", &Aqm::a,
          "REDwM: the coefficients a_1..a_k of the past averages (aqm.a).")
      .def_readonly("b", &Aqm::b,
          "REDwM: the coefficients b_0..b_m of the queue samples (aqm.b).")
      .def_property_readonly("order", [](const Aqm& a) { return py::make_tuple(a.order_k(), a.order_m()); },
                             "REDwM's effective order (k, m): the last non-zero a_k and b_m")
      .def_static(
          "triple_coefficients",
          [](const std::vector<double>& t) {
            std::vector<double> a, b;
            Aqm::from_triple(t, a, b);
            return py::make_tuple(a, b);
          },
          py::arg("triple"), "(a, b) of the triple [x, y, z]: b_0 = x, b_1 = y, a_2 = z, a_1 = 1 - x - y - z.")
      .def_property_readonly_static(
          "filters",
          [](py::object) {
            std::vector<std::string> names;
            for (const auto& f : filter_kinds()) names.push_back(f.name);
            return names;
          },
          "The moving averages (values of aqm.filter), from the core's table.")
      .def_property_readonly_static(
          "filter_keys",
          [](py::object) {
            py::dict d;
            for (const auto& f : filter_kinds()) d[py::str(f.name)] = f.keys;
            return d;
          },
          "{filter: the aqm keys it reads}, from the core's table.")
      .def_property_readonly_static("max_coefficients", [](py::object) { return kMaxFilterCoefficients; })
      .def_property_readonly_static("sum_tolerance", [](py::object) { return kFilterSumTolerance; });

  py::class_<GridSpec>(m, "GridSpec",
                       "avg grid: uniform step 1/k, custom points, the flags mapping of \"Implementation of modified AQM mechanisms in IP routers\", or refine='auto' (a pre-solve "
                       "locates avg's mass and the grid is refined there where p(avg) jumps or is steep); REDwM's s "
                       "grid: step 1/s_k (0: automatic) or s_points.")
      .def(py::init([](const py::kwargs& kw) { return make_grid_py(kw); }),
           "GridSpec(*, k=4, points=None, mapping='split', refine='none', s_k=0, s_points=None, **refine_options) "
           "with the options of GridSpec.refine_defaults().")
      .def_readonly("k", &GridSpec::k,
          "Uniform avg grid step 1/k (away from the refined ranges with refine 'auto') (grid.k).")
      .def_readonly("points", &GridSpec::points,
          "A custom avg grid 0 = g_0 < ... < g_L = N; empty: the step 1/k (grid.points).")
      .def_readonly("s_k", &GridSpec::s_k,
          "REDwM's s grid step 1/s_k (0: automatic) (grid.s_k).")
      .def_readonly("s_points", &GridSpec::s_points,
          "REDwM: a custom s grid (empty: the step 1/s_k) (grid.s_points).")
      .def_property_readonly("mapping", [](const GridSpec& g) { return to_string(g.mapping); },
          "How avg is put on the grid: 'split' (mean-preserving), 'nearest' or 'flags' (grid.mapping).")
      .def_property_readonly("refine", [](const GridSpec& g) { return to_string(g.refine); },
          "'auto' (a pre-solve locates avg's mass and the grid is refined there) or 'none' (grid.refine).")
      .def_property_readonly("step_min", [](const GridSpec& g) { return g.refine_options.step_min; },
          "Refinement: the finest step, at a jump of p(avg) inside avg's mass range (grid.step_min).")
      .def_property_readonly("p_step", [](const GridSpec& g) { return g.refine_options.p_step; },
          "Refinement: the largest change of p(avg) across one step inside avg's mass range (grid.p_step).")
      .def_property_readonly("growth", [](const GridSpec& g) { return g.refine_options.growth; },
          "Refinement: the largest ratio between neighbouring steps (grid.growth).")
      .def_property_readonly("mass_tol", [](const GridSpec& g) { return g.refine_options.mass_tol; },
          "Refinement: avg's mass range runs from its mass_tol to its 1 - mass_tol quantile (grid.mass_tol).")
      .def_property_readonly("state_budget", [](const GridSpec& g) { return g.refine_options.state_budget; },
          "Refinement: the refined chain's estimated states at most this (grid.state_budget).")
      .def_property_readonly("presolve_k", [](const GridSpec& g) { return g.refine_options.presolve_k; },
          "Refinement: the pre-solve's grid step 1/presolve_k (grid.presolve_k).")
      .def_static(
          "refine_defaults",
          []() {
            const RefineOptions d{};
            py::dict o;
            o["step_min"] = d.step_min, o["p_step"] = d.p_step, o["growth"] = d.growth, o["mass_tol"] = d.mass_tol;
            o["state_budget"] = d.state_budget, o["presolve_k"] = d.presolve_k;
            return o;
          },
          "Defaults of the automatic grid's options (written once, in the core).")
      .def("resolve", &GridSpec::resolve, py::arg("buffer"),
           "The avg grid points for this buffer size (refine = 'auto' needs the pre-solve: refine_grid).");
  m.def("redwm_s_grid", &redwm_s_grid, py::arg("model"),
        "The chain's grid for REDwM's s (docs/redwm.md): [0] for an EWMA model.");

  m.def(
      "graded_points",
      [](int buffer, double coarse_step, const std::vector<std::tuple<double, double, DropFunction>>& foci,
         const GridSpec& options, double scale) {
        std::vector<GridFocus> f;
        for (const auto& [lo, hi, drop] : foci) f.push_back(GridFocus{lo, hi, drop});
        return graded_points(buffer, coarse_step, f, options.refine_options, scale);
      },
      py::arg("buffer"), py::arg("coarse_step"), py::arg("foci"), py::arg("options") = GridSpec{},
      py::arg("scale") = 1.0,
      "Points of an automatic grid: foci are (mass_lo, mass_hi, drop) triples; options a GridSpec's refine options.");
  m.def("coarsen_points", &coarsen_points, py::arg("points"), py::arg("factor"), py::arg("keep") = std::vector<double>{},
        "Every factor-th point (first, last and `keep` points kept): the grid with factor x the steps.");

  py::class_<Model>(m, "Model", "A complete queue model: buffer, source, service, AQM, grid, time kind.")
      .def(py::init(&make_model), py::kw_only(), py::arg("buffer"), py::arg("source"), py::arg("service"),
           py::arg("aqm") = py::none(), py::arg("grid") = py::none(), py::arg("time") = to_string(Model{}.time),
           py::arg("classes") = py::none())
      .def_readonly("classes", &Model::classes,
                    "The traffic classes (list of TrafficClass, model file `[[class]]`); empty: one implicit "
                    "class whose ECN probability is aqm.ecn.")
      .def_property_readonly("class_count", &Model::class_count,
                             "Number of traffic classes: len(classes), or 1 for the implicit class.")
      .def("class_share", &Model::class_share, py::arg("c"), py::arg("m"),
           "Probability that an arrival in modulator state m is of class c (1 for the implicit class).")
      .def("class_ecn", &Model::class_ecn, py::arg("c"),
           "ECN probability of class c: classes[c].ecn, or aqm.ecn for the implicit class.")
      .def_property_readonly("total_flows", &Model::total_flows,
                             "Flows over all classes (each class has `flows`, 1 by default).")
      .def_readonly("buffer", &Model::buffer,
                    "Buffer size N (packets), counting the packet in service (model file `model.buffer`).")
      .def_property_readonly(
          "time", [](const Model& md) { return to_string(md.time); },
          "'discrete' (slotted: a stochastic matrix P) or 'continuous' (a generator G), model file `model.time`.")
      .def_readonly("source", &Model::source, "The arrival process (Source, model file `[source]`).")
      .def_readonly("service", &Model::service, "The service (Service, model file `[service]`).")
      .def_readonly("aqm", &Model::aqm, "The active queue management (Aqm, model file `[aqm]`).")
      .def_readonly("grid", &Model::grid, "The avg grid of the chain (GridSpec, model file `[grid]`).")
      .def("validate", &Model::validate,
           "Check every parameter; raises ModelError naming the parameter, the bound and the value.")
      .def("resolved_drop", &Model::resolved_drop,
           "The drop function with the defaults that depend on the buffer filled in (SRED's q_max).")
      .def_property_readonly_static("max_buffer", [](py::object) { return kMaxBuffer; },
                                    "Largest model.buffer the core accepts.")
      .def(
          "with_grid",
          [](const Model& md, GridSpec grid) {
            Model out = md;
            out.grid = std::move(grid);
            out.validate();
            return out;
          },
          py::arg("grid"), "A copy of the model on another avg grid.")
      .def(
          "with_count_cap",
          [](const Model& md, int64_t cap) {
            if (cap < 0) fail_param("count_cap", ">= 0 (0: the exact cap)", cap);
            Model out = md;
            out.aqm.count_trunc = cap;
            out.aqm.count_trunc_at.clear();
            out.validate();
            return out;
          },
          py::arg("cap"),
          "A copy of the model whose drop-spacing count saturates at `cap` (0: the exact cap, beyond which "
          "p_a = 1); docs/stateful-aqm.md.")
      .def(
          "with_count_caps",
          [](const Model& md, std::vector<int64_t> caps) {
            Model out = md;
            out.aqm.count_trunc = 0;
            out.aqm.count_trunc_at = std::move(caps);
            out.validate();
            return out;
          },
          py::arg("caps"),
          "A copy of the model whose drop-spacing count saturates, at each avg grid point, at that point's cap "
          "(one per point of the resolved grid; 0: the exact cap there); docs/stateful-aqm.md.");
}

void define_scenario(py::module_& m) {
  py::class_<Phase>(m, "Phase", "One phase of a scenario: a duration (slots, or time units in continuous time), "
                                "the model that holds during it, a free-text label.")
      .def(py::init([](py::handle duration, py::handle model, py::handle label) {
             Model md = to_instance<Model>("phase.model", model);
             return Phase{to_real("phase.duration", duration), std::move(md), to_str("phase.label", label)};
           }),
           py::arg("duration"), py::arg("model"), py::arg("label") = "")
      .def_readonly("duration", &Phase::duration,
                    "Length of the phase: slots (discrete time, a positive integer) or time units (continuous).")
      .def_readonly("model", &Phase::model, "The model that holds during the phase.")
      .def_readonly("label", &Phase::label, "A free-text label for tables and plots ('' allowed).")
      .def("__repr__", [](const Phase& p) { return detail::cat("Phase(duration=", p.duration, ", label='", p.label, "')"); });

  py::class_<Scenario>(m, "Scenario", "A piecewise-constant scenario: phases run in order (validated on construction).")
      .def(py::init([](py::handle phases_) {
             if (!is_list(phases_)) bad_value("scenario.phase", "a list of aqmchain.Phase", phases_);
             std::vector<Phase> phases;
             size_t i = 0;
             for (py::handle p : phases_) phases.push_back(to_instance<Phase>(detail::cat("phase[", i++, "]"), p));
             Scenario s{std::move(phases)};
             s.validate();
             return s;
           }),
           py::arg("phases"))
      .def_readonly("phases", &Scenario::phases, "The phases, in the order they run.")
      .def("validate", &Scenario::validate,
           "Check every phase (a valid model, a positive duration, integral in discrete time) and that the "
           "phases fit together; raises ModelError naming phase[i].<parameter>.")
      .def("total_duration", &Scenario::total_duration, "The sum of the phases' durations.")
      .def_property_readonly_static("max_duration", [](py::object) { return kMaxScenarioDuration; },
                                    "Longest scenario (sum of the durations), also the latest transient output time.")
      .def("boundaries", &Scenario::boundaries, "Start of each phase followed by the total duration.")
      .def("phase_at", &Scenario::phase_at, py::arg("t"), "Index of the phase active at time t.")
      .def("__len__", [](const Scenario& s) { return s.phases.size(); });
}
}  // namespace

static void define_model_enums(py::module_& m) {
  py::enum_<TimeKind>(m, "TimeKind", "Discrete (slotted) or continuous time.")
      .value("discrete", TimeKind::Discrete)
      .value("continuous", TimeKind::Continuous);
  py::enum_<UpdateRule>(m, "UpdateRule", "When the EWMA advances.")
      .value("per_slot", UpdateRule::PerSlot)
      .value("per_arrival", UpdateRule::PerArrival);
  py::enum_<DropPolicy>(m, "DropPolicy", "Which packet an AQM or overflow drop discards.")
      .value("tail", DropPolicy::Tail)
      .value("front", DropPolicy::Front)
      .value("random", DropPolicy::Random);
  py::enum_<Modified>(m, "Modified", "Modified RED for mice and ECN (docs/classes.md): which waiting elephant an early drop takes.")
      .value("none", Modified::None)
      .value("front", Modified::Front)
      .value("random", Modified::Random);
  py::enum_<FilterKind>(m, "FilterKind", "The moving average: RED's EWMA or REDwM's recursion.")
      .value("ewma", FilterKind::Ewma)
      .value("redwm", FilterKind::Redwm);
  py::enum_<Mapping>(m, "Mapping", "How an avg value is mapped onto the grid.")
      .value("split", Mapping::Split)
      .value("nearest", Mapping::Nearest)
      .value("flags", Mapping::Flags);
}

void define_stateful(py::module_& m) {
  m.def(
      "stateful_info",
      [](const Model& md) {
        const StatefulInfo s = stateful_info(md);
        py::dict o;
        o["count_cap"] = s.count_cap, o["count_cap_exact"] = s.count_cap_exact, o["count_start"] = s.count_start;
        o["count_truncated"] = s.count_truncated;
        o["count_cap_at"] = s.count_cap_at, o["count_start_at"] = s.count_start_at;
        o["p_max_values"] = s.pmax, o["p_max_start"] = s.pmax_start;
        o["phases"] = s.phases;
        return o;
      },
      py::arg("model"),
      "The chain's view of a stateful AQM: count_cap (count in -1..count_cap), count_cap_exact (the cap beyond "
      "which p_a = 1 on the grid), count_truncated (a cap below the exact one: the count saturates there), "
      "count_cap_at (per avg point, the cap there; empty: count_cap everywhere), count_start (the stationary "
      "solve's first cap), count_start_at (its first caps per avg point), p_max_values (the p_max grid), p_max_start (its start "
      "index), phases (the exact clock's phase count).");
}

void define_model(py::module_& m) {
  define_model_enums(m);
  define_sources(m);
  define_service(m);
  define_drop(m);
  define_aqm_grid_model(m);
  define_scenario(m);
  define_stateful(m);
}

}  // namespace aqmpy
