"""Reading the files users hand qrbench (shape files, axes files, results files): a file that
cannot be read or parsed is an error of the caller's type that names the file and what is wrong.
A name ending in ``.gz`` is read through gzip (committed results are kept compressed: raw samples
compress about tenfold)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

__all__ = ["is_gzip", "read_json", "read_yaml"]


def is_gzip(path: Path) -> bool:
    """Whether qrbench reads and writes ``path`` through gzip (its name ends in ``.gz``)."""
    return Path(path).name.endswith(".gz")


def _read(path: Path, error: type[Exception], parse: Callable[[str], Any], parse_error: type[Exception],
          expected: str) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if is_gzip(path):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise error(f"{path}: not valid gzip: {exc}") from exc
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid UTF-8 text: {exc}") from exc
    try:
        return parse(text)
    except parse_error as exc:
        raise error(f"{path}: not valid {expected}: {exc}") from exc


def read_yaml(path: Path, error: type[Exception]) -> Any:
    """The YAML (or JSON, a subset of it) document in ``path``; ``error`` when it cannot be had."""
    return _read(path, error, yaml.safe_load, yaml.YAMLError, "YAML")


def read_json(path: Path, error: type[Exception]) -> Any:
    """The JSON document in ``path``; ``error`` when it cannot be had."""
    return _read(path, error, json.loads, json.JSONDecodeError, "JSON")
