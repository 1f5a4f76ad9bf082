"""Before/after numbers for a core change: builder nonzeros/s, direct and multilevel solve
time on the seeds' GEO RED chain (w = 0.002, K = 4), simulator slots/s (one thread).

    .venv/bin/python benchmarks/bench_redesign.py            # prints one Markdown row per measurement

Run it with nothing else on the machine, once on the old commit and once on the new; the
best of three is printed (timing noise here is 2-4x between runs of the same work).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stationary import model_for  # noqa: E402

import aqmchain  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def best(f, repeat=3):
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        r = f()
        dt = time.perf_counter() - t
        if out is None or dt < out[0]:
            out = (dt, r)
    return out


def main() -> None:
    print("| measurement | value |\n|---|---|")
    for case in ("geo_k4", "ssmp_k4"):
        model = model_for(case)
        dt, chain = best(lambda: aqmchain.build_chain(model, memory_limit_gb=20, max_states=20_000_000))
        print(f"| build {case}: states / nnz / s / M nnz/s | {chain.n} / {chain.nnz} / {dt:.3f} / "
              f"{chain.nnz / dt / 1e6:.1f} |", flush=True)
    model = model_for("geo_k4")
    chain = aqmchain.build_chain(model)
    for method in ("direct", "multilevel"):
        dt, r = best(lambda: aqmchain.solve_stationary(chain, method=method, response="none"))
        print(f"| solve geo_k4 {method}: s / residual / mean queue | {dt:.3f} / {r.info.residual:.1e} / "
              f"{r.mean_queue:.6f} |", flush=True)
    sim_model = aqmchain.load_model(ROOT / "examples" / "red_geo.toml")
    for disc in (False, True):
        dt, s = best(lambda: aqmchain.simulate(sim_model, slots=50_000_000, replications=1, seed=1,
                                               discretised=disc, threads=1), repeat=2)
        print(f"| simulate one thread, {'discretised' if disc else 'continuous'}: M slots/s | "
              f"{s.slots_per_second / 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
