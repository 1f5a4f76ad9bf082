// Bindings of the analysis layer: metrics (and response times) from a stationary vector.
#include "common.hpp"

#include "aqmchain/analysis/extrapolation.hpp"
#include "aqmchain/analysis/grid_refinement.hpp"
#include "aqmchain/analysis/metrics.hpp"
#include "aqmchain/analysis/poisson.hpp"
#include "aqmchain/analysis/response.hpp"

namespace aqmpy {

using namespace aqm;

namespace {

/// The scalar metrics by name (Python's result attributes and JSON keys come from
/// this table); `response` marks those that exist only when response times do.
struct Scalar {
  const char* name;
  double Metrics::*field;
  bool response;
};
const Scalar kScalars[] = {
    {"arrival_rate", &Metrics::arrival_rate, false},     {"throughput", &Metrics::throughput, false},
    {"loss", &Metrics::loss, false},                     {"loss_aqm", &Metrics::loss_aqm, false},
    {"loss_overflow", &Metrics::loss_overflow, false},   {"mark_prob", &Metrics::mark_prob, false},
    {"aqm_decision_prob", &Metrics::aqm_decision_prob, false},
    {"loss_flow_compare", &Metrics::loss_flow_compare, false},
    {"mean_system", &Metrics::mean_system, false},       {"var_system", &Metrics::var_system, false},
    {"mean_queue", &Metrics::mean_queue, false},         {"var_queue", &Metrics::var_queue, false},
    {"mean_avg", &Metrics::mean_avg, false},             {"admitted_rate", &Metrics::admitted_rate, false},
    {"mean_response", &Metrics::mean_response, true},    {"var_response", &Metrics::var_response, true},
    {"response_truncated", &Metrics::response_truncated, true},
    {"littles_law_error", &Metrics::littles_law_error, true},
    {"pushed_out_prob", &Metrics::pushed_out_prob, true}, {"mean_sojourn", &Metrics::mean_sojourn, true}};

Metrics metrics(const QueueChain& c, const std::vector<double>& pi, const std::string& response, double tail_mass,
                long max_steps, double memory_limit, int64_t tagged_max_states) {
  if (response != "auto" && response != "tagged" && response != "none")
    throw OptionError("option 'response' must be one of auto, tagged, none, got '" + response + "'");
  MetricsOptions o;
  o.response = response;
  o.tagged.tail_mass = tail_mass;
  o.tagged.max_steps = max_steps;
  o.tagged.memory_limit_bytes = memory_limit;
  o.tagged.max_states = tagged_max_states;
  InterruptGuard interrupt;
  py::gil_scoped_release release;
  return compute_metrics(c, pi, o);
}
}  // namespace

void define_analysis(py::module_& m) {
  py::class_<ClassMetrics> cm(m, "ClassMetrics", "Metrics of one traffic class (docs/classes.md).");
  cm.def_readonly("name", &ClassMetrics::name)
      .def_readonly("arrival_rate", &ClassMetrics::arrival_rate)
      .def_readonly("loss", &ClassMetrics::loss)
      .def_readonly("loss_aqm", &ClassMetrics::loss_aqm)
      .def_readonly("loss_overflow", &ClassMetrics::loss_overflow)
      .def_readonly("loss_flow_compare", &ClassMetrics::loss_flow_compare)
      .def_readonly("loss_pushed_out", &ClassMetrics::loss_pushed_out)
      .def_readonly("mark_prob", &ClassMetrics::mark_prob)
      .def_readonly("throughput", &ClassMetrics::throughput)
      .def_readonly("throughput_share", &ClassMetrics::throughput_share)
      .def_readonly("mean_queue", &ClassMetrics::mean_queue)
      .def_readonly("queue_share", &ClassMetrics::queue_share)
      .def_readonly("response_available", &ClassMetrics::response_available)
      .def_readonly("response_note", &ClassMetrics::response_note)
      .def_readonly("mean_response", &ClassMetrics::mean_response)
      .def_readonly("var_response", &ClassMetrics::var_response)
      .def_property_readonly("response_pmf", [](const ClassMetrics& x) { return copy(x.response_pmf); });
  py::class_<Metrics> cls(m, "Metrics");
  cls.def_readonly("classes", &Metrics::classes);
  for (const auto& s : kScalars) cls.def_readonly(s.name, s.field);
  cls.def_static(
      "scalar_names",
      []() {
        py::list out;
        for (const auto& s : kScalars) out.append(py::make_tuple(s.name, s.response));
        return out;
      },
      "(name, is a response-time metric) for every scalar metric: the names are written once, here.");
  cls.def_property_readonly("system_pmf", [](const Metrics& x) { return copy(x.system_pmf); })
      .def_property_readonly("queue_pmf", [](const Metrics& x) { return copy(x.queue_pmf); })
      .def_property_readonly("avg_pmf", [](const Metrics& x) { return copy(x.avg_pmf); })
      .def_property_readonly("response_pmf", [](const Metrics& x) { return copy(x.response_pmf); })
      .def_readonly("response_available", &Metrics::response_available)
      .def_readonly("response_note", &Metrics::response_note)
      .def_readonly("response_method", &Metrics::response_method)
      .def_readonly("response_steps", &Metrics::response_steps)
      .def_readonly("response_states", &Metrics::response_states);

  py::class_<Extrapolation>(m, "Extrapolation", "A metric's discretisation error estimate from a grid sequence.")
      .def_readonly("value", &Extrapolation::value)
      .def_readonly("extrapolated", &Extrapolation::extrapolated)
      .def_readonly("error", &Extrapolation::error)
      .def_readonly("order", &Extrapolation::order)
      .def_readonly("method", &Extrapolation::method)
      .def("__repr__", [](const Extrapolation& e) {
        return detail::cat("Extrapolation(value=", e.value, ", extrapolated=", e.extrapolated, ", error=", e.error,
                           ", order=", e.order, ", method='", e.method, "')");
      });
  m.def("tagged_chain_bytes", &tagged_chain_bytes, py::arg("states"), py::arg("transitions_per_state") = 16.0,
        "Peak memory (bytes) of a tagged-packet chain with this many states and about this many nonzeros per "
        "state (checked against the budget).");
  m.def("extrapolate", &extrapolate, py::arg("h"), py::arg("values"),
        "Observed order and Richardson extrapolation in the grid step (a line fit when the order is not clean).");
  m.def(
      "refine_grid",
      [](const std::vector<Model>& models, const StationaryOptions& presolve, double memory_limit, bool keep_presolve) {
        BuildOptions b;
        b.memory_limit_bytes = memory_limit;
        RefinedGrid g;
        {
          InterruptGuard interrupt;
          py::gil_scoped_release release;
          g = refine_grid(models, presolve, b, keep_presolve);
        }
        const GridReport& r = g.report;
        py::dict d;
        d["refined"] = r.refined, d["presolve_states"] = r.presolve_states, d["presolve_seconds"] = r.presolve_seconds;
        d["mass_ranges"] = r.mass_ranges, d["jumps"] = r.jumps, d["points"] = r.points, d["min_step"] = r.min_step;
        d["max_step"] = r.max_step, d["refined_ranges"] = r.refined_ranges, d["estimated_states"] = r.estimated_states;
        d["budget_factor"] = r.budget_factor, d["budget_limited"] = r.budget_limited, d["note"] = r.note;
        py::object pre = py::none();  // the pre-solve's answer (one model): {pi, labels, grid}
        if (!g.presolve.pi.empty()) {
          py::dict labels;
          for (size_t i = 0; i < g.presolve.names.size(); ++i)
            labels[py::str(g.presolve.names[i])] = py::array_t<int32_t>(
                static_cast<py::ssize_t>(g.presolve.labels[i].size()), g.presolve.labels[i].data());
          py::dict pd;
          pd["pi"] = py::array_t<double>(static_cast<py::ssize_t>(g.presolve.pi.size()), g.presolve.pi.data());
          pd["labels"] = labels;
          pd["grid"] = py::array_t<double>(static_cast<py::ssize_t>(g.presolve.grid.size()), g.presolve.grid.data());
          pre = pd;
        }
        return py::make_tuple(g.grid, d, pre);
      },
      py::arg("models"), py::arg("presolve") = StationaryOptions{},
      py::arg("memory_limit") = BuildOptions{}.memory_limit_bytes, py::arg("keep_presolve") = false,
      "The automatic grid of `models` (one model or a scenario's phases): (GridSpec with points, report dict, "
      "with keep_presolve and one model the pre-solve's answer {pi, labels, grid}, else None).");

  m.def("compute_metrics", &metrics, py::arg("chain"), py::arg("pi"), py::arg("response") = "auto",
        py::arg("tail_mass") = ResponseOptions{}.tail_mass, py::arg("max_steps") = ResponseOptions{}.max_steps,
        py::arg("memory_limit") = ResponseOptions{}.memory_limit_bytes,
        py::arg("tagged_max_states") = ResponseOptions{}.max_states);
  m.def(
      "check_tagged_budget",
      [](const QueueChain& c, const std::string& response, double memory_limit, int64_t tagged_max_states) {
        if (response != "auto" && response != "tagged" && response != "none")
          throw OptionError("option 'response' must be one of auto, tagged, none, got '" + response + "'");
        ResponseOptions o;
        o.memory_limit_bytes = memory_limit;
        o.max_states = tagged_max_states;
        return check_tagged_budget(c, response, o);
      },
      py::arg("chain"), py::arg("response") = "auto", py::arg("memory_limit") = ResponseOptions{}.memory_limit_bytes,
      py::arg("tagged_max_states") = ResponseOptions{}.max_states,
      "States of the tagged-packet chain compute_metrics will build for `response` (0: none), exact from the "
      "chain's labels; raises StateSpaceTooLarge (tagged_max_states or memory_limit_gb) over a budget.");
  m.def(
      "solve_poisson",
      [](const QueueChain& c, const std::vector<std::vector<double>>& rhs, int32_t k, double tol, long max_iter) {
        PoissonSolution s;
        {
          InterruptGuard interrupt;
          py::gil_scoped_release release;
          s = solve_poisson(c, rhs, k, tol, max_iter);
        }
        py::array_t<double> h({static_cast<py::ssize_t>(s.h.size()), static_cast<py::ssize_t>(c.n)});
        auto w = h.mutable_unchecked<2>();
        for (size_t q = 0; q < s.h.size(); ++q)
          for (int32_t i = 0; i < c.n; ++i) w(static_cast<py::ssize_t>(q), i) = s.h[q][static_cast<size_t>(i)];
        py::dict d;
        d["h"] = h, d["residuals"] = s.residuals, d["fixed_state"] = s.fixed_state, d["iterations"] = s.iterations_each;
        d["status"] = to_string(s.status), d["note"] = s.note;
        py::dict sec;
        for (const auto& [name, v] : s.seconds) sec[py::str(name)] = v;
        d["seconds"] = sec;
        return d;
      },
      py::arg("chain"), py::arg("rhs"), py::arg("k") = -1, py::arg("tol") = 1e-13, py::arg("max_iter") = 2000,
      "Poisson's equation (I - P) h = b (continuous: -G h = b) for each row b of `rhs`, with h = 0 at state k "
      "(-1: the chain's recurrent state) and row k's equation dropped, by GMRES with the block preconditioner: "
      "dict with h (one row per right-hand side), residuals (relative L1, reduced system), fixed_state, "
      "iterations (GMRES steps of each right-hand side), status, note, seconds.");
}

}  // namespace aqmpy
