"""Take one whole training step out of a live Megatron-Core job, as a moe-step/1 folder that `moe-oracle compare`
judges with the oracle's global step (compare/README.md gives the format).

    from moe_capture_step import capture_step
    with capture_step(model, "dump/step100", optimizer=optimizer) as cap:   # model: the chunks (DDP-wrapped or not)
        losses = forward_backward_func(forward_step_func=forward_step, data_iterator=cap.data(data_iterator),
                                       model=model, num_microbatches=m, ...)
        cap.losses(losses)                          # the schedule's list, as pretrain_gpt's loss_func reports it
        optimizer.step()                            # as training.py calls it; recorded, not changed
    # every rank wrote its rank<r>/, rank 0 step.json and inputs/; `moe-oracle compare dump/step100`

What is recorded: the model (read from the live GPTModel chunks and their TransformerConfig: the MoE layer's config
as moe_capture.megatron_config reads it, layers, vocab, RMSNorm eps, attention and MTP), the layout
(megatron.core.parallel_state), every microbatch the data iterators handed out, put back in the global batch in the
order Megatron's pretraining sampler takes it (microbatch i of data-parallel rank r holds sequences i·b·dp + r·b +
[0, b)) — whole sequences: under CP the forward step splits them, as get_batch_on_this_cp_rank does; the parameters
(and, after a resumed checkpoint, Adam's moments) the step started from, gathered whole from every rank's shards; and
per rank what the optimizer was handed (each parameter's main_grad after finalize_model_grads, its range of it under
the distributed optimizer), the grad norm it reported, the parameters, expert biases and Adam's moments after its step,
and the lm loss training.py would log. Nothing in the training loop changes: the optimizer's step is wrapped for the
block and unwrapped when it ends, whatever happened in it.

The claims the dump makes that the live objects cannot tell (what the run is meant to compute): `semantics` (a
profile or spec, `moe-oracle semantics`), `no_decay` (the parameter classes the weight decay is meant to skip;
Megatron's default skips the norms) and `start`, the state a resumed step is meant to start from where it is known
apart from the loaded model ({"params": whole arrays by the oracle's names, "moments": {"exp_avg.<stem>": ...},
"steps_before": n}: what the step before the checkpoint ended with, StepCapture.whole_parameters and whole_moments).

Refused with a CaptureError naming the reason, when the block starts where it can be known then: a model whose
parameters the oracle's model does not have (TransformerEngine's fused names, biases, LayerNorm, tied embeddings,
attention it does not model), an optimizer other than Adam with decoupled weight decay, a microbatch whose
position_ids are not 0..S-1 or that carries an attention mask or keys it does not know, a step the optimizer
skipped, microbatches that disagree between the ranks that read them, and a target folder that is not a new or
empty one (replace=True replaces an earlier dump). The folder is written as moe_capture_write.py writes one: staged
beside `out` and swapped in whole when every rank has written its part.
"""
import contextlib

import numpy as np

from moe_capture import megatron_config
from moe_capture_step_model import describe, megatron_names, routers, stem, whole_shapes
from moe_capture_step_optimizer import hyperparameters, optimizer_ranges, optimizer_state, steps_taken
from moe_capture_step_whole import gather_moments, whole_params
from moe_capture_write import CaptureError, DumpWriter, Ranks, capture_block, save_json, save_npy, sync_directory

FORMAT = "moe-step/1"
BATCH_KEYS = ("tokens", "labels", "loss_mask", "position_ids", "attention_mask")


def _unwrap(model):
    """The GPTModel inside DDP and Float16Module wrappers."""
    while hasattr(model, "module"):
        model = model.module
    return model


def _numpy(t):
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def _microbatch(batch):
    """One microbatch as the iterator handed it out: (tokens, labels, loss_mask as bool), each [b, S]."""
    if not isinstance(batch, dict):
        raise CaptureError(f"the data iterator handed out a {type(batch).__name__}: a dict of tokens, labels, "
                           "loss_mask (pretrain_gpt's batch) is recorded")
    unknown = sorted(set(batch) - set(BATCH_KEYS))
    missing = [k for k in ("tokens", "labels", "loss_mask") if k not in batch]
    if unknown or missing:
        raise CaptureError(f"a microbatch {'without ' + ', '.join(missing) if missing else ''}"
                           f"{' and ' if missing and unknown else ''}{'with ' + ', '.join(unknown) if unknown else ''}:"
                           f" its keys are {', '.join(BATCH_KEYS)} (attention_mask None)")
    if batch.get("attention_mask") is not None:
        raise CaptureError("a microbatch with an attention_mask: the oracle's attention is causal over whole "
                           "sequences (create_attention_mask_in_dataloader off)")
    tokens, labels, mask = (_numpy(batch[k]) for k in ("tokens", "labels", "loss_mask"))
    if tokens.ndim != 2 or labels.shape != tokens.shape or mask.shape != tokens.shape:
        raise CaptureError(f"a microbatch of tokens {tokens.shape}, labels {labels.shape}, loss_mask {mask.shape}: "
                           "each [micro batch, sequence]")
    if not np.isin(mask, (0, 1)).all():
        raise CaptureError("a loss_mask other than 0 and 1: a weighted loss mask is not modelled")
    positions = batch.get("position_ids")
    if positions is not None:
        want = np.broadcast_to(np.arange(tokens.shape[1]), tokens.shape)
        if _numpy(positions).shape[-1] != tokens.shape[1] or not (_numpy(positions) == want).all():
            raise CaptureError("position_ids other than 0..S-1 (reset at document ends, or a CP rank's split "
                               "sequence): record whole sequences, before get_batch_on_this_cp_rank splits them")
    return tokens.astype(np.int64), labels.astype(np.int64), mask.astype(bool)


class StepCapture:
    """What one training step left; written when capture_step's block ends."""

    def __init__(self, chunks, model, ps, ranks, start):
        self.chunks, self.model, self.ps, self.ranks = chunks, model, ps, ranks
        config = chunks[0].config
        self.config = config
        self.vpp = len(chunks)
        stages = list(range(self.vpp)) if self.vpp > 1 else [None]
        self.names = {(c, meg, part): held for c, v in enumerate(stages)
                      for (meg, part), held in megatron_names(model, ps, config, v).items()}
        self.trained = {(c, meg): p for c, gpt in enumerate(chunks) for meg, p in gpt.named_parameters()}
        unknown = sorted(meg for c, meg in set(self.trained) - {key[:2] for key in self.names})
        if unknown:
            raise CaptureError(f"the model has parameters the oracle's has not: {unknown[:6]}"
                               f"{' ...' if len(unknown) > 6 else ''} (Megatron's local layers are placed: no "
                               "TransformerEngine fused norms, no biases, SequentialMLP experts)")
        self.shapes = whole_shapes(model)
        self.routers = list(routers(chunks, config))
        self.start = start or {"params": self.whole_parameters()}
        self.streams = []  # per data iterator wrapped: the microbatches it handed out
        self.pairs = None  # the lm loss's (sum, count) over this rank's microbatches, on the last stage
        self.optimizer = None
        self.stepped = None  # (grads, hyperparameters, grad norm) of the wrapped step

    # --- during the step -------------------------------------------------------------------------------------
    def data(self, iterator):
        """`iterator` (or a list of them, one per model chunk, as the interleaved schedule takes them), each
        microbatch it hands out recorded; None stays None (a stage that reads no data)."""
        if iterator is None:
            return None
        if isinstance(iterator, list):
            return [self.data(it) for it in iterator]
        stream = []
        self.streams.append(stream)

        def recorded():
            for batch in iterator:
                stream.append(_microbatch(batch))
                yield batch
        return recorded()

    def losses(self, losses):
        """forward_backward_func's list on this rank: on the last stage one dict per microbatch whose "lm loss" is
        pretrain_gpt's (sum of the masked CE, token count) pair; elsewhere empty."""
        pairs = []
        for reported in losses or []:
            pair = _numpy(reported["lm loss"]).astype(np.float64).ravel() if "lm loss" in reported else None
            if pair is None or pair.size != 2:
                raise CaptureError("the schedule's losses: each microbatch's 'lm loss' as pretrain_gpt reports it, a "
                                   "(sum, token count) pair")
            pairs.append(pair)
        if pairs:
            self.pairs = np.sum(pairs, axis=0)

    def watch(self, optimizer):
        """Wraps `optimizer.step` for the block: the gradients it is handed, its hyperparameters and the norm it
        reports are recorded before and after the step runs as it would. Reads Adam's state the step starts from
        (collective where it is not empty on some rank)."""
        self.optimizer = optimizer
        if "moments" not in self.start:
            steps = steps_taken(optimizer)
            moments = optimizer_state(optimizer, self.names, self.trained)
            if steps == 0 and moments:
                raise CaptureError("Adam holds moments but no step count: the steps taken before are not known")
            self.start["steps_before"] = steps
            if any(self.ranks.gather(steps > 0)):
                ranges = optimizer_ranges(optimizer, self.names, self.trained)
                self.start["moments"] = gather_moments(self.names, moments, ranges, self.shapes, self.ranks.world)
        original = optimizer.step

        def step(*args, **kwargs):
            if self.stepped is not None:
                raise CaptureError("the optimizer stepped twice inside the capture: one step is captured")
            grads = {}
            for key, held in self.names.items():
                g = getattr(self.trained[key[:2]], "main_grad", None)
                if g is None:
                    raise CaptureError(f"{key[1]} has no main_grad when the optimizer steps (the model is not "
                                       "wrapped in Megatron's DistributedDataParallel)")
                grads[key] = held.select(g.detach().double().cpu()).clone()
            hyper = hyperparameters(optimizer)
            result = original(*args, **kwargs)
            updated, grad_norm = result[0], result[1]
            if not updated:
                raise CaptureError("the optimizer skipped the step (a non-finite gradient): nothing to compare")
            self.stepped = (grads, hyper, float(grad_norm))
            return result
        optimizer.step = step

    def remove(self):
        if self.optimizer is not None and "step" in vars(self.optimizer):
            del self.optimizer.step

    # --- whole arrays (collective) ---------------------------------------------------------------------------
    def whole_parameters(self):
        """The parameters and expert biases as the ranks hold them now, whole, by the oracle's names."""
        return whole_params(self.names, self.trained, self.routers, self.shapes, self.ranks.world)

    def whole_moments(self):
        """Adam's moments as the ranks' optimizers hold them now, whole: {"exp_avg.<stem>", "exp_avg_sq.<stem>"}."""
        return gather_moments(self.names, optimizer_state(self.optimizer, self.names, self.trained),
                              optimizer_ranges(self.optimizer, self.names, self.trained), self.shapes,
                              self.ranks.world)

    # --- the end ---------------------------------------------------------------------------------------------
    def collect(self):
        """Every rank's report on every rank (collective): an error any rank met is raised on every rank."""
        ps = self.ps
        report = {"error": None}
        try:
            if self.stepped is None:
                raise CaptureError("the optimizer did not step inside the capture (pass optimizer= or call "
                                   "cap.watch(optimizer) before its step)")
            report["ranges"] = optimizer_ranges(self.optimizer, self.names, self.trained)
            report["grad_norm"] = self.stepped[2]
            report["hyper"] = self.stepped[1]
            first_tp = ps.get_tensor_model_parallel_rank() == 0 and ps.get_context_parallel_rank() == 0
            report["dp_rank"] = ps.get_data_parallel_rank()
            report["streams"] = self.streams if first_tp else []
            report["pairs"] = self.pairs if ps.get_tensor_model_parallel_rank() == 0 else None
        except CaptureError as e:
            report["error"] = str(e)
        reports = self.ranks.gather(report)
        failed = [(r, x["error"]) for r, x in enumerate(reports) if x["error"]]
        if failed:
            r, message = failed[0]
            raise CaptureError(message if r == self.ranks.rank else f"rank {r}: {message}")
        return reports

    def write_rank(self, folder, ranges):
        """rank<r>/: `ranges` is this rank's grad_ranges entry as collect() read it (None: every shard whole)."""
        d = folder / f"rank{self.ranks.rank}"
        d.mkdir()
        grads, _, _ = self.stepped
        for key, held in self.names.items():
            name = stem(held.ora)
            save_npy(d / f"param.{name}.npy", held.select(self.trained[key[:2]].detach().double().cpu()).numpy())
            if ranges is None:
                save_npy(d / f"grad.{name}.npy", grads[key].numpy())
            elif name in ranges:  # the elements this rank's optimizer stepped, reduce-scattered to it
                start, end = ranges[name]
                save_npy(d / f"grad.{name}.npy", grads[key].reshape(-1)[start:end].numpy())
        for name, (exp_avg, exp_avg_sq) in optimizer_state(self.optimizer, self.names, self.trained).items():
            save_npy(d / f"state.exp_avg.{name}.npy", exp_avg)
            save_npy(d / f"state.exp_avg_sq.{name}.npy", exp_avg_sq)
        for block, router in self.routers:
            bias = getattr(router, "expert_bias", None)
            if bias is not None:
                save_npy(d / f"param.{block}expert_bias.npy", bias.detach().double().cpu().numpy())
        sync_directory(d)

    def global_batch(self, reports):
        """The global batch (ids, labels, mask [B, S]) from every data-parallel rank's microbatches."""
        per_rank = {}
        for r, x in enumerate(reports):
            for stream in x["streams"]:
                known = per_rank.setdefault(x["dp_rank"], (r, stream))
                if len(stream) != len(known[1]) or any(
                        not all(np.array_equal(a, b) for a, b in zip(mine, theirs))
                        for mine, theirs in zip(stream, known[1])):
                    raise CaptureError(f"ranks {known[0]} and {r} (data-parallel rank {x['dp_rank']}) read different "
                                       "microbatches")
        dp = self.ps.get_data_parallel_world_size()
        missing = sorted(set(range(dp)) - set(per_rank))
        if missing:
            raise CaptureError(f"no rank of data-parallel rank(s) {missing} recorded its microbatches (wrap every "
                               "rank's data iterator with cap.data, on the first or the last stage)")
        counts = {r: len(s) for r, (_, s) in per_rank.items()}
        if len(set(counts.values())) != 1 or not counts[0]:
            raise CaptureError(f"the data-parallel ranks read {counts} microbatches: each the same number, > 0")
        shapes = {m[0].shape for _, s in per_rank.values() for m in s}
        if len(shapes) != 1:
            raise CaptureError(f"microbatches of shapes {sorted(shapes)}: one micro batch size and sequence length")
        (b, seq), = shapes
        m = counts[0]
        ids, labels, mask = (np.zeros((m * b * dp, seq), dtype=t) for t in (np.int64, np.int64, bool))
        for r, (_, stream) in per_rank.items():
            for i, (t, l, k) in enumerate(stream):  # Megatron's sampler: microbatch i of rank r
                rows = slice(i * b * dp + r * b, i * b * dp + r * b + b)
                ids[rows], labels[rows], mask[rows] = t, l, k
        return ids, labels, mask, b, m

    def write_meta(self, folder, reports, semantics_layer, producer, no_decay, notes):
        ids, labels, mask, b, m = self.global_batch(reports)
        pairs = [x["pairs"] for x in reports if x["pairs"] is not None]
        if not pairs:
            raise CaptureError("no rank handed the schedule's losses to cap.losses: the lm loss is not known")
        total = np.sum(pairs, axis=0)
        inputs = folder / "inputs"
        inputs.mkdir()
        save_npy(inputs / "input_ids.npy", ids)
        save_npy(inputs / "labels.npy", labels)
        save_npy(inputs / "loss_mask.npy", mask)
        for name, a in self.start["params"].items():
            save_npy(inputs / f"{stem(name)}.npy", a)
        for name, a in (self.start.get("moments") or {}).items():
            save_npy(inputs / f"{name}.npy", a)
        sync_directory(inputs)
        hyper = {tuple(sorted(x["hyper"].items())) for x in reports}
        if len(hyper) != 1:
            raise CaptureError(f"the ranks' optimizers differ: {sorted(hyper)}")
        ps, config = self.ps, self.config
        model = {k: v for k, v in self.model.items() if k != "layer"}
        meta = {"format": FORMAT, "producer": producer, "config": semantics_layer, "model": model,
                "layout": {"world": self.ranks.world, "tp": ps.get_tensor_model_parallel_world_size(),
                           "cp": ps.get_context_parallel_world_size(),
                           "pp": ps.get_pipeline_model_parallel_world_size(),
                           "ep": ps.get_expert_model_parallel_world_size(),
                           "etp": ps.get_expert_tensor_parallel_world_size(), "vpp": self.vpp},
                "batch": {"seq": int(ids.shape[1]), "size": int(ids.shape[0]), "micro_batch": b},
                "loss_mode": "per-token" if config.calculate_per_token_loss else "sum",
                "optimizer": dict(reports[0]["hyper"], no_decay=list(no_decay), state=True,
                                  steps_before=int(self.start.get("steps_before", 0))),
                **({"grad_ranges": [x["ranges"] for x in reports]} if reports[0]["ranges"] is not None else {}),
                "reported": {"grad_norm": [x["grad_norm"] for x in reports], "lm_loss": float(total[0] / total[1])},
                "notes": dict(notes or {}, num_microbatches=m)}
        save_json(folder / "step.json", meta)


@contextlib.contextmanager
def capture_step(model, out, semantics="megatron-core-0.19", optimizer=None, no_decay=("norms",), start=None,
                 producer=None, notes=None, replace=False):
    """Records the training step run in the block and writes `out` as moe-step/1 at its end (the module's doc).

    model: the model chunks (a list, one per virtual stage, or one), DDP-wrapped or not; optimizer: Megatron's
    optimizer (else call cap.watch(optimizer) in the block before it steps); semantics, no_decay, start: the claims
    of the module's doc; notes: step.json notes to add; replace: replace the dump `out` holds.

    Checked when the block starts (collective: every rank enters together): the model, the layout and `out`; the
    parameters the step starts from are gathered then."""
    if start is not None:  # a claim about the step's start: whole parameters, and moments only after a step
        if "params" not in start or ("moments" in start) != (int(start.get("steps_before", 0)) > 0):
            raise CaptureError("start: {'params': whole arrays} and, for a step after n ≥ 1 steps, 'moments' with "
                               "'steps_before': n (both or neither)")

    from megatron.core import parallel_state as ps

    chunks = [_unwrap(m) for m in (model if isinstance(model, (list, tuple)) else [model])]
    layer = dict(megatron_config(chunks[0].config), semantics=semantics)
    described = describe(chunks[0].config, chunks, layer)
    ranks = Ranks()
    cap = StepCapture(chunks, described, ps, ranks, dict(start) if start else None)
    if producer is None:
        import megatron.core.package_info as info
        producer = f"megatron-core {info.__version__} (moe_capture_step)"
    writer = DumpWriter(out, replace, ranks)
    with capture_block(writer, cap.remove):
        if optimizer is not None:
            cap.watch(optimizer)
        yield cap
    try:
        reports = cap.collect()
    except BaseException:
        writer.abandon()
        raise
    writer.finish(lambda folder: cap.write_rank(folder, reports[ranks.rank]["ranges"]),
                  lambda folder, _: cap.write_meta(folder, reports, layer, producer, no_decay, notes))
