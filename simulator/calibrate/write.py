"""The calibrated topology YAML: the base document, fitted constants replaced and sourced.

Each fitted, identified constant's source becomes one line: ``fitted by clustersim calibrate
on N measurements from FILES on DATE, leave-one-out error E (base V)``; constants the data
did not identify keep their base value and source. The ``calibration`` block records the
status (``calibrated``), a note and the interval scale: 1 once step times were fitted, the
base's otherwise (microbenchmarks alone do not validate whole steps).
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from ..io import atomic_write_text
from .core import Calibration


def source_line(cal: Calibration, path: str) -> str | None:
    st = cal.stage_of(path)
    if st is None or not st.identified[path]:
        return None
    files = ", ".join(Path(f).name for f in cal.files_by_stage.get(st.stage, []))
    return (f"fitted by clustersim calibrate on {st.n} measurements from {files} on "
            f"{cal.date}, leave-one-out error {st.loo_text} ({st.stage} stage; base "
            f"{st.base[path]:.4g})")


def document(cal: Calibration, name: str) -> dict:
    doc = copy.deepcopy(cal.doc)
    fitted = sorted({p for s in cal.stages for p in s.values})
    for path in fitted:
        line = source_line(cal, path)
        if line is None:
            continue
        head, field = path.rsplit(".", 1)
        node = doc
        for part in head.split("."):
            node = node[int(part)] if isinstance(node, list) else node[part]
        node.setdefault("sources", {})[field] = line
    for path, src in cal.carried.items():
        _, i, field = path.split(".")
        doc["tiers"][int(i)].setdefault("sources", {})[field] = (
            f"carried by clustersim calibrate on {cal.date} from {src} (same per-GPU line "
            f"rate, the same NIC; no measurement spans this tier): its fitted / base ratio "
            f"applied to the base {_base(cal, path):.4g}")
    doc["name"] = name
    doc["description"] = f"{cal.base_name} calibrated on {cal.date}: " + \
        str(cal.base_doc.get("description", "")).strip()
    steps = any(s.stage == "steps" and any(s.identified.values()) for s in cal.stages)
    base_cal = cal.base_doc.get("calibration") or {}
    scale = 1.0 if steps else float(base_cal.get("interval_scale", 1.0))
    doc["calibration"] = {
        "status": "calibrated",
        "interval_scale": scale,
        "note": f"calibrated from {cal.base_name} by clustersim calibrate on {cal.date}"
                + ("" if steps else "; no step time was fitted"),
        "sources": {
            "status": "clustersim calibrate on " + ", ".join(
                Path(f).name for f in cal.measurements.files),
            "note": "printed by clustersim run only for uncalibrated topologies",
            "interval_scale": "1: step times fitted" if steps else
            f"kept from {cal.base_name}: no step time among the measurements"},
    }
    return doc


def _base(cal: Calibration, path: str) -> float:
    from .problems import value

    return value(cal.base_doc, path)


def write(cal: Calibration, out: str | Path) -> Path:
    out = Path(out)
    doc = document(cal, out.stem)
    head = (f"# {out.name}: {cal.base_name} calibrated by `clustersim calibrate` on {cal.date}\n"
            "# from: " + ", ".join(Path(f).name for f in cal.measurements.files) + "\n")
    text = head + yaml.safe_dump(doc, sort_keys=False, width=10_000, allow_unicode=True)
    atomic_write_text(out, text)
    return out
