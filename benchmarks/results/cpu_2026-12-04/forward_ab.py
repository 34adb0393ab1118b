"""Whole SmolLM2 forwards of 1 and 5 columns over a 70-column cache, inside few_row_products with
FLASHSPEC_FEW_ROW_PRODUCTS=1 and =0 alternating, six rounds of 8 in one process. Run from the repository root."""
import os, time, statistics, torch
from transformers import DynamicCache
from flashspec_hf import demo
from flashspec_hf.cli import load_models
from flashspec_hf.cpu_products import few_row_products, state
target, tok, assistants = load_models(demo.parse_args([]))
ids = torch.randint(0, 1000, (1, 80))
c = DynamicCache(config=target.config)
with torch.no_grad():
    target(input_ids=ids[:, :70], past_key_values=c)
    res = {}
    for rnd in range(6):
        for v in ("1", "0"):
            os.environ["FLASHSPEC_FEW_ROW_PRODUCTS"] = v
            with few_row_products([target], 5):
                for w in (1, 5):
                    ts = []
                    for _ in range(8):
                        s = time.perf_counter(); target(input_ids=ids[:, 70:70 + w], past_key_values=c, logits_to_keep=w); ts.append(time.perf_counter() - s); c.crop(-w)
                    res.setdefault((v, w), []).append(statistics.median(ts))
for k, v in sorted(res.items()): print("on" if k[0] == "1" else "off", k[1], "cols: median of medians", round(1e3 * statistics.median(v), 1), "ms", [round(1e3 * t, 1) for t in v])
