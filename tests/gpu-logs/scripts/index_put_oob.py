import torch
x = torch.zeros(1000, device="cuda")
idx = torch.arange(0, 2000, 2, device="cuda")
x[idx] = 1.0
torch.cuda.synchronize()
print(x.sum().item())
