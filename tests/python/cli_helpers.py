"""Run the command line in-process and capture what it prints."""

import contextlib
import io
import sys

from aqmchain import cli

TRACEBACK = "Traceback (most recent call last)"


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``aqmchain ARGV`` (argparse's SystemExit included)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def toml_value(v) -> str:
    """A Python value as a TOML value (enough for the documents the tests write)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        old = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)  # integers of thousands of digits are part of the test
        try:
            return str(v)
        finally:
            sys.set_int_max_str_digits(old)
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "_-" for c in k) and k.isascii() else toml_value(k)


def to_toml(doc: dict) -> str:
    lines = []
    for sec, table in doc.items():
        if not isinstance(table, dict):
            lines.insert(0, f"{toml_key(sec)} = {toml_value(table)}")
            continue
        lines.append(f"[{toml_key(sec)}]")
        lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
