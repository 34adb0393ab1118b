"""Distillation on CPU with tiny models: trains, resumes, writes a from_pretrained folder and a compact draft."""

import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from flashspec_hf.compact import load_compact, save_compact
from flashspec_hf.distill import distill, frequent_tokens, make_draft, pack, target_continuations
from flashspec_hf.evaluation.run import acceptance

from .conftest import tiny_llama

TEXTS = [" ".join(f"w{(i * 7 + j * 3) % 90 + 3}" for j in range(40)) for i in range(60)]


def test_make_draft_copies_the_first_layers():
    target = tiny_llama(layers=3, seed=0)
    draft = make_draft(target, 2)
    assert torch.equal(draft.model.layers[1].mlp.up_proj.weight, target.model.layers[1].mlp.up_proj.weight)
    assert not draft.lm_head.weight.requires_grad and draft.model.layers[0].self_attn.q_proj.weight.requires_grad


def test_distill_trains_resumes_and_loads(tmp_path, tokenizer):
    target = tiny_llama(layers=3, seed=0, peak=4.0)
    assert pack(tokenizer, TEXTS, 16).shape[1] == 16
    out = distill(target, tokenizer, TEXTS, tmp_path / "d", num_layers=1, seq_len=16, batch_size=8, steps=6,
                  checkpoint_every=3, progress=False, card={"name": "d"})
    assert torch.load(out / "checkpoint.pt")["step"] == 6
    full = AutoModelForCausalLM.from_pretrained(out)
    assert full.config.num_hidden_layers == 1
    compact = load_compact(out / "compact", target)
    assert compact.lm_head is target.lm_head
    torch.testing.assert_close(compact.model.layers[0].mlp.up_proj.weight, full.model.layers[0].mlp.up_proj.weight,
                               atol=1e-3, rtol=1e-3)  # fp16 storage
    # a finished run resumes to the end without training again
    again = distill(target, tokenizer, TEXTS, tmp_path / "d", num_layers=1, seq_len=16, batch_size=8, steps=6,
                    progress=False)
    assert again == out
    stats = acceptance(target, tokenizer, compact, ["w5 w8 w11", "w40 w43"], max_new_tokens=8)
    assert stats["tau"] >= 1.0 and 0.0 <= stats["alpha"] <= 1.0


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path, tokenizer, monkeypatch):
    """Stopped after its step-3 checkpoint and run again, distillation ends where an uninterrupted run ends."""
    import flashspec_hf.distill as distill_module

    target = tiny_llama(layers=3, seed=0, peak=4.0)
    kwargs = dict(num_layers=1, seq_len=16, batch_size=8, steps=6, checkpoint_every=3, progress=False)
    whole = load_compact(distill(target, tokenizer, TEXTS, tmp_path / "whole", **kwargs) / "compact", target)
    clip, calls = distill_module.nn.utils.clip_grad_norm_, []

    def crash_at_step_4(*args, **kw):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return clip(*args, **kw)

    monkeypatch.setattr(distill_module.nn.utils, "clip_grad_norm_", crash_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        distill(target, tokenizer, TEXTS, tmp_path / "cut", **kwargs)
    assert torch.load(tmp_path / "cut" / "checkpoint.pt")["step"] == 3
    calls.clear()
    monkeypatch.setattr(distill_module.nn.utils, "clip_grad_norm_", lambda *a, **kw: calls.append(1) or clip(*a, **kw))
    resumed = load_compact(distill(target, tokenizer, TEXTS, tmp_path / "cut", **kwargs) / "compact", target)
    assert len(calls) == 3  # steps 4 to 6 only
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def _files(folder) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_folder_holding_another_run_is_refused_and_a_finished_run_left_alone(tmp_path, tokenizer, monkeypatch):
    """A finished or interrupted run made from other settings, another corpus or another target is refused before
    any training, naming what differs, and its folder is left as it was; the same finished run is not run again."""
    import flashspec_hf.distill as distill_module

    target = tiny_llama(layers=3, seed=0, peak=4.0)
    kwargs = dict(num_layers=1, seq_len=16, batch_size=8, steps=6, checkpoint_every=3, progress=False)
    out = distill(target, tokenizer, TEXTS, tmp_path / "d", card={"data": "first corpus"}, **kwargs)
    finished = _files(out)
    clip, calls = distill_module.nn.utils.clip_grad_norm_, []
    monkeypatch.setattr(distill_module.nn.utils, "clip_grad_norm_", lambda *a, **kw: calls.append(1) or clip(*a, **kw))
    other_target = tiny_llama(layers=3, seed=1, peak=4.0)
    for model, texts, change, match in [
        (target, TEXTS, {"steps": 8}, r"finished run made from other inputs: steps 6 there, 8 now"),
        (target, TEXTS, {"lr": 3e-3}, r"lr 0.001 there, 0.003 now"),
        (target, TEXTS[::-1], {}, r"another corpus"),
        (other_target, TEXTS, {}, r"another target"),
    ]:
        with pytest.raises(ValueError, match=match + r".*another folder, or delete"):
            distill(model, tokenizer, texts, out, card={"data": "second corpus"}, **{**kwargs, **change})
    assert _files(out) == finished and not calls
    assert distill(target, tokenizer, TEXTS, out, card={"data": "second corpus"}, **kwargs) == out
    assert _files(out) == finished and not calls  # finished: nothing trained, the card still names its corpus

    def crash_at_step_4(*args, **kw):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return clip(*args, **kw)

    monkeypatch.setattr(distill_module.nn.utils, "clip_grad_norm_", crash_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        distill(target, tokenizer, TEXTS, tmp_path / "cut", **kwargs)
    interrupted = _files(tmp_path / "cut")
    other_corpus = r"an interrupted run \(stopped after step 3\) made from other inputs: another corpus"
    with pytest.raises(ValueError, match=other_corpus):
        distill(target, tokenizer, TEXTS[::-1], tmp_path / "cut", **kwargs)
    assert _files(tmp_path / "cut") == interrupted
    loads, load = [], torch.load
    monkeypatch.setattr(distill_module.torch, "load", lambda *a, **kw: loads.append(kw) or load(*a, **kw))
    distill(target, tokenizer, TEXTS, tmp_path / "cut", **kwargs)  # the same inputs: resumes
    assert loads and all(kw.get("weights_only") is True for kw in loads)


def test_a_checkpoint_without_a_record_of_its_inputs_is_refused(tmp_path, tokenizer):
    target = tiny_llama(layers=3, seed=0, peak=4.0)
    kwargs = dict(num_layers=1, seq_len=16, batch_size=8, steps=3, progress=False)
    out = distill(target, tokenizer, TEXTS, tmp_path / "d", **kwargs)
    (out / "training.json").unlink()
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    del state["made_from"]
    torch.save(state, out / "checkpoint.pt")  # as flashspec_hf wrote them before it recorded the inputs
    with pytest.raises(ValueError, match=r"interrupted run \(stopped after step 3\) that does not record what it"):
        distill(target, tokenizer, TEXTS, out, **kwargs)


def test_the_distill_cli_checks_its_output_folder_before_loading_the_target(tmp_path, tokenizer, monkeypatch, capsys):
    import flashspec_hf.distill as distill_module

    target = tiny_llama(layers=3, seed=0, peak=4.0)
    out = distill(target, tokenizer, TEXTS, tmp_path / "d", num_layers=2, seq_len=16, batch_size=8, steps=3,
                  progress=False)
    monkeypatch.setattr(distill_module, "load_target", lambda *a, **kw: pytest.fail("the target was loaded"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        distill_module.main(["--domain", "chat", "--output", str(out), "--seq-len", "16", "--batch-size", "8"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flashspec-distill: error: ") and "steps 3 there, 4000 now" in err[0]


def test_target_continuations_batch_by_length_and_drop_long_prompts(tokenizer):
    target = tiny_llama(layers=2, seed=0, peak=4.0)
    prompts = ["w5 w8 w11 w14 w17", "w40", "w3 w4 w5 w6 w7 w8 w9 w10 w11", "w20 w21"]  # 5, 1, 9, 2 tokens
    out = target_continuations(target, tokenizer, prompts, max_new_tokens=3, batch_size=2, max_prompt_tokens=6)
    kept = ["w40", "w20 w21", prompts[0]]  # shortest first; the 9-token prompt is over the limit
    assert len(out) == 3 and all(o.startswith(p) and len(o) > len(p) for o, p in zip(out, kept, strict=True))


def test_distillation_raises_acceptance(tmp_path, tokenizer):
    """A draft trained on the target's own text must agree with it more than the untrained early exit."""
    target = tiny_llama(layers=3, seed=0, peak=4.0)
    prompts = ["w5 w8 w11", "w40 w43", "w60 w63 w66 w69"]
    before = acceptance(target, tokenizer, make_draft(target, 1).eval(), prompts, max_new_tokens=16)
    out = distill(target, tokenizer, TEXTS, tmp_path / "d", num_layers=1, seq_len=16, batch_size=16, steps=150,
                  lr=3e-3, progress=False)
    after = acceptance(target, tokenizer, load_compact(out / "compact", target), prompts, max_new_tokens=16)
    assert after["alpha"] > before["alpha"]


def test_distill_cli_on_the_real_target(tmp_path):
    """flashspec-distill end to end on SmolLM2 (tiny budget): a loadable folder, its card and a compact draft."""
    pytest.importorskip("chitchat_dataset")
    from flashspec_hf.distill import main
    from flashspec_hf.models import load_target

    out = tmp_path / "chat"  # the default recipe (no raw documents), on a tiny budget
    main(["--domain", "chat", "--output", str(out), "--steps", "2", "--self-generated", "6",
          "--batch-size", "2", "--seq-len", "32", "--device", "cpu"])
    assert "continuations (96 tokens) of 6 prompts" in json.loads((out / "training.json").read_text())["data"]
    assert (out / "README.md").read_text().startswith("---\nlibrary_name: transformers")
    target, _ = load_target()
    draft = load_compact(out / "compact", target)
    assert draft.config.num_hidden_layers == 2 and 0 < len(draft.draft_vocab_ids) < target.config.vocab_size
    assert AutoModelForCausalLM.from_pretrained(out).config.intermediate_size == 768


def test_loading_a_compact_draft_leaves_a_bf16_target_untouched(tmp_path):
    """The draft shares the target's modules: loading it must not cast them (fp32 rotary frequencies) or move them."""
    from safetensors.torch import save_file

    target = tiny_llama(layers=2, seed=0).to(torch.bfloat16)
    ids = torch.tensor([[5, 17, 33, 8, 90]])
    with torch.no_grad():
        before = target(ids).logits
    inv_freq = target.model.rotary_emb.inv_freq.clone()
    folder = save_compact(make_draft(target, 1), tmp_path / "c", torch.arange(0, 97, 2))
    save_file({"token_ids": torch.arange(0, 97, 2)}, folder / "vocab.safetensors")
    draft = load_compact(folder, target)
    assert target.model.rotary_emb.inv_freq.dtype == inv_freq.dtype and torch.equal(target.model.rotary_emb.inv_freq, inv_freq)
    with torch.no_grad():
        assert torch.equal(target(ids).logits, before)
    assert "draft_vocab_ids" in dict(draft.named_buffers()) and draft.lm_head.weight.shape[0] == 49


def test_teacher_topk_is_the_targets_renormalised_top_k():
    from flashspec_hf.distill import teacher_topk

    target = tiny_llama(layers=2, seed=0, peak=4.0)
    blocks = torch.randint(3, 90, (5, 12), generator=torch.Generator().manual_seed(0))  # [N, L]
    probs, ids = teacher_topk(target, blocks, k=7, batch_size=2)
    assert probs.shape == ids.shape == (5, 12, 7) and probs.dtype == torch.float16 and ids.dtype == torch.int32
    with torch.no_grad():
        top, idx = target(blocks).logits.topk(7, dim=-1)  # [N, L, 7]
    assert torch.equal(ids.long(), idx)
    torch.testing.assert_close(probs.float(), top.softmax(-1), atol=1e-3, rtol=1e-3)


def test_package_sources_skip_tests_by_their_place_in_site_packages(tmp_path, monkeypatch):
    """Test files, private and flashspec modules are skipped by their path inside site-packages: a venv that lives
    under a folder named like a test (a clone in /tmp/tests) still yields its packages."""
    import flashspec_hf.data

    root = tmp_path / "tests_clone" / "site-packages"
    files = {"pkg/mod.py": "kept", "pkg/tests/helpers.py": "test", "pkg/test_mod.py": "test",
             "_private/x.py": "private", "flashspec_hf/x.py": "own"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.setattr(flashspec_hf.data.sysconfig, "get_paths", lambda: {"purelib": str(root)})
    assert list(flashspec_hf.data._package_sources()) == ["kept"]


def test_function_prompts_are_humaneval_shaped():
    """Signature + docstring, ending where the body starts: the prompt plus an indented statement parses."""
    import ast

    from flashspec_hf.data import function_prompts

    prompts = function_prompts(40)
    assert len(prompts) == 40
    for prompt in prompts:
        last = prompt.rstrip("\n").rsplit("\n", 1)[-1]
        indent = last[: len(last) - len(last.lstrip())]  # the docstring's, i.e. the body's
        tree = ast.parse(prompt + indent + "pass\n")
        function = tree.body[0]
        assert isinstance(function, ast.FunctionDef) and len(ast.get_docstring(function)) >= 80


def test_the_draft_vocabulary_keeps_every_special_token(tokenizer):
    """An added special token the tokenizer does not name (as a chat template's end of turn in some conversions)."""
    from tokenizers import AddedToken

    tok = copy.deepcopy(tokenizer)
    tok.add_tokens([AddedToken("<|end|>", special=True)])
    end = tok.convert_tokens_to_ids("<|end|>")
    assert end not in tok.all_special_ids
    ids = frequent_tokens(tok, ["w5 w5 w6"], 2).tolist()
    assert ids == sorted({5, 6, 0, 1, 2, end})
