# A custom kernel (compiled at run time by PyTorch's jiterator, through NVRTC) that reads through
# a pointer into unmapped device memory: an illegal memory access, as a buggy extension makes.
import torch
from torch.cuda.jiterator import _create_jit_fn

code = """
template <typename T> T bad_read(T x) {
    const T* p = reinterpret_cast<const T*>(0xdead00000000ULL);
    return x + p[0];
}
"""
bad_read = _create_jit_fn(code)
x = torch.ones(1 << 16, device="cuda")
y = bad_read(x)
print(y.sum().item())
