"""Cut a preset's GGUF into pieces that each fit one device call, for a GPU machine that reaches no registry.

    python -m draft_release.carry_gguf qwen2.5-coder-1.5b [--reserve-mib 8]

A device call carries at most 64 MiB, the working tree included (tracked and untracked-not-ignored files and
``shared/``), so each piece is ``64 MiB - tree - reserve`` (``--reserve-mib``: room kept in every call, 1 MiB by
default). The preset's parts are joined (streaming, checked against its size and SHA-256, so a bad part stops it
before any call; or ``$<gguf_dir_env>``'s GGUF is checked) and cut into ``.carry/gguf/NN`` (ignored by git; 2.2 GB
of disk while it runs). Prints the sequence of calls: call ``i`` carries ``.carry/gguf/NN`` and
runs ``mkdir -p /tmp/gguf && cp .carry/gguf/NN /tmp/gguf/``; the last call also joins them
(``draft_release/gpu_qwen_env.sh``). Between calls a machine stays warm for 30 s only: make them back to back.
"""

import argparse
import os
import subprocess
from pathlib import Path

from flashspec_hf.models import PRESETS
from flashspec_hf.weight_packages import check_file, join_parts, locate

MIB = 1 << 20
CALL_LIMIT = 64 * MIB
OUT = Path(".carry/gguf")


def tree_bytes() -> int:
    """Bytes of what every device call sends: tracked and untracked-not-ignored files, plus ``shared/``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    files = {Path(os.fsdecode(f)) for f in listed if f} | set(Path("shared").rglob("*"))
    return sum(f.stat().st_size for f in files if f.is_file())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("preset", choices=sorted(PRESETS))
    p.add_argument("--reserve-mib", type=float, default=1.0, help="room kept in every call (default 1 MiB)")
    args = p.parse_args()
    preset = PRESETS[args.preset]
    piece = int(CALL_LIMIT - tree_bytes() - args.reserve_mib * MIB)
    if piece < MIB:
        raise SystemExit(f"the working tree leaves {piece / MIB:.1f} MiB per call: nothing can travel")
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    if preset.gguf_dir_env in os.environ:
        gguf = check_file(Path(os.environ[preset.gguf_dir_env], preset.gguf_file), preset.size, preset.sha256_prefix)
    else:  # joined once here (checked), then cut
        gguf = join_parts(locate(preset.parts, f"the {preset.model} weights"), OUT / preset.gguf_file, preset.size,
                          preset.sha256_prefix)
    names = []
    with gguf.open("rb") as f:
        while block := f.read(piece):
            names.append(f"{len(names):02d}")
            (OUT / names[-1]).write_bytes(block)
    if gguf.parent == OUT:
        gguf.unlink()
    print(f"{len(names)} pieces of at most {piece / MIB:.1f} MiB in {OUT}/ ({preset.gguf_file}, {preset.size:,} "
          "bytes, size and SHA-256 checked); one device call each, back to back:")
    for name in names:
        print(f"  carry [\"{OUT}/{name}\"]: mkdir -p /tmp/gguf && cp {OUT}/{name} /tmp/gguf/")
    print(f"then: cat /tmp/gguf/?? > /tmp/gguf/{preset.gguf_file} and {preset.gguf_dir_env}=/tmp/gguf "
          "(draft_release/gpu_qwen_env.sh does both and checks the size and hash again)")


if __name__ == "__main__":
    main()
