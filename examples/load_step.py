"""Load step (light, heavy, light) under RED, gentle RED and S-RED: the exact transient
mean avg and mean queue from the chain, with the simulator's 95 % confidence bands from
independent replications of the same scenario.

    .venv/bin/python examples/load_step.py [OUT.png]     # default out/load_step.png

The experiment follows "Research on the Improved Way of RED Algorithm S-RED" (Zhao, Zheng,
Tu): buffer 35, w = 0.0027, thresholds 5 and 20; the load changes from light to heavy and
back (examples/load_step/scenario.toml).  The simulator uses the continuous avg a router
computes; where the chain's curve leaves the band it is the chain's avg grid (8 points per
packet) that shows (with discretised=True the simulator runs on that grid and the two
agree within the band).
"""

import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

import aqmchain

HERE = Path(__file__).resolve().parent / "load_step"
AQMS = ("red", "gentle_red", "sred")


def run(replications: int = 2000):
    times = np.arange(50, 10001, 50)
    out = {}
    for name in AQMS:
        scenario = aqmchain.load_scenario(HERE / "scenario.toml", HERE / f"{name}.toml")
        chain = aqmchain.solve_transient(scenario, times)
        sim = aqmchain.simulate_scenario(scenario, times, replications=replications, seed=1)
        out[name] = (chain, sim)
    return times, out


def plot(times, out, path):
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2, sharex=True)
    for ax, metric, title in zip(axes, ("mean_avg", "mean_queue"), ("mean avg", "mean queue")):
        for name, (chain, sim) in out.items():
            line, = ax.plot(times, getattr(chain, metric), lw=1.4, label=f"{name} (chain)")
            mean, hw = getattr(sim, metric), getattr(sim, metric + "_hw")
            ax.fill_between(times, mean - hw, mean + hw, color=line.get_color(), alpha=0.25, lw=0,
                            label=f"{name} (simulation, 95 %)")
        for b in chain.phase_boundaries[1:-1]:
            ax.axvline(b, color="0.5", ls="--", lw=0.8)
        ax.set_title(title)
        ax.set_xlabel("slot")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("out") / "load_step.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    times, out = run()
    for name, (chain, sim) in out.items():
        z = np.abs(chain.mean_queue - sim.mean_queue) / np.maximum(sim.mean_queue_hw, 1e-12)
        print(f"{name:>10}: peak mean queue {chain.mean_queue.max():6.2f} (chain), "
              f"{sim.mean_queue.max():6.2f} (simulation); chain outside the 95 % band at "
              f"{int((z > 1).sum())} of {len(times)} times")
    plot(times, out, path)
    print(f"written {path}")


if __name__ == "__main__":
    main()
