"""The demo end to end on the real target (JSON output); its bad input is tested with flashspec-eval's in
test_cli.py."""

import json

import pytest
import torch

from flashspec_hf.demo import format_table, main
from flashspec_hf.evaluation.report import summarize
from flashspec_hf.evaluation.run import first_divergence

from .conftest import tiny_llama


@pytest.mark.slow
def test_demo_json_on_real_prompts(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "def square(x):\n    return", "domain": "code"}) + "\n"
        + json.dumps({"prompt": "The weather today is", "domain": "prose"}) + "\n"
    )
    main(["--prompts", str(prompts), "--max-new-tokens", "8", "--prompt-lookup", "--json"])
    out = json.loads(capsys.readouterr().out)
    domains = {row["domain"]: row for row in out["summary"]}
    assert set(domains) == {"code", "prose", "all"}
    assert domains["all"]["identical"] == 2 and domains["all"]["tau"] >= 1.0
    assert "prompt_lookup" in domains["all"]["arm_share"]
    assert len(out["prompts"]) == 2 and all(p["divergence"] is None for p in out["prompts"])
    assert out["setup"]["selector"] == "cost_aware_discounted_thompson (one for all prompts)"
    assert [p["warm_up_call_seconds"] is None for p in out["prompts"]] == [False, True]  # on the CPU, the first prompt
    assert min(out["setup"]["warm_up_call_seconds"]) > 0
    table = format_table(out["summary"], out["setup"], greedy=True)
    assert "code" in table and "2/2" in table


def test_first_divergence_reports_the_margin():
    model = tiny_llama(layers=1, seed=3)
    plain = torch.tensor([[5, 6, 7, 8, 9]])
    assert first_divergence(model, plain, plain.clone(), 2) is None
    flash = plain.clone()
    flash[0, 3] = 40
    got = first_divergence(model, plain, flash, 2)
    with torch.no_grad():
        top2 = model(plain[:, :3]).logits[0, -1].topk(2).values
    assert got["position"] == 1 and got["margin"] == pytest.approx(float(top2[0] - top2[1]))


def test_summarize_groups_by_domain():
    base = dict(plain_new_tokens=10, plain_seconds=1.0, flash_new_tokens=10, flash_seconds=0.5, identical=True,
                divergence=None, steps=2, arm_names=["a", "b"], gamma=4)
    rows = summarize([{**base, "domain": "chat", "accepted": [4, 0, 0], "arms": [0, 1, 1], "step_gammas": [4, 4, 0]},
                      {**base, "domain": "code", "accepted": [2], "arms": [1], "step_gammas": [4]}])
    by = {r["domain"]: r for r in rows}
    assert by["chat"]["speedup"] == 2.0 and by["chat"]["tau"] == 7 / 3
    # b's step that drafted nothing (prompt lookup without a match) tests no draft token
    assert by["all"]["alpha"] == {"a": 1.0, "b": 2 / 4} and by["code"]["arm_share"] == {"a": 0.0, "b": 1.0}
