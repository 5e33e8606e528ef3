"""What it takes to run Megatron-Core's MoE layer on a CPU, with no change to Megatron: three patches of torch.

On a CPU every operation is synchronous, so streams and events have nothing to order and no-op stand-ins are exact.
1. torch.cuda.Stream / Event / current_stream / stream: no-op fakes (the AlltoAll dispatcher creates a side stream
   in __init__ and syncs its device-to-host copies on it).
2. torch.cuda.current_device -> 'cpu' (the router allocates its buffers there and moves its weight there).
3. torch.distributed.all_to_all_single with split sizes given as tensors -> lists (Megatron's
   maybe_move_tensor_to_cpu only converts CUDA tensors; torch rejects tensor splits).
Two more, where gloo lacks what NCCL has: reduce-scatter, where a torch's gloo has none, is emulated by an
all-reduce and the rank's slice (the same sum, in another order; torch 2.x's native one is used where it exists,
the only one right inside the distributed optimizer's coalesced reduce-scatter); an all-gather of blocks of
different sizes (the AlltoAll dispatcher under ETP) by padding every block to the largest. apply() reports which
patches are in place so every dump can say so. apply_step() adds what a whole training step needs: the schedules
allocate their token counter with device="cuda", which becomes the CPU in that module only; the optimizer's
scalars, norm and clipping run on the CPU; the distributed optimizer takes a float64 parameter as a GPU float32 one.
"""
import contextlib

import torch
import torch.distributed as dist


class _Stream:
    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        return _Event()

    def synchronize(self):
        pass


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def wait(self, stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


_STREAM = _Stream()


def _as_list(splits):
    return splits.tolist() if isinstance(splits, torch.Tensor) else splits


def _all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                       async_op=False, _original=dist.all_to_all_single):
    return _original(output, input, _as_list(output_split_sizes), _as_list(input_split_sizes), group=group,
                     async_op=async_op)


class _Done:
    """The handle of an operation that has already completed (the emulations below are synchronous)."""

    def wait(self):
        return True

    def is_completed(self):
        return True


def _reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False,
                           _native=dist.reduce_scatter_tensor):
    # gloo has reduce_scatter_tensor from torch 2.x on (and only it is right inside a coalescing manager, as the
    # distributed optimizer's gradient reduce-scatter runs: a deferred all-reduce would leave the copy below stale).
    # Older gloo lacks it: all-reduce a copy, keep this rank's block along dim 0.
    try:
        return _native(output, input, op=op, group=group, async_op=async_op)
    except RuntimeError as e:
        if "does not support" not in str(e) and "not supported" not in str(e):
            raise
    assert op == dist.ReduceOp.SUM, "the emulation covers SUM only"
    full = input.clone()
    dist.all_reduce(full, op=op, group=group)
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    output.copy_(full.chunk(size, dim=0)[rank])
    return _Done() if async_op else None


def _all_gather(tensor_list, tensor, group=None, async_op=False, _original=dist.all_gather):
    # gloo's all_gather needs equal sizes; the ETP dispatcher gathers uneven row counts (NCCL allows it). Pad every
    # block to the largest along dim 0, gather, trim: the same values.
    rows = [t.shape[0] for t in tensor_list]
    if len(set(rows)) <= 1:
        return _original(tensor_list, tensor, group=group, async_op=async_op)
    longest = max(rows)
    padded = torch.zeros((longest, *tensor.shape[1:]), dtype=tensor.dtype)
    padded[: tensor.shape[0]] = tensor
    blocks = [torch.empty_like(padded) for _ in tensor_list]
    _original(blocks, padded, group=group)
    for out, block, n in zip(tensor_list, blocks, rows):
        out.copy_(block[:n])
    return _Done() if async_op else None


def apply():
    """Installs the patches; returns their names."""
    torch.cuda.Stream = _Stream
    torch.cuda.Event = _Event
    torch.cuda.current_stream = lambda device=None: _STREAM
    torch.cuda.stream = lambda stream=None: contextlib.nullcontext()
    torch.cuda.current_device = lambda: "cpu"
    dist.all_to_all_single = _all_to_all_single
    dist.reduce_scatter_tensor = _reduce_scatter_tensor
    dist._reduce_scatter_base = _reduce_scatter_tensor
    dist.all_gather = _all_gather
    return ["cuda streams/events as no-ops", "current_device=cpu", "all_to_all_single list splits",
            "reduce_scatter_tensor as all_reduce + slice (gloo)", "all_gather of uneven blocks padded (gloo)"]


class _TorchOnCpu:
    """torch, with the factories' device="cuda" made the CPU: for one module's `torch` name."""

    def __getattr__(self, name):
        value = getattr(torch, name)
        if name in ("zeros", "ones", "empty", "full", "tensor", "arange"):
            def on_cpu(*args, _make=value, **kwargs):
                if str(kwargs.get("device", "")).startswith("cuda"):
                    kwargs["device"] = "cpu"
                return _make(*args, **kwargs)
            return on_cpu
        return value


def apply_step():
    """apply(), and the schedules' CUDA allocations on the CPU; returns the patches' names."""
    names = apply()
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.transformer import utils
    schedules.torch = _TorchOnCpu()
    utils.torch = _TorchOnCpu()  # the attention's default causal mask, made with device="cuda"
    # Under sequence parallelism the embedding's dropout runs inside the CUDA RNG tracker's fork, whose states the CPU
    # cannot seed. Every dropout of the step has p = 0 (no random number is drawn), so the fork is a no-op.
    from megatron.core.tensor_parallel import random

    @contextlib.contextmanager
    def fork(self, name=random._MODEL_PARALLEL_RNG_TRACKER_NAME):
        yield
    random.CudaRNGStatesTracker.fork = fork
    return names + ["schedules' and the causal mask's device=\"cuda\" tensors on the CPU", "no CUDA RNG fork (every dropout p = 0)",
                    _optimizer_on_cpu()]


def _optimizer_on_cpu():
    """The optimizer's CUDA scalars on the CPU; its norm's and clipping's local (non-Apex) kernels without their
    CUDA tensors and CUDA-only assertion. The arithmetic is Megatron's: per-tensor L2 norms, their norm as a float32
    scalar, the squares summed over the grad-stats group; coefficient max_norm / (norm + 1e-6), applied when < 1."""
    from megatron.core.optimizer import clip_grads
    from megatron.core.optimizer import optimizer as megatron_optimizer
    megatron_optimizer.torch = _TorchOnCpu()
    clip_grads.torch = _TorchOnCpu()

    def l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
        norms = torch.stack([torch.linalg.vector_norm(t) for tensors in tensor_lists for t in tensors])
        return torch.tensor([float(torch.linalg.vector_norm(norms))], dtype=torch.float), None

    def clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, use_decoupled_grad=False):
        grads = [(p.decoupled_grad if use_decoupled_grad else p.grad) for p in parameters]
        coefficient = max_norm / (total_norm + 1.0e-6)
        if coefficient < 1.0:
            for g in grads:
                if g is not None:
                    g.detach().mul_(coefficient)
    clip_grads.l2_norm_impl = l2_norm
    megatron_optimizer.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32
    _distributed_optimizer_on_cpu()
    return "the optimizer's scalars, grad norm and clipping on the CPU (Megatron's arithmetic)"


@contextlib.contextmanager
def _patched(owner, name, make):
    """owner.name replaced by make(the original) inside the block."""
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def _distributed_optimizer_on_cpu():
    """A float64 model's parameters through the distributed optimizer as a float32 model's go on a GPU. It sorts its
    parameters by their type names, which name CUDA tensors: a CPU float32 or float64 parameter is named a CUDA
    float32 one, so its shard is a view of the parameter itself, stepped in place (no float16 copy). It hands each
    shard its gradient as grad.float(), the identity on a float32 model: on a float64 one it stays the identity."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    build = DistributedOptimizer._build_model_and_main_param_groups.__func__
    copy_grads = DistributedOptimizer._copy_model_grads_to_main_grads

    def cuda_float_name(type_name):
        def name(tensor, *a, **k):
            if not a and not k and tensor.device.type == "cpu" and tensor.dtype in (torch.float32, torch.float64):
                return "torch.cuda.FloatTensor"
            return type_name(tensor, *a, **k)
        return name

    def float_keeps_double(to_float):
        return lambda tensor: tensor if tensor.dtype == torch.float64 else to_float(tensor)

    def build_on_cpu(cls, *args, **kwargs):
        with _patched(torch.Tensor, "type", cuda_float_name):
            return build(cls, *args, **kwargs)

    def copy_grads_in_double(self):
        with _patched(torch.Tensor, "float", float_keeps_double):
            return copy_grads(self)
    DistributedOptimizer._build_model_and_main_param_groups = classmethod(build_on_cpu)
    DistributedOptimizer._copy_model_grads_to_main_grads = copy_grads_in_double
