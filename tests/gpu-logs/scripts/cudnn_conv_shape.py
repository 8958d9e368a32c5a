import torch
conv = torch.nn.Conv2d(3, 16, 3).cuda()
x = torch.randn(8, 4, 32, 32, device="cuda")
print(conv(x).shape)
