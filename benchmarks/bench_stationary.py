"""Stationary-solver benchmark: aqmchain against SciPy on the same matrix, in the same run.

Every (case, method) runs in a child process of its own (peak RSS is then that
run's), under a wall-clock limit.  Recorded: build / analyse / factorise / solve
seconds, iterations, matrix-vector products, residual ||pi P - pi||_1, peak memory.
A run whose residual is above 1e-12 (or that hit its limit) is reported but not
ranked.  Writes the table to docs/performance.md (between the BENCH markers).

    .venv/bin/python benchmarks/bench_stationary.py                 # default cases
    .venv/bin/python benchmarks/bench_stationary.py --cases geo_k4 --scipy-limit 300
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-12


def model_for(case: str):
    import aqmchain

    red = aqmchain.DropFunction.red(100, 200, 0.1)
    if case == "geo_k4":
        src, mu, k = aqmchain.Source.bernoulli(0.5), 0.5, 4
    elif case == "geo_a04_k4":  # lighter load: the queue tail falls below 1e-40
        src, mu, k = aqmchain.Source.bernoulli(0.4), 0.5, 4
    elif case == "ssmp_k4":
        src, mu, k = aqmchain.Source.ssmp(5, 1.927562, 31.6), 0.5, 4
    elif case == "geo_k16":
        src, mu, k = aqmchain.Source.bernoulli(0.5), 0.5, 16
    elif case == "ssmp_k16_mu025":
        src, mu, k = aqmchain.Source.ssmp(5, 1.927562, 31.6), 0.25, 16
    elif case == "ssmp_k38_mu025":  # about 10M states
        src, mu, k = aqmchain.Source.ssmp(5, 1.927562, 31.6), 0.25, 38
    elif case == "ssmp_k16_mu05":
        src, mu, k = aqmchain.Source.ssmp(5, 1.927562, 31.6), 0.5, 16
    else:
        raise SystemExit(f"unknown case {case}")
    return aqmchain.Model(buffer=250, source=src, service=aqmchain.Service(mu), aqm=aqmchain.Aqm(drop=red, w=0.002),
                          grid=aqmchain.GridSpec(k=k))


def reduced_system(chain):
    """The system our direct method solves: (I - P)^T without row/column k, rhs P[k, :]."""
    import numpy as np
    import scipy.sparse as sp

    import aqmchain

    P = aqmchain.transition_matrix(chain)
    k = chain.recurrent_state
    keep = np.r_[0:k, k + 1:chain.n]
    A = (sp.identity(chain.n, format="csr") - P).T.tocsr()[keep][:, keep].tocsc()
    b = np.asarray(P[k].toarray()).ravel()[keep]
    return P, A, b, keep, k


def run_one(case: str, method: str, queue, mem_gb: float) -> None:
    limit = int(mem_gb * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # fail cleanly instead of waking the OOM killer
    import numpy as np

    import aqmchain

    out = {"case": case, "method": method}
    t = time.perf_counter()
    chain = aqmchain.build_chain(model_for(case), memory_limit_gb=20, max_states=20_000_000)
    out["build_s"] = time.perf_counter() - t
    out["states"], out["nnz"] = chain.n, chain.nnz
    if method.startswith("aqmchain"):
        name = method.split(":")[1]
        try:
            r = aqmchain.solve_stationary(chain, method=name, tol=TOL)
        except aqmchain.NonConvergenceError as exc:
            r = exc.result
        s = r.info.seconds
        out.update(solve_s=s.get("solve"), analyse_s=s.get("solve_analyse"), factorise_s=s.get("solve_factorise"),
                   iterations=r.info.iterations, matvecs=r.info.matvecs, residual=r.info.residual,
                   ran=r.info.method)
    else:
        import scipy.sparse.linalg as sla

        P, A, b, keep, k = reduced_system(chain)
        t = time.perf_counter()
        if method == "scipy:spsolve":  # our formulation: one unknown fixed, row and column removed
            x = sla.spsolve(A, b)
            pi = np.zeros(chain.n)
            pi[keep], pi[k] = x, 1.0
            out.update(iterations=0, matvecs=0)
        elif method == "scipy:spsolve_textbook":  # (P^T - I) with its last row replaced by ones
            import scipy.sparse as sp

            At = (P.T - sp.identity(chain.n, format="csr")).tolil()
            At[chain.n - 1, :] = np.ones(chain.n)
            rhs = np.zeros(chain.n)
            rhs[-1] = 1.0
            t = time.perf_counter()
            pi = sla.spsolve(At.tocsc(), rhs)
            out.update(iterations=0, matvecs=0)
        else:  # scipy:eigs on P^T, eigenvalue of largest magnitude
            vals, vecs = sla.eigs(P.T.tocsr(), k=1, which="LM", tol=1e-14)
            pi = np.real(vecs[:, 0])
            out.update(iterations=None, matvecs=None)
        out["solve_s"] = time.perf_counter() - t
        pi = np.abs(pi) / np.abs(pi).sum()
        out["residual"] = float(np.abs(pi @ P - pi).sum())
        out["ran"] = method
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(out)


def run_limited(case: str, method: str, limit: float, mem_gb: float) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=run_one, args=(case, method, q, mem_gb))
    t = time.perf_counter()
    p.start()
    p.join(limit)
    if p.is_alive():
        p.kill()
        p.join()
        return {"case": case, "method": method, "note": f"stopped after the {limit:.0f} s limit"}
    if p.exitcode != 0:
        return {"case": case, "method": method,
                "note": f"failed (exit code {p.exitcode}; out of memory under the {mem_gb:.0f} GB limit?)"}
    res = q.get()
    res["wall_s"] = time.perf_counter() - t
    return res


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def table(rows: list[dict]) -> str:
    lines = ["| case | states | nnz | method | build s | analyse s | factorise s | solve s | iterations | matvecs | "
             "residual | peak MB | vs SciPy best |", "|" + "---|" * 13]
    by_case: dict[str, list[dict]] = {}
    for r in rows:
        by_case.setdefault(r["case"], []).append(r)
    for case, rs in by_case.items():
        ok = lambda r: r.get("residual") is not None and r["residual"] <= TOL  # noqa: E731
        scipy = [r["solve_s"] for r in rs if r["method"].startswith("scipy") and ok(r)]
        best = min(scipy) if scipy else None
        for r in rs:
            if "note" in r:
                lines.append(f"| {case} | | | {r['method']} | | | | | | | {r['note']} | | not ranked |")
                continue
            speed = "not ranked (residual > 1e-12)" if not ok(r) else (
                f"{best / r['solve_s']:.1f}x" if best and r["method"].startswith("aqmchain") else "")
            ran = r.get("ran", "")
            name = r["method"] + (f" (ran {ran})" if r["method"].endswith(":auto") and ran else "")
            lines.append(
                f"| {case} | {r['states']} | {r['nnz']} | {name} | {r['build_s']:.3f} | "
                f"{fmt(r.get('analyse_s'), '.3f')} | {fmt(r.get('factorise_s'), '.3f')} | {r['solve_s']:.3f} | "
                f"{fmt(r.get('iterations'), 'd')} | {fmt(r.get('matvecs'), 'd')} | {r['residual']:.1e} | "
                f"{r['peak_mb']:.0f} | {speed} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["geo_k4", "ssmp_k4"])
    ap.add_argument("--methods", nargs="+",
                    default=["aqmchain:krylov", "aqmchain:direct", "aqmchain:multilevel", "scipy:spsolve",
                             "scipy:spsolve_textbook", "scipy:eigs"])
    ap.add_argument("--mem-gb", type=float, default=16, help="address-space limit per run (GB)")
    ap.add_argument("--append", action="store_true",
                    help="add to the rows of the previous --json file (a re-run case/method replaces its row)")
    ap.add_argument("--limit", type=float, default=300, help="wall-clock limit per aqmchain run (s)")
    ap.add_argument("--scipy-limit", type=float, default=600, help="wall-clock limit per SciPy run (s)")
    ap.add_argument("--json", default=str(ROOT / "build" / "bench_stationary.json"))
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.md")
    args = ap.parse_args()
    rows = json.loads(Path(args.json).read_text()) if args.append and Path(args.json).exists() else []
    for case in args.cases:
        for method in args.methods:
            limit = args.scipy_limit if method.startswith("scipy") else args.limit
            r = run_limited(case, method, limit, args.mem_gb)
            print(json.dumps(r), flush=True)
            rows = [x for x in rows if (x["case"], x["method"]) != (case, method)] + [r]  # a re-run replaces
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    md = table(rows)
    print(md)
    if not args.no_docs:
        write_block("stationary", md, keep_commands=args.append)


def command_line(note: str = "") -> str:
    """The `Command:` line of a benchmark block: this invocation, machine and date."""
    cmd = f"python benchmarks/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:])
    return (f"Command: `{cmd.strip()}` on {platform.machine()}, {mp.cpu_count()} cores, "
            f"{time.strftime('%Y-%m-%d')}{note}.")


def run_json_child(argv: list[str], timeout: float) -> dict:
    """Runs argv (a fresh process) and returns the JSON of its last output line, or
    {"error": why} when it ran over ``timeout`` seconds or failed."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["failed"])[-1][:120]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def block_rows(marker: str, page: str = "performance.md") -> list[str]:
    """The table rows, header and rule left out, between the BENCH:marker markers of docs/<page>."""
    doc = (ROOT / "docs" / page).read_text()
    block = doc.split(f"<!-- BENCH:{marker} -->", 1)[1].split(f"<!-- /BENCH:{marker} -->", 1)[0]
    lines = [ln for ln in block.splitlines() if ln.startswith("| ")]
    return lines[1:]  # the first is the header (the rule starts with "|-")


def write_block(marker: str, md: str, keep_commands: bool = False, note: str = "", page: str = "performance.md") -> None:
    """Replace the text between <!-- BENCH:marker --> and <!-- /BENCH:marker --> in
    docs/<page> by the command line(s) and the table ``md``."""
    doc = ROOT / "docs" / page
    head, rest = doc.read_text().split(f"<!-- BENCH:{marker} -->", 1)
    prev, tail = rest.split(f"<!-- /BENCH:{marker} -->", 1)
    cmds = [ln for ln in prev.splitlines() if ln.startswith("Command")] if keep_commands else []
    cmds.append(command_line(note))
    doc.write_text(head + f"<!-- BENCH:{marker} -->\n" + "\n".join(cmds) + f"\n\n{md}\n<!-- /BENCH:{marker} -->" + tail)

if __name__ == "__main__":
    main()
