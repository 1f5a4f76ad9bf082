"""Ctrl-C stops long core loops (the GIL is released while they run)."""

import signal
import subprocess
import sys
import time

SCRIPT = r"""
import sys, time
import aqmchain
red = aqmchain.DropFunction.red(100, 200, 0.1)
m = aqmchain.Model(buffer=250, source=aqmchain.Source.bernoulli(0.5), service=aqmchain.Service(0.5),
                   aqm=aqmchain.Aqm(drop=red, w=0.002), grid=aqmchain.GridSpec(k=4))
chain = aqmchain.build_chain(m)
print("started", flush=True)
t = time.time()
try:
    aqmchain.solve_stationary(chain, method="%s", max_iter=1000000000, response="none")
    print("finished", flush=True)
except KeyboardInterrupt:
    print("interrupted %%.2f" %% (time.time() - t), flush=True)
except Exception as exc:  # a non-convergence error would also end the run: report it
    print("error", type(exc).__name__, flush=True)
"""


def run(method: str) -> str:
    p = subprocess.Popen([sys.executable, "-c", SCRIPT % method], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    try:
        out, _ = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError(f"{method}: still running 20 s after SIGINT")
    return out.strip()


def test_ctrl_c_interrupts_gauss_seidel_and_power():
    for method in ("gauss_seidel", "power"):
        out = run(method)
        assert out.startswith("interrupted"), (method, out)
        assert float(out.split()[1]) < 10.0
