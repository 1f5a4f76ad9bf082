"""Writes examples/traces/mmpp.csv: 6000 arrival timestamps (seconds, 1 us resolution) of a
two-state MMPP (200 and 1000 packets/s, sojourns of 0.2 s and 0.05 s), the sample trace of
`aqmchain fit` (docs/trace-fitting.md).  Run from the repository root."""

from pathlib import Path

import numpy as np

import aqmchain
from aqmchain.fit import mmpp_trace

source = aqmchain.Source.mmpp([[-5.0, 5.0], [20.0, -20.0]], [200.0, 1000.0])
t = mmpp_trace(source, 6000, seed=2024)
out = Path(__file__).with_name("mmpp.csv")
out.write_text("time\n" + "".join(f"{v:.6f}\n" for v in t))
print(f"wrote {out}: {t.size} packets over {t[-1] - t[0]:.3f} s")
