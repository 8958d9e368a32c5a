import torch
layer = torch.nn.Linear(128, 128).cuda().to(torch.bfloat16)
x = torch.randn(4, 128, device="cuda")
print(layer(x).sum().item())
