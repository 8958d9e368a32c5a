# One allocation of twice the GPU's memory: CUDA out of memory, whatever the GPU.
import torch

free, total = torch.cuda.mem_get_info()
activations = torch.empty(2 * total // 4, dtype=torch.float32, device="cuda")
print(activations.shape)
