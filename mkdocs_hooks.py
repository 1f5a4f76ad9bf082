"""MkDocs hooks of the aqmchain documentation site (mkdocs.yml: ``hooks:``).

1. Every notebook ``docs/notebooks/*.ipynb`` becomes a page ``notebooks/<name>.md``
   rendered WITHOUT executing it (markdown cells as they are, code cells as Python
   blocks, stored text and PNG outputs if any); the .ipynb itself is published beside
   it for download.  Notebooks not named in the nav are appended to its "Tutorials"
   section in file-name order, so a new notebook needs no nav line.
2. ``reference/cli-help.md`` is generated from the command line's own argparse parser
   (every command's ``--help``), so it cannot drift from the code.
3. The docstrings' Sphinx roles (:class:`X`, :func:`~a.b`) are shown as code, without the role.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

TUTORIALS = "Tutorials"


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


def notebook_markdown(path: Path) -> str:
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = [f"!!! note \"Notebook\"\n    This page is the notebook [`{path.name}`]({path.name}) shown without "
           f"running it; `make notebooks` opens it in JupyterLab, and `make test` executes it.\n"]
    for cell in nb.get("cells", []):
        src = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            out.append(src.rstrip() + "\n")
        elif cell.get("cell_type") == "code" and src.strip():
            out.append(_fence(src, "python"))
            for o in cell.get("outputs", []):
                if o.get("output_type") == "stream":
                    out.append(_fence("".join(o.get("text", "")), "text"))
                elif o.get("output_type") in ("execute_result", "display_data"):
                    data = o.get("data", {})
                    if "image/png" in data:
                        out.append(f"![output](data:image/png;base64,{''.join(data['image/png']).strip()})\n")
                    elif "text/plain" in data:
                        out.append(_fence("".join(data["text/plain"]), "text"))
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


def on_files(files, config):
    for path in _notebooks(config):
        uri = posixpath.join("notebooks", f"{path.stem}.md")
        files.append(File.generated(config, uri, content=notebook_markdown(path)))
    files.append(File.generated(config, "reference/cli-help.md", content=cli_markdown()))
    return files


_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):(<code>)~?")


def on_page_content(html, page, config, files):
    return _ROLE.sub(r"\1", html)
