"""MkDocs hooks of the aqmchain documentation site (mkdocs.yml: ``hooks:``).

1. Every notebook ``docs/notebooks/*.ipynb`` becomes a page ``notebooks/<name>.md`` with
   its EXECUTED outputs (tools/nbexec.py: a real kernel in the notebook's folder; the
   copies `make test` executed are reused from build/notebooks/ when the notebook and the
   installed package are unchanged, else the notebook runs now): markdown cells as they
   are, code cells as Python blocks, printed text, tables (HTML) and plots (PNG); a cell
   that fails fails the build.  The .ipynb itself (without outputs) is published beside it
   for download.  Notebooks not named in the nav are appended to its "Tutorials" section
   in file-name order, so a new notebook needs no nav line.
2. ``reference/cli-help.md`` is generated from the command line's own argparse parser
   (every command's ``--help``), so it cannot drift from the code.
3. ``reference/api.md`` is generated from ``aqmchain.__all__``: the names of API_SECTIONS in
   their sections, and any other public name in a last section, so every public name is on
   the page (mkdocstrings renders each from its docstring).
4. The docstrings' Sphinx roles (:class:`X`, :func:`~a.b`) are shown as code, without the role.
5. The key tables of the drop functions and sources in docs/model-file.md, the ``[solver]`` keys
   there and the method table of docs/solvers.md are generated from the core's tables
   (``<!-- registry: drop -->``, ``<!-- registry: source -->``, ``<!-- registry: solver -->``:
   the table of solver options, ``<!-- registry: methods -->``: the stationary methods), so a
   new kind, option or method is documented by its table entry.
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
from pathlib import Path

TUTORIALS = "Tutorials"
ROOT = Path(__file__).resolve().parent


def _nbexec():
    """tools/nbexec.py (MkDocs restores sys.path after loading the hooks, so it is added here)."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import nbexec

    return nbexec


def _title(nb: dict, fallback: str) -> str:
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def _notebooks(config) -> list[Path]:
    return sorted((Path(config["docs_dir"]) / "notebooks").glob("*.ipynb"))


def _in_nav(nav, uri: str) -> bool:
    if isinstance(nav, str):
        return nav == uri
    if isinstance(nav, dict):
        return any(_in_nav(v, uri) for v in nav.values())
    if isinstance(nav, list):
        return any(_in_nav(v, uri) for v in nav)
    return False


def on_config(config):
    nav = config.get("nav")
    if not nav:
        return config
    section = next((item for item in nav if isinstance(item, dict) and TUTORIALS in item), None)
    if section is None:
        section = {TUTORIALS: []}
        nav.insert(1, section)
    for path in _notebooks(config):
        uri = f"notebooks/{path.stem}.md"
        if not _in_nav(nav, uri):
            nb = json.loads(path.read_text(encoding="utf-8"))
            section[TUTORIALS].append({_title(nb, path.stem): uri})
    return config


def _fence(text: str, lang: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}\n"


def _output_markdown(o: dict) -> str | None:
    kind = o.get("output_type")
    if kind == "stream":
        return _fence("".join(o.get("text", "")), "text") if o.get("name") == "stdout" else None
    if kind == "error":
        raise RuntimeError(f"notebook output is an error: {o.get('ename')}: {o.get('evalue')}")
    if kind not in ("execute_result", "display_data"):
        return None
    data = o.get("data", {})
    if "image/png" in data:
        return f"![output](data:image/png;base64,{''.join(data['image/png']).strip()})\n"
    if "text/html" in data:  # a pandas table
        html = "".join(data["text/html"]).strip()
        return f'<div class="nb-output">\n{html}\n</div>\n'
    if "text/plain" in data:
        return _fence("".join(data["text/plain"]), "text")
    return None


def notebook_markdown(path: Path, nb: dict | None = None) -> str:
    """The page of a notebook: ``nb`` is the executed notebook (read from ``path`` if None)."""
    nb = nb if nb is not None else json.loads(path.read_text(encoding="utf-8"))
    out = [f"!!! note \"Notebook\"\n    This page is the notebook [`{path.name}`]({path.name}) with the outputs "
           f"of a run when the site was built; `make notebooks` opens it in JupyterLab, and `make test` "
           f"executes it.\n"]
    for cell in nb.get("cells", []):
        src = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            out.append(src.rstrip() + "\n")
        elif cell.get("cell_type") == "code" and src.strip():
            shown = "\n".join(line for line in src.splitlines() if not line.startswith("%matplotlib"))
            if shown.strip():
                out.append(_fence(shown, "python"))
            out += [md for md in map(_output_markdown, cell.get("outputs", [])) if md]
    return "\n".join(out)


def cli_markdown() -> str:
    import argparse
    import os

    from aqmchain.cli import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: fix the width of the page

    parser = build_parser()
    parser.prog = "aqmchain"
    lines = ["# Command-line help", "",
             "Generated from the command line's own parser when the site is built: the text of "
             "`aqmchain COMMAND --help` for every command.", ""]
    lines += ["## aqmchain", "", _fence(parser.format_help(), "text")]
    for action in parser._actions:  # the sub-command table
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                lines += [f"## aqmchain {name}", "", _fence(sub.format_help(), "text")]
    return "\n".join(lines)


API_INTRO = """\
# Python API

Generated from the docstrings when the site is built: every name in `aqmchain.__all__`, by
topic. Conventions (row vectors, π P = π, CSR rows = from-state) are in
[Conventions](../conventions.md). The model objects (`Model`, `Source`, `Service`, `Aqm`,
`DropFunction`, `GridSpec`, `TrafficClass`) are described key by key in
[Model files](../model-file.md): a model file's `[section] key` is the Python constructor's
keyword of the same name.
"""

#: (title, introduction, names) of the API page, in order.  A public name not listed here goes
#: to the last section ("Other names"); a listed name that is not public fails the build.
API_SECTIONS = [
    ("Models", "The model objects are compiled (pybind11); their constructors take the keys of the model "
     "file's tables as keyword arguments.",
     ["Model", "Source", "Service", "Aqm", "DropFunction", "GridSpec", "TrafficClass", "Phase", "Scenario",
      "load_model", "load_config", "model_from_dict", "model_to_dict", "replace", "apply_overrides",
      "solver_options", "ssmp_q_for_mean", "redwm_s_grid"]),
    ("Errors", "Bad input raises `ModelError` (a `ValueError`) whose message names the parameter, the bound "
     "and the value; a state space over the memory budget raises `StateSpaceTooLarge` before anything is "
     "allocated.",
     ["ModelError", "StateSpaceTooLarge", "OptionError", "ReducibleChainError", "SolverError",
      "NonConvergenceError", "CountTruncationError"]),
    ("Chain size and memory", "",
     ["model_info", "solve_estimate", "estimate_chain", "count_reachable", "stateful_info"]),
    ("Stationary analysis", "",
     ["solve_stationary", "StationaryResult", "SolverInfo", "ErrorEstimate", "DirectSolver", "WarmStart", "build_chain",
      "Chain", "refine_grid", "transition_matrix", "state_labels", "stateful_observables", "ClassMetrics",
      "CLASS_METRICS", "set_num_threads", "num_threads"]),
    ("Response times under the drop policies", "", ["compare_policies", "PolicyComparison"]),
    ("Simulation", "",
     ["simulate", "SimulationResult", "compare", "Comparison", "simulate_scenario", "EnsembleOptions",
      "EnsembleResult", "simulate_passage", "PassageSimulation", "PASSAGE_REWARDS"]),
    ("Transient analysis", "",
     ["solve_transient", "TransientResult", "TransientInfo", "time_grid", "make_scenario", "load_scenario",
      "TRANSIENT_METHODS", "TRANSIENT_METRICS"]),
    ("First passage", "docs/passage.md: time to overflow, drain time, P(reach a level within t), rewards up to T "
     "or t, on the chain (the simulator's hitting times are `simulate_passage` above).",
     ["passage", "PassageResult", "PassageInfo", "PASSAGE_METHODS", "REWARD_SUMS"]),
    ("Sweeps and exports", "", ["sweep", "SweepResult", "export_matrix", "export_prism", "export_stationary",
                                "stationary_table"]),
    ("Sensitivities", "", ["sensitivities", "Sensitivities", "sensitivity_parameters"]),
    ("Coefficient search", "", ["optimize", "OptimizeResult", "OPTIMIZE_METHODS", "GRADIENT_METHODS"]),
    ("Self-similarity and the Hurst parameter", "",
     ["estimate_hurst", "HurstEstimate", "HURST_ESTIMATORS", "hurst", "HurstReport", "hurst_from_trace",
      "arrival_trace", "aggregated_variance", "rescaled_range", "expected_rs"]),
    ("Fitting sources to traces", "docs/trace-fitting.md: from a packet trace to a `[source]` table, and the "
     "trace replayed through a model's queue.",
     ["fit_source", "FitResult", "FIT_KINDS", "read_trace", "simulate_trace"]),
    ("Plots", "", ["plots"]),
]


def api_markdown() -> str:
    import aqmchain

    public = list(aqmchain.__all__)
    listed = [n for _, _, names in API_SECTIONS for n in names]
    unknown = sorted(set(listed) - set(public))
    if unknown or len(listed) != len(set(listed)):
        raise ValueError(f"API_SECTIONS: not in aqmchain.__all__ {unknown}, or listed twice")
    sections = API_SECTIONS + [("Other names", "", [n for n in public if n not in listed])]
    lines = [API_INTRO]
    for title, intro, names in sections:
        if names:
            lines += [f"## {title}", ""] + ([intro, ""] if intro else [])
            lines += [line for n in names for line in _api_entry(n, getattr(aqmchain, n))]
    return "\n".join(lines)


def _api_entry(name: str, obj) -> list[str]:
    """The page's lines for one public name: a mkdocstrings directive, except for the exceptions
    made by the compiled module (mkdocstrings cannot follow their re-export), written out here."""
    import inspect

    lazy = name not in vars(sys.modules["aqmchain"])  # made on first use (the package's __getattr__)
    if inspect.isclass(obj) and (lazy or (issubclass(obj, BaseException) and obj.__module__ == "aqmchain")):
        # the first base that is not a private helper: ValueError, ModelError, pandas.DataFrame
        base = next(b for b in obj.__mro__[1:] if not b.__name__.startswith("_"))
        bases = (base.__name__ if base.__module__ in ("builtins", "aqmchain")
                 else f"{base.__module__.split('.')[0]}.{base.__name__}")
        out = [f"### aqmchain.{name}", "", f"`class {name}({bases})`", "", inspect.cleandoc(obj.__doc__ or ""), ""]
        own = [k for k in obj.__mro__ if k.__module__.startswith("aqmchain")]
        for attr in sorted({a for k in own for a in vars(k) if not a.startswith("_")}):
            member = getattr(obj, attr)
            if callable(member) and member.__doc__:
                try:
                    sig = str(inspect.signature(member))
                except (TypeError, ValueError):
                    sig = "(...)"
                sig = re.sub(r"^\(self,? ?", "(", sig)
                out += [f"#### {name}.{attr}", "", f"`{attr}{sig}`", "", inspect.cleandoc(member.__doc__), ""]
        return out
    return [f"::: aqmchain.{name}", ""]


def on_files(files, config):
    from mkdocs.structure.files import File

    paths = _notebooks(config)
    runs = _nbexec().executed(paths)
    for path in paths:
        uri = posixpath.join("notebooks", f"{path.stem}.md")
        files.append(File.generated(config, uri, content=notebook_markdown(path, runs[path])))
    files.append(File.generated(config, "reference/cli-help.md", content=cli_markdown()))
    files.append(File.generated(config, "reference/api.md", content=api_markdown()))
    return files


_REGISTRY = re.compile(r"<!-- registry: (drop|source|solver|methods) -->")


def _keys_cell(params: list[dict]) -> str:
    if not params:
        return "(none)"
    parts = []
    for p in params:
        opt = "" if p["required"] else "optional "
        parts.append(f"{opt}`{p['name']}` ({p['type']}; {p['bound']}): {p['doc']}")
    return "<br>".join(parts)


def registry_markdown(kind: str) -> str:
    """The table of one registry (``drop``, ``source`` or ``solver``: the keys; ``methods``: the
    stationary methods' guide), from the core's table."""
    from aqmchain import _core

    if kind == "solver":
        return solver_markdown()
    if kind == "methods":
        rows = ["| method | use it when | cost and limits |", "|---|---|---|"]
        for m in _core.stationary_method_guide():
            default = " (default)" if m["name"] == "auto" else ""
            rows.append(f"| `{m['name']}`{default} | {m['use_when']} | {m['cost']} |")
    elif kind == "drop":
        rows = ["| `drop` | keys (type; range): meaning | p(avg) | with |", "|---|---|---|---|"]
        for k in _core.DropFunction.kinds:
            with_ = ", ".join(w for w, on in (("adaptive, dynamic_max_th", k["scales_p_max"]),
                                             ("modified, flow_compare", k["thresholds"])) if on)
            rows.append(f"| `{k['name']}` | {_keys_cell(k['params'])} | {k['doc']} | {with_} |")
    else:
        rows = ["| `kind` | keys (type; range): meaning | meaning |", "|---|---|---|"]
        for k in _core.Source.kinds:
            time = " (continuous time)" if k["continuous"] else ""
            rows.append(f"| `\"{k['name']}\"`{time} | {_keys_cell(k['params'])} | {k['doc']} |")
    return "\n".join(rows) + "\n"


def solver_markdown() -> str:
    """The ``[solver]`` key table from the core's table of solver options (a model file takes
    every option but the starting vector ``x0``) and the builder's ``memory_limit_gb``."""
    from aqmchain import _checks, _core

    rows = ["| key | default | type; range | meaning |", "|---|---|---|---|"]
    methods = _core.stationary_method_descriptions()
    for o in _core.StationaryOptions.options():
        if o["name"] == "x0":
            continue
        d = o["default"]
        default = f'`"{d}"`' if isinstance(d, str) else f"{d:g}" if isinstance(d, float) else str(d)
        if o["type"] == "choice":
            bound = "one of " + ", ".join(f"`{c}`" for c in o["choices"])
        else:
            bound = o["bound"]
        doc = o["doc"]
        if o["name"] == "method":
            doc += ": " + "; ".join(f"`{n}`: {text}" for n, text in methods.items())
        doc = doc.replace("|", "\\|")  # a norm's bars inside a table cell
        rows.append(f"| `{o['name']}` | {default} | {o['type'].replace('_', ' ')}; {bound} | {doc} |")
    rows.append(f"| `memory_limit_gb` | 8 | real; in (0, {_checks.MAX_MEMORY_GB:g}] | refuse to build a chain whose "
                "estimated footprint is larger (GB) |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown, page, config, files):
    return _REGISTRY.sub(lambda m: registry_markdown(m.group(1)), markdown)


_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):(<code>)~?")


def on_page_content(html, page, config, files):
    return _ROLE.sub(r"\1", html)
