"""The few-row timing (flashspec_hf.cpu_products.pays, 5 rows) in a fresh process: `bare` once, `gen` before,
right after and 1 s after a 48-token stock generate; prints the ratios (transposed / linear)."""
import sys, time, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
import flashspec_hf  # what the demo imports (OpenMP policy etc.)
import flashspec_hf.cpu_products as cp
mode = sys.argv[1]
path = '/root/.cache/flashspec_hf/float32/SmolLM2-135M-Instruct'
m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
tok = AutoTokenizer.from_pretrained(path)
def ratio():
    layers=[x for x in m.modules() if cp._eligible(x)]
    cp._decisions.clear()
    cp.pays(layers, 5)
    return list(cp._decisions.values())[-1]
out = [ratio()]
if mode == 'gen':
    ids = tok("The quick brown fox jumps over the lazy dog. " * 3, return_tensors='pt')
    m.generate(**ids, max_new_tokens=48, do_sample=False)
    out.append(ratio())
    time.sleep(1); out.append(ratio())
print(mode, torch.get_num_threads(), ' '.join(f'{r:.2f}' for r in out), flush=True)
