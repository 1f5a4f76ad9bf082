// Bindings of the transient analysis (analysis/transient_analysis.hpp): stepping
// options, analysis options and result, analyse_transient, initial laws.
#include "common.hpp"

#include "aqmchain/analysis/transient_analysis.hpp"

namespace aqmpy {

using namespace aqm;

void define_transient_analysis(py::module_& m) {
  py::class_<StepOptions> options_class(m, "StepOptions", "Options of exact slotted stepping.");
  options_class
      .def(py::init<>())
      .def_readwrite("steady_tol", &StepOptions::steady_tol)
      .def_readwrite("max_steps", &StepOptions::max_steps)
      .def("validate", &StepOptions::validate);
  def_option_statics(options_class);

  py::class_<TransientAnalysisOptions>(m, "TransientAnalysisOptions", "Options of analyse_transient.")
      .def(py::init<>())
      .def_property(
          "method", [](const TransientAnalysisOptions& o) { return to_string(o.method); },
          [](TransientAnalysisOptions& o, py::object v) {
            o.method = py::isinstance<TransientMethod>(v) ? v.cast<TransientMethod>()
                                                          : transient_method_from(py::str(v).cast<std::string>());
          })
      .def_readwrite("kernel", &TransientAnalysisOptions::kernel)
      .def_readwrite("step", &TransientAnalysisOptions::step)
      .def_readwrite("pmf_times", &TransientAnalysisOptions::pmf_times)
      .def_readwrite("observable_names", &TransientAnalysisOptions::observable_names)
      .def_readwrite("observables", &TransientAnalysisOptions::observables)
      .def_property(
          "progress", [](const TransientAnalysisOptions&) { return py::none(); },
          [](TransientAnalysisOptions& o, py::object f) {
            if (f.is_none()) {
              o.progress = nullptr;
              return;
            }
            // called from the computing thread with the GIL released: take it back
            // for the call; a Python exception in the callback stops the analysis.
            auto holder = std::make_shared<py::object>(f);
            o.progress = [holder](double t, double end) {
              py::gil_scoped_acquire gil;
              (*holder)(t, end);
            };
          })
      .def("validate", &TransientAnalysisOptions::validate);

  py::class_<TransientAnalysis> transient_analysis(m, "TransientAnalysis", "Metrics over time and the accounts of a transient analysis.");
  def_report(transient_analysis)
      .def_readonly("outputs", &TransientAnalysis::outputs)
      .def_readonly("steps", &TransientAnalysis::steps)
      .def_readonly("rejected_steps", &TransientAnalysis::rejected_steps)
      .def_readonly("error_sum", &TransientAnalysis::error_sum)
      .def_readonly("hump", &TransientAnalysis::hump)
      .def_readonly("roundoff", &TransientAnalysis::roundoff)
      .def_readonly("clipped_mass", &TransientAnalysis::clipped_mass)
      .def_property_readonly("times", [](py::object self) { return view(self.cast<const TransientAnalysis&>().times, self); })
      .def_property_readonly("phase", [](py::object self) { return view(self.cast<const TransientAnalysis&>().phase, self); })
      .def_property_readonly("values", [](py::object self) {
        py::list out;
        for (const auto& v : self.cast<const TransientAnalysis&>().values) out.append(view(v, self));
        return out;
      })
      .def_property_readonly("pmf_times", [](py::object self) { return view(self.cast<const TransientAnalysis&>().pmf_times, self); })
      .def_property_readonly("queue_pmf", [](py::object self) {
        py::list out;
        for (const auto& v : self.cast<const TransientAnalysis&>().queue_pmf) out.append(view(v, self));
        return out;
      })
      .def_property_readonly("observable_values", [](py::object self) {
        py::list out;
        for (const auto& v : self.cast<const TransientAnalysis&>().observable_values) out.append(view(v, self));
        return out;
      })
      .def_property_readonly("final_law", [](py::object self) { return view(self.cast<const TransientAnalysis&>().final_law, self); })
      .def_property_readonly("steady_at", [](const TransientAnalysis& r) { return r.steady_at; })
      .def_property_readonly("phase_boundaries", [](const TransientAnalysis& r) { return r.phase_boundaries; });

  m.def("transient_metric_names", &transient_metric_names, "Scalar metrics reported over time, in order.");
  m.def(
      "analyse_transient",
      [](std::vector<const QueueChain*> chains, const Scenario& scenario, const std::vector<double>& p0,
         const std::vector<double>& times, const TransientAnalysisOptions& options) {
        return analyse_transient(chains, scenario, p0, times, options);
      },
      py::arg("chains"), py::arg("scenario"), py::arg("p0"), py::arg("times"),
      py::arg("options") = TransientAnalysisOptions{}, py::call_guard<InterruptGuard, py::gil_scoped_release>(),
      "Metrics over time of a scenario (one chain per phase); p0 empty: the empty system.");
  m.def("empty_system_law", [](const QueueChain& c) { return copy(empty_system_law(c)); }, py::arg("chain"),
        "The empty system with the modulator in its stationary law.");
  m.def("point_law", [](const QueueChain& c, const std::vector<int32_t>& v) { return copy(point_law(c, v)); },
        py::arg("chain"), py::arg("values"), "All mass on one state (component values).");
}

}  // namespace aqmpy
