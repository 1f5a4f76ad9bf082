import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import aqmchain  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: The published figures the reference tests compare against (shipped in the repository)
REFERENCE_DIR = ROOT / "benchmarks" / "reference"
REFERENCE_TABLES = REFERENCE_DIR / "aqm_router_tables.json"


def reference_rows(source: str | None = None) -> list[dict]:
    """The 24 rows of Tables I-III of "Implementation of modified AQM mechanisms in IP routers"
    (those of one source, "GEO" or "SELF", when given).  A missing file is an error, never a skip."""
    rows = json.loads(REFERENCE_TABLES.read_text(encoding="utf-8"))["rows"]
    return [r for r in rows if source in (None, r["source"])]


#: A small valid model document (RED on a Bernoulli source) that error tests mutate.
BASE_DOC = {
    "model": {"buffer": 20},
    "source": {"kind": "bernoulli", "alpha": 0.5},
    "service": {"mu": 0.5},
    "aqm": {"drop": "red", "min_th": 5, "max_th": 15, "p_max": 0.1, "w": 0.1},
    "grid": {"k": 2, "refine": "none"},
}


def spec_to_doc(spec: dict) -> dict:
    """The oracle's flat spec as a SPEC 8 document (goes through the TOML loader)."""
    aqm = {k: v for k, v in spec.items() if k in ("drop", "min_th", "max_th", "p_max", "k_l", "k_h", "gamma",
                                                   "q_max", "seg", "coeffs", "points", "w", "update", "ecn",
                                                   "policy", "spacing", "count_max", "adaptive", "interval",
                                                   "target_lo", "target_hi", "increment", "decrease",
                                                   "p_max_high", "p_max_low", "clock", "p_max_step",
                                                   "max_clock_states", "weight", "autored_p",
                                                   "dynamic_max_th", "max_th_growth")}
    return {"model": {"buffer": spec["buffer"]}, "source": dict(spec["source"]),
            "service": {"mu": spec["mu"]}, "aqm": aqm,
            "grid": {"k": spec.get("k", 4), "mapping": spec["mapping"], "refine": "none"}}


def model_of(spec: dict) -> "aqmchain.Model":
    return aqmchain.model_from_dict(spec_to_doc(spec))[0]


@pytest.fixture
def root() -> Path:
    return ROOT
