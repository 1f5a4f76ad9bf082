"""Adaptive RED through the load step (light, heavy, light) of examples/load_step.py: the
exact transient law of the chain, with p_max as a component of the state, beside the
simulator's replications of the same scenario.

    .venv/bin/python examples/load_step_adaptive.py [OUT.png] [--full]   # default out/load_step_adaptive.png

By default a quick version (about half a minute): the plain avg grid of step 1/4 and p_max on
a grid of step 0.02 (123k states), 1000 replications.  ``--full`` runs the study as the model
file has it: the automatic avg grid and p_max step 0.01 (1.29M states; several minutes), 4000
replications.

p_max starts at 0.1 and moves every 500 slots on average ("Adaptive RED: An Algorithm for
Increasing the Robustness of RED's Active Queue Management": up by min(0.01, p_max / 4)
when avg is above the upper part of the band between the thresholds, down by the factor
0.9 below its lower part).  Two simulators: one following the chain's avg and p_max grids
(its exact law: the curves must agree within the 95 % band) and one with avg and p_max
exact (the real algorithm).  Plain RED on the same queue is drawn for reference.
"""

import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

import aqmchain

HERE = Path(__file__).resolve().parent / "load_step"


#: The quick version's overrides of the model files (--full: none).
QUICK = {"grid": {"k": 4, "refine": "none"}, "aqm": {"p_max_step": 0.02}}


def _doc(name: str, full: bool) -> dict:
    doc = aqmchain.modelfile.load_document(HERE / name)
    if not full:
        for section, values in QUICK.items():
            doc[section].update({k: v for k, v in values.items() if section != "aqm" or k in doc[section]})
    return doc


def run(full: bool = False):
    replications = 4000 if full else 1000
    times = np.arange(50, 10001, 50)
    scenario = aqmchain.load_scenario(HERE / "scenario.toml", _doc("adaptive_red.toml", full))
    plain = aqmchain.load_scenario(HERE / "scenario.toml", _doc("red.toml", full))
    chain = aqmchain.solve_transient(scenario, times)
    exact = aqmchain.simulate_scenario(scenario, times, replications=replications, seed=1)
    disc = aqmchain.simulate_scenario(scenario, times, replications=replications, seed=2, discretised=True)
    red = aqmchain.solve_transient(plain, times)
    return times, chain, exact, disc, red


def plot(times, chain, exact, disc, red, path):
    fig = Figure(figsize=(13, 4))
    axes = fig.subplots(1, 3, sharex=True)
    for ax, metric, title in zip(axes, ("mean_p_max", "mean_avg", "mean_queue"),
                                 ("mean p_max", "mean avg (packets)", "mean queue (packets)")):
        ax.plot(times, getattr(chain, metric), lw=1.4, color="C0", label="adaptive RED (chain)")
        for sim, color, lab in ((exact, "C1", "simulation, avg and p_max exact"),
                                (disc, "C2", "simulation on the chain's grids")):
            m, hw = getattr(sim, metric), getattr(sim, metric + "_hw")
            ax.fill_between(times, m - hw, m + hw, color=color, alpha=0.3, lw=0, label=lab + " (95 %)")
        if metric != "mean_p_max":
            ax.plot(times, getattr(red, metric), lw=1.0, color="0.4", ls=":", label="RED, p_max = 0.1 (chain)")
        for b in chain.phase_boundaries[1:-1]:
            ax.axvline(b, color="0.5", ls="--", lw=0.8)
        ax.set_title(title)
        ax.set_xlabel("slot")
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--full"]
    path = Path(args[0]) if args else Path("out") / "load_step_adaptive.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    times, chain, exact, disc, red = run(full="--full" in sys.argv[1:])
    print(f"chain: {chain.states} states, {chain.info.method}, {chain.info.seconds['transient_total']:.1f} s")
    for name in ("mean_p_max", "mean_queue"):
        z = np.abs(getattr(chain, name) - getattr(disc, name)) / np.maximum(getattr(disc, name + "_hw"), 1e-12)
        print(f"{name}: chain outside the discretised simulator's 95 % band at {int((z > 1.96).sum())} of "
              f"{len(times)} times (max |z| {z.max():.2f})")
    print("   slot   p_max chain / grids sim / exact sim      queue chain / grids sim / exact sim   RED queue")
    for t in (1000, 3000, 3500, 4500, 6000, 7000, 8000, 10000):
        i = int(np.searchsorted(times, t))
        print(f"{t:7d}   {chain.mean_p_max[i]:.4f} / {disc.mean_p_max[i]:.4f} ± {disc.mean_p_max_hw[i]:.4f} / "
              f"{exact.mean_p_max[i]:.4f} ± {exact.mean_p_max_hw[i]:.4f}   {chain.mean_queue[i]:6.2f} / "
              f"{disc.mean_queue[i]:6.2f} ± {disc.mean_queue_hw[i]:.2f} / {exact.mean_queue[i]:6.2f} ± "
              f"{exact.mean_queue_hw[i]:.2f}   {red.mean_queue[i]:6.2f}")
    plot(times, chain, exact, disc, red, path)
    print(f"written {path}")


if __name__ == "__main__":
    main()
