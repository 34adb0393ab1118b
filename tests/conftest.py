"""Shared fixtures: tiny random-weight Llama models (CPU, fp32), a word-level tokenizer for them, and the Triton
interpreter on CPU."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # what importing flashspec_hf sets on a busy CPU (openmp.py),
# here before torch loads OpenMP: spinning threads make every test many times slower on a shared CPU

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the Triton kernel runs on CPU tensors (before triton loads)

import pytest  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

import flashspec_hf  # noqa: E402,F401  (installs the generate flag)


def tiny_llama(layers: int = 2, vocab: int = 97, seed: int = 0, peak: float = 1.0, eos: int | None = 2,
               hidden: int = 32) -> LlamaForCausalLM:
    """A random Llama (4 query heads, 2 key-value heads of ``hidden / 4`` dimensions); ``peak`` scales the LM head so
    next-token distributions are far from uniform."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=eos,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(peak)
    model.generation_config.pad_token_id = 0
    return model


VOCAB = 97


@pytest.fixture(scope="module")
def tokenizer():
    """Word-level tokenizer: token i is the word ``w<i>``; 0 = <pad>, 1 = <s>, 2 = </s>; the last id is the word
    StopStringCriteria uses as its probe prefix."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB - 1)}, "abcdef": VOCAB - 1}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="session")
def target():
    return tiny_llama(layers=2, seed=0, peak=8.0)


@pytest.fixture(scope="session")
def assistants(target):
    """Two drafts: one sharing the target's first layer (agrees often), one unrelated with a padded vocabulary."""
    early_exit = tiny_llama(layers=1, seed=0, peak=8.0)
    early_exit.load_state_dict(target.state_dict(), strict=False)
    return [early_exit, tiny_llama(layers=1, vocab=101, seed=5, peak=8.0)]


def assert_rows_equal_stock(model, rows: list[list[int]], new: torch.Tensor, max_new_tokens: int) -> None:
    """Each row of ``new`` ``[B, N]`` (a padded batch's new tokens) equals stock greedy ``generate`` of ``model`` on
    that row alone, over stock's length (a row that stopped at EOS is padded after it in the batch)."""
    for row, got in zip(rows, new, strict=True):
        ids = torch.tensor([row], device=model.device)
        want = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)[0, len(row):]
        assert torch.equal(got[: len(want)].to(want.device), want), f"row {row}"


def left_padded(rows: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids``, ``attention_mask`` ``[B, max len]`` for token lists, padded on the left."""
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def two_token_law_p_value(step, p_logits: torch.Tensor, q_logits: torch.Tensor, samples: int) -> float:
    """Chi-square p-value of the first two tokens that ``samples`` rows decode, against the target's joint law
    ``p(a) p(b)`` (0 when a token without target mass appears).

    p and q do not depend on the prefix (``p_logits``, ``q_logits``: fp32 ``[V]`` on the sampler's device), so the
    γ = 2 drafts are i.i.d. draws from q, and a row whose first step emitted one token (first-token rejection) runs a
    second step for its second token, as the engine does. ``step(target [n, 3, V], tokens int64 [n, 2],
    draft [n, 2, V]) -> int64 [n, 3]`` is one verification (output padded with the placeholder id).
    """
    from scipy.stats import chisquare

    from flashspec_hf.kernels.reference import PLACEHOLDER_TOKEN_ID

    vocab = p_logits.shape[-1]

    def run(n):
        tokens = torch.multinomial(q_logits.softmax(-1), 2 * n, replacement=True).view(n, 2)  # [n, γ=2]
        return step(p_logits.expand(n, 3, vocab), tokens, q_logits.expand(n, 2, vocab))  # [n, 3]

    out = run(samples)
    short = out[:, 1] == PLACEHOLDER_TOKEN_ID
    if short.any():
        out[short, 1] = run(int(short.sum()))[:, 0]
    counts = torch.bincount(out[:, 0] * vocab + out[:, 1], minlength=vocab * vocab).cpu().double()  # [V * V]
    p = p_logits.double().softmax(-1).cpu()
    expected = torch.outer(p, p).flatten()  # [V * V]
    keep = expected > 0
    if counts[~keep].sum() > 0:
        return 0.0
    return float(chisquare(counts[keep].numpy(), (expected[keep] * counts.sum() / expected[keep].sum()).numpy()).pvalue)


@pytest.fixture
def cheap_drafts(monkeypatch):
    """Calibrated arm costs that make every draft worth it (plain decoding 100× dearer), so that cost-aware
    selectors draft in tests about exactness whatever this machine's timings are."""
    import flashspec_hf.decoding

    monkeypatch.setattr(flashspec_hf.decoding, "arm_costs", lambda target, sources, arms, *_, **__: [
        100.0 if gamma == 0 else 1.0 for _, gamma in arms
    ])
