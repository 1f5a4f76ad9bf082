// Bindings of the state layer: descriptor, chain (matrix, labels, events), builder.
#include <optional>

#include "common.hpp"

#include "aqmchain/analysis/difference.hpp"
#include "aqmchain/model/queue_chain.hpp"
#include "aqmchain/state/chain.hpp"

namespace aqmpy {

using namespace aqm;

namespace {

/// The option `classes`: a chain's name, or "window:L" (the window chain carrying L positions).
std::pair<ClassChain, int> class_chain_arg(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos) return {class_chain_from(s), 0};
  const ClassChain c = class_chain_from(s.substr(0, colon));
  const std::string digits = s.substr(colon + 1);
  if (c != ClassChain::Window || digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    throw OptionError("option 'classes' takes a length only as \"window:L\" (L an integer), got '" + s + "'", "classes");
  const int L = std::stoi(digits);
  if (L < 1 || L > kClassWindowMax)
    throw OptionError(detail::cat("option 'classes' = \"window:L\" needs L in [1, ", kClassWindowMax, "], got ", L),
                      "classes");
  return {c, L};
}

py::dict estimate_dict(const Model& md, const std::string& classes) {
  const ChainEstimate e = estimate_chain(md, class_chain_arg(classes).first);
  py::dict d;
  py::dict comps;
  const StateSpace space = queue_state_space(md);
  for (const auto& c : space.components()) comps[py::str(c.name)] = c.size;
  d["components"] = comps;
  d["product_states"] = e.product_states;
  d["reachable_bound"] = e.reachable_bound;
  d["bound_tight"] = e.bound_tight;
  d["max_nnz"] = e.max_nnz;
  d["bytes"] = e.bytes;
  d["build_seconds"] = e.build_seconds;
  d["solve_seconds"] = e.solve_seconds;
  d["structure"] = e.structure;
  d["large"] = e.large;
  return d;
}

py::dict report_dict(const Chain& c) {
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
  d["hashed_index"] = r.hashed_index;
  d["states_reused"] = r.states_reused;
  d["warnings"] = r.warnings;
  return d;
}

/// {component name: read-only int32 array over the states}, descriptor order.
py::dict labels_dict(py::object self) {
  const Chain& c = self.cast<const Chain&>();
  py::dict d;
  for (int i = 0; i < c.space.count(); ++i) d[py::str(c.space.component(i).name)] = view(c.labels[i], self);
  return d;
}

/// {event name: read-only float64 array over the states}.
py::dict events_dict(py::object self) {
  const Chain& c = self.cast<const Chain&>();
  py::dict d;
  for (size_t i = 0; i < c.event_names.size(); ++i) d[py::str(c.event_names[i])] = view(c.events[i], self);
  return d;
}

QueueChain build(const Model& md, double memory_limit, const std::string& classes, int64_t max_states,
                 const Chain* like) {
  BuildOptions o;
  o.memory_limit_bytes = memory_limit;
  o.max_states = max_states;
  const auto [chain, window] = class_chain_arg(classes);
  o.class_window = window;
  o.same_states_as = like;
  return build_chain(md, o, chain);
}

}  // namespace

void define_state(py::module_& m) {
  py::class_<Component>(m, "Component", "A named integer state component with values 0 .. size - 1.")
      .def_readonly("name", &Component::name)
      .def_readonly("size", &Component::size)
      .def_readonly("coarsen", &Component::coarsen)
      .def_readonly("in_block", &Component::in_block)
      .def("__repr__", [](const Component& c) { return detail::cat("Component(", c.name, ", size=", c.size, ")"); });

  py::class_<StateSpace>(m, "StateSpace", "State descriptor: named components packed into one key (mixed radix).")
      .def(py::init<>())
      .def("add", &StateSpace::add, py::arg("name"), py::arg("size"), py::arg("coarsen") = true,
           py::arg("in_block") = false)
      .def_property_readonly("components", &StateSpace::components)
      .def_property_readonly("product", &StateSpace::product)
      .def("find", &StateSpace::find, py::arg("name"))
      .def("encode", [](const StateSpace& s, const std::vector<int32_t>& v) { return s.encode_checked(v); },
           py::arg("values"))
      .def("decode",
           [](const StateSpace& s, int64_t key) {
             if (key < 0 || key >= s.product())
               throw py::index_error(detail::cat("key must be in [0, ", s.product() - 1, "], got ", key));
             std::vector<int32_t> v(s.count());
             s.decode(key, v.data());
             return v;
           },
           py::arg("key"));

  m.def("estimate_chain", &estimate_dict, py::arg("model"), py::arg("classes") = to_string(ClassChain::Approx),
        "Upper bounds on states, transitions and builder memory, before building, with rough build and solve "
        "seconds (one core), the chain's structure and whether it is large enough to announce.");
  m.def(
      "count_reachable",
      [](const Model& md, double memory_limit, int64_t max_states) {
        BuildOptions o;
        o.memory_limit_bytes = memory_limit;
        o.max_states = max_states;
        ReachableCount r;
        {
          InterruptGuard interrupt;
          py::gil_scoped_release release;
          r = count_reachable(md, o);
        }
        py::dict d, comps;
        const StateSpace space = queue_state_space(md);
        for (int k = 0; k < space.count(); ++k) comps[py::str(space.component(k).name)] = r.component_counts[k];
        d["states"] = r.states;
        d["transitions_bound"] = r.transitions_bound;
        d["component_counts"] = comps;
        d["seconds"] = r.seconds;
        d["hashed_index"] = r.hashed_index;
        return d;
      },
      py::arg("model"), py::arg("memory_limit") = BuildOptions{}.memory_limit_bytes,
      py::arg("max_states") = kMaxStatesMax,
      "Reachable states by the builder's exploration alone (no matrix): states, an upper bound on the "
      "transitions, per component the number of states at each value, seconds.");
  m.def("queue_event_names", &queue_event_names, "Names of the per-state event weights of the queue models.");
  m.def(
      "queue_components",
      []() {
        py::dict d;
        d["level"] = component::level, d["avg"] = component::avg, d["s"] = component::s;
        d["modulator"] = component::modulator, d["count"] = component::count, d["pmax"] = component::pmax;
        d["maxth"] = component::maxth, d["phase"] = component::phase, d["class2"] = component::class2;
        d["head"] = component::head, d["sequence"] = component::sequence, d["window"] = component::window;
        return d;
      },
      "Names of the queue models' state components by role: level (n), avg (the grid index of avg), s "
      "(REDwM's second variable), modulator, the stateful AQM's count, pmax, maxth, phase and the class chains' "
      "class2, head, sequence.");

  py::class_<Chain>(m, "MarkovChain",
                    "A Markov chain of a transition generator: P (discrete) or G (continuous) in CSR (rows = "
                    "from-state), state labels per component and event weights per state.")
      .def_property_readonly(
          "time", [](const Chain& c) { return to_string(c.time); },
          "'discrete' (the matrix is P, rows sum to 1) or 'continuous' (the generator G, rows sum to 0).")
      .def_readonly("space", &Chain::space, "The state descriptor: the components and their sizes.")
      .def_readonly("n", &Chain::n, "Number of (reachable) states.")
      .def_property_readonly("nnz", &Chain::nnz, "Number of stored transitions (nonzeros of the CSR matrix).")
      .def_readonly("recurrent_state", &Chain::recurrent_state,
                    "A state of the closed class when it is unique, else -1.")
      .def_property_readonly(
          "indptr", [](py::object self) { return view(self.cast<const Chain&>().rowptr, self); },
          "CSR row pointers of the matrix (rows = from-state), a read-only view.")
      .def_property_readonly(
          "indices", [](py::object self) { return view(self.cast<const Chain&>().col, self); },
          "CSR column indices (to-states), a read-only view.")
      .def_property_readonly(
          "data", [](py::object self) { return view(self.cast<const Chain&>().val, self); },
          "CSR values: transition probabilities (discrete) or rates (continuous), a read-only view.")
      .def_property_readonly("labels", &labels_dict,
                             "Component name -> each state's value of that component (arrays, one entry per state).")
      .def_property_readonly("events", &events_dict,
                             "Event name -> each state's weight of that event (probability per slot, or rate).")
      .def_property_readonly("report", &report_dict,
                             "The builder's accounts: product states, memory estimate, seconds, closed classes, "
                             "warnings.")
      .def("index_of", &Chain::index_of, py::arg("values"), "State index of a tuple of component values, or -1.")
      .def(
          "indices_of",
          [](const Chain& c, const py::dict& labels) {
            // the component arrays in the space's order (other names are ignored)
            using Column = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
            const int D = c.space.count();
            std::string names;
            for (int d = 0; d < D; ++d) names += (d ? ", " : "") + c.space.component(d).name;
            std::vector<Column> cols;
            std::vector<const int64_t*> data;
            py::ssize_t m = -1;
            for (int d = 0; d < D; ++d) {
              const std::string& name = c.space.component(d).name;
              if (!labels.contains(name))
                throw py::key_error(detail::cat("labels have no component '", name, "' (the chain's components: ",
                                                names, ")"));
              cols.push_back(Column::ensure(labels[py::str(name)]));
              if (!cols.back() || cols.back().ndim() != 1)
                throw std::invalid_argument(detail::cat("labels['", name, "'] must be a vector of integers"));
              if (m >= 0 && cols.back().shape(0) != m)
                throw std::invalid_argument(detail::cat("labels['", name, "'] has ", cols.back().shape(0),
                                                        " entries, the other components ", m));
              m = cols.back().shape(0);
              data.push_back(cols.back().data());
            }
            py::array_t<int32_t> out(std::max<py::ssize_t>(m, 0));
            int32_t* o = out.mutable_data();
            {
              py::gil_scoped_release release;
              c.indices_of(data, std::max<py::ssize_t>(m, 0), o);
            }
            return out;
          },
          py::arg("labels"),
          "State index of each labelled state, or -1 where no state has those values: labels maps each "
          "component name to an array of values, one entry per labelled state (as `labels`).")
      .def(
          "matvec",
          [](const Chain& c, const py::array_t<double, py::array::c_style | py::array::forcecast>& x) {
            if (x.ndim() != 1 || x.shape(0) != c.n)
              throw std::invalid_argument(detail::cat("argument 'x' must be a vector of the chain's ", c.n,
                                                      " states, got an array of ", x.ndim(), " dimensions and ",
                                                      x.size(), " values"));
            std::vector<double> y(static_cast<size_t>(c.n));
            {
              py::gil_scoped_release release;
              const Eigen::Map<const Eigen::VectorXd> xv(x.data(), c.n);
              Eigen::Map<Eigen::VectorXd>(y.data(), c.n).noalias() = c.matrix() * xv;
            }
            return moved(std::move(y));
          },
          py::arg("x"), "P x (continuous: G x), the matrix times a column vector of the chain's size.")
      .def("residual", [](const Chain& c, const std::vector<double>& pi) { return stationary_residual(c, pi); },
           py::arg("pi"), "||pi P - pi||_1 (discrete) or ||pi G||_1 / max |G_ii| (continuous)");

  py::class_<QueueChain, Chain>(m, "Chain",
                                "The Markov chain of a model: P (discrete) or G (continuous) in CSR (rows = "
                                "from-state), state labels per component and event weights per state.")
      .def_readonly("model", &QueueChain::model, "The model the chain was built from.")
      .def_property_readonly(
          "grid_index", [](py::object self) { return view(self.cast<const QueueChain&>().grid_index(), self); },
          "Each state's index on `grid` (a read-only view of the labels of the component that holds it).")
      .def_property_readonly(
          "grid", [](py::object self) { return view(self.cast<const QueueChain&>().grid, self); },
          "The avg grid points g_0 .. g_L, a read-only view.");

  m.def("build_chain", &build, py::arg("model"), py::arg("memory_limit") = BuildOptions{}.memory_limit_bytes,
        py::arg("classes") = to_string(ClassChain::Approx), py::arg("max_states") = BuildOptions{}.max_states,
        py::arg("like") = nullptr, py::call_guard<InterruptGuard, py::gil_scoped_release>(),
        "The chain of a model; `classes` ('approx', 'exact' or 'window[:L]') picks the chain of a model with traffic "
        "classes. `like`: a chain believed to have the same states (a warm re-solve): assembled on its states without "
        "exploring, its class analysis taken when the matrix has its support (report['states_reused']); else "
        "built from scratch.");
  m.def(
      "chain_difference",
      [](const QueueChain& c, const Model& plus, const Model& minus, const std::string& classes, double h,
         const py::array_t<double, py::array::c_style | py::array::forcecast>& pi,
         const py::array_t<double, py::array::c_style | py::array::forcecast>& adjoints,
         int64_t max_added, const Model* plus_small, const Model* minus_small, double h_small,
         double kink_tolerance, const std::optional<std::vector<std::string>>& events) {
        // a caller's error, not a model's (sensitivity.py falls back to building chains on ModelError)
        auto length = [&](const char* name, const py::array& a) {
          if (a.ndim() != 1 || a.shape(0) != c.n)
            throw std::invalid_argument(detail::cat("argument '", name, "' must be a vector of the chain's ", c.n,
                                                    " states, got an array of ", a.ndim(), " dimensions and ",
                                                    a.size(), " values"));
        };
        length("pi", pi);
        if ((plus_small == nullptr) != (minus_small == nullptr))
          throw std::invalid_argument("arguments 'plus_small' and 'minus_small' must be given together");
        if (adjoints.ndim() != 2 || adjoints.shape(0) != c.n)
          throw std::invalid_argument(detail::cat("argument 'adjoints' must be a matrix with a row per state of the "
                                                  "chain (", c.n, " rows, a column per adjoint vector), got an array "
                                                  "of ", adjoints.ndim(), " dimensions and ", adjoints.size(), " values"));
        const Adjoints ys(adjoints.data(), static_cast<size_t>(adjoints.shape(1)));
        std::vector<char> kept;  // empty: every event
        if (events) {
          kept.assign(c.event_names.size(), 0);
          for (const std::string& name : *events) {
            const auto it = std::find(c.event_names.begin(), c.event_names.end(), name);
            if (it == c.event_names.end()) {
              std::string known;
              for (const std::string& e : c.event_names) known += (known.empty() ? "" : ", ") + e;
              throw std::invalid_argument(
                  detail::cat("argument 'events' must name events of the chain (", known, "), got '", name, "'"));
            }
            kept[static_cast<size_t>(it - c.event_names.begin())] = 1;
          }
        }
        ChainDifference d;
        std::vector<double> grid_plus, grid_minus, grid_plus_small, grid_minus_small;
        {
          InterruptGuard interrupt;
          py::gil_scoped_release release;
          const auto [kind, window] = class_chain_arg(classes);
          plus.validate();
          minus.validate();
          const auto gp = queue_generator(plus, kind, window), gm = queue_generator(minus, kind, window);
          grid_plus = plus.grid.resolve(plus.buffer);
          grid_minus = minus.grid.resolve(minus.buffer);
          std::unique_ptr<TransitionGenerator> gps, gms;
          SmallStep small;
          if (plus_small) {
            plus_small->validate();
            minus_small->validate();
            gps = queue_generator(*plus_small, kind, window), gms = queue_generator(*minus_small, kind, window);
            grid_plus_small = plus_small->grid.resolve(plus_small->buffer);
            grid_minus_small = minus_small->grid.resolve(minus_small->buffer);
            small = {gps.get(), gms.get(), h_small, kink_tolerance};
          }
          d = chain_difference(c, *gp, *gm, h, pi.data(), ys, max_added, plus_small ? &small : nullptr, kept);
        }
        auto result = [&](ChainDifference& x, std::vector<double>& gplus, std::vector<double>& gminus) {
          py::dict out;
          out["valid"] = x.valid, out["why"] = x.why, out["products"] = x.products;
          out["plus_same_support"] = x.plus_same_support, out["minus_same_support"] = x.minus_same_support;
          out["sides_same_support"] = x.sides_same_support;
          out["plus_drops"] = x.plus_drops, out["minus_drops"] = x.minus_drops;
          out["products_plus"] = x.products_plus, out["products_minus"] = x.products_minus;
          out["distance_plus"] = x.distance_plus, out["distance_minus"] = x.distance_minus;
          out["kink_excess"] = x.kink_excess, out["kink_scale"] = x.kink_scale, out["seconds"] = x.seconds;
          out["kept_distance"] = x.kept_distance;
          out["grid_plus"] = copy(gplus), out["grid_minus"] = copy(gminus);
          py::dict ep, em;
          if (x.valid)
            for (size_t e = 0; e < c.event_names.size(); ++e) {
              if (x.events_plus[e].empty()) continue;  // not kept (chain_difference's events_kept)
              ep[py::str(c.event_names[e])] = moved(std::move(x.events_plus[e]));
              em[py::str(c.event_names[e])] = moved(std::move(x.events_minus[e]));
            }
          out["events_plus"] = ep, out["events_minus"] = em;
          for (const auto& [tag, a] : {std::pair<const char*, const AddedStates*>{"added_plus", &x.added_plus},
                                       std::pair<const char*, const AddedStates*>{"added_minus", &x.added_minus}}) {
            py::dict ad;
            ad["keys"] = copy(a->keys), ad["rowptr"] = copy(a->rowptr), ad["col"] = copy(a->col);
            ad["val"] = copy(a->val), ad["inflow"] = copy(a->inflow);
            py::dict lab, ev;
            for (int i = 0; i < c.space.count() && !a->labels.empty(); ++i)
              lab[py::str(c.space.component(i).name)] = copy(a->labels[static_cast<size_t>(i)]);
            for (size_t e = 0; e < a->events.size(); ++e) ev[py::str(c.event_names[e])] = copy(a->events[e]);
            ad["labels"] = lab, ad["events"] = ev;
            out[tag] = ad;
          }
          return out;
        };
        py::dict out = result(d, grid_plus, grid_minus);
        out["small"] = py::none();
        out["rows_redone"] = d.rows_redone;
        out["redone_distance_plus"] = d.redone_distance_plus, out["redone_distance_minus"] = d.redone_distance_minus;
        if (d.small) {
          out["small"] = result(*d.small, grid_plus_small, grid_minus_small);
          py::array_t<bool> mask(static_cast<py::ssize_t>(d.redone.size()));
          std::copy(d.redone.begin(), d.redone.end(), mask.mutable_data());
          out["redone"] = mask;
        }
        return out;
      },
      py::arg("chain"), py::arg("plus"), py::arg("minus"), py::arg("classes"), py::arg("h"), py::arg("pi"),
      py::arg("adjoints"), py::arg("max_added"), py::arg("plus_small") = nullptr, py::arg("minus_small") = nullptr,
      py::arg("h_small") = 0.0, py::arg("kink_tolerance") = 0.0, py::arg("events") = py::none(),
      "The central difference of the chain's matrix between the models `plus` (theta + h) and `minus` (theta - h), "
      "generated row by row on the chain's states: dict with valid (False: `why` says why the chains must be "
      "built), plus_same_support, minus_same_support and sides_same_support (the rows' entries unchanged), "
      "plus_drops and minus_drops (a side lacks an entry of the chain: its chain may not reach every state), products (pi (P+ - P-) y / (2h) per adjoint vector y, the columns of `adjoints`, an n x J "
      "matrix), products_plus and "
      "products_minus (pi (P+ - P) y and pi (P- - P) y), distance_plus and distance_minus (max |P+ - P|, "
      "max |P- - P|), events_plus and "
      "events_minus (per event, per state; `events`: only these events, by name), kink_excess and kink_scale (smoothness across the step), grid_plus and "
      "grid_minus (the models' avg grids), added_plus and added_minus (the states a side adds, at most max_added: "
      "keys, labels, events, their rows in CSR with columns n + i for the i-th added state, and inflow, pi's "
      "flow into each), seconds.  With `plus_small` and `minus_small` (the models at theta +- h_small, "
      "h_small < h): the rows not smooth at h (their own excess above kink_tolerance times their own scale, or "
      "a support change) are generated again there, and `small` holds the same dict at h_small for the "
      "effective sides (core/include/aqmchain/analysis/difference.hpp) and `redone` the rows redone (a boolean "
      "vector), or None when no row was redone; `rows_redone` their number (0 without a second step), and "
      "redone_distance_plus / redone_distance_minus P's largest change on them at h.");
  m.def("class_chains", []() { return std::vector<std::string>{to_string(ClassChain::Approx), to_string(ClassChain::Exact), to_string(ClassChain::Window)}; },
        "Names of the class chains (build_chain's `classes`).");
  m.def(
      "build_scenario_chains",
      [](const Scenario& s, double memory_limit, int64_t max_states) {
        BuildOptions o;
        o.memory_limit_bytes = memory_limit;
        o.max_states = max_states;
        return build_scenario_chains(s, o);
      },
      py::arg("scenario"), py::arg("memory_limit") = BuildOptions{}.memory_limit_bytes,
      py::arg("max_states") = BuildOptions{}.max_states,
      py::call_guard<InterruptGuard, py::gil_scoped_release>(), "One chain per phase, all on the union of the phases' reachable states.");
}

}  // namespace aqmpy
