import os
os.environ.setdefault("TRITON_DEBUG", "1")
import torch, triton, triton.language as tl
@triton.jit
def k(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    i = tl.load(idx_ptr + offs)
    tl.device_assert(i < n, "index out of bounds")
    tl.store(out_ptr + offs, tl.load(x_ptr + i))
x = torch.randn(64, device="cuda"); idx = torch.arange(64, device="cuda") * 2; out = torch.empty_like(x)
k[(1,)](x, idx, out, 64, BLOCK=64)
print(out.sum().item())
