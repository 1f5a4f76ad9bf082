"""Command line: ``aqmchain COMMAND MODEL.toml [options]``.

Commands (one function ``_cmd_<name>`` each): solve, simulate, compare, policies, transient, passage,
optimize, sweep, info (alias estimate), export.  Every command takes ``--set KEY=VALUE``
(override a model-file key), ``--threads N`` and ``-q/--quiet``; ``aqmchain --version``.

Exit codes: 0 ok, 2 bad input (the message names the key and the value; also an unreadable
model file or an output path that cannot be written, checked before any work), 3 the solve
failed (non-convergence, reducible chain, back-end failure; a sweep with a failed point),
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

from . import _checks, _core, _output, _progress
from .modelfile import apply_overrides, load_document, model_from_dict, model_to_dict
from .policies import compare_policies
from .simulation import SCALARS as SIM_SCALARS
from .simulation import Comparison, simulate
from .scenario import load_scenario
from .fit import FIT_KINDS, MULTIPLE_RULES
from .selfsim import HURST_ESTIMATORS
from .stationary import CLASS_CHAINS, METHODS, SCALAR_METRICS, NonConvergenceError, solve_stationary
from .optimize import OPTIMIZE_METHODS
from .transient import TRANSIENT_METHODS, solve_transient, time_grid
from .passage import PASSAGE_DEFAULTS, PASSAGE_METHODS, REWARD_SUMS

EXIT_OK, EXIT_INPUT, EXIT_SOLVE, EXIT_INTERRUPTED, EXIT_PIPE = 0, 2, 3, 130, 141
GIB = 1024.0**3

# optimize()'s arguments -> command-line names (for messages)
_OPTIMIZE_NAMES = {"starts": "--starts", "bounds": "--bounds", "objective": "--objective", "params": "--params",
                   "step": "--step", "min_step": "--min-step", "max_evals": "--max-evals",
                   "constraints": "--constraint", "method": "--method", "fidelity": "--fidelity", "keep": "--keep",
                   "screen": "--screen"}
# simulation option -> command-line name (for messages)
# passage()'s arguments -> command-line names (for messages)
_PASSAGE_NAMES = {"to": "--to", "times": "--times", "p0": "--p0", "rewards": "--rewards", "method": "--method",
                  "tol": "--tol", "max_steps": "--max-steps"}
_SIM_NAMES = {"slots": "--slots", "replications": "--replications", "seed": "--seed", "warmup": "--warmup",
              "batches": "--batches", "discretised": "--discretised", "threads": "--threads"}

#: One-line description and examples of every command (the examples are run by the tests,
#: from the repository root, with their slot counts made smaller).
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "solve": ("stationary solution and metrics of a model file", [
        "aqmchain solve examples/red_geo.toml --json out.json",
        "aqmchain solve examples/red_geo.toml --set aqm.w=0.02 --method direct --csv out.csv",
        "aqmchain solve examples/small_ecn.toml --json - -q",
        "aqmchain solve examples/red_geo.toml --plot solve.png",
    ]),
    "simulate": ("slotted Monte Carlo simulation with 95 % confidence intervals", [
        "aqmchain simulate examples/red_geo.toml --slots 2000000 --seed 1 --json sim.json",
        "aqmchain simulate examples/small_ecn.toml --slots 1000000 --threads 2 --csv sim.csv",
    ]),
    "compare": ("chain against simulation: metric, analytic, simulated ± 95 %, z-score, queue pmf plot", [
        "aqmchain compare examples/red_geo.toml --slots 2000000 --plot cmp.png --json cmp.json",
    ]),
    "policies": ("response times under tail, front and random drop, side by side", [
        "aqmchain policies examples/small_ecn.toml --json policies.json --plot policies.png",
    ]),
    "transient": ("metrics over time from an initial law, for a model or a load scenario", [
        "aqmchain transient examples/load_step/sred.toml --scenario examples/load_step/scenario.toml "
        "--times lin:0:10000:101 --csv tr.csv --plot tr.png",
        "aqmchain transient examples/red_ctmc.toml --times log:1:1000:20 --json tr.json",
    ]),
    "passage": ("first passage into a target set: time to overflow, drain time, P(reach within t), rewards", [
        "aqmchain passage examples/small_ecn.toml --to 'queue>=25' --times log:1:1e5:41 --rewards drops,marks "
        "--json passage.json --plot passage.png",
        "aqmchain passage examples/small_ecn.toml --to 'queue==0' --p0 level=30,avg_index=40,modulator=1 --times lin:0:2000:21 --csv drain.csv",
        "aqmchain passage examples/red_ctmc.toml --to 'queue>=50' --p0 stationary --times log:0.1:1e4:41",
    ]),
    "optimize": ("search over model parameters minimising a metric (direct or gradient-based)", [
        "aqmchain optimize examples/small_ecn.toml --params aqm.w --objective mean_response --bounds aqm.w=0.01:0.5 "
        "--max-evals 15 --json opt.json",
        "aqmchain optimize examples/small_ecn.toml --params aqm.p_max,aqm.w --objective loss --method slsqp "
        "--constraint 'mean_queue<=4' --bounds aqm.p_max=0.01:1 --bounds aqm.w=0.01:1",
    ]),
    "sweep": ("solve (and simulate) a model over a grid of model-file keys, on Dask", [
        "aqmchain sweep examples/small_ecn.toml --param aqm.w=0.05,0.1,0.2 --param service.mu=0.4:0.6:3 "
        "--csv sweep.csv --plot sweep.png",
        "aqmchain sweep examples/small_ecn.toml --param aqm.p_max=0.1,0.2 --simulate --slots 500000 "
        "--scheduler sync --json sweep.json",
    ]),
    "hurst": ("Hurst parameter of a model's arrival source by several estimators (docs/hurst.md)", [
        "aqmchain hurst examples/dsred_ssmp.toml --slots 262144 --replications 4",
        "aqmchain hurst examples/dsred_ssmp.toml --estimator exact --range 2^6:2^16 --plot vt.png --json h.json",
    ]),
    "fit": ("fit a bernoulli, mmbp, ssmp or mmpp source to a packet trace (pcap, CSV, NumPy; docs/trace-fitting.md)", [
        "aqmchain fit examples/traces/mmpp.csv --kind mmbp --slot 0.0005 --output source.toml --json fit.json",
        "aqmchain fit examples/traces/mmpp.csv --kind mmpp --output source.toml --model-file model.toml --plot fit.png",
        "aqmchain fit examples/traces/mmpp.csv --kind ssmp --slot 0.0005 --compare examples/small_ecn.toml --json cmp.json",
    ]),
    "info": ("states (exact when cheap), transitions, memory and the tagged-chain cost, without solving", [
        "aqmchain info examples/red_geo.toml",
        "aqmchain info examples/red_geo_w0002.toml --json info.json",
    ]),
    "export": ("write the transition matrix (Matrix Market, PRISM explicit files) and the stationary vector", [
        "aqmchain export examples/small_ecn.toml --matrix P.mtx --prism small_ecn --stationary pi.csv",
    ]),
}
_ALIASES = {"info": ["estimate"]}


def _opt_error(param: str, bound: str, value: object) -> _core.ModelError:
    e = _core.ModelError(f"option '{param}' must be {bound}, got {_checks.fmt(value)}")
    e.param = param
    return e


# ------------------------------------------------------------------ output


def _check_output(option: str, path: str | None) -> None:
    """Refuse an output path that cannot be written, before any work is done."""
    if path is None or path == "-":
        return
    if not path.strip():
        e = _core.ModelError(f"option '{option}' must be a file name (or '-' for stdout where allowed), got ''")
        e.param = option
        raise e
    if option == "--plot":  # the image format, before the work (matplotlib is imported only now)
        from .plots import figure_format

        figure_format(path, option)
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    why = None
    if p.is_dir():
        why = "it is a directory"
    elif not parent.is_dir():
        why = f"directory '{parent}' does not exist"
    elif not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        why = "permission denied"
    if why:
        e = _core.ModelError(f"option '{option}': cannot write '{path}': {why}")
        e.param = option
        raise e


def _check_outputs(args: argparse.Namespace, *options: str) -> None:
    for opt in options:
        _check_output(opt, getattr(args, opt[2:].replace("-", "_"), None))


def _write(option: str, path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        e = _core.ModelError(f"option '{option}': cannot write '{path}': {exc.strerror or exc}")
        e.param = option
        raise e from None


def _meta(args: argparse.Namespace) -> dict:
    """What every JSON carries: the command, the library version, the model as parsed (and
    the estimate made before building, for the commands that build a chain)."""
    from . import __version__

    meta = {"command": "aqmchain " + shlex.join(args.argv), "version": __version__}
    if getattr(args, "estimate", None) is not None:
        meta["estimate"] = args.estimate
    if getattr(args, "model_doc", None) is not None:
        meta["model"] = args.model_doc
    if getattr(args, "solver_doc", None):
        meta["solver_options"] = args.solver_doc
    return meta


def _write_json(args: argparse.Namespace, payload: dict, option: str = "--json") -> None:
    """The payload with ``command``, ``version`` and ``model`` (the model as parsed; named
    ``input_model`` where the payload has a ``model`` of its own, e.g. optimize's best)."""
    meta = _meta(args)
    if "model" in payload and "model" in meta:
        meta["input_model"] = meta.pop("model")
    out = {**payload, **meta}
    _write(option, getattr(args, option[2:]), json.dumps(_output.json_safe(out), indent=1, allow_nan=False) + "\n")


def _csv_text(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else (repr(float(v)) if isinstance(v, float) else v) for v in r])
    return buf.getvalue()


def _save_figure(option: str, fig, path: str) -> None:
    from .plots import save

    try:
        save(fig, path, option, dpi=120, bbox_inches="tight")
    except OSError as exc:
        e = _core.ModelError(f"option '{option}': cannot write '{path}': {exc.strerror or exc}")
        e.param = option
        raise e from None


def _capped_dict(result) -> dict:
    """result.to_dict() with the pmfs capped (see docs/model-file.md, "Output")."""
    short, info = _output.capped(result)
    d = short.to_dict()
    d.update(info)
    return d


def _summary_stream(args: argparse.Namespace):
    """The summary goes to stdout unless an output does (``--json -`` / ``--csv -``)."""
    outs = (getattr(args, "json", None), getattr(args, "csv", None), getattr(args, "output", None))
    return sys.stderr if "-" in outs else sys.stdout


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=_summary_stream(args))


def _progress_on(args: argparse.Namespace) -> bool:
    return _progress.enabled(args.quiet)


# ------------------------------------------------------------------ model and options


def _config(args: argparse.Namespace, doc: dict | None = None) -> tuple[_core.Model, dict]:
    """Load the model file (or use its parsed document), apply ``--set``; remember where each
    solver option came from (for messages) and the model as parsed (for the JSON)."""
    _threads(args)
    if doc is None:
        doc = load_document(args.model)
    if args.set:
        doc = apply_overrides(doc, args.set)
    args.doc = doc
    model, solver = model_from_dict(doc)
    args.names = {k: f"solver.{k}" for k in solver}
    args.names.setdefault("memory_limit_gb", "solver.memory_limit_gb")
    args.model_doc = model_to_dict(model)
    args.solver_doc = dict(solver)
    return model, solver


def _threads(args: argparse.Namespace) -> int:
    """--threads N: the simulator's threads and a cap on the core's parallel loops
    (absent or 0: every core)."""
    n = args.threads
    if n is None:
        return 0
    if not 0 <= n <= 4096:
        raise _opt_error("--threads", "in [0, 4096] (0: every core)", n)
    if n > 0:
        _core.set_num_threads(n)
    return n


def _sim_unit(model) -> str:
    """What --slots counts: slots, or the model's time units (continuous-time models)."""
    return "time units" if model.time == "continuous" else "slots"


def _sim_kwargs(args: argparse.Namespace) -> dict:
    kw = _checks.sim_options(args.slots, args.warmup, args.replications, args.seed, args.batches,
                             args.discretised, 0, 0, names=_SIM_NAMES, err=_opt_error)
    kw["threads"] = _threads(args)
    return kw


def _solver_overrides(args: argparse.Namespace, solver: dict) -> dict:
    if getattr(args, "method", None) is not None:
        solver["method"] = args.method
    for key in ("tol", "max_iter", "memory_limit_gb"):  # checked by the core's table of options (the budget here)
        if getattr(args, key, None) is not None:
            flag = "--" + key.replace("_", "-")
            solver.update(_checks.solver_options({key: getattr(args, key)}, names={key: flag}, err=_opt_error))
            args.names[key] = flag
    args.memory_limit_gb = solver.get("memory_limit_gb")
    args.solver_doc = dict(solver)
    return solver


def _class_chain_arg(value: str) -> str:
    """--classes: a chain of CLASS_CHAINS, or window:L."""
    if value in CLASS_CHAINS or re.fullmatch(r"window:[0-9]{1,4}", value):
        return value
    raise argparse.ArgumentTypeError(f"invalid choice: '{value}' (choose from {', '.join(CLASS_CHAINS)} or window:L)")


def _announce(args: argparse.Namespace, model: _core.Model, solver: dict, classes: str = "approx",
              response: str = "auto") -> dict:
    """Before anything is built: the estimate of :func:`aqmchain.solve_estimate` (JSON key
    ``estimate``), on stderr when the model is large or its bounds exceed a budget (not
    under -q)."""
    from .modelinfo import estimate_text, solve_estimate

    est = solve_estimate(model, classes=classes, response=response, **solver)
    args.estimate = est
    if est["large"] and not args.quiet:
        print("aqmchain: " + estimate_text(est).replace("\n", "\naqmchain: "), file=sys.stderr, flush=True)
    return est


def _solve(args: argparse.Namespace, model: _core.Model, solver: dict, what: str = "solving", **kw):
    with _progress.activity(_progress_on(args), f"aqmchain: {what}"):
        return solve_stationary(model, **solver, **kw)


def _scalar_rows(result) -> list[list]:
    return [[name, getattr(result, name)] for name, _ in SCALAR_METRICS]


# ------------------------------------------------------------------ commands


def _cmd_solve(args: argparse.Namespace) -> int:
    _check_outputs(args, "--json", "--csv", "--plot")
    model, solver = _config(args)
    solver = _solver_overrides(args, solver)
    est = _core.estimate_chain(model)
    if not args.quiet:
        filt = (f"w {model.aqm.w}" if model.aqm.filter == "ewma"
                else f"REDwM a {list(model.aqm.a)} b {list(model.aqm.b)}")
        print(f"model {args.model}: buffer {model.buffer}, source {model.source!r}, drop {model.aqm.drop.kind}, "
              f"{filt}, grid k={model.grid.k} ({model.grid.mapping}, refine {model.grid.refine}); "
              f"at most {est['reachable_bound']} states" + (" before refinement" if model.grid.refine == "auto" else ""),
              file=sys.stderr)
    _announce(args, model, solver, classes=args.classes)
    try:
        result = _solve(args, model, solver, error_estimate=args.error_estimate, classes=args.classes)
    except NonConvergenceError as exc:
        print(f"aqmchain: {_message(exc, args)}", file=sys.stderr)
        if args.json:
            payload = _capped_dict(exc.result)
            payload["error"] = str(exc)
            _write_json(args, payload)
        return EXIT_SOLVE
    _say(args, result.summary())
    if result.error_estimate is not None:
        _say(args, "\ndiscretisation error estimate (grids with 4x, 2x, 1x the steps):\n"
             + result.error_estimate.table())
    sens = None
    if args.sensitivities or args.sensitivity_metrics or args.sensitivity_params:
        # an error names the flag, not the function's argument (_message)
        args.names.update(metrics="--sensitivity-metrics", params="--sensitivity-params")
        with _progress.activity(_progress_on(args), "aqmchain: sensitivities"):
            sens = result.sensitivities(metrics=args.sensitivity_metrics, params=args.sensitivity_params)
        shown = [m for m in dict.fromkeys(args.sensitivity_metrics or ("mean_queue", "loss", "mean_response"))
                 if m in sens.values]
        more = len(sens.values) - len(shown)
        _say(args, f"\nsensitivities ({sens.info['method']} adjoint, {sens.info['seconds']['total']:.3g} s"
             + (f"; {more} more metrics in the JSON output" if more else "") + "):\n"
             + "\n\n".join(sens.table(m) for m in shown))
    if args.json:
        _write_json(args, {**_capped_dict(result), **(sens.to_dict() if sens is not None else {})})
    if args.csv:
        _write("--csv", args.csv, _csv_text(["metric", "value"], _scalar_rows(result)
                                            + [["states", result.states], ["nnz", result.nnz]]))
    if args.plot:
        from matplotlib.figure import Figure

        from . import plots

        fig = Figure(figsize=(12, 4.6), layout="constrained")
        left, right = fig.subplots(1, 2)
        plots.queue_pmf(result, ax=left, name=Path(args.model).name)
        plots.heatmap(result, ax=right, name=Path(args.model).name)
        _save_figure("--plot", fig, args.plot)
    return EXIT_OK


def _cmd_simulate(args: argparse.Namespace) -> int:
    kwargs = _sim_kwargs(args)
    _check_outputs(args, "--json", "--csv")
    model, _ = _config(args)
    with _progress.activity(_progress_on(args), f"aqmchain: simulating {args.replications} x {args.slots} "
                                                f"{_sim_unit(model)}"):
        result = simulate(model, **kwargs)
    _say(args, result.summary())
    if args.json:
        _write_json(args, _capped_dict(result))
    if args.csv:
        rows = [[n, getattr(result, n), result.ci.get(n)] for n in SIM_SCALARS]
        _write("--csv", args.csv, _csv_text(["metric", "value", "half_width_95"], rows))
    return EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    kwargs = _sim_kwargs(args)
    _check_outputs(args, "--plot", "--json", "--csv")
    model, solver = _config(args)
    args.memory_limit_gb = solver.get("memory_limit_gb")
    _announce(args, model, solver)
    analytic = _solve(args, model, solver)
    with _progress.activity(_progress_on(args), f"aqmchain: simulating {args.replications} x {args.slots} "
                                                f"{_sim_unit(model)}"):
        sim = simulate(model, **kwargs)
    cmp = Comparison(analytic, sim)
    if not args.discretised:
        mode = "continuous avg"
    elif cmp.chain_law == "approx":
        mode = ("discretised avg (the chain's grid; the two-class chain is an approximation of this law, "
                "compare the classes below)")
    else:
        mode = "discretised avg (the chain is its exact law)"
    _say(args, f"chain: {analytic.states} states, residual {analytic.info.residual:.1e}; simulation: "
               f"{args.replications} x {args.slots} {_sim_unit(model)}, {mode}, seed {args.seed}")
    _say(args, cmp.table())
    _say(args, f"max |z| = {cmp.max_abs_z():.2f}" + (" (over the metrics where z is defined)" if cmp.undefined() else ""))
    if args.json:
        _write_json(args, {"comparison": cmp.to_dict(), "analytic": _capped_dict(analytic),
                           "simulation": _capped_dict(sim)})
    if args.csv:
        _write("--csv", args.csv, _csv_text(["metric", "analytic", "simulated", "half_width_95", "z"],
                                            [list(r) for r in cmp.rows + cmp.class_rows]))
    if args.plot:
        fig = cmp.plot(name=Path(args.model).name)
        _save_figure("--plot", fig, args.plot)
        _say(args, f"queue pmf overlay written to {args.plot}")
    return EXIT_OK


def _cmd_policies(args: argparse.Namespace) -> int:
    _check_outputs(args, "--json", "--csv", "--plot")
    model, solver = _config(args)
    args.memory_limit_gb = solver.get("memory_limit_gb")
    _announce(args, model, solver, response="tagged")
    bar = _progress.bar(_progress_on(args), 3, "aqmchain: policies", unit="policy")

    def progress(i: int, n: int, policy: str) -> None:
        if i:
            bar.update(1)
        if policy:
            bar.set_postfix_str(policy + (" (tagged-packet chain)" if policy != "tail" else ""))

    try:
        cmp = compare_policies(model, progress=progress, **solver)
    finally:
        bar.close()
    _say(args, cmp.table())
    if args.json:
        _write_json(args, {"policies": cmp.rows(), "note": cmp.note()})
    if args.csv:
        rows = cmp.rows()
        keys = list(rows[0])
        _write("--csv", args.csv, _csv_text(keys, [[r[k] for k in keys] for r in rows]))
    if args.plot:
        from .plots import response_pmf

        _save_figure("--plot", response_pmf(cmp, name=Path(args.model).name), args.plot)
    return EXIT_OK


def _cmd_info(args: argparse.Namespace) -> int:
    from .modelinfo import model_info

    if args.command == "estimate" and args.json is None:
        args.json = "-"  # the alias keeps the command's original output: JSON on stdout
    _check_outputs(args, "--json")
    model, solver = _config(args)
    explore = {"auto": None, "always": True, "never": False}[args.explore]
    from .modelinfo import solve_estimate

    est = solve_estimate(model, **solver)
    with _progress.activity(_progress_on(args), "aqmchain: exploring the state space"):
        info = model_info(model, explore=explore, memory_limit_gb=solver.get("memory_limit_gb"))
    info["estimate"] = est
    if args.json:
        _write_json(args, info)
        if args.json == "-":
            return EXIT_OK
    if args.quiet:
        return EXIT_OK
    comps = ", ".join(f"{k} {v}" for k, v in info.get("refined_bounds", info)["components"].items())
    lines = [f"model {args.model}: components {comps}"]
    bounds = info.get("refined_bounds", info)
    if info["exact"]:
        lines.append(f"reachable states  {info['reachable_states']:,} (exact, explored in "
                     f"{info['explore_seconds']:.2f} s)")
        lines.append(f"transitions       at most {info['transitions_bound']:,}")
    else:
        loose = "" if info.get("bound_tight", True) else ", a loose bound"
        lines.append(f"reachable states  at most {info['reachable_bound']:,} (bound{loose}; --explore always for "
                     "the exact count)")
        lines.append(f"transitions       at most {info['max_nnz']:,}")
    lines.append(f"product space     {bounds['product_states']:,} states")
    lines.append(f"builder memory    at most {bounds['bytes'] / 1e9:.3g} GB")
    if "grid" in info:
        g = info["grid"]
        lines.append(f"automatic grid    {g.get('points')} avg points after the pre-solve "
                     f"({g.get('presolve_seconds', 0):.2f} s)")
    elif "grid_note" in info:
        lines.append(f"automatic grid    {info['grid_note']}")
    lines.append(f"policies          {info['policy_cost']}")
    b = est["budgets"]
    lines.append(f"time (rough)      {est['build_seconds']:.3g} s to build, {est['solve_seconds']:.3g} s to solve on one "
                 f"core, from the bounds ({est['structure']} chain)")
    lines.append(f"budgets           solver.max_states = {b['max_states']:,}, solver.memory_limit_gb = "
                 f"{b['memory_limit_gb']:g}, solver.tagged_max_states = {b['tagged_max_states']:,}")
    if info.get("exact") and info["reachable_states"] > b["max_states"]:
        lines.append(f"over a budget     {info['reachable_states']:,} reachable states: solve refuses above "
                     f"solver.max_states (raise it to {info['reachable_states']:,})")
    elif not info.get("exact"):
        lines.extend(f"over a budget     {x}" for x in est["over_budget"] if x.startswith(("max_states", "memory")))
    if info.get("tagged_states", 0) > b["tagged_max_states"]:
        lines.append(f"over a budget     the tagged-packet chain ({info['tagged_states']:,} states) is above "
                     f"solver.tagged_max_states: policies and front / random drop refuse it (raise it to "
                     f"{info['tagged_states']:,})")
    print("\n".join(lines), file=_summary_stream(args))
    return EXIT_OK


def _floats(option: str, text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise _opt_error(option, "comma-separated numbers", text) from None


def _cmd_optimize(args: argparse.Namespace) -> int:
    from .optimize import PAPER_GRID_NAMES, optimize

    _check_outputs(args, "--json", "--csv")
    model, solver = _config(args)
    params = [p.strip() for p in args.params.split(",") if p.strip()]
    starts: object = args.starts
    if args.starts in PAPER_GRID_NAMES:
        starts = "paper"
    elif args.starts != "current":
        starts = [_floats("--starts", pt) for pt in args.starts.split(";") if pt.strip()]
    bounds = {}
    for b in args.bounds or []:
        name, sep, rng = b.partition("=")
        lo, sep2, hi = rng.partition(":")
        if not sep or not sep2:
            raise _opt_error("--bounds", "NAME=LO:HI", b)
        bounds[name.strip()] = tuple(_floats("--bounds", f"{lo},{hi}"))
    kwargs: dict = {"params": params, "objective": args.objective, "method": args.method, "starts": starts,
                    "solver": solver, "warm": not args.cold}
    if args.constraint:
        kwargs["constraints"] = args.constraint
    if args.fidelity:
        from .modelfile import parse_value

        levels = []
        for level in args.fidelity.split(";"):
            over = {}
            for item in level.split(","):
                key, sep, value = item.partition("=")
                if not sep or not key.strip():
                    raise _opt_error("--fidelity", "levels 'KEY=VALUE,KEY=VALUE;KEY=VALUE' (e.g. 'grid.k=1;grid.k=2')",
                                     args.fidelity)
                over[key.strip()] = parse_value(value, key.strip())
            levels.append(over)
        kwargs["fidelity"] = levels
        if args.keep is not None:
            kwargs["keep"] = args.keep
        if args.search_every_level:
            kwargs["fidelity_stop"] = False
    if args.screen is not None:
        kwargs["screen"] = args.screen
    if bounds:
        kwargs["bounds"] = bounds
    if args.step:
        kwargs["step"] = _floats("--step", args.step)
    if args.min_step:
        kwargs["min_step"] = _floats("--min-step", args.min_step)
    if args.max_evals is not None:
        kwargs["max_evals"] = args.max_evals
    if args.scheduler is not None:
        from .sweep import resolve_scheduler

        args.names["scheduler"] = "--scheduler"
        kwargs["scheduler"] = resolve_scheduler(args.scheduler)  # an unreachable address fails here, at once
    _threads(args)
    _announce(args, model, solver)

    def progress(rec: dict) -> None:
        if args.quiet:
            return
        xs = ", ".join(f"{v:.6g}" for v in rec["x"].values())
        what = f"{args.objective} = {rec['value']:.8g}" if rec["status"] == "ok" else rec["status"]
        states = "" if rec["states"] is None else f", {rec['states']} states"
        tail = f" ({rec['seconds']:.2f} s{states})" if rec["status"] != "infeasible" else ""
        print(f"aqmchain: optimize: start {rec['start'] + 1}, [{xs}]: {what}{tail}"
              + (f": {rec['message']}" if rec["status"] == "failed" else ""), file=sys.stderr, flush=True)

    result = optimize(model, callback=progress, **kwargs)
    if args.json:
        _write_json(args, result.to_dict())
    if args.csv:
        _write("--csv", args.csv, result.trace_csv())
    _say(args, result.summary())
    return EXIT_OK if result.success else EXIT_SOLVE


def _parse_times(text: str, integer: bool) -> list[float]:
    """--times: "10,100,1000", "log:START:STOP:NUM" or "lin:START:STOP:NUM"."""
    try:
        if text.startswith(("log:", "lin:")):
            kind, a, b, n = text.split(":")
            t = time_grid("log" if kind == "log" else "linear", float(a), float(b), int(float(n)), integer=integer)
            times = [float(x) for x in t]
        else:
            times = [float(x) for x in text.split(",") if x.strip()]
    except (ValueError, _core.ModelError, _core.OptionError) as exc:
        raise _opt_error("--times", "a list '10,100,1000' or 'log:START:STOP:NUM' / 'lin:START:STOP:NUM' with "
                         "0 <= START <= STOP (START > 0 for log)", text) from exc
    if times and max(times) > _core.Scenario.max_duration:
        raise _opt_error("--times", f"at most {_core.Scenario.max_duration:g} (the longest horizon)", max(times))
    return times


def _keeping_partial(bar: Any, compute: Callable[[], Any]) -> tuple[Any, int, dict]:
    """``compute()``, the progress bar closed after it; a NonConvergenceError is reported and its
    partial result kept: (result, exit status, JSON payload, with ``error`` when it did not converge)."""
    status = EXIT_OK
    try:
        result = compute()
    except NonConvergenceError as exc:
        print(f"aqmchain: {exc}", file=sys.stderr)
        result, status = exc.result, EXIT_SOLVE
    finally:
        bar.close()
    payload = result.to_dict()
    if status != EXIT_OK:
        payload["error"] = result.info.note
    return result, status, payload


def _cmd_transient(args: argparse.Namespace) -> int:
    _check_outputs(args, "--json", "--csv", "--plot")
    model, solver = _config(args)  # read once: the model and the scenario's base (args.doc)
    _threads(args)
    target = load_scenario(args.scenario, args.doc) if args.scenario else model
    discrete = model.time == "discrete"
    times = _parse_times(args.times, integer=discrete and args.method in ("auto", "step"))
    pmf_times = _parse_times(args.pmf_times, integer=discrete and args.method in ("auto", "step")) \
        if args.pmf_times else []
    end = max(times) if times else 0.0
    bar = _progress.bar(_progress_on(args), float(end) if end > 0 else None, "aqmchain: transient", unit="t")

    def progress(t: float, end_: float) -> None:
        bar.update(max(0.0, float(t) - bar.n))

    kwargs = {"method": args.method, "pmf_times": pmf_times, "progress": progress,
              "memory_limit_gb": solver.get("memory_limit_gb"), "max_states": solver.get("max_states")}
    _announce(args, model, solver, response="none")
    if args.tol is not None:
        kwargs["tol"] = args.tol
    if args.steady_tol is not None:
        kwargs["steady_tol"] = args.steady_tol
    result, status, payload = _keeping_partial(bar, lambda: solve_transient(target, times, **kwargs))
    if args.json:
        _write_json(args, payload)
    if args.csv:
        names = list(result.metrics)  # the fixed metrics, then a stateful AQM's components
        rows = []
        for k, t in enumerate(result.times):
            rows.append([float(t), int(result.phase[k])] + [float(result.metrics[m][k]) for m in names])
        _write("--csv", args.csv, _csv_text(["time", "phase", *names], rows))
    if args.plot:
        fig = result.plot(name=Path(args.model).name + (f" + {Path(args.scenario).name}" if args.scenario else ""))
        _save_figure("--plot", fig, args.plot)
    if not args.quiet:
        i = result.info
        steady = [f"{t:g}" for t in i.steady_at if t >= 0]
        _say(args, f"transient ({i.method}): {result.states} states, {len(result.times)} output times, "
                   f"{i.iterations} steps, {i.matvecs} products, {i.seconds.get('transient_total', 0.0):.2f} s"
                   + (f"; steady state detected at t = {', '.join(steady)}" if steady else ""))
        if len(result.times):
            _say(args, f"  at t = {result.times[-1]:g}: mean queue {result.mean_queue[-1]:.6g}, "
                       f"mean avg {result.mean_avg[-1]:.6g}, loss {result.loss[-1]:.6g}")
    return status


def _passage_p0(text: str | None, model: _core.Model, solver: dict, args: argparse.Namespace) -> object:
    """--p0: 'empty', 'stationary' (the model's stationary law), 'stationary:FILE' (the stationary
    law of another model file, e.g. the load before a step) or component values 'level=200,modulator=1'."""
    if text is None or text == "empty":
        return None
    if text == "stationary" or text.startswith("stationary:"):
        other = model
        if text.startswith("stationary:"):
            other = model_from_dict(apply_overrides(load_document(text.split(":", 1)[1]), args.set))[0]
        with _progress.activity(_progress_on(args), "aqmchain: stationary law for --p0"):
            return solve_stationary(other, **{k: v for k, v in solver.items()
                                              if k not in ("memory_limit_gb", "max_states")})
    values: dict[str, int] = {}
    for part in text.split(","):
        key, eq, val = part.partition("=")
        try:
            if not eq:
                raise ValueError
            values[key.strip()] = int(float(val))
        except ValueError:
            raise _opt_error("--p0", "'empty', 'stationary', 'stationary:FILE' or component values "
                             "'level=200,modulator=1'", text) from None
    return values


def _cmd_passage(args: argparse.Namespace) -> int:
    from .passage import passage

    _check_outputs(args, "--json", "--csv", "--plot")
    model, solver = _config(args)
    _threads(args)
    discrete = model.time == "discrete"
    times = _parse_times(args.times, integer=discrete) if args.times else []
    p0 = _passage_p0(args.p0, model, solver, args)
    end = max(times) if times else 0.0
    bar = _progress.bar(_progress_on(args), float(end) if end > 0 else None, "aqmchain: passage", unit="t")

    def progress(t: float, end_: float) -> None:
        bar.update(max(0.0, float(t) - bar.n))

    kwargs = {"method": args.method, "progress": progress, "p0": p0, "rewards": args.rewards or (),
              "memory_limit_gb": solver.get("memory_limit_gb"), "max_states": solver.get("max_states")}
    if args.tol is not None:
        kwargs["tol"] = args.tol
    if args.max_steps is not None:
        kwargs["max_steps"] = args.max_steps
    _announce(args, model, solver, response="none")
    # the stationary law of this model comes with its chain: no second build
    result, status, payload = _keeping_partial(
        bar, lambda: passage(p0 if args.p0 == "stationary" else model, args.to, times=times, **kwargs))
    if args.json:
        _write_json(args, payload)
    if args.csv:
        head, rows = result.csv_rows()
        _write("--csv", args.csv, _csv_text(head, rows))
    if args.plot:
        fig = result.plot(name=Path(args.model).name, survival=args.survival)
        _save_figure("--plot", fig, args.plot)
    if not args.quiet:
        i = result.info
        _say(args, f"passage to {result.target} ({i.method}): {result.states} states ({i.target_states} in the "
                   f"target), {len(result.times)} output times, {i.iterations} steps, {i.matvecs} products, "
                   f"{i.seconds.get('passage_total', 0.0):.2f} s, cdf error bound {i.error_bound:.2g}")
        _say(args, f"  P(T < inf) = {result.reach_probability:.10g}, E[T] = {result.mean:.10g}"
                   + "".join(f", E[{k} before T] = {v:.6g}" for k, v in result.rewards_until.items()))
        if len(result.times):
            _say(args, f"  P(T <= {result.times[-1]:g}) = {result.cdf[-1]:.6g}")
    return status


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import parse_values, resolve_scheduler, sweep

    _check_outputs(args, "--json", "--csv", "--plot")
    model, solver = _config(args)
    solver = _solver_overrides(args, solver)
    params: dict = {}
    for p in args.param or []:
        key, sep, values = p.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise _opt_error("--param", "KEY=VALUES (e.g. aqm.w=0.002,0.005 or service.mu=0.25:0.5:6)", p)
        if key.strip() in params:
            raise _opt_error("--param", "each key once", key.strip())
        params[key.strip()] = parse_values(key.strip(), values)
    if not params:
        raise _opt_error("--param", "given at least once (KEY=VALUES)", None)
    _announce(args, model, solver)
    sim_opts = None
    if args.simulate:
        sim_opts = _sim_kwargs(args)
        sim_opts["threads"] = args.threads or 1
    if args.scheduler is not None:
        args.names["scheduler"] = "--scheduler"
    scheduler = resolve_scheduler(args.scheduler)
    if args.workers is not None and not 1 <= args.workers <= 1024:
        raise _opt_error("--workers", "in [1, 1024]", args.workers)
    if args.threads:
        _threads(args)
    n_points = 1
    for v in params.values():
        n_points *= len(v)
    bar = _progress.bar(_progress_on(args), n_points, "aqmchain: sweep", unit="point", delay=0.0)
    failed = [0]

    def progress(done: int, total: int, rec: dict) -> None:
        failed[0] += rec["status"] != "ok"
        bar.update(1)
        if failed[0]:
            bar.set_postfix_str(f"{failed[0]} failed")

    solver_opts = {k: v for k, v in solver.items()}
    try:
        result = sweep(args.doc, params, simulate=args.simulate, sim_options=sim_opts, solver=solver_opts,
                       scheduler=scheduler, workers=args.workers, keep_results=False, progress=progress,
                       warm=not args.cold)
    finally:
        bar.close()
    if args.csv:
        _write("--csv", args.csv, result.to_csv_text())
    if args.json:
        _write_json(args, {"sweep": {"keys": result.sweep_keys, "points": len(result),
                                     "scheduler": scheduler if isinstance(scheduler, str) else "client",
                                     "failed": int((result["status"] != "ok").sum())},
                           "rows": result.to_records_json()})
    if args.plot:
        metric = args.metric
        fig = result.plot_curves(metric)
        fig.axes[0].set_title(f"{Path(args.model).name}: " + fig.axes[0].get_title())
        _save_figure("--plot", fig, args.plot)
    if not args.quiet:
        shown = list(dict.fromkeys(m for m in ("mean_queue", "loss", "mean_response", args.metric)
                                   if m in result.columns))
        _say(args, result.table(shown))
        _say(args, result.summary())
    for _, row in result.failed.iterrows():
        where = ", ".join(f"{k} = {_checks.fmt(row[k])}" for k in result.sweep_keys)
        print(f"aqmchain: sweep point {where}: {row['status']}: {row['error']}", file=sys.stderr)
    return EXIT_OK if (result["status"] == "ok").all() else EXIT_SOLVE


def _parse_range(option: str, text: str) -> tuple[float, float]:
    """'LO:HI' in slots; each side a number or a power of two written 2^K."""
    def one(v: str) -> float:
        v = v.strip()
        return 2.0 ** float(v[2:]) if v.startswith("2^") else float(v)

    try:
        lo, hi = (one(v) for v in text.split(":"))
    except ValueError:
        raise _opt_error(option, "LO:HI (slots; numbers or 2^K), e.g. 1:2^20", text) from None
    return lo, hi


def _cmd_hurst(args: argparse.Namespace) -> int:
    from .selfsim import HURST_ESTIMATORS, estimate_hurst

    _check_outputs(args, "--json", "--plot")
    model, _ = _config(args)
    rng = _parse_range("--range", args.range) if args.range else None
    src = model.source
    names = list(HURST_ESTIMATORS) if args.estimator == "all" else [args.estimator]
    if args.estimator == "all" and not (src.kind == "ssmp" and src.q > 1 and src.a > src.q ** 2):
        names.remove("asymptotic")  # the closed form exists for SSMP sources only
    kw = {"slots": args.slots, "replications": args.replications, "seed": args.seed}
    out = []
    with _progress.activity(_progress_on(args), "aqmchain: estimating the Hurst parameter"):
        for name in names:
            try:
                out.append(estimate_hurst(src, name, range=rng if name != "asymptotic" else None, **kw))
            except _core.ModelError as exc:  # the library names its arguments; say the options
                if getattr(exc, "param", None) == "range":
                    raise _opt_error("--range", str(exc).split(" must be ", 1)[-1].split(", got")[0],
                                     args.range) from None
                raise
    _say(args, f"source: {out[0].source}, mean rate {src.mean_rate():.6g} arrivals per slot")
    for e in out:
        _say(args, "  " + e.summary().replace("\n", "\n    "))
    if args.json:
        _write_json(args, {"source": out[0].source, "estimates": [e.to_dict() for e in out]})
    if args.plot:
        from matplotlib.figure import Figure

        from .plots import local_hurst, variance_time

        fig = Figure(figsize=(12, 4.6), layout="constrained")
        left, right = fig.subplots(1, 2)
        first = next((e for e in out if e.estimator != "asymptotic"), None)
        if first is None:  # only the closed form: draw the exact curve it is the limit of
            first = estimate_hurst(src, "exact")
        variance_time(first, ax=left)
        local_hurst(out, ax=right)
        _save_figure("--plot", fig, args.plot)
    return EXIT_OK


def _cmd_fit(args: argparse.Namespace) -> int:
    from .fit import fit_source

    _check_outputs(args, "--output", "--model-file", "--json", "--plot")
    if args.compare and args.kind == "mmpp":
        raise _opt_error("--compare", "used with a slotted --kind (bernoulli, mmbp, ssmp: the trace replay is "
                         "slotted)", args.compare)
    base = None
    if args.compare:
        from .modelfile import load_model

        base = load_model(args.compare)  # read before the fit: a bad model file fails fast
    if args.multiple == "batch" and args.kind != "bernoulli":
        raise _opt_error("--multiple", f"clip or refuse for --kind {args.kind} (batch: --kind bernoulli only)",
                         args.multiple)
    names = {"slot": "--slot", "states": "--states", "lags": "--lags", "column": "--column", "multiple": "--multiple",
             "counts": "--counts", "kind": "--kind"}
    with _progress.activity(_progress_on(args), "aqmchain: fitting the source"):
        try:
            fit = fit_source(args.trace, args.kind, slot=args.slot, states=args.states, counts=args.counts,
                             multiple=args.multiple, lags=args.lags, column=args.column)
        except _core.ModelError as exc:  # the library names its arguments; say the options
            p = getattr(exc, "param", None)
            if p in names:
                msg = str(exc).replace(f"parameter '{p}'", f"option '{names[p]}'")
                e = _core.ModelError(msg)
                e.param = names[p]
                raise e from None
            raise
    _say(args, fit.summary())
    comparison = None
    if base is not None:
        from .fit import simulate_trace
        from .modelfile import replace
        from .simulation import Comparison
        from .stationary import solve_stationary

        model = replace(base, source=fit.source_table())
        with _progress.activity(_progress_on(args), "aqmchain: solving the chain, replaying the trace"):
            comparison = Comparison(solve_stationary(model), simulate_trace(model, fit.counts, seed=args.seed))
        _say(args, f"\nthe fitted chain in {args.compare}'s queue against the trace replayed through it:\n"
                   + comparison.table())
    if args.output:
        _write("--output", args.output, fit.to_toml())
    if args.model_file:
        _write("--model-file", args.model_file, fit.model_section())
    if args.json:
        payload = {"fit": fit.to_dict(), "source_toml": fit.to_toml(), "trace": str(args.trace)}
        if comparison is not None:
            payload["comparison"] = comparison.to_dict()
        _write_json(args, payload)
    if args.plot:
        _save_figure("--plot", fit.plot(), args.plot)
    if not (args.output or args.json or args.model_file or args.compare) and not args.quiet:
        print(fit.to_toml(), end="", file=_summary_stream(args))
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from .export import export_matrix, export_prism, export_stationary
    from .stationary import build_chain

    if args.matrix is None and args.prism is None and args.stationary is None:
        raise _opt_error("--matrix / --prism / --stationary", "given (at least one output)", None)
    _check_outputs(args, "--matrix", "--stationary")
    if args.stationary and Path(args.stationary).suffix not in (".npy", ".csv"):
        raise _opt_error("--stationary", "a path ending in .npy or .csv", args.stationary)
    if args.prism is not None:
        from .export import prism_paths

        for path in prism_paths(args.prism, "--prism").values():
            _check_output("--prism", str(path))
    model, solver = _config(args)
    args.memory_limit_gb = solver.get("memory_limit_gb")
    _announce(args, model, solver, response="none")
    written = []
    if args.stationary:
        result = _solve(args, model, solver, response="none")
        chain = result.chain
    else:
        with _progress.activity(_progress_on(args), "aqmchain: building the chain"):
            chain = build_chain(model, args.memory_limit_gb, max_states=solver.get("max_states"))
    with _progress.activity(_progress_on(args), "aqmchain: writing"):
        if args.matrix:
            written.append(str(export_matrix(chain, args.matrix)))
        if args.prism:
            written.extend(str(p) for p in export_prism(chain, args.prism).values())
        if args.stationary:
            written.append(str(export_stationary(result, args.stationary)))
    what = "P" if chain.time == "discrete" else "G"
    _say(args, f"{chain.n} states, {chain.nnz} nonzeros in {what}; wrote " + ", ".join(written))
    return EXIT_OK


# ------------------------------------------------------------------ parser


def _int_arg(text: str) -> int:
    """An integer option: ``1000000``, also written ``1e6`` or ``1000000.0`` (an integral number)."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        f = float(text)
    except ValueError:
        f = math.nan
    if math.isfinite(f) and f.is_integer():
        return int(f)
    raise argparse.ArgumentTypeError(f"must be an integer (e.g. 1000000 or 1e6), got {text!r}")


def _common(sp: argparse.ArgumentParser, model: bool = True) -> None:
    if model:
        sp.add_argument("model", help="TOML model file (docs/model-file.md)")
    sp.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                    help="override a model-file key, e.g. --set aqm.w=0.01 --set solver.method=direct (repeatable)")
    sp.add_argument("--threads", type=_int_arg, metavar="N",
                    help="threads for the simulator and the core's parallel loops (default: every core)")
    sp.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors; no progress bars")


def _sim_args(sp: argparse.ArgumentParser, slots: int) -> None:
    sp.add_argument("--slots", type=_int_arg, default=slots,
                    help=f"slots per replication incl. warm-up ({slots}); continuous-time models: the simulated "
                         "time per replication, in the model's time unit")
    sp.add_argument("--replications", type=_int_arg, default=4, help="independent replications, 1..10000 (4)")
    sp.add_argument("--seed", type=_int_arg, default=1, help="random seed, 0..2^64-1 (1)")
    sp.add_argument("--warmup", type=_int_arg,
                    help="slots (continuous time: time units) discarded per replication, >= 0 (default slots/10)")
    sp.add_argument("--batches", type=_int_arg, default=20, help="batch means per replication, 1..10000 (20)")
    sp.add_argument("--discretised", action="store_true", help="avg on the chain's grid (exact law of the chain)")


def _solver_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--method", choices=list(METHODS), help="stationary solver (default: the file's, else auto)")
    sp.add_argument("--tol", type=float, help="target for ||pi P - pi||_1 (default 1e-12)")
    sp.add_argument("--max-iter", dest="max_iter", type=_int_arg, help="sweeps / products / restarts, 0..1e9 (0: default)")
    sp.add_argument("--memory-limit-gb", type=float, help="refuse state spaces above this many GB (default 8)")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    pass


def _sub(sub, name: str) -> argparse.ArgumentParser:
    desc, examples = COMMANDS[name]
    epilog = "examples (from the repository root):\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=desc.replace("%", "%%"), description=desc[0].upper() + desc[1:] + ".",
                          epilog=epilog,
                          formatter_class=_Formatter, aliases=_ALIASES.get(name, []))


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(
        prog="aqmchain", formatter_class=_Formatter,
        description="Exact Markov-chain analysis of AQM router queues.",
        epilog="exit codes: 0 ok, 2 bad input, 3 failed solve, 130 interrupted (Ctrl-C).\n"
               "'aqmchain COMMAND --help' shows a command's options and examples; docs/cli.md has them all.")
    p.add_argument("--version", action="version", version=f"aqmchain {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = _sub(sub, "solve")
    _common(s)
    s.add_argument("--json", metavar="OUT",
                   help="write the JSON result here ('-' for stdout; the summary then goes to stderr)")
    s.add_argument("--csv", metavar="OUT", help="write the scalar metrics as 'metric,value' rows ('-': stdout)")
    s.add_argument("--plot", metavar="PNG",
                   help="write the queue pmf (log scale) and the heat map of the stationary (q, avg) law")
    _solver_args(s)
    s.add_argument("--error-estimate", dest="error_estimate", action="store_true",
                   help="also solve on grids with 2x and 4x the avg steps and extrapolate every metric to step 0 "
                        "(value, extrapolated, error; JSON key error_estimate)")
    s.add_argument("--classes", type=_class_chain_arg, default="approx", metavar="{" + ",".join(CLASS_CHAINS) + ",window:L}",
                   help="chain of a model with traffic classes: 'approx' (two classes, random-order approximation), "
                        "'exact' (the FIFO's class sequence, small buffers) or 'window' / 'window:L' (the first L "
                        "waiting packets' classes in order, random order behind them); docs/classes.md")
    s.add_argument("--sensitivities", action="store_true",
                   help="also d(metric)/d(parameter) of every scalar metric by every continuous parameter (model-file "
                        "keys), one adjoint solve per metric (metrics with equal right-hand sides share one; JSON keys "
                        "sensitivities, elasticities; "
                        "docs/sensitivities.md)")
    s.add_argument("--sensitivity-metrics", nargs="+", metavar="METRIC",
                   help="sensitivities of these metrics only (implies --sensitivities; default every scalar metric): "
                        "one adjoint solve each, shared by metrics with equal right-hand sides")
    s.add_argument("--sensitivity-params", nargs="+", metavar="KEY",
                   help="sensitivities by these parameters only, model-file keys such as aqm.p_max (implies "
                        "--sensitivities; default every continuous parameter): one pass over the chain's rows each")
    s.set_defaults(func=_cmd_solve)

    si = _sub(sub, "simulate")
    _common(si)
    _sim_args(si, 10_000_000)
    si.add_argument("--json", metavar="OUT", help="write estimates and a 'ci' object of half-widths ('-': stdout)")
    si.add_argument("--csv", metavar="OUT", help="write 'metric,value,half_width_95' rows ('-': stdout)")
    si.set_defaults(func=_cmd_simulate)

    co = _sub(sub, "compare")
    _common(co)
    _sim_args(co, 20_000_000)
    co.add_argument("--plot", metavar="PNG",
                    help="write the queue pmf overlay: chain line, simulation ± 95%% CI, log scale, "
                         "min_th..max_th band (nothing is written by default)")
    co.add_argument("--json", metavar="OUT", help="write the comparison, the chain's and the simulation's results")
    co.add_argument("--csv", metavar="OUT", help="write 'metric,analytic,simulated,half_width_95,z' rows")
    co.set_defaults(func=_cmd_compare)

    po = _sub(sub, "policies")
    _common(po)
    po.add_argument("--json", metavar="OUT", help="write the table as JSON ('-' for stdout)")
    po.add_argument("--csv", metavar="OUT", help="write the table as CSV, one row per policy ('-' for stdout)")
    po.add_argument("--plot", metavar="PNG", help="write the response-time pmfs, one line per policy (log scale)")
    po.set_defaults(func=_cmd_policies)

    tr = _sub(sub, "transient")
    _common(tr)
    tr.add_argument("--scenario", metavar="FILE", help="scenario file of [[phase]] tables (docs/transient.md)")
    tr.add_argument("--times", required=True,
                    help="output times: '10,100,1000', 'log:1:1e6:50' or 'lin:0:9000:91' (slots are rounded)")
    tr.add_argument("--method", choices=list(TRANSIENT_METHODS), default="auto",
                    help="auto (step for slotted models; for continuous-time ones uniformization up to about "
                         "1e4 products, Lambda t, rational_krylov above), step, krylov, rational_krylov, uniformization")
    tr.add_argument("--tol", type=float, help="krylov / rational_krylov / uniformization error target (default 1e-8)")
    tr.add_argument("--steady-tol", dest="steady_tol", type=float,
                    help="step: stop once ||p_t - p_t/2||_1 is below this (default 1e-10; 0: never)")
    tr.add_argument("--pmf-times", dest="pmf_times", help="times (among --times) at which to keep the queue pmf")
    tr.add_argument("--json", metavar="OUT", help="write times, one list per metric and the accounts ('-': stdout)")
    tr.add_argument("--csv", metavar="OUT", help="write one row per output time ('-': stdout)")
    tr.add_argument("--plot", metavar="PNG", help="mean queue and mean avg over time, phase boundaries marked")
    tr.set_defaults(func=_cmd_transient)

    pa = _sub(sub, "passage")
    _common(pa)
    pa.add_argument("--to", required=True,
                    help="target set: clauses QUANTITY OP NUMBER joined by 'and', QUANTITY in queue, avg, modulator "
                         "(e.g. 'queue>=200', 'queue==0', 'avg>=150 and modulator==1')")
    pa.add_argument("--times", help="output times: '10,100,1000', 'log:1:1e6:61' or 'lin:0:9000:91' (slots are "
                                    "rounded); without it only P(T < inf), E[T] and the rewards")
    pa.add_argument("--p0", help="initial law: 'empty' (default), 'stationary', 'stationary:FILE' (another model "
                                 "file's stationary law, e.g. before a load step) or 'level=200,modulator=1'")
    pa.add_argument("--rewards", help="expected rewards accumulated before T and over [0, t): comma-separated, of "
                                      + ", ".join(REWARD_SUMS) + " or the chain's event names (arrival, aqm_drop, mark, ...)")
    pa.add_argument("--method", choices=list(PASSAGE_METHODS), default="auto",
                    help="auto (quasi_stationary for slotted models; for continuous-time ones uniformization up to "
                         "about 1e4 products, rational_krylov above), step, quasi_stationary, krylov, "
                         "rational_krylov, uniformization")
    pa.add_argument("--tol", type=float,
                    help=f"target on the absolute error of P(T <= t) (default {PASSAGE_DEFAULTS['tol']:g})")
    pa.add_argument("--max-steps", dest="max_steps", type=_int_arg, help="budget of slots stepped")
    pa.add_argument("--survival", action="store_true", help="plot P(T > t) instead of P(T <= t)")
    pa.add_argument("--json", metavar="OUT", help="write target, times, cdf, survival, mean, rewards and the "
                                                  "accounts ('-': stdout)")
    pa.add_argument("--csv", metavar="OUT", help="write one row per output time ('-': stdout)")
    pa.add_argument("--plot", metavar="PNG", help="P(T <= t) over time, log-log, E[T] marked")
    pa.set_defaults(func=_cmd_passage)

    op = _sub(sub, "optimize")
    _common(op)
    op.add_argument("--params", default="triple",
                    help="'triple' (REDwM's [x, y, z]; default) or comma-separated model-file keys, e.g. aqm.w")
    op.add_argument("--objective", default="mean_response", help="scalar metric to minimise (mean_response)")
    op.add_argument("--method", choices=list(OPTIMIZE_METHODS), default="hooke_jeeves",
                    help="direct search (hooke_jeeves, nelder_mead) or a gradient method driven by the "
                         "sensitivities (lbfgsb, slsqp)")
    op.add_argument("--constraint", action="append", metavar="METRIC<=BOUND",
                    help="a bound on a metric, e.g. 'loss<=0.02' (repeatable; slsqp takes it with its gradient, "
                         "the other methods treat a violating point as infeasible)")
    op.add_argument("--starts", default="current",
                    help="'current' (the model's values), 'paper' (the 10 x 10 x 10 grid of triples of \"A RED "
                         "modified weighted moving average for soft real-time application\"; also 'paper-grid') or "
                         "points 'x,y,z;x,y,z'")
    op.add_argument("--bounds", action="append", metavar="NAME=LO:HI", help="bounds of a parameter (repeatable)")
    op.add_argument("--step", help="first steps, one per parameter (triple: 0.01,0.001,0.001)")
    op.add_argument("--min-step", dest="min_step", help="stop below these steps (default step / 64)")
    op.add_argument("--max-evals", dest="max_evals", type=_int_arg, help="budget of solves over all starts")
    op.add_argument("--scheduler", metavar="ADDRESS",
                    help="run the starts on Dask: 'local' (a LocalCluster), 'sync' or a scheduler address; "
                         "default: one after the other in this process")
    op.add_argument("--fidelity", metavar="LEVELS",
                    help="multi-fidelity: coarser models searched first, as model-file overrides per level, "
                         "coarsest first, e.g. 'grid.k=1,grid.refine=none;grid.k=2' (the model itself is the last level)")
    op.add_argument("--keep", type=_int_arg, help="multi-fidelity: end points of a level that start the next (3)")
    op.add_argument("--search-every-level", dest="search_every_level", action="store_true",
                    help="multi-fidelity: search on every level, also when a level's improvement is within its "
                         "discretisation error (default: stop and evaluate the point on the finest level)")
    op.add_argument("--screen", type=_int_arg, metavar="N",
                    help="evaluate every start once (on the coarsest level) and search from the best N only")
    op.add_argument("--cold", action="store_true",
                    help="solve every point from scratch (default: from the nearest previous solution)")
    op.add_argument("--json", metavar="OUT", help="write the result, the starts and the trace ('-': stdout)")
    op.add_argument("--csv", metavar="OUT", help="write the trace, one row per evaluated or refused point")
    op.set_defaults(func=_cmd_optimize)

    sw = _sub(sub, "sweep")
    _common(sw)
    sw.add_argument("--param", action="append", metavar="KEY=VALUES",
                    help="a swept model-file key and its values: 'a,b,c', 'LO:HI:N' (N points, ends included) or "
                         "'log:LO:HI:N'; repeat for a grid (the first key varies slowest)")
    sw.add_argument("--simulate", action="store_true", help="also simulate every point (sim_* columns)")
    _sim_args(sw, 2_000_000)
    _solver_args(sw)
    sw.add_argument("--scheduler", metavar="ADDRESS",
                    help="'local' (a LocalCluster on this machine), 'sync' (in this process, no cluster) or the "
                         "address of a Dask scheduler; default $AQMCHAIN_SCHEDULER, else local")
    sw.add_argument("--workers", type=_int_arg, help="worker processes of the local cluster (default: cores, at most 4)")
    sw.add_argument("--cold", action="store_true",
                    help="solve every point from scratch (default: each from the previous point's solution)")
    sw.add_argument("--metric", default="mean_queue", help="metric of the --plot curves (mean_queue)")
    sw.add_argument("--json", metavar="OUT", help="write one object per point ('-': stdout)")
    sw.add_argument("--csv", metavar="OUT", help="write one row per point ('-': stdout)")
    sw.add_argument("--plot", metavar="PNG",
                    help="the metric against the first key, one line per value of the second")
    sw.set_defaults(func=_cmd_sweep)

    hu = _sub(sub, "hurst")
    _common(hu)
    hu.add_argument("--estimator", default="all", choices=["all", *HURST_ESTIMATORS],
                    help="exact: variance-time on the exact aggregated-variance curve; variance_time / rs: "
                         "variance-time / rescaled range on simulated traces; asymptotic: the SSMP formula "
                         "(default: all)")
    hu.add_argument("--range", metavar="LO:HI",
                    help="aggregation levels (block sizes) fitted, in slots, e.g. 1:2^20 (defaults: exact 1:2^20, "
                         "variance_time 1:SLOTS/64, rs 16:SLOTS/16)")
    hu.add_argument("--slots", type=_int_arg, default=2**20, help="slots per simulated trace (2^20)")
    hu.add_argument("--replications", type=_int_arg, default=8, help="simulated traces; the 95%% CI is over them (8)")
    hu.add_argument("--seed", type=_int_arg, default=1, help="seed of the first trace (1)")
    hu.add_argument("--json", metavar="OUT", help="write the estimates and their curves ('-' for stdout)")
    hu.add_argument("--plot", metavar="PNG", help="write the variance-time (or R/S) curve of the first estimator "
                                                  "and the local H(m) of all")
    hu.set_defaults(func=_cmd_hurst)

    fi = _sub(sub, "fit")
    fi.add_argument("trace", help="the trace: .pcap/.pcapng (arrival timestamps), .csv/.txt/.tsv or .npy "
                                  "(timestamps in seconds, or per-slot counts with --counts)")
    fi.add_argument("--kind", default="mmbp", choices=list(FIT_KINDS), help="the source kind fitted (mmbp)")
    fi.add_argument("--slot", type=float, metavar="SECONDS",
                    help="slot length (slotted kinds; default the 1%% quantile of the inter-arrival times); "
                         "mmpp: the width of the count bins of the variance-time curve (default the mean "
                         "inter-arrival time)")
    fi.add_argument("--states", type=_int_arg, metavar="K",
                    help="modulator states: mmbp/mmpp 2..6 (2); ssmp: its n (default the best n in 2..8)")
    fi.add_argument("--counts", action="store_true", help="the trace holds per-slot packet counts, not timestamps")
    fi.add_argument("--multiple", default="clip", choices=list(MULTIPLE_RULES),
                    help="a slot with several packets: clip (count one, report the fraction), refuse, or batch "
                         "(a batch Bernoulli source with the trace's count pmf; --kind bernoulli) (clip)")
    fi.add_argument("--lags", type=_int_arg, default=10, help="autocorrelation lags matched, 1..1000 (10)")
    fi.add_argument("--column", help="CSV column (header name or 0-based index; default the first)")
    fi.add_argument("--output", metavar="OUT.toml", help="write the [source] table ('-' for stdout)")
    fi.add_argument("--model-file", dest="model_file", metavar="OUT.toml",
                    help="write a complete model file around the fitted source (RED queue at load 0.8)")
    fi.add_argument("--compare", metavar="MODEL.toml",
                    help="put the fitted source into this model file's queue (slotted kinds; its service "
                         "probability is per slot of --slot) and compare the chain with the trace replayed "
                         "through the same queue")
    fi.add_argument("--seed", type=_int_arg, default=1, help="seed of the replay's AQM and service draws (1)")
    fi.add_argument("--json", metavar="OUT", help="write the fit, its statistics and errors ('-' for stdout)")
    fi.add_argument("--plot", metavar="PNG", help="write the trace's and the model's variance-time curves")
    fi.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors; no progress bars")
    fi.set_defaults(func=_cmd_fit)

    e = _sub(sub, "info")
    _common(e)
    e.add_argument("--explore", choices=["auto", "always", "never"], default="auto",
                   help="count the reachable states exactly by the builder's exploration: auto (when the bound is "
                        "at most 5,000,000), always, never")
    e.add_argument("--json", metavar="OUT", help="write the numbers as JSON ('-' for stdout)")
    e.set_defaults(func=_cmd_info)

    ex = _sub(sub, "export")
    _common(ex)
    ex.add_argument("--matrix", metavar="OUT.mtx", help="P (or the generator G) as a Matrix Market file")
    ex.add_argument("--prism", metavar="BASE",
                    help="PRISM explicit files BASE.tra, BASE.sta, BASE.lab (states labelled by their components)")
    ex.add_argument("--stationary", metavar="OUT",
                    help="the stationary vector with the state labels, .npy (structured array) or .csv")
    ex.set_defaults(func=_cmd_export)
    return p


# ------------------------------------------------------------------ errors


def _message(exc: BaseException, args: argparse.Namespace) -> str:
    """The error as one line, with the core's internal option names replaced by the user's."""
    msg = str(exc)
    names = getattr(args, "names", {})
    mem_key = names.get("memory_limit_gb", "solver.memory_limit_gb")
    if getattr(exc, "param", None) == "memory_limit_gb":
        # the core names the budget memory_limit_gb (GiB); say it as the user gave it
        msg = re.sub(r"(?<![\w.-])memory_limit_gb\b", mem_key, msg)
    for internal, user in _SIM_NAMES.items():
        msg = msg.replace(f"parameter '{internal}'", f"option '{user}'")
    if getattr(args, "command", None) == "passage":
        for internal, user in _PASSAGE_NAMES.items():
            msg = re.sub(rf"(parameter|passage option) '{internal}(?=['.\[ ])", f"option '{user}", msg)
    if getattr(args, "command", None) == "optimize":
        for internal, user in _OPTIMIZE_NAMES.items():
            msg = re.sub(rf"parameter '{internal}(?=[\['])", f"option '{user}", msg)
    msg = re.sub(r"solver option '(\w+)'",
                 lambda m: (f"option '{names[m.group(1)]}'" if names.get(m.group(1), "").startswith("--")
                            else f"parameter '{names.get(m.group(1), 'solver.' + m.group(1))}'"), msg)
    msg = re.sub(r"(?<=[\s(,=\[])-?nan(?=[\s),\]]|$)", "undefined (numerical overflow)", msg)
    param = getattr(exc, "param", None)
    if isinstance(param, str) and param and param != "path" and param not in msg:
        msg += f" [{param}]"  # e.g. 'state space too large' comes from grid.k
    return " ".join(msg.split())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("aqmchain: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    args.argv = argv
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda msg, *a, **k: print(f"aqmchain: warning: {msg}", file=sys.stderr)
            return args.func(args)
    except KeyboardInterrupt:
        print("aqmchain: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as SIGPIPE would
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, io.UnsupportedOperation):
            pass
        return EXIT_PIPE
    except (_core.ModelError, _core.OptionError) as exc:
        print(f"aqmchain: error: {_message(exc, args)}", file=sys.stderr)
        return EXIT_INPUT
    except NonConvergenceError as exc:
        print(f"aqmchain: {_message(exc, args)}", file=sys.stderr)
        return EXIT_SOLVE
    except (_core.ReducibleChainError, _core.SolverError) as exc:
        print(f"aqmchain: error: {_message(exc, args)}", file=sys.stderr)
        return EXIT_SOLVE
    except RuntimeError as exc:  # a logic error inside the core (a bug there, reported, not a traceback)
        print(f"aqmchain: error: internal error in the core: {_message(exc, args)}", file=sys.stderr)
        return EXIT_SOLVE
    except MemoryError:
        print("aqmchain: error: out of memory (lower solver.memory_limit_gb or coarsen the grid)", file=sys.stderr)
        return EXIT_SOLVE


def run() -> None:
    """The ``aqmchain`` command (the console script and ``python -m aqmchain``): :func:`main`, then exit.

    After Ctrl-C (status 130) the process ends at once, without waiting for work it
    abandoned: a direct factorisation left running on its thread, a Dask cluster being
    closed (the processes it started, a local cluster's workers, are killed).  A Ctrl-C after the command
    finished, while the interpreter shuts down, exits 130 too, without a traceback."""
    import signal
    import threading

    from ._startup import interrupted_exit

    try:
        code = main()
    except KeyboardInterrupt:  # between main's own handlers (e.g. while it reported an error)
        interrupted_exit()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda *_: interrupted_exit())
    if code == EXIT_INTERRUPTED:
        interrupted_exit(report=False)  # main said so
    raise SystemExit(code)


if __name__ == "__main__":
    run()
