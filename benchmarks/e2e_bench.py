"""End-to-end greedy decoding throughput of stock generate (eager; static cache + torch.compile), stock assisted
decoding (one assistant) and prompt-lookup decoding (``pld``; transformers allows B = 1 only for both), and
flashspec (one fixed assistant, alone; Thompson sampling; ``default``) in its default loop (on CUDA the static-shape
loop with CUDA graphs) and, as *_dynamic, in its dynamic loop; ``static_autotune`` and ``*_autotune`` compile with
``CompileConfig(mode="max-autotune")``; ``static_frozen`` and ``*_frozen`` under inductor's freezing (``CompileConfig(
options={"freezing": True})``, and ``torch._inductor.config.freezing`` set while they trace, which is where dynamo reads
it): the weights become constants and the GEMMs that share an input are concatenated (q/k/v, gate/up).

Default target: TinyLlama-1.1B's shape (hidden 2048, MLP 5632, 22 layers, 32 heads, 4 KV heads, V = 32000) with
random weights. Acceptance is SYNTHETIC: each layer's o_proj and down_proj are scaled by ε (the next token then
depends mostly on the embedding -> head path) and the assistants are the target's first 1 / 2 / 4 layers with its
embedding, norm and head (``flashspec_hf.models.early_exit_assistants``), so they agree often. Smaller ε, higher
τ, sensitively: on CPU (B = 1, 64 tokens, γ = 4, fp32) τ over the three depths was 2.5-2.7 at ε = 0.001, 2.2-2.6
at 0.0007 (2.8-2.9 in bf16), 2.9-3.1 at 0.0006, 3.2-3.8 at 0.0005.

``--target smollm2-shape``: SmolLM2-135M-Instruct's shape (:data:`SMOLLM2`) with random weights, its three bundled
drafts loaded onto it (real weights, sharing its random embeddings and head rows: acceptance near 0) and random
prompts: the real pool's step times, on a machine that cannot be sent the target's GGUF (98 MB, two device calls):
for the ``pool_*`` engines, which take the default's step apart.

``--target smollm2`` (SmolLM2-135M-Instruct) or another preset of ``flashspec_hf.models.PRESETS``
(``qwen2.5-coder-1.5b``): the real target; its drafts (``--draft-dirs``: compact folders, e.g. fresh from
draft_release, then ``--early-exit-depths``; else the preset's bundled distilled drafts, else its early exits); the
held-out prompts of draft_release/build_distill_corpus.py (``--domains``), cut to --prompt-len tokens, left-padded.
EOS is disabled: every row generates exactly --max-new-tokens.

Per engine and batch B: tokens/s (B x new tokens / wall s of one generate call, prefill included; median, min,
max over --repeats after a warm-up at full length, whose seconds, compilation and graph capture included, are
first_call_s), τ (tokens per row per step; 1 for stock), step time in ms (p50 / p99 / mean
over decode steps: 1 token per row for stock, τ for speculative engines; the step holding the prefill left out),
the median call's breakdown for flashspec (call_ms: its wall time; setup_ms: host time before the first step, prefill
included; steps_ms: the steps' own times summed; what is left is host time around and between steps; steps: the
last call's step count, which the batch's slowest row sets: --max-new-tokens / steps is its τ), peak CUDA
memory (GiB) and match_rate (fraction of rows identical to stock greedy; 1 expected in fp32). An engine
that raises gets its error in the row. Writes OUT/NAME.csv, NAME.png (tokens/s vs B), NAME.env.txt.

    python -m benchmarks.e2e_bench --out DIR           # CUDA, bf16, default grid (< 8 min on an H200)
    python -m benchmarks.e2e_bench --quick --out DIR   # CPU smoke test: tiny Llama (ε = 0.3), B = 1, 2
"""

import argparse
import csv
import gzip
import importlib.util
import json
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
import transformers
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList
from transformers.generation import candidate_generator

import flashspec_hf.backends  # (importing flashspec_hf adds flashspec=True to generate)
from flashspec_hf import FixedArm, PromptLookup
from flashspec_hf.models import PRESETS

from . import DEFAULT_SELECTOR, pinned_with_evidence

TINYLLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000)
SMOLLM2 = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
               num_key_value_heads=3, head_dim=64, vocab_size=49152, tie_word_embeddings=True,
               rms_norm_eps=9.999999747378752e-06, rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
"""SmolLM2-135M-Instruct's config (from its GGUF), for ``--target smollm2-shape``."""
QUICK = dict(TINYLLAMA, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2)
COLUMNS = ["target", "weights", "dtype", "engine", "batch", "gamma", "prompt_len", "max_new_tokens", "repeats",
           "tok_s_median", "tok_s_min", "tok_s_max", "tau", "alpha", "step_ms_p50", "step_ms_p99", "step_ms_mean",
           "peak_mem_gib", "first_call_s", "call_ms", "setup_ms", "steps_ms", "steps", "match_rate", "acceptance", "note",
           "error"]
FLASHSPEC = ("fixed", "fixed_eager", "thompson", "default", "fixed_dynamic", "thompson_dynamic", "fixed_autotune",
             "default_autotune", "fixed_frozen", "default_frozen", "pool_fixed", "pool_evidence", "default_k1",
             "pool_fixed_k1", "pool_evidence_k1", "fixed_static_shapes", "pool_fixed_static_shapes",
             "default_static_shapes")
STATIC = ("static", "static_autotune", "static_frozen")  # stock generate with a static cache (compiled on CUDA)
# default: what a user gets with the default selector (cost-aware discounted Thompson, with its plain-decoding arm)
# over the pool plus prompt lookup; *_eager: captured forwards not compiled (disable_compile=True);
# *_dynamic: cache_implementation="dynamic"; *_autotune (and static_autotune): compile_config=CompileConfig(
# mode="max-autotune"), inductor benchmarking its Triton GEMM templates against cuBLAS per shape; *_frozen (and
# static_frozen): compile_config=CompileConfig(options={"freezing": True}) under torch._inductor.config.freezing;
# pool_fixed: --fixed-arm pinned (FixedArm) inside the default's pool, its steps running the other draft models'
# keep-current forwards; pool_evidence: the same, gathering side evidence as the default's steps do. --fixed-arm -1:
# prompt lookup (for fixed: alone); *_k1: the draft models that do not draft kept current on every step
# (flashspec_hf.backends.KEEP_CURRENT_EVERY = 1, the design until 2026-12-07) instead of every third;
# *_static_shapes: compile_config=CompileConfig(dynamic=False), a graph per shape (no symbolic widths)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=".")
    p.add_argument("--name", default="e2e_bench", help="output file prefix")
    p.add_argument("--target", default="tinyllama", choices=["tinyllama", "smollm2", "smollm2-shape", *PRESETS],
                   help="smollm2 is the preset smollm2-135m")
    p.add_argument("--nf4", action="store_true", help="target in bitsandbytes NF4, bf16 compute")
    p.add_argument("--device-map", help='accelerate placement of the target: "auto" or JSON, e.g. '
                   '\'{"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu", ...}\'')
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    p.add_argument("--batches", default="1,4,16,64")
    p.add_argument("--engines", default="stock,static,fixed,fixed_eager,thompson,default",
                   help="stock first (the match reference); also known: assisted, pld, thompson_dynamic, "
                   "fixed_dynamic, static_autotune, fixed_autotune, default_autotune, static_frozen, fixed_frozen, "
                   "default_frozen")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--epsilon", type=float, default=0.0006, help="o_proj / down_proj scale (synthetic acceptance)")
    p.add_argument("--depths", default="1,2,4", help="layers of each synthetic assistant")
    p.add_argument("--fixed-arm", type=int, default=0,
                   help="the assistant of 'fixed', 'assisted' and 'pool_*' (-1: prompt lookup, flashspec engines only)")
    p.add_argument("--corpus", default=".carry/c/corpus.json.gz", help="prompts of a real target")
    p.add_argument("--domains", default="chat,code,prose", help="the corpus's held-out domains to take prompts from")
    p.add_argument("--draft-dirs", default="", help="comma-separated compact draft folders for a real target")
    p.add_argument("--early-exit-depths", default="",
                   help="early-exit drafts of a real target, after --draft-dirs (e.g. 4,8)")
    p.add_argument("--budget-s", type=float, default=420, help="start no (engine, B) cell after this many seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny model and grid, for a CPU smoke test")
    p.add_argument("--profile", action="store_true",
                   help="after the whole grid, one more call per cell under torch.profiler, appended to "
                        "OUT/NAME_profile.txt (its trace: OUT/NAME_profile_ENGINE_bB.json.gz); after the grid, since in "
                        "one run graphs captured after a profiled call ran slower (results/h100_2026-12-07d_split)")
    p.add_argument("--sdpa-off", default="", help="comma-separated SDPA backends to switch off for the whole run "
                   "(cudnn, flash, mem_efficient, math: torch.backends.cuda.enable_<name>_sdp(False)); on the H100 on "
                   "2026-12-07 each layer's cuDNN attention followed a memset by about 6 µs inside the step's graph")
    if p.parse_args().quick:  # quick defaults; explicit arguments still win
        p.set_defaults(batches="1,2", repeats=1, max_new_tokens=16, prompt_len=16, depths="1,2,3", epsilon=0.3)
    args = p.parse_args()
    unknown = set(args.engines.split(",")) - {"stock", *STATIC, "assisted", "pld", *FLASHSPEC}
    if unknown:
        p.error(f"unknown engines {sorted(unknown)}")
    if set(filter(None, args.sdpa_off.split(","))) - {"cudnn", "flash", "mem_efficient", "math"}:
        p.error(f"--sdpa-off takes cudnn, flash, mem_efficient and math, not {args.sdpa_off!r}")
    if args.target in ("tinyllama", "smollm2-shape") and (args.draft_dirs or args.early_exit_depths):
        p.error("--draft-dirs and --early-exit-depths are for a real target (--target smollm2 or a preset)")
    args.batch_list = [int(b) for b in args.batches.split(",")]
    return args


def stamp(device):
    """A recorded CUDA event (no sync), or perf_counter seconds on CPU."""
    if device.type != "cuda":
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def intervals_ms(stamps) -> list[float]:
    """Times between consecutive stamps (ms)."""
    if stamps and isinstance(stamps[0], torch.cuda.Event):
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in zip(stamps, stamps[1:])]
    return [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]


class Stamper(LogitsProcessor):
    """Identity processor stamping each decoding step of stock generate (called once per new token)."""

    def __init__(self, device):
        self.device, self.stamps = device, []

    def __call__(self, input_ids, scores):
        self.stamps.append(stamp(self.device))
        return scores


def build_tinyllama(args, device, dtype):
    """Random TinyLlama-shape target with ε-scaled residual branches, early-exit assistants, random prompts (or, for
    ``--target smollm2-shape``, SmolLM2-135M's shape, unscaled, with its bundled drafts)."""
    from flashspec_hf.models import distilled_assistants, early_exit_assistants

    torch.manual_seed(args.seed)
    shape = SMOLLM2 if args.target == "smollm2-shape" else QUICK if args.quick else TINYLLAMA
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**shape, pad_token_id=0))
    model = model.to(dtype).eval()
    if shape is not SMOLLM2:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.mul_(args.epsilon)
                layer.mlp.down_proj.weight.mul_(args.epsilon)
    model = reload(model, device, args) if args.nf4 or args.device_map else model
    model.generation_config.update(eos_token_id=None, pad_token_id=0)
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(3, model.config.vocab_size, (max(args.batch_list), args.prompt_len), generator=gen)  # [B, L]
    if shape is SMOLLM2:
        assistants = distilled_assistants(model)
    else:
        assistants = early_exit_assistants(model, tuple(int(d) for d in args.depths.split(",")))
    return model, assistants, lambda b: (ids[:b].to(device), torch.ones_like(ids[:b]).to(device))


def build_preset(args, device, dtype):
    """A preset's real target, its drafts (see the module docstring), real prompts left-padded ([B, L] each)."""
    from flashspec_hf.compact import load_compact
    from flashspec_hf.models import distilled_assistants, early_exit_assistants, load_target

    preset = PRESETS[args.target]
    model, tokenizer = load_target(args.target, dtype=dtype, device=str(device))
    model = reload(model, device, args) if args.nf4 or args.device_map else model
    depths = tuple(int(d) for d in args.early_exit_depths.split(",") if d)
    if args.draft_dirs or depths:
        assistants = [load_compact(Path(d), model, name=Path(d).name) for d in args.draft_dirs.split(",") if d]
        assistants += early_exit_assistants(model, depths)
    elif preset.bundled:
        assistants = distilled_assistants(model, preset.bundled)
    else:
        assistants = early_exit_assistants(model, preset.early_exit_depths)
    model.generation_config.eos_token_id = None
    held_out = json.load(gzip.open(args.corpus, "rt"))["eval"]
    texts = [p for domain in args.domains.split(",") for p in held_out[domain]]
    tokenizer.truncation_side = "left"

    def prompts(b):
        enc = tokenizer([texts[i % len(texts)] for i in range(b)], return_tensors="pt", padding=True,
                        truncation=True, max_length=args.prompt_len)
        return enc.input_ids.to(device), enc.attention_mask.to(device)

    return model, assistants, prompts


def reload(model, device, args):
    """Save to a temporary folder and reload in NF4 (bf16 compute, ``--nf4``) and/or placed by ``--device-map``."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
    placement = {"": device} if not args.device_map else (
        "auto" if args.device_map == "auto" else json.loads(args.device_map))
    tmp = tempfile.mkdtemp()  # kept: accelerate reads disk-offloaded weights from it at every forward
    model.save_pretrained(tmp)
    return AutoModelForCausalLM.from_pretrained(
        tmp, quantization_config=config if args.nf4 else None, device_map=placement, dtype=model.dtype).eval()


def generate_once(engine, model, assistants, ids, mask, args, new_tokens):
    """One timed generate call -> (sequences [B, L+N], seconds, decode-step ms, info)."""
    device, info = model.device, {}
    kw = dict(attention_mask=mask, max_new_tokens=new_tokens, do_sample=False)
    timer = Stamper(device)
    generator = {"assisted": candidate_generator.AssistedCandidateGenerator,
                 "pld": candidate_generator.PromptLookupCandidateGenerator}.get(engine)
    original = generator and generator.update_candidate_strategy
    if engine.endswith("_autotune"):
        kw["compile_config"] = CompileConfig(mode="max-autotune")
    if engine.endswith("_frozen"):
        kw["compile_config"] = CompileConfig(options={"freezing": True})
    if engine.endswith("_static_shapes"):
        kw["compile_config"] = CompileConfig(dynamic=False)
    if engine in ("stock", *STATIC):
        kw["logits_processor"] = LogitsProcessorList([timer])
        if engine.startswith("static"):  # generate compiles the decoding forward itself for a static cache on CUDA
            kw["cache_implementation"] = "static"  # (its default CompileConfig: mode="reduce-overhead")
    elif generator is not None:  # stock assisted / prompt-lookup decoding: one stamp and count per step
        if engine == "assisted":  # stock reads γ and its schedule from the assistant's config
            assistant = assistants[args.fixed_arm]
            assistant.generation_config.update(num_assistant_tokens=args.gamma, assistant_confidence_threshold=0.0,
                                               num_assistant_tokens_schedule="constant")
            kw.update(assistant_model=assistant, num_assistant_tokens=args.gamma)
        else:
            kw["prompt_lookup_num_tokens"] = args.gamma
        info["counts"] = counts = []

        def record(self, *a, **k):  # (input_ids, scores, num_matches): once per step, after verification
            counts.append(int(a[2] if len(a) > 2 else k["num_matches"]))
            timer.stamps.append(stamp(device))
            return original(self, *a, **k)

        generator.update_candidate_strategy = record
    else:  # a selector name gives fresh statistics every call; flashspec picks its loop unless told "dynamic"
        selector, pool = "thompson", assistants
        default_pool = [*assistants, PromptLookup()]
        if engine.startswith("fixed"):  # the one assistant alone: what a user who knew the best arm would pass
            selector, pool = FixedArm(0), [default_pool[args.fixed_arm]]
        if engine.startswith("default"):
            selector, pool = DEFAULT_SELECTOR, default_pool
        if engine.startswith("pool_"):  # the arm pinned inside the default's pool
            arm = args.fixed_arm % len(default_pool)
            selector = pinned_with_evidence(arm) if engine.startswith("pool_evidence") else FixedArm(arm)
            pool = default_pool
        kw.update(assistant_models=pool, flashspec=True, selector=selector, num_assistant_tokens=args.gamma)
        if engine.endswith("_dynamic"):
            kw["cache_implementation"] = "dynamic"
        if engine.endswith("_eager"):
            kw["disable_compile"] = True
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    try:
        start = time.perf_counter()
        every = 1 if engine.endswith("_k1") else flashspec_hf.backends.KEEP_CURRENT_EVERY
        with torch._inductor.config.patch(freezing=engine.endswith("_frozen")), \
                mock.patch.object(flashspec_hf.backends, "KEEP_CURRENT_EVERY", every):
            out = model.generate(ids, **kw)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    finally:
        if generator is not None:
            generator.update_candidate_strategy = original
    if engine in FLASHSPEC:  # flashspec times its steps; its first step holds the prefill
        steps = [1e3 * s for s in getattr(model.flashspec_stats, "step_seconds", [])[1:]]
    else:
        steps = intervals_ms(timer.stamps)
    info["peak"] = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None
    info["compiled"] = getattr(model, "_compiled_call", None) is not None
    return out, seconds, steps, info


def run_cell(engine, model, assistants, ids, mask, args, reference):
    """Warm-up at full length (stock static and flashspec's static loop size their caches by it, so compilation
    and graph capture happen there) + repeats of one cell."""
    _, first_call_s, _, _ = generate_once(engine, model, assistants, ids, mask, args, args.max_new_tokens)
    rates, steps, peaks, calls = [], [], [], []
    for _ in range(args.repeats):
        out, seconds, step_ms, info = generate_once(engine, model, assistants, ids, mask, args, args.max_new_tokens)
        assert out.shape[1] - ids.shape[1] == args.max_new_tokens, "a row stopped early"
        rates.append(ids.shape[0] * args.max_new_tokens / seconds)
        steps += step_ms
        peaks.append(info["peak"])
        stats = getattr(model, "flashspec_stats", None) if engine in FLASHSPEC else None
        calls.append((1e3 * seconds, *((1e3 * stats.setup_seconds, 1e3 * sum(stats.step_seconds)) if stats else ())))
    row = dict(tok_s_median=statistics.median(rates), tok_s_min=min(rates), tok_s_max=max(rates), tau=1.0,
               first_call_s=first_call_s)
    row.update(zip(("call_ms", "setup_ms", "steps_ms"), sorted(calls)[(len(calls) - 1) // 2]))  # the median call
    if engine in FLASHSPEC:
        stats = model.flashspec_stats
        row.update(tau=stats.tau, steps=stats.steps, alpha=";".join(f"{k}={v:.3f}" for k, v in stats.alpha.items()))
        row["note"] = "shares " + ";".join(f"{k}={v:.2f}" for k, v in stats.arm_share.items() if v)
    elif engine in ("assisted", "pld"):
        row["tau"] = statistics.mean(n + 1.0 for n in info["counts"])
    if len(steps) > 1:
        q = statistics.quantiles(steps, n=100)
        row.update(step_ms_p50=q[49], step_ms_p99=q[98], step_ms_mean=statistics.mean(steps))
    row["peak_mem_gib"] = max(peaks) if peaks[0] is not None else ""
    if reference is not None:
        row["match_rate"] = (out == reference).all(dim=1).float().mean().item()
    if engine.startswith("static"):
        row["note"] = "compiled" if info["compiled"] else "not compiled (static cache only)"
    if engine == "assisted" and getattr(assistants[args.fixed_arm], "draft_vocab_ids", None) is not None:
        row["note"] = "reduced draft head: stock reads its logit indices as token ids (wrong drafts, exact output)"
    return row, out


def profile_cell(engine, model, assistants, ids, mask, args, path):
    """One more warm call under ``torch.profiler`` (its own overhead included), appended to ``path``: device kernels
    launched and their time, per new token and per step (every kernel of the call, prefill included, over its steps),
    by kind (:data:`KERNEL_KINDS`); the host wall ms of each ``flashspec.*`` range (the call's set-up phases and its
    steps, :mod:`flashspec_hf.decoding`; device waits included, one-off work outside them, such as the CPU's
    few-row timing, not); and the 25 ops of most device time. The call's trace (streams, overlap) goes beside it,
    ``<path stem>_<engine>_b<B>.json.gz`` (chrome://tracing, Perfetto)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        out, seconds, steps, _ = generate_once(engine, model, assistants, ids, mask, args, args.max_new_tokens)
    events = prof.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA  # not a range's device span
               and not getattr(e, "is_user_annotation", False) and not e.name.startswith("flashspec.")]
    tokens, per_step = args.max_new_tokens, len(steps) + 1  # per row
    kernel_ms = sum(e.device_time for e in kernels) / 1e3
    head = (f"{engine}, B = {ids.shape[0]}, {tokens} new tokens a row, {per_step} steps, {seconds:.3f} s wall "
            f"under the profiler\nkernels: {len(kernels)} ({len(kernels) / tokens:.0f} per token, "
            f"{len(kernels) / per_step:.0f} per step); kernel time {kernel_ms:.1f} ms "
            f"({kernel_ms / tokens:.3f} ms per token)\n\n")
    phases = {}  # flashspec's named host ranges (siblings, none nested): host wall ms in this call
    for e in events:
        if e.name.startswith("flashspec.") and e.device_type == torch.autograd.DeviceType.CPU:
            phases[e.name] = phases.get(e.name, 0.0) + e.cpu_time_total / 1e3
    head += "".join(f"  host {name:<20} {ms:8.2f} ms\n" for name, ms in phases.items())
    split = "".join(f"  {kind:<9} {n / per_step:7.1f} kernels {ms / per_step * 1e3:8.1f} us per step\n"
                    for kind, (n, ms) in kernel_kinds(kernels).items())
    sort = "device_time_total" if kernels else "cpu_time_total"
    prof.export_chrome_trace(str(path.with_name(f"{path.stem}_{engine}_b{ids.shape[0]}.json.gz")))
    with open(path, "a") as f:
        f.write(head + split + "\n" + prof.key_averages().table(sort_by=sort, row_limit=25, max_name_column_width=70)
                + "\n\n")


KERNEL_KINDS = {"gemm": ("gemm", "nvjet", "gemv", "xmma", "splitk"), "attention": ("sdpa", "flash", "fmha", "attn"),
                "triton": ("triton",), "reduce": ("reduce",), "copy": ("copy", "memcpy", "memset")}
"""Kernel-name substrings (lower case) that sort a profiled kernel into a kind, first match wins; else ``other``.
``triton`` is inductor's generated kernels (``triton_poi_…``, ``triton_per_…``); flashspec's own Triton kernels
(verification) fall under ``other``."""


def kernel_kinds(kernels) -> dict:
    """Profiled device kernels by kind (:data:`KERNEL_KINDS`): ``{kind: (count, device ms)}``, most time first."""
    kinds = {}
    for e in kernels:
        name = e.name.lower()
        kind = next((k for k, keys in KERNEL_KINDS.items() if any(key in name for key in keys)), "other")
        n, ms = kinds.get(kind, (0, 0.0))
        kinds[kind] = (n + 1, ms + e.device_time / 1e3)
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1][1]))


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for engine in dict.fromkeys(r["engine"] for r in rows):
        pts = sorted((r["batch"], r["tok_s_median"], r["tok_s_min"], r["tok_s_max"])
                     for r in rows if r["engine"] == engine and r.get("tok_s_median", "") != "")
        if pts:
            b, med, lo, hi = map(list, zip(*pts))
            yerr = [[m - x for m, x in zip(med, lo)], [x - m for m, x in zip(med, hi)]]
            ax.errorbar(b, med, yerr=yerr, marker="o", capsize=3, label=engine)
    r0, batches = rows[0], sorted({r["batch"] for r in rows})
    title = f"{r0['target']} {r0['weights']} {r0['dtype']}, greedy, γ={r0['gamma']}\nacceptance {r0['acceptance']}"
    ax.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="tokens/s (all rows)", title=title)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    args = parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.nf4 and importlib.util.find_spec("bitsandbytes") is None:
        return print("--nf4 skipped: bitsandbytes is not installed")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    args.target = "smollm2-135m" if args.target == "smollm2" else args.target
    for name in filter(None, args.sdpa_off.split(",")):
        getattr(torch.backends.cuda, f"enable_{name}_sdp")(False)
    build = build_tinyllama if args.target in ("tinyllama", "smollm2-shape") else build_preset
    model, assistants, prompts = build(args, device, getattr(torch, args.dtype))
    acceptance = {"tinyllama": f"synthetic (eps={args.epsilon})", "smollm2-shape": "near 0 (random target)"}.get(
        args.target, f"real ({args.domains} prompts; drafts {[a.config.name_or_path for a in assistants]})")
    base = dict(target=args.target + ("-quick" if args.quick else ""), weights="nf4" if args.nf4 else "dense",
                dtype=args.dtype, gamma=args.gamma, prompt_len=args.prompt_len, max_new_tokens=args.max_new_tokens,
                repeats=args.repeats, acceptance=acceptance)
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    env = [f"device: {gpu}", f"torch {torch.__version__}, transformers {transformers.__version__}",
           f"date: {time.strftime('%F %H:%M')}",
           f"target: {base['target']} {base['weights']} {args.dtype}; acceptance: {acceptance}",
           f"assistants: {[a.config.name_or_path for a in assistants]}, fixed arm {args.fixed_arm}",
           f"greedy, gamma={args.gamma}, EOS off, prompt_len={args.prompt_len}, max_new_tokens={args.max_new_tokens}",
           f"target placement: {getattr(model, 'hf_device_map', None) or device}",
           f"SDPA backends switched off: {args.sdpa_off or 'none'}"]
    if args.profile:
        env.append("profiled after the grid, every cell's static session kept until then (peak_mem_gib counts them)")
    (out_dir / f"{args.name}.env.txt").write_text("\n".join(env) + "\n")
    rows, profiles = [], []  # profiles: (engine, ids, mask) of the cells to profile once every cell is timed
    if args.profile:  # the profiled calls are warm: every cell's session is still kept
        flashspec_hf.backends.KEPT_SESSIONS = max(flashspec_hf.backends.KEPT_SESSIONS,
                                                  len(args.engines.split(",")) * len(args.batch_list))
    with open(out_dir / f"{args.name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, restval="")
        writer.writeheader()
        for batch in args.batch_list:
            ids, mask = prompts(batch)  # [B, L] each
            reference = None
            for engine in args.engines.split(","):
                row = dict(base, engine=engine, batch=batch)
                if time.perf_counter() - start > args.budget_s:
                    row["error"] = "skipped: time budget"
                else:
                    try:
                        fields, out = run_cell(engine, model, assistants, ids, mask, args, reference)
                        row.update({k: round(v, 4) if isinstance(v, float) else v for k, v in fields.items()})
                        reference = out if engine == "stock" else reference
                        if args.profile:
                            profiles.append((engine, ids, mask))
                    except Exception as e:  # noqa: BLE001  (recorded in the row; the grid goes on)
                        row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                rows.append(row)
                writer.writerow(row)
                f.flush()
                print({k: v for k, v in row.items() if v != "" and k not in base}, flush=True)
            plot(rows, out_dir / f"{args.name}.png")
    # in one run, the graphs of every cell captured after a profiled call (CUPTI) ran slower: 0.45 µs between
    # nodes against 0.10 (results/h100_2026-12-07d_split)
    for engine, ids, mask in profiles:
        try:
            profile_cell(engine, model, assistants, ids, mask, args, out_dir / f"{args.name}_profile.txt")
        except Exception as e:  # noqa: BLE001  (noted in the profile file; the env file still gets written)
            with open(out_dir / f"{args.name}_profile.txt", "a") as f:
                f.write(f"{engine}, B = {ids.shape[0]}: {type(e).__name__}: {e}".splitlines()[0][:300] + "\n\n")
    taus = [f"{r['engine']}@B={r['batch']}={r['tau']}" for r in rows if r["engine"] != "stock" and r.get("tau", 1) != 1]
    env += ["measured tau: " + ", ".join(taus), f"wall: {time.perf_counter() - start:.0f} s"]
    (out_dir / f"{args.name}.env.txt").write_text("\n".join(env) + "\n")
    print("\n".join(env))


if __name__ == "__main__":
    main()
