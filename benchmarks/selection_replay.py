"""Selectors replayed on real acceptance traces (CPU): ``default`` against each fixed arm on many prompts, no GPU.

Under greedy decoding every arm yields the target's own tokens, so how many drafts an arm gets accepted from a
committed length ``t`` is a property of the text, not of the run:

- a draft model accepts the leading positions ``t, t + 1, …`` (at most γ) where its greedy token, given the
  target's tokens before it, is the target's (teacher-forced: a draft token after a rejected one is never
  verified, and one after accepted ones sees the target's tokens), so one draft forward over the generated text
  gives its count at every ``t``;
- prompt lookup accepts the leading matches of :meth:`~flashspec_hf.drafts.PromptLookup.lookup`'s proposal there;
- the plain arm drafts nothing.

One stock greedy ``generate`` per prompt and one forward per draft model give every arm's count at every ``t``
(``--traces``, default ``OUT/traces.pt``; made once, then reused). The replay then follows the static loop
(:func:`flashspec_hf.decoding.decode`): the selector chooses each step (the session's first call warms every arm
first, twice each: an eager use, then the capture), the step advances the row, its report reaches the selector
``MAX_IN_FLIGHT`` steps later (fewer near the length limit, :func:`flashspec_hf.reports.may_end`), and the
steps queued after the row finished still cost time. A step takes its arm's
step time as run on the GPU (``--step-ms``); the selector is given calibrated costs: ``run`` (those times) or
``host`` (the skew of host-timed calibration, ``--host-costs``; by default as measured on the H200 on 2026-12-05: a
draft model's step 1.43× a lookup step, a plain step 1.00×). Per domain, as ``benchmarks.domain_bench`` runs it, and
for a ``mixed`` stream of the domains' prompts in turn (one selector serving them all, as the demo's does) and a
``shift`` stream (every chat prompt, then every code prompt, then every prose prompt: a selector must follow the
change): one selector per
engine, a warm-up call on the first prompt, then every prompt (its seconds: the steps' plus ``--call-ms``);
tokens/s, τ, arm shares, and ``vs_best_fixed``: the seconds of the best fixed arm on the same prompts over the
engine's (for ``shift``, of each domain's best fixed arm, summed). A selector that takes side evidence
(:mod:`flashspec_hf.evidence`) gets the draft models' censored counts after each step that drafted, as the static
loop gathers them. ``--mixed`` adds, per draft model, the mixed arm :class:`~flashspec_hf.drafts.LookupOrDraft`
(``prompt_lookup+NAME``: prompt lookup's drafts where its match is ``mix_min_match`` tokens or longer, the model's
elsewhere), which the product offers at B > 1 only; its step costs ``--step-ms``'s ``mixed`` (default: a draft model's
step), and with ``--mixed-evidence`` it gets side evidence like a draft model (the product gathers none for it). The
mixed arms are then fixed arms too, so ``vs_best_fixed`` compares with them as well. Traces made before 2026-12-06
lack lookup's match lengths and must be remade for it. Writes OUT/selection_replay.csv.

    python -m benchmarks.selection_replay --corpus corpus.json.gz --out DIR [--selectors default,...]
"""

import argparse
import csv
import gzip
import json
from collections import deque
from pathlib import Path

import torch

from flashspec_hf import FixedArm, PromptLookup
from flashspec_hf.backends import KEEP_CURRENT_EVERY, MAX_IN_FLIGHT
from flashspec_hf.models import distilled_assistants, load_target
from flashspec_hf.reports import may_end

from . import DEFAULT_SELECTOR, selector_from_spec



def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--out", default=".")
    p.add_argument("--traces", help="the traces file, made if missing (default: OUT/traces.pt)")
    p.add_argument("--domains", default="chat,code,prose")
    p.add_argument("--num-prompts", type=int, default=24)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--step-ms", default="draft=2.58,prompt_lookup=2.00,plain=1.80",
                   help="step time as run per arm kind (H100, domain_bench at 689a21c; plain: H200 at 4b40e5b)")
    p.add_argument("--host-costs", default="draft=1.43,prompt_lookup=1.0,plain=1.0",
                   help="host-timed calibrated cost per arm kind or arm name, relative to a lookup step (default: "
                        "H200, SmolLM2-135M, B = 1, 2026-12-05)")
    p.add_argument("--call-ms", type=float, default=6.0, help="per-call time outside the steps (prefill, set-up)")
    p.add_argument("--adaptive-step-factor", type=float, default=1.02,
                   help="step time of an arm under a selector that switches, over the same arm fixed (H100, "
                        "domain_bench at 689a21c: a draft model's step 2.58 ms against 2.53)")
    p.add_argument("--keep-current-every", type=int, default=KEEP_CURRENT_EVERY,
                   help="steps between those that keep the draft models current, the only ones with side evidence "
                        "(flashspec_hf.backends.KEEP_CURRENT_EVERY; 1 until 2026-12-07)")
    p.add_argument("--mixed", action="store_true", help="add the mixed arms (module docstring)")
    p.add_argument("--mixed-evidence", action="store_true", help="mixed arms get side evidence (module docstring)")
    p.add_argument("--pool", help="comma-separated arm names the selectors are offered (default: every arm; the "
                   "plain arm always), e.g. smollm2-chat,smollm2-code,prompt_lookup; the fixed arms stay all")
    p.add_argument("--fixed-step-ms", help="step time of each arm fixed, alone (as --step-ms; default --step-ms)")
    p.add_argument("--selectors", default="default",
                   help=f"comma-separated benchmarks.selector_from_spec specs: name[:attr=value]... (default: "
                        f"{DEFAULT_SELECTOR}; seed=N reseeds its generator)")
    return p.parse_args()


def leading(hits: list[bool]) -> int:
    """Accepted drafts: the leading ``True`` of ``hits``."""
    return next((k for k, hit in enumerate(hits) if not hit), len(hits))


def trace(model, assistants: list, ids: torch.Tensor, new_tokens: int, gamma: int) -> dict:
    """One prompt's trace: the generated ``length`` (tokens, prompt included), the prompt's ``start`` and per arm
    (drafts, prompt lookup, plain) the drafts it gets accepted from each committed length ``t`` in
    ``[start, length)``."""
    seq = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)[0]  # [L] int64
    start, length = ids.shape[1], seq.shape[0]
    counts = []
    for draft in assistants:
        best = draft(seq[None]).logits[0].argmax(-1)  # [L]: the draft's token for the position after each
        ids_of = getattr(draft, "draft_vocab_ids", None)
        best = best if ids_of is None else ids_of[best]
        hit = (best[:-1] == seq[1:]).tolist()  # hit[j]: right at position j + 1
        counts.append([leading(hit[t - 1: min(t - 1 + gamma, length - 1)]) for t in range(start, length)])
    lookup = PromptLookup()
    found = [lookup.lookup(seq[None], torch.tensor([t]), gamma) for t in range(start, length)]  # ([1, γ], [1])
    counts.append([leading((p[0, : length - t] == seq[t: t + gamma]).tolist())
                   for t, (p, _) in zip(range(start, length), found)])
    counts.append([0] * (length - start))  # plain decoding
    return dict(start=start, length=length, counts=counts, matched=[int(m[0]) for _, m in found])


def per_kind(text: str) -> dict[str, float]:
    """``kind=value,...`` (``--step-ms``, ``--host-costs``) as a dict; a mixed arm's entry defaults to a draft
    model's."""
    table = {k: float(v) for k, v in (kv.split("=") for kv in text.split(","))}
    return {"mixed": table.get("draft"), **table}


def with_mixed(call: dict, min_match: int) -> dict:
    """``call``'s trace with one mixed arm per draft model inserted before the plain arm: lookup's count where its
    match is at least ``min_match`` tokens, the draft model's elsewhere.

    Raises:
        ValueError: a trace made without lookup's match lengths."""
    if "matched" not in call:
        raise ValueError("--mixed needs traces with lookup's match lengths (made since 2026-12-06): remake them")
    *models, lookup, plain = call["counts"]
    mixed = [[n if m >= min_match else d for n, m, d in zip(lookup, call["matched"], model)] for model in models]
    return dict(call, counts=[*models, lookup, *mixed, plain])


def replay(selector, calls: list[dict], step_s: list[float], given_s: list[float], gammas: list[int],
           warm: bool, max_new_tokens: int, kept_current: list[bool] | None = None,
           keep_current_every: int = KEEP_CURRENT_EVERY) -> tuple[float, int, int, list[int]]:
    """Run ``calls`` (traces) through ``selector`` as the static loop would (``warm``: the first call warms every
    arm); returns (step seconds, new tokens, steps that emitted, steps that emitted per arm). A selector that takes
    side evidence gets, after each step that drafted and kept the others current (a call's every
    ``keep_current_every``-th step), the censored counts of the arms ``kept_current`` marks (the draft models)
    other than the drafting one, as :class:`flashspec_hf.evidence.SideEvidence` gathers them (here every source has
    one arm, so the drafting arm is the drafting source's only one). The selector reads each outcome when the static
    loop does; the step that reaches a trace's end reports only the drafts accepted inside it, where the loop
    reports every draft its target accepted, the ones cut at ``max_new_tokens`` included.

    Raises:
        ValueError: a trace longer than ``max_new_tokens`` (made with more: remake the traces)."""
    if any(call["length"] - call["start"] > max_new_tokens for call in calls):
        raise ValueError(f"traces made with more than --max-new-tokens {max_new_tokens} new tokens: remake them")
    seconds, tokens, steps, per_arm = 0.0, 0, 0, [0] * len(gammas)
    kept_current = kept_current or [False] * len(gammas)

    def report(arm: int, accepted: int, was_finished: bool, finished: bool, counts: list[int], fed: bool) -> bool:
        if not was_finished:
            selector.update(arm, [accepted], gammas[arm])
            if selector.side_evidence and gammas[arm] and fed:
                windows = [min(accepted + 1, g, gammas[arm]) for g in gammas]
                agree = [min(c, w) if kept and a != arm else 0
                         for a, (c, w, kept) in enumerate(zip(counts, windows, kept_current))]
                selector.update_all(agree, [k + (k < w) if kept and a != arm else 0
                                            for a, (k, w, kept) in enumerate(zip(agree, windows, kept_current))])
        return finished

    for call in calls:
        selector.ensure(len(gammas), gammas)
        selector.begin_call()
        selector.set_costs(given_s)
        t, queue, done = call["start"], deque(), False
        known = t  # the row's length as the reports read tell
        forced = [a for a in selector.candidates() for _ in range(2)] if warm and call is calls[0] else []
        for step in range(max_new_tokens):
            arm = selector.choose(forced.pop(0) if forced else None)
            was_finished = t >= call["length"]
            counts = [0 if was_finished else min(c[t - call["start"]], g) for c, g in zip(call["counts"], gammas)]
            accepted = counts[arm]
            emitted = 0 if was_finished else min(accepted + 1, call["length"] - t)
            t += emitted
            seconds += step_s[arm]
            tokens, steps = tokens + emitted, steps + (emitted > 0)
            per_arm[arm] += emitted > 0
            fed = step % keep_current_every == keep_current_every - 1
            queue.append((emitted, (arm, accepted, was_finished, t >= call["length"], counts, fed)))
            while len(queue) > MAX_IN_FLIGHT or (
                    queue and may_end(call["start"] + max_new_tokens - known, [gammas[a] for _, (a, *_) in queue])):
                emitted, step_report = queue.popleft()
                known += emitted
                done = report(*step_report)
            if done:
                break
        while queue:
            report(*queue.popleft()[1])
    return seconds, tokens, steps, per_arm


def main():
    args = parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    model, tokenizer = load_target(None, dtype=torch.float32, device="cpu")
    assistants = distilled_assistants(model)
    names = [getattr(a, "name", None) or a.config.name_or_path for a in assistants] + ["prompt_lookup", "plain"]
    kinds = ["draft"] * len(assistants) + ["prompt_lookup", "plain"]
    if args.mixed:
        names[-1:] = [f"prompt_lookup+{n}" for n in names[: len(assistants)]] + ["plain"]
        kinds[-1:] = ["mixed"] * len(assistants) + ["plain"]
    gammas = [args.gamma] * (len(names) - 1) + [0]
    # the arms kept current by the static loop (side evidence)
    drafts = [kind == "draft" or (kind == "mixed" and args.mixed_evidence) for kind in kinds]
    path = Path(args.traces) if args.traces else out / "traces.pt"
    traces = torch.load(path) if path.exists() else {}
    prompts = json.load(gzip.open(args.corpus, "rt"))["eval"]
    tokenizer.truncation_side = "left"
    for domain in args.domains.split(","):
        for i, prompt in enumerate(prompts[domain][: args.num_prompts]):
            if (domain, i) not in traces:
                ids = tokenizer([prompt], return_tensors="pt", truncation=True, max_length=args.prompt_len).input_ids
                traces[domain, i] = trace(model, assistants, ids, args.max_new_tokens, args.gamma)
                torch.save(traces, path)
                print(domain, i, traces[domain, i]["length"] - traces[domain, i]["start"], "tokens", flush=True)
    if args.mixed:
        traces = {key: with_mixed(call, PromptLookup().mix_min_match) for key, call in traces.items()}
    step_s = [per_kind(args.step_ms)[k] / 1000 for k in kinds]
    fixed_s = [per_kind(args.fixed_step_ms or args.step_ms)[k] / 1000 for k in kinds]
    lookup_s = step_s[kinds.index("prompt_lookup")]
    host = per_kind(args.host_costs)
    given = {"run": step_s, "host": [host.get(n, host.get(k)) * lookup_s for n, k in zip(names, kinds)]}
    offered = set(args.pool.split(",")) if args.pool else set(names)
    if offered - set(names):
        raise SystemExit(f"--pool names unknown arms {sorted(offered - set(names))}; the arms are {names}")
    pool = [a for a, n in enumerate(names) if n in offered or kinds[a] == "plain"]
    engines = {f"fixed {n}": (lambda a=a: FixedArm(a), "run") for a, n in enumerate(names)}
    for spec in args.selectors.split(","):
        engines |= {f"{spec} ({costs} costs)": (lambda spec=spec: selector_from_spec(spec), costs) for costs in given}
    results = []  # (stream, engine, vs_best_fixed)
    with open(out / "selection_replay.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["domain", "engine", "prompts", "new_tokens", "seconds", "tok_s", "vs_best_fixed", "tau",
                         "shares"])
        domains = args.domains.split(",")
        streams = {d: [traces[d, i] for i in range(args.num_prompts)] for d in domains}
        streams["mixed"] = [traces[d, i] for i in range(args.num_prompts) for d in domains]  # chat, code, prose, ...
        streams["shift"] = [call for d in domains for call in streams[d]]  # every chat prompt, then code, then prose
        best_s = {}  # stream -> seconds of its best fixed arm (shift: of each domain's best, summed)
        for stream, calls in streams.items():
            rows = {}
            for engine, (build, costs) in engines.items():
                selector, fixed = build(), engine.startswith("fixed")
                arms = range(len(names)) if fixed else pool  # a selector sees its pool's arms only
                sub = [dict(c, counts=[c["counts"][a] for a in arms]) for c in calls]
                factor = 1.0 if fixed else args.adaptive_step_factor
                times = [(fixed_s if fixed else step_s)[a] * factor for a in arms]
                costs_a, gammas_a, kept_a = ([x[a] for a in arms] for x in (given[costs], gammas, drafts))
                every = args.keep_current_every
                replay(selector, sub[:1], times, costs_a, gammas_a, True, args.max_new_tokens, kept_a, every)  # warm-up
                seconds, tokens, steps, used = replay(selector, sub, times, costs_a, gammas_a, False,
                                                      args.max_new_tokens, kept_a, every)
                per_arm = [0] * len(names)
                for a, n in zip(arms, used):
                    per_arm[a] = n
                rows[engine] = (seconds + args.call_ms / 1000 * len(calls), tokens, steps, per_arm)
            fixed = [seconds for engine, (seconds, *_) in rows.items() if engine.startswith("fixed")]
            best_s[stream] = sum(best_s[d] for d in domains) if stream == "shift" else min(fixed)
            for engine, (seconds, tokens, steps, per_arm) in rows.items():
                shares = ";".join(f"{n}={c / steps:.2f}" for n, c in zip(names, per_arm) if c)
                row = [stream, engine, len(calls), tokens, round(seconds, 4), round(tokens / seconds, 1),
                       round(best_s[stream] / seconds, 3), round(tokens / steps, 3), shares]
                writer.writerow(row)
                results.append((stream, engine, row[6]))
                print(*row, sep="\t", flush=True)
    summarise(results, out / "selection_replay_summary.csv")


def summarise(results: list[tuple[str, str, float]], path: Path) -> None:
    """Per selector (its spec without ``:seed=…``) and calibrated costs: the mean and the smallest ``vs_best_fixed``
    over its seeds in each stream, printed and written to ``path``."""
    groups = {}
    for stream, engine, ratio in results:
        if not engine.startswith("fixed"):
            spec, costs = engine.rsplit(" (", 1)
            groups.setdefault((spec.split(":seed=")[0], costs.rstrip(")")), {}).setdefault(stream, []).append(ratio)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["selector", "calibrated", "stream", "seeds", "mean_vs_best_fixed", "min_vs_best_fixed"])
        for (spec, costs), streams in groups.items():
            for stream, ratios in streams.items():
                writer.writerow([spec, costs, stream, len(ratios), round(sum(ratios) / len(ratios), 3), min(ratios)])
            print(f"{spec} ({costs}):", "  ".join(f"{stream}={sum(r) / len(r):.3f}[{min(r):.3f}]"
                                                 for stream, r in streams.items()), flush=True)

if __name__ == "__main__":
    main()
