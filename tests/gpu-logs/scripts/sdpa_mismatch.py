import torch
import torch.nn.functional as F
q = torch.randn(2, 4, 16, 64, device="cuda", dtype=torch.float16)
k = torch.randn(2, 4, 16, 64, device="cuda", dtype=torch.float32)
v = torch.randn(2, 4, 16, 64, device="cuda", dtype=torch.float16)
print(F.scaled_dot_product_attention(q, k, v).shape)
