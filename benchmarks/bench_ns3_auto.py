"""What `auto` does on the chains of ns-3's RED: each scenario of validation/ns3/compare.py
(the automatic grid; b250-1.1 and ecn-nohard-1.2, whose automatic grids exceed the state
budget, and ARED, which the chain does not model, left out) solved as a user solves it
(solve_stationary on the model: the count truncation's rounds included), and its final chain
solved cold by `auto`, `multilevel` and `krylov`, tol 1e-12, one fresh process per scenario
and build.  With --before PY the same with another build's Python (e.g. a wheel of an earlier
commit), alternately, so that both columns see the same machine.

    .venv/bin/python benchmarks/bench_ns3_auto.py
    .venv/bin/python benchmarks/bench_ns3_auto.py --before /tmp/old/py.sh --only defaults-0.5 defaults-0.9

Writes the table into docs/performance.md between the BENCH:ns3_auto markers unless
--no-write.  Iterations are GMRES steps (krylov) or cycles (multilevel) of the method that
converged, the method in brackets; "NC": not converged (never ranked).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_stationary import run_json_child, write_block  # noqa: E402

SKIP = ("b250-1.1", "ecn-nohard-1.2")

CHILD = r"""
import json, sys, time, warnings
sys.path.insert(0, sys.argv[2] + "/validation/ns3")
import compare, aqmchain as a
warnings.simplefilter("ignore")
sc = next(s for s in compare.SCENARIOS if s.name == sys.argv[1])
model, _ = a.model_from_dict(compare.chain_document(sc))
t = time.perf_counter()
r = a.solve_stationary(model, tol=1e-12, response="none")
out = {"states": int(r.chain.n), "whole": time.perf_counter() - t, "whole_method": str(r.info.method)}
for m in ("auto", "multilevel", "krylov"):
    t = time.perf_counter()
    try:
        s = a.solve_stationary(r.chain, method=m, tol=1e-12, response="none")
        info, ok = s.info, True
    except a.NonConvergenceError as e:
        info, ok = e.result.info, False
    out[m] = {"seconds": time.perf_counter() - t, "iterations": int(info.iterations), "method": str(info.method),
              "converged": ok, "tried": [x["method"] for x in info.methods_tried]}
print(json.dumps(out))
"""


def scenarios() -> list[str]:
    sys.path.insert(0, str(ROOT / "validation" / "ns3"))
    import compare  # noqa: PLC0415 -- the scenario list of the ns-3 comparison

    return [s.name for s in compare.SCENARIOS if s.chain and s.name not in SKIP]


def cell(r: dict) -> str:
    if not r.get("converged"):
        return f"NC ({r['iterations']} {r['method']})"
    tried = "+".join(r["tried"]) if len(r["tried"]) > 1 else r["method"]
    return f"{r['seconds']:.1f} s, {r['iterations']} ({tried})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", help="scenario names (default: all the chain models)")
    ap.add_argument("--before", help="the Python of the build to compare with")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    names = args.only or scenarios()
    builds = ([("before", args.before)] if args.before else []) + [("after", sys.executable)]
    rows = []
    for name in names:
        res = {}
        for label, py in builds:
            res[label] = run_json_child([py, "-c", CHILD, name, str(ROOT)], args.timeout)
            print(name, label, res[label], flush=True)
        a = res["after"]
        if "error" in a:
            rows.append(f"| {name} | — | {a['error']} | | | | |")
            continue
        before = res.get("before")
        whole_before = "" if before is None else (
            before.get("error", f"{before['whole']:.1f} s ({before['whole_method']})"))
        auto_before = "" if before is None or "error" in before else cell(before["auto"])
        # the states of the final chain, "before -> after" where the automatic grid changed
        states = f"{a['states']:,}" if before is None or before.get("states", a["states"]) == a["states"] else \
            f"{before['states']:,} -> {a['states']:,}"
        rows.append(f"| {name} | {states} | {whole_before} | {a['whole']:.1f} s ({a['whole_method']}) | "
                    f"{auto_before} | {cell(a['auto'])} | {cell(a['multilevel'])} | {cell(a['krylov'])} |")
    md = ("| scenario | states | whole call before | whole call | auto before | auto | multilevel | krylov |\n"
          "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    print(md)
    if not args.no_write:
        write_block("ns3_auto", md)


if __name__ == "__main__":
    main()
