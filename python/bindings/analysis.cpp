// Bindings of the analysis layer: metrics (and response times) from a stationary vector.
#include "common.hpp"

#include "aqmchain/analysis/metrics.hpp"

namespace aqmpy {

using namespace aqm;

namespace {
Metrics metrics(const Chain& c, const std::vector<double>& pi, const std::string& response, double tail_mass,
                long max_steps, double memory_limit) {
  if (response != "auto" && response != "tagged" && response != "none")
    throw OptionError("option 'response' must be one of auto, tagged, none, got '" + response + "'");
  MetricsOptions o;
  o.response = response;
  o.tagged.tail_mass = tail_mass;
  o.tagged.max_steps = max_steps;
  o.tagged.memory_limit_bytes = memory_limit;
  py::gil_scoped_release release;
  return compute_metrics(c, pi, o);
}
}  // namespace

void define_analysis(py::module_& m) {
  py::class_<Metrics> cls(m, "Metrics");
  // scalar metrics, by name (the Python layer reads the same list)
  const std::pair<const char*, double Metrics::*> scalars[] = {
      {"arrival_rate", &Metrics::arrival_rate}, {"throughput", &Metrics::throughput},
      {"loss", &Metrics::loss}, {"loss_aqm", &Metrics::loss_aqm}, {"loss_overflow", &Metrics::loss_overflow},
      {"mark_prob", &Metrics::mark_prob}, {"aqm_decision_prob", &Metrics::aqm_decision_prob},
      {"mean_system", &Metrics::mean_system}, {"var_system", &Metrics::var_system},
      {"mean_queue", &Metrics::mean_queue}, {"var_queue", &Metrics::var_queue}, {"mean_avg", &Metrics::mean_avg},
      {"mean_response", &Metrics::mean_response}, {"var_response", &Metrics::var_response},
      {"response_truncated", &Metrics::response_truncated}, {"littles_law_error", &Metrics::littles_law_error},
      {"pushed_out_prob", &Metrics::pushed_out_prob}, {"admitted_rate", &Metrics::admitted_rate},
      {"mean_sojourn", &Metrics::mean_sojourn}};
  for (const auto& [name, field] : scalars) cls.def_readonly(name, field);
  cls.def_property_readonly("system_pmf", [](const Metrics& x) { return copy(x.system_pmf); })
      .def_property_readonly("queue_pmf", [](const Metrics& x) { return copy(x.queue_pmf); })
      .def_property_readonly("avg_pmf", [](const Metrics& x) { return copy(x.avg_pmf); })
      .def_property_readonly("response_pmf", [](const Metrics& x) { return copy(x.response_pmf); })
      .def_readonly("response_available", &Metrics::response_available)
      .def_readonly("response_note", &Metrics::response_note)
      .def_readonly("response_method", &Metrics::response_method)
      .def_readonly("response_steps", &Metrics::response_steps)
      .def_readonly("response_states", &Metrics::response_states);

  m.def("compute_metrics", &metrics, py::arg("chain"), py::arg("pi"), py::arg("response") = "auto",
        py::arg("tail_mass") = ResponseOptions{}.tail_mass, py::arg("max_steps") = ResponseOptions{}.max_steps,
        py::arg("memory_limit") = ResponseOptions{}.memory_limit_bytes);
}

}  // namespace aqmpy
