import torch, triton, triton.language as tl
@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs * 1000003)
    tl.store(out_ptr + offs, v)
x = torch.randn(1024, device="cuda"); out = torch.empty_like(x)
k[(4096,)](x, out, x.numel(), BLOCK=1024)
print(out.sum().item())
