"""scripts/install.sh says what it is doing: a line before every step, run here with python and pip replaced by a
stub that records each call instead of installing anything."""

import os
import shutil
import subprocess
from pathlib import Path

STUB = """#!/usr/bin/env bash
echo "RUN $(basename "$0") $*" >> "$LOG"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && echo "export PATH=\\"$PWD/$3/bin:\\$PATH\\"" > "$3/bin/activate"
fi
[ "$1" != "-c" ]  # "import torch" fails, so the script installs torch
"""


def test_install_announces_every_step(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(Path(__file__).parents[1] / "scripts" / "install.sh", root / "scripts")
    (tmp_path / "bin").mkdir()
    stub = tmp_path / "bin" / "python3"
    stub.write_text(STUB)
    stub.chmod(0o755)
    log = tmp_path / "log"
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "LOG": str(log)}
    with log.open("a") as out:  # the script's lines and the stub's records, in the order they happened
        subprocess.run(["bash", str(root / "scripts" / "install.sh")], stdout=out, env=env, check=True, timeout=60)
    lines = log.read_text().splitlines()
    steps = [i for i, line in enumerate(lines) if line.startswith("RUN") and "import torch" not in line]
    assert [lines[i].split()[1:5] for i in steps] == [
        ["python3", "-m", "venv", ".venv"], ["python", "-m", "pip", "install"], ["python", "-m", "pip", "install"],
        ["python", "-m", "pip", "install"], ["python", "-m", "pip", "install"],
    ]
    assert all(lines[i - 1].startswith("[install] ") for i in steps), lines  # each step announced just before
    assert "torch==2.13.0" in lines[steps[2] - 1] and lines[-1].startswith("[install] done: ")
