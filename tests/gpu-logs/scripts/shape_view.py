import torch
x = torch.randn(4, 3, 32, 32, device="cuda").permute(0, 2, 3, 1)
print(x.view(4, -1).shape)
