import torch
src = torch.ones(4, 8, device="cuda")
index = torch.tensor([[0, 1, 2, 9, 0, 1, 2, 3]] * 4, device="cuda")
out = torch.zeros(4, 8, device="cuda").scatter_(1, index, src)
print(out.sum().item())
