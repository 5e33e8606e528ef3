"""The committed model cases: one global step of a small model under a layout's data split, a loss mode and a
semantics spec. Each deviation a model case pins comes as a pair: the `intended` case and a Megatron one, with
the same inputs (the same seed: the name without _megatron), so that a reader sees both numbers side by side.

  pins   deviations the case must make visible: its numbers change when the deviation is toggled (the generator
         runs both and refuses a seed where nothing moves)
"""
import case_format

VOCAB = 16


def layer(score_function, **extra):
    cfg = {"hidden": 8, "num_experts": 4, "topk": 2, "ffn_hidden": 4, "score_function": score_function}
    cfg.update(extra)
    return cfg


class ModelCase:
    def __init__(self, name, description, config, semantics="intended", tp=1, cp=1, dp=1, seq=8, size=2,
                 micro_batch=1, loss_mode="sum", padding=(), num_layers=1, n_hash_layers=0, pins=(), attention=None,
                 mtp_depth=0, mtp_loss_scale=0.1):
        self.name, self.description, self.pins = name, description, tuple(pins)
        # The twins share their seed: the intended case's name.
        self.seed_name = name.replace("_megatron_main", "").replace("_megatron_core", "").replace("_megatron", "")
        self.spec = dict(
            mcfg=dict(layer=case_format.full_config(dict(config, semantics=semantics)), num_layers=num_layers,
                      n_hash_layers=n_hash_layers, vocab=VOCAB, rms_eps=1e-6,
                      attention=None if attention is None else dict(dict(rope_base=10000.0), **attention),
                      mtp_depth=mtp_depth, mtp_loss_scale=mtp_loss_scale if mtp_depth else None),
            tp=tp, cp=cp, dp=dp, seq=seq, size=size, micro_batch=micro_batch, loss_mode=loss_mode,
            padding=list(padding) or [0] * size)


def twins(name, description, config, megatron, pins, **kw):
    """The intended case and its Megatron twin (semantics `megatron`), both required to show `pins`."""
    return [ModelCase(name, description + " (intended)", config, "intended", pins=pins, **kw),
            ModelCase(name + "_megatron", description + f" ({megatron})", config, megatron, pins=pins, **kw)]


CORE = "megatron-core-0.19"
CORE_MASKED = "megatron-core-0.19,-router-counts-padding"   # a loop that passes padding_mask to the model
MAIN_MASKED = "megatron-main,-router-counts-padding"

MODEL_CASES = [
    *twins("cp2_uneven_padding", "CP2, padding 3 of 8 on sequence 0: CP rank 0 holds 2 valid tokens, rank 1 holds 3",
           layer("sigmoid"), CORE, ("ce-per-cp-rank",), cp=2, padding=(3, 0), num_layers=2),
    *twins("tp2_cp2_z_loss", "TP2·CP2 with z-loss, padding uneven over the four source ranks",
           layer("softmax", z_loss_coeff=0.05), CORE_MASKED, ("z-loss-local-mean",), tp=2, cp=2,
           padding=(3, 1)),
    *twins("seq_aux_micro_batch_2", "seq_aux on micro-batch 2, sequences of valid lengths 5, 8, 7 and 4",
           layer("sigmoid", aux_loss_type="seq_aux", aux_loss_coeff=0.05), CORE_MASKED, ("seq-aux-mean-length",),
           size=4, micro_batch=2, padding=(3, 0, 1, 4)),
    ModelCase("seq_aux_micro_batch_2_megatron_core", "seq_aux on micro-batch 2 under megatron-core-0.19: the router "
              "counts the padded tokens", layer("sigmoid", aux_loss_type="seq_aux", aux_loss_coeff=0.05), CORE,
              size=4, micro_batch=2, padding=(3, 0, 1, 4), pins=("router-counts-padding",)),
    *twins("per_token_aux_tp2_cp2", "per-token loss with aux on TP2·CP2, valid tokens uneven over the source ranks",
           layer("softmax", aux_loss_type="aux", aux_loss_coeff=0.05), MAIN_MASKED, ("per-token-aux-local-tokens",),
           tp=2, cp=2, loss_mode="per-token", padding=(2, 5)),
    # The local rule alone, as Megatron's code means it (PR #7481 applied): each source rank its own count. Toggling
    # per-token-aux-group-tokens on gives the twin's Megatron (every rank the group's count).
    ModelCase("per_token_aux_tp2_cp2_megatron_local_count", "the same under a Megatron whose local count stays "
              f"local ({MAIN_MASKED},-per-token-aux-group-tokens)", layer("softmax", aux_loss_type="aux",
                                                                          aux_loss_coeff=0.05),
              MAIN_MASKED + ",-per-token-aux-group-tokens", tp=2, cp=2, loss_mode="per-token", padding=(2, 5),
              pins=("per-token-aux-local-tokens", "per-token-aux-group-tokens")),
    *twins("global_aux_dp2", "global_aux over DP2 and 2 microbatches per replica, padded",
           layer("sqrtsoftplus", aux_loss_type="global_aux", aux_loss_coeff=0.05), CORE, ("global-aux-dp-average",),
           dp=2, size=4, padding=(2, 0, 0, 3)),
    *twins("capacity_bias_update", "capacity 1.0 padded to capacity on TP2 source ranks, expert-bias update",
           layer("sigmoid", expert_bias=True, bias_update_rate=1e-3, capacity_factor=1.0, pad_to_capacity=True),
           CORE, ("bias-counts-padded-slots",), tp=2, padding=(2, 0)),
    *twins("hash_layer", "a hash layer then a routed layer with aux, z-loss and a shared expert, CP2, avg loss",
           layer("softmax", aux_loss_type="aux", aux_loss_coeff=0.05, z_loss_coeff=0.01,
                 shared_expert_ffn_hidden=4), CORE, ("router-counts-padding",), cp=2, loss_mode="avg",
           padding=(1, 3), num_layers=2, n_hash_layers=1),
    ModelCase("attention_block", "pre-norm blocks with causal GQA attention (4 heads over 2 groups, RoPE) and MoE "
              "(a hash layer, then sigmoid with seq_aux and a shared expert) on TP2·CP2, padded",
              layer("sigmoid", aux_loss_type="seq_aux", aux_loss_coeff=0.05, shared_expert_ffn_hidden=4), tp=2, cp=2,
              padding=(3, 0), num_layers=2, n_hash_layers=1,
              attention=dict(heads=4, groups=2, head_dim=4)),
    *twins("mtp_cp2", "two MTP depths (λ 0.3) after a block with attention, CP2, padding uneven over the CP ranks",
           layer("sigmoid", aux_loss_type="aux", aux_loss_coeff=0.05, expert_bias=True, bias_update_rate=1e-3),
           CORE, ("ce-per-cp-rank",), cp=2, padding=(3, 0), num_layers=1,
           attention=dict(heads=2, groups=1, head_dim=4), mtp_depth=2, mtp_loss_scale=0.3),
]
