import torch
import torch.nn.functional as F
logits = torch.randn(16, 10, device="cuda", requires_grad=True)
target = torch.randint(0, 10, (16,), device="cuda")
target[7] = 10
loss = F.cross_entropy(logits, target)
loss.backward()
print(logits.grad.norm().item())
