import os
os.environ["CUDA_VISIBLE_DEVICES"] = ""
import torch
x = torch.zeros(8).cuda()
print(x)
