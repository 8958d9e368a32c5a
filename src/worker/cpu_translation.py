# gpu-triage CPU translation: runs the user's script unchanged, with CUDA redirected to the CPU.
# On the CPU PyTorch checks indices synchronously and names the offending value
# ("IndexError: index out of range in self", "Target 10 is out of bounds") at the true line,
# which is the first advice for a device-side assert. No source is rewritten: a torch function
# mode moves every CUDA device argument (factory functions, .to(...), .cuda(), Module.cuda) to
# the CPU, and the torch.cuda calls a script makes around its work become harmless.
# Run as: python -c "<this file>" /tmp/script.py [args...]
import runpy
import sys
import traceback

_SELF = "<string>"


def _translate():
    try:
        import torch
        from torch.overrides import TorchFunctionMode
    except Exception:  # No torch: the script runs as it is (and fails at its own import).
        return None

    def cpu(device):
        if isinstance(device, torch.device):
            return torch.device("cpu") if device.type == "cuda" else device
        if isinstance(device, str):
            return "cpu" if device.split(":")[0].strip() == "cuda" else device
        if isinstance(device, int) and not isinstance(device, bool):
            return "cpu"  # .to(0) and .cuda(0) name a GPU.
        return device

    same = {torch.Tensor.cuda, torch.Tensor.pin_memory}

    class ToCPU(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in same:
                return args[0]
            if func is torch.Tensor.is_pinned:
                return False
            if "device" in kwargs:
                kwargs["device"] = cpu(kwargs["device"])
            if func is torch.Tensor.to and len(args) > 1:
                args = (args[0], cpu(args[1])) + tuple(args[2:])
            return func(*args, **kwargs)

    def nothing(*_args, **_kwargs):
        return None

    for name in ("synchronize", "set_device", "empty_cache", "manual_seed", "manual_seed_all",
                 "reset_peak_memory_stats", "ipc_collect"):
        setattr(torch.cuda, name, nothing)
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_name = lambda *_a, **_k: "CPU (gpu-triage CPU translation)"
    torch.cuda.memory_allocated = lambda *_a, **_k: 0
    torch.cuda.max_memory_allocated = lambda *_a, **_k: 0
    mode = ToCPU()
    mode.__enter__()
    return mode


def _ours(frame):
    # This bootstrap, runpy, and the torch function mode's dispatch: not the user's frames.
    name = frame.filename
    return (
        name in (_SELF, "<frozen runpy>")
        or name.endswith("runpy.py")
        or (name.endswith("torch/overrides.py") and frame.name == "handle_torch_function")
    )


def _hook(kind, value, tb):
    frames = [f for f in traceback.extract_tb(tb) if not _ours(f)]
    out = ["Traceback (most recent call last):\n"] if frames else []
    out += traceback.StackSummary.from_list(frames).format()
    out += traceback.format_exception_only(kind, value)
    sys.stderr.write("".join(out))
    sys.stderr.flush()


def _main():
    if len(sys.argv) < 2:
        print("gpu-triage CPU translation: no script given", file=sys.stderr)
        sys.exit(2)
    sys.argv = sys.argv[1:]
    translated = _translate() is not None
    print(
        "gpu-triage: CPU translation run (CUDA redirected to the CPU)"
        + ("" if translated else "; torch is not importable, the script runs unchanged"),
        file=sys.stderr,
        flush=True,
    )
    sys.excepthook = _hook
    sys.path.insert(0, sys.argv[0].rpartition("/")[0] or ".")
    runpy.run_path(sys.argv[0], run_name="__main__")


_main()
