"""Real prompts, B = 1, EOS on, per domain: tokens/s of stock generate with a static cache (compiled), flashspec's
``default`` (what a user gets: the bundled drafts plus prompt lookup under the default cost-aware selector, with its
plain-decoding arm), other selectors over the same pool (``--selectors``) and every arm of that pool alone (``fixed
NAME``: that assistant or prompt lookup as the only draft source, what a user who knew the best arm would pass), on
the same prompts in the same run. ``--pool-fixed NAMES`` adds each named arm pinned inside the default pool
(``pool-fixed NAME``: a :class:`FixedArm` over the whole pool, whose steps still run the other draft models'
keep-current forwards) and pinned with side evidence gathered (``pool-evidence NAME``: its steps also keep the
others' logits and score them, as the default's do): the default's step overhead, taken apart.

SmolLM2-135M-Instruct (the bundled GGUF, or ``FLASHSPEC_SMOLLM2_GGUF_DIR``), held-out prompts from a corpus file
(``{"eval": {domain: [prompt, ...]}}``, draft_release/build_distill_corpus.py), each left-padded or cut to
``--prompt-len`` tokens so every call has one shape. The engines take turns prompt by prompt, so that a machine's
drift falls on all alike. Per (domain, engine): tokens/s over the domain's prompts (all new tokens / all seconds,
after one warm-up call on the first prompt), τ, the arms' shares, and per arm that drafted its median step time
as run against its calibrated cost (``step_ms``: ``arm=run/calibrated`` in ms; the calibration only for cost-aware
selectors), and where a flashspec call's time went, per call (ms): ``setup_ms``
(host time before the first step: caches, the prefills' launches, the calibration on a set-up's first call),
``steps_ms`` (the reported steps, each from its start mark, recorded before the selector chooses, to its end: on CUDA
event intervals, so the GPU's idle time between steps is not in them) and ``other_ms`` (the rest of the call's wall
time: the GPU waiting for the host between steps, the prefills' GPU time where set-up did not wait for it, the up to
three steps queued after every row finished, and generate's own work). ``--repeats`` runs it all again with fresh
selectors; a fresh selector starts from the same seed and the calibrated costs are kept on the target, so repeats
sample timing noise, not the selectors' paths (give specs other seeds for that: ``default:seed=1``). A spec ending
in ``@host-costs`` runs that selector with its arm costs timed from the host, as before 2026-12-06, where steps are
captured as CUDA graphs (:mod:`flashspec_hf.costs`; an A/B of the replayed timing); one with ``[DRAFT+DRAFT...]``
before that runs over those bundled drafts and prompt lookup only (``default[smollm2-chat+smollm2-code]``). Writes
OUT/domain_bench.csv, .png and .env.txt.

    python -m benchmarks.domain_bench --corpus corpus.json.gz --out DIR [--selectors default,cost_aware_ucb1]
"""

import argparse
import csv
import gzip
import itertools
import json
import statistics
import time
from pathlib import Path
from unittest import mock

import torch
import transformers

import flashspec_hf.backends
import flashspec_hf.decoding
from flashspec_hf import FixedArm, PromptLookup
from flashspec_hf.costs import arm_costs
from flashspec_hf.models import BUNDLED_ASSISTANTS, distilled_assistants, load_target

from . import pinned_with_evidence, selector_from_spec

HOST_COSTS = "@host-costs"
"""Suffix of a ``--selectors`` spec whose arm costs are timed from the host (module docstring)."""

COLUMNS = ["repeat", "domain", "engine", "prompts", "new_tokens", "seconds", "tok_s", "vs_static", "tau", "shares",
           "step_ms", "setup_ms", "steps_ms", "other_ms"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", default=".")
    p.add_argument("--domains", default="chat,code,prose")
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--selectors", default="default,default:conservative=0.05",
                   help="comma-separated benchmarks.selector_from_spec specs, e.g. default,cost_aware_ucb1")
    p.add_argument("--repeats", type=int, default=1, help="passes over every domain, each with fresh selectors")
    p.add_argument("--pool-fixed", default="",
                   help="comma-separated arm names (e.g. smollm2-chat,prompt_lookup): also each pinned inside the "
                        "pool, without and with side evidence (module docstring)")
    args = p.parse_args()
    arms = [*BUNDLED_ASSISTANTS, PromptLookup.name]
    for name in args.selectors.split(","):  # an unknown name fails before the model loads
        spec, _, drafts = parse_engine(name)
        selector_from_spec(spec)
        if drafts is not None and not set(drafts) <= set(BUNDLED_ASSISTANTS):
            p.error(f"{name!r} names drafts outside the bundled {list(BUNDLED_ASSISTANTS)} (prompt lookup is always "
                    "in the pool)")
    if not set(filter(None, args.pool_fixed.split(","))) <= set(arms):
        p.error(f"--pool-fixed takes arm names among {arms}, got {args.pool_fixed!r}")
    return args


def parse_engine(name: str) -> tuple[str, bool, list[str] | None]:
    """A ``--selectors`` entry ``SPEC[DRAFT+DRAFT...]@host-costs`` (both suffixes optional) -> the selector spec,
    whether its arm costs are timed from the host (:data:`HOST_COSTS`), and the draft models of its pool (None: every
    bundled draft; prompt lookup is always in it)."""
    host = name.endswith(HOST_COSTS)
    spec, _, drafts = name.removesuffix(HOST_COSTS).partition("[")
    return spec, host, drafts.rstrip("]").split("+") if drafts else None


def engines(assistants: list, selectors: list[str], pool_fixed: tuple[str, ...] = ()) -> dict[str, dict]:
    """generate kwargs per engine: stock static, each of ``selectors`` (fresh, from
    :func:`benchmarks.selector_from_spec`) over the default pool or the drafts it names (:func:`parse_engine`; with an
    ``arm_costs`` entry timing from the host for a spec ending in :data:`HOST_COSTS`), each arm of the default pool
    alone and each arm named in ``pool_fixed`` pinned inside that pool without and with side evidence (module
    docstring)."""
    pool = [*assistants, PromptLookup()]
    names = [getattr(a, "name", None) or a.config.name_or_path for a in pool]
    fixed = {f"fixed {n}": dict(assistant_models=[a], selector=FixedArm(0), flashspec=True)
             for n, a in zip(names, pool)}
    for n in pool_fixed:
        i = names.index(n)
        fixed[f"pool-fixed {n}"] = dict(assistant_models=pool, selector=FixedArm(i), flashspec=True)
        fixed[f"pool-evidence {n}"] = dict(assistant_models=pool, selector=pinned_with_evidence(i), flashspec=True)
    adaptive = {}
    for name in selectors:
        spec, host, drafts = parse_engine(name)
        chosen = pool if drafts is None else [*(pool[names.index(d)] for d in drafts), pool[-1]]
        adaptive[name] = dict(assistant_models=chosen, selector=selector_from_spec(spec), flashspec=True,
                              **({"arm_costs": host_timed_costs} if host else {}))
    return {"stock static": dict(cache_implementation="static"), **adaptive, **fixed}


def step_times(selector, names: list[str], seconds: dict[int, list[float]]) -> str:
    """``arm=run/calibrated`` per arm that drafted (``names``: the calls' arm names): its median step time as run and
    its calibrated step time (ms; ``-`` where the selector was not cost-aware); empty for stock."""
    if not seconds:
        return ""
    calibrated = selector.costs if selector is not None and selector.cost_aware else None
    return ";".join(f"{names[a]}={1000 * statistics.median(s):.2f}/"
                    + (f"{1000 * calibrated[a]:.2f}" if calibrated else "-") for a, s in sorted(seconds.items()))


def host_timed_costs(*args, **kwargs) -> list[float]:
    """:func:`flashspec_hf.costs.arm_costs` with ``graphed`` False: forwards timed from the host."""
    return arm_costs(*args, **kwargs | {"graphed": False})


def timed(model, ids, mask, new_tokens, kwargs) -> tuple[torch.Tensor, float]:
    """One greedy generate call with the engine's kwargs (its ``arm_costs`` entry, if any, in place of decoding's
    meanwhile) -> (sequences, seconds)."""
    kwargs = dict(kwargs)
    with mock.patch.object(flashspec_hf.decoding, "arm_costs", kwargs.pop("arm_costs", arm_costs)):
        torch.cuda.synchronize() if ids.is_cuda else None
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, **kwargs)
        torch.cuda.synchronize() if ids.is_cuda else None
    return out, time.perf_counter() - start


class Tally:
    """One engine's calls over a domain's prompts: new tokens, seconds and, for flashspec, what its statistics say."""

    def __init__(self, kwargs: dict):
        self.kwargs, self.calls, self.new, self.seconds = kwargs, 0, 0, 0.0
        self.steps, self.emitted, self.shares, self.step_s, self.names = 0, 0, {}, {}, []
        self.parts = [0.0, 0.0, 0.0]  # set-up, steps, other (s, summed over calls)

    def add(self, new: int, seconds: float, stats) -> None:
        """One timed call: its new tokens, wall seconds and ``model.flashspec_stats`` (None for stock)."""
        self.calls, self.new, self.seconds = self.calls + 1, self.new + new, self.seconds + seconds
        if stats is None:
            return
        self.steps, self.emitted = self.steps + stats.steps, self.emitted + stats.new_tokens
        self.names = stats.arm_names
        for name, share in stats.arm_share.items():
            self.shares[name] = self.shares.get(name, 0.0) + share * stats.steps
        for arm, s in zip(stats.step_arms, stats.step_seconds):
            self.step_s.setdefault(arm, []).append(s)
        in_steps = sum(stats.step_seconds)
        for i, part in enumerate((stats.setup_seconds, in_steps, seconds - stats.setup_seconds - in_steps)):
            self.parts[i] += part

    def row(self) -> dict:
        """tokens/s, τ, the arms' shares, their step times, and per call the mean set-up, steps and other time (ms;
        flashspec only)."""
        flash = bool(self.kwargs.get("flashspec"))
        steps = self.steps or 1
        return dict(prompts=self.calls, new_tokens=self.new, seconds=round(self.seconds, 3),
                    tok_s=round(self.new / self.seconds, 1), tau=round(self.emitted / steps, 3) if self.steps else 1.0,
                    shares=";".join(f"{k}={v / steps:.2f}" for k, v in self.shares.items() if v),
                    step_ms=step_times(self.kwargs.get("selector"), self.names, self.step_s),
                    **{k: round(1000 * v / self.calls, 2) if flash else ""
                       for k, v in zip(("setup_ms", "steps_ms", "other_ms"), self.parts)})


def run_domain(model, enc: list, new_tokens: int, runs: dict[str, dict]) -> dict[str, Tally]:
    """Every engine over a domain's prompts, interleaved prompt by prompt (so that a machine's drift over the run
    falls on every engine alike), after one warm-up call each on the first prompt."""
    for kwargs in runs.values():
        timed(model, enc[0].input_ids, enc[0].attention_mask, new_tokens, kwargs)
    tallies = {name: Tally(kwargs) for name, kwargs in runs.items()}
    for e in enc:
        for name, kwargs in runs.items():
            out, seconds = timed(model, e.input_ids, e.attention_mask, new_tokens, kwargs)
            tallies[name].add(out.shape[1] - e.input_ids.shape[1], seconds,
                              model.flashspec_stats if kwargs.get("flashspec") else None)
    return tallies


def main():
    args = parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_target(None, dtype=getattr(torch, args.dtype), device=device)
    assistants = distilled_assistants(model)
    pinned = tuple(filter(None, args.pool_fixed.split(",")))
    # every engine keeps its own static session (a pool, or an arm alone, is part of its key) while the engines take
    # turns prompt by prompt: keep them all, or each call would rebuild the session the least recent engine left
    sessions = len(engines(assistants, args.selectors.split(","), pinned))
    flashspec_hf.backends.KEPT_SESSIONS = max(flashspec_hf.backends.KEPT_SESSIONS, sessions)
    tokenizer.truncation_side = "left"
    prompts = json.load(gzip.open(args.corpus, "rt"))["eval"]
    rows = []
    with open(out_dir / "domain_bench.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        for repeat, domain in itertools.product(range(args.repeats), args.domains.split(",")):
            enc = [tokenizer([p], return_tensors="pt", padding="max_length", truncation=True,
                             max_length=args.prompt_len).to(device) for p in prompts[domain][: args.num_prompts]]
            runs = engines(assistants, args.selectors.split(","), pinned)  # fresh selectors for every domain
            tallies = run_domain(model, enc, args.max_new_tokens, runs)
            static = tallies["stock static"]
            for engine, tally in tallies.items():
                row = dict(repeat=repeat, domain=domain, engine=engine, **tally.row(),
                           vs_static=round(tally.new / tally.seconds / (static.new / static.seconds), 3))
                rows.append(row)
                writer.writerow(row)
                f.flush()
                print(row, flush=True)
    env = [f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}",
           f"torch {torch.__version__}, transformers {transformers.__version__}", f"date: {time.strftime('%F %H:%M')}",
           f"SmolLM2-135M-Instruct {args.dtype}, B=1, greedy, EOS on, prompt_len={args.prompt_len} (padded/cut), "
           f"max_new_tokens={args.max_new_tokens}, {args.num_prompts} prompts per domain, {args.repeats} repeat(s)"]
    (out_dir / "domain_bench.env.txt").write_text("\n".join(env) + "\n")
    plot(rows, out_dir / "domain_bench.png")


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = list(dict.fromkeys(r["domain"] for r in rows))
    names = list(dict.fromkeys(r["engine"] for r in rows))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        rates = [statistics.fmean(r["tok_s"] for r in rows if r["domain"] == d and r["engine"] == name)
                 for d in domains]  # mean over repeats
        ax.bar([j + i * width for j in range(len(domains))], rates, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(domains))], domains)
    ax.set(ylabel="tokens/s (B = 1, EOS on)",
           title="SmolLM2-135M, real prompts: selectors vs each arm alone vs stock (mean over repeats)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
