"""Per-class response times under modified RED at buffer 40 (docs/classes.md), run from the
repository root:

    .venv/bin/python examples/classes/response_b40.py [file f0 f5 r0 r5]

`file` is examples/classes/mice_ecn.toml as it is; f0 / f5 / r0 / r5 the same with 30 % mice,
ECN probability 0 or 0.5 for both classes and modified front (f) or random (r) drop.  Each row:
the chain's per-class mean response (tagged-packet chain on the two-class chain), the
simulator on the chain's grid and with continuous avg (4 x 4 million slots each), the chain's
relative errors against both, and the seconds of the solve (several minutes per model).
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

import aqmchain

HERE = Path(__file__).resolve().parent
CASES = {"file": (None, None, None), "f0": ("front", 0.0, 0.3), "f5": ("front", 0.5, 0.3),
         "r0": ("random", 0.0, 0.3), "r5": ("random", 0.5, 0.3)}


def model(key: str) -> aqmchain.Model:
    doc = aqmchain.modelfile.load_document(HERE / "mice_ecn.toml")
    mod, ecn, share = CASES[key]
    if mod:
        doc["aqm"]["modified"] = doc["aqm"]["policy"] = mod
        doc["class"][0]["share"], doc["class"][1]["share"] = share, 1 - share
        for c in doc["class"]:
            c["ecn"] = ecn
    return aqmchain.model_from_dict(doc)[0]


def main() -> None:
    print("| model | web mean R: chain / sim grid / sim | rel. error | ftp mean R: chain / sim grid / sim | "
          "rel. error | seconds |")
    print("|---|---|---|---|---|---|")
    for key in sys.argv[1:] or list(CASES):
        m = model(key)
        t0 = time.perf_counter()
        r = aqmchain.solve_stationary(m)
        sec = time.perf_counter() - t0
        grid = aqmchain.simulate(m, slots=4_000_000, replications=4, discretised=True)
        cont = aqmchain.simulate(m, slots=4_000_000, replications=4)
        cells = [key]
        for name in ("web", "ftp"):
            k, g, c = r.classes[name], grid.classes[name], cont.classes[name]
            cells.append(f"{k.mean_response:.2f} / {g.mean_response:.2f} ± {g.ci['mean_response']:.2f} / "
                         f"{c.mean_response:.2f} ± {c.ci['mean_response']:.2f}")
            cells.append(f"{k.mean_response / g.mean_response - 1:+.2%}, {k.mean_response / c.mean_response - 1:+.2%}")
        cells.append(f"{sec:.0f}")
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
