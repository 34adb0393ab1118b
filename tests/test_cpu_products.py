"""Few-row products on the CPU (:mod:`flashspec_hf.cpu_products`): the rerouted linear (MKL's packed GEMM) computes
the same product, one-row inputs and inputs of more rows go through stock ``linear`` bit for bit, a packed weight
follows changes to the weight, and the layers get their own ``forward`` back after a call, an error, or when turned
off; unless told, the rerouting is used where it measured faster, and nothing is packed where the copies would not
fit in memory."""

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flashspec_hf import cpu_products
from flashspec_hf.cpu_products import MAX_ROWS, few_row_linear, few_row_products

from .conftest import tiny_llama

pytestmark = pytest.mark.skipif(not cpu_products.available(), reason="torch built without MKL")


@pytest.fixture(autouse=True)
def _forced_on(monkeypatch):
    """The rerouting on without measuring (``FLASHSPEC_FEW_ROW_PRODUCTS=1``), unless a test sets otherwise."""
    monkeypatch.setenv("FLASHSPEC_FEW_ROW_PRODUCTS", "1")


@settings(max_examples=60, deadline=None)
@given(
    lead=st.lists(st.integers(0, 6), min_size=1, max_size=3),
    k=st.integers(1, 40),
    n=st.integers(1, 40),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_few_row_linear_is_linear(lead, k, n, bias, seed):
    torch.manual_seed(seed)
    layer = torch.nn.Linear(k, n, bias=bias)
    x = torch.randn(*lead, k)  # rows = product of lead: 0 to 216
    with torch.no_grad():
        out = few_row_linear(layer, x)
        expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    rows = x.numel() // k
    if not 2 <= rows <= MAX_ROWS:
        assert torch.equal(out, expected)  # stock's own call


def test_a_packed_weight_follows_changes_to_the_weight():
    """Each block packs again a weight that changed since: in place, through ``.data`` (not counted by torch's
    version counter) or replaced by another tensor; an unchanged one is kept."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40)
    x = torch.randn(5, 24)

    def product():
        with few_row_products([layer]), torch.no_grad():
            out = layer(x)
        torch.testing.assert_close(out, torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        return cpu_products._packed[layer][1]

    first = product()
    assert product() is first  # kept
    with torch.no_grad():
        layer.weight.mul_(-2.0)  # in place
    product()
    with few_row_products([layer]), torch.no_grad():  # in place, inside a block
        layer.weight.mul_(0.5)
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5,
                                   atol=1e-5)
    layer.weight.data.add_(torch.randn(40, 24))  # through .data, as a merged LoRA delta
    product()
    layer.weight = torch.nn.Parameter(torch.randn(40, 24))  # another tensor
    product()


def test_outside_no_grad_wrong_widths_and_dtypes_take_stocks_linear():
    """Products autograd records (the packed one has no gradient), inputs of another width (which ``linear``
    refuses) and of another dtype go through stock ``linear``."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(24, 40)
    x = torch.randn(5, 24, requires_grad=True)
    with few_row_products([layer]):
        layer(x).sum().backward()
        with pytest.raises(RuntimeError):
            layer(torch.randn(5, 23))
        with torch.no_grad(), pytest.raises(RuntimeError):
            layer(torch.randn(5, 25))
        with torch.no_grad(), pytest.raises(RuntimeError):
            layer(torch.randn(5, 24, dtype=torch.float64))
    expected = torch.autograd.grad(torch.nn.functional.linear(x, layer.weight, layer.bias).sum(), x)[0]
    torch.testing.assert_close(x.grad, expected)
    assert layer.weight.grad is not None
    layer.weight.requires_grad_(False)  # only the bias trained
    layer.bias.grad = None
    with few_row_products([layer]):
        layer(torch.randn(5, 24)).sum().backward()
    assert layer.bias.grad is not None


def _rerouted(model) -> list[bool]:
    return ["forward" in vars(m) for m in model.modules() if type(m) is torch.nn.Linear]


def test_context_reroutes_fp32_cpu_linears_and_restores():
    model = tiny_llama()
    with few_row_products([model, model]):  # listed twice (an early-exit draft shares the target's layers)
        assert all(_rerouted(model))
    assert not any(_rerouted(model))
    with pytest.raises(RuntimeError, match="inside"), few_row_products([model]):
        raise RuntimeError("inside")
    assert not any(_rerouted(model))


def test_context_leaves_other_layers_alone(monkeypatch):
    model = tiny_llama()
    hooked = model.lm_head
    own = hooked.forward
    hook = hooked.forward = lambda x: own(x)  # as accelerate's hooks do
    half = tiny_llama().to(torch.bfloat16)
    with few_row_products([model, half]):
        assert vars(hooked)["forward"] is hook
        assert all(_rerouted(model)) and not any(_rerouted(half))
    assert vars(hooked)["forward"] is hook and sum(_rerouted(model)) == 1
    monkeypatch.setenv("FLASHSPEC_FEW_ROW_PRODUCTS", "0")
    plain = tiny_llama()
    with few_row_products([plain]):
        assert not any(_rerouted(plain))


def test_other_threads_and_later_overrides_keep_stock_forwards(monkeypatch):
    calls = []
    monkeypatch.setattr(cpu_products, "few_row_linear",
                        lambda layer, x: calls.append(threading.get_ident()) or torch.nn.functional.linear(x, layer.weight))
    model = tiny_llama()
    layer = model.lm_head
    x = torch.randn(5, layer.in_features)
    with few_row_products([model]):
        layer(x)
        thread = threading.Thread(target=lambda: layer(x))
        thread.start()
        thread.join()
        with few_row_products([model]):  # nested: still rerouted after the inner block
            pass
        assert all(_rerouted(model))
        layer(x)
        hook = model.model.layers[0].mlp.up_proj.forward = lambda x: x  # installed inside the block
    assert calls == [threading.get_ident()] * 2  # this thread, twice; the other thread ran stock's linear
    assert vars(model.model.layers[0].mlp.up_proj)["forward"] is hook and sum(_rerouted(model)) == 1


def test_generate_verifies_through_few_row_products(monkeypatch, target):
    calls = []

    def spy(layer, x):
        calls.append(x.numel() // x.shape[-1])
        return few_row_linear(layer, x)

    monkeypatch.setattr(cpu_products, "few_row_linear", spy)
    draft = tiny_llama(layers=1, seed=3, peak=8.0)
    prompt = torch.tensor([[1, 5, 9, 14]])
    stock = target.generate(prompt, max_new_tokens=12, do_sample=False)
    flash = target.generate(prompt, max_new_tokens=12, do_sample=False, flashspec=True, assistant_models=[draft],
                            num_assistant_tokens=4, selector="fixed")
    assert torch.equal(flash, stock)
    assert 5 in calls  # the target's γ + 1 = 5-column verification forwards
    assert not any(_rerouted(target)) and not any(_rerouted(draft))


def _timed_products(monkeypatch, packed_seconds):
    """A fake clock: ``linear`` costs 1 a layer, the packed product ``packed_seconds(layer, rows, pass)``; returns
    the list of (product, rows) each call made."""
    clock, timed, passes = [0.0], [], {}

    def packed_linear(layer, x):
        rows = x.numel() // x.shape[-1]
        passes[rows] = passes.get(rows, 0) + 1
        timed.append(("packed", rows))
        clock[0] += packed_seconds(layer, rows, passes[rows])
        return x @ layer.weight.T

    def linear(x, weight, bias=None):
        timed.append(("linear", x.numel() // x.shape[-1]))
        clock[0] += 1.0
        return x @ weight.T

    monkeypatch.setattr(cpu_products.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(cpu_products, "packed_linear", packed_linear)
    monkeypatch.setattr(cpu_products.torch.nn.functional, "linear", linear)
    monkeypatch.setattr(cpu_products, "_decisions", {})
    return timed


@pytest.mark.parametrize("packed_faster", [True, False])
def test_auto_reroutes_only_where_the_packed_product_measured_not_slower(monkeypatch, packed_faster):
    """Unset: the decision is ratio()'s at the call's verification rows, timed once per set of shapes, rows and
    threads, and kept; one-row products stay stock's either way."""
    monkeypatch.delenv("FLASHSPEC_FEW_ROW_PRODUCTS")
    timed = _timed_products(monkeypatch, lambda layer, rows, _: 0.5 if packed_faster else 2.0)
    model = tiny_llama()
    layers = sum(type(m) is torch.nn.Linear for m in model.modules())
    with few_row_products([model], rows=5):
        assert all(_rerouted(model)) == packed_faster and cpu_products.rerouting() == packed_faster
        x = torch.randn(1, 5, model.config.hidden_size)
        del timed[:]
        with torch.no_grad():
            model.model.layers[0].mlp.up_proj(x[:, :1]), model.model.layers[0].mlp.up_proj(x)
        assert timed == [("linear", 1), ("packed" if packed_faster else "linear", 5)]
    assert cpu_products.state() == ("auto: on (0.500)" if packed_faster else "auto: off (2.000)")
    del timed[:]
    with few_row_products([model], rows=5):
        pass
    assert not timed  # measured once
    with few_row_products([model], rows=3):
        pass
    assert len(timed) == 2 * layers * (cpu_products.REPEATS + 1)  # another row count: measured again
    assert {rows for _, rows in timed} == {3}


@pytest.mark.parametrize("case", ["one fast pass", "tie"])
def test_ratio_compares_each_products_fastest_pass_and_reroutes_on_a_tie(monkeypatch, case):
    """ratio() takes each product's fastest timed pass (another process only slows passes down) and reroutes when
    the packed product is not slower: one fast packed pass among slow ones wins (a median would say no), and so
    does a tie (a ratio below 1 would say no)."""
    model = tiny_llama()
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear]

    def packed_seconds(layer, rows, calls):
        last_pass = (calls - 1) // len(layers) == cpu_products.REPEATS  # pass 0 is the untimed warm-up
        return 1.0 if case == "tie" else 0.9 if last_pass else 3.0

    timed = _timed_products(monkeypatch, packed_seconds)
    assert cpu_products.ratio(layers, rows=5) <= cpu_products.RATIO
    assert timed.count(("packed", 5)) == timed.count(("linear", 5)) == len(layers) * (cpu_products.REPEATS + 1)


def test_ratio_scales_each_shapes_timing_to_all_its_layers(monkeypatch):
    """With room to time one layer of each shape, ratio() weighs each shape's time by its count of layers: ten
    layers on which the packed product is faster outweigh one (an LM head, say) on which it is slower, though
    the layers it timed took longer packed."""
    many = [torch.nn.Linear(8, 8, bias=False) for _ in range(10)]
    head = torch.nn.Linear(8, 40, bias=False)
    monkeypatch.setattr(cpu_products, "TIMED_BYTES", 2 * 8 * 8 * 4)  # one square layer a shape; the head whole
    timed = _timed_products(monkeypatch, lambda layer, rows, _: 3.0 if layer.out_features == 40 else 0.5)
    assert cpu_products.ratio([*many, head], rows=5) <= cpu_products.RATIO  # 10 × 0.5 + 3 = 8 against 10 × 1 + 1 = 11
    assert len(timed) == 2 * 2 * (cpu_products.REPEATS + 1)  # one layer of each shape, each product, each pass
    assert list(cpu_products._decisions.values()) == [pytest.approx(8 / 11)]


@pytest.mark.parametrize("why", ["not enough memory", "no MKL"])
def test_nothing_is_packed_without_room_or_mkl(monkeypatch, why):
    """Where the packed copies would take more than MEMORY_SHARE of the available memory, or torch has no MKL, the
    layers keep stock's linear and records say why, without timing anything."""
    monkeypatch.delenv("FLASHSPEC_FEW_ROW_PRODUCTS")
    timed = _timed_products(monkeypatch, lambda *_: 0.5)
    model = tiny_llama()
    weights = sum(m.weight.numel() * 4 for m in model.modules() if type(m) is torch.nn.Linear)
    if why == "no MKL":
        monkeypatch.setattr(cpu_products, "available", lambda: False)
    else:  # a byte short of room for the packed copies
        room = weights * cpu_products.PACKED_BYTES_PER_BYTE / cpu_products.MEMORY_SHARE
        monkeypatch.setattr(cpu_products, "_memory_available", lambda: int(room) - 1)
    with few_row_products([model], rows=5):
        assert not any(_rerouted(model)) and not cpu_products.rerouting()
    assert cpu_products.state() == f"auto: off ({why})" and not timed
