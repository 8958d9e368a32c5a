import torch
blocks = []
for i in range(1000):
    blocks.append(torch.empty(8 * 1024**3, dtype=torch.uint8, device="cuda"))
print(len(blocks))
