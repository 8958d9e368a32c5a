import torch
torch.cuda.set_per_process_memory_fraction(0.01)
x = torch.empty(4 * 1024**3, dtype=torch.uint8, device="cuda")
print(x.numel())
