import torch
import torch.nn.functional as F
labels = torch.tensor([0, 3, 7, 12], device="cuda")
print(F.one_hot(labels, num_classes=10).sum())
