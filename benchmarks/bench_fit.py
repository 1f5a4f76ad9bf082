"""Trace-fitting benchmark: seconds to fit each source kind to a trace of 1e7 packets.

The trace is 1e7 arrival timestamps of a two-state MMPP (made here, not timed); each
kind is fitted to the same timestamps with aqmchain.fit_source (slotted kinds with a
fixed slot, so every kind reads the same 1e7 packets), and the wall time includes
slotting, the trace statistics and the least-squares fit.  Reading a pcap with dpkt is
timed on a smaller capture and reported per packet.  Writes the table to
docs/performance.md between the BENCH:fit markers (the target is 30 s per fit).

    .venv/bin/python benchmarks/bench_fit.py
    .venv/bin/python benchmarks/bench_fit.py --packets 1000000 --no-write
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stationary import write_block  # noqa: E402

TARGET_S = 30.0


def main() -> None:
    import aqmchain
    from aqmchain.fit import mmpp_trace

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=10_000_000)
    ap.add_argument("--pcap-packets", type=int, default=200_000)
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    a = ap.parse_args()
    src = aqmchain.Source.mmpp([[-5.0, 5.0], [20.0, -20.0]], [200.0, 1000.0])
    t0 = time.perf_counter()
    ts = mmpp_trace(src, a.packets, seed=1)
    print(f"trace: {ts.size} packets over {ts[-1] - ts[0]:.1f} s (made in {time.perf_counter() - t0:.1f} s)")
    rows = []
    for kind, kw in (("bernoulli", {"slot": 5e-4}), ("mmbp", {"slot": 5e-4}), ("mmbp", {"slot": 5e-4, "states": 3}),
                     ("ssmp", {"slot": 5e-4}), ("mmpp", {})):
        t = time.perf_counter()
        fit = aqmchain.fit_source(ts, kind, **kw)
        sec = time.perf_counter() - t
        label = kind + (f" (K = {kw['states']})" if "states" in kw else "")
        rows.append((label, sec, fit.evaluations, fit.errors["variance_time_max"], fit.hurst_trace, fit.hurst_model))
        print(f"{label:<14} {sec:7.2f} s  {fit.evaluations:5d} evaluations  vt max rel. error "
              f"{fit.errors['variance_time_max']:.3g}  H trace {fit.hurst_trace:.3f} model {fit.hurst_model:.3f}")
    pcap_rate = None
    try:
        import dpkt

        frame = bytes(dpkt.ethernet.Ethernet(data=b"x" * 40))
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "t.pcap"
            with open(p, "wb") as f:
                w = dpkt.pcap.Writer(f)
                for x in ts[: a.pcap_packets]:
                    w.writepkt(frame, ts=float(x))
            t = time.perf_counter()
            n = aqmchain.read_trace(p).size
            pcap_rate = n / (time.perf_counter() - t)
        print(f"pcap reading (dpkt): {pcap_rate / 1e6:.2f} M packets/s")
    except ImportError:
        print("dpkt not installed: pcap reading not timed")
    md = ["| kind | seconds (1e7 packets) | model evaluations | variance-time max rel. error | H trace | H model |",
          "|---|---|---|---|---|---|"]
    md += [f"| {k} | {s:.2f} | {e} | {v:.3g} | {ht:.3f} | {hm:.3f} |" for k, s, e, v, ht, hm in rows]
    md.append("")
    md.append(f"Target: at most {TARGET_S:g} s per fit; the slowest fit took {max(r[1] for r in rows):.1f} s. "
              + (f"Reading a pcap with dpkt: {pcap_rate / 1e6:.2f} M packets/s (so 1e7 packets take about "
                 f"{1e7 / pcap_rate:.0f} s more)." if pcap_rate else ""))
    text = "\n".join(md)
    print(text)
    if not a.no_write and a.packets == 10_000_000:
        write_block("fit", text)


if __name__ == "__main__":
    main()
