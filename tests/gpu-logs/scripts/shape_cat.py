import torch
a = torch.randn(4, 16, device="cuda"); b = torch.randn(5, 17, device="cuda")
print(torch.cat([a, b], dim=0).shape)
