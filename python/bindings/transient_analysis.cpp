// Bindings of the transient analysis (analysis/transient_analysis.hpp): stepping
// options, analysis options and result, analyse_transient, initial laws.
#include "common.hpp"

#include "aqmchain/analysis/passage.hpp"
#include "aqmchain/analysis/transient_analysis.hpp"

namespace aqmpy {

using namespace aqm;

namespace {

/// A Python callable (or None) as a progress callback (t, end).  It is called from the computing
/// thread with the GIL released: it takes the GIL back for the call; a Python exception in the
/// callback stops the analysis.
std::function<void(double, double)> progress_callback(py::object f) {
  if (f.is_none()) return nullptr;
  auto holder = std::make_shared<py::object>(std::move(f));
  return [holder](double t, double end) {
    py::gil_scoped_acquire gil;
    (*holder)(t, end);
  };
}

}  // namespace

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
          [](TransientAnalysisOptions& o, py::object f) { o.progress = progress_callback(std::move(f)); })
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

  // first passage (analysis/passage.hpp)
  m.def("passage_methods", []() {
    std::vector<std::string> out;
    for (PassageMethod x : kAllPassageMethods) out.push_back(to_string(x));
    return out;
  }, "The method names of analyse_passage, in order.");
  py::class_<PassageAnalysisOptions> passage_options(m, "PassageAnalysisOptions", "Options of analyse_passage (the chain's first passage).");
  passage_options.def(py::init<>())
      .def_property(
          "method", [](const PassageAnalysisOptions& o) { return to_string(o.method); },
          [](PassageAnalysisOptions& o, py::object v) { o.method = passage_method_from(py::str(v).cast<std::string>()); })
      .def_readwrite("tol", &PassageAnalysisOptions::tol)
      .def_readwrite("max_steps", &PassageAnalysisOptions::max_steps)
      .def_readwrite("solve_tol", &PassageAnalysisOptions::solve_tol)
      .def_readwrite("solve_max_iter", &PassageAnalysisOptions::solve_max_iter)
      .def_readwrite("check_every", &PassageAnalysisOptions::check_every)
      .def_readwrite("max_inverse_iterations", &PassageAnalysisOptions::max_inverse_iterations)
      .def_readwrite("exact_slots", &PassageAnalysisOptions::exact_slots)
      .def_readwrite("shift", &PassageAnalysisOptions::shift)
      .def_readwrite("krylov_dim", &PassageAnalysisOptions::krylov_dim)
      .def_readwrite("kernel", &PassageAnalysisOptions::kernel)
      .def_readwrite("reward_names", &PassageAnalysisOptions::reward_names)
      .def_readwrite("rewards", &PassageAnalysisOptions::rewards)
      .def_readwrite("cumulative", &PassageAnalysisOptions::cumulative)
      .def_property(
          "progress", [](const PassageAnalysisOptions&) { return py::none(); },
          [](PassageAnalysisOptions& o, py::object f) { o.progress = progress_callback(std::move(f)); })
      .def("validate", &PassageAnalysisOptions::validate);
  def_option_statics(passage_options);

  py::class_<PassageAnalysis> passage(m, "PassageAnalysis", "First-passage distribution, mean and rewards, with accounts.");
  def_report(passage)
      .def_readonly("outputs", &PassageAnalysis::outputs)
      .def_readonly("reach_probability", &PassageAnalysis::reach_probability)
      .def_readonly("never_probability", &PassageAnalysis::never_probability)
      .def_readonly("mean", &PassageAnalysis::mean)
      .def_readonly("mean_residual", &PassageAnalysis::mean_residual)
      .def_readonly("reward_names", &PassageAnalysis::reward_names)
      .def_readonly("rewards_until", &PassageAnalysis::rewards_until)
      .def_readonly("rewards_cumulative", &PassageAnalysis::rewards_cumulative)
      .def_readonly("cumulative_error", &PassageAnalysis::cumulative_error)
      .def_readonly("states", &PassageAnalysis::states)
      .def_readonly("target_states", &PassageAnalysis::target_states)
      .def_readonly("never_states", &PassageAnalysis::never_states)
      .def_readonly("rho", &PassageAnalysis::rho)
      .def_readonly("qsd_residual", &PassageAnalysis::qsd_residual)
      .def_readonly("switch_time", &PassageAnalysis::switch_time)
      .def_readonly("inverse_iterations", &PassageAnalysis::inverse_iterations)
      .def_readonly("solves", &PassageAnalysis::solves)
      .def_readonly("gmres_iterations", &PassageAnalysis::gmres_iterations)
      .def_readonly("steps", &PassageAnalysis::steps)
      .def_readonly("basis", &PassageAnalysis::basis)
      .def_readonly("gamma", &PassageAnalysis::gamma)
      .def_readonly("times", &PassageAnalysis::times)
      .def_readonly("cdf", &PassageAnalysis::cdf)
      .def_readonly("survival", &PassageAnalysis::survival)
      .def_readonly("error_bound", &PassageAnalysis::error_bound);
  m.def(
      "analyse_passage",
      [](const QueueChain& c, const std::vector<int32_t>& target, const std::vector<double>& p0,
         const std::vector<double>& times, const PassageAnalysisOptions& options) {
        std::vector<char> t(target.size());
        for (size_t i = 0; i < target.size(); ++i) t[i] = target[i] != 0;
        return analyse_passage(c, t, p0, times, options);
      },
      py::arg("chain"), py::arg("target"), py::arg("p0"), py::arg("times"), py::arg("options") = PassageAnalysisOptions{},
      py::call_guard<InterruptGuard, py::gil_scoped_release>(),
      "First passage into the states with target[s] != 0 from the law p0 at the sorted times.");
}

}  // namespace aqmpy
