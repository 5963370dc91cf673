"""Where a model's layers go: the devices ggml sees, how many layers fit on them, and which
device each offloaded layer lands on.

llama-server fits layers with `common_fit_params` (llama.cpp's common/fit.cpp), which lives in
libcommon; llama-cpp-python does not ship that library, and the per-device measurement it
rests on (`llama_get_memory_breakdown`) is C++ only. So `fit_layers` is a small stand-in: the
weights of each layer from the GGUF's tensor table, the KV cache per layer from its header, a
compute-buffer estimate, and llama-server's default margin of 1 GiB free per device.
"""

from __future__ import annotations

import ctypes
import logging
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from toolserve.engine.base import DeviceUse, Placement

log = logging.getLogger(__name__)

MiB = 1024 * 1024
MARGIN = 1024 * MiB  # free memory left on each device (llama-server's --fit-target default)
SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}  # llama_split_mode
_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}  # ggml_backend_dev_type


@dataclass(frozen=True)
class Device:
    """A ggml backend device: `index` counts only the devices llama.cpp offloads to (as --main-gpu does)."""

    index: int
    name: str  # e.g. CUDA0, Metal, Vulkan0
    description: str
    kind: str  # gpu | igpu
    free: int  # bytes
    total: int


@dataclass(frozen=True)
class LayerCosts:
    """Bytes each offloadable layer takes on a device: llama.cpp's layers 0..n-1 and the output
    layer (index n), which is offloaded first."""

    weights: tuple[int, ...]  # n_layer + 1 entries, the output layer last
    kv: tuple[int, ...]  # n_layer + 1 entries (0 for the output layer, or all 0 without KV offload)
    compute: int  # per device, the compute buffer


def _ggml() -> ctypes.CDLL:
    from llama_cpp._ggml import libggml

    lib: ctypes.CDLL = libggml
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for fn in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    lib.ggml_backend_dev_memory.restype = None
    return lib


def gpu_offload() -> bool:
    """Whether this llama.cpp build has a backend that layers can be offloaded to."""
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


def devices() -> list[Device]:
    """The devices llama.cpp offloads layers to, in its order: the GPUs, else the integrated
    GPUs (llama.cpp's own choice when `llama_model_params.devices` is NULL; RPC left out)."""
    import llama_cpp

    llama_cpp.llama_backend_init()  # registers the backends (idempotent)
    lib = _ggml()
    found: dict[str, list[tuple[str, str, int, int]]] = {"gpu": [], "igpu": []}
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        kind = _TYPES.get(lib.ggml_backend_dev_type(dev), "?")
        if kind not in found:
            continue
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        name = (lib.ggml_backend_dev_name(dev) or b"").decode()
        if name.startswith("RPC"):
            continue
        found[kind].append((name, (lib.ggml_backend_dev_description(dev) or b"").decode(), free.value, total.value))
    kind = "gpu" if found["gpu"] else "igpu"
    return [Device(i, name, desc, kind, free, total) for i, (name, desc, free, total) in enumerate(found[kind])]


def used_devices(devs: Sequence[Device], split_mode: str, main_gpu: int) -> list[Device]:
    """The devices a model is placed on: all of them, or with split mode none the main GPU."""
    if split_mode == "none" and devs:
        return [devs[main_gpu]]
    return list(devs)


def splits(devs: Sequence[Device], tensor_split: Sequence[float]) -> list[float]:
    """Each device's share of the offloaded layers, as llama.cpp computes it: the tensor split
    given, else in proportion to free memory."""
    raw = list(tensor_split[: len(devs)]) + [0.0] * (len(devs) - len(tensor_split))
    if not any(raw):
        raw = [float(d.free) for d in devs]
    total = sum(raw)
    return [x / total for x in raw] if total > 0 else [1.0 / len(devs)] * len(devs)


def assign_layers(n_layer: int, n_gpu_layers: int, shares: Sequence[float]) -> list[int]:
    """How many of llama.cpp's n_layer + 1 offloadable layers each device gets, as its loader
    assigns them (llama-model.cpp, load_tensors): the last `n_gpu_layers` layers, cut at the
    cumulative shares."""
    if not shares:
        return []
    n = min(n_gpu_layers, n_layer + 1)
    bounds, acc = [], 0.0
    for s in shares:
        acc += s
        bounds.append(acc)
    bounds = [b / acc for b in bounds]
    counts = [0] * len(shares)
    for k in range(n):  # k-th offloaded layer
        counts[min(bisect_right(bounds, k / n), len(shares) - 1)] += 1
    return counts


def needs(costs: LayerCosts, n: int, shares: Sequence[float]) -> list[int]:
    """Bytes each device takes with `n` layers offloaded (0 for a device given no layer)."""
    n_all = len(costs.weights)
    out = []
    at = n_all - min(n, n_all)  # the offloaded layers, device by device in order
    for count in assign_layers(n_all - 1, n, shares):
        out.append(sum(costs.weights[at : at + count]) + sum(costs.kv[at : at + count]) + (costs.compute if count else 0))
        at += count
    return out


def fit_layers(costs: LayerCosts, devs: Sequence[Device], shares: Sequence[float], margin: int = MARGIN) -> int:
    """The most layers (0 to n_layer + 1) that leave `margin` free on every device, each device
    taking the layers `assign_layers` gives it; 0 when not even one fits (or no device reports
    its memory)."""
    best = 0
    for n in range(1, len(costs.weights) + 1):
        if any(need > dev.free - margin for dev, need in zip(devs, needs(costs, n, shares), strict=True)):
            break
        best = n
    return best


@dataclass(frozen=True)
class GgufShape:
    """What the fit needs from a GGUF header."""

    n_layer: int
    n_vocab: int
    n_embd: int
    kv_per_token: tuple[int, ...]  # bytes of K and V per token, per layer


def layer_costs(
    shape: GgufShape, tensors: dict[str, int], n_ctx_total: int, n_ubatch: int, kv_offload: bool
) -> LayerCosts:
    """Bytes per offloadable layer from the tensor table (`blk.N.*`; the output layer is
    `output.*` and `output_norm`, or the token embeddings where the output is tied to them)."""
    weights = [0] * (shape.n_layer + 1)
    for name, size in tensors.items():
        if name.startswith("blk."):
            i = int(name.split(".")[1])
            if i < shape.n_layer:
                weights[i] += size
        elif name.startswith("output"):
            weights[-1] += size
    if "output.weight" not in tensors:  # tied: llama.cpp puts a copy of the embeddings on the output's device
        weights[-1] += tensors.get("token_embd.weight", 0)
    kv = [n_ctx_total * b if kv_offload else 0 for b in shape.kv_per_token] + [0]
    # the logits and a few activations of one micro-batch, in f32; llama.cpp reserves more
    # for some graphs, which the margin absorbs
    compute = 4 * n_ubatch * (shape.n_vocab + 8 * shape.n_embd)
    return LayerCosts(tuple(weights), tuple(kv[: shape.n_layer + 1]), compute)


def report(
    before: Sequence[Device],
    gpu_backend: bool,
    n_layer: int,
    gpu_layers: int,
    split_mode: str,
    main_gpu: int,
    tensor_split: Sequence[float],
    kv_offload: bool,
    chosen: str,
) -> Placement:
    """Where llama.cpp put a model just loaded with `gpu_layers`, from the devices as they were
    before the load (its split by free memory saw those) and as they are now (memory taken)."""
    used = used_devices(before, split_mode, min(main_gpu, max(0, len(before) - 1)))
    n = min(gpu_layers, n_layer + 1) if used else 0
    counts = assign_layers(n_layer, n, splits(used, tensor_split)) if n else [0] * len(used)
    now = {d.name: d for d in devices()} if used else {}
    out = []
    for dev, count in zip(used, counts, strict=True):
        after = now.get(dev.name, dev)
        out.append(DeviceUse(dev.name, dev.description, count, max(0, dev.free - after.free) // MiB, after.free // MiB, after.total // MiB))
    if not gpu_backend:
        chosen = f"{chosen}; llama.cpp was built without a GPU backend" if chosen else "llama.cpp was built without a GPU backend"
    return Placement(n, n_layer + 1, tuple(out), kv_offload, gpu_backend, chosen)


def shortfall(before: Sequence[Device], gpu_layers: int) -> str:
    """What a failed load's message adds when layers were to go to a GPU: the memory there was."""
    if not gpu_layers or not before:
        return ""
    free = ", ".join(f"{d.name} {d.free // MiB} MiB free of {d.total // MiB} MiB" for d in before)
    return f" (with {gpu_layers} layers on the GPU; {free}; try fewer with --gpu-layers)"
