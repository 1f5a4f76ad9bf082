#!/usr/bin/env python3
"""aqmchain against ns-3's own RedQueueDisc: the scenario table of docs/ns3.md.

Each scenario is an ns-3 configuration (RedQueueDisc attributes by their ns-3 names, arrival and
service rates in packets per second).  It runs through

* ns-3 3.44 (the ``ns3`` wheel) with red_harness.cc: RedQueueDisc in front of an exponential
  server on ns-3's clock, 95 % confidence intervals from independent replications;
* the aqmchain model translated from the same configuration (``time = "continuous"``, ``poisson``
  or ``mmpp`` source, ``exponential`` service, ``[aqm] semantics = "ns3"``), solved exactly;
* aqmchain's event-driven simulator on that model, when it supports continuous time (``--sim``);

and prints a markdown table: chain, simulator, ns-3 (with its 95 % half-width), the relative gap
and whether the chain is within max(3 half-widths, 2 %) of ns-3.

    python validation/ns3/compare.py                      # all scenarios, markdown on stdout
    python validation/ns3/compare.py --json out/ns3.json  # also the full numbers as JSON
    python validation/ns3/compare.py --only defaults-0.9 --scale 0.2 --no-chain
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

# ns-3's RedQueueDisc defaults (ns-3 3.44) of the attributes the translation reads
NS3_DEFAULTS = {"MinTh": 5.0, "MaxTh": 15.0, "QW": 0.002, "LInterm": 50.0, "Gentle": True, "Wait": True,
                "UseEcn": False, "UseHardDrop": True, "MaxSize": "25p", "LinkBandwidth": "1.5Mbps",
                "MeanPktSize": 500, "NLRED": False, "ARED": False}
MU = 375.0  # packets per second: 1.5 Mbps / (8 x 500 bytes), ns-3's default packet time constant
# the metrics compared (harness name, chain attribute, label); the targets are these four
METRICS = (("mean_queue", "mean_queue", "mean queue"), ("loss", "loss", "loss"),
           ("mean_avg", "mean_avg", "mean avg"), ("mean_sojourn", "mean_response", "mean sojourn (s)"))
EXTRA = (("mean_system", "mean_system"), ("loss_aqm", "loss_aqm"), ("loss_overflow", "loss_overflow"),
         ("mark_prob", "mark_prob"), ("throughput", "throughput"))
REL_TOL = 0.02
HW_TOL = 3.0


@dataclass
class Scenario:
    name: str
    what: str
    load: float | None = None               # lambda / mu (Poisson)
    mmpp: tuple | None = None               # (lambda0, lambda1, r01, r10) in 1/s
    attrs: dict = field(default_factory=dict)  # RedQueueDisc attributes (ns-3 names)
    ecn: float = 0.0                        # probability that an arrival is ECN-capable
    idle_correction: bool = True            # the chain's aqm.idle_correction
    chain: bool = True                      # False: ns-3 only (a feature the chain does not model)


SCENARIOS = [
    Scenario("defaults-0.5", "ns-3 defaults, load 0.5", 0.5),
    Scenario("defaults-0.9", "ns-3 defaults, load 0.9", 0.9),
    Scenario("defaults-1.2", "ns-3 defaults, load 1.2", 1.2),
    Scenario("qw0.02-b60-0.9", "QW 0.02, buffer 60, thresholds 10/30, load 0.9", 0.9,
             attrs={"QW": 0.02, "MaxSize": "59p", "MinTh": 10, "MaxTh": 30}),
    Scenario("b60-1.5", "buffer 60, thresholds 10/30, LInterm 10, load 1.5", 1.5,
             attrs={"MaxSize": "59p", "MinTh": 10, "MaxTh": 30, "LInterm": 10}),
    Scenario("b250-1.1", "buffer 250, thresholds 30/90, load 1.1", 1.1,
             attrs={"MaxSize": "249p", "MinTh": 30, "MaxTh": 90}),
    Scenario("qw-auto-1.1", "QW = -2 (ns-3's automatic weight 1 - exp(-10/ptc) = 0.0263), load 1.1", 1.1,
             attrs={"QW": -2}),
    Scenario("nogentle-1.0", "Gentle false, load 1.0", 1.0, attrs={"Gentle": False}),
    Scenario("nowait-1.0", "Wait false (count spacing), load 1.0", 1.0, attrs={"Wait": False}),
    Scenario("nowait-nogentle-qw0.02", "Wait false, Gentle false, QW 0.02, load 0.95", 0.95,
             attrs={"Wait": False, "Gentle": False, "QW": 0.02}),
    Scenario("ptc2mu-0.5", "idle correction with ptc = 2 mu (LinkBandwidth 3Mbps), load 0.5", 0.5,
             attrs={"LinkBandwidth": "3Mbps"}),
    Scenario("ptc-half-0.7", "idle correction with ptc = mu / 2 (MeanPktSize 1000), load 0.7", 0.7,
             attrs={"MeanPktSize": 1000}),
    Scenario("noidle-0.5", "no idle correction (LinkBandwidth 8bps: ptc 0.002/s), load 0.5", 0.5,
             attrs={"LinkBandwidth": "8bps"}, idle_correction=False),
    Scenario("ecn-hard-1.2", "UseEcn, half the arrivals ECN-capable, hard drop, load 1.2", 1.2,
             attrs={"UseEcn": True, "UseHardDrop": True}, ecn=0.5),
    Scenario("ecn-nohard-1.2", "UseEcn, 70 % of the arrivals ECN-capable, no hard drop, Gentle false "
             "(forced marks), load 1.2", 1.2, attrs={"UseEcn": True, "UseHardDrop": False, "Gentle": False}, ecn=0.7),
    Scenario("nlred-1.0", "NLRED (Gentle false), load 1.0", 1.0, attrs={"NLRED": True, "Gentle": False}),
    Scenario("nlred-gentle-1.1", "NLRED with Gentle, load 1.1", 1.1, attrs={"NLRED": True}),
    Scenario("mmpp-0.9", "two-state MMPP (rates 0.5 mu / 1.3 mu, switching 2/s), mean load 0.9",
             mmpp=(0.5 * MU, 1.3 * MU, 2.0, 2.0)),
    Scenario("pmax0-mm1n-0.9", "MinTh 1000 (p_max never acts): M/M/1/26, load 0.9", 0.9,
             attrs={"MinTh": 1000, "MaxTh": 2000}),
    Scenario("ared-1.2", "ARED (adaptive max_p, automatic thresholds and QW), load 1.2: not modelled",
             1.2, attrs={"ARED": True}, chain=False),
]

_RATE_UNITS = {"bps": 1.0, "b/s": 1.0, "kbps": 1e3, "kb/s": 1e3, "Mbps": 1e6, "Mb/s": 1e6, "Gbps": 1e9, "Gb/s": 1e9}


def bit_rate(text: str) -> float:
    """An ns-3 DataRate string ('1.5Mbps', '3Mbps', '8bps') in bits per second."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z/]+)\s*", str(text))
    if not m or m.group(2) not in _RATE_UNITS:
        raise ValueError(f"LinkBandwidth must be a number with a unit in {sorted(_RATE_UNITS)}, got {text!r}")
    return float(m.group(1)) * _RATE_UNITS[m.group(2)]


def arrival_rate(sc: Scenario) -> float:
    if sc.mmpp is None:
        return sc.load * MU
    l0, l1, r01, r10 = sc.mmpp
    return (l0 * r10 + l1 * r01) / (r01 + r10)


def chain_document(sc: Scenario) -> dict:
    """The aqmchain model (as a model-file document) of an ns-3 scenario, in canonical keys."""
    a = {**NS3_DEFAULTS, **sc.attrs}
    max_size = str(a["MaxSize"])
    if not max_size.endswith("p"):
        raise ValueError(f"MaxSize must be in packets (e.g. '25p'), got {max_size!r}")
    drop = {(True, False): "gentle_red", (False, False): "red",
            (False, True): "nlred", (True, True): "gentle_nlred"}[(bool(a["Gentle"]), bool(a["NLRED"]))]
    if sc.mmpp is None:
        source = {"kind": "poisson", "rate": sc.load * MU}
    else:
        l0, l1, r01, r10 = sc.mmpp
        source = {"kind": "mmpp", "generator": [[-r01, r01], [r10, -r10]], "rates": [l0, l1]}
    ptc = bit_rate(a["LinkBandwidth"]) / (8.0 * float(a["MeanPktSize"]))
    qw = float(a["QW"])
    if qw == 0.0:  # ns-3's automatic weights (RedQueueDisc::InitializeParams)
        qw = 1.0 - math.exp(-1.0 / ptc)
    elif qw == -2.0:
        qw = 1.0 - math.exp(-10.0 / ptc)
    elif qw < 0:
        raise ValueError(f"QW = {qw} (the automatic weight from LinkDelay) is not translated here")
    aqm = {"semantics": "ns3", "drop": drop, "min_th": float(a["MinTh"]), "max_th": float(a["MaxTh"]),
           "p_max": 1.0 / float(a["LInterm"]), "w": qw, "spacing": "wait" if a["Wait"] else "count",
           "ptc": ptc,
           "idle_correction": sc.idle_correction, "hard_drop": bool(a["UseHardDrop"]),
           "ecn": sc.ecn if a["UseEcn"] else 0.0}
    return {"model": {"buffer": int(max_size[:-1]) + 1, "time": "continuous"}, "source": source,
            "service": {"kind": "exponential", "mu": MU}, "aqm": aqm}


def mm1n(sc: Scenario) -> dict:
    """M/M/1/N closed forms (valid when RED never acts)."""
    n_max = int(str({**NS3_DEFAULTS, **sc.attrs}["MaxSize"])[:-1]) + 1
    lam = arrival_rate(sc)
    rho = lam / MU
    w = [rho ** n for n in range(n_max + 1)]
    z = sum(w)
    p = [x / z for x in w]
    mean_system = sum(n * x for n, x in enumerate(p))
    loss = p[-1]
    return {"mean_queue": sum(max(n - 1, 0) * x for n, x in enumerate(p)), "mean_system": mean_system,
            "loss": loss, "mean_sojourn": mean_system / (lam * (1 - loss)), "mean_avg": None}


def run_ns3(exe: Path, sc: Scenario, scale: float, reps: int) -> dict:
    lam = arrival_rate(sc)
    # about 4e5 x scale arrivals per replication after a warmup of 2e4 x scale arrivals (a few
    # hundred EWMA time constants 1/QW at the default QW)
    duration = 4e5 * scale / lam
    warmup = 2e4 * max(scale, 0.25) / lam
    t0 = time.perf_counter()
    out = harness.run(exe, lam=None if sc.mmpp else lam, mmpp=sc.mmpp, mu=MU, attributes=sc.attrs, ecn=sc.ecn,
                      duration=duration, warmup=warmup, reps=reps)
    out["wall_total"] = time.perf_counter() - t0
    return out


def solve_chain(sc: Scenario, grid: dict | None = None, tol: float | None = None) -> dict:
    import aqmchain
    t0 = time.perf_counter()
    converged = True
    doc = chain_document(sc)
    if grid:
        doc["grid"] = grid
    try:
        model, _ = aqmchain.model_from_dict(doc)
        res = aqmchain.solve_stationary(model, **({"tol": tol} if tol else {}))
    except aqmchain.NonConvergenceError as e:  # the partial result, reported with its residual
        res, converged = e.result, False
        print(f"{sc.name}: chain did not converge: {str(e)[:300]}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 -- reported in the table, not fatal for the other scenarios
        return {"error": f"{type(e).__name__}: {e}"}
    out = {h: getattr(res, c) for h, c, _ in METRICS}
    out["converged"] = converged
    out.update({h: getattr(res, c) for h, c in EXTRA})
    out["states"] = res.states
    out["seconds"] = time.perf_counter() - t0
    out["residual"] = getattr(res.info, "residual", None)
    out["method"] = getattr(res.info, "method", None)
    out["grid"] = f"uniform 1/{grid['k']}" if grid else "automatic"
    return out


def simulate_chain(sc: Scenario, scale: float) -> dict:
    """aqmchain's event-driven simulator on the model (continuous avg: no grid), 4 replications of
    about 1.1e6 x scale arrivals each (at least 2500 s: the simulator's 20 batches need 100 time
    units each), a tenth of them warmup (the time unit is the second)."""
    import aqmchain
    t0 = time.perf_counter()
    try:
        model, _ = aqmchain.model_from_dict(chain_document(sc))
        res = aqmchain.simulate(model, slots=max(2500, int(1.1e6 * scale / arrival_rate(sc))), replications=4)
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}
    names = {"mean_sojourn": "mean_response"}
    out = {}
    for h, c, _ in METRICS:
        c = names.get(h, c)
        v = getattr(res, c, None)
        out[h] = v
        ci = getattr(res, "ci", None)
        out[h + "_hw"] = ci.get(c) if isinstance(ci, dict) else None
    out["seconds"] = time.perf_counter() - t0
    return out


def fmt(v, digits=4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if v == 0:
        return "0"
    return f"{v:.{digits}g}"


def judge(chain: float | None, ns3: dict, arrivals: float | None = None) -> tuple[str, str, bool | None]:
    """Gap and verdict: within max(3 half-widths, 2 %).  For a per-arrival probability whose event
    ns-3 never saw in `arrivals` arrivals (0 +- 0), the half-width is the rule of three's 95 % upper
    bound 3 / arrivals instead (the interval of a count of zero)."""
    mean, hw = ns3["mean"], ns3["half_width"]
    if chain is None or mean is None:
        return "n/a", "", None
    if mean == 0 and not hw and arrivals:
        hw = 3.0 / arrivals
    diff = chain - mean
    gap = f"{100 * diff / mean:+.2f} %" if mean else f"{diff:+.2g}"
    ok = abs(diff) <= max(HW_TOL * (hw or 0.0), REL_TOL * abs(mean))
    return gap, ("yes" if ok else "**no**"), ok


def table(rows: list[dict]) -> str:
    lines = ["| scenario | metric | chain | simulator | ns-3 (95 % CI) | gap | within |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        sc = r["scenario"]
        first = True
        for h, _, label in METRICS:
            n3 = r["ns3"]["metrics"][h]
            ch = r.get("chain") or {}
            chain_v = None if "error" in ch else ch.get(h)
            sim = r.get("simulator") or {}
            sim_v = None if "error" in sim else sim.get(h)
            sim_s = fmt(sim_v) + (f" ± {fmt(sim.get(h + '_hw'), 2)}" if sim.get(h + "_hw") else "")
            gap, ok, _ = judge(chain_v, n3, r["ns3"]["arrivals_simulated"])
            if not r["chain_modelled"]:
                chain_s, gap, ok = "not modelled", "", ""
            elif "error" in ch:
                chain_s = ch["error"].split(":")[0] if first else ""
            else:
                chain_s = fmt(chain_v) + ("" if ch.get("converged", True)
                                          else f" (not converged: residual {ch['residual']:.0e})")
            n3_s = (f"0 (none in {r['ns3']['arrivals_simulated']:.2g} arrivals)" if n3["mean"] == 0 and not n3["half_width"]
                    else f"{fmt(n3['mean'])} ± {fmt(n3['half_width'], 2)}")
            lines.append(f"| {sc['name'] if first else ''} | {label} | {chain_s} | {sim_s if sim else ''} | "
                         f"{n3_s} | {gap} | {ok} |")
            first = False
    return "\n".join(lines)


def short_error(text: str) -> str:
    bound = re.search(r"the model's bound is (\d+) states", text)
    if text.startswith("StateSpaceTooLarge") and bound:
        return f"state space too large (the model's bound: {int(bound.group(1)):,} states)"
    return text if len(text) <= 120 else text[:117] + "..."


def scenario_table(rows: list[dict]) -> str:
    lines = ["| scenario | configuration (ns-3 attributes not listed are ns-3's defaults) | chain solve |",
             "|---|---|---|"]
    for r in rows:
        sc = r["scenario"]
        attrs = ", ".join(f"`{k}={str(v).lower() if isinstance(v, bool) else v}`" for k, v in sc["attrs"].items())
        extra = f"ecn {sc['ecn']:g}" if sc["ecn"] else ""
        ch = r.get("chain") or {}
        solve = (f"{ch.get('grid', 'automatic')} grid: {ch['states']:,} states, {ch['seconds']:.0f} s "
                 f"({ch['method']}, residual {ch['residual']:.1e})"
                 if "states" in ch else (short_error(ch["error"]) if "error" in ch else ""))
        lines.append(f"| {sc['name']} | {sc['what']}" + "".join(f"; {x}" for x in (attrs, extra) if x) +
                     f" | {solve} |")
    return "\n".join(lines)


def closed_form_table(rows: list[dict]) -> str:
    lines = ["| scenario | metric | M/M/1/N | ns-3 (95 % CI) | gap | within |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "closed_form" not in r:
            continue
        first = True
        for h, _, label in METRICS:
            cf = r["closed_form"].get(h)
            if cf is None:
                continue
            n3 = r["ns3"]["metrics"][h]
            gap, ok, _ = judge(cf, n3)
            lines.append(f"| {r['scenario']['name'] if first else ''} | {label} | {fmt(cf)} | "
                         f"{fmt(n3['mean'])} ± {fmt(n3['half_width'], 2)} | {gap} | {ok} |")
            first = False
    return "\n".join(lines)


def render(rows: list[dict], reps: int) -> str:
    text = [f"ns-3 {harness.NS3_VERSION} (PyPI wheel `ns3`), {reps} independent replications per scenario, "
            f"mu = {MU:g} packets/s; within = |chain - ns-3| <= max({HW_TOL:g} half-widths, "
            f"{100 * REL_TOL:g} %)", "", scenario_table(rows), "", table(rows)]
    cf = closed_form_table(rows)
    if cf.count("\n") > 1:
        text += ["", cf]
    return "\n".join(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="run only these scenarios (repeatable; a prefix matches)")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="run length factor: 1 = 10 replications of 4e5 arrivals per scenario")
    ap.add_argument("--reps", type=int, default=10, help="independent ns-3 replications (default 10)")
    ap.add_argument("--jobs", type=int, default=2, help="ns-3 runs in parallel (default 2)")
    ap.add_argument("--no-chain", action="store_true", help="ns-3 (and closed forms) only")
    ap.add_argument("--sim", action="store_true", help="also aqmchain's event-driven simulator (4 replications "
                    "of about 1.1e6 x scale arrivals, continuous avg)")
    ap.add_argument("--grid-k", type=int, help="the chain on the uniform grid of step 1/K (refine = none) "
                    "instead of the automatic grid")
    ap.add_argument("--tol", type=float, help="the chain's residual target (default: solve_stationary's)")
    ap.add_argument("--json", type=Path, help="write the full results as JSON to this file")
    ap.add_argument("--markdown", type=Path, help="write the tables to this file too")
    ap.add_argument("--from-json", type=Path, nargs="+",
                    help="only print the tables of JSON files written by --json (a scenario in a later file "
                         "replaces the same scenario in an earlier one; in the order of the scenario list)")
    args = ap.parse_args(argv)
    if args.scale <= 0:
        ap.error(f"--scale must be > 0, got {args.scale}")
    if args.reps < 2:
        ap.error(f"--reps must be >= 2 for a confidence interval, got {args.reps}")

    scenarios = SCENARIOS
    if args.list:
        for sc in scenarios:
            print(f"{sc.name:<24} {sc.what}")
        return 0
    if args.only:
        scenarios = [s for s in SCENARIOS if any(s.name.startswith(o) for o in args.only)]
        if not scenarios:
            ap.error(f"--only {args.only} matches none of: {', '.join(s.name for s in SCENARIOS)}")

    if args.from_json:
        rows, reps = {}, set()
        for path in args.from_json:
            saved = json.loads(path.read_text())
            reps.add(saved["reps"])
            for r in saved["rows"]:  # a later file's fields replace an earlier one's (a run without
                name = r["scenario"]["name"]  # the chain keeps the chain of an earlier file)
                rows[name] = {**rows.get(name, {}), **r}
        order = [s.name for s in SCENARIOS]
        rows = sorted(rows.values(), key=lambda r: order.index(r["scenario"]["name"])
                      if r["scenario"]["name"] in order else len(order))
        out = render(rows, reps.pop() if len(reps) == 1 else "/".join(map(str, sorted(reps))))
        print(out)
        if args.markdown:
            args.markdown.write_text(out + "\n")
        if args.json:
            args.json.write_text(json.dumps({"ns3_version": harness.NS3_VERSION, "mu": MU, "reps": saved["reps"],
                                             "rows": rows}, indent=1, default=str))
        return 0

    exe = harness.build()
    print(f"ns-3 {harness.NS3_VERSION} from {harness.wheel_prefix()}, harness {exe}", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {sc.name: pool.submit(run_ns3, exe, sc, args.scale, args.reps) for sc in scenarios}
        rows = []
        for sc in scenarios:
            row = {"scenario": {k: v for k, v in sc.__dict__.items()}, "chain_modelled": sc.chain}
            if sc.chain and not args.no_chain:
                row["chain_model"] = chain_document(sc)
                row["chain"] = solve_chain(sc, {"k": args.grid_k, "refine": "none"} if args.grid_k else None,
                                           args.tol)
                if "states" in row["chain"]:
                    print(f"{sc.name}: chain {row['chain']['states']} states in {row['chain']['seconds']:.1f} s",
                          file=sys.stderr)
                if "error" in row["chain"]:
                    print(f"{sc.name}: chain: {row['chain']['error']}", file=sys.stderr)

            if sc.chain and args.sim:
                row["simulator"] = simulate_chain(sc, args.scale)
                if "error" in row["simulator"]:
                    print(f"{sc.name}: simulator: {row['simulator']['error']}", file=sys.stderr)
            if sc.name.startswith("pmax0"):
                row["closed_form"] = mm1n(sc)
            row["ns3"] = futures[sc.name].result()
            if sc.chain:  # the translation against the values ns-3 itself uses (its m_qW and m_ptc)
                aqm = chain_document(sc)["aqm"]
                for key, n3 in (("w", "qw_effective"), ("ptc", "ptc")):
                    if not math.isclose(aqm[key], row["ns3"][n3], rel_tol=1e-9):
                        print(f"{sc.name}: the model's {key} = {aqm[key]} but ns-3 uses {row['ns3'][n3]}",
                              file=sys.stderr)
            print(f"{sc.name}: ns-3 {row['ns3']['arrivals_simulated']:.3g} arrivals in "
                  f"{row['ns3']['wall_total']:.1f} s", file=sys.stderr)
            rows.append(row)

    out = render(rows, args.reps)
    print(out)
    if args.markdown:
        args.markdown.write_text(out + "\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"ns3_version": harness.NS3_VERSION, "mu": MU, "reps": args.reps,
                                         "scale": args.scale, "rows": rows}, indent=1, default=str))
    bad = [r["scenario"]["name"] for r in rows
           if r["chain_modelled"] and "chain" in r and "error" not in r["chain"]
           and not all(judge(r["chain"][h], r["ns3"]["metrics"][h], r["ns3"]["arrivals_simulated"])[2]
                       for h, _, _ in METRICS)]
    if bad:
        print(f"outside max({HW_TOL:g} half-widths, {100 * REL_TOL:g} %): {', '.join(bad)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
