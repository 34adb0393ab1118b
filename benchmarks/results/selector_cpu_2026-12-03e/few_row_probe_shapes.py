"""The few-row timing (flashspec_hf.cpu_products.pays, 5 rows, per weight shape) three times in a fresh process;
prints each ratio (transposed / linear) and its seconds."""
import time, torch
import flashspec_hf
import flashspec_hf.cpu_products as cp
from transformers import AutoModelForCausalLM
ms = [AutoModelForCausalLM.from_pretrained('/root/.cache/flashspec_hf/float32/SmolLM2-135M-Instruct', dtype=torch.float32)]
layers=list({id(x): x for m in ms for x in m.modules() if cp._eligible(x)}.values())
out=[]
for _ in range(3):
    t=time.perf_counter(); cp._decisions.clear(); cp.pays(layers, 5)
    out.append(f"{list(cp._decisions.values())[-1]:.2f} ({time.perf_counter()-t:.2f}s)")
print(' '.join(out), flush=True)
