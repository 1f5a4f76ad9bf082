"""Response times under tail, front and random drop with a stateful AQM (docs/response-times.md):
the tagged-packet chain (front, random) or the closed form (tail) beside the simulator on the
chain's grids (its exact law), for plain RED, drop spacing, adaptive RED and
FDynamicAutoRED's AQM on one overloaded queue.

    .venv/bin/python benchmarks/stateful_response_table.py [--slots 4000000] [--replications 4]
"""

from __future__ import annotations

import argparse
import time

import aqmchain

FEATURES = {
    "RED": {},
    "spacing count": {"spacing": "count"},
    "adaptive RED": {"adaptive": True, "interval": 200, "p_max_step": 0.01},
    "AutoRED + dynamic max_th": {"weight": "autored", "autored_p": "queue", "dynamic_max_th": True},
}


def model(feature: str, policy: str) -> aqmchain.Model:
    return aqmchain.Model(buffer=40, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(mu=0.45),
                          aqm=aqmchain.Aqm(drop=aqmchain.DropFunction.red(10, 30, 0.1), w=0.05, policy=policy,
                                           **FEATURES[feature]),
                          grid=aqmchain.GridSpec(k=2, refine="none"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=4_000_000)
    ap.add_argument("--replications", type=int, default=4)
    a = ap.parse_args()
    print("| AQM | policy | states | E[R]: chain / simulator | pushed out: chain / simulator | "
          "Little's law error | tagged states | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for feature in FEATURES:
        for policy in ("tail", "front", "random"):
            m = model(feature, policy)
            t0 = time.perf_counter()
            r = aqmchain.solve_stationary(m)
            sec = time.perf_counter() - t0
            s = aqmchain.simulate(m, slots=a.slots, replications=a.replications, seed=5, discretised=True)
            tagged = f"{r.response_states:,}" if r.response_method == "tagged_chain" else "—"
            print(f"| {feature} | {policy} | {r.states:,} | {r.mean_response:.3f} / {s.mean_response:.3f} ± "
                  f"{s.ci['mean_response']:.3f} | {r.pushed_out_prob:.5f} / {s.pushed_out_prob:.5f} ± "
                  f"{s.ci['pushed_out_prob']:.5f} | {r.littles_law_error:.1e} | {tagged} | {sec:.1f} |", flush=True)


if __name__ == "__main__":
    main()
