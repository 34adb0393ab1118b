#!/usr/bin/env bash
# Every device call sends the working tree (tracked and untracked-not-ignored files) and at most 64 MiB in all.
# The bundled drafts are 55 MB of it. For a GPU session that carries a GGUF in pieces, leave out the drafts it does
# not need (their files stay on disk):
#   bash scripts/slim_tree.sh on                    # all bundled drafts (Qwen's session: draft_release/README.md)
#   bash scripts/slim_tree.sh on qwen-coder-code    # SmolLM2 sessions: its drafts travel, Qwen's stays home
#   ...device calls...                              # pieces: python -m draft_release.carry_gguf (sizes them)
#   bash scripts/slim_tree.sh off                   # restore the index; run it before any commit
# `git status` shows the drafts left out as deleted (staged) while it is on: a commit then would delete them.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=.git/info/exclude
case ${1:-} in
on)
  shift
  folders=("$@")
  [ $# -gt 0 ] || folders=($(ls flashspec_hf/assistants))
  for name in "${folders[@]}"; do
    git rm -r -q --cached "flashspec_hf/assistants/$name" && echo "/flashspec_hf/assistants/$name/" >>"$exclude"
  done ;;
off) git reset -q HEAD flashspec_hf/assistants && sed -i '\#^/flashspec_hf/assistants/#d' "$exclude" ;;
*) echo "usage: bash scripts/slim_tree.sh on [draft ...] | off" >&2; exit 2 ;;
esac
git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 \
  | awk '{printf "the tree sends %.1f MiB\n", $1 / 1048576}'
