"""The Megatron-Core matrix: every case of matrix.py run through Megatron's real MoE layer on CPU (driver.py), each
dump compared with the oracle by `moe-oracle compare`, the loss-side checks of loss_checks.py (Megatron's own
schedule code against `explain` and `scaling`), the process groups of group_checks.py (Megatron's own
initialize_model_parallel, GTP axes included, against `groups`), an independent PyTorch layer (torch_example.py) compared the same
way, and a table of the outcomes. Exit 0 only when every case ends
as it must: a plain case passes; a case that runs a known Megatron deviation under semantics that leave it out
fails *and* the comparison names that deviation; a seeded bug fails and names the expected tensor first.

    python megatron_check.py --oracle PATH/moe-oracle [--work DIR] [--only SUBSTRING] [--keep]
    python megatron_check.py --oracle PATH/moe-oracle --args "<a Megatron command line>" | --args-file FILE

With --args, a user's own Megatron flags (megatron_args.py): every MoE and loss flag kept, each parallel axis > 1 at
2, the sizes shrunk; Megatron's step run on CPU and judged. What was kept, shrunk and not checked is printed first.
Exit 0 pass, 1 a mismatch, 2 a line that cannot be checked (with the reason).
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import driver  # noqa: E402  (imports torch and Megatron once; every case forks from here)
import group_checks  # noqa: E402
import loss_checks  # noqa: E402
import matrix  # noqa: E402
import megatron_args  # noqa: E402
import seeded_bugs  # noqa: E402
import step_checks  # noqa: E402
import step_driver  # noqa: E402


def compare(oracle, dump_dir, precision=None):
    """`moe-oracle compare --json`; `precision` states the arithmetic Megatron computed in (a dump cannot loosen its
    own tolerance below its arrays' dtype: the caller, who knows how the layer ran, says so)."""
    command = [oracle, "compare", str(dump_dir), "--json"] + (["--precision", precision] if precision else [])
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode not in (0, 1):
        return None, result.stdout + result.stderr
    return json.loads(result.stdout), ""


def verdict(case, report):
    """(ok, what happened) for one case's comparison report."""
    expect = case.get("expect", {})
    replayed = report.get("replayed_capacity_slots_differing")
    if report["pass"] and "claims" in expect:  # a pass that counts only under the semantics the capture claimed
        ok = expect["claims"] in report["semantics"]
        return ok, f"pass, as {report['semantics']}" if ok else f"passed, but not as {expect['claims']}"
    if report["pass"]:
        if expect or "bug" in case:
            return False, "passed, but it must fail"
        return True, "pass" + (f" (replayed capacity: {replayed} slots differ from the oracle's rule)"
                               if replayed is not None else "")
    first = report.get("first_mismatch") or report.get("systematic_error") or {}
    failing = [t["tensor"] for t in report["tensors"] if not t["pass"]]
    if "failing_only" in expect:
        ok = set(failing) <= set(expect["failing_only"])
        return ok, f"fails in {', '.join(failing)} only" if ok else f"fails in {', '.join(failing)}"
    if "first_mismatch" in expect:
        ok = first.get("tensor") == expect["first_mismatch"]
        return ok, f"fails first in {first.get('tensor')} (then {len(failing) - 1} more tensors)"
    if "bug" in case:
        want = seeded_bugs.BUGS[case["bug"]][1]
        ok = first.get("tensor") == want
        return ok, f"caught: first mismatch {first.get('tensor')} on rank {first.get('rank')}" + (
            "" if ok else f" (expected {want}; failing: {', '.join(failing)})")
    if "explained_by" in expect:
        ok = expect["explained_by"] in report["explained_by"]
        return ok, f"fails as Megatron does; explained by {', '.join(report['explained_by']) or 'nothing'}"
    return False, f"FAIL: first mismatch {first.get('tensor')} on rank {first.get('rank')} index {first.get('index')}"


def run_case(oracle, case, out, keep=False):
    """Runs one matrix case through Megatron (driver.py) and compare; the table's row. The dump is removed when the
    case ended as it must, unless `keep`. Without an oracle the dump is only written, and kept."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.time()
    try:
        driver.run_case(case, out, case.get("bug"))
        if oracle is None:
            return row_of(case, float("nan"), time.time() - start, True, "dumped (not compared: no --oracle)")
        # Megatron scores its router in float32 even for float64 parameters (driver.py): float32's tolerance. A
        # bfloat16 dump is judged by compare's bf16 error model, which its dtype selects.
        report, error = compare(oracle, out, precision=None if case.get("dtype") == "bfloat16" else "float32")
    except Exception as e:  # noqa: BLE001 - a rank raised: the case is reported, the matrix goes on
        report, error = None, f"Megatron raised {type(e).__name__}: {str(e).strip().splitlines()[-1]}"
    seconds = time.time() - start
    raises = case.get("expect", {}).get("megatron_raises")
    if report is None and error.startswith("Megatron raised"):
        ok = raises is not None and raises in error
        what, worst = error + (" (as 0.19.2 does; the oracle refuses it too)" if ok else ""), float("nan")
    elif raises:
        ok, what, worst = False, f"Megatron was expected to raise {raises}", float("nan")
    elif report is None:
        ok, what, worst = False, "compare refused the dump: " + error.strip().splitlines()[-1], float("nan")
    else:
        ok, what = verdict(case, report)
        worst = max((t["max_ratio"] or 0.0) for t in report["tensors"]) if report["tensors"] else 0.0
    if not keep and ok:
        shutil.rmtree(out, ignore_errors=True)
    return row_of(case, worst, seconds, ok, what)


def run_args(oracle, line, work, show=print, bug=None):
    """A Megatron command line's step (megatron_args.plan), run and judged: (exit status, compare's verdict). The
    plan's lines go to `show` first; a line that cannot be checked is (2, the reason). `bug`: a seeded step bug."""
    try:
        plan = megatron_args.plan(line)
    except megatron_args.Refused as e:
        return 2, f"refused: {e}"
    for text in megatron_args.describe(plan):
        show(text)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "case.json").write_text(json.dumps(plan["case"], indent=1) + "\n")  # step_driver.py reruns it
    try:
        step_driver.run_case(plan["case"], work / "dump", bug)
    except Exception as e:  # noqa: BLE001 - Megatron refused the shrunk step: said, not hidden
        return 2, "Megatron raised on the shrunk step: " + (str(e).strip().splitlines() or ["?"])[-1]
    judged = subprocess.run([oracle, "compare", str(work / "dump"), "--precision", "float32"], capture_output=True,
                            text=True)
    return judged.returncode, (judged.stdout + judged.stderr).strip()


def args_examples(oracle, work):
    """The example command lines (examples/*.args) each as megatron_args.EXAMPLES says it must end. Yields table
    rows."""
    for name, bug, want in megatron_args.EXAMPLES:
        start = time.time()
        case = f"args_{name}" + (f"_bug_{bug}" if bug else "")
        line = (HERE / "examples" / f"{name}.args").read_text()
        status, verdict = run_args(oracle, line, work / case, show=lambda _: None, bug=bug)
        lines = verdict.splitlines() or [""]
        if want == "pass":
            ok, what = status == 0, lines[-1][:160]
        elif want == "fail":  # the scale compare names, else its verdict
            ok = status == 1
            what = next((x for x in lines if "× the oracle's" in x), next((x for x in lines if x.startswith("FAIL")),
                                                                         lines[-1]))[:160]
        else:
            ok, what = status == 2 and want.removeprefix("refused: ") in verdict, lines[0]
        if ok:
            shutil.rmtree(work / case, ignore_errors=True)
        yield {"case": case, "layout": "(from the flags)", "dispatcher": "-", "semantics": "megatron-core-0.19",
               "worst": 0.0, "seconds": time.time() - start, "ok": ok,
               "what": what if ok else f"{what} (expected {want})"}
    for i, (line, reason) in enumerate(megatron_args.REFUSALS):
        status, verdict = run_args(oracle, line, work / "args_refusal", show=lambda _: None)
        ok = status == 2 and reason in verdict
        yield {"case": f"args_refusal_{i}", "layout": "-", "dispatcher": "-", "semantics": "-", "worst": 0.0,
               "seconds": 0.0, "ok": ok, "what": verdict if ok else f"{verdict} (expected a refusal: {reason})"}


def docs_drift(step_rows, args_rows, full):
    """The summary lines docs/checking-frameworks.md quotes, held to this run's: a case added or removed without the
    docs following fails the check (only a full run, or --only step / args, knows its counts). 1 on a drift."""
    docs = (HERE.parent / "docs" / "checking-frameworks.md").read_text()
    said = []
    if step_rows:
        bugs = [r for r in step_rows if "_bug_" in r["case"]]
        said += [f"`step: {len(step_rows)} of {len(step_rows)} cases as expected`",
                 f"`framework bugs: {len(bugs)} of {len(bugs)} caught`"]
    if args_rows:
        said.append(f"`command lines: {len(args_rows)} of {len(args_rows)} as expected`")
    missing = [s for s in said if s not in docs]
    for s in missing:
        print(f"megatron-check: docs/checking-frameworks.md does not say {s}: update its counts", file=sys.stderr)
    return 1 if missing and (full or step_rows or args_rows) else 0


def show_progress(done, total, start, name):
    """'[done/total] name, about N s left' on a terminal (rewritten in place); nothing when stderr is a file or pipe,
    as under CI, where the table at the end says it all."""
    if not sys.stderr.isatty():
        return
    left = "" if done == 0 else f", about {(time.time() - start) / done * (total - done):.0f} s left"
    print(f"\r\033[K[{done + 1}/{total}] {name}{left}", end="", file=sys.stderr, flush=True)
    if done + 1 == total:
        print(file=sys.stderr)


def row_of(case, worst, seconds, ok, what):
    layout = case["layout"]
    return {"case": case["name"], "layout": f"w{layout['world']} tp{layout.get('tp', 1)} "
            f"ep{layout.get('ep', 1)} etp{layout.get('etp', 1)}", "dispatcher": case["dispatcher"],
            "semantics": case.get("semantics", "megatron-core-0.19"), "worst": worst,
            "seconds": seconds, "ok": ok, "what": what}


def print_table(title, rows, failures, start_all, tail=""):
    widths = {"case": 44, "layout": 16, "dispatcher": 10, "semantics": 46}
    print(title + "; 'worst' is the largest error as a fraction of the tolerance")
    print("  ".join(k.ljust(w) for k, w in widths.items()) + "  worst     seconds  result")
    for r in rows:
        print("  ".join(str(r[k]).ljust(w) for k, w in widths.items()) +
              f"  {r['worst']:.1e}  {r['seconds']:7.1f}  {'OK  ' if r['ok'] else 'BAD '} {r['what']}")
    print(f"\n{len(rows) - failures} of {len(rows)} cases as expected, {time.time() - start_all:.0f} s" + tail)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--oracle", required=True, help="the moe-oracle binary")
    parser.add_argument("--work", help="where the dumps go (default: a temporary folder, removed at the end)")
    parser.add_argument("--only", help="run the cases whose name contains this ('loss_checks', 'torch_example', "
                                       "'process_groups', 'step', 'args': only those)")
    parser.add_argument("--keep", action="store_true", help="keep the dumps")
    parser.add_argument("--json", help="also write the results as JSON to this file")
    parser.add_argument("--args", dest="megatron_args", metavar="LINE",
                        help="check the step of your own Megatron command line (its flags, as pretrain_gpt.py "
                             "takes them; torchrun ... pretrain_gpt.py in front is skipped)")
    parser.add_argument("--args-file", metavar="FILE", help="the same, the flags read from FILE (# comments, "
                                                              "several lines; examples/*.args)")
    a = parser.parse_args()
    work = pathlib.Path(a.work or tempfile.mkdtemp(prefix="megatron-check-"))
    if a.megatron_args is not None or a.args_file:
        if a.megatron_args is not None and a.args_file:
            parser.error("--args and --args-file: give one")
        line = a.megatron_args if a.args_file is None else pathlib.Path(a.args_file).read_text()
        print("megatron-check --args: Megatron-Core's training step for your flags, shrunk to run on CPU")
        status, verdict = run_args(a.oracle, line, work / "args")
        print(verdict)
        if status == 2:
            print("megatron-check: nothing was compared", file=sys.stderr)
        if not a.work and not a.keep and status == 0:
            shutil.rmtree(work, ignore_errors=True)
        elif status != 2:
            print(f"the step's dump and case.json: {work / 'args'}", file=sys.stderr)
        sys.exit(status)
    cases = [c for c in matrix.cases() + matrix.bf16_cases() if not a.only or a.only in c["name"]]
    if not cases and a.only not in ("loss_checks", "torch_example", "process_groups", "step", "args"):
        raise SystemExit(f"megatron-check: no case matches '{a.only}'")

    rows, failures = [], 0
    start_all = time.time()
    if not a.only or a.only == "torch_example":
        # An independent PyTorch layer (not Megatron) judged the same way, at float64's tolerance, with a bug; and in
        # bf16 under compare's bf16 error model, correct and with the router's gradient cut off.
        for name, extra, want in (("torch_example", [], None),
                                  ("torch_example_bug", ["--bug", "unnormalised"], "router.probs"),
                                  ("torch_example_bf16", ["--bfloat16"], None),
                                  ("torch_example_bf16_detached_probs", ["--bfloat16", "--bug", "detached-probs"],
                                   "hidden_states.grad")):
            out = work / name
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run([sys.executable, "-W", "ignore", str(HERE / "torch_example.py"), str(out), *extra], check=True)
            report, error = compare(a.oracle, out)
            first = ((report or {}).get("first_mismatch") or (report or {}).get("systematic_error") or {}).get("tensor")
            ok = report is not None and (report["pass"] if want is None else first == want)
            what = error or ("pass" if report["pass"] else f"fails first in {first}")
            failures += not ok
            rows.append({"case": name, "layout": "w1 (PyTorch)", "dispatcher": "-", "semantics": "intended",
                         "worst": max(t["max_ratio"] or 0.0 for t in report["tensors"]) if report else float("nan"),
                         "seconds": 0.0, "ok": ok, "what": what})
    if not a.only or a.only == "process_groups":
        for name, ok, what in group_checks.run(a.oracle):
            failures += not ok
            rows.append({"case": name, "layout": "-", "dispatcher": "-", "semantics": "-",
                         "worst": 0.0, "seconds": 0.0, "ok": ok, "what": what})
    if not a.only or a.only == "loss_checks":
        for name, ok, what in loss_checks.run(a.oracle):
            failures += not ok
            rows.append({"case": name, "layout": "-", "dispatcher": "-", "semantics": "megatron-core-0.19",
                         "worst": 0.0, "seconds": 0.0, "ok": ok, "what": what})
    step_rows = []
    if not a.only or a.only == "step":
        # Megatron's whole training step (step_checks.py): its own schedule, DDP and finalize_model_grads.
        for case, ok, what, seconds in step_checks.run(a.oracle, work / "step"):
            failures += not ok
            layout = case["case"]["layout"]
            shape = f"w{layout['world']} tp{layout['tp']} cp{layout['cp']} pp{layout['pp']} ep{layout['ep']} (step)"
            step_rows.append({"case": case["name"], "layout": shape,
                              "dispatcher": "alltoall", "semantics": case.get("semantics", "megatron-core-0.19"),
                              "worst": 0.0, "seconds": seconds, "ok": ok, "what": what})
        rows += step_rows
    args_rows = []
    if not a.only or a.only == "args":
        # The example command lines (examples/*.args) through --args, and lines refused for their reasons.
        for row in args_examples(a.oracle, work):
            failures += not row["ok"]
            args_rows.append(row)
        rows += args_rows
    start_cases = time.time()
    for i, case in enumerate(cases):
        show_progress(i, len(cases), start_cases, case["name"])
        row = run_case(a.oracle, case, work / case["name"], a.keep)
        failures += not row["ok"]
        rows.append(row)

    print_table("megatron-check: megatron-core's MoE layer (CPU, gloo) against the oracle", rows, failures, start_all,
                "" if not failures or a.keep else f"; dumps of the bad ones kept in {work}")
    if step_rows:
        bugs = [r for r in step_rows if "_bug_" in r["case"]]
        print(f"step: {sum(r['ok'] for r in step_rows)} of {len(step_rows)} cases as expected")
        print(f"framework bugs: {sum(r['ok'] for r in bugs)} of {len(bugs)} caught")
    if args_rows:
        print(f"command lines: {sum(r['ok'] for r in args_rows)} of {len(args_rows)} as expected")
    failures += docs_drift(step_rows, args_rows, full=not a.only)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=2) + "\n")
    if not a.work and not a.keep and not failures:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
