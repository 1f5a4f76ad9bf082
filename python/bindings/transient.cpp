// Bindings of the transient exponential kernels: the method enum, options (fields
// written once, in the def_readwrite calls below), the result with its accounts,
// expm_multiply_csr for a generator given as CSR arrays, the dense Pade
// exponential and the Poisson weights (for tests).
#include "common.hpp"

#include "aqmchain/errors.hpp"
#include <pybind11/eigen.h>

#include "aqmchain/solvers/transient.hpp"

#include <cmath>
#include <limits>

namespace aqmpy {

using namespace aqm;

namespace {

using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
using RealArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

void define_options(py::module_& m) {
  py::class_<TransientOptions> options_class(m, "TransientOptions",
                                             "Options of the transient kernels (Krylov, rational Krylov, "
                                             "uniformisation); fields are set by attribute and checked by validate().");
  options_class
      .def(py::init<>())
      .def_readwrite("tol", &TransientOptions::tol)
      .def_readwrite("krylov_dim", &TransientOptions::krylov_dim)
      .def_readwrite("max_steps", &TransientOptions::max_steps)
      .def_readwrite("max_applications", &TransientOptions::max_applications)
      .def_readwrite("breakdown", &TransientOptions::breakdown)
      .def_readwrite("project", &TransientOptions::project)
      .def_readwrite("shift_ratio", &TransientOptions::shift_ratio)
      .def_readwrite("inner_max_iter", &TransientOptions::inner_max_iter)
      .def("validate", &TransientOptions::validate);
  def_option_statics(options_class);
}

void define_result(py::module_& m) {
  py::class_<TransientResult> transient_result(m, "TransientResult", "Accounts of a transient kernel run.");
  def_report(transient_result)
      .def_property_readonly("p", [](py::object self) { return view(self.cast<const TransientResult&>().p, self); },
                             "the vector at t_reached")
      .def_readonly("t_reached", &TransientResult::t_reached)
      .def_readonly("outputs", &TransientResult::outputs)
      .def_readonly("steps", &TransientResult::steps)
      .def_readonly("rejected_steps", &TransientResult::rejected_steps)
      .def_readonly("error_sum", &TransientResult::error_sum)
      .def_readonly("error_max", &TransientResult::error_max)
      .def_readonly("hump", &TransientResult::hump)
      .def_readonly("roundoff", &TransientResult::roundoff)
      .def_readonly("clipped_mass", &TransientResult::clipped_mass)
      .def_readonly("step_min", &TransientResult::step_min)
      .def_readonly("step_max", &TransientResult::step_max)
      .def_readonly("krylov_dim", &TransientResult::krylov_dim)
      .def_readonly("exponentials", &TransientResult::exponentials)
      .def_readonly("squarings", &TransientResult::squarings)
      .def_readonly("breakdown", &TransientResult::breakdown)
      .def_readonly("breakdown_dim", &TransientResult::breakdown_dim)
      .def_readonly("breakdown_time", &TransientResult::breakdown_time)
      .def_readonly("inner_solves", &TransientResult::inner_solves)
      .def_readonly("inner_iterations", &TransientResult::inner_iterations)
      .def_readonly("inner_iterations_max", &TransientResult::inner_iterations_max)
      .def_readonly("inner_residual_max", &TransientResult::inner_residual_max)
      .def_readonly("shifts", &TransientResult::shifts)
      .def_readonly("gamma_min", &TransientResult::gamma_min)
      .def_readonly("gamma_max", &TransientResult::gamma_max)
      .def_readonly("basis_max", &TransientResult::basis_max)
      .def_readonly("rate", &TransientResult::rate)
      .def_readonly("poisson_mean_max", &TransientResult::poisson_mean_max)
      .def_readonly("poisson_left", &TransientResult::poisson_left)
      .def_readonly("poisson_right", &TransientResult::poisson_right);
}

TransientMethod method_of(py::object v) {
  return py::isinstance<TransientMethod>(v) ? v.cast<TransientMethod>()
                                            : transient_method_from(py::str(v).cast<std::string>());
}

/// p0 exp(t G) at each time for G in CSR arrays: (array [len(times), n], result).
/// Rows of times not produced (a budget ran out) are NaN.  The GIL is released
/// while the kernel runs.
py::tuple expm_multiply_csr(IntArray indptr, IntArray indices, RealArray data, RealArray p0, RealArray times,
                            py::object method, const TransientOptions& options, py::object blocks) {
  const TransientMethod meth = method_of(method);
  if (indptr.ndim() != 1 || indptr.size() < 2)
    throw ModelError("rowptr", detail::cat("parameter 'rowptr' must be a 1-d array of length n + 1 >= 2, got ",
                                           indptr.size(), " entries"));
  const py::ssize_t n_ss = indptr.size() - 1;
  if (n_ss > std::numeric_limits<int32_t>::max() - 1)
    throw ModelError("rowptr", detail::cat("parameter 'rowptr' must have at most 2^31 - 1 entries, got ", indptr.size()));
  const int32_t n = static_cast<int32_t>(n_ss);
  const int32_t nnz = indptr.at(n);
  if (indices.ndim() != 1 || data.ndim() != 1 || indices.size() != nnz || data.size() != nnz)
    throw ModelError("col", detail::cat("parameter 'col' and 'val' must be 1-d arrays of length rowptr[n] = ", nnz,
                                        ", got ", indices.size(), " and ", data.size()));
  if (p0.ndim() != 1) throw ModelError("p0", "parameter 'p0' must be a 1-d array");
  if (times.ndim() != 1) throw ModelError("times", "parameter 'times' must be a 1-d array");
  if (nnz < 0 || indptr.at(0) != 0)
    throw ModelError("rowptr", detail::cat("parameter 'rowptr' must start at 0 and end at nnz >= 0, got ",
                                           indptr.at(0), " ... ", nnz));
  std::vector<int32_t> block_of;
  if (!blocks.is_none()) {
    const IntArray b = blocks.cast<IntArray>();
    if (b.ndim() != 1)
      throw ModelError("blocks", "parameter 'blocks' must be a 1-d array (one block number per state)");
    block_of.assign(b.data(), b.data() + b.size());
  }
  std::vector<double> p(p0.data(), p0.data() + p0.size());
  std::vector<double> t(times.data(), times.data() + times.size());
  py::array_t<double> out({static_cast<py::ssize_t>(t.size()), static_cast<py::ssize_t>(n)});
  double* o = out.mutable_data();
  std::fill(o, o + out.size(), std::numeric_limits<double>::quiet_NaN());
  TransientResult r;
  {
    InterruptGuard interrupt;
    py::gil_scoped_release release;
    // from_csr checks the arrays (monotone rowptr before any col is read).
    GeneratorOperator G = GeneratorOperator::from_csr(n, indptr.data(), indices.data(), data.data());
    G.matrix.blocks = std::move(block_of);
    r = expm_multiply(G, p, t, meth, options, [o, n](size_t k, double, const double* x) {
      std::copy(x, x + n, o + k * static_cast<size_t>(n));
    });
  }
  return py::make_tuple(out, r);
}

}  // namespace

void define_transient(py::module_& m) {
  py::enum_<TransientMethod> method(m, "TransientMethod", "Transient methods.");
  for (TransientMethod x : kAllTransientMethods) method.value(to_string(x).c_str(), x);
  define_options(m);
  define_result(m);
  m.def("transient_methods", [] {
    py::list out;
    for (TransientMethod x : kAllTransientMethods) out.append(to_string(x));
    return out;
  }, "Names of the transient methods.");
  m.def("expm_multiply_csr", &expm_multiply_csr, py::arg("indptr"), py::arg("indices"), py::arg("data"),
        py::arg("p0"), py::arg("times"), py::arg("method") = "auto", py::arg("options") = TransientOptions{},
        py::arg("blocks") = py::none(),
        "p0 exp(t G) at each of `times` for a generator G in CSR arrays (rows = from-state): "
        "(array [len(times), n], TransientResult).  method: 'krylov', 'rational_krylov', 'uniformization' or "
        "'auto' (Krylov).  "
        "blocks (rational_krylov): the block of each state for its block Gauss-Seidel preconditioner (states "
        "of a block are solved together by a band LU in index order); None: one block per state.");
  m.def("expm_dense", [](const Eigen::MatrixXd& A) {
          py::gil_scoped_release release;
          return expm_pade(A);
        }, py::arg("matrix"), "exp(A) of a dense square matrix by irreducible Pade (6,6) with scaling and squaring.");
  m.def("poisson_weights", [](double q, double eps) {
          const PoissonWeights pw = poisson_weights(q, eps);
          return py::make_tuple(pw.left, pw.right, copy(pw.w), pw.bound);
        }, py::arg("q"), py::arg("eps"),
        "Poisson(q) weights on [left, right] (normalised there): (left, right, weights, bound), bound >= the L1 "
        "distance to the full Poisson law.");
}

}  // namespace aqmpy
