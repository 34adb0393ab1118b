#!/usr/bin/env bash
# Every device call sends the working tree (tracked and untracked-not-ignored files) and at most 64 MiB in all.
# The bundled drafts are 55 MB of it, which leaves about 7 MiB per call for a GGUF in pieces. For a GPU session that
# needs no bundled draft (Qwen's GGUF transfer and distillation, draft_release/gpu_qwen_session.sh):
#   bash scripts/slim_tree.sh on    # untrack flashspec_hf/assistants in the index (files stay on disk) and ignore it
#   ...device calls...              # then cut pieces with python -m draft_release.carry_gguf (about 60 MiB each)
#   bash scripts/slim_tree.sh off   # restore the index; run it before any commit
# `git status` shows the assistants as deleted (staged) while it is on: a commit then would delete them.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=.git/info/exclude
case ${1:-} in
on) git rm -r -q --cached flashspec_hf/assistants && echo /flashspec_hf/assistants/ >>"$exclude" ;;
off) git reset -q HEAD flashspec_hf/assistants && sed -i '\#^/flashspec_hf/assistants/$#d' "$exclude" ;;
*) echo "usage: bash scripts/slim_tree.sh on|off" >&2; exit 2 ;;
esac
git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 \
  | awk '{printf "the tree sends %.1f MiB\n", $1 / 1048576}'
