// aqmchain._core: thin pybind11 bindings of the C++ core, one define_* function
// per area.  No logic lives here: conversions (enums <-> strings, vectors <->
// numpy), GIL release around long work, and translation of core exceptions
// into the Python hierarchy.
#include "common.hpp"

#include <csignal>
#include <thread>

#include "aqmchain/errors.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/threads.hpp"

namespace aqmpy {

namespace {
std::thread::id& main_thread() {
  static std::thread::id id = std::this_thread::get_id();  // first call: at import, on the importing thread
  return id;
}
extern "C" void on_sigint(int) { aqm::request_interrupt(); }
}  // namespace

void init_main_thread() { main_thread(); }

namespace {

void raise(const char* type, const std::string& msg, const std::string* param = nullptr) {
  py::object t = py::module_::import("aqmchain._core").attr(type);
  py::object inst = t(msg);
  if (param) inst.attr("param") = *param;
  PyErr_SetObject(t.ptr(), inst.ptr());
}
}  // namespace

void define_errors(py::module_& m) {
  auto new_exc = [&](const char* name, PyObject* base, const char* doc) {
    m.attr(name) = py::reinterpret_steal<py::object>(
        PyErr_NewExceptionWithDoc((std::string("aqmchain.") + name).c_str(), doc, base, nullptr));
  };
  new_exc("ModelError", PyExc_ValueError,
          "A model parameter (or a function's argument) is out of range or inconsistent; a ValueError.  The "
          "message names the parameter, the bound and the value; `param` is the parameter's name (a model-file "
          "key such as 'aqm.w').");
  new_exc("StateSpaceTooLarge", m.attr("ModelError").ptr(),
          "The chain would exceed the memory budget (solver.memory_limit_gb): raised before anything is "
          "allocated; a ModelError.");
  new_exc("OptionError", PyExc_ValueError,
          "A solver or analysis option is unknown or out of range (a method name, a tolerance, ...); a ValueError.");
  new_exc("ReducibleChainError", PyExc_RuntimeError,
          "The chain has more than one closed class, so its stationary law is not unique; a RuntimeError.");
  new_exc("SolverError", PyExc_RuntimeError,
          "A solver failed (a singular factorisation, a breakdown) or stopped before its tolerance; a "
          "RuntimeError.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const aqm::StateSpaceTooLarge& e) {
      raise("StateSpaceTooLarge", e.what(), &e.param());
    } catch (const aqm::ModelError& e) {
      raise("ModelError", e.what(), &e.param());
    } catch (const aqm::OptionError& e) {
      raise("OptionError", e.what(), e.param().empty() ? nullptr : &e.param());
    } catch (const aqm::ReducibleChain& e) {
      raise("ReducibleChainError", e.what());
    } catch (const aqm::SolverError& e) {
      raise("SolverError", e.what());
    }
  });
  // registered last: tried first (a pending Ctrl-C wins over the error types above)
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const aqm::Interrupted&) {
      aqm::clear_interrupt();
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const std::exception&) {
      // a Ctrl-C during the call wins over the error the interrupted work ended with
      if (aqm::interrupt_requested()) {
        aqm::clear_interrupt();
        PyErr_SetNone(PyExc_KeyboardInterrupt);
        return;
      }
      throw;
    }
  });
}

namespace {
int& guard_depth() {  // guards alive on the main thread (only the outermost installs the handler)
  static int depth = 0;
  return depth;
}
}  // namespace

InterruptGuard::InterruptGuard() {
  if (std::this_thread::get_id() != main_thread()) return;
  if (guard_depth()++ > 0) return;  // nested: the outer guard's handler is in place, its flag kept
  active_ = true;
  aqm::clear_interrupt();
  auto* old = new struct sigaction;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGINT, &sa, old) == 0) {
    installed_ = true;
    previous_ = old;
  } else {
    delete old;
  }
}

InterruptGuard::~InterruptGuard() {
  if (std::this_thread::get_id() != main_thread()) return;
  --guard_depth();
  if (!active_) return;
  if (installed_) {
    auto* old = static_cast<struct sigaction*>(previous_);
    sigaction(SIGINT, old, nullptr);
    delete old;
  }
  // A Ctrl-C that came while the handler above was installed and that no loop acted on
  // (the call ended first, or between two checks) is handed to Python's own handler:
  // KeyboardInterrupt at the caller's next instruction instead of a lost signal.  When
  // an exception leaves the call, the translator turns it into KeyboardInterrupt.
  if (aqm::interrupt_requested() && std::uncaught_exceptions() == 0) {
    aqm::clear_interrupt();
    PyErr_SetInterrupt();
  }
}

py::list option_names(py::object cls) {
  py::list out;
  for (const auto& item : cls.attr("__dict__").attr("items")()) {
    const auto kv = item.cast<py::tuple>();
    const std::string name = kv[0].cast<std::string>();
    if (name.rfind("_", 0) == 0) continue;
    py::object attr = kv[1];
    if (py::isinstance(attr, py::module_::import("builtins").attr("property")) && !attr.attr("fset").is_none())
      out.append(name);
  }
  return out;
}

}  // namespace aqmpy

PYBIND11_MODULE(_core, m) {
  aqmpy::init_main_thread();
  m.doc() = "aqmchain C++ core (model, state space and builder, solvers, transient kernels, analysis, simulator)";
  aqmpy::define_errors(m);
  aqmpy::define_model(m);
  aqmpy::define_state(m);
  aqmpy::define_solvers(m);
  aqmpy::define_transient(m);
  aqmpy::define_analysis(m);
  aqmpy::define_transient_analysis(m);
  aqmpy::define_simulator(m);
  m.def("set_num_threads", &aqm::set_num_threads, pybind11::arg("n"),
        "Use at most n threads in the core's parallel loops (OpenMP); returns the previous setting.");
  m.def("num_threads", &aqm::num_threads, "Threads of the core's parallel loops (1 without OpenMP).");
  m.def("loop_threads", &aqm::loop_threads,
        "Threads the next parallel loop would use: num_threads(), lowered to the cores no other runnable "
        "task of another process holds (read at most every 20 ms; off with AQMCHAIN_ADAPTIVE_THREADS=0 or "
        "OMP_WAIT_POLICY=active).");
}
