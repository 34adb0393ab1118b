"""flashspec-demo and flashspec-eval on bad input (the same one-line errors, before any model loads), on prompt files
(the chat template by default, --raw-prompts), the demo's table width, and --model / --dtype / --assistants (each
model's drafts chosen for it)."""

import copy
import json
import re

import pytest
import torch
from datasets import Dataset

from flashspec_hf import cli, demo, eval_cli
from flashspec_hf.evaluation.inputs import chat_formatted
from flashspec_hf.models import PRESETS

CLIS = {"flashspec-demo": (demo, "--prompts"), "flashspec-eval": (eval_cli, "--data-files")}
TEMPLATE = ("{% for m in messages %}<s> w3 {{ m['content'] }} </s>{% endfor %}"
            "{% if add_generation_prompt %} w4{% endif %}")
"""A chat template for the word-level tokenizer: a user turn is ``<s> w3 CONTENT </s>``, the reply starts with w4."""


def _no_models(args):
    raise AssertionError("models loaded before the input was checked")


def _refused(cli: str, argv: list[str], monkeypatch, capsys) -> str:
    """Run a CLI that must refuse ``argv`` before loading any model; returns its one line on stderr."""
    module, _ = CLIS[cli]
    monkeypatch.setattr(module, "load_models", _no_models)
    with pytest.raises(SystemExit) as exit_info:
        module.main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err  # one line, no traceback
    assert captured.err.startswith(f"{cli}: error: ")
    return captured.err


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize(
    "argv, match",
    [
        (["--max-new-tokens", "0"], r"argument --max-new-tokens: must be at least 1, got 0 \(see .* --help\)"),
        (["--num-prompts", "0"], r"argument --num-prompts: must be at least 1, got 0"),
        (["--gamma", "two"], r"argument --gamma: 'two' is not a whole number"),
        (["--do-sample", "--temperature", "0"], r"argument --temperature: must be above 0, got 0.0"),
        (["--assistants", "early-exit", "--depths", "2,x"], r"argument --depths: give layer counts .* got '2,x'"),
        (["--selector", "best"], r"argument --selector: invalid choice: 'best'"),
        (["--num-prompts", "500"], r"--num-prompts 500: the built-in prompts have 164 per domain; ask for at most"),
        (["--temperature", "0.5"], r"--temperature goes with --do-sample"),
        (["--model", "./no-such-folder"], (r"--model ./no-such-folder: no such folder; give a folder with a model, a "
                                           r"hub name or a preset \(smollm2-135m")),
        pytest.param(["--device", "cuda"], r"--device cuda: this torch has no CUDA device",
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is there")),
        (["--device", "gpu"], r"--device gpu: not a torch device; give cpu, cuda or cuda:N"),
        (["--depths", "2,4"], (r"--depths sets early-exit drafts, but smollm2-135m runs its distilled drafts here: "
                               r"use --assistants early-exit")),
        (["--prompt-column", "question"], r"--prompt-column describe prompt files: give the files with"),
    ],
)
def test_bad_options_are_refused_in_one_line_before_any_model_loads(cli, argv, match, monkeypatch, capsys):
    assert re.search(match, _refused(cli, argv, monkeypatch, capsys))


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize(
    "name, text, match",
    [
        ("prompts.jsonl", '{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "c"\n',
         r"prompts.jsonl line 3: not valid JSON \(Expecting ',' delimiter"),
        ("prompts.jsonl", '{"prompt": "a"}\n["b"]\n', r"prompts.jsonl line 2: a JSON list, not an object"),
        ("prompts.csv", "prompt,domain\na,b\nc, d,e\n", r"prompts.csv line 3: 3 fields, the header has 2"),
        ("prompts.jsonl", '{"text": "a"}\n', r"no prompt column 'prompt'; the dataset's columns are \['text'\]"),
        ("prompts.jsonl", "", r"empty file"),
        ("prompts.jsonl", '{"prompt": 3}\n', r"column 'prompt' must hold strings"),
        ("missing.jsonl", None, r"data files not found"),
    ],
)
def test_bad_prompt_files_are_refused_in_one_line_naming_the_line(cli, name, text, match, tmp_path, monkeypatch,
                                                                  capsys):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    _, option = CLIS[cli]
    assert re.search(match, _refused(cli, [option, str(path), "--max-new-tokens", "4"], monkeypatch, capsys))


@pytest.mark.parametrize("cli", CLIS)
def test_prompt_file_options_reach_both_clis(cli, tmp_path, monkeypatch, capsys):
    """--format, --prompt-column and --category-column, which the file errors name, are options of both CLIs: a
    file that needs all three passes the checks (and reaches the model loading)."""
    path = tmp_path / "prompts.txt"
    path.write_text('{"question": "a", "topic": "t", "domain": ""}\n')  # an empty domain: refused if it is read

    def loaded(args):
        raise RuntimeError("the input passed")

    module, option = CLIS[cli]
    monkeypatch.setattr(module, "load_models", loaded)
    argv = [option, str(path), "--format", "json", "--prompt-column", "question", "--category-column", "topic"]
    with pytest.raises(RuntimeError, match="the input passed"):
        module.main([*argv, "--output-dir", str(tmp_path / "out")] if cli == "flashspec-eval" else argv)
    assert re.search(r"missing or empty category in rows 0 \(counted from 0\) of column 'domain'",
                     _refused(cli, argv[:6], monkeypatch, capsys))  # without --category-column: 'domain'


@pytest.mark.parametrize("cli", CLIS)
def test_sampling_temperature_defaults_to_0_7(cli):
    module, _ = CLIS[cli]
    assert module.parse_args(["--do-sample"]).temperature == 0.7
    assert module.parse_args(["--do-sample", "--temperature", "1.5"]).temperature == 1.5


def test_chat_formatted_wraps_plain_prompts_only(tokenizer):
    prompts = Dataset.from_dict({"prompt": ["w5 w6", "<s> w3 w7 </s> w4"], "domain": ["a", "b"]})
    assert chat_formatted(prompts, tokenizer) == (prompts, 0)  # no chat template: a base model's tokenizer
    chat = copy.deepcopy(tokenizer)
    chat.chat_template = TEMPLATE
    formatted, wrapped = chat_formatted(prompts, chat)
    assert wrapped == 1 and formatted["prompt"] == ["<s> w3 w5 w6 </s> w4", "<s> w3 w7 </s> w4"]
    assert formatted["domain"] == ["a", "b"]


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize("raw", [False, True])
def test_file_prompts_get_the_chat_template_unless_raw(cli, raw, tmp_path, monkeypatch, capsys, target, assistants,
                                                       tokenizer):
    chat = copy.deepcopy(tokenizer)
    chat.chat_template = TEMPLATE
    module, option = CLIS[cli]
    monkeypatch.setattr(module, "load_models", lambda args: (target, chat, assistants))
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "w5 w6", "domain": "x"}) + "\n")
    argv = [option, str(path), "--max-new-tokens", "4", *(["--raw-prompts"] if raw else [])]
    if cli == "flashspec-eval":
        module.main([*argv, "--output-dir", str(tmp_path / "out"), "--no-plot"])
        results = json.loads((tmp_path / "out" / "results.json").read_text())
        assert results["prompts"][0]["prompt"] == ("w5 w6" if raw else "<s> w3 w5 w6 </s> w4")
        err = capsys.readouterr().err
    else:
        module.main([*argv, "--json"])
        captured = capsys.readouterr()
        results, err = json.loads(captured.out), captured.err  # the demo's JSON holds no prompt text
    if raw:
        assert results["setup"]["prompt_format"] == "as written (--raw-prompts)" and "chat template" not in err
    else:
        wrapped = "chat template for 1 of 1 (the others hold special tokens already)"
        assert results["setup"]["prompt_format"] == wrapped
        assert "1 of 1 prompts from" in err and "--raw-prompts sends them as written" in err


def test_help_says_how_file_prompts_are_sent(capsys):
    for module, _ in CLIS.values():
        with pytest.raises(SystemExit):
            module.parse_args(["--help"])
        assert "--raw-prompts" in capsys.readouterr().out.replace("\n", " ")


def test_the_demo_table_fits_a_terminal_with_every_figure():
    arms = ["smollm2-chat", "smollm2-code", "smollm2-general", "prompt_lookup"]
    rows = [
        {"domain": domain, "prompts": 3, "plain_tok_s": 17.0 + i, "flashspec_tok_s": 27.3 + i, "speedup": 1.61 + i,
         "tau": 3.03, "identical": 3, "alpha": {a: 0.1 * (j + 1) + i for j, a in enumerate(arms[:3])},
         "arm_share": {a: 0.25 for a in arms}}
        for i, domain in enumerate(["chat", "code", "all"])
    ]
    setup = {"target": "/root/.cache/flashspec_hf/SmolLM2-135M-Instruct", "device": "cpu", "dtype": "float32",
             "num_assistant_tokens": 4, "selector": "cost_aware_discounted_thompson (one for all prompts)",
             "max_new_tokens": 48, "torch": "2.13.0+cpu", "transformers": "5.24.0", "omp_wait_policy": "PASSIVE",
             "load_average_before_after": [1.23, 0.98], "warm_up_call_seconds": [3.21, 4.56]}
    for greedy in (True, False):
        lines = demo.format_table(rows, setup, greedy=greedy).splitlines()
        assert max(map(len, lines)) <= 100
        assert ("OpenMP threads wait passively, 1-min load average 1.23 before, 0.98 after; untimed warm-up calls "
                "3.2 s plain, 4.6 s flashspec") in " ".join(lines)
        table = [line.split() for line in lines[lines.index("") + 2:]]
        assert len(table) == len(rows) * len(arms)  # one line per domain × arm
        for i, row in enumerate(rows):
            first = table[i * len(arms)]
            assert first[:6] == [row["domain"], "3", f"{17.0 + i:.1f}", f"{27.3 + i:.1f}", f"{1.61 + i:.2f}x", "3.03"]
            assert (first[6] == "3/3") == greedy
            for j, arm in enumerate(arms):
                alpha = "-" if arm == "prompt_lookup" else f"{0.1 * (j + 1) + i:.2f}"
                assert table[i * len(arms) + j][-3:] == [arm, alpha, "25%"]


QWEN = "qwen2.5-coder-1.5b"


@pytest.mark.parametrize("module", [demo, eval_cli])
def test_model_and_dtype_reach_load_target_and_drafts_are_chosen_per_model(module, monkeypatch):
    args = module.parse_args(["--model", QWEN, "--dtype", "bfloat16"])
    assert (args.model, args.dtype, args.assistants, args.depths) == (QWEN, "bfloat16", "auto", None)
    seen = []

    def load_target(name, dtype, device):
        seen.append((name, dtype))
        raise OSError("stop here")

    monkeypatch.setattr(cli, "load_target", load_target)
    with pytest.raises(OSError, match="stop here"):
        cli.load_models(args)
    assert seen == [(QWEN, torch.bfloat16)]
    assert module.parse_args([]).model == "smollm2-135m"


def test_choose_assistants():
    assert cli.choose_assistants(QWEN, "auto", None) == ("distilled", ("qwen-coder-code",))
    assert cli.choose_assistants(QWEN, "early-exit", None) == ("early-exit", PRESETS[QWEN].early_exit_depths)
    assert cli.choose_assistants(QWEN, "early-exit", (2, 6)) == ("early-exit", (2, 6))
    with pytest.raises(ValueError, match="--depths sets early-exit drafts, but smollm2-135m runs its distilled"):
        cli.choose_assistants("smollm2-135m", "auto", (2, 6))  # ignored until 2026-12-07
    assert cli.choose_assistants("smollm2-135m", "early-exit", None) == ("early-exit", (2, 4, 8))
    assert cli.choose_assistants("org/other-model", "auto", None) == ("early-exit", (2, 4, 8))
    with pytest.raises(ValueError, match="no distilled drafts are bundled for org/other-model: use --assistants early"):
        cli.choose_assistants("org/other-model", "distilled", None)


def test_distilled_drafts_for_a_model_without_them_are_refused_before_it_loads(monkeypatch, capsys):
    monkeypatch.setattr(cli, "load_target", lambda *a, **k: pytest.fail("the target was loaded"))
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--model", "org/other-model", "--assistants", "distilled", "--num-prompts", "1"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("flashspec-demo: error: no distilled drafts are bundled for org/other-model: "
                                       "use --assistants early-exit (or auto) (see flashspec-demo --help)\n")
