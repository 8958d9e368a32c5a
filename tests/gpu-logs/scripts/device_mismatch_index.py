import torch
x = torch.randn(10, 5, device="cuda")
mask = torch.tensor([0, 2, 4], device="cpu")
y = torch.randn(10, 5)
print((x + y).sum())
