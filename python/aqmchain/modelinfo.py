"""What a model costs before it is solved: :func:`model_info`.

Upper bounds come from the model alone (:func:`aqmchain.estimate_chain`: the product of the
component sizes, the generator's bound on reachable states, transitions, builder memory).  When
the bound is small enough (``explore_limit``), the builder's exploration runs alone (no matrix
is assembled) and gives the **exact** number of reachable states; an automatic grid is first
resolved by its pre-solve (a solve on a coarse grid) so that the count is that of the chain
``solve`` would build.  The tagged-packet chain that front and random drop need for response
times (``aqmchain policies``) has one state per packet position in each state of the chain,
i.e. sum over the states of n: it is counted exactly from the exploration, or bounded.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from . import _checks, _core

__all__ = ["model_info", "solve_estimate", "EXPLORE_LIMIT"]

#: Explore (exact count) when the generator's bound on reachable states is at most this.
EXPLORE_LIMIT = 5_000_000


def _no_tagged_chain(model) -> str | None:
    """Why the chain builds no tagged-packet chain for `model` (what the policy costs then), or
    None when it does."""
    if model.source.max_batch > 1:
        return ("batch arrivals: the chain computes no response times (no tagged-packet chain is "
                "built; the simulator measures them)")
    if model.time == "continuous" and model.aqm.semantics == "ns3":
        return ("ns-3 semantics: response times are computed under tail drop only (the closed form); "
                "no tagged-packet chain is built")
    return None


def model_info(model: _core.Model, *, explore: bool | None = None, explore_limit: int = EXPLORE_LIMIT,
               memory_limit_gb: float | None = None) -> dict[str, Any]:
    """State count and memory of ``model``'s chain, exact when cheap.

    ``explore``: ``None`` (explore when ``reachable_bound <= explore_limit``), ``True``
    (always; an automatic grid runs its pre-solve), ``False`` (bounds only).

    Returns a dict: ``components`` (name -> size), ``product_states``, ``reachable_bound``,
    ``max_nnz``, ``bytes`` (upper bounds; an automatic grid: for its uniform 1/k grid before
    refinement, and ``refined_bounds`` the same for the refined grid when explored), then, when explored, ``reachable_states`` (exact), ``transitions_bound``
    (transitions emitted while exploring, >= the matrix's nonzeros), ``explore_seconds``,
    ``grid`` (the automatic grid's report), ``exact`` (True); and for response times under
    front / random drop ``tagged_states`` (exact when explored, else ``tagged_states_bound``)
    with ``tagged_bytes``.  ``policy_cost`` says in words what ``policies`` will build."""
    from .stationary import COMPONENTS, _limit_bytes, refine_grid

    if not isinstance(model, _core.Model):
        raise _checks.model_error("model", "an aqmchain.Model", model)
    if explore not in (None, True, False):
        raise _checks.model_error("explore", "None, True or False", explore)
    explore_limit = _checks.integer("explore_limit", explore_limit, 0, 2**62)
    est = dict(_core.estimate_chain(model))
    out: dict[str, Any] = dict(est)
    out["exact"] = False
    auto = model.grid.refine == "auto"
    if auto:
        out["grid_note"] = (f"automatic grid: the bounds are for the uniform grid 1/{model.grid.k} before refinement; "
                            f"the refined chain is kept within grid.state_budget = {model.grid.state_budget:g} "
                            "estimated states")
    do = explore if explore is not None else est["reachable_bound"] <= explore_limit
    buffer = model.buffer
    if do:
        target = model
        if auto:
            t0 = time.perf_counter()
            target, report = refine_grid(model, memory_limit_gb=memory_limit_gb)
            out["grid"] = {k: report[k] for k in ("refined", "points", "min_step", "estimated_states",
                                                   "budget_limited", "presolve_states") if k in report}
            out["grid"]["presolve_seconds"] = time.perf_counter() - t0
            if report.get("refined"):  # the bounds of the chain solve will build
                refined = dict(_core.estimate_chain(target))
                out["refined_bounds"] = {k: refined[k] for k in ("components", "product_states", "reachable_bound",
                                                                 "max_nnz", "bytes")}
                out["grid_note"] = (f"automatic grid refined by its pre-solve to {report.get('points')} avg points: "
                                    "the count is for the refined grid, refined_bounds its bounds")
        count = _core.count_reachable(target, _limit_bytes(memory_limit_gb))
        out.update(reachable_states=int(count["states"]), transitions_bound=int(count["transitions_bound"]),
                   explore_seconds=float(count["seconds"]), exact=True)
        levels = np.asarray(count["component_counts"][COMPONENTS["level"]], dtype=np.int64)
        out["tagged_states"] = int(np.dot(np.arange(len(levels), dtype=np.int64), levels))
        tagged = out["tagged_states"]
        which = "exactly"
    else:
        # every level n holds at most product / (N + 1) states: sum_n n * that = product * N / 2
        tagged = int(min(est["product_states"], est["reachable_bound"]) * buffer // 2)
        out["tagged_states_bound"] = tagged
        which = "at most"
    reason = _no_tagged_chain(model)
    if reason is not None:
        out.pop("tagged_states", None)
        out.pop("tagged_states_bound", None)
        out["policy_cost"] = reason
        return out
    # per tagged state at most twice the chain's transitions per state (known when explored)
    per = 2.0 * out["transitions_bound"] / max(out["reachable_states"], 1) if "transitions_bound" in out else 16.0
    out["tagged_bytes"] = float(_core.tagged_chain_bytes(tagged, max(16.0, per)))
    out["policy_cost"] = (f"front and random drop: a tagged-packet chain of {which} {tagged:,} states "
                          f"(about {out['tagged_bytes'] / 1e9:.3g} GB), stepped until the mass still in the system "
                          f"is below 1e-12; tail drop uses the closed form")
    return out


def solve_estimate(model: _core.Model, *, classes: str = "approx", response: str = "auto",
                   memory_limit_gb: float | None = None, **options: Any) -> dict[str, Any]:
    """What solving ``model`` will cost, from the model alone (nothing is built or explored):
    upper bounds on the chain's states (``states_bound``; ``bound_tight`` False when the bound
    is known to be far above the reachable count), transitions and builder memory
    (``bytes``), a rough time on one core (``build_seconds``, ``solve_seconds``, ``seconds``),
    the chain's ``structure`` ("plain", "classes", "stateful", "classes+stateful"), for
    front / random drop the tagged-packet chain's bound (``tagged_states_bound``,
    ``tagged_bytes_bound``), the ``budgets`` that apply (``max_states``, ``memory_limit_gb``,
    ``tagged_max_states``: the model file's ``[solver]`` table, then ``options``) and
    ``over_budget``: one sentence per budget the bounds exceed (the builder then refuses as
    soon as the exploration sees more states than ``max_states``; the tagged chain is checked
    exactly before the solve).  ``large`` says whether the command line announces it.

    The bounds of an automatic grid are those of its uniform 1/k grid before refinement
    (the refined chain is kept within ``grid.state_budget``)."""
    from .modelfile import solver_options
    from .stationary import _class_chain, _limit_bytes, _options

    if not isinstance(model, _core.Model):
        raise _checks.model_error("model", "an aqmchain.Model", model)
    _class_chain(classes)
    if response not in ("auto", "tagged", "none"):
        raise _checks.option_error("response", "one of auto, tagged, none", response)
    opts = {**solver_options(model), **options}
    mem = opts.pop("memory_limit_gb", None) if memory_limit_gb is None else memory_limit_gb
    opts.pop("memory_limit_gb", None)
    o = _options(opts)
    mem_gb = _limit_bytes(mem) / (1024.0**3)
    est = dict(_core.estimate_chain(model, classes))
    out: dict[str, Any] = {
        "states_bound": int(est["reachable_bound"]), "bound_tight": bool(est["bound_tight"]),
        "product_states": int(est["product_states"]), "transitions_bound": int(est["max_nnz"]),
        "bytes": float(est["bytes"]), "structure": est["structure"],
        "build_seconds": float(est["build_seconds"]), "solve_seconds": float(est["solve_seconds"]),
        "seconds": float(est["build_seconds"] + est["solve_seconds"]), "large": bool(est["large"]),
        "budgets": {"max_states": int(o.max_states), "memory_limit_gb": mem_gb,
                    "tagged_max_states": int(o.tagged_max_states)},
    }
    if model.grid.refine == "auto":
        out["grid_note"] = (f"automatic grid: bounds for the uniform grid 1/{model.grid.k} before refinement "
                            f"(the refined chain within grid.state_budget = {model.grid.state_budget:g} states)")
    over = []
    if out["states_bound"] > o.max_states:
        over.append(f"max_states: up to {out['states_bound']:,} states, above solver.max_states = {o.max_states:,}: "
                    "the build stops with an error once its exploration has seen more (raise solver.max_states to "
                    f"{out['states_bound']:,} to allow the bound)")
    if out["bytes"] > mem_gb * 1024.0**3:
        over.append(f"memory_limit_gb: the builder may need up to {out['bytes'] / 1e9:.3g} GB, above "
                    f"solver.memory_limit_gb = {mem_gb:g} (raise it to {math.ceil(out['bytes'] / 1024.0**3)} to "
                    "allow the bound)")
    steered = model.aqm.modified != "none" or model.aqm.flow_compare
    tagged = response != "none" and _no_tagged_chain(model) is None and (
        response == "tagged" or steered or model.aqm.policy in ("front", "random"))
    if tagged:
        # built on the chain without the class contents (components: level, avg, modulator and
        # a stateful AQM's); every level n holds at most product / (N + 1) of its states:
        # sum_n n * that = product * N / 2.  Under modified RED or the flow comparison on the
        # two-class chain itself: one state per position, at most N per state
        lumped = math.prod(int(v) for v in est["components"].values())
        t = int(out["states_bound"] * model.buffer if steered else
                min(lumped, out["states_bound"]) * model.buffer // 2)
        out["tagged_states_bound"] = t
        out["tagged_bytes_bound"] = float(_core.tagged_chain_bytes(t, 16.0))
        if t > o.tagged_max_states:
            under = "modified RED / the flow comparison" if steered else f"{model.aqm.policy} drop"
            over.append(f"tagged_max_states: the tagged-packet chain for response times under {under} "
                        f"may have up to {t:,} states, above solver.tagged_max_states = "
                        f"{o.tagged_max_states:,}: it is counted exactly after the build and refused before the "
                        "solve if it is above")
    out["over_budget"] = over
    out["large"] = out["large"] or bool(over)
    return out


def estimate_text(e: dict[str, Any]) -> str:
    """One paragraph for the command line: the bounds, the rough time, the budgets."""
    def dur(s: float) -> str:
        return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"

    b = e["budgets"]
    lines = [f"large model: up to {e['states_bound']:,} states ({e['structure']} chain"
             + ("" if e["bound_tight"] else ", a loose bound") + f"), builder memory up to {e['bytes'] / 1e9:.3g} GB, "
             f"roughly {dur(e['seconds'])} to build and solve on one core (an estimate)"]
    if "tagged_states_bound" in e:
        lines.append(f"tagged-packet chain for response times: up to {e['tagged_states_bound']:,} states "
                     f"({e['tagged_bytes_bound'] / 1e9:.3g} GB)")
    lines.append(f"budgets: solver.max_states = {b['max_states']:,}, solver.memory_limit_gb = {b['memory_limit_gb']:g}, "
                 f"solver.tagged_max_states = {b['tagged_max_states']:,}")
    lines.extend(f"over a budget: {x}" for x in e["over_budget"])
    return "\n".join(lines)
