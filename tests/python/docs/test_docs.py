"""The user documentation stands alone and is complete: every model-file key the loader
accepts is in docs/model-file.md, and no page, notebook, --help text or public docstring
cites internal documents ("SPEC", "seed 001", "the issue") instead of the papers by title
and the project's own pages.  (`make docs` builds the site with warnings as errors.)"""

import argparse
import inspect
import re
from pathlib import Path

import pytest

import aqmchain
from aqmchain import cli, modelfile

ROOT = Path(__file__).resolve().parents[3]
FORBIDDEN = re.compile(r"\bSPEC\b|\bseeds? 0\d\d\b|\bseed 0\d\d|\bthe issue\b|\bissue's\b|\bseeds'")

# keys read by name in modelfile.py (the others come from the tables of defaults below)
FIXED_KEYS = {
    "model": {"buffer", "time"},
    "source": {"kind", "alpha", "n", "q", "a", "mean", "matrix", "arrival", "rate", "generator", "rates"},
    "service": {"kind", "mu"},
    "aqm": {"drop", "filter", "update", "policy", "ecn"},
    "grid": {"k", "points", "mapping", "refine", "s_k", "s_points"},
}


def model_file_keys() -> dict[str, set[str]]:
    keys = {k: set(v) for k, v in FIXED_KEYS.items()}
    for drop_keys in modelfile._DROP_KEYS.values():
        keys["aqm"] |= set(drop_keys)
    for filter_keys in modelfile._FILTER_KEYS.values():
        keys["aqm"] |= filter_keys
    keys["aqm"] |= set(modelfile._STATEFUL_DEFAULTS)
    keys["grid"] |= set(modelfile._REFINE_DEFAULTS)
    keys["solver"] = set(modelfile._SOLVER_KEYS)
    return keys


def test_every_model_file_key_is_documented():
    text = (ROOT / "docs" / "model-file.md").read_text()
    missing = sorted(f"{sec}.{k}" for sec, ks in model_file_keys().items() for k in ks if f"`{k}`" not in text)
    assert not missing, f"keys accepted by the loader but not in docs/model-file.md: {missing}"


def test_the_key_list_matches_the_loader():
    """The fixed key lists above are the loader's: a document using all of them for one
    section is accepted key by key (an unknown key would be refused by name)."""
    doc = {"model": {"buffer": 20, "time": "discrete"}, "source": {"kind": "bernoulli", "alpha": 0.5},
           "service": {"kind": "geometric", "mu": 0.5},
           "aqm": {"drop": "red", "filter": "ewma", "update": "per_slot", "policy": "tail", "ecn": 0.0,
                   "min_th": 5, "max_th": 15, "p_max": 0.1, "w": 0.1},
           "grid": {"k": 2, "mapping": "split", "refine": "none"}}
    aqmchain.model_from_dict(doc)
    with pytest.raises(aqmchain.ModelError, match="grid.bogus"):
        aqmchain.model_from_dict({**doc, "grid": {"k": 2, "bogus": 1}})


def user_texts() -> list[tuple[str, str]]:
    out = [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "docs").rglob("*.md"))]
    out += [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "docs" / "notebooks").glob("*.ipynb"))]
    out.append(("README.md", (ROOT / "README.md").read_text()))
    out += [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
            for p in sorted((ROOT / "benchmarks" / "reference").glob("*")) if p.suffix in (".md", ".json")]
    parser = cli.build_parser()
    out.append(("aqmchain --help", parser.format_help()))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out += [(f"aqmchain {name} --help", sub.format_help()) for name, sub in action.choices.items()]
    for name in aqmchain.__all__:
        obj = getattr(aqmchain, name)
        out.append((f"aqmchain.{name}.__doc__", inspect.getdoc(obj) or ""))
        for attr, member in vars(obj).items() if inspect.isclass(obj) else ():
            if not attr.startswith("_"):
                out.append((f"aqmchain.{name}.{attr}.__doc__", inspect.getdoc(member) or ""))
    return out


def test_user_documentation_stands_alone():
    hits = [f"{where}: ...{text[max(0, m.start() - 40):m.end() + 40]!r}..."
            for where, text in user_texts() for m in FORBIDDEN.finditer(text)]
    assert not hits, "\n".join(hits)
