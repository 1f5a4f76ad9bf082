// aqmchain._core: thin pybind11 bindings of the C++ core.  No logic lives here:
// conversions (enums <-> strings, vectors <-> numpy), GIL release around long
// work, and translation of core exceptions into the Python hierarchy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "aqmchain/aqmchain.hpp"

namespace py = pybind11;
using namespace aqm;

namespace {

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

py::dict pairs(const std::vector<std::pair<std::string, double>>& v) {
  py::dict d;
  for (const auto& [k, x] : v) d[py::str(k)] = x;
  return d;
}

void raise(const char* type, const std::string& msg, const std::string* param = nullptr) {
  py::object t = py::module_::import("aqmchain._core").attr(type);
  py::object inst = t(msg);
  if (param) inst.attr("param") = *param;
  PyErr_SetObject(t.ptr(), inst.ptr());
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "aqmchain C++ core (model, chain builder, stationary solvers, metrics)";

  // ------------------------------------------------------------ exceptions
  auto new_exc = [&](const char* name, PyObject* base) {
    m.attr(name) = py::reinterpret_steal<py::object>(
        PyErr_NewException((std::string("aqmchain.") + name).c_str(), base, nullptr));
  };
  new_exc("ModelError", PyExc_ValueError);
  new_exc("StateSpaceTooLarge", m.attr("ModelError").ptr());
  new_exc("OptionError", PyExc_ValueError);
  new_exc("ReducibleChainError", PyExc_RuntimeError);
  new_exc("SolverError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StateSpaceTooLarge& e) {
      raise("StateSpaceTooLarge", e.what(), &e.param());
    } catch (const ModelError& e) {
      raise("ModelError", e.what(), &e.param());
    } catch (const OptionError& e) {
      raise("OptionError", e.what());
    } catch (const ReducibleChain& e) {
      raise("ReducibleChainError", e.what());
    } catch (const SolverError& e) {
      raise("SolverError", e.what());
    }
  });

  // ------------------------------------------------------------ model
  py::class_<Source>(m, "Source", "Slotted arrival source (SPEC 2.1). Build with the static constructors.")
      .def_static("bernoulli", &Source::bernoulli, py::arg("alpha"))
      .def_static("mmbp", &Source::mmbp, py::arg("matrix"), py::arg("arrival"))
      .def_static("ssmp", &Source::ssmp, py::arg("n"), py::arg("q"), py::arg("a"))
      .def_static("ssmp_from_mean", &Source::ssmp_from_mean, py::arg("mean"), py::arg("a"), py::arg("n"))
      .def_property_readonly("kind",
                             [](const Source& s) {
                               return s.kind == Source::Kind::Bernoulli ? "bernoulli"
                                      : s.kind == Source::Kind::SSMP    ? "ssmp"
                                                                        : "mmbp";
                             })
      .def_readonly("matrix", &Source::matrix)
      .def_readonly("arrival", &Source::arrival)
      .def_readonly("n", &Source::ssmp_n)
      .def_readonly("q", &Source::ssmp_q)
      .def_readonly("a", &Source::ssmp_a)
      .def_property_readonly("states", &Source::states)
      .def("mean_rate", &Source::mean_rate)
      .def("modulator_stationary", &Source::modulator_stationary)
      .def("__repr__", &Source::describe);
  m.def("ssmp_q_for_mean", &ssmp_q_for_mean, py::arg("mean"), py::arg("a"), py::arg("n"));

  py::class_<HurstReport>(m, "HurstReport")
      .def_readonly("asymptotic", &HurstReport::asymptotic)
      .def_readonly("asymptotic_valid", &HurstReport::asymptotic_valid)
      .def_readonly("variance_time", &HurstReport::variance_time)
      .def_readonly("levels", &HurstReport::levels)
      .def_readonly("variances", &HurstReport::variances);
  m.def("hurst", &hurst, py::arg("source"), py::arg("log2_lo") = 0, py::arg("log2_hi") = 20,
        "Asymptotic and exact variance-time Hurst parameter of a source (SPEC 2.1).");

  py::class_<Service>(m, "Service", "Geometric service (SPEC 2.2).")
      .def(py::init(&Service::geometric), py::arg("mu"))
      .def_static("geometric", &Service::geometric, py::arg("mu"))
      .def_readonly("mu", &Service::mu)
      .def("__repr__", [](const Service& s) { return detail::cat("Service.geometric(mu=", s.mu, ")"); });

  py::class_<DropFunction>(m, "DropFunction", "AQM drop function p(avg) (SPEC 2.4).")
      .def_static("none", &DropFunction::none)
      .def_static("red", &DropFunction::red, py::arg("min_th"), py::arg("max_th"), py::arg("p_max"))
      .def_static("gentle_red", &DropFunction::gentle_red, py::arg("min_th"), py::arg("max_th"), py::arg("p_max"))
      .def_static("dsred", &DropFunction::dsred, py::arg("k_l"), py::arg("k_h"), py::arg("gamma"))
      .def_static("sred", &DropFunction::sred, py::arg("min_th"), py::arg("q_max") = 0.0, py::arg("seg") = 0.0)
      .def_static("nlred", &DropFunction::nlred, py::arg("min_th"), py::arg("max_th"), py::arg("p_max"))
      .def_static("polynomial", &DropFunction::polynomial, py::arg("min_th"), py::arg("max_th"), py::arg("coeffs"))
      .def_static("table", &DropFunction::table, py::arg("points"))
      .def_property_readonly("kind", &DropFunction::name)
      .def_readonly("lo", &DropFunction::lo)
      .def_readonly("hi", &DropFunction::hi)
      .def_readonly("p_max", &DropFunction::p_max)
      .def_readonly("gamma", &DropFunction::gamma)
      .def_readonly("seg", &DropFunction::seg)
      .def_readonly("coeffs", &DropFunction::coeffs)
      .def_readonly("points", &DropFunction::points)
      .def(
          "__call__",
          [](const DropFunction& f, py::object x) -> py::object {
            if (py::isinstance<py::float_>(x) || py::isinstance<py::int_>(x)) return py::float_(f(x.cast<double>()));
            auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(x);
            if (!a) throw py::type_error("DropFunction expects a number or an array of numbers");
            py::array_t<double> out(a.request().shape);
            const double* in = a.data();
            double* o = out.mutable_data();
            for (py::ssize_t i = 0; i < a.size(); ++i) o[i] = f(in[i]);
            return std::move(out);
          },
          py::arg("avg"), "p(avg), elementwise for arrays")
      .def("__repr__", [](const DropFunction& f) { return "DropFunction." + f.name() + "(...)"; });

  py::class_<Aqm>(m, "Aqm", "EWMA filter, drop function, drop policy and ECN (SPEC 2.3-2.5).")
      .def(py::init([](DropFunction drop, double w, const std::string& update, const std::string& policy, double ecn) {
             Aqm a;
             a.drop = std::move(drop);
             a.w = w;
             a.update = update_rule_from(update);
             a.policy = drop_policy_from(policy);
             a.ecn = ecn;
             a.validate();
             return a;
           }),
           py::kw_only(), py::arg("drop") = DropFunction::none(), py::arg("w") = 0.002,
           py::arg("update") = "per_slot", py::arg("policy") = "tail", py::arg("ecn") = 0.0)
      .def_readonly("drop", &Aqm::drop)
      .def_readonly("w", &Aqm::w)
      .def_readonly("ecn", &Aqm::ecn)
      .def_property_readonly("update", [](const Aqm& a) { return to_string(a.update); })
      .def_property_readonly("policy", [](const Aqm& a) { return to_string(a.policy); });

  py::class_<GridSpec>(m, "GridSpec", "avg grid: uniform step 1/k, custom points, or the seeds' flags (SPEC 4).")
      .def(py::init([](int k, std::vector<double> points, const std::string& mapping) {
             GridSpec g;
             g.k = k;
             g.points = std::move(points);
             g.mapping = mapping_from(mapping);
             return g;
           }),
           py::kw_only(), py::arg("k") = 4, py::arg("points") = std::vector<double>{}, py::arg("mapping") = "split")
      .def_readonly("k", &GridSpec::k)
      .def_readonly("points", &GridSpec::points)
      .def_property_readonly("mapping", [](const GridSpec& g) { return to_string(g.mapping); })
      .def("resolve", &GridSpec::resolve, py::arg("buffer"));

  py::class_<Model>(m, "Model", "A complete queue model (SPEC 2-4).")
      .def(py::init([](int buffer, Source source, Service service, Aqm aqm, GridSpec grid) {
             Model md;
             md.buffer = buffer;
             md.source = std::move(source);
             md.service = service;
             md.aqm = std::move(aqm);
             md.grid = std::move(grid);
             md.validate();
             return md;
           }),
           py::kw_only(), py::arg("buffer"), py::arg("source"), py::arg("service"), py::arg("aqm") = Aqm{},
           py::arg("grid") = GridSpec{})
      .def_readonly("buffer", &Model::buffer)
      .def_readonly("source", &Model::source)
      .def_readonly("service", &Model::service)
      .def_readonly("aqm", &Model::aqm)
      .def_readonly("grid", &Model::grid)
      .def("validate", &Model::validate)
      .def("resolved_drop", &Model::resolved_drop);

  // ------------------------------------------------------------ chain
  m.def(
      "estimate_chain",
      [](const Model& md) {
        const ChainEstimate e = estimate_chain(md);
        py::dict d;
        d["product_states"] = e.product_states;
        d["max_nnz"] = e.max_nnz;
        d["bytes"] = e.bytes;
        return d;
      },
      py::arg("model"), "Upper bounds on states, transitions and builder memory, before building.");

  py::class_<Chain>(m, "Chain", "The DTMC of a model: P (CSR, rows = from-state), labels, event probabilities.")
      .def_readonly("model", &Chain::model)
      .def_readonly("n", &Chain::n)
      .def_property_readonly("nnz", &Chain::nnz)
      .def_readonly("recurrent_state", &Chain::recurrent_state)
      .def_property_readonly("indptr", [](py::object self) { return view(self.cast<const Chain&>().rowptr, self); })
      .def_property_readonly("indices", [](py::object self) { return view(self.cast<const Chain&>().col, self); })
      .def_property_readonly("data", [](py::object self) { return view(self.cast<const Chain&>().val, self); })
      .def_property_readonly("grid", [](py::object self) { return view(self.cast<const Chain&>().grid, self); })
      .def_property_readonly("level", [](py::object self) { return view(self.cast<const Chain&>().level, self); })
      .def_property_readonly("avg_index",
                             [](py::object self) { return view(self.cast<const Chain&>().avg_index, self); })
      .def_property_readonly("modulator",
                             [](py::object self) { return view(self.cast<const Chain&>().modulator, self); })
      .def_property_readonly("p_arrival",
                             [](py::object self) { return view(self.cast<const Chain&>().p_arrival, self); })
      .def_property_readonly("p_aqm_drop",
                             [](py::object self) { return view(self.cast<const Chain&>().p_aqm_drop, self); })
      .def_property_readonly("p_mark", [](py::object self) { return view(self.cast<const Chain&>().p_mark, self); })
      .def_property_readonly("p_overflow",
                             [](py::object self) { return view(self.cast<const Chain&>().p_overflow, self); })
      .def_property_readonly("p_admit", [](py::object self) { return view(self.cast<const Chain&>().p_admit, self); })
      .def_property_readonly("p_depart",
                             [](py::object self) { return view(self.cast<const Chain&>().p_depart, self); })
      .def_property_readonly("report",
                             [](const Chain& c) {
                               const BuildReport& r = c.report;
                               py::dict d;
                               d["product_states"] = r.product_states;
                               d["estimated_bytes"] = r.estimated_bytes;
                               d["seconds_explore"] = r.seconds_explore;
                               d["seconds_assemble"] = r.seconds_assemble;
                               d["seconds_classes"] = r.seconds_classes;
                               d["max_row_error"] = r.max_row_error;
                               d["closed_classes"] = r.closed_classes;
                               d["transient_states"] = r.transient_states;
                               d["warnings"] = r.warnings;
                               return d;
                             })
      .def("index_of", &Chain::index_of, py::arg("level"), py::arg("avg_index"), py::arg("modulator"))
      .def(
          "residual",
          [](const Chain& c, const std::vector<double>& pi) { return stationary_residual(c, pi); }, py::arg("pi"),
          "||pi P - pi||_1");

  m.def(
      "build_chain",
      [](const Model& md, double memory_limit) {
        BuildOptions o;
        o.memory_limit_bytes = memory_limit;
        return build_chain(md, o);
      },
      py::arg("model"), py::arg("memory_limit") = BuildOptions{}.memory_limit_bytes,
      py::call_guard<py::gil_scoped_release>());

  // ------------------------------------------------------------ solvers
  py::class_<StationaryOptions>(m, "StationaryOptions")
      .def(py::init([](const std::string& method, double tol, long max_iter, int ncv, int refine_steps,
                       int check_every, std::vector<double> x0, std::string ordering, std::string strategy,
                       int coarse_size, int smoothing_sweeps, int cycle_gamma, double direct_max_gb,
                       double auto_direct_max_flops) {
             StationaryOptions o;
             o.method = method_from(method);
             o.tol = tol;
             o.max_iter = max_iter;
             o.ncv = ncv;
             o.refine_steps = refine_steps;
             o.check_every = check_every;
             o.x0 = std::move(x0);
             o.ordering = std::move(ordering);
             o.strategy = std::move(strategy);
             o.coarse_size = coarse_size;
             o.smoothing_sweeps = smoothing_sweeps;
             o.cycle_gamma = cycle_gamma;
             o.direct_max_gb = direct_max_gb;
             o.auto_direct_max_flops = auto_direct_max_flops;
             o.validate();
             return o;
           }),
           py::kw_only(), py::arg("method") = "auto", py::arg("tol") = 1e-12, py::arg("max_iter") = 0,
           py::arg("ncv") = 0, py::arg("refine_steps") = 6, py::arg("check_every") = 10,
           py::arg("x0") = std::vector<double>{}, py::arg("ordering") = "amd", py::arg("strategy") = "auto",
           py::arg("coarse_size") = 500, py::arg("smoothing_sweeps") = 3, py::arg("cycle_gamma") = 2,
           py::arg("direct_max_gb") = StationaryOptions{}.direct_max_gb,
           py::arg("auto_direct_max_flops") = StationaryOptions{}.auto_direct_max_flops)
      .def_property_readonly("method", [](const StationaryOptions& o) { return to_string(o.method); })
      .def_readonly("tol", &StationaryOptions::tol)
      .def_readonly("max_iter", &StationaryOptions::max_iter);

  py::class_<StationaryResult>(m, "StationaryResult")
      .def_property_readonly("pi", [](py::object self) { return view(self.cast<const StationaryResult&>().pi, self); })
      .def_property_readonly("converged", &StationaryResult::converged)
      .def_property_readonly("status",
                             [](const StationaryResult& r) { return r.converged() ? "converged" : "not_converged"; })
      .def_property_readonly("requested", [](const StationaryResult& r) { return to_string(r.requested); })
      .def_property_readonly("method", [](const StationaryResult& r) { return to_string(r.method); })
      .def_readonly("fallback", &StationaryResult::fallback)
      .def_readonly("note", &StationaryResult::note)
      .def_readonly("residual", &StationaryResult::residual)
      .def_readonly("mass_error", &StationaryResult::mass_error)
      .def_readonly("clipped_mass", &StationaryResult::clipped_mass)
      .def_readonly("iterations", &StationaryResult::iterations)
      .def_readonly("matvecs", &StationaryResult::matvecs)
      .def_property_readonly("seconds", [](const StationaryResult& r) { return pairs(r.seconds); })
      .def_property_readonly("extra", [](const StationaryResult& r) { return pairs(r.extra); });

  py::class_<DirectSolver>(m, "DirectSolver")
      .def(py::init<StationaryOptions>(), py::arg("options") = StationaryOptions{})
      .def("solve", &DirectSolver::solve, py::arg("chain"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("analyses", &DirectSolver::analyses)
      .def_property_readonly("solves", &DirectSolver::solves);

  m.def("solve_stationary", &solve_stationary, py::arg("chain"), py::arg("options") = StationaryOptions{},
        py::call_guard<py::gil_scoped_release>());

  // ------------------------------------------------------------ metrics
  py::class_<Metrics>(m, "Metrics")
      .def_readonly("arrival_rate", &Metrics::arrival_rate)
      .def_readonly("throughput", &Metrics::throughput)
      .def_readonly("loss", &Metrics::loss)
      .def_readonly("loss_aqm", &Metrics::loss_aqm)
      .def_readonly("loss_overflow", &Metrics::loss_overflow)
      .def_readonly("mark_prob", &Metrics::mark_prob)
      .def_readonly("aqm_decision_prob", &Metrics::aqm_decision_prob)
      .def_property_readonly("system_pmf", [](const Metrics& x) { return copy(x.system_pmf); })
      .def_property_readonly("queue_pmf", [](const Metrics& x) { return copy(x.queue_pmf); })
      .def_property_readonly("avg_pmf", [](const Metrics& x) { return copy(x.avg_pmf); })
      .def_readonly("mean_system", &Metrics::mean_system)
      .def_readonly("var_system", &Metrics::var_system)
      .def_readonly("mean_queue", &Metrics::mean_queue)
      .def_readonly("var_queue", &Metrics::var_queue)
      .def_readonly("mean_avg", &Metrics::mean_avg)
      .def_readonly("response_available", &Metrics::response_available)
      .def_readonly("response_note", &Metrics::response_note)
      .def_property_readonly("response_pmf", [](const Metrics& x) { return copy(x.response_pmf); })
      .def_readonly("mean_response", &Metrics::mean_response)
      .def_readonly("var_response", &Metrics::var_response)
      .def_readonly("response_truncated", &Metrics::response_truncated)
      .def_readonly("littles_law_error", &Metrics::littles_law_error)
      .def_readonly("response_method", &Metrics::response_method)
      .def_readonly("pushed_out_prob", &Metrics::pushed_out_prob)
      .def_readonly("admitted_rate", &Metrics::admitted_rate)
      .def_readonly("mean_sojourn", &Metrics::mean_sojourn)
      .def_readonly("response_steps", &Metrics::response_steps)
      .def_readonly("response_states", &Metrics::response_states);

  m.def(
      "compute_metrics",
      [](const Chain& c, const std::vector<double>& pi, const std::string& response, double tail_mass,
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
      },
      py::arg("chain"), py::arg("pi"), py::arg("response") = "auto", py::arg("tail_mass") = 1e-12,
      py::arg("max_steps") = 10000000, py::arg("memory_limit") = 8.0 * 1024 * 1024 * 1024);

  // ------------------------------------------------------------ simulator
  py::class_<SimOptions>(m, "SimOptions")
      .def(py::init([](int64_t slots, int64_t warmup, int replications, uint64_t seed, int batches, bool discretised,
                       int64_t sample_every, int threads) {
             SimOptions o;
             o.slots = slots;
             o.warmup = warmup;
             o.replications = replications;
             o.seed = seed;
             o.batches = batches;
             o.discretised = discretised;
             o.sample_every = sample_every;
             o.threads = threads;
             o.validate();
             return o;
           }),
           py::kw_only(), py::arg("slots"), py::arg("warmup") = -1, py::arg("replications") = 4,
           py::arg("seed") = 1, py::arg("batches") = 20, py::arg("discretised") = false,
           py::arg("sample_every") = 0, py::arg("threads") = 0)
      .def_readonly("slots", &SimOptions::slots)
      .def_readonly("warmup", &SimOptions::warmup)
      .def_readonly("replications", &SimOptions::replications)
      .def_readonly("seed", &SimOptions::seed)
      .def_readonly("batches", &SimOptions::batches)
      .def_readonly("discretised", &SimOptions::discretised);

  py::class_<Estimate>(m, "Estimate")
      .def_readonly("value", &Estimate::value)
      .def_readonly("half_width", &Estimate::half_width);
  py::class_<SimResult>(m, "SimResult")
      .def_property_readonly("estimates",
                             [](const SimResult& r) {
                               py::dict d;
                               const std::pair<const char*, const Estimate*> items[] = {
                                   {"arrival_rate", &r.arrival_rate}, {"throughput", &r.throughput},
                                   {"loss", &r.loss}, {"loss_aqm", &r.loss_aqm},
                                   {"loss_overflow", &r.loss_overflow}, {"mark_prob", &r.mark_prob},
                                   {"pushed_out_prob", &r.pushed_out_prob}, {"mean_system", &r.mean_system},
                                   {"var_system", &r.var_system}, {"mean_queue", &r.mean_queue},
                                   {"var_queue", &r.var_queue}, {"mean_avg", &r.mean_avg},
                                   {"mean_response", &r.mean_response}, {"var_response", &r.var_response}};
                               for (const auto& [k, e] : items) d[k] = py::make_tuple(e->value, e->half_width);
                               return d;
                             })
      .def_property_readonly("pmfs",
                             [](const SimResult& r) {
                               py::dict d;
                               d["system_pmf"] = py::make_tuple(copy(r.system_pmf.value), copy(r.system_pmf.half_width));
                               d["queue_pmf"] = py::make_tuple(copy(r.queue_pmf.value), copy(r.queue_pmf.half_width));
                               d["response_pmf"] =
                                   py::make_tuple(copy(r.response_pmf.value), copy(r.response_pmf.half_width));
                               return d;
                             })
      .def_property_readonly("series",
                             [](const SimResult& r) {
                               py::dict d;
                               d["slot"] = copy(r.series.slot);
                               d["level"] = copy(r.series.level);
                               d["avg"] = copy(r.series.avg);
                               d["drops"] = copy(r.series.drops);
                               return d;
                             })
      .def_readonly("measured_slots", &SimResult::measured_slots)
      .def_readonly("served_packets", &SimResult::served_packets)
      .def_readonly("observations", &SimResult::observations)
      .def_readonly("seconds", &SimResult::seconds)
      .def_readonly("slots_per_second", &SimResult::slots_per_second)
      .def_readonly("threads", &SimResult::threads);

  m.def("simulate", &simulate, py::arg("model"), py::arg("options"), py::call_guard<py::gil_scoped_release>());
}
