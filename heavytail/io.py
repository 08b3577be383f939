"""Atomic writes and JSON that round-trips inf and NaN.

A run killed mid-write must never leave a file that looks complete: every result is written to a
temporary file in the same folder, flushed to disk, then renamed over the target (``os.replace`` is
atomic on POSIX), so a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np


# A run folder is finished only when this marker exists; it is written last (heavytail.harness.train).
COMPLETE = "COMPLETE"


def is_complete(run_dir: str | Path) -> bool:
    return (Path(run_dir) / COMPLETE).exists()


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be read by others (a shared grid)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    import torch  # here, not at module level: the report runner imports this module and needs no torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


# Strict JSON has no inf or NaN. We write them as tagged strings so the file stays valid JSON for
# any reader, and `load_json` turns them back into floats.
_NONFINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def to_plain(value: Any, tag_nonfinite: bool = False) -> Any:
    """numpy and torch values (scalars, arrays, tensors) as plain Python ones, recursively through dicts,
    lists and tuples, paths as strings: what JSON and CSV writers take. ``tag_nonfinite`` also turns inf
    and NaN into the tagged strings of strict JSON (CSV cells keep them as floats: ``inf``, ``nan``)."""
    if isinstance(value, Mapping):  # dicts, and read-only records (heavytail.studies.run_record.RunRecord)
        return {str(k): to_plain(v, tag_nonfinite) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v, tag_nonfinite) for v in value]
    if hasattr(value, "detach") and hasattr(value, "tolist"):  # a torch tensor, without importing torch
        return to_plain(value.detach().cpu().tolist(), tag_nonfinite)
    if isinstance(value, np.ndarray):
        return to_plain(value.tolist(), tag_nonfinite)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        if tag_nonfinite and math.isnan(value):
            return "NaN"
        if tag_nonfinite and math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, str) and value in _NONFINITE:
        return _NONFINITE[value]
    return value


def dumps_json(obj: Any, **kwargs: Any) -> str:
    return json.dumps(to_plain(obj, tag_nonfinite=True), allow_nan=False, **kwargs)


def save_json(obj: Any, path: str | Path) -> Path:
    return atomic_write_text(path, dumps_json(obj, indent=1) + "\n")


def save_records_json(obj: Mapping[str, Any], key: str, path: str | Path) -> Path:
    """``obj`` as JSON with its list ``obj[key]`` written one compact record per line and the rest indented: a
    shipped map's runs hold long numeric series, which indentation puts one number per line (about 1.6x the bytes),
    and one line per run keeps a map's diff to the runs it gained."""
    head = dumps_json({k: v for k, v in obj.items() if k != key}, indent=1)
    records = ",\n".join(" " + dumps_json(r, separators=(",", ":")) for r in obj[key])
    body = f'{json.dumps(key)}: [\n{records}\n ]' if records else f"{json.dumps(key)}: []"
    text = head[:-2] + ",\n " + body + "\n}" if head != "{}" else "{\n " + body + "\n}"
    return atomic_write_text(path, text + "\n")


def load_json(path: str | Path) -> Any:
    return _decode(json.loads(Path(path).read_text()))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(_decode(json.loads(line)))
            except json.JSONDecodeError:
                break  # a line cut by a kill: everything after it is unreliable
    return rows


def replace_block(path: "str | os.PathLike", begin: str, end: str, text: str) -> None:
    """Rewrite what lies between the lines ``begin`` and ``end`` of a text file (the first such block; non-greedy, so
    an empty block never swallows the blocks after it) with ``text``, atomically. ValueError when the file has no such
    block; OSError when it cannot be read."""
    path = Path(path)
    pattern = re.compile(rf"({re.escape(begin)}\n)(?:.*?\n)??({re.escape(end)})", re.S)
    old = path.read_text()
    if not pattern.search(old):
        raise ValueError(f"{path} has no '{begin}' ... '{end}' block")
    atomic_write_text(path, pattern.sub(lambda m: m.group(1) + text.rstrip("\n") + "\n" + m.group(2), old, count=1))
