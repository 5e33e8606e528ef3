"""Process groups against Megatron's own initialize_model_parallel, GTP/EGTP axes included.

For each layout below and each rank r (all ranks up to 32, a sample beyond), Megatron-Core's
parallel_state.initialize_model_parallel runs as rank r of the world with torch.distributed replaced by a recorder:
new_group returns an object that remembers its ranks, so the groups Megatron builds are read back through its own
getters (get_gtp_weight_remat_group, get_expert_data_parallel_group(with_gtp_remat=False), ...). Each must equal
what `moe-oracle groups --rank r --json` prints for that group name. Nothing here re-derives a group: a wrong
token set, axis order or GTP placement on either side shows up as a differing member list.

It runs in a forked child, so the recorder never touches the process group the layer cases use.
"""
import json
import os
import subprocess

# (name, layout flags for moe-oracle, initialize_model_parallel arguments). The seed-style layout is seed 000's
# GTP example scaled to EP: 128 ranks, CP 2, R = 64 (so D_w = 1), EP 8 with R_e = 4.
LAYOUTS = [
    ("process_groups_w16_tp2_ep2_gtp2_egtp2", dict(world=16, tp=2, etp=2, ep=2, gtp=2, egtp=2),
     dict(tensor_model_parallel_size=2, expert_tensor_parallel_size=2, expert_model_parallel_size=2,
          gtp_remat_size=2, expert_gtp_remat_size=2)),
    ("process_groups_w32_cp2_pp2_ep4_gtp2_egtp2", dict(world=32, cp=2, pp=2, ep=4, etp=1, gtp=2, egtp=2),
     dict(context_parallel_size=2, pipeline_model_parallel_size=2, expert_model_parallel_size=4,
          expert_tensor_parallel_size=1, gtp_remat_size=2, expert_gtp_remat_size=2)),
    ("process_groups_w16_tp2_pp2_ep4", dict(world=16, tp=2, pp=2, ep=4, etp=1),
     dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, expert_model_parallel_size=4,
          expert_tensor_parallel_size=1)),
    ("process_groups_seed_w128", dict(world=128, cp=2, ep=8, etp=1, gtp=64, egtp=4),
     dict(context_parallel_size=2, expert_model_parallel_size=8, expert_tensor_parallel_size=1,
          gtp_remat_size=64, expert_gtp_remat_size=4)),
]


def megatron_getters(ps):
    """moe-oracle's group name -> the Megatron getter of that group."""
    return {
        "tp": ps.get_tensor_model_parallel_group,
        "cp": ps.get_context_parallel_group,
        "dp": lambda: ps.get_data_parallel_group(with_gtp_remat=False),
        "dp_cp": lambda: ps.get_data_parallel_group(with_context_parallel=True, with_gtp_remat=False),
        "tp_cp": ps.get_tensor_and_context_parallel_group,
        "tp_dp_cp": lambda: ps.get_tensor_and_data_parallel_group(with_context_parallel=True),
        "pp": ps.get_pipeline_model_parallel_group,
        "gtp": ps.get_gtp_weight_remat_group,
        "dp_gtp": lambda: ps.get_data_parallel_group(with_gtp_remat=True),
        "dp_cp_gtp": lambda: ps.get_data_parallel_group(with_context_parallel=True, with_gtp_remat=True),
        "ep": ps.get_expert_model_parallel_group,
        "expt_tp": ps.get_expert_tensor_parallel_group,
        "tp_ep": ps.get_expert_tensor_and_model_parallel_group,
        "expt_dp": lambda: ps.get_expert_data_parallel_group(with_gtp_remat=False),
        "expt_gtp": ps.get_expert_gtp_weight_remat_group,
        "expt_dp_gtp": lambda: ps.get_expert_data_parallel_group(with_gtp_remat=True),
    }


class RecordedGroup:
    def __init__(self, ranks):
        self.ranks = list(ranks)

    def size(self):
        return len(self.ranks)


def megatron_groups(world, rank, init_args):
    """Every named group of `rank`, as Megatron builds it (call in a child process: it patches torch.distributed)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    dist.is_initialized = lambda: True
    dist.get_world_size = lambda group=None: world
    dist.get_rank = lambda group=None: rank
    dist.new_group = lambda ranks=None, **_: RecordedGroup(ranks)
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(create_gloo_process_groups=False, **init_args)
    return {name: get().ranks for name, get in megatron_getters(ps).items()}


def ranks_to_check(world):
    return list(range(world)) if world <= 32 else sorted(set(range(0, world, 7)) | {1, world // 2, world - 1})


def compare_layout(oracle, flags, init_args):
    """(ok, what) for one layout."""
    world = flags["world"]
    args = [f"--{k}={v}" for k, v in flags.items()]
    for rank in ranks_to_check(world):
        want = megatron_groups(world, rank, init_args)
        out = subprocess.run([oracle, "groups", *args, f"--rank={rank}", "--json"], capture_output=True, text=True)
        if out.returncode != 0:
            return False, f"moe-oracle groups refused it: {out.stderr.strip()}"
        got = {name: g["ranks"] for name, g in json.loads(out.stdout)["groups"].items()}
        if set(got) != set(want):
            return False, f"group names differ: oracle {sorted(got)} vs Megatron {sorted(want)}"
        for name in want:
            if got[name] != want[name]:
                return False, f"rank {rank} group {name}: oracle {got[name]} vs Megatron {want[name]}"
    return True, f"{len(want)} groups of {len(ranks_to_check(world))} of {world} ranks equal Megatron's"


def _child(oracle, write_fd):
    rows = []
    for name, flags, init_args in LAYOUTS:
        try:
            ok, what = compare_layout(oracle, flags, init_args)
        except Exception as e:  # noqa: BLE001 - reported as a failed row
            ok, what = False, f"{type(e).__name__}: {e}"
        rows.append((name, ok, what))
    # The comparison's teeth: the oracle given egtp 1 where Megatron has 2 must be told apart.
    name, flags, init_args = LAYOUTS[0]
    ok, what = compare_layout(oracle, {**flags, "egtp": 1}, init_args)
    rows.append(("process_groups_seeded_egtp_dropped", not ok, ("caught: " if not ok else "NOT caught: ") + what))
    with os.fdopen(write_fd, "w") as out:
        json.dump(rows, out)


def run(oracle):
    """Rows for megatron_check's table: (name, ok, what)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            _child(oracle, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as inp:
        text = inp.read()
    os.waitpid(pid, 0)
    if not text:
        return [("process_groups", False, "the group check's child process died")]
    return [tuple(row) for row in json.loads(text)]


if __name__ == "__main__":
    import sys
    for row in run(sys.argv[1]):
        print(*row)
