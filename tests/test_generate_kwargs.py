"""generate under flashspec=True with any default device or dtype."""

import pytest
import torch

from flashspec_hf import PromptLookup

from .conftest import left_padded

ROWS = [[5, 17, 33, 8, 90, 41, 7], [12, 60]]


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
@pytest.mark.parametrize("do_sample", [False, True])
@pytest.mark.parametrize("default", ["device", "dtype"])
def test_any_default_device_or_dtype(target, assistants, default, do_sample, cache_implementation):
    """Issue 13 item 6: every buffer flashspec creates has an explicit device and dtype, so a call under
    ``torch.set_default_device`` (here "meta", where a tensor created on the default device has no data) or
    ``torch.set_default_dtype(torch.float64)`` equals stock (sampling with top_k=1 is deterministic)."""
    ids, mask = left_padded(ROWS)
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=do_sample, top_k=1)
    want = target.generate(ids, **kw)
    try:
        if default == "device":
            torch.set_default_device("meta")
        else:
            torch.set_default_dtype(torch.float64)
        got = target.generate(ids, **kw, assistant_models=[*assistants, PromptLookup()], num_assistant_tokens=[1, 3],
                              flashspec=True, cache_implementation=cache_implementation)
    finally:
        torch.set_default_device(None)
        torch.set_default_dtype(torch.float32)
    assert torch.equal(got, want)
