"""Replace one marked section of a Markdown report, leaving the rest of the file alone.

A section sits between ``<!-- begin NAME -->`` and ``<!-- end NAME -->``; a
missing section is appended. Several benchmarks can share one report this way.
"""

from __future__ import annotations

from pathlib import Path

from simulator.io import atomic_write_text


def write_section(path: Path, name: str, body: str) -> None:
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block + "\n"
    atomic_write_text(path, text)
