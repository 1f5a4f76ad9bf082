"""ns-3 RedQueueDisc attribute names in model files (docs/ns3.md): translated to aqmchain's keys.

An ``[aqm]`` table may give ns-3's attribute names (``MinTh = 5``, ``QW = 0.002``,
``LinkBandwidth = "1.5Mbps"``, ...). Any of them, or ``semantics = "ns3"``, selects ns-3's
rules; keys not given then take ns-3's defaults. Each quantity is given once: an ns-3 name
and the aqmchain key for the same thing together are an error naming both.
"""

from __future__ import annotations

import math
import re
from typing import Any

from . import _checks
from ._core import ModelError

#: ns-3's defaults (RedQueueDisc::GetTypeId, ns-3 3.44) of the attributes the chain models
NS3_DEFAULTS: dict[str, Any] = {
    "MinTh": 5.0, "MaxTh": 15.0, "QW": 0.002, "LInterm": 50.0, "Gentle": True, "Wait": True, "NLRED": False,
    "UseEcn": False, "UseHardDrop": True, "LinkBandwidth": "1.5Mbps", "LinkDelay": "20ms", "MeanPktSize": 500,
    "MaxSize": "25p",
}
#: ns-3 attributes refused, with the reason
NS3_REFUSED: dict[str, str] = {
    "ARED": "ns-3's adaptive RED (a wall-clock interval between p_max updates) is not modelled by the chain",
    "AdaptMaxP": "ns-3's adaptive RED (a wall-clock interval between p_max updates) is not modelled by the chain",
    "FengAdaptive": "Feng's adaptive RED is not modelled by the chain",
    "Ns1Compat": "ns-1 compatibility is not modelled",
    "IdlePktSize": "only read by ns-3 when m_cautious = 3, which RedQueueDisc never sets",
}
# ns-3 name -> the aqmchain key(s) it stands for (a pair given together is an error)
_SAME = {"MinTh": "min_th", "MaxTh": "max_th", "LInterm": "p_max", "QW": "w", "Wait": "spacing",
         "UseEcn": "ecn", "UseHardDrop": "hard_drop", "LinkBandwidth": "ptc", "MeanPktSize": "ptc",
         "Gentle": "drop", "NLRED": "drop"}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024.0, "Mi": 1024.0 ** 2, "Gi": 1024.0 ** 3}


def _err(key: str, bound: str, value: Any) -> ModelError:
    return _checks.model_error(key, bound, value)


def data_rate(key: str, value: Any) -> float:
    """ns-3's DataRate ("1.5Mbps", "10Gb/s", "100KiBps", a number of bits/s) in bits per second."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        bits = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(Ki|Mi|Gi|k|K|M|G)?(bps|b/s|Bps|B/s)\s*",
                         value if isinstance(value, str) else "")
        if not m:
            raise _err(f"aqm.{key}", 'a data rate such as "1.5Mbps", "10Gb/s" or a number of bits per second', value)
        bits = float(m.group(1)) * _PREFIX[m.group(2) or ""] * (8.0 if m.group(3).startswith("B") else 1.0)
    if not (math.isfinite(bits) and bits > 0):
        raise _err(f"aqm.{key}", "a positive data rate", value)
    return bits


def duration(key: str, value: Any) -> float:
    """ns-3's Time ("20ms", "1s", a number of seconds) in seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        t = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(min|ms|us|ns|s|h)\s*",
                         value if isinstance(value, str) else "")
        if not m:
            raise _err(f"aqm.{key}", 'a time such as "20ms" or a number of seconds', value)
        t = float(m.group(1)) * _TIME_UNITS[m.group(2)]
    if not (math.isfinite(t) and t >= 0):
        raise _err(f"aqm.{key}", "a time >= 0", value)
    return t


def _packets(key: str, value: Any) -> int:
    """ns-3's QueueSize in packets ("25p" or 25)."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+)\s*p\s*", value)
        if not m:
            raise _err(f"aqm.{key}", 'a queue size in packets such as "25p" (byte mode is not modelled)', value)
        value = int(m.group(1))
    return _checks.integer(f"aqm.{key}", value, 1, _checks.MAX_BUFFER - 1)


def translate(doc: dict) -> dict:
    """``doc`` with the ``[aqm]`` table's ns-3 names replaced by aqmchain keys and, under ns-3
    semantics, ns-3's defaults for the keys not given; ``MaxSize`` sets ``[model] buffer``
    (MaxSize + 1: ns-3 counts the waiting packets, the buffer also the one in service)."""
    aqm = doc.get("aqm")
    if not isinstance(aqm, dict):
        return doc
    names = [k for k in aqm if k in NS3_DEFAULTS or k in NS3_REFUSED]
    if not names and aqm.get("semantics") != "ns3":
        return doc
    for k in names:
        if k in NS3_REFUSED:
            e = ModelError(f"the ns-3 attribute 'aqm.{k}' is not supported: {NS3_REFUSED[k]}")
            e.param = f"aqm.{k}"
            raise e
    if aqm.get("semantics", "ns3") != "ns3":
        raise _err("aqm.semantics", '"ns3" (or absent) when ns-3 attribute names are given', aqm["semantics"])
    for k in names:
        same = _SAME.get(k)
        if same and same in aqm:
            e = ModelError(f"give 'aqm.{k}' (ns-3's name) or 'aqm.{same}', not both")
            e.param = f"aqm.{k}"
            raise e
    given = {k: aqm[k] for k in names}
    out = {k: v for k, v in aqm.items() if k not in given}
    out["semantics"] = "ns3"

    def get(k: str) -> Any:
        return given.get(k, NS3_DEFAULTS[k])

    def flag(k: str) -> bool:
        return _checks.boolean(f"aqm.{k}", get(k))

    model = dict(doc.get("model", {}))
    if "MaxSize" in given:
        if "buffer" in model:
            e = ModelError("give 'aqm.MaxSize' (ns-3's name: waiting packets) or 'model.buffer' (MaxSize + 1), "
                           "not both")
            e.param = "aqm.MaxSize"
            raise e
        model["buffer"] = _packets("MaxSize", given["MaxSize"]) + 1
    if "drop" not in out:
        kind = ("gentle_" if flag("Gentle") else "") + ("nlred" if flag("NLRED") else "red")
        out["drop"] = kind
        lo = _checks.real("aqm.MinTh", get("MinTh")) if "min_th" not in out else out["min_th"]
        hi = _checks.real("aqm.MaxTh", get("MaxTh")) if "max_th" not in out else out["max_th"]
        out.setdefault("min_th", lo)
        out.setdefault("max_th", hi)
        if "p_max" not in out:
            li = _checks.real("aqm.LInterm", get("LInterm"))
            if not li > 0:
                raise _err("aqm.LInterm", "> 0 (p_max = 1 / LInterm)", get("LInterm"))
            out["p_max"] = 1.0 / li
    elif any(k in given for k in ("Gentle", "NLRED", "MinTh", "MaxTh", "LInterm")):
        k = next(k for k in ("Gentle", "NLRED", "MinTh", "MaxTh", "LInterm") if k in given)
        e = ModelError(f"give 'aqm.{k}' (ns-3's name) or 'aqm.drop' with its own keys, not both")
        e.param = f"aqm.{k}"
        raise e
    if "spacing" not in out:
        out["spacing"] = "wait" if flag("Wait") else "count"
    if "UseEcn" in given and "ecn" not in out:
        out["ecn"] = 1.0 if flag("UseEcn") else 0.0
    if "UseHardDrop" in given:
        out["hard_drop"] = flag("UseHardDrop")
    if "LinkBandwidth" in given or "MeanPktSize" in given:
        size = _checks.real("aqm.MeanPktSize", get("MeanPktSize"))
        if not size > 0:
            raise _err("aqm.MeanPktSize", "> 0 bytes", get("MeanPktSize"))
        out["ptc"] = data_rate("LinkBandwidth", get("LinkBandwidth")) / (8.0 * size)
    if "LinkDelay" in given and not ("QW" in given and _checks.real("aqm.QW", given["QW"]) == -1.0):
        e = ModelError("'aqm.LinkDelay' is read only with QW = -1 (ns-3's automatic weight from the delay)")
        e.param = "aqm.LinkDelay"
        raise e
    if "QW" in given:
        qw = _checks.real("aqm.QW", given["QW"])
        if qw <= 0:
            # ns-3's automatic weights (RedQueueDisc::InitializeParams), from ptc in packets per second
            if "ptc" not in out:
                e = ModelError(f"'aqm.QW' = {qw:g} (ns-3's automatic weight) needs LinkBandwidth (or aqm.ptc): "
                               "the weight follows from the packets per second")
                e.param = "aqm.QW"
                raise e
            ptc = float(out["ptc"])
            if qw == 0.0:
                qw = 1.0 - math.exp(-1.0 / ptc)
            elif qw == -1.0:
                rtt = max(3.0 * (duration("LinkDelay", get("LinkDelay")) + 1.0 / ptc), 0.1)
                qw = 1.0 - math.exp(-1.0 / (10.0 * rtt * ptc))
            elif qw == -2.0:
                qw = 1.0 - math.exp(-10.0 / ptc)
            else:
                raise _err("aqm.QW", "in (0, 1], or 0, -1, -2 (ns-3's automatic weights)", given["QW"])
        out["w"] = qw
    return {**doc, "aqm": out, **({"model": model} if "model" in doc or model else {})}
