import torch
emb = torch.nn.Embedding(100, 16).cuda()
ids = torch.randint(0, 100, (8, 32), device="cuda")
ids[3, 5] = 250
out = emb(ids)
loss = out.pow(2).mean()
print(loss.item())
