"""Quick verification-kernel timing on CUDA (the full study is the performance issue's): Triton kernel (sampling: its
randomness drawn in-kernel from a seed tensor) vs the PyTorch reference (given ``torch.rand`` noise), µs (median,
triton.testing.do_bench), printed as CSV."""

import torch
import triton

from flashspec_hf.kernels.philox import draw_seed
from flashspec_hf.kernels.reference import draw_noise, verify_greedy_reference, verify_sampling_reference
from flashspec_hf.kernels.rejection_sampler import verify_triton

print("mode,batch,gamma,vocab,dtype,provider,us")
for mode in ("greedy", "sampling"):
    for batch in (1, 8, 32, 64):
        for vocab in (32_000, 49_152, 128_256, 262_144):
            gamma, dtype = 4, torch.bfloat16
            target = torch.randn(batch, gamma + 1, vocab, device="cuda").to(dtype)
            draft = torch.randn(batch, gamma, vocab, device="cuda").to(dtype)
            tokens = torch.randint(0, vocab, (batch, gamma), device="cuda")
            seed = draw_seed(torch.device("cuda"))  # [1]
            noise = draw_noise(batch, gamma, vocab, torch.device("cuda"))  # the reference's only
            if mode == "greedy":
                fns = {"triton": lambda: verify_triton(target, tokens), "torch": lambda: verify_greedy_reference(target, tokens)}
            else:
                fns = {
                    "triton": lambda: verify_triton(target, tokens, draft, seed),
                    "torch": lambda: verify_sampling_reference(target, tokens, draft, *noise),
                }
            for name, fn in fns.items():
                us = triton.testing.do_bench(fn, warmup=25, rep=100) * 1000
                print(f"{mode},{batch},{gamma},{vocab},bf16,{name},{us:.1f}")
