// Bindings of the simulator: options (fields written once, in the def_readwrite
// calls below), estimates, pmfs, time series.
#include "common.hpp"

#include <algorithm>
#include <cctype>

#include "aqmchain/simulation/ensemble.hpp"
#include "aqmchain/simulation/passage.hpp"
#include "aqmchain/simulation/simulator.hpp"

namespace aqmpy {

using namespace aqm;

namespace {

py::dict estimates(const SimResult& r) {
  py::dict d;
  const std::pair<const char*, const Estimate*> items[] = {
      {"arrival_rate", &r.arrival_rate},   {"throughput", &r.throughput},
      {"loss", &r.loss},                   {"loss_aqm", &r.loss_aqm},
      {"loss_overflow", &r.loss_overflow}, {"mark_prob", &r.mark_prob},
      {"pushed_out_prob", &r.pushed_out_prob}, {"mean_system", &r.mean_system},
      {"var_system", &r.var_system},       {"mean_queue", &r.mean_queue},
      {"var_queue", &r.var_queue},         {"mean_avg", &r.mean_avg},
      {"mean_response", &r.mean_response}, {"var_response", &r.var_response}};
  for (const auto& [k, e] : items) d[k] = py::make_tuple(e->value, e->half_width);
  if (r.stateful) {  // stateful AQM only
    d["mean_count"] = py::make_tuple(r.mean_count.value, r.mean_count.half_width);
    d["mean_p_max"] = py::make_tuple(r.mean_p_max.value, r.mean_p_max.half_width);
    d["mean_max_th"] = py::make_tuple(r.mean_max_th.value, r.mean_max_th.half_width);
  }
  if (r.class_aware) {
    d["loss_flow_compare"] = py::make_tuple(r.loss_flow_compare.value, r.loss_flow_compare.half_width);
    d["fairness"] = py::make_tuple(r.fairness.value, r.fairness.half_width);
  }
  return d;
}

/// Class-aware runs: [{"name", "estimates": {metric: (value, half-width)}, "response_pmf": (pmf, half-widths)}].
py::list class_estimates(const SimResult& r) {
  py::list out;
  for (const ClassEstimate& c : r.classes) {
    py::dict e;
    const std::pair<const char*, const Estimate*> items[] = {
        {"arrival_rate", &c.arrival_rate},   {"loss", &c.loss},
        {"loss_aqm", &c.loss_aqm},           {"loss_overflow", &c.loss_overflow},
        {"loss_flow_compare", &c.loss_flow_compare}, {"loss_pushed_out", &c.loss_pushed_out},
        {"mark_prob", &c.mark_prob},         {"throughput", &c.throughput},
        {"throughput_share", &c.throughput_share}, {"mean_response", &c.mean_response},
        {"var_response", &c.var_response},   {"mean_queue", &c.mean_queue},
        {"queue_share", &c.queue_share}};
    for (const auto& [k, v] : items) e[k] = py::make_tuple(v->value, v->half_width);
    py::dict d;
    d["name"] = c.name;
    d["estimates"] = e;
    d["response_pmf"] = py::make_tuple(copy(c.response_pmf.value), copy(c.response_pmf.half_width));
    out.append(d);
  }
  return out;
}

/// Class-aware runs: [{"class", "flow", "throughput": (value, hw), "loss": (value, hw)}].
py::list flow_estimates(const SimResult& r) {
  py::list out;
  for (const FlowEstimate& f : r.flows) {
    py::dict d;
    d["class"] = f.cls;
    d["flow"] = f.flow;
    d["throughput"] = py::make_tuple(f.throughput.value, f.throughput.half_width);
    d["loss"] = py::make_tuple(f.loss.value, f.loss.half_width);
    out.append(d);
  }
  return out;
}

py::dict pmfs(const SimResult& r) {
  py::dict d;
  d["system_pmf"] = py::make_tuple(copy(r.system_pmf.value), copy(r.system_pmf.half_width));
  d["queue_pmf"] = py::make_tuple(copy(r.queue_pmf.value), copy(r.queue_pmf.half_width));
  d["response_pmf"] = py::make_tuple(copy(r.response_pmf.value), copy(r.response_pmf.half_width));
  return d;
}

py::dict series(const SimResult& r) {
  py::dict d;
  d["slot"] = copy(r.series.slot);
  d["level"] = copy(r.series.level);
  d["avg"] = copy(r.series.avg);
  d["drops"] = copy(r.series.drops);
  return d;
}

}  // namespace

void define_simulator(py::module_& m) {
  py::class_<SimOptions> simoptions_class(m, "SimOptions", "Options of the simulator; keyword arguments set the fields (each checked, then validated).");
  const std::string max_slots = std::to_string(SimLimits::max_slots), max_reps = std::to_string(SimLimits::max_replications),
                    max_batches = std::to_string(SimLimits::max_batches), max_threads = std::to_string(SimLimits::max_threads);
  static const std::string limits[] = {max_slots, max_reps, max_batches, max_threads};  // the C strings outlive the lambdas
  def_field(simoptions_class, "slots", &SimOptions::slots, "slots per replication, warm-up included", "1", limits[0].c_str());
  def_field(simoptions_class, "warmup", &SimOptions::warmup, "slots discarded at the start (-1: slots / 10)");
  def_field(simoptions_class, "replications", &SimOptions::replications, "independent replications", "1", limits[1].c_str());
  def_field(simoptions_class, "seed", &SimOptions::seed, "replication r uses the xoshiro256** stream of seed jumped r times");
  def_field(simoptions_class, "batches", &SimOptions::batches, "batch means per replication", "1", limits[2].c_str());
  def_field(simoptions_class, "discretised", &SimOptions::discretised, "avg on the chain's grid with its mapping");
  def_field(simoptions_class, "sample_every", &SimOptions::sample_every, "time series period in slots (0: none)", "0");
  def_field(simoptions_class, "threads", &SimOptions::threads, "threads (0: all cores)", "0", limits[3].c_str());
  def_field(simoptions_class, "max_response", &SimOptions::max_response, "response-time histogram length");
  def_field(simoptions_class, "memory_limit_bytes", &SimOptions::memory_limit_bytes, "the memory budget (bytes)");
  def_kwargs_init(simoptions_class);
  simoptions_class
      .def("validate", &SimOptions::validate)
      .def_static(
          "int_ranges",
          []() {
            py::dict o;
            o["slots"] = py::make_tuple(int64_t{1}, SimLimits::max_slots);
            o["replications"] = py::make_tuple(1, SimLimits::max_replications);
            o["batches"] = py::make_tuple(1, SimLimits::max_batches);
            o["threads"] = py::make_tuple(0, SimLimits::max_threads);
            return o;
          },
          "Ranges {name: (lo, hi)} of the simulator's counts (defined once, in the core).");
  def_option_statics(simoptions_class);

  py::class_<Estimate>(m, "Estimate")
      .def_readonly("value", &Estimate::value)
      .def_readonly("half_width", &Estimate::half_width);
  py::class_<SimResult>(m, "SimResult")
      .def_property_readonly("estimates", &estimates)
      .def_property_readonly("pmfs", &pmfs)
      .def_property_readonly("series", &series)
      .def_readonly("class_aware", &SimResult::class_aware)
      .def_property_readonly("class_estimates", &class_estimates)
      .def_property_readonly("flow_estimates", &flow_estimates)
      .def_readonly("measured_slots", &SimResult::measured_slots)
      .def_readonly("served_packets", &SimResult::served_packets)
      .def_readonly("observations", &SimResult::observations)
      .def_readonly("seconds", &SimResult::seconds)
      .def_readonly("slots_per_second", &SimResult::slots_per_second)
      .def_readonly("events", &SimResult::events)
      .def_readonly("events_per_second", &SimResult::events_per_second)
      .def_readonly("threads", &SimResult::threads);

  m.def("simulate", &simulate, py::arg("model"), py::arg("options"), py::call_guard<InterruptGuard, py::gil_scoped_release>());

  m.def(
      "arrival_trace",
      [](const Source& source, int64_t slots, uint64_t seed) {
        std::vector<uint8_t> x;
        {
          InterruptGuard interrupt;
          py::gil_scoped_release release;
          x = arrival_trace(source, slots, seed);
        }
        py::array_t<uint8_t> out(static_cast<py::ssize_t>(x.size()));
        std::copy(x.begin(), x.end(), out.mutable_data());
        return out;
      },
      py::arg("source"), py::arg("slots"), py::arg("seed") = 1,
      "Arrival indicators (0/1, uint8; a batch source: the number of arrivals) of a slotted source over `slots` "
      "slots, modulator started from its stationary law; xoshiro256** stream of `seed`.");

  m.def(
      "simulate_trace",
      [](const Model& model, py::array_t<int32_t, py::array::c_style | py::array::forcecast> counts, int64_t warmup,
         int batches, uint64_t seed) {
        if (counts.ndim() != 1) fail_param("trace", "a one-dimensional array of per-slot counts", counts.ndim());
        std::vector<int32_t> c(counts.data(), counts.data() + counts.size());
        TraceSimResult r;
        {
          InterruptGuard interrupt;
          py::gil_scoped_release release;
          r = simulate_trace(model, c, warmup, batches, seed);
        }
        auto i64 = [](const std::vector<int64_t>& v) { return py::array_t<int64_t>(static_cast<py::ssize_t>(v.size()), v.data()); };
        auto f64 = [](const std::vector<double>& v) { return py::array_t<double>(static_cast<py::ssize_t>(v.size()), v.data()); };
        py::dict d;
        d["slots"] = r.slots, d["warmup"] = r.warmup, d["batches"] = r.batches;
        d["arrivals"] = i64(r.arrivals), d["aqm"] = i64(r.aqm), d["marks"] = i64(r.marks);
        d["overflow"] = i64(r.overflow), d["departures"] = i64(r.departures), d["length"] = i64(r.length);
        d["sum_n"] = f64(r.sum_n), d["sum_n2"] = f64(r.sum_n2), d["sum_q"] = f64(r.sum_q), d["sum_q2"] = f64(r.sum_q2);
        d["sum_avg"] = f64(r.sum_avg), d["hist_n"] = i64(r.hist_n);
        return d;
      },
      py::arg("model"), py::arg("counts"), py::arg("warmup"), py::arg("batches"), py::arg("seed"),
      "Trace-driven simulation: the model's queue fed by per-slot packet counts (a slot with k packets is a batch "
      "of k); per-batch sums (aqmchain.simulate_trace builds the estimates).");

  py::class_<EnsembleOptions> ensembleoptions_class(m, "EnsembleOptions",
                              "Options of simulate_scenario; keyword arguments set the fields (each checked, then "
                              "validated).");
  def_field(ensembleoptions_class, "replications", &EnsembleOptions::replications, "Number of independent replications.");
  def_field(ensembleoptions_class, "seed", &EnsembleOptions::seed, "Replication r uses the xoshiro256** stream of `seed` jumped r times.");
  def_field(ensembleoptions_class, "threads", &EnsembleOptions::threads, "Threads (0: all cores); the result does not depend on it.");
  def_field(ensembleoptions_class, "discretised", &EnsembleOptions::discretised,
            "True: follow the chain's grids (the chain's exact law); False: avg exact.");
  def_field(ensembleoptions_class, "memory_limit_bytes", &EnsembleOptions::memory_limit_bytes, "The memory budget (bytes).");
  def_kwargs_init(ensembleoptions_class);
  ensembleoptions_class
      .def("validate", &EnsembleOptions::validate, "Check the options; raises ModelError naming the option.");
  def_option_statics(ensembleoptions_class);

  using ER = EnsembleResult;
  py::class_<ER> er(m, "EnsembleResult",
                    "Ensemble of scenario replications: per output slot the mean and 95 % half-width (_hw) of "
                    "the queue q, the system n and avg, the variance of q; per interval ending there the mean "
                    "arrivals and losses per replication and the loss rate (numpy arrays, read-only).");
  const std::pair<const char*, std::vector<double> ER::*> arrays[] = {
      {"mean_queue", &ER::mean_queue},   {"mean_queue_hw", &ER::mean_queue_hw}, {"var_queue", &ER::var_queue},
      {"mean_system", &ER::mean_system}, {"mean_system_hw", &ER::mean_system_hw},
      {"mean_avg", &ER::mean_avg},       {"mean_avg_hw", &ER::mean_avg_hw},
      {"arrivals", &ER::arrivals},       {"arrivals_hw", &ER::arrivals_hw},
      {"losses", &ER::losses},           {"losses_hw", &ER::losses_hw},
      {"loss_rate", &ER::loss_rate},     {"loss_rate_hw", &ER::loss_rate_hw},
      {"mean_p_max", &ER::mean_p_max},   {"mean_p_max_hw", &ER::mean_p_max_hw}};  // empty unless adaptive RED
  const std::pair<std::string, std::string> meaning[] = {
      {"mean_queue", "the mean number of waiting packets q at each output time"},
      {"var_queue", "the variance of q at each output time"},
      {"mean_system", "the mean number of packets in the system n at each output time"},
      {"mean_avg", "the mean avg at each output time"},
      {"arrivals", "the mean arrivals per replication in the interval ending at each output time"},
      {"losses", "the mean losses per replication in the interval ending at each output time"},
      {"loss_rate", "losses / arrivals over the interval ending at each output time"},
      {"mean_p_max", "the mean p_max at each output time (adaptive RED; empty otherwise)"}};
  for (const auto& [name, field] : arrays) {
    auto f = field;
    const std::string n = name, base = n.size() > 3 && n.substr(n.size() - 3) == "_hw" ? n.substr(0, n.size() - 3) : n;
    std::string doc = base;
    for (const auto& [key, text] : meaning)
      if (key == base) doc = text;
    if (base != n) doc = "95 % half-width of " + base + " (" + doc + ")";
    doc[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(doc[0])));
    doc += " (numpy array, read-only).";
    er.def_property_readonly(name, [f](py::object self) { return view(self.cast<const ER&>().*f, self); },
                             doc.c_str());
  }
  er.def_property_readonly(
        "times", [](py::object self) { return view(self.cast<const ER&>().times, self); },
        "The output times (slots, or time units in continuous time).")
      .def_readonly("replications", &ER::replications, "Number of replications.")
      .def_readonly("threads", &ER::threads, "Threads used.")
      .def_readonly("seconds", &ER::seconds, "Wall seconds of the ensemble.")
      .def_static("array_names", [arrays]() {
        py::list out;
        out.append("times");
        for (const auto& a : arrays) out.append(a.first);
        return out;
      });

  m.def(
      "simulate_scenario",
      [](const Scenario& scenario, py::array_t<double, py::array::c_style | py::array::forcecast> times,
         const EnsembleOptions& options) {
        if (times.ndim() != 1) fail_param("times", "a one-dimensional list of output slots", detail::cat(times.ndim(), " dimensions"));
        std::vector<double> t(times.data(), times.data() + times.size());
        InterruptGuard interrupt;
        py::gil_scoped_release release;
        return simulate_scenario(scenario, t, options);
      },
      py::arg("scenario"), py::arg("times"), py::arg("options"));

  m.def("passage_reward_names", &passage_reward_names,
        "Names of the rewards a hitting-time run accumulates (the chain's event names).");
  m.def(
      "simulate_passage",
      [](const Model& model, const std::vector<std::tuple<std::string, std::string, double>>& target,
         const std::vector<int>& level, const std::vector<int>& modulator, const std::vector<int>& avg_index,
         const std::vector<double>& avg, const std::vector<double>& weight, const std::vector<double>& times,
         int replications, uint64_t seed, int threads, bool discretised, double horizon,
         const std::vector<std::string>& rewards, double memory_limit_bytes) {
        std::vector<PassageClause> clauses;
        for (const auto& [q, op, v] : target) clauses.push_back(PassageClause{q, op, v});
        PassageStart start{level, modulator, avg_index, avg, weight};
        PassageOptions o;
        o.replications = replications, o.seed = seed, o.threads = threads, o.discretised = discretised;
        o.horizon = horizon, o.rewards = rewards, o.memory_limit_bytes = memory_limit_bytes;
        PassageSimResult r;
        {
          InterruptGuard interrupt;
          py::gil_scoped_release release;
          r = simulate_passage(model, clauses, start, times, o);
        }
        const py::ssize_t R = static_cast<py::ssize_t>(r.hit.size()), T = static_cast<py::ssize_t>(r.times.size());
        py::dict d;
        d["hit"] = py::array_t<double>(R, r.hit.data());
        d["start"] = py::array_t<int32_t>(R, r.start.data());
        py::dict at_hit, at_times;
        for (size_t k = 0; k < r.rewards.size(); ++k) {
          at_hit[py::str(r.rewards[k])] = py::array_t<double>(R, r.at_hit[k].data());
          at_times[py::str(r.rewards[k])] = py::array_t<double>(std::vector<py::ssize_t>{R, T}, r.at_times[k].data());
        }
        d["at_hit"] = at_hit;
        d["at_times"] = at_times;
        d["replications"] = r.replications, d["threads"] = r.threads, d["steps"] = r.steps, d["seconds"] = r.seconds;
        return d;
      },
      py::arg("model"), py::arg("target"), py::arg("level"), py::arg("modulator"), py::arg("avg_index"),
      py::arg("avg"), py::arg("weight"), py::arg("times"), py::arg("replications"), py::arg("seed"),
      py::arg("threads"), py::arg("discretised"), py::arg("horizon"), py::arg("rewards"),
      py::arg("memory_limit_bytes") = PassageOptions{}.memory_limit_bytes,
      "Hitting times of the target (clauses (quantity, op, value)) from a start law (entries level, modulator, "
      "avg_index or avg, weight; none: the empty system) up to `horizon`: per replication T (inf when not hit), "
      "the start entry drawn, and the requested rewards until min(T, horizon) and up to min(times[i], T) "
      "(aqmchain.simulate_passage builds the estimates).");
}

}  // namespace aqmpy
