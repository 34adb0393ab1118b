"""Evaluation results: the :class:`Evaluation` record, per-category summaries, the Markdown table, CSV rows, the PNG
plot, and atomic writes of all of them."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..stats import FlashSpecStats

OUTPUT_FILES = ("results.json", "prompts.csv", "summary.csv", "summary.md", "plot.png")
"""What :func:`~flashspec_hf.evaluation.run.evaluate` writes into ``output_dir`` (``plot.png`` only with
``plot=True``)."""

@dataclass
class Evaluation:
    """What :func:`~flashspec_hf.evaluation.run.evaluate` measured.

    Attributes:
        setup: models, generation settings, data source, software versions, date and machine.
        summary: one row per category, then ``all`` (see :func:`summarize`; tokens/s, τ in tokens per step).
        prompts: one row per prompt (see :func:`~flashspec_hf.evaluation.run.compare_on_prompts`), plus
            ``index``, ``prompt``, ``plain_tok_s``, ``flash_tok_s`` (tokens/s), ``speedup``, ``tau``, ``alpha``,
            ``arm_share`` of that prompt alone.
        files: name -> path of each file written (empty without ``output_dir``).
    """

    setup: dict
    summary: list[dict]
    prompts: list[dict]
    files: dict[str, Path] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """``{"setup", "summary", "prompts"}``, JSON-serialisable (what ``results.json`` holds)."""
        return {"setup": self.setup, "summary": self.summary, "prompts": self.prompts}

    def markdown(self) -> str:
        """The summary as a Markdown table with a setup line above and, for greedy runs, any output that
        differs from plain ``generate`` below (see :func:`markdown_table`)."""
        return markdown_table(self.summary, self.setup, self.prompts)


def summarize(results: list[dict]) -> list[dict]:
    """Per domain (in order of first appearance), then ``all``: one dict each with ``domain``, ``prompts``,
    ``plain_tok_s`` and ``flashspec_tok_s`` (generated tokens / wall seconds of that engine, over the domain's
    prompts together), ``speedup`` (their ratio), ``tau`` (tokens per step, bonus included), ``alpha`` and
    ``arm_share`` (per arm name; α only for arms that drafted), ``identical`` (outputs equal to plain ``generate``),
    ``plain_new_tokens``, ``flash_new_tokens`` (tokens), ``plain_seconds``, ``flash_seconds`` (s) and ``steps``."""
    groups = defaultdict(list)
    for r in results:
        groups[r["domain"]].append(r)
    groups["all"] = results
    rows = []
    for domain, rs in groups.items():
        merged = merged_stats(rs)
        plain_tps = sum(r["plain_new_tokens"] for r in rs) / sum(r["plain_seconds"] for r in rs)
        flash_tps = sum(r["flash_new_tokens"] for r in rs) / sum(r["flash_seconds"] for r in rs)
        rows.append(
            {
                "domain": domain,
                "prompts": len(rs),
                "plain_tok_s": plain_tps,
                "flashspec_tok_s": flash_tps,
                "speedup": flash_tps / plain_tps,
                "tau": merged.tau,
                "alpha": merged.alpha,
                "arm_share": merged.arm_share,
                "identical": sum(r["identical"] for r in rs),
                "plain_new_tokens": sum(r["plain_new_tokens"] for r in rs),
                "flash_new_tokens": sum(r["flash_new_tokens"] for r in rs),
                "plain_seconds": sum(r["plain_seconds"] for r in rs),
                "flash_seconds": sum(r["flash_seconds"] for r in rs),
                "steps": merged.steps,
            }
        )
    return rows



def merged_stats(results: list[dict]) -> FlashSpecStats:
    """One :class:`~flashspec_hf.stats.FlashSpecStats` over several prompts' steps.

    Args:
        results: rows of :func:`~flashspec_hf.evaluation.run.compare_on_prompts` (batch 1: one accepted count per
            step), all with the same ``arm_names``; at least one.
    """
    return FlashSpecStats(
        results[0]["arm_names"],
        results[0]["gamma"],
        results[0].get("arm_gammas"),
        step_arms=[a for r in results for a in r["arms"]],
        step_accepted=[[n] for r in results for n in r["accepted"]],
        step_gammas=[g for r in results for g in r["step_gammas"]],
    )


def markdown_table(summary: list[dict], setup: dict, prompts: list[dict] | None = None) -> str:
    """Markdown: setup lines (models, settings; date, machine and load when recorded), then per category (and
    ``all``) prompts, tokens/s of plain ``generate`` and of flashspec, speed-up, τ (tokens per step), α and share
    of steps per arm, and (greedy) identical outputs.
    With ``prompts`` and greedy decoding, each output that differs from plain ``generate`` is listed below with
    its divergence position (new-token index) and the target's top-2 logit margin there."""
    greedy = not setup.get("do_sample")
    names = list(summary[0]["arm_share"])
    head = ["category", "prompts", "plain tok/s", "flashspec tok/s", "speedup", "τ"]
    head += [f"{n} α (share)" for n in names] + (["identical"] if greedy else [])
    decoding = "greedy" if greedy else f"sampling T={setup.get('temperature')}"
    lines = [
        f"target {setup['target']} on {setup['device']} ({setup['dtype']}), γ={setup['num_assistant_tokens']}, "
        f"selector={setup['selector']}, max_new_tokens={setup['max_new_tokens']}, {decoding}, batch 1; "
        f"torch {setup['torch']}, transformers {setup['transformers']}",
    ]
    if "machine" in setup:
        load = setup.get("load_average_before_after") or [None, None]
        lines.append(f"{setup['date']}, {setup['machine']}, 1-min load average {load[0]} before, {load[1]} after")
    lines += [
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|",
    ]
    for r in summary:
        cells = [r["domain"], str(r["prompts"]), f"{r['plain_tok_s']:.1f}", f"{r['flashspec_tok_s']:.1f}",
                 f"{r['speedup']:.2f}×", f"{r['tau']:.2f}"]
        for name in names:
            alpha = r["alpha"].get(name)
            cells.append(f"{'–' if alpha is None else f'{alpha:.2f}'} ({r['arm_share'][name]:.0%})")
        if greedy:
            cells.append(f"{r['identical']}/{r['prompts']}")
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    for p in prompts if greedy and prompts is not None else []:
        if p["identical"]:
            continue
        note = f"- prompt {p.get('index', '?')} ({p['domain']}): "
        if p["divergence"] is None:
            note += (f"one output is a prefix of the other ({p['plain_new_tokens']} plain, "
                     f"{p['flash_new_tokens']} flashspec tokens)")
        else:
            note += (f"first differs at new token {p['divergence']['position']}, target's top-2 logit margin "
                     f"{p['divergence']['margin']:.3f}")
        notes.append(note)
    if notes:
        lines += ["", "Greedy outputs that differ from plain generate:", *notes]
    return "\n".join(lines)


def _csv(rows: list[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _flat_arms(row: dict, names: list[str]) -> dict:
    """α and share per arm as columns ``alpha_<arm>`` (empty when the arm never drafted) and ``share_<arm>``."""
    flat = {f"alpha_{n}": row["alpha"].get(n, "") for n in names}
    flat.update({f"share_{n}": row["arm_share"][n] for n in names})
    return flat


def _prompt_csv_rows(prompts: list[dict]) -> list[dict]:
    names = prompts[0]["arm_names"]
    rows = []
    for p in prompts:
        divergence = p["divergence"] or {}
        rows.append({
            "index": p["index"], "category": p["domain"], "prompt_tokens": p["prompt_tokens"],
            "plain_new_tokens": p["plain_new_tokens"], "plain_seconds": p["plain_seconds"],
            "plain_tok_s": p["plain_tok_s"], "flash_new_tokens": p["flash_new_tokens"],
            "flash_seconds": p["flash_seconds"], "flash_tok_s": p["flash_tok_s"], "speedup": p["speedup"],
            "steps": p["steps"], "tau": p["tau"], **_flat_arms(p, names), "identical": p["identical"],
            "divergence_position": divergence.get("position", ""), "divergence_margin": divergence.get("margin", ""),
            "prompt": p["prompt"],
        })
    return rows


def _summary_csv_rows(summary: list[dict]) -> list[dict]:
    names = list(summary[0]["arm_share"])
    return [
        {"category": r["domain"], "prompts": r["prompts"], "plain_tok_s": r["plain_tok_s"],
         "flashspec_tok_s": r["flashspec_tok_s"], "speedup": r["speedup"], "tau": r["tau"], **_flat_arms(r, names),
         "identical": r["identical"], "plain_new_tokens": r["plain_new_tokens"],
         "flash_new_tokens": r["flash_new_tokens"], "plain_seconds": r["plain_seconds"],
         "flash_seconds": r["flash_seconds"], "steps": r["steps"]}
        for r in summary
    ]


def plot_png(summary: list[dict], setup: dict) -> bytes:
    """PNG bytes (matplotlib, Agg canvas; pyplot's global state untouched): tokens/s of plain ``generate`` and
    flashspec per category with the speed-up above each pair, and τ per category against its ceiling γ + 1."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    categories = [r["domain"] for r in summary]
    x = range(len(categories))
    fig = Figure(figsize=(4 + 1.6 * len(categories), 4), layout="constrained")
    FigureCanvasAgg(fig)
    speed, tau = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    plain = [r["plain_tok_s"] for r in summary]
    flash = [r["flashspec_tok_s"] for r in summary]
    speed.bar([i - 0.2 for i in x], plain, 0.4, label="plain generate", color="0.6")
    bars = speed.bar([i + 0.2 for i in x], flash, 0.4, label="flashspec", color="tab:blue")
    for bar, r in zip(bars, summary, strict=True):
        speed.annotate(f"{r['speedup']:.2f}×", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                       ha="center", va="bottom", fontsize=8)
    speed.set_xticks(list(x), categories)
    speed.set_ylabel("tokens/s")
    speed.set_ylim(0, max(plain + flash) * 1.3)
    speed.legend(loc="upper center", ncols=2, fontsize=8)
    speed.set_title("throughput (batch 1)", fontsize=10)
    tau.bar(list(x), [r["tau"] for r in summary], 0.6, color="tab:orange")
    gamma = setup["num_assistant_tokens"]
    tau.axhline(gamma + 1, color="0.3", linestyle="--", linewidth=1, label=f"ceiling γ+1 = {gamma + 1}")
    tau.axhline(1, color="0.6", linestyle=":", linewidth=1, label="1 (no draft accepted)")
    tau.set_xticks(list(x), categories)
    tau.set_ylabel("τ (tokens per step)")
    tau.set_ylim(0, gamma + 2)
    tau.legend(loc="upper center", fontsize=8)
    tau.set_title("τ, bonus token included", fontsize=10)
    decoding = "greedy" if not setup.get("do_sample") else f"T={setup.get('temperature')}"
    fig.suptitle(f"{Path(setup['target']).name}, {setup['device']} {setup['dtype']}, γ={gamma}, "
                 f"{setup['selector']}, {setup['max_new_tokens']} new tokens, {decoding}", fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    return buffer.getvalue()


def write_outputs(evaluation: Evaluation, output_dir: str | os.PathLike, plot: bool = True) -> dict[str, Path]:
    """Write :data:`OUTPUT_FILES` into ``output_dir`` (created if needed). Every file is rendered in memory first,
    then each is written to a temporary file in ``output_dir`` and renamed over its final name (``os.replace``),
    so a file is either absent, its previous version, or complete. Returns name -> path."""
    payloads = {
        "results.json": json.dumps(evaluation.to_dict(), indent=1, ensure_ascii=False).encode() + b"\n",
        "prompts.csv": _csv(_prompt_csv_rows(evaluation.prompts)).encode(),
        "summary.csv": _csv(_summary_csv_rows(evaluation.summary)).encode(),
        "summary.md": evaluation.markdown().encode() + b"\n",
    }
    if plot:
        payloads["plot.png"] = plot_png(evaluation.summary, evaluation.setup)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, payload in payloads.items():
        written[name] = _atomic_write(out / name, payload)
    return written


def _atomic_write(path: Path, payload: bytes) -> Path:
    """``payload`` to a temporary file beside ``path``, flushed to disk, then renamed to ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> what open() would have made
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
