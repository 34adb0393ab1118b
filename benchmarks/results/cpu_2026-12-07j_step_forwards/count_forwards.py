import flashspec_hf, torch, collections
from transformers import LlamaConfig, LlamaForCausalLM
from flashspec_hf.models import early_exit_assistants
from flashspec_hf import FixedArm
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=22, num_attention_heads=8,
                  num_key_value_heads=2, max_position_embeddings=512, pad_token_id=0)
model = LlamaForCausalLM(cfg).eval()
for layer in model.model.layers:  # synthetic acceptance: small residual updates
    layer.self_attn.o_proj.weight.data *= 0.001; layer.mlp.down_proj.weight.data *= 0.001
drafts = early_exit_assistants(model, (1,))
ids = torch.randint(1, 512, (1, 64))
kw = dict(max_new_tokens=64, do_sample=False, assistant_models=drafts, flashspec=True, num_assistant_tokens=4,
          selector=FixedArm(0), cache_implementation="static", disable_compile=True)
model.generate(ids, **kw)
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as prof:
    out = model.generate(ids, **kw)
st = model.flashspec_stats
steps = st.steps if hasattr(st, "steps") else None
print("stats", {k: getattr(st, k) for k in ("steps", "tau") if hasattr(st, k)})
counts = collections.Counter()
for e in prof.events():
    if e.name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul", "aten::_mkl_linear", "mkl::_mkl_linear", "aten::scaled_dot_product_attention"):
        counts[e.name] += 1
print(counts, "new tokens", out.shape[1] - 64)
calls = collections.Counter()
def hook(name):
    def f(mod, args, kwargs, out):
        x = args[0] if args else kwargs.get("hidden_states", kwargs.get("input"))
        calls[(name, tuple(x.shape))] += 1
    return f
model.lm_head.register_forward_hook(hook("lm_head"), with_kwargs=True)
model.model.layers[0].register_forward_hook(hook("layer0"), with_kwargs=True)
model.model.layers[1].register_forward_hook(hook("layer1"), with_kwargs=True)
model.model.layers[0].mlp.register_forward_hook(hook("layer0.mlp"), with_kwargs=True)
out = model.generate(ids, **kw)
print("steps", model.flashspec_stats.steps)
for k, v in sorted(calls.items()): print(k, v)
seq = []
model.lm_head.register_forward_hook(lambda m, a, o: seq.append(tuple(a[0].shape[1:2])))
import traceback
n5 = [0]
def where(m, a, o):
    if a[0].shape[1] == 5:
        n5[0] += 1
        if n5[0] <= 20:
            st = [f"{f.name}:{f.lineno}" for f in traceback.extract_stack() if "flashspec_hf" in f.filename]
            print("5col", n5[0], " <- ".join(reversed(st[-6:])))
model.lm_head.register_forward_hook(where)
out = model.generate(ids, **kw)
print("steps", model.flashspec_stats.steps, "seq", "".join(str(s[0]) if s[0] < 10 else "P" for s in seq))
