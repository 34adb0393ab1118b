"""flashspec_hf.evaluate and flashspec-eval: metrics per category, the files written, bad input refused before any
model runs or file is written, atomic writes, and the CLI end to end on the real SmolLM2 target."""

import csv
import json
import re

import pytest
import torch
from datasets import Dataset, DatasetDict

import flashspec_hf
from flashspec_hf import eval_cli
from flashspec_hf.evaluation import report as evaluation_report
from flashspec_hf.evaluation.report import OUTPUT_FILES, Evaluation, markdown_table, summarize
from flashspec_hf.evaluation.run import evaluate

NO_PROMPT_COLUMN = r"no prompt column 'prompt'; the dataset's columns are \['text', 'topic'\]: name the one"
PROMPTS = ["w5 w17 w33 w8", "w40 w41 w42", "w9 w60 w3 w77 w12", "w20 w21"]


class Untouchable:
    """A model / tokenizer stand-in that fails the test if anything reads it: input checks must come first."""

    def __getattr__(self, name):
        raise AssertionError(f"the model was used ({name}) before the input was checked")

    def __call__(self, *args, **kwargs):
        raise AssertionError("the model was called before the input was checked")


def _run_untouched(data, tmp_path, **kwargs):
    out = tmp_path / "out"
    try:
        evaluate(Untouchable(), Untouchable(), [Untouchable()], data, output_dir=out, progress=False, **kwargs)
    finally:
        assert not out.exists(), "a failed evaluation left files behind"


def test_evaluate_metrics_and_files(tmp_path, target, assistants, tokenizer):
    data = Dataset.from_dict({"text": PROMPTS + ["w30 w31 w32"], "category": ["x", "y", "x", "y", "x"]})
    out = tmp_path / "out"
    report = evaluate(target, tokenizer, assistants, data, prompt_column="text", num_prompts=2, max_new_tokens=8,
                      gamma=3, output_dir=out, progress=False)
    assert [r["domain"] for r in report.summary] == ["x", "y", "all"]  # 'category' column found, 'x' trimmed to 2
    assert [p["prompt"] for p in report.prompts] == [PROMPTS[0], PROMPTS[1], PROMPTS[2], PROMPTS[3]]
    by = {r["domain"]: r for r in report.summary}
    assert by["all"]["prompts"] == 4 and by["all"]["identical"] == 4  # greedy fp32: identical to plain generate
    assert all(p["divergence"] is None and p["flash_new_tokens"] == 8 for p in report.prompts)
    # τ of a category = its prompts' steps pooled: (accepted + 1) averaged over steps
    steps = [n for p in report.prompts if p["domain"] == "x" for n in p["accepted"]]
    assert by["x"]["tau"] == pytest.approx(sum(n + 1 for n in steps) / len(steps))
    assert 1.0 <= by["all"]["tau"] <= 4.0 and set(by["all"]["alpha"]) <= set(report.prompts[0]["arm_names"])
    assert by["y"]["plain_tok_s"] == pytest.approx(by["y"]["plain_new_tokens"] / by["y"]["plain_seconds"])
    assert by["all"]["speedup"] == pytest.approx(by["all"]["flashspec_tok_s"] / by["all"]["plain_tok_s"])
    assert report.setup["num_assistant_tokens"] == 3 and report.setup["category_column"] == "category"

    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)  # and no temporary file left
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(report.to_dict()))
    with (out / "prompts.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["category"] for r in rows] == ["x", "y", "x", "y"] and rows[2]["prompt"] == PROMPTS[2]
    assert float(rows[0]["tau"]) == pytest.approx(report.prompts[0]["tau"])
    with (out / "summary.csv").open() as f:
        summary = list(csv.DictReader(f))
    assert [r["category"] for r in summary] == ["x", "y", "all"] and summary[2]["identical"] == "4"
    assert (out / "summary.md").read_text() == report.markdown() + "\n"
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = report.markdown()
    assert "| all | 4 |" in table and table.rstrip().endswith("| 4/4 |") and "differ" not in table


def test_jsonl_without_category_is_one_category(tmp_path, target, assistants, tokenizer):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS[:2]))
    report = flashspec_hf.evaluate(target, tokenizer, assistants, path, max_new_tokens=4, do_sample=True,
                                   temperature=0.9, selector="round_robin", output_dir=tmp_path / "o", plot=False,
                                   progress=False)
    assert [(r["domain"], r["prompts"]) for r in report.summary] == [("all", 2)]
    assert all(p["divergence"] is None for p in report.prompts)  # sampling: no divergence to explain
    assert not (tmp_path / "o" / "plot.png").exists() and (tmp_path / "o" / "results.json").exists()
    assert "identical" not in report.markdown() and "sampling T=0.9" in report.markdown()
    assert report.setup["data_files"] == [str(path)] and report.setup["category_column"] is None


@pytest.mark.parametrize(
    "data, kwargs, match",
    [
        (Dataset.from_dict({"text": ["a"], "label": [1]}), {},
         r"no prompt column 'prompt'; the dataset's columns are \['text', 'label'\].*prompt_column"),
        (Dataset.from_dict({"prompt": []}), {}, r"the dataset is empty"),
        (Dataset.from_dict({"prompt": [1, 2]}), {}, r"must hold strings; rows 0, 1 \(counted from 0\) hold \['int'\]"),
        (Dataset.from_dict({"prompt": ["a", None]}), {}, r"must hold strings; rows 1 \(counted from 0\) hold \['NoneType'\]"),
        (Dataset.from_dict({"prompt": ["a", " \n"]}), {}, r"empty prompts .* rows 1"),
        (Dataset.from_dict({"prompt": ["a"], "domain": ["c"]}), {"category_column": "topic"},
         r"no category column 'topic'; the dataset's columns are \['prompt', 'domain'\].*category_column"),
        (Dataset.from_dict({"prompt": ["a", "b"], "domain": ["c", None]}), {}, r"missing or empty category in rows 1"),
        (Dataset.from_dict({"prompt": ["a", "b"], "domain": ["c", "all"]}), {}, r"category 'all'.*rename"),
        (DatasetDict({"test": Dataset.from_dict({"prompt": ["a"]})}), {}, r"pass one split, e.g. data\['test'\]"),
        (Dataset.from_dict({"prompt": ["a"]}), {"num_prompts": 0}, r"num_prompts must be at least 1"),
        (Dataset.from_dict({"prompt": ["a"]}), {"gamma": 0}, r"gamma must be a positive integer"),
        (Dataset.from_dict({"prompt": ["a"]}), {"selector": "best"}, r"unknown selector 'best'"),
        (Dataset.from_dict({"prompt": ["a"]}), {"do_sample": True, "temperature": 0.0}, r"temperature must be > 0"),
    ],
)
def test_bad_datasets_fail_before_any_model_or_file(tmp_path, data, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _run_untouched(data, tmp_path, **kwargs)


@pytest.mark.parametrize(
    "name, text, kwargs, match",
    [
        ("empty.jsonl", "", {}, r"empty file"),
        ("blank.csv", "\n  \n", {}, r"empty file"),
        ("header.csv", "prompt,domain\n", {}, r"hold no rows"),
        ("p.txt", "hello\n", {}, r"cannot tell the format.*data_format"),
        ("p.csv", "text,topic\nhi,a\n", {}, NO_PROMPT_COLUMN),
        ("p.jsonl", '{"prompt": "a"}\n', {"data_format": "xml"}, r"unknown data format 'xml'"),
        ("p.jsonl", '{"prompt": "a"\n', {}, r"p.jsonl line 1: not valid JSON \(Expecting ',' delimiter, column 15\)"),
        ("p.json", '[{"prompt": "a"}, "b"]', {}, r"p.json item 2: a JSON string, not an object"),
        ("p.csv", 'prompt,domain\na,b\n"c,d\n', {}, r"p.csv line 3: unexpected end of data"),
        ("p.csv", "prompt,domain\na,b\n\nc,d,e\n", {}, r"p.csv line 4: 3 fields, the header has 2"),
        ("p.jsonl", '{"prompt": "a"}\n', {"split": "test"}, r"could not read .* split 'test' \(ValueError: Unknown"),
    ],
)
def test_bad_files_fail_before_any_model_or_file(tmp_path, name, text, kwargs, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        _run_untouched(path, tmp_path, **kwargs)


def test_missing_file_and_output_path_that_is_a_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        _run_untouched(tmp_path / "nope.jsonl", tmp_path)
    (tmp_path / "taken").write_text("keep")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        evaluate(Untouchable(), Untouchable(), [Untouchable()], Dataset.from_dict({"prompt": ["a"]}),
                 output_dir=tmp_path / "taken")
    assert (tmp_path / "taken").read_text() == "keep"


def test_a_run_that_fails_midway_writes_nothing(tmp_path, target, assistants, tokenizer):
    out = tmp_path / "out"
    # num_beams=2 passes the input checks and plain generate, then flashspec refuses it on the first prompt
    with pytest.raises(ValueError, match="num_beams"):
        evaluate(target, tokenizer, assistants, Dataset.from_dict({"prompt": PROMPTS[:1]}), max_new_tokens=4,
                 num_beams=2, output_dir=out, progress=False)
    assert not out.exists()


def test_writes_are_atomic(tmp_path, monkeypatch):
    results = [{"domain": "c", "prompt": "p", "index": 0, "prompt_tokens": 2, "plain_new_tokens": 4,
                "plain_seconds": 1.0, "flash_new_tokens": 4, "flash_seconds": 0.5, "plain_tok_s": 4.0,
                "flash_tok_s": 8.0, "speedup": 2.0, "tau": 2.0, "alpha": {"a": 0.5}, "arm_share": {"a": 1.0},
                "identical": True, "divergence": None, "steps": 2, "accepted": [1, 1], "arms": [0, 0],
                "step_gammas": [4, 4], "arm_names": ["a"], "gamma": 4}]
    setup = {"target": "t", "device": "cpu", "dtype": "float32", "num_assistant_tokens": 4, "selector": "fixed",
             "max_new_tokens": 4, "do_sample": False, "torch": "x", "transformers": "y"}
    report = Evaluation(setup, summarize(results), results)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("previous")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(evaluation_report.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        evaluation_report.write_outputs(report, out)
    assert [p.name for p in out.iterdir()] == ["results.json"]  # no temporary file left over
    assert (out / "results.json").read_text() == "previous"

    monkeypatch.undo()
    monkeypatch.setattr(evaluation_report, "plot_png", lambda *a: 1 / 0)  # rendering fails: nothing is written at all
    with pytest.raises(ZeroDivisionError):
        evaluation_report.write_outputs(report, tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()
    assert set(evaluation_report.write_outputs(report, out, plot=False)) == set(OUTPUT_FILES) - {"plot.png"}
    assert json.loads((out / "results.json").read_text())["summary"][0]["tau"] == 2.0


def test_markdown_lists_greedy_divergences():
    base = dict(plain_new_tokens=8, plain_seconds=1.0, flash_new_tokens=8, flash_seconds=1.0, steps=2,
                arm_names=["a"], gamma=4, accepted=[3, 3], arms=[0, 0], step_gammas=[4, 4], domain="code")
    prompts = [{**base, "index": 0, "identical": True, "divergence": None},
               {**base, "index": 1, "identical": False, "divergence": {"position": 5, "margin": 0.0625}},
               {**base, "index": 2, "identical": False, "divergence": None, "flash_new_tokens": 6}]
    setup = {"target": "t", "device": "cpu", "dtype": "bfloat16", "num_assistant_tokens": 4, "selector": "fixed",
             "max_new_tokens": 8, "do_sample": False, "torch": "x", "transformers": "y"}
    table = markdown_table(summarize(prompts), setup, prompts)
    assert "| code | 3 | 8.0 | 7.3 | 0.92× | 4.00 | 0.75 (100%) | 1/3 |" in table
    assert "- prompt 1 (code): first differs at new token 5, target's top-2 logit margin 0.062" in table
    assert "- prompt 2 (code): one output is a prefix of the other (8 plain, 6 flashspec tokens)" in table


def _no_models(args):
    raise AssertionError("models loaded before the input was checked")


@pytest.mark.parametrize(
    "name, text, extra, match",
    [
        ("p.csv", "text,topic\nhi,a\n", [], NO_PROMPT_COLUMN),
        ("p.jsonl", "", [], r"empty file"),
        ("p.jsonl", '{"prompt": "a", "domain": "c"}\n', ["--category-column", "topic"], r"no category column 'topic'"),
        ("p.jsonl", '{"prompt": 5}\n', [], r"must hold strings"),
        ("p.jsonl", '{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c"\n', [], r"p.jsonl line 3: not valid JSON"),
    ],
)
def test_cli_refuses_bad_input_before_loading_models(tmp_path, monkeypatch, capsys, name, text, extra, match):
    monkeypatch.setattr(eval_cli, "load_models", _no_models)
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        eval_cli.main(["--data-files", str(path), "--output-dir", str(out), *extra])
    assert exit_info.value.code == 2 and isinstance(exit_info.value.__cause__, ValueError) and not out.exists()
    captured = capsys.readouterr()
    assert captured.out == "" and re.match(r"flashspec-eval: error: .*" + match, captured.err)
    assert captured.err.count("\n") == 1  # one line, no traceback


def test_cli_argument_errors(capsys):
    for argv in (["--prompts-from", "files"], ["--prompts-from", "builtin", "--data-files", "x.jsonl"]):
        with pytest.raises(SystemExit) as exit_info:
            eval_cli.parse_args(argv)
        assert exit_info.value.code == 2
    assert "--prompts-from files needs --data-files" in capsys.readouterr().err
    assert eval_cli.parse_args(["--data-files", "x.csv"]).prompts_from == "files"
    assert eval_cli.parse_args([]).prompts_from == "builtin"


def test_cli_on_a_csv_file(tmp_path, monkeypatch, capsys, target, assistants, tokenizer):
    monkeypatch.setattr(eval_cli, "load_models", lambda args: (target, tokenizer, assistants))
    path = tmp_path / "prompts.data"
    path.write_text("topic,text\n" + "".join(f"{'ab'[i % 2]},{p}\n" for i, p in enumerate(PROMPTS)))
    out = tmp_path / "out"
    eval_cli.main(["--data-files", str(path), "--format", "csv", "--prompt-column", "text", "--category-column",
                   "topic", "--num-prompts", "1", "--max-new-tokens", "6", "--output-dir", str(out), "--no-plot"])
    table = capsys.readouterr().out
    assert "| a | 1 |" in table and "| b | 1 |" in table and "| all | 2 |" in table and "2/2 |" in table
    results = json.loads((out / "results.json").read_text())
    assert results["setup"]["category_column"] == "topic" and results["setup"]["data_files"] == [str(path)]
    assert [p["prompt"] for p in results["prompts"]] == PROMPTS[:2]
    assert sorted(p.name for p in out.iterdir()) == sorted(set(OUTPUT_FILES) - {"plot.png"})


@pytest.mark.slow
def test_cli_on_the_real_target_with_builtin_prompts(tmp_path, capsys):
    out = tmp_path / "eval"
    eval_cli.main(["--num-prompts", "1", "--max-new-tokens", "8", "--output-dir", str(out)])
    table = capsys.readouterr().out
    lines = table.splitlines()
    assert "SmolLM2-135M-Instruct" in lines[0] and "greedy" in lines[0] and "load average" in lines[1]
    assert lines[3].startswith("| category | prompts | plain tok/s | flashspec tok/s | speedup | τ | smollm2-chat α")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[5:] if line.startswith("|")}
    assert list(rows) == ["chat", "code", "all"]
    assert rows["chat"].endswith("| 1/1 |") and rows["code"].endswith("| 1/1 |") and rows["all"].endswith("| 2/2 |")
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)
    results = json.loads((out / "results.json").read_text())
    assert [p["domain"] for p in results["prompts"]] == ["chat", "code"]
    assert all(p["identical"] and p["divergence"] is None and p["flash_new_tokens"] == 8 for p in results["prompts"])
    assert results["prompts"][0]["flash_text"] == results["prompts"][0]["plain_text"]
    assert results["setup"]["assistants"] == ["smollm2-chat", "smollm2-code", "smollm2-general", "prompt_lookup", "plain"]
    assert (out / "summary.md").read_text() == table
    with (out / "prompts.csv").open() as f:
        assert [r["identical"] for r in csv.DictReader(f)] == ["True", "True"]
    assert (out / "plot.png").stat().st_size > 10_000


def test_summary_alpha_uses_each_arms_own_gamma():
    """An arm with γ = 2 that accepted both drafts tested 2 tokens, not the largest γ's 4."""
    row = dict(domain="d", plain_new_tokens=6, plain_seconds=1.0, flash_new_tokens=6, flash_seconds=1.0,
               identical=True, arms=[0, 1], accepted=[2, 4], arm_names=["a@2", "a@4"], gamma=4, arm_gammas=[2, 4],
               step_gammas=[2, 4])
    (summary, _) = summarize([row])
    assert summary["alpha"] == {"a@2": 1.0, "a@4": 1.0}


def test_a_selector_instance_learns_across_prompts(target, assistants, tokenizer):
    """A Selector passed in keeps its statistics from prompt to prompt (the CLIs' default); a name starts afresh."""
    data = Dataset.from_dict({"prompt": PROMPTS})
    selector = flashspec_hf.SELECTORS["cost_aware_discounted_thompson"]()
    report = evaluate(target, tokenizer, assistants, data, max_new_tokens=8, selector=selector, progress=False,
                      setup={"selector": "cost_aware_discounted_thompson (one for all prompts)"})
    assert sum(selector.chosen) == sum(p["steps"] for p in report.prompts)  # every prompt's steps, not the last's
    assert report.setup["selector"] == "cost_aware_discounted_thompson (one for all prompts)"
    assert selector.discount == 0.99 and selector.cost_aware


def test_the_warm_up_has_the_runs_settings_and_leaves_the_random_state(monkeypatch, target, assistants, tokenizer):
    """The untimed warm-up calls run with the run's settings (flashspec's with a copy of its selector): on CUDA the
    static loop's graphs follow max_new_tokens and the sampling settings, and a warm-up with others left their
    compilation to the first timed prompt (minutes on an H100). They restore the random state, so the timed calls of
    a seeded run sample what they would without them. On the CPU only the first prompt is warmed up."""
    calls = []
    generate = target.generate

    def recording(*args, **kwargs):
        calls.append(({k: v for k, v in kwargs.items() if k not in ("input_ids", "attention_mask")},
                      torch.random.get_rng_state()))
        return generate(*args, **kwargs)

    monkeypatch.setattr(target, "generate", recording)
    selector = flashspec_hf.SELECTORS["cost_aware_discounted_thompson"]()
    data = Dataset.from_dict({"prompt": PROMPTS[:2]})
    report = evaluate(target, tokenizer, assistants, data, max_new_tokens=6, do_sample=True, temperature=0.7,
                      gamma=3, selector=selector, progress=False)
    (warm_plain, seeded), (warm_flash, _), (plain, after_warm_up), (flash, _), *second = calls
    assert len(second) == 2, "the second prompt is not warmed up on the CPU"
    assert warm_plain == plain and torch.equal(seeded, after_warm_up)
    assert warm_flash.pop("selector") is not selector and flash.pop("selector") is selector
    assert warm_flash == flash
    first, rest = report.prompts
    assert len(first["warm_up_call_seconds"]) == 2 and min(first["warm_up_call_seconds"]) > 0
    assert rest["warm_up_call_seconds"] is None
