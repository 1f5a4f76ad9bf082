"""Mean response time under tail / front / random drop for the GEO cases of
"Implementation of modified AQM mechanisms in IP routers".

    .venv/bin/python benchmarks/policy_table.py      # writes docs/response-times.md's first table

RED (100, 200, 0.1) and DSRED (100, 200, gamma 0.5), Bernoulli(0.5) arrivals, mu in {0.5, 0.25},
w = 0.07, buffer 250, grid K = 4 (split).  Tail: closed form; front/random: tagged-packet chain.
"""

import json
import time
from pathlib import Path

import aqmchain

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    lines = ["# Response times under tail, front and random drop", "",
             'The GEO cases of "Implementation of modified AQM mechanisms in IP routers": Bernoulli(0.5) arrivals, buffer 250, '
             "w = 0.07, avg grid K = 4 (split).",
             "E[R] and Var[R] are for packets that are served (R = D - A slots); `pushed out` is the",
             "probability that an admitted packet is later discarded. Tail uses the closed form, front",
             "and random the tagged-packet chain (stopped when less than 1e-12 of the mass is left).",
             "Produced by `python benchmarks/policy_table.py`.", "",
             "| AQM | mu | policy | E[R] | Var[R] | vs tail | pushed out | Little's law error | tagged states | "
             "steps | seconds |", "|" + "---|" * 11]
    for name, drop in (("RED", aqmchain.DropFunction.red(100, 200, 0.1)),
                       ("DSRED g=0.5", aqmchain.DropFunction.dsred(100, 200, 0.5))):
        for mu in (0.5, 0.25):
            base = None
            for policy in ("tail", "front", "random"):
                model = aqmchain.Model(buffer=250, source=aqmchain.Source.bernoulli(0.5),
                                       service=aqmchain.Service(mu),
                                       aqm=aqmchain.Aqm(drop=drop, w=0.07, policy=policy))
                t = time.perf_counter()
                r = aqmchain.solve_stationary(model)
                sec = time.perf_counter() - t
                base = base or r.mean_response
                line = (f"| {name} | {mu} | {policy} | {r.mean_response:.4f} | {r.var_response:.2f} | "
                        f"{100 * (r.mean_response - base) / base:+.2f}% | {r.pushed_out_prob:.4g} | "
                        f"{r.littles_law_error:.1e} | {r.response_states or '—'} | {r.response_steps or '—'} | "
                        f"{sec:.1f} |")
                print(line, flush=True)
                lines.append(line)
    quoted = json.loads((ROOT / "benchmarks" / "reference" / "quoted_figures.json").read_text(encoding="utf-8"))
    red, dsred = (-r["value"] for r in quoted["rows"] if "GEO" in r["scenario"] and "drop from front" in r["quantity"])
    lines += ["", f"That paper (Fig. 2 and the text) reports drop-from-front about {red:g} % (RED) and",
              f"{dsred:g} % (DSRED) shorter than tail drop for GEO, mu = 0.5, and about half as long under",
              "heavy load (mu = 0.25)."]
    # the page's later sections (stateful AQM, continuous time) come from other scripts: kept
    doc = ROOT / "docs" / "response-times.md"
    old = doc.read_text(encoding="utf-8") if doc.exists() else ""
    rest = old[old.find("\n## ") + 1:] if "\n## " in old else ""
    doc.write_text("\n".join(lines) + "\n" + ("\n" + rest if rest else ""), encoding="utf-8")


if __name__ == "__main__":
    main()
