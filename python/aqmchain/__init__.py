"""aqmchain: exact discrete-time Markov-chain analysis of router queues under AQM.

Layers: model description (:class:`Model`, :class:`Source`, :class:`DropFunction`,
...) -> chain builder (:func:`build_chain`) -> stationary solvers
(:func:`solve_stationary`) -> metrics (:class:`StationaryResult`).  Conventions
(docs/conventions.md): probability vectors are rows, pi P = pi, P is CSR with rows = from-state.
"""

from . import _startup

_startup.install()  # the command line only: Ctrl-C during these imports exits 130, without a traceback

from . import _checks, _objects  # noqa: E402

_objects.install()  # reprs, Model.replace, pickling through the model-file document

from ._core import (  # noqa: E402
    Aqm,
    Chain,
    DropFunction,
    EnsembleOptions,
    EnsembleResult,
    GridSpec,
    HurstReport,
    Model,
    ModelError,
    OptionError,
    Phase,
    ReducibleChainError,
    Scenario,
    Service,
    Source,
    SimOptions,
    TrafficClass,
    SolverError,
    StateSpaceTooLarge,
    estimate_chain,
    count_reachable,
    hurst,
    num_threads,
    redwm_s_grid,
    set_num_threads,
    ssmp_q_for_mean,
    stateful_info,
)
from ._classes import CLASS_METRICS, ClassMetrics
from .export import export_matrix, export_prism, export_stationary, stationary_table
from .modelfile import apply_overrides, load_config, load_model, model_from_dict, model_to_dict, replace, solver_options
from .modelinfo import model_info, solve_estimate
from .fit import FIT_KINDS, FitResult, fit_source, read_trace, simulate_trace
from .hitting import PASSAGE_REWARDS, PassageSimulation, simulate_passage
from .optimize import GRADIENT_METHODS, OPTIMIZE_METHODS, OptimizeResult, optimize
from . import plots  # noqa: E402  (matplotlib is imported by the plot functions, not here)
from .policies import PolicyComparison, compare_policies
from .selfsim import (
    HURST_ESTIMATORS,
    HurstEstimate,
    aggregated_variance,
    arrival_trace,
    estimate_hurst,
    expected_rs,
    hurst_from_trace,
    rescaled_range,
)
from .scenario import load_scenario, make_scenario
from .simulation import Comparison, SimulationResult, compare, simulate, simulate_scenario
from .stationary import (
    CountTruncationError,
    DirectSolver,
    ErrorEstimate,
    NonConvergenceError,
    SolverInfo,
    StationaryResult,
    WarmStart,
    build_chain,
    refine_grid,
    solve_stationary,
    state_labels,
    stateful_observables,
    transition_matrix,
)
from .sensitivity import Sensitivities, sensitivities, sensitivity_parameters
from .sweep import sweep
from .passage import PASSAGE_METHODS, REWARD_SUMS, PassageInfo, PassageResult, passage
from .transient import TRANSIENT_METHODS, TRANSIENT_METRICS, TransientInfo, TransientResult, solve_transient, time_grid

__version__ = "0.1.0"

__all__ = [
    "Aqm", "Chain", "DropFunction", "GridSpec", "HurstReport", "Model", "Service", "Source", "TrafficClass",
    "ClassMetrics", "CLASS_METRICS",
    "ModelError", "OptionError", "ReducibleChainError", "SolverError", "StateSpaceTooLarge",
    "NonConvergenceError", "CountTruncationError", "SolverInfo", "StationaryResult", "DirectSolver", "WarmStart",
    "build_chain", "estimate_chain", "hurst", "ssmp_q_for_mean", "redwm_s_grid", "stateful_info", "stateful_observables",
    "load_config", "load_model", "model_from_dict", "model_to_dict",
    "solve_stationary", "state_labels", "transition_matrix", "refine_grid", "ErrorEstimate",
    "simulate", "SimulationResult", "compare", "Comparison", "compare_policies", "PolicyComparison",
    "Phase", "Scenario", "load_scenario", "make_scenario",
    "passage", "PassageResult", "PassageInfo", "PASSAGE_METHODS", "REWARD_SUMS",
    "solve_transient", "TransientResult", "TransientInfo", "time_grid", "TRANSIENT_METHODS", "TRANSIENT_METRICS",
    "simulate_scenario", "EnsembleOptions", "EnsembleResult",
    "optimize", "OptimizeResult", "OPTIMIZE_METHODS", "GRADIENT_METHODS",
    "sensitivities", "Sensitivities", "sensitivity_parameters",
    "plots", "HURST_ESTIMATORS", "HurstEstimate", "estimate_hurst", "hurst_from_trace", "arrival_trace",
    "aggregated_variance", "rescaled_range", "expected_rs",
    "sweep", "SweepResult", "model_info", "solve_estimate", "count_reachable", "set_num_threads", "num_threads",
    "export_matrix", "export_prism", "export_stationary", "stationary_table",
    "apply_overrides", "replace", "solver_options",
    "fit_source", "FitResult", "FIT_KINDS", "read_trace", "simulate_trace",
    "simulate_passage", "PassageSimulation", "PASSAGE_REWARDS",
]


def __getattr__(name: str):
    if name == "SweepResult":  # made on first use (pandas loads only for sweeps)
        import importlib

        return importlib.import_module(".sweep", __name__).SweepResult
    raise AttributeError(f"module 'aqmchain' has no attribute {name!r}")
