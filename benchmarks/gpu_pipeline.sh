#!/usr/bin/env bash
# One warm H200 session's GPU work in one background pipeline, so the GPU never waits for the next device call.
# Started by the first call (draft_release/gpu_qwen_session.sh piece 00 with BG=benchmarks/gpu_pipeline.sh), which
# runs it from a copy of the tree in /tmp/gstree; later calls carry the GGUF pieces and `stash` what the real targets
# need (wheels, corpora, the bundled drafts that scripts/slim_tree.sh kept out of the tree) to /tmp/carry and
# /tmp/drafts, and only poll. Writes to /tmp/gs, in the order of what the open issues still lack (the device time
# may end first):
#   1. the verification-kernel benchmark on the speed issue's shapes (KERNEL_ARGS), before the host gets busy
#   2. tests/test_gpu.py, its slowest tests timed (its own timing does not matter: it overlaps the GGUF transfer
#      and conversion; TESTS_K: a -k expression picking some of them, when the device time is short; TESTS_SHARDS:
#      that many pytest processes at once, mostly compiling on the host's 16 cores: test_gpu_<i>.log)
#   3. Qwen2.5-Coder-1.5B (once `convert` touched /tmp/convert.done, within CONVERT_WAIT seconds): NF4 at B = 1
#      (stock eager, stock static, default), bf16 at QWEN_BATCHES (stock static, default), code and chat prompts
#   4. SmolLM2-135M (once /tmp/gguf/s0, s1 and its drafts are there): stock static and default at SMOLLM2_BATCHES
#      (1,8,32,64; SMOLLM2_ENGINES, SMOLLM2_ARGS) within E2E_BUDGET_S (420) seconds, after a profiled B = 1 call
#      of each of SMOLLM2_PROFILE's engines when set (e.g. fixed,default: e2e_smollm2_b1_profile*; SMOLLM2_PROFILE_ARGS,
#      e.g. --fixed-arm -1 for prompt lookup alone as `fixed`); then
#      benchmarks/domain_bench (real prompts, B = 1, EOS on: default against every arm alone; DOMAIN_ARGS, default
#      --num-prompts 6)
#   5. the TinyLlama-shape e2e grid: TINY_ENGINES (stock static, fixed and default; e.g. static_frozen, fixed_frozen:
#      inductor freezing) at B = 1 (TINY_ARGS, e.g.
#      --profile); static and default at TINY_BATCHES (64; set empty to skip)
#   6. split: the default's step taken apart without SmolLM2's GGUF (e2e_bench --target smollm2-shape: a random
#      target of its shape, its bundled drafts), B = 1: prompt lookup alone and pinned inside the pool in both
#      orders, one process per order (e2e_split_lookup*), profiled after the timing and taken apart per graph replay
#      (trace_replays.txt: trace_streams --replays; on the H100 on 2026-12-07, with each cell profiled right after
#      its timing, the first engine ran its graphs with 0.10 µs between nodes and every later one, pooled or alone,
#      0.45 µs); stock static and lookup alone with and without cuDNN attention (e2e_split_lookup_[no_]cudnn: each
#      layer's cuDNN attention followed a memset by about 6 µs, some 0.15 ms of a 1.5 ms step); with SPLIT_DRAFT
#      set, a draft arm alone, pinned and pinned with side evidence, keeping the others current every third step
#      and (*_k1) every step (e2e_split_draft)
#   7. heldout: flashspec-demo's settings (fp32, greedy, 48 new tokens, one default selector) on the prompts of
#      domains no draft saw (docs prose, stdlib code, raw text), twice: the speed issue's "never slower than plain"
#      on the GPU (heldout_<run>.json; dynamo's recompiles and specialisations in heldout.log); needs `datasets`'
#      wheels carried in .carry/w (the stage says how)
#   8. benchmarks/kernel_tune on KERNEL_TUNE_CASES (batch:vocab pairs), when set
# prewarm (e.g. STAGES="prewarm tests smollm2"): SmolLM2's grid once in the background beside `tests`, untimed, so
# that `smollm2` finds inductor's on-disk cache warm (its first_call_s then leaves out most of the compilation); every
# stage but `tests` waits for it. STAGES (default "kernel tests qwen smollm2 domains tiny") picks and orders them
# (SmolLM2's grid and domain_bench are `smollm2` and `domains`). Each stage logs to /tmp/gs/<stage>.log, skipped
# stages to /tmp/gs/pipeline.log; /tmp/gs/done marks the end.
set -uo pipefail
export PYTHONUNBUFFERED=1
trap 'touch /tmp/gs/done' EXIT
rm -rf .carry && ln -s /tmp/carry .carry || exit 1
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
'transformers', transformers.__version__, torch.cuda.get_device_name())" >/tmp/gs/env.txt
wait_for() {  # PATH SECONDS: wait for PATH to exist, else say so in pipeline.log
  for _ in $(seq "$2"); do [ -e "$1" ] && return 0; sleep 1; done
  echo "skipped: no $1 after $2 s" >>/tmp/gs/pipeline.log; return 1
}
e2e() { python3 -m benchmarks.e2e_bench --out /tmp/gs "$@"; }

kernel() {
  python3 -m benchmarks.kernel_bench --out /tmp/gs ${KERNEL_ARGS:---batches 1,64 --gammas 4 --vocabs 32000,262144} \
    >/tmp/gs/kernel_bench.log 2>&1
}
tests() {  # TESTS_SHARDS=N: N pytest processes side by side, every N-th test each (test_gpu_<i>.log; no xdist there)
  local n=${TESTS_SHARDS:-1} i rc pids=()
  python3 -m pytest -q --collect-only -p no:cacheprovider tests/test_gpu.py ${TESTS_K:+-k "$TESTS_K"} \
    | grep '::' >/tmp/gs/test_ids.txt
  if [ "$n" = 1 ] || [ "$(wc -l </tmp/gs/test_ids.txt)" -lt "$n" ]; then  # one process (and collection errors shown)
    python3 -m pytest -q -rs -p no:cacheprovider --durations=20 tests/test_gpu.py ${TESTS_K:+-k "$TESTS_K"} \
      >/tmp/gs/test_gpu.log 2>&1
    return
  fi
  for i in $(seq 0 $((n - 1))); do
    awk -v n="$n" -v i="$i" 'NR % n == i' /tmp/gs/test_ids.txt | xargs -r -d '\n' \
      python3 -m pytest -q -rs -p no:cacheprovider --durations=10 >"/tmp/gs/test_gpu_$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do  # these shards only (a bare `wait` would wait for prewarm too)
    wait "${pids[$i]}"; rc=$?; echo "$(date +%T) tests shard $i: exit $rc" >>/tmp/gs/pipeline.log
  done
}
qwen() {
  wait_for /tmp/convert.done "${CONVERT_WAIT:-600}" || return
  ( . draft_release/gpu_qwen_env.sh
    cp -r /tmp/drafts/qwen-coder-code flashspec_hf/assistants/  # bundled again: the pool a user gets
    qwen=(--target qwen2.5-coder-1.5b --corpus .carry/q/corpus.json.gz --domains code,chat)
    e2e "${qwen[@]}" --nf4 --batches 1 --engines stock,static,default --repeats 2 --name qwen_nf4_b1
    e2e "${qwen[@]}" --batches "${QWEN_BATCHES:-8,32}" --engines static,default --repeats 3 --name qwen_b8_32
  ) >/tmp/gs/qwen.log 2>&1
}
smollm2_ready() {  # SmolLM2's GGUF joined from its pieces (split -b 49M -d -a 1 THE.gguf .carry/gguf/s), its drafts
  local gguf=/tmp/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$gguf" ] && return 0
  wait_for /tmp/gguf/s0 60 && wait_for /tmp/gguf/s1 120 && wait_for /tmp/stash.done 120 || return 1
  cat /tmp/gguf/s0 /tmp/gguf/s1 >"$gguf.partial" && mv "$gguf.partial" "$gguf" && cp -r /tmp/drafts/smollm2-* flashspec_hf/assistants/
}
prewarm() {  # SmolLM2's grid once, untimed, in the background (beside `tests`): it fills inductor's on-disk cache
  # (/tmp/torchinductor_$USER) so that `smollm2`'s first calls load compiled kernels instead of compiling them (their
  # first_call_s still counts dynamo's tracing, the loads and the graph captures); every later stage but `tests`
  # waits for it (await_prewarm); it waits PREWARM_WAIT (300) seconds for the GGUF's first piece
  { wait_for /tmp/gguf/s0 "${PREWARM_WAIT:-300}" && smollm2_ready && ( . benchmarks/gpu_smollm2_env.sh
      smollm2_grid --repeats 1 --budget-s 100000 --name prewarm_smollm2 ); } >/tmp/gs/prewarm.log 2>&1 &
  PREWARM_PID=$!
}
await_prewarm() {  # before anything else loads SmolLM2 (one GGUF join, one pip install) or uses the GPU for timing
  [ -n "${PREWARM_PID:-}" ] || return 0
  wait "$PREWARM_PID"; local rc=$?; echo "$(date +%T) prewarm: exit $rc" >>/tmp/gs/pipeline.log
  PREWARM_PID=
}
smollm2_grid() {  # ARGS...: SmolLM2's grid (SMOLLM2_BATCHES, SMOLLM2_ENGINES, SMOLLM2_ARGS) for prewarm and smollm2
  e2e --target smollm2 --batches "${SMOLLM2_BATCHES:-1,8,32,64}" --engines ${SMOLLM2_ENGINES:-static,default} "$@" \
    ${SMOLLM2_ARGS:-}
}
smollm2() {
  smollm2_ready || return
  ( . benchmarks/gpu_smollm2_env.sh
    [ -n "${SMOLLM2_PROFILE:-}" ] && e2e --target smollm2 --batches 1 --engines "$SMOLLM2_PROFILE" --repeats 1 \
      --profile --name e2e_smollm2_b1 ${SMOLLM2_PROFILE_ARGS:-}
    smollm2_grid --repeats 2 --budget-s "${E2E_BUDGET_S:-420}" --name e2e_smollm2
  ) >/tmp/gs/smollm2.log 2>&1
}
domains() {
  smollm2_ready || return
  ( . benchmarks/gpu_smollm2_env.sh
    python3 -m benchmarks.domain_bench --corpus .carry/c/corpus.json.gz --out /tmp/gs ${DOMAIN_ARGS:---num-prompts 6}
  ) >/tmp/gs/domain_bench.log 2>&1
}
heldout() {  # the CPU demo's settings on domains no draft saw (docs prose, stdlib code), raw text: default vs plain
  smollm2_ready || return
  ( . benchmarks/gpu_smollm2_env.sh
    # the CLI reads prompt files through `datasets`, which the GPU machine lacks (pyarrow and pandas it has): the
    # wheels carried in .carry/w (pip download --no-deps datasets dill multiprocess xxhash, cp312 manylinux)
    python3 -c "import datasets" 2>/dev/null \
      || python3 -m pip install -q --no-index --no-deps --target /tmp/pylib .carry/w/*.whl
    export PYTHONPATH=/tmp/pylib${PYTHONPATH:+:$PYTHONPATH}
    # dynamo's recompiles, the guards that caused them and where a dynamic size was specialised go to heldout.log
    # (at 09a3bba a prefill as wide as its capacity compiled again on CUDA only)
    for run in 1 2; do
      TORCH_LOGS=recompiles,dynamic python3 -m flashspec_hf.demo \
        --prompts benchmarks/results/demo_cpu_2026-12-01/heldout_prompts.jsonl --raw-prompts \
        --num-prompts "${HELDOUT_PROMPTS:-3}" --json >"/tmp/gs/heldout_$run.json"
    done
  ) >/tmp/gs/heldout.log 2>&1
}
tiny() {
  e2e --batches 1 --engines "${TINY_ENGINES:-static,fixed,default}" --repeats 3 --name e2e_tiny_b1 ${TINY_ARGS:-} \
    >/tmp/gs/e2e_tiny_b1.log 2>&1
  [ -z "${TINY_BATCHES-64}" ] && return
  e2e --batches "${TINY_BATCHES:-64}" --engines static,default --repeats 2 --name e2e_tiny >/tmp/gs/e2e_tiny.log 2>&1
}
split() {
  { e2e --target smollm2-shape --batches 1 --fixed-arm -1 --repeats 3 --name e2e_split_lookup --profile \
      --engines fixed,pool_fixed
    e2e --target smollm2-shape --batches 1 --fixed-arm -1 --repeats 3 --name e2e_split_lookup_pool_first --profile \
      --engines pool_fixed,fixed
    python3 -m benchmarks.trace_streams --replays /tmp/gs/e2e_split_lookup*_profile_*.json.gz >/tmp/gs/trace_replays.txt
    e2e --target smollm2-shape --batches 1 --fixed-arm -1 --repeats 3 --name e2e_split_lookup_cudnn \
      --engines static,fixed
    e2e --target smollm2-shape --batches 1 --fixed-arm -1 --repeats 3 --name e2e_split_lookup_no_cudnn \
      --engines static,fixed --sdpa-off cudnn
    [ -n "${SPLIT_DRAFT:-}" ] && e2e --target smollm2-shape --batches 1 --fixed-arm 0 --repeats 3 \
      --name e2e_split_draft --engines fixed,pool_fixed,pool_fixed_k1,pool_evidence,pool_evidence_k1
  } >/tmp/gs/split.log 2>&1
}
for stage in ${STAGES:-kernel tests qwen smollm2 domains tiny}; do
  case $stage in prewarm | tests) ;; *) await_prewarm ;; esac
  echo "$(date +%T) $stage" >>/tmp/gs/pipeline.log
  "$stage"
done
await_prewarm
if [ -n "${KERNEL_TUNE_CASES:-}" ]; then
  python3 -m benchmarks.kernel_tune --out /tmp/gs --cases "$KERNEL_TUNE_CASES" >/tmp/gs/kernel_tune.log 2>&1
fi
