import torch
a = torch.randn(32, 100, device="cuda")
layer = torch.nn.Linear(128, 10).cuda()
print(layer(a).shape)
