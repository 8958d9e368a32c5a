import torch
x = torch.zeros(8, device="cuda:7")
print(x)
