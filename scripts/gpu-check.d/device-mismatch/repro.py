# A batch left on the CPU while the model is on the GPU.
import torch

model = torch.nn.Linear(8, 2).cuda()
batch = torch.randn(4, 8)
logits = model(batch)
print(logits.shape)
