"""Command line: ``aqmchain solve MODEL.toml [--json OUT]``.

Exit codes: 0 ok, 2 bad input (the message names the key and the value),
3 the solve failed (non-convergence, reducible chain, back-end failure).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from . import _core
from .modelfile import load_config
from .policies import compare_policies
from .simulation import Comparison, simulate
from .stationary import NonConvergenceError, solve_stationary

EXIT_OK, EXIT_INPUT, EXIT_SOLVE = 0, 2, 3


def _write_json(path: str, payload: dict) -> None:
    text = json.dumps(payload, indent=1, allow_nan=False)
    if path == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(path).write_text(text + "\n", encoding="utf-8")


def _cmd_solve(args: argparse.Namespace) -> int:
    model, solver = load_config(args.model)
    for key in ("method", "tol", "max_iter"):
        value = getattr(args, key)
        if value is not None:
            solver[key] = value
    if args.memory_limit_gb is not None:
        solver["memory_limit_gb"] = args.memory_limit_gb
    est = _core.estimate_chain(model)
    if not args.quiet:
        print(f"model {args.model}: buffer {model.buffer}, source {model.source!r}, drop {model.aqm.drop.kind}, "
              f"w {model.aqm.w}, grid k={model.grid.k} ({model.grid.mapping}); "
              f"at most {est['product_states']} states", file=sys.stderr)
    try:
        result = solve_stationary(model, **solver)
    except NonConvergenceError as exc:
        print(f"aqmchain: {exc}", file=sys.stderr)
        if args.json:
            payload = exc.result.to_dict()
            payload["error"] = str(exc)
            _write_json(args.json, payload)
        return EXIT_SOLVE
    if not args.quiet:
        print(result.summary())
    if args.json:
        _write_json(args.json, result.to_dict())
    return EXIT_OK


def _sim_kwargs(args: argparse.Namespace) -> dict:
    return {"slots": args.slots, "replications": args.replications, "seed": args.seed, "warmup": args.warmup,
            "batches": args.batches, "discretised": args.discretised}


def _cmd_simulate(args: argparse.Namespace) -> int:
    model, _ = load_config(args.model)
    result = simulate(model, **_sim_kwargs(args))
    if not args.quiet:
        print(result.summary())
    if args.json:
        _write_json(args.json, result.to_dict())
    return EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    model, solver = load_config(args.model)
    analytic = solve_stationary(model, **solver)
    sim = simulate(model, **_sim_kwargs(args))
    cmp = Comparison(analytic, sim)
    mode = "discretised avg (the chain is its exact law)" if args.discretised else "continuous avg"
    print(f"chain: {analytic.states} states, residual {analytic.info.residual:.1e}; simulation: "
          f"{args.replications} x {args.slots} slots, {mode}, seed {args.seed}")
    print(cmp.table())
    print(f"max |z| = {cmp.max_abs_z():.2f}")
    if args.plot:
        cmp.plot(args.plot)
        print(f"queue pmf overlay written to {args.plot}")
    return EXIT_OK


def _cmd_policies(args: argparse.Namespace) -> int:
    model, solver = load_config(args.model)
    cmp = compare_policies(model, **solver)
    print(cmp.table())
    if args.json:
        _write_json(args.json, {"policies": cmp.rows()})
    return EXIT_OK


def _cmd_estimate(args: argparse.Namespace) -> int:
    model, _ = load_config(args.model)
    est = _core.estimate_chain(model)
    print(json.dumps(est, indent=1))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aqmchain", description="Exact Markov-chain analysis of AQM router queues.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("solve", help="stationary solution and metrics of a model file")
    s.add_argument("model", help="TOML model file (SPEC section 8)")
    s.add_argument("--json", metavar="OUT", help="write the SPEC 8 JSON object here ('-' for stdout)")
    s.add_argument("--method", choices=["auto", "direct", "arnoldi", "gauss_seidel", "power", "multilevel"])
    s.add_argument("--tol", type=float, help="target for ||pi P - pi||_1 (default 1e-12)")
    s.add_argument("--max-iter", dest="max_iter", type=int)
    s.add_argument("--memory-limit-gb", type=float, help="refuse state spaces above this (default 8)")
    s.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    s.set_defaults(func=_cmd_solve)
    def sim_args(sp: argparse.ArgumentParser, slots: int) -> None:
        sp.add_argument("model", help="TOML model file (SPEC section 8)")
        sp.add_argument("--slots", type=int, default=slots, help=f"slots per replication incl. warm-up ({slots})")
        sp.add_argument("--replications", type=int, default=4)
        sp.add_argument("--seed", type=int, default=1)
        sp.add_argument("--warmup", type=int, help="slots discarded per replication (default slots/10)")
        sp.add_argument("--batches", type=int, default=20, help="batch means per replication")
        sp.add_argument("--discretised", action="store_true", help="avg on the chain's grid (exact law of the chain)")

    si = sub.add_parser("simulate", help="slotted Monte Carlo simulation with 95%% confidence intervals")
    sim_args(si, 10_000_000)
    si.add_argument("--json", metavar="OUT", help="write estimates and a 'ci' object of half-widths")
    si.add_argument("-q", "--quiet", action="store_true")
    si.set_defaults(func=_cmd_simulate)
    co = sub.add_parser("compare", help="chain vs simulation: metric / analytic / simulated +- 95%% / z")
    sim_args(co, 20_000_000)
    co.add_argument("--plot", metavar="PNG", default="compare_queue_pmf.png",
                    help="queue pmf overlay on a log scale (default compare_queue_pmf.png; '' for none)")
    co.set_defaults(func=_cmd_compare)
    po = sub.add_parser("policies", help="response times under tail, front and random drop, side by side")
    po.add_argument("model")
    po.add_argument("--json", metavar="OUT")
    po.set_defaults(func=_cmd_policies)
    e = sub.add_parser("estimate", help="upper bounds on states, transitions and memory, without building")
    e.add_argument("model")
    e.set_defaults(func=_cmd_estimate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda msg, *a, **k: print(f"aqmchain: warning: {msg}", file=sys.stderr)
            return args.func(args)
    except (_core.ModelError, _core.OptionError) as exc:
        print(f"aqmchain: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except NonConvergenceError as exc:
        print(f"aqmchain: {exc}", file=sys.stderr)
        return EXIT_SOLVE
    except (_core.ReducibleChainError, _core.SolverError) as exc:
        print(f"aqmchain: error: {exc}", file=sys.stderr)
        return EXIT_SOLVE


if __name__ == "__main__":
    raise SystemExit(main())
