import torch
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)).cuda()
batch = torch.randn(8, 32)
print(model(batch).shape)
