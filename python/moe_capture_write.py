"""Where a capture writes: the dump folder replaced as a whole, by the rule of the project's own folder writes
(storage/staged_directory.hpp, storage/write_leftovers.hpp), so that a capture that fails or is killed at any instant
leaves at `out` either the complete earlier dump or the complete new one, never a mix of the two and never nothing.

  1. When the capture block starts, before the step runs, the target is checked (check_target): not a file, under a
     folder this process can write, and empty or absent unless replace=True — then holding a dump's entries only
     (dump.json or step.json, inputs/ and rank<N>/ folders of files; anything else is refused, not deleted). A write
     interrupted earlier is recovered, the leftovers of dead writers swept, and rank 0 creates the staging folder
     <out>.tmp-<pid>-<n> beside the target, flock-ed while the capture lives; every rank learns its name.
  2. When the block ends, every rank writes rank<r>/ into it, each file fsynced. Once every rank has succeeded, rank 0
     writes dump.json (a step dump: inputs/ and step.json) last, checks the target again (the step ran in between: what
     appeared there is judged by the same rule) and puts the folder in place (StagedDump.commit): a target that does not
     exist is created by one rename; an existing one is swapped with the staging folder by one
     renameat2(RENAME_EXCHANGE) where the system has it, else the old dump is renamed aside to <out>.old-<pid>-<n>, the
     new one renamed in, and only then the old one removed.
  3. A block that raises, or any rank failing to write its part, removes the staging folder: `out` is untouched.

The names and the locks are the C++ writers', so a capture's leftovers are swept by the next capture or by the next
C++ write of the same folder, and StagedDirectory::recover puts an old dump set aside back. Every wait for a lock is
bounded (LOCK_WAIT_S) and ends in a CaptureError naming the folder that stays locked. MOE_ORACLE_NO_RENAME_EXCHANGE
forces the fallback and MOE_ORACLE_COMMIT_PAUSE_US=N sleeps N µs in each window of the commit, as in the C++ (the
kill tests).
"""
import contextlib
import ctypes
import errno
import fcntl
import itertools
import json
import os
import pathlib
import re
import shutil
import stat
import time

import numpy as np

# The dump's format and the loss every capture's gradients are of (compare/README.md), for both captures.
FORMAT = "moe-dump/1"
LOSS = "sum(output.grad * output) + aux_loss + z_loss"

# The tensor names of a moe-dump/1 rank (compare/README.md's table), for both captures; compare/dump_names.hpp holds
# the same names for C++. A gradient is its tensor's name + ".grad".
HIDDEN_STATES, HIDDEN_STATES_GRAD = "hidden_states", "hidden_states.grad"
OUTPUT, OUTPUT_GRAD = "output", "output.grad"
PADDING_MASK = "padding_mask"
ROUTER_WEIGHT, EXPERT_BIAS, TID2EID = "router.weight", "router.expert_bias", "router.tid2eid"
PROBS, ROUTING_MAP, LOCAL_TOKENS_PER_EXPERT = "router.probs", "router.routing_map", "router.local_tokens_per_expert"
SHARED_FC1, SHARED_FC2 = "shared_experts.linear_fc1.weight", "shared_experts.linear_fc2.weight"
SHARED_FC1_GRAD = SHARED_FC1 + ".grad"
SHARED_GATE = "shared_experts.gate_weight"
LOCK_WAIT_S = 60.0  # how long a lock held by another writer of the same folder is waited for
_serial = itertools.count()  # staging folders of this process (several captures may run in one process)
_LEFTOVER = re.compile(r"\.(tmp|old)-\d{1,20}-\d{1,20}")


class CaptureError(RuntimeError):
    """The layer, the run or the target is one a capture cannot describe or write faithfully; the message says
    which."""


# --- files ------------------------------------------------------------------------------------------------------
def sync_directory(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_npy(path, array):
    """`array` as a new .npy file at `path`, fsynced; a file of that name already there is an error (two tensors
    of one name)."""
    with open(path, "xb") as f:
        np.save(f, array, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def save_json(path, value):
    with open(path, "x", encoding="utf-8") as f:
        f.write(json.dumps(value, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _kind(path):
    """'a regular file', 'a folder', 'a symbolic link', ... for messages (the entry itself, links not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "of an unknown kind"


# --- locks (write_leftovers.hpp) ---------------------------------------------------------------------------------
class _Lock:
    """flock(2) on a folder while the object lives. wait: seconds to wait for a lock another process holds (0: do not
    wait). held says whether it was taken; unsupported, that the file system cannot lock at all (nothing is then
    swept, as in the C++)."""

    def __init__(self, folder, wait=0.0, shared=False):
        self.held, self.unsupported = False, False
        self._fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        op = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(self._fd, op)
                self.held = True
                return
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    self.unsupported = True
                    return
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def release(self):
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
        self._fd, self.held = None, False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def leftover_kind(target_name, name):
    """'staging' (<target>.tmp-<pid>-<n>), 'aside' (<target>.old-<pid>-<n>) or None, as leftover_kind in C++."""
    if not target_name or not name.startswith(target_name):
        return None
    m = _LEFTOVER.fullmatch(name[len(target_name):])
    return None if m is None else {"tmp": "staging", "old": "aside"}[m.group(1)]


def recover_interrupted_write(target):
    """Where `target` is missing because a writer without RENAME_EXCHANGE was stopped between its two renames, puts
    the complete old version (the latest <target>.old-…) back; a writer still between its renames is waited for."""
    if os.path.lexists(target):
        return
    parent = target.parent
    try:
        names = os.listdir(parent)
    except OSError:
        return
    aside = [parent / n for n in names if leftover_kind(target.name, n) == "aside" and _kind(parent / n) == "a folder"]
    aside.sort(key=lambda p: os.lstat(p).st_ctime_ns, reverse=True)  # the one set aside last first
    for old in aside:
        try:
            lock = _Lock(old, wait=LOCK_WAIT_S)
        except OSError:
            continue  # gone meanwhile
        with lock:
            if not lock.held and not lock.unsupported:
                raise CaptureError(f"{target} is missing and its previous version, at {old}, is still locked by a "
                                   f"writer after {LOCK_WAIT_S:.0f} s: wait for that writer, or end it")
            if os.path.lexists(target):
                return  # that writer put its new version in place
            if _kind(old) != "a folder":
                continue
            try:
                os.rename(old, target)
            except OSError as e:
                raise CaptureError(f"{target} is missing: a write replacing it was interrupted, and the previous "
                                   f"version, complete at {old}, cannot be renamed back: {e.strerror}") from e
        sync_directory(parent)
        return


def sweep_leftovers(target):
    """Removes the staging and aside folders of `target` whose writers are gone (their lock can be taken at once);
    the aside ones only when `target` exists. Returns how many were removed."""
    parent = target.parent
    gone = []
    try:
        looking = _Lock(parent, wait=LOCK_WAIT_S)  # exclusive: no writer between creating its folder and locking it
    except OSError:
        return 0
    with looking:
        if not looking.held:
            return 0
        target_exists = os.path.lexists(target)
        for name in os.listdir(parent):
            kind = leftover_kind(target.name, name)
            if kind is None or (kind == "aside" and not target_exists) or _kind(parent / name) != "a folder":
                continue
            try:
                lock = _Lock(parent / name)
            except OSError:
                continue
            if lock.held:
                gone.append((parent / name, lock))
            else:
                lock.release()
    removed = 0
    for path, lock in gone:
        shutil.rmtree(path, ignore_errors=True)
        lock.release()
        removed += not os.path.lexists(path)
    return removed


# --- the target ---------------------------------------------------------------------------------------------------
def resolve_target(out):
    """`out` as it is replaced: lexically normal, its parent's links resolved, a link at `out` itself resolved (the
    folder it points to is replaced); '.', '..' and '/' are refused."""
    path = pathlib.Path(os.path.normpath(os.fspath(out)))
    if path.name in ("", ".", ".."):
        raise CaptureError(f"cannot write a dump to {os.fspath(out)!r}: name the dump's own folder")
    if path.is_symlink():
        if not path.exists():
            raise CaptureError(f"{path}: a symbolic link to nothing, not a dump folder")
        return pathlib.Path(os.path.realpath(path))
    return pathlib.Path(os.path.realpath(path.parent)) / path.name


def _dump_entry(path):
    """Whether `path` (an entry of the target) is part of a dump: a layer dump's dump.json, a step dump's step.json
    or inputs/ folder of regular files, or either's rank<N>/ folders of regular files."""
    name = path.name
    if name in ("dump.json", "step.json"):
        return _kind(path) == "a regular file"
    if (name == "inputs" or re.fullmatch(r"rank\d+", name)) and _kind(path) == "a folder":
        return all(_kind(path / n) == "a regular file" for n in os.listdir(path))
    return False


def check_replaceable(target, replace):
    """`target` absent, an empty folder, or (with replace) a folder holding a dump's entries and nothing else."""
    if not os.path.lexists(target):
        return
    if _kind(target) != "a folder":
        raise CaptureError(f"{target} is {_kind(target)}, not a dump folder: name a folder (new or empty)")
    entries = sorted(os.listdir(target))
    if entries and not replace:
        shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
        raise CaptureError(f"{target} is not empty (it holds {shown}): a capture does not write into an earlier "
                           "one's folder; pass replace=True to replace the dump there, or name a new or empty folder")
    for name in entries:
        if not _dump_entry(target / name):
            raise CaptureError(f"refusing to replace {target}: it holds '{name}' ({_kind(target / name)}), which is "
                               "not part of a dump (dump.json or step.json, inputs/ and rank<N>/ folders of files)")


def check_target(out, replace):
    """The folder a capture may write (see the module's doc), checked before the step runs; returns it resolved."""
    target = resolve_target(out)
    recover_interrupted_write(target)
    check_replaceable(target, replace)
    ancestor = target.parent
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CaptureError(f"cannot write {target}: {ancestor} is {_kind(ancestor)}, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise CaptureError(f"cannot write {target}: {ancestor} is not writable by this process")
    return target


# --- the swap -------------------------------------------------------------------------------------------------------
def _renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(a, b):
    """Swaps two paths in one step; False where the system or the file system cannot (the caller falls back)."""
    if os.environ.get("MOE_ORACLE_NO_RENAME_EXCHANGE"):
        return False
    fn = _renameat2()
    if fn is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def _pause_for_kill_tests():
    us = os.environ.get("MOE_ORACLE_COMMIT_PAUSE_US")
    if us:
        time.sleep(int(us) / 1e6)


class StagedDump:
    """Rank 0's staging folder for `target` (as check_target returned it), created and locked here; `replace` as
    check_target was given it, checked again when the folder is swapped in."""

    def __init__(self, target, replace):
        self.target, self.replace = target, replace
        parent = target.parent
        parent.mkdir(parents=True, exist_ok=True)
        sweep_leftovers(target)
        # Created and locked under a shared lock on the parent, so that no sweep sees it unlocked.
        with _Lock(parent, wait=LOCK_WAIT_S, shared=True) as creating:
            if not creating.held and not creating.unsupported:
                raise CaptureError(f"cannot create a staging folder beside {target}: {parent} stays locked by "
                                   f"another writer after {LOCK_WAIT_S:.0f} s")
            while True:
                self.serial = next(_serial)
                self.path = parent / f"{target.name}.tmp-{os.getpid()}-{self.serial}"
                try:
                    os.mkdir(self.path)
                    break
                except FileExistsError:
                    continue  # left by a killed writer of the same pid
            self._lock = _Lock(self.path)
        self.committed = False

    def abandon(self):
        """Removes the staging folder (a failed capture: the target was not touched)."""
        if not self.committed:
            shutil.rmtree(self.path, ignore_errors=True)
        self._lock.release()

    def commit(self):
        """Puts the staging folder in place of the target (the module's doc); every file in it already fsynced."""
        target, parent = self.target, self.target.parent
        sync_directory(self.path)
        _pause_for_kill_tests()
        if not os.path.lexists(target):
            os.rename(self.path, target)
            self.committed = True
            sync_directory(parent)
            self._lock.release()
            return
        # What is there now, not only what was there when the block started (the step ran in between).
        check_replaceable(target, self.replace)
        # The old version stays locked until it is removed, wherever it is renamed: a sweep leaves it alone, and a
        # reader finding the target missing waits for the second rename rather than restoring it.
        with _Lock(target, wait=LOCK_WAIT_S) as old_version:
            if not old_version.held and not old_version.unsupported:
                raise CaptureError(f"{target} stays locked by another writer after {LOCK_WAIT_S:.0f} s; the new "
                                   "dump was not put in place")
            if _exchange(self.path, target):
                self.committed = True  # the target is the new dump; self.path holds the old one
                sync_directory(parent)
                _pause_for_kill_tests()
                shutil.rmtree(self.path, ignore_errors=True)
                self._lock.release()
                return
            aside = parent / f"{target.name}.old-{os.getpid()}-{self.serial}"
            os.rename(target, aside)
            _pause_for_kill_tests()  # the fallback's one window: no target, the old dump complete at `aside`
            try:
                os.rename(self.path, target)
            except BaseException:
                os.rename(aside, target)  # put the old dump back
                raise
            self.committed = True
            sync_directory(parent)
            _pause_for_kill_tests()
            shutil.rmtree(aside, ignore_errors=True)
        self._lock.release()


# --- the ranks ------------------------------------------------------------------------------------------------------
class Ranks:
    """torch.distributed's default group when it is initialised (and distributed=True), else one rank alone."""

    def __init__(self, distributed=True):
        self._dist = None
        if distributed:
            try:
                import torch.distributed as dist
            except ImportError:
                dist = None
            if dist is not None and dist.is_available() and dist.is_initialized():
                self._dist = dist
        self.rank = self._dist.get_rank() if self._dist else 0
        self.world = self._dist.get_world_size() if self._dist else 1

    def broadcast(self, value):
        """Rank 0's `value` on every rank."""
        if self._dist is None:
            return value
        box = [value]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value):
        """Every rank's `value`, in rank order, on every rank."""
        if self._dist is None:
            return [value]
        out = [None] * self.world
        self._dist.all_gather_object(out, value)
        return out


def _message(e):
    return str(e) if isinstance(e, CaptureError) else f"{type(e).__name__}: {e}"


@contextlib.contextmanager
def capture_block(writer, remove):
    """A capture's block: `remove` (its hooks and patches) undone however the block ends, and the staging folder
    abandoned where it raises (the exception goes on)."""
    try:
        yield
    except BaseException:
        remove()
        writer.abandon()
        raise
    remove()


class DumpWriter:
    """One capture's write of `out` across the ranks (the module's doc): opened when the block starts, finished or
    abandoned when it ends. Every rank calls each step at the same point."""

    def __init__(self, out, replace, ranks):
        self.ranks = ranks
        self._staged = None
        self._local_error = None
        answer = None
        if ranks.rank == 0:
            try:
                self._staged = StagedDump(check_target(out, replace), replace)
                answer = (self._staged.path.name, None)
            except (CaptureError, OSError) as e:
                if isinstance(e, OSError):
                    e = CaptureError(f"cannot write a dump to {os.fspath(out)}: {e}")
                ranks.broadcast((None, str(e)))  # the other ranks raise it too
                raise e from None
        name, refused = ranks.broadcast(answer)
        if refused is not None:
            raise CaptureError(f"rank 0 refused the target: {refused}")
        if self._staged is not None:
            self.path, self.target = self._staged.path, self._staged.target
            return
        # Every other rank finds the staging folder beside `out` as it sees it (its mounts may name it otherwise); a
        # rank that cannot says so when it writes, through finish(), so that no rank is left waiting for it.
        self.target = pathlib.Path(os.path.abspath(out))
        self.path = self.target.parent / name
        try:
            self.target = resolve_target(out)
            self.path = self.target.parent / name
        except CaptureError as e:
            self._local_error = e

    def abandon(self):
        """The block raised: rank 0 removes the staging folder (no collective: the other ranks may not get here)."""
        if self._staged is not None:
            self._staged.abandon()

    def finish(self, write_rank, write_meta):
        """write_rank(staging folder) on every rank; when every rank succeeded, write_meta(staging folder, what
        write_rank returned on each rank, in rank order) and the swap on rank 0. Raises on every rank when any rank
        failed (nothing then changes at the target)."""
        own, info = None, None
        try:
            if self._local_error is not None:
                raise self._local_error
            if not self.path.is_dir():
                raise CaptureError(f"rank 0's staging folder {self.path} is not there on rank {self.ranks.rank}: "
                                   "`out` must be on a file system every rank shares")
            info = write_rank(self.path)
        except Exception as e:  # noqa: BLE001 - reported to every rank first, raised below
            own = e
        gathered = self.ranks.gather((None if own is None else _message(own), info))
        failed = [(r, m) for r, (m, _) in enumerate(gathered) if m]
        outcome = None
        if self.ranks.rank == 0:
            try:
                if failed:
                    self._staged.abandon()
                else:
                    write_meta(self.path, [i for _, i in gathered])
                    self._staged.commit()
            except Exception as e:  # noqa: BLE001
                self._staged.abandon()
                outcome = e
        said = self.ranks.broadcast(None if outcome is None else _message(outcome))
        untouched = f"{self.target} is untouched"
        if own is not None:
            if isinstance(own, CaptureError):
                raise own
            raise CaptureError(f"cannot write the dump: {_message(own)}; {untouched}") from own
        if failed:
            r, m = failed[0]
            raise CaptureError(f"rank {r} could not write its part ({m}); {untouched}")
        if said is not None:
            if isinstance(outcome, CaptureError):
                raise outcome
            raise CaptureError(f"cannot put the dump in place: {said}; {untouched}") from outcome
