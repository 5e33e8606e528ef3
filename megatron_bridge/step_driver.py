"""Run one training step of Megatron-Core's own GPTModel (on CPU over gloo) and write a step dump (moe-step/1) for
the oracle's global step to judge.

    python step_driver.py CASE.json OUT_DIR [--bug NAME]

CASE.json: {"model": {model config keys: "layer" (golden layer keys), "vocab", "num_layers"}, "layout": {"world",
            "tp" (with sequence parallelism), "cp", "pp", "ep", "etp"}, "seq": S, "global_batch": B,
            "micro_batch": b, "seed": n, "per_token_loss": bool,
            "padding": [masked positions at the end of sequence b, cycled],
            "dispatcher": "alltoall" | "allgather", "semantics" (what the dump claims Megatron computes),
            "optimizer": {"lr", "beta1", "beta2", "eps", "weight_decay", "clip_grad"} (default OPTIMIZER),
            "distributed_optimizer": bool (Megatron's DistributedOptimizer; the dump's grad_ranges say which range
            of each parameter's gradient each rank's optimizer stepped),
            "router_padding_mask": bool (hand the router the padding mask, as a loop that passes padding_mask does;
            judge such a dump with -router-counts-padding),
            "capture_misuse": one of CAPTURE_MISUSES (the capture must refuse the step)}

The model is the oracle's (reference/model.hpp): a word embedding, blocks h + MoE(RMSNorm(h)) — with
model.attention {heads, groups, head_dim, rope_base} preceded by h + Attn(RMSNorm(h)), causal GQA with rotate-half
RoPE — a final RMSNorm, an untied output layer and the CE over a loss mask. Megatron builds it as a GPTModel whose
TransformerLayer has an RMSNorm before the MoE layer and, with attention, its local SelfAttention (fused linear_qkv,
DotProductAttention, linear_proj; IdentityOp without). The step goes through Megatron's own machinery:
get_forward_backward_func over the microbatches of each replica (Megatron's sampler order: microbatch i of replica r
holds sequences i·b·dp + r·b + [0, b)), the loss function of pretrain_gpt (sum of masked CE, token count),
DistributedDataParallel with its gradient buffers, and finalize_model_grads, then Megatron's optimizer (Adam with
weight decay and clipping, torch's AdamW where neither TransformerEngine nor Apex is installed, each group's decay
set by its parameter scheduler). Under TP its norms are marked sequence-parallel as TransformerEngine's are, so
finalize_model_grads sums their gradients over TP. The dump is written by python/moe_capture_step.py, the capture a
user calls around their own step, wrapped around this one as a user would: what it holds is that module's.
"""
import os
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cpu_patches  # noqa: E402

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import driver  # noqa: E402  (the layer bridge: its TransformerConfig mapping; python/ on the path)
import step_bugs  # noqa: E402
from moe_capture_step import capture_step  # noqa: E402
from moe_capture_step_model import megatron_names, routers  # noqa: E402
from step_optimizer import megatron_optimizer  # noqa: E402

# Ways of calling the step capture wrongly, each refused (CaptureError) with nothing written.
CAPTURE_MISUSES = ("attention_mask", "rope_interleaved", "optimizer_not_watched", "replica_not_recorded",
                   "losses_not_given")


def oracle_params(case):
    """The global parameters under the oracle's names (python/src/bind_step.cpp), float64, the same on every rank."""
    m = case["model"]
    c = m["layer"]
    rng = np.random.default_rng(case["seed"])
    h, E, d, V = c["hidden"], c["num_experts"], c["ffn_hidden"], m["vocab"]
    p = {"embedding": rng.normal(0, 1, (V, h))}

    def moe_block(draw, pre):
        """A block's MoE parameters: its norm, router, experts, expert bias and shared expert."""
        p[pre + "block_norm"] = 1 + 0.1 * draw.normal(0, 1, h)
        p[pre + "router_weight"] = draw.normal(0, 1 / np.sqrt(h), (E, h))
        for e in range(E):
            p[pre + f"expert_fc1[{e}]"] = draw.normal(0, 1 / np.sqrt(h), (2 * d, h))
            p[pre + f"expert_fc2[{e}]"] = draw.normal(0, 1 / np.sqrt(d), (h, d))
        if c.get("expert_bias"):
            p[pre + "expert_bias"] = draw.integers(-8, 9, E) / 64.0
        ds = c.get("shared_expert_ffn_hidden") or 0
        if ds:
            p[pre + "shared_fc1"] = draw.normal(0, 1 / np.sqrt(h), (2 * ds, h))
            p[pre + "shared_fc2"] = draw.normal(0, 1 / np.sqrt(ds), (h, ds))

    for layer in range(m.get("num_layers", 1)):
        moe_block(rng, f"layer{layer}.")
    p["final_norm"] = 1 + 0.1 * rng.normal(0, 1, h)
    p["head"] = rng.normal(0, 1 / np.sqrt(h), (V, h))
    depth = m.get("mtp_depth", 0)
    if depth:  # each depth's enorm, hnorm, eh_proj, block and final norm, drawn apart (the main model keeps its values)
        mtp = np.random.default_rng([case["seed"], 13])
        for k in range(depth):
            pre = f"mtp{k}."
            p[pre + "enorm"] = 1 + 0.1 * mtp.normal(0, 1, h)
            p[pre + "hnorm"] = 1 + 0.1 * mtp.normal(0, 1, h)
            p[pre + "eh_proj"] = mtp.normal(0, 1 / np.sqrt(2 * h), (h, 2 * h))
            moe_block(mtp, pre)
            p[pre + "final_norm"] = 1 + 0.1 * mtp.normal(0, 1, h)
    a = m.get("attention")
    if a:  # drawn apart, so a model without attention keeps its values
        att = np.random.default_rng([case["seed"], 11])
        q, kv = a["heads"] * a["head_dim"], a["groups"] * a["head_dim"]
        blocks = [f"layer{layer}." for layer in range(m.get("num_layers", 1))] + [f"mtp{k}." for k in range(depth)]
        for pre in blocks:
            p[pre + "attention_norm"] = 1 + 0.1 * att.normal(0, 1, h)
            p[pre + "attention_wq"] = att.normal(0, 1 / np.sqrt(h), (q, h))
            p[pre + "attention_wk"] = att.normal(0, 1 / np.sqrt(h), (kv, h))
            p[pre + "attention_wv"] = att.normal(0, 1 / np.sqrt(h), (kv, h))
            p[pre + "attention_wo"] = att.normal(0, 1 / np.sqrt(q), (h, q))
    return p


def global_batch(case):
    """ids and labels [B, S] uniform in [0, V); the last `padding[b % len]` positions of sequence b masked."""
    rng = np.random.default_rng([case["seed"], 7])
    B, S, V = case["global_batch"], case["seq"], case["model"]["vocab"]
    ids = rng.integers(0, V, (B, S))
    labels = rng.integers(0, V, (B, S))
    mask = np.ones((B, S), dtype=bool)
    pattern = case.get("padding") or [0]
    for b in range(B):
        n = pattern[b % len(pattern)]
        if n:
            mask[b, S - n:] = False
    return ids, labels, mask


def transformer_config(case):
    """The layer bridge's TransformerConfig for the model: its MoE options, RMSNorm, no dropout, float64."""
    m = case["model"]
    layer_case = {"config": m["layer"], "layout": case["layout"], "dispatcher": case.get("dispatcher", "alltoall"),
                  "dtype": "float64"}
    config = driver.transformer_config(layer_case)
    config.num_layers = m.get("num_layers", 1)
    config.normalization = "RMSNorm"
    config.layernorm_epsilon = m.get("rms_eps", 1e-6)
    config.hidden_dropout = 0.0
    config.attention_dropout = 0.0
    config.calculate_per_token_loss = case.get("per_token_loss", False)
    config.moe_per_layer_logging = False
    config.batch_p2p_comm = False  # one isend / irecv at a time (gloo has no batched p2p)
    a = m.get("attention")
    if a:  # causal GQA with RoPE (rotate-half), Megatron's local attention, unfused
        config.num_attention_heads, config.num_query_groups = a["heads"], a["groups"]
        config.kv_channels = a["head_dim"]
        config.rotary_base = a.get("rope_base", 10000.0)
        config.masked_softmax_fusion = False
        config.apply_rope_fusion = False
    if m.get("mtp_depth"):  # multi-token prediction after the main model, on the last stage
        config.mtp_num_layers = m["mtp_depth"]
        config.mtp_loss_scaling_factor = m.get("mtp_loss_scale", 0.1)
    vpp = case["layout"].get("vpp", 1)
    if vpp > 1:  # virtual stages: model chunks, and Megatron's interleaved 1F1B schedule
        config.virtual_pipeline_model_parallel_size = vpp
    return config


class SequenceParallelRMSNorm:
    """torch's RMSNorm in the model's dtype, its weight marked as TransformerEngine's norms mark theirs: under
    sequence parallelism each TP rank sees a slice of the sequence, so finalize_model_grads sums the weight's gradient
    over TP (Megatron's WrappedTorchNorm refuses sequence parallelism outright)."""

    def __new__(cls, config, hidden_size, eps=1e-5, **_):
        norm = torch.nn.RMSNorm(hidden_size, eps=eps, dtype=config.params_dtype)
        setattr(norm.weight, "sequence_parallel", config.sequence_parallel)
        return norm


def build_model(config, case, vp_stage=None, bug=None):
    """The GPTModel of one model chunk (vp_stage None without VPP): its layers, and the embedding or the final norm
    and head where the chunk is the first or the last of the pipeline. The RoPE base is handed to the constructor, as
    pretrain_gpt.py's model provider does: GPTModel builds its rotary embedding from that argument, not from
    config.rotary_base (a seeded bug leaves it out, step_bugs.py)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add

    moe = get_moe_module_spec(use_te=False, num_experts=config.num_moe_experts, moe_grouped_gemm=False)
    attention = case["model"].get("attention")
    if attention:  # pre-norm attention before the MoE block: Megatron's local layers
        from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
        from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
        from megatron.core.transformer.dot_product_attention import DotProductAttention
        from megatron.core.transformer.enums import AttnMaskType
        from megatron.core.transformer.identity_op import IdentityOp
        attention_spec = dict(
            input_layernorm=SequenceParallelRMSNorm,
            self_attention=ModuleSpec(module=SelfAttention, params={"attn_mask_type": AttnMaskType.causal},
                                      submodules=SelfAttentionSubmodules(
                                          linear_qkv=ColumnParallelLinear, core_attention=DotProductAttention,
                                          linear_proj=RowParallelLinear, q_layernorm=IdentityOp,
                                          k_layernorm=IdentityOp)),
            self_attn_bda=get_bias_dropout_add)
    layer = ModuleSpec(module=TransformerLayer,
                       submodules=TransformerLayerSubmodules(pre_mlp_layernorm=SequenceParallelRMSNorm, mlp=moe,
                                                             mlp_bda=get_bias_dropout_add,
                                                             **(attention_spec if attention else {})))
    block = TransformerBlockSubmodules(layer_specs=[layer] * get_num_layers_to_build(config, vp_stage=vp_stage),
                                       layer_norm=SequenceParallelRMSNorm)
    from megatron.core import parallel_state as ps
    mtp = None
    last = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage)
    if case["model"].get("mtp_depth") and last:  # each depth: its norms, eh_proj, a layer like the main ones
        from megatron.core.tensor_parallel.layers import ColumnParallelLinear
        from megatron.core.transformer.multi_token_prediction import (
            MultiTokenPredictionBlockSubmodules, MultiTokenPredictionLayer, MultiTokenPredictionLayerSubmodules)
        depth = ModuleSpec(module=MultiTokenPredictionLayer, submodules=MultiTokenPredictionLayerSubmodules(
            enorm=SequenceParallelRMSNorm, hnorm=SequenceParallelRMSNorm, eh_proj=ColumnParallelLinear,
            mtp_model_layer=layer, layer_norm=SequenceParallelRMSNorm))
        mtp = MultiTokenPredictionBlockSubmodules(layer_specs=[depth] * case["model"]["mtp_depth"])
    return GPTModel(config, block, vocab_size=case["model"]["vocab"], max_sequence_length=case["seq"],
                    share_embeddings_and_output_weights=False,
                    position_embedding_type="rope" if attention else "none",
                    **({"rotary_base": attention.get("rope_base", 10000.0)}
                       if attention and not step_bugs.drops_rope_base(bug) else {}),
                    pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
                    post_process=last, vp_stage=vp_stage, mtp_block_spec=mtp)


def run_rank(rank, world, case, out, port, bug, resume=None):
    """One rank's step. resume: {"save": DIR} saves Megatron's distributed checkpoint of the model and its optimizer
    after the step to DIR (and the whole parameters and Adam moments after it, DIR/params_after.npz and
    moments_after.npz, for the next step's inputs); {"load": DIR} builds the model and the optimizer's state from that
    checkpoint, at this case's layout, instead of from the seed and zero moments."""
    resume = resume or {}
    misuse = case.get("capture_misuse")  # a way of calling the capture it must refuse (step_checks.py)
    if misuse not in (None, *CAPTURE_MISUSES):
        raise SystemExit(f"step_driver: capture_misuse {misuse!r}: one of {', '.join(CAPTURE_MISUSES)}")
    patches = cpu_patches.apply_step()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    layout = case["layout"]
    vpp = layout.get("vpp", 1)
    if vpp > 1 and resume:
        raise SystemExit("step_driver: VPP cases run without a checkpoint")
    ps = driver.initialize_parallel(layout)
    config = transformer_config(case)
    # The model chunks this rank holds (one without VPP); every parameter keyed by (chunk, Megatron's name).
    stages = list(range(vpp)) if vpp > 1 else [None]
    chunks = [build_model(config, case, v, bug) for v in stages]
    gpt = chunks[0]  # without VPP, the model
    start = None  # what the dump claims the step starts from: the live model's parameters, else this
    if "load" in resume:
        # The step starts where the saved one ended: the model from Megatron's checkpoint (resharded to this layout
        # by its loader), the dump's inputs from the whole parameters and moments the saving run ended with.
        from megatron.core import dist_checkpointing
        loaded = dist_checkpointing.load({"model": gpt.sharded_state_dict()}, resume["load"])
        gpt.load_state_dict(loaded["model"], strict=False)
        step_bugs.after_load(bug, gpt, ps)
        saved = pathlib.Path(resume["load"])
        start = {"params": dict(np.load(saved / "params_after.npz")),
                 "moments": dict(np.load(saved / "moments_after.npz")), "steps_before": 1}
    else:
        params = oracle_params(case)
        with torch.no_grad():
            trained = {(c, meg): p for c, chunk in enumerate(chunks) for meg, p in chunk.named_parameters()}
            for c, v in enumerate(stages):
                for (meg, _), held in megatron_names(case["model"], ps, config, v).items():
                    held.put(trained[c, meg], torch.from_numpy(np.ascontiguousarray(held.shard(params[held.ora]))))
            for block, router in routers(chunks, config):
                bias = params.get(block + "expert_bias")
                if bias is not None:
                    router.expert_bias.copy_(torch.from_numpy(bias))
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=False, overlap_grad_reduce=False,
                                               use_distributed_optimizer=case.get("distributed_optimizer", False))
    # As training.py wraps them: the chunks after the first without their own gradient buckets.
    models = [DistributedDataParallel(config, ddp_config, chunk, disable_bucketing=c > 0)
              for c, chunk in enumerate(chunks)]
    model = models[0]
    config.finalize_model_grads_func = finalize_model_grads
    for m in models:
        m.train()
        m.zero_grad_buffer()

    dp, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    ids, labels, mask = global_batch(case)
    b = case["micro_batch"]
    m_micro = case["global_batch"] // (b * dp)

    def batches():
        """This replica's microbatches as Megatron's pretraining sampler hands them out: microbatch i holds
        sequences i·b·dp + r·b + [0, b), whole (the forward step takes this CP rank's positions)."""
        for i in range(m_micro):
            seqs = slice(i * b * dp + dp_rank * b, i * b * dp + dp_rank * b + b)
            batch = {"tokens": torch.from_numpy(ids[seqs]), "labels": torch.from_numpy(labels[seqs]),
                     "loss_mask": torch.from_numpy(mask[seqs].astype(np.float64)),
                     "position_ids": torch.arange(case["seq"]).unsqueeze(0).expand(b, -1)}
            if misuse == "attention_mask":
                batch["attention_mask"] = torch.ones(b, 1, case["seq"], case["seq"], dtype=torch.bool)
            yield batch

    # Under CP this rank holds positions of chunks c and 2cp−1−c of 2cp (Megatron's get_batch_on_this_cp_rank).
    cp, cp_rank = ps.get_context_parallel_world_size(), ps.get_context_parallel_rank()
    chunk = case["seq"] // (2 * cp)
    positions = np.r_[cp_rank * chunk:(cp_rank + 1) * chunk, (2 * cp - 1 - cp_rank) * chunk:(2 * cp - cp_rank) * chunk]

    loss = {"num_microbatches": m_micro, "ce_factor": 1}  # what a seeded bug may change (step_bugs.py)

    def loss_func(loss_mask, output):
        """pretrain_gpt's: the masked CE's sum and the token count; the schedule divides by them (and by m)."""
        losses = output.double().view(-1)
        lm = loss_mask.view(-1)
        total = (losses * lm).sum()
        scaled, count = total * loss["ce_factor"], lm.sum()
        # What pretrain_gpt reports: the loss it returns and its token count, a pair training.py sums and divides.
        return scaled, count.to(torch.int), {"lm loss": torch.stack([scaled.detach(), count.detach().double()])}

    def forward_step(data_iterator, model_chunk):
        batch = {k: t[:, positions] for k, t in next(data_iterator).items()}
        # With router_padding_mask the router is handed the padded positions (a loop that passes padding_mask;
        # pretrain_gpt does not), so that it leaves them out of its aux, z and bias statistics.
        padding = {"padding_mask": batch["loss_mask"] == 0} if case.get("router_padding_mask") else {}
        output = model_chunk(batch["tokens"], batch["position_ids"], None, labels=batch["labels"],
                             loss_mask=batch["loss_mask"], **padding)
        return output, lambda o: loss_func(batch["loss_mask"], o)

    import megatron.core.package_info as info
    notes = {"cpu_patches": patches, **({"seeded_bug": bug} if bug else {})}
    if misuse == "rope_interleaved":  # attention the oracle does not model, from the start: refused
        config.rotary_interleaved = True
    # The capture reads the model's configuration before a bug changes it (what the run is meant to compute).
    with capture_step(models, out, semantics=case.get("semantics", "megatron-core-0.19"), start=start,
                      producer=f"megatron-core {info.__version__} on CPU, gloo (megatron_bridge/step_driver.py)",
                      notes=notes) as cap:
        # Before the optimizer (a bug may change its groups); under VPP a bug sees the first model chunk.
        bug_undo = step_bugs.inject(bug, config, model, ps, loss)
        optimizer = megatron_optimizer(models, case)
        if "load" in resume and not step_bugs.skips_optimizer_state(bug):
            # Adam's state from the checkpoint, resharded to this layout by Megatron's loader.
            from megatron.core import dist_checkpointing
            wanted = optimizer.sharded_state_dict({"model": gpt.sharded_state_dict()}, is_loading=True)
            optimizer.load_state_dict(dist_checkpointing.load({"optimizer": wanted}, resume["load"])["optimizer"])
        if misuse != "optimizer_not_watched":
            cap.watch(optimizer)
        # Each chunk reads the same microbatches in turn (the interleaved schedule takes one iterator a chunk).
        data = [batches() for _ in chunks] if vpp > 1 else batches()
        if misuse != "replica_not_recorded" or dp_rank == 0:
            data = cap.data(data)
        losses = get_forward_backward_func()(forward_step_func=forward_step, data_iterator=data, model=models,
                                             num_microbatches=m_micro, seq_length=case["seq"],
                                             micro_batch_size=b, forward_only=False)
        if misuse != "losses_not_given":
            cap.losses(losses)
        optimizer.step()
        bug_undo()
        if "save" in resume:
            save_checkpoint(gpt, optimizer, cap, resume["save"], rank)
    torch.distributed.barrier()
    ps.destroy_model_parallel()
    torch.distributed.destroy_process_group()


def save_checkpoint(gpt, optimizer, cap, folder, rank):
    """Megatron's distributed checkpoint of the model and its optimizer's state, as training.py saves them, and the
    whole parameters and Adam moments the step ended with (params_after.npz, moments_after.npz: the next step's
    claimed start)."""
    import queue

    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.strategies import filesystem_async
    # The writer's threads report through a queue; Megatron makes it a spawned manager's, which a forked (daemonic)
    # rank may not start. Its writes run on this rank's threads, so a thread queue carries the same results.
    filesystem_async.get_write_results_queue = lambda mp_mode="spawn": queue.Queue()
    torch.cuda.synchronize = lambda *a, **k: None  # the preload's device sync: the tensors are on the CPU
    pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
    saved = {"model": gpt.sharded_state_dict()}
    saved["optimizer"] = optimizer.sharded_state_dict(saved)
    dist_checkpointing.save(saved, folder)
    whole, moments = cap.whole_parameters(), cap.whole_moments()
    if rank == 0:
        np.savez(pathlib.Path(folder) / "params_after.npz", **whole)
        np.savez(pathlib.Path(folder) / "moments_after.npz", **moments)


def run_resumed(case, resumed_layout, work, bug=None):
    """A step at case's layout saved with Megatron's distributed checkpointing (the model and its optimizer's state),
    then the next step from that checkpoint at `resumed_layout`: its dump (work/dump) starts from the parameters and
    Adam moments the first step ended with (inputs/, optimizer.steps_before 1). A bug named here applies to the
    loading (step_bugs.after_load, step_bugs.skips_optimizer_state)."""
    work = pathlib.Path(work)
    run_case(case, work / "first", None, {"save": str(work / "checkpoint")})
    second = dict(case, layout=resumed_layout)
    run_case(second, work / "dump", bug, {"load": str(work / "checkpoint")})


def run_case(case, out, bug=None, resume=None):
    """Megatron's step of `case` on its world of ranks, forked from this process (they share its imports of torch
    and Megatron; a spawned rank spends ~8 s importing them), its dump written to `out`. This process computes
    nothing itself, so no thread pool is copied into a rank. A rank's output (Megatron's deprecation notices, torch's
    warnings) is dropped; an exception in a rank is raised here with its traceback."""
    import megatron.core.models.gpt  # noqa: F401
    import megatron.core.optimizer  # noqa: F401
    import megatron.core.pipeline_parallel  # noqa: F401
    verbose = os.environ.get("MOE_STEP_VERBOSE", "0")
    if verbose not in ("0", "1"):
        raise SystemExit(f"step_driver: MOE_STEP_VERBOSE={verbose!r}: 0 or 1")
    world = case["layout"]["world"]
    driver.join_ranks(mp.start_processes(run_quietly, args=(verbose == "0", world, case, str(out),
                                                            driver.free_port(), bug, resume),
                                         nprocs=world, join=False, start_method="fork"))


def run_quietly(rank, quiet, *args):
    if quiet:  # MOE_STEP_VERBOSE=1 keeps the ranks' output (to debug a rank that exits)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    run_rank(rank, *args)


def main():
    case, out, bug = driver.case_arguments(__doc__, "a seeded step bug (step_bugs.py)")
    run_case(case, out, bug)


if __name__ == "__main__":
    main()
