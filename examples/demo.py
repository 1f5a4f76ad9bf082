"""`make demo`: solve the RED queue of "Implementation of modified AQM mechanisms in IP routers"
and print it beside the published row.

Model: the RED queue of Domanska, Domanski and Czachorski, Bernoulli(0.5) arrivals, geometric
service mu = 0.5, buffer 250, RED min_th 100, max_th 200, p_max 0.1, w = 0.07, avg
grid K = 4 with the mean-preserving split mapping (docs/conventions.md).
Writes out/demo_queue_pmf.png: the queue-length pmf on a log scale.
"""

from pathlib import Path

import numpy as np

import aqmchain

HERE = Path(__file__).resolve().parent
# "Implementation of modified AQM mechanisms in IP routers", Tables I-III, row "RED, GEO, mu = 0.5, w = 0.07".
PAPER = {"mean_queue": 64.43, "var_queue": 1504.8, "loss": 0.00390818, "mean_response": 131.375,
         "var_response": 6109.14}


def main() -> None:
    model = aqmchain.load_model(HERE / "red_geo.toml")
    r = aqmchain.solve_stationary(model)
    print("aqmchain demo: RED queue of Domanska et al., GEO source alpha = 0.5, mu = 0.5, w = 0.07, N = 250, K = 4")
    print(f"chain: {r.states} states, {r.nnz} transitions; solver {r.info.method}, residual {r.info.residual:.1e}, "
          f"{r.info.seconds['solve']:.2f} s\n")
    print(f"{'quantity':<28}{'aqmchain':>14}{'paper':>14}{'diff':>9}")
    labels = {"mean_queue": "mean queue (waiting pkts)", "var_queue": "queue variance", "loss": "loss probability",
              "mean_response": "mean waiting time R (slots)", "var_response": "waiting-time variance"}
    for key, paper in PAPER.items():
        ours = getattr(r, key)
        print(f"{labels[key]:<28}{ours:>14.6g}{paper:>14.6g}{100 * (ours - paper) / paper:>8.2f}%")
    print(f"{'throughput':<28}{r.throughput:>14.6g}")
    print(f"{'P(queue >= 200)':<28}{r.queue_tail()[200]:>14.3e}")
    print(f"{'99% queue quantile':<28}{r.queue_quantile(0.99):>14d}")
    print("\nDifferences: the chain's avg lives on a 1/4-packet grid (docs/conventions.md); the paper's numbers are simulated.")

    out = Path("out")
    out.mkdir(exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    q = np.arange(len(r.queue_pmf))
    ax.semilogy(q, np.maximum(r.queue_pmf, 1e-300), lw=1.5, label="queue pmf P(q = k)")
    ax.semilogy(q, np.maximum(r.queue_tail(), 1e-300), lw=1.0, ls="--", label="tail P(q >= k)")
    ax.axvspan(100, 200, color="0.9", label="RED min_th..max_th")
    ax.set_ylim(1e-16, 1)
    ax.set_xlabel("waiting packets k")
    ax.set_ylabel("probability")
    ax.set_title("RED, GEO alpha = 0.5, mu = 0.5, w = 0.07 (aqmchain, K = 4)")
    ax.legend(loc="lower left")
    fig.tight_layout()
    path = out / "demo_queue_pmf.png"
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


if __name__ == "__main__":
    main()
