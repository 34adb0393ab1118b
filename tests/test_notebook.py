"""The Colab T4 notebook runs end to end with local stand-ins (tiny models on CPU, no NF4, no install)."""

import nbformat
import pytest
from nbclient import NotebookClient

from .conftest import tiny_llama

NOTEBOOK = "examples/colab_t4.ipynb"


@pytest.mark.slow
def test_colab_notebook_runs_with_local_stand_ins(tmp_path, tokenizer):
    folders = []
    for i, model in enumerate([tiny_llama(layers=2, seed=0, peak=6.0), tiny_llama(layers=1, seed=1, peak=6.0),
                               tiny_llama(layers=1, vocab=101, seed=2, peak=6.0)]):
        folder = tmp_path / f"model{i}"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders.append(str(folder))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    overrides = (
        f"TARGET = {folders[0]!r}\nASSISTANTS = {folders[1:]!r}\nLOAD_IN_4BIT = False\nINSTALL = False\n"
        "MAX_NEW_TOKENS = 16\nPROMPTS = ['w5 w17 w33', 'w12 w60 w61']"
    )
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(overrides))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "."}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "identical True" in printed and "tau" in printed and "first calls: plain" in printed
    assert any(o.get("output_type") == "display_data" for o in nb.cells[-1].outputs), "the plot was drawn"
