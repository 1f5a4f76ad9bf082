"""Command line: ``aqmchain solve MODEL.toml [--json OUT]`` (and simulate, compare, policies,
transient, optimize, estimate).

Exit codes: 0 ok, 2 bad input (the message names the key and the value),
3 the solve failed (non-convergence, reducible chain, back-end failure).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings
from pathlib import Path

from . import _checks, _core, _output
from .modelfile import load_config, load_document, model_from_dict
from .policies import compare_policies
from .simulation import Comparison, simulate
from .scenario import load_scenario
from .stationary import METHODS, NonConvergenceError, solve_stationary
from .transient import TRANSIENT_METHODS, TRANSIENT_METRICS, solve_transient, time_grid

EXIT_OK, EXIT_INPUT, EXIT_SOLVE = 0, 2, 3
GIB = 1024.0**3

# simulation option -> command-line name (for messages)
_SIM_NAMES = {"slots": "--slots", "replications": "--replications", "seed": "--seed", "warmup": "--warmup",
              "batches": "--batches", "discretised": "--discretised"}


def _opt_error(param: str, bound: str, value: object) -> _core.ModelError:
    e = _core.ModelError(f"option '{param}' must be {bound}, got {_checks.fmt(value)}")
    e.param = param
    return e


def _check_output(option: str, path: str | None) -> None:
    """Refuse an output path that cannot be written, before any work is done."""
    if not path or path == "-":
        return
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


def _write(option: str, path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        e = _core.ModelError(f"option '{option}': cannot write '{path}': {exc.strerror or exc}")
        e.param = option
        raise e from None


def _write_json(path: str, payload: dict, option: str = "--json") -> None:
    _write(option, path, json.dumps(_output.json_safe(payload), indent=1, allow_nan=False) + "\n")


def _save_figure(option: str, fig, path: str) -> None:
    """Write a matplotlib Figure (format from the suffix, PNG by default); a write error is bad input."""
    try:
        fig.savefig(path, dpi=120)
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
    """The summary goes to stdout unless the JSON does (``--json -``)."""
    return sys.stderr if getattr(args, "json", None) == "-" else sys.stdout


def _config(args: argparse.Namespace, doc: dict | None = None) -> tuple[_core.Model, dict]:
    """Load the model file (or use its parsed document); remember where each solver option
    came from (for messages)."""
    model, solver = load_config(args.model) if doc is None else model_from_dict(doc)
    args.names = {k: f"solver.{k}" for k in solver}
    args.names.setdefault("memory_limit_gb", "solver.memory_limit_gb")
    return model, solver


def _sim_kwargs(args: argparse.Namespace) -> dict:
    return _checks.sim_options(args.slots, args.warmup, args.replications, args.seed, args.batches,
                               args.discretised, 0, 0, names=_SIM_NAMES, err=_opt_error)


def _cmd_solve(args: argparse.Namespace) -> int:
    _check_output("--json", args.json)
    _check_output("--plot", args.plot)
    model, solver = _config(args)
    if args.method is not None:
        solver["method"] = args.method
    if args.tol is not None:
        tol = _checks.real("--tol", args.tol, err=_opt_error)
        if not 0.0 < tol < 1.0:
            raise _opt_error("--tol", "in (0, 1)", tol)
        solver["tol"], args.names["tol"] = tol, "--tol"
    if args.max_iter is not None:
        lo, hi = _checks.SOLVER_INT_BOUNDS["max_iter"]
        solver["max_iter"] = _checks.integer("--max-iter", args.max_iter, lo, hi, err=_opt_error)
        args.names["max_iter"] = "--max-iter"
    if args.memory_limit_gb is not None:
        solver["memory_limit_gb"] = _checks.memory_limit_gb("--memory-limit-gb", args.memory_limit_gb,
                                                            err=_opt_error)
        args.names["memory_limit_gb"] = "--memory-limit-gb"
    args.memory_limit_gb = solver.get("memory_limit_gb")
    est = _core.estimate_chain(model)
    if not args.quiet:
        filt = (f"w {model.aqm.w}" if model.aqm.filter == "ewma"
                else f"REDwM a {list(model.aqm.a)} b {list(model.aqm.b)}")
        print(f"model {args.model}: buffer {model.buffer}, source {model.source!r}, drop {model.aqm.drop.kind}, "
              f"{filt}, grid k={model.grid.k} ({model.grid.mapping}, refine {model.grid.refine}); "
              f"at most {est['reachable_bound']} states" + (" before refinement" if model.grid.refine == "auto" else ""),
              file=sys.stderr)
    try:
        result = solve_stationary(model, error_estimate=args.error_estimate, **solver)
    except NonConvergenceError as exc:
        print(f"aqmchain: {exc}", file=sys.stderr)
        if args.json:
            payload = _capped_dict(exc.result)
            payload["error"] = str(exc)
            _write_json(args.json, payload)
        return EXIT_SOLVE
    if not args.quiet:
        print(result.summary(), file=_summary_stream(args))
        if result.error_estimate is not None:
            print("\ndiscretisation error estimate (grids with 4x, 2x, 1x the steps):\n"
                  + result.error_estimate.table(), file=_summary_stream(args))
    if args.json:
        _write_json(args.json, _capped_dict(result))
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
    _check_output("--json", args.json)
    model, _ = _config(args)
    result = simulate(model, **kwargs)
    if not args.quiet:
        print(result.summary(), file=_summary_stream(args))
    if args.json:
        _write_json(args.json, _capped_dict(result))
    return EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    kwargs = _sim_kwargs(args)
    _check_output("--plot", args.plot)
    model, solver = _config(args)
    args.memory_limit_gb = solver.get("memory_limit_gb")
    analytic = solve_stationary(model, **solver)
    sim = simulate(model, **kwargs)
    cmp = Comparison(analytic, sim)
    mode = "discretised avg (the chain is its exact law)" if args.discretised else "continuous avg"
    print(f"chain: {analytic.states} states, residual {analytic.info.residual:.1e}; simulation: "
          f"{args.replications} x {args.slots} slots, {mode}, seed {args.seed}")
    print(cmp.table())
    print(f"max |z| = {cmp.max_abs_z():.2f}" + (" (over the metrics where z is defined)" if cmp.undefined() else ""))
    if args.plot:
        _save_figure("--plot", cmp.plot(name=Path(args.model).name), args.plot)
        print(f"queue pmf overlay written to {args.plot}")
    return EXIT_OK


def _cmd_policies(args: argparse.Namespace) -> int:
    _check_output("--json", args.json)
    _check_output("--plot", args.plot)
    model, solver = _config(args)
    args.memory_limit_gb = solver.get("memory_limit_gb")
    cmp = compare_policies(model, **solver)
    print(cmp.table(), file=_summary_stream(args))
    if args.json:
        _write_json(args.json, {"policies": cmp.rows(), "note": cmp.note()})
    if args.plot:
        from .plots import response_pmf

        _save_figure("--plot", response_pmf(cmp, name=Path(args.model).name), args.plot)
    return EXIT_OK


def _cmd_estimate(args: argparse.Namespace) -> int:
    model, _ = _config(args)
    est = dict(_core.estimate_chain(model))
    if model.grid.refine == "auto":
        est["grid"] = (f"automatic: bounds for the uniform grid 1/{model.grid.k} before refinement; the refined "
                       f"chain is kept within grid.state_budget = {model.grid.state_budget:g} estimated states")
    print(json.dumps(est, indent=1))
    return EXIT_OK


def _floats(option: str, text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise _opt_error(option, "comma-separated numbers", text) from None


def _cmd_optimize(args: argparse.Namespace) -> int:
    from .optimize import optimize

    for opt in ("--json", "--csv"):
        _check_output(opt, getattr(args, opt[2:]))
    model, solver = _config(args)
    params = [p.strip() for p in args.params.split(",") if p.strip()]
    starts: object = args.starts
    if args.starts not in ("seed000", "current"):
        starts = [_floats("--starts", pt) for pt in args.starts.split(";") if pt.strip()]
    bounds = {}
    for b in args.bounds or []:
        name, sep, rng = b.partition("=")
        lo, sep2, hi = rng.partition(":")
        if not sep or not sep2:
            raise _opt_error("--bounds", "NAME=LO:HI", b)
        bounds[name.strip()] = tuple(_floats("--bounds", f"{lo},{hi}"))
    kwargs: dict = {"params": params, "objective": args.objective, "method": args.method, "starts": starts,
                    "solver": solver}
    if bounds:
        kwargs["bounds"] = bounds
    if args.step:
        kwargs["step"] = _floats("--step", args.step)
    if args.min_step:
        kwargs["min_step"] = _floats("--min-step", args.min_step)
    if args.max_evals is not None:
        kwargs["max_evals"] = args.max_evals

    def progress(rec: dict) -> None:
        if args.quiet:
            return
        xs = ", ".join(f"{v:.6g}" for v in rec["x"].values())
        what = f"{args.objective} = {rec['value']:.8g}" if rec["status"] == "ok" else rec["status"]
        tail = f" ({rec['seconds']:.2f} s, {rec['states']} states)" if rec["status"] != "infeasible" else ""
        print(f"aqmchain: optimize: start {rec['start'] + 1}, [{xs}]: {what}{tail}"
              + (f": {rec['message']}" if rec["status"] == "failed" else ""), file=sys.stderr, flush=True)

    result = optimize(model, callback=progress, **kwargs)
    if args.json:
        _write_json(args.json, result.to_dict())
    if args.csv:
        _write("--csv", args.csv, result.trace_csv())
    if not args.quiet:
        print(result.summary(), file=_summary_stream(args))
    return EXIT_OK if result.success else EXIT_SOLVE


def _parse_range(option: str, text: str) -> tuple[float, float]:
    """'LO:HI' in slots; each side a number or a power of two written 2^K."""
    def one(v: str) -> float:
        v = v.strip()
        if v.startswith("2^"):
            return 2.0 ** float(v[2:])
        return float(v)

    try:
        lo, hi = (one(v) for v in text.split(":"))
    except ValueError:
        raise _opt_error(option, "LO:HI (slots; numbers or 2^K), e.g. 1:2^20", text) from None
    return lo, hi


def _cmd_hurst(args: argparse.Namespace) -> int:
    from .selfsim import HURST_ESTIMATORS, estimate_hurst

    for opt in ("--json", "--plot"):
        _check_output(opt, getattr(args, opt[2:]))
    model, _ = _config(args)
    rng = _parse_range("--range", args.range) if args.range else None
    names = list(HURST_ESTIMATORS) if args.estimator == "all" else [args.estimator]
    kw = {"slots": args.slots, "replications": args.replications, "seed": args.seed}
    out = []
    for name in names:
        if name == "asymptotic" and not (model.source.kind == "ssmp" and model.source.q > 1
                                         and model.source.a > model.source.q ** 2):
            if args.estimator == "all":
                continue
        out.append(estimate_hurst(model.source, name, range=rng if name != "asymptotic" else None, **kw))
    if not args.quiet:
        stream = _summary_stream(args)
        print(f"source: {out[0].source}, mean rate {model.source.mean_rate():.6g} arrivals per slot", file=stream)
        for e in out:
            print("  " + e.summary().replace("\n", "\n    "), file=stream)
    if args.json:
        _write_json(args.json, {"source": out[0].source, "estimates": [e.to_dict() for e in out]})
    if args.plot:
        from matplotlib.figure import Figure

        from .plots import local_hurst, variance_time

        fig = Figure(figsize=(12, 4.6), layout="constrained")
        left, right = fig.subplots(1, 2)
        variance_time(next(e for e in out if e.estimator != "asymptotic"), ax=left)
        local_hurst(out, ax=right)
        _save_figure("--plot", fig, args.plot)
    return EXIT_OK


def _parse_times(text: str, integer: bool) -> list[float]:
    """--times: "10,100,1000", "log:START:STOP:NUM" or "lin:START:STOP:NUM"."""
    try:
        if text.startswith(("log:", "lin:")):
            kind, a, b, n = text.split(":")
            t = time_grid("log" if kind == "log" else "linear", float(a), float(b), int(float(n)), integer=integer)
            return [float(x) for x in t]
        return [float(x) for x in text.split(",") if x.strip()]
    except (ValueError, _core.ModelError, _core.OptionError) as exc:
        raise _opt_error("--times", "a list '10,100,1000' or 'log:START:STOP:NUM' / 'lin:START:STOP:NUM' with "
                         "0 <= START <= STOP (START > 0 for log)", text) from exc


def _cmd_transient(args: argparse.Namespace) -> int:
    for opt in ("--json", "--csv", "--plot"):
        _check_output(opt, getattr(args, opt[2:]))
    doc = load_document(args.model)  # read once: the model and the scenario's base
    model, solver = _config(args, doc)
    target = load_scenario(args.scenario, doc) if args.scenario else model
    discrete = model.time == "discrete"
    times = _parse_times(args.times, integer=discrete and args.method in ("auto", "step"))
    pmf_times = _parse_times(args.pmf_times, integer=discrete and args.method in ("auto", "step")) \
        if args.pmf_times else []
    last = [0.0]

    def progress(t: float, end: float) -> None:
        if not args.quiet and (t >= end or t - last[0] >= 0.1 * end):
            last[0] = t
            print(f"aqmchain: transient: t = {t:g} of {end:g}", file=sys.stderr, flush=True)

    kwargs = {"method": args.method, "pmf_times": pmf_times, "progress": progress,
              "memory_limit_gb": solver.get("memory_limit_gb")}
    if args.tol is not None:
        kwargs["tol"] = args.tol
    if args.steady_tol is not None:
        kwargs["steady_tol"] = args.steady_tol
    status = EXIT_OK
    try:
        result = solve_transient(target, times, **kwargs)
    except NonConvergenceError as exc:
        print(f"aqmchain: {exc}", file=sys.stderr)
        result, status = exc.result, EXIT_SOLVE
    payload = result.to_dict()
    if status != EXIT_OK:
        payload["error"] = result.info.note
    if args.json:
        _write_json(args.json, payload)
    if args.csv:
        cols = ["time", "phase", *TRANSIENT_METRICS]
        rows = [",".join(cols)]
        for k, t in enumerate(result.times):
            rows.append(",".join([repr(float(t)), str(int(result.phase[k]))] +
                                 [repr(float(result.metrics[m][k])) for m in TRANSIENT_METRICS]))
        _write("--csv", args.csv, "\n".join(rows) + "\n")
    if args.plot:
        fig = result.plot(name=Path(args.model).name + (f" + {Path(args.scenario).name}" if args.scenario else ""))
        _save_figure("--plot", fig, args.plot)
    if not args.quiet:
        i = result.info
        steady = [f"{t:g}" for t in i.steady_at if t >= 0]
        print(f"transient ({i.method}): {result.states} states, {len(result.times)} output times, "
              f"{i.iterations} steps, {i.matvecs} products, {i.seconds.get('transient_total', 0.0):.2f} s"
              + (f"; steady state detected at t = {', '.join(steady)}" if steady else ""),
              file=_summary_stream(args))
        if len(result.times):
            print(f"  at t = {result.times[-1]:g}: mean queue {result.mean_queue[-1]:.6g}, "
                  f"mean avg {result.mean_avg[-1]:.6g}, loss {result.loss[-1]:.6g}", file=_summary_stream(args))
    return status


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aqmchain", description="Exact Markov-chain analysis of AQM router queues.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("solve", help="stationary solution and metrics of a model file")
    s.add_argument("model", help="TOML model file (docs/model-file.md)")
    s.add_argument("--json", metavar="OUT",
                   help="write the JSON result here ('-' for stdout; the summary then goes to stderr)")
    s.add_argument("--method", choices=list(METHODS))
    s.add_argument("--tol", type=float, help="target for ||pi P - pi||_1 (default 1e-12)")
    s.add_argument("--max-iter", dest="max_iter", type=int, help="sweeps / products / restarts, 0..1e9 (0: default)")
    s.add_argument("--memory-limit-gb", type=float, help="refuse state spaces above this many GB (default 8)")
    s.add_argument("--error-estimate", dest="error_estimate", action="store_true",
                   help="also solve on grids with 2x and 4x the avg steps and extrapolate every metric to step 0 "
                        "(value, extrapolated, error; JSON key error_estimate)")
    s.add_argument("--plot", metavar="PNG",
                   help="write the queue pmf (log scale) and the heat map of the stationary (q, avg) law")
    s.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    s.set_defaults(func=_cmd_solve)
    def sim_args(sp: argparse.ArgumentParser, slots: int) -> None:
        sp.add_argument("model", help="TOML model file (docs/model-file.md)")
        sp.add_argument("--slots", type=int, default=slots, help=f"slots per replication incl. warm-up ({slots})")
        sp.add_argument("--replications", type=int, default=4, help="independent replications, 1..10000 (4)")
        sp.add_argument("--seed", type=int, default=1, help="random seed, 0..2^64-1 (1)")
        sp.add_argument("--warmup", type=int, help="slots discarded per replication, >= 0 (default slots/10)")
        sp.add_argument("--batches", type=int, default=20, help="batch means per replication, 1..10000 (20)")
        sp.add_argument("--discretised", action="store_true", help="avg on the chain's grid (exact law of the chain)")

    si = sub.add_parser("simulate", help="slotted Monte Carlo simulation with 95%% confidence intervals")
    sim_args(si, 10_000_000)
    si.add_argument("--json", metavar="OUT", help="write estimates and a 'ci' object of half-widths")
    si.add_argument("-q", "--quiet", action="store_true")
    si.set_defaults(func=_cmd_simulate)
    co = sub.add_parser("compare", help="chain vs simulation: metric / analytic / simulated +- 95%% / z")
    sim_args(co, 20_000_000)
    co.add_argument("--plot", metavar="PNG",
                    help="write the queue pmf overlay: chain line, simulation ± 95%% CI, log scale, "
                         "min_th..max_th band (none by default)")
    co.set_defaults(func=_cmd_compare)
    po = sub.add_parser("policies", help="response times under tail, front and random drop, side by side")
    po.add_argument("model", help="TOML model file (docs/model-file.md)")
    po.add_argument("--json", metavar="OUT", help="write the table as JSON ('-' for stdout)")
    po.add_argument("--plot", metavar="PNG", help="write the response-time pmfs, one line per policy (log scale)")
    po.set_defaults(func=_cmd_policies)
    tr = sub.add_parser("transient", help="metrics over time from an initial law, for a model or a load scenario")
    tr.add_argument("model", help="TOML model file (docs/model-file.md)")
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
    tr.add_argument("-q", "--quiet", action="store_true")
    tr.set_defaults(func=_cmd_transient)
    op = sub.add_parser("optimize", help="direct search (Hooke-Jeeves, Nelder-Mead) over model parameters, "
                                         "e.g. the REDwM triple, minimising a metric")
    op.add_argument("model", help="TOML model file (docs/model-file.md)")
    op.add_argument("--params", default="triple",
                    help="'triple' (REDwM's [x, y, z]; default) or comma-separated model-file keys, e.g. aqm.w")
    op.add_argument("--objective", default="mean_response", help="scalar metric to minimise (mean_response)")
    op.add_argument("--method", choices=["hooke_jeeves", "nelder_mead"], default="hooke_jeeves")
    op.add_argument("--starts", default="current",
                    help="'current' (the model's values), 'seed000' (the REDwM paper's 10 x 10 x 10 grid of "
                         "triples) or points 'x,y,z;x,y,z'")
    op.add_argument("--bounds", action="append", metavar="NAME=LO:HI", help="bounds of a parameter (repeatable)")
    op.add_argument("--step", help="first steps, one per parameter (triple: 0.01,0.001,0.001)")
    op.add_argument("--min-step", dest="min_step", help="stop below these steps (default step / 64)")
    op.add_argument("--max-evals", dest="max_evals", type=int, help="budget of solves over all starts")
    op.add_argument("--json", metavar="OUT", help="write the result, the starts and the trace ('-': stdout)")
    op.add_argument("--csv", metavar="OUT", help="write the trace, one row per evaluated or refused point")
    op.add_argument("-q", "--quiet", action="store_true", help="no progress lines, no summary")
    op.set_defaults(func=_cmd_optimize)
    hu = sub.add_parser("hurst", help="Hurst parameter of the model's arrival source by several estimators",
                        description="Hurst parameter of the arrival source of a model file. The estimators read "
                                    "different curves over different ranges of time scales, so they give different "
                                    "values for the same source: docs/hurst.md.",
                        epilog="example: aqmchain hurst examples/dsred_ssmp.toml --estimator exact --range 1:2^20 "
                               "--plot vt.png")
    hu.add_argument("model", help="TOML model file (docs/model-file.md); only its [source] is used")
    hu.add_argument("--estimator", default="all", choices=["all", "exact", "variance_time", "rs", "asymptotic"],
                    help="exact: variance-time on the exact aggregated-variance curve; variance_time / rs: "
                         "variance-time / rescaled range on simulated traces; asymptotic: the SSMP formula "
                         "(default: all)")
    hu.add_argument("--range", metavar="LO:HI",
                    help="aggregation levels (block sizes) fitted, in slots, e.g. 1:2^20 (defaults: exact 1:2^20, "
                         "variance_time 1:SLOTS/64, rs 16:SLOTS/16)")
    hu.add_argument("--slots", type=int, default=2**20, help="slots per simulated trace (2^20)")
    hu.add_argument("--replications", type=int, default=8, help="simulated traces; the 95%% CI is over them (8)")
    hu.add_argument("--seed", type=int, default=1, help="seed of the first trace (1)")
    hu.add_argument("--json", metavar="OUT", help="write the estimates and their curves ('-' for stdout)")
    hu.add_argument("--plot", metavar="PNG", help="write the variance-time (or R/S) plot of the first estimator and "
                                                  "the local H(m) of all")
    hu.add_argument("-q", "--quiet", action="store_true")
    hu.set_defaults(func=_cmd_hurst)
    e = sub.add_parser("estimate", help="upper bounds on states, transitions and memory, without building")
    e.add_argument("model", help="TOML model file (docs/model-file.md)")
    e.set_defaults(func=_cmd_estimate)
    return p


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
    msg = re.sub(r"solver option '(\w+)'",
                 lambda m: (f"option '{names[m.group(1)]}'" if names.get(m.group(1), "").startswith("--")
                            else f"parameter '{names.get(m.group(1), 'solver.' + m.group(1))}'"), msg)
    msg = re.sub(r"(?<=[\s(,=\[])-?nan(?=[\s),\]]|$)", "undefined (numerical overflow)", msg)
    param = getattr(exc, "param", None)
    if isinstance(param, str) and param and param != "path" and param not in msg:
        msg += f" [{param}]"  # e.g. 'state space too large' comes from grid.k
    return " ".join(msg.split())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda msg, *a, **k: print(f"aqmchain: warning: {msg}", file=sys.stderr)
            return args.func(args)
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


if __name__ == "__main__":
    raise SystemExit(main())
