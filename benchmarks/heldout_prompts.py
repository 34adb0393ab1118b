"""Prompts from domains no bundled draft was distilled on, as a new user would try them: documentation prose (the
opening of a standard-library module's docstring) and standard-library code (a function's signature and docstring
to complete). The drafts were distilled on chat openings and on third-party packages' sources from site-packages
(:mod:`flashspec_hf.data`), never on the standard library. Writes a JSONL file for ``flashspec-demo --prompts``
(send it with ``--raw-prompts``: raw text, as a completion).

    python -m benchmarks.heldout_prompts --num 3 --out heldout.jsonl
"""

import argparse
import ast
import importlib.util
import json
import textwrap
from pathlib import Path

MODULES = ["argparse", "json", "textwrap", "csv", "logging", "heapq", "fractions", "shutil", "tempfile", "zipfile"]
"""Standard-library modules read, in this order (their documentation opens with prose)."""


def docs_prose(num: int, chars: int = 400) -> list[str]:
    """The first ``chars`` characters (cut at a word) of the module docstrings of :data:`MODULES` that have that many."""
    out = []
    for name in MODULES:
        doc = ast.get_docstring(ast.parse(_source(name))) or ""
        text = " ".join(doc.split())
        if len(text) >= chars:
            out.append(text[:chars].rsplit(" ", 1)[0])
        if len(out) == num:
            break
    return out


def stdlib_functions(num: int, max_chars: int = 900) -> list[str]:
    """Module-level functions of :data:`MODULES` with a docstring of 80+ characters: signature and docstring,
    dedented, at most ``max_chars``; one per module."""
    out = []
    for name in MODULES:
        text = _source(name)
        lines = text.splitlines(keepends=True)
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and len(ast.get_docstring(node) or "") >= 80:
                prompt = textwrap.dedent("".join(lines[node.lineno - 1 : node.body[0].end_lineno]))
                if len(prompt) <= max_chars:
                    out.append(prompt)
                    break
        if len(out) == num:
            break
    return out


def _source(module: str) -> str:
    return Path(importlib.util.find_spec(module).origin).read_text()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num", type=int, default=3, help="prompts per domain")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rows = [{"prompt": t, "domain": "docs prose"} for t in docs_prose(args.num)]
    rows += [{"prompt": t, "domain": "stdlib code"} for t in stdlib_functions(args.num)]
    Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} prompts -> {args.out}")


if __name__ == "__main__":
    main()
