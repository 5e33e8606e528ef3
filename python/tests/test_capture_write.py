"""moe_capture_write.py without torch: the checks of a capture's target, the staging folder swapped in whole (with
RENAME_EXCHANGE and with the fallback), a failed write leaving the target as it was, and what a killed writer leaves
(swept, or put back). Runs in ctest's python.pytest (numpy only) and in tools/hf-check's venv."""
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import moe_capture_write as w  # noqa: E402
from moe_capture_write import CaptureError  # noqa: E402


def write_dump(folder, marker):
    """A folder shaped as a dump, its content told by `marker`."""
    (folder / "rank0").mkdir(parents=True)
    (folder / "dump.json").write_text(f'{{"marker": "{marker}"}}\n')
    (folder / "rank0" / "output.npy").write_text(marker)


def marker(folder):
    return (folder / "rank0" / "output.npy").read_text()


def beside(target):
    return sorted(p.name for p in target.parent.iterdir() if p.name != target.name)


def commit(target, text, replace=True):
    staged = w.StagedDump(w.check_target(target, replace), replace)
    write_dump(staged.path, text)
    staged.commit()


# --- the target ------------------------------------------------------------------------------------------------------
def test_new_and_empty_targets_are_taken(tmp_path):
    assert w.check_target(tmp_path / "a" / "b", False) == tmp_path / "a" / "b"
    (tmp_path / "empty").mkdir()
    assert w.check_target(tmp_path / "empty/", False) == tmp_path / "empty"


@pytest.mark.parametrize("out", [".", "..", "/", "a/.."])
def test_a_target_must_name_a_folder(tmp_path, out, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CaptureError, match="name the dump's own folder"):
        w.check_target(out, True)


def test_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(CaptureError, match="is a regular file, not a dump folder"):
        w.check_target(tmp_path / "f", True)
    with pytest.raises(CaptureError, match="is a regular file, not a folder"):
        w.check_target(tmp_path / "f" / "dump", True)


def test_a_dangling_link_is_refused_and_a_link_to_a_folder_followed(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(CaptureError, match="symbolic link to nothing"):
        w.check_target(tmp_path / "dangling", True)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert w.check_target(tmp_path / "link", False) == tmp_path / "real"


def test_a_dump_is_replaced_only_when_asked(tmp_path):
    write_dump(tmp_path / "d", "old")
    with pytest.raises(CaptureError, match="is not empty .*replace=True"):
        w.check_target(tmp_path / "d", False)
    assert w.check_target(tmp_path / "d", True) == tmp_path / "d"


def test_a_step_dump_is_replaced_only_when_asked(tmp_path):
    """A step dump's entries (step.json, inputs/, rank<N>/) are a dump's: replaceable with replace=True only."""
    d = tmp_path / "d"
    (d / "inputs").mkdir(parents=True)
    (d / "rank0").mkdir()
    (d / "step.json").write_text("{}")
    (d / "inputs" / "input_ids.npy").write_text("")
    (d / "rank0" / "grad.head.npy").write_text("")
    with pytest.raises(CaptureError, match="is not empty .*replace=True"):
        w.check_target(d, False)
    assert w.check_target(d, True) == d


@pytest.mark.parametrize("entry", ["notes.txt", "rank0/sub/", "rankX/", "inputs/sub/"])
def test_a_folder_holding_more_than_a_dump_is_never_replaced(tmp_path, entry):
    write_dump(tmp_path / "d", "old")
    path = tmp_path / "d" / entry
    if entry.endswith("/"):
        path.mkdir(parents=True)
    else:
        path.write_text("")
    with pytest.raises(CaptureError, match="refusing to replace .*which is not part of a dump"):
        w.check_target(tmp_path / "d", True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_parent_that_cannot_be_written_is_refused(tmp_path):
    (tmp_path / "ro").mkdir(mode=0o555)
    with pytest.raises(CaptureError, match="is not writable"):
        w.check_target(tmp_path / "ro" / "d", False)


# --- the swap ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("exchange", [True, False])
def test_commit_creates_and_replaces(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setenv("MOE_ORACLE_NO_RENAME_EXCHANGE", "1")
    target = tmp_path / "d"
    commit(target, "first", replace=False)
    assert marker(target) == "first" and beside(target) == []
    commit(target, "second")
    assert marker(target) == "second" and beside(target) == []
    assert sorted(p.name for p in target.iterdir()) == ["dump.json", "rank0"]


def test_abandon_leaves_the_target(tmp_path):
    target = tmp_path / "d"
    write_dump(target, "old")
    staged = w.StagedDump(w.check_target(target, True), True)
    assert staged.path.name.startswith("d.tmp-") and staged.path.parent == tmp_path
    write_dump(staged.path, "new")
    staged.abandon()
    assert marker(target) == "old" and beside(target) == []


def test_what_appears_during_the_step_is_checked_again(tmp_path):
    target = tmp_path / "d"
    staged = w.StagedDump(w.check_target(target, False), False)  # absent when the block started
    write_dump(staged.path, "new")
    write_dump(target, "someone else's")  # made while the step ran
    with pytest.raises(CaptureError, match="is not empty"):
        staged.commit()
    staged.abandon()
    assert marker(target) == "someone else's" and beside(target) == []


def test_dump_writer_of_one_rank(tmp_path):
    target = tmp_path / "d"
    write_dump(target, "old")
    ranks = w.Ranks(distributed=False)

    def fails(folder):
        (folder / "rank0").mkdir()
        raise OSError(28, "No space left on device")

    writer = w.DumpWriter(target, True, ranks)
    with pytest.raises(CaptureError, match="No space left on device; .* is untouched"):
        writer.finish(fails, lambda folder, infos: None)
    assert marker(target) == "old" and beside(target) == []

    writer = w.DumpWriter(target, True, ranks)
    writer.finish(lambda folder: write_dump(folder, "new") or {"n": 1},
                  lambda folder, infos: (folder / "infos").write_text(repr(infos)))
    assert marker(target) == "new" and (target / "infos").read_text() == "[{'n': 1}]"


def test_leftover_names():
    assert w.leftover_kind("d", "d.tmp-12-0") == "staging"
    assert w.leftover_kind("d", "d.old-12-3") == "aside"
    for name in ("d.tmp-12", "d.tmp-x-1", "dd.tmp-1-1", "d.old-1-1/", "d", "e.tmp-1-1"):
        assert w.leftover_kind("d", name) is None, name


def test_sweep_removes_dead_writers_only(tmp_path):
    target = tmp_path / "d"
    write_dump(target, "old")
    (tmp_path / "d.tmp-1-0").mkdir()
    (tmp_path / "d.old-1-1").mkdir()
    (tmp_path / "d.tmp-1-2").mkdir()
    (tmp_path / "d.tmp-1-9").write_text("a file is never a leftover")
    live = w._Lock(tmp_path / "d.tmp-1-2")  # a concurrent writer's staging folder
    assert live.held
    assert w.sweep_leftovers(target) == 2
    assert beside(target) == ["d.tmp-1-2", "d.tmp-1-9"]
    live.release()


# --- a killed writer -------------------------------------------------------------------------------------------------
WRITER = textwrap.dedent("""
    import pathlib, sys
    sys.path.insert(0, {python!r})
    import moe_capture_write as w
    target = pathlib.Path(sys.argv[1])
    staged = w.StagedDump(w.check_target(target, True), True)
    (staged.path / "rank0").mkdir()
    (staged.path / "dump.json").write_text("new")
    (staged.path / "rank0" / "output.npy").write_text("new")
    print("staged", flush=True)
    staged.commit()
    print("committed", flush=True)
""")


def kill_when(target, appears, tmp_path):
    """Runs a writer of `target` that pauses in every window of its commit (MOE_ORACLE_COMMIT_PAUSE_US) and kills it
    once an entry for which appears(name) holds shows beside the target."""
    env = dict(os.environ, MOE_ORACLE_NO_RENAME_EXCHANGE="1", MOE_ORACLE_COMMIT_PAUSE_US="2000000")
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(python=str(HERE.parent)))
    proc = subprocess.Popen([sys.executable, str(script), str(target)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "staged"
    deadline = time.monotonic() + 30
    while not any(appears(n) for n in os.listdir(target.parent)):
        assert time.monotonic() < deadline, "the writer never got there"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_killed_between_the_fallbacks_renames_the_old_dump_comes_back(tmp_path):
    target = tmp_path / "d"
    write_dump(target, "old")
    kill_when(target, lambda n: ".old-" in n, tmp_path)
    assert not target.exists()  # the one window: no target, the old dump complete aside
    assert w.check_target(target, True) == target  # the next capture recovers it before anything else
    assert marker(target) == "old"
    commit(target, "next")
    assert marker(target) == "next" and beside(target) == ["writer.py"]


def test_killed_while_staging_the_target_is_untouched(tmp_path):
    target = tmp_path / "d"
    write_dump(target, "old")
    kill_when(target, lambda n: ".tmp-" in n, tmp_path)
    assert marker(target) == "old"
    commit(target, "next")  # sweeps the dead writer's staging folder
    assert marker(target) == "next" and beside(target) == ["writer.py"]


# --- kills at random instants ----------------------------------------------------------------------------------------
SWEEP_WRITER = textwrap.dedent("""
    import pathlib, sys, time
    sys.path.insert(0, {python!r})
    import moe_capture_write as w
    target, text, files = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    print("go", flush=True)
    start = time.monotonic()
    staged = w.StagedDump(w.check_target(target, True), True)
    (staged.path / "rank0").mkdir()
    (staged.path / "dump.json").write_text(text)
    for i in range(files):
        (staged.path / "rank0" / f"t{{i}}.npy").write_text(text)
    print("commit", time.monotonic() - start, flush=True)
    start = time.monotonic()
    staged.commit()
    print(time.monotonic() - start, flush=True)
""")


def whole_dump(folder, files):
    """The marker every file of the dump holds, or None when the folder is not one whole dump."""
    names = [folder / "dump.json"] + [folder / "rank0" / f"t{i}.npy" for i in range(files)]
    if not all(p.is_file() for p in names) or len(os.listdir(folder / "rank0")) != files:
        return None
    texts = {p.read_text() for p in names}
    return texts.pop() if len(texts) == 1 else None


@pytest.mark.parametrize("exchange", [True, False], ids=["rename-exchange", "fallback"])
def test_killed_at_random_instants_a_whole_dump_remains(tmp_path, exchange):
    """A capture's write killed at a random instant of its run, again and again: each time the target (after the
    next writer's recovery) is the last whole dump or the new one, never a mixture; the next whole write leaves
    nothing beside it.
    MOE_KILL_SWEEP sets the number of kills (default 24, as ctest runs it; docs/reliability.md has a longer run)."""
    kills, files = int(os.environ.get("MOE_KILL_SWEEP", "24")), 40
    env = dict(os.environ)
    env.pop("MOE_ORACLE_COMMIT_PAUSE_US", None)
    if not exchange:
        env["MOE_ORACLE_NO_RENAME_EXCHANGE"] = "1"
    script = tmp_path / "writer.py"
    script.write_text(SWEEP_WRITER.format(python=str(HERE.parent)))
    target = tmp_path / "d"

    def run(text, kill=None):
        """One writer; kill = (at the commit?, seconds after "go" or after the commit begins) kills it then."""
        proc = subprocess.Popen([sys.executable, str(script), str(target), text, str(files)], env=env,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "go"
        if kill is None:
            staging = float(proc.stdout.readline().split()[1])
            committing = float(proc.stdout.readline())
            assert proc.wait() == 0
            return staging, committing
        at_commit, delay = kill
        if at_commit:
            assert proc.stdout.readline().startswith("commit")
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return None

    staging, committing = run("first")  # one whole write: the windows the kills are spread over
    rng = __import__("random").Random(7)
    landed = {"old": 0, "new": 0}
    last = "first"
    for k in range(kills):
        text = f"write-{k}"
        # Half anywhere in the write, half inside the commit (its renames are the only instants that matter).
        at_commit = k % 2 == 1
        run(text, kill=(at_commit, rng.uniform(0, 2 * committing if at_commit else 1.2 * (staging + committing))))
        w.check_target(target, True)  # what the next capture does first: put back, sweep
        got = whole_dump(target, files)
        assert got in (last, text), f"kill {k}: the target holds {got!r}, neither {last!r} nor {text!r}"
        landed["old" if got == last else "new"] += 1
        last = got
    run("last")  # the next whole write sweeps what the killed ones left
    assert whole_dump(target, files) == "last" and beside(target) == ["writer.py"], beside(target)
    print(f"{kills} kills ({'rename-exchange' if exchange else 'fallback'}): {landed['old']} left the old dump, "
          f"{landed['new']} the new one, 0 damaged")
