import torch
a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
b = torch.randn(64, 64, device="cuda", dtype=torch.float32)
print((a @ b).sum().item())
