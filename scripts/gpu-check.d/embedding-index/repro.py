# A token id past the embedding table: a device-side assert in the index kernel, reported
# asynchronously at the next synchronising call unless CUDA_LAUNCH_BLOCKING=1.
import torch

emb = torch.nn.Embedding(10, 4).cuda()
idx = torch.tensor([1, 2, 10], device="cuda")
out = emb(idx)
loss = out.sum()
print(loss.item())
