"""The transformers matrix: every case of matrix.py run through the real Hugging Face MoE block on CPU (driver.py),
captured by moe_capture, compared by `moe-oracle compare`, and a table of the outcomes. Exit 0 only when every case
ends as expected: "pass" cases pass (exit 0), "fail" cases fail (exit 1) — a seeded bug first in the tensor
seeded_bugs.py names, an unclaimed deviation named by compare where the case says so. A refused dump (exit 2) or a
case that raised is never as expected.

    python hf_check.py --oracle PATH/moe-oracle [--work DIR] [--only SUBSTRING] [--keep]
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

import driver  # noqa: E402  (imports torch and transformers once)
import matrix  # noqa: E402
import seeded_bugs  # noqa: E402


def compare(oracle, dump_dir, precision, extra=()):
    """(exit code, report or None, the last line of what it said); `extra`: more options for compare."""
    command = [oracle, "compare", str(dump_dir), "--json", *extra] + (["--precision", precision] if precision else [])
    result = subprocess.run(command, capture_output=True, text=True)
    report = None
    if result.returncode in (0, 1):
        try:
            report = json.loads(result.stdout)
        except json.JSONDecodeError:
            pass
    lines = (result.stderr or result.stdout).strip().splitlines()
    return result.returncode, report, lines[-1] if lines else ""


def describe(rc, report, said, facts):
    if rc == 2:
        return "refused: " + said
    if report is None:
        return f"exit {rc}: " + said
    extra = f" (shared clamp hits {facts['shared_clamp_hits']})" if "shared_clamp_hits" in facts else ""
    if report.get("pass"):
        return "pass" + extra
    first = report.get("first_mismatch") or report.get("systematic_error") or {}
    failing = [t["tensor"] for t in report.get("tensors", []) if not t["pass"]]
    explained = report.get("explained_by") or []
    return (f"fails first in {first.get('tensor')} ({len(failing)} tensors)" +
            (f"; explained by {', '.join(explained)}" if explained else "") + extra)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--oracle", required=True, help="the moe-oracle binary")
    parser.add_argument("--work", help="where the dumps go (default: a temporary folder, removed at the end)")
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the dumps")
    a = parser.parse_args()
    work = pathlib.Path(a.work or tempfile.mkdtemp(prefix="hf-check-"))
    cases = [c for c in matrix.cases() if not a.only or a.only in c["name"]]
    if not cases:
        raise SystemExit(f"hf-check: no case matches '{a.only}'")

    rows, failures, start_all = [], 0, time.time()
    for i, case in enumerate(cases):
        out = work / case["name"]
        shutil.rmtree(out, ignore_errors=True)
        if sys.stderr.isatty():  # quiet under CI; the whole matrix takes seconds
            print(f"[{i + 1}/{len(cases)}] {case['name']} ...", file=sys.stderr, flush=True)
        start = time.time()
        # float64 cases keep the dump's own tolerance; a float32 router or block is judged at float32's, a
        # bfloat16 block at bfloat16's (the dump holds the rounded inputs and parameters exactly).
        precision = {"bfloat16": "bfloat16", "float32": "float32"}.get(case.get("dtype"))
        precision = precision or ("float32" if case["router"] == "as-shipped" else None)
        try:
            facts = driver.run_case(case, out)
            rc, report, said = compare(a.oracle, out, precision)
            got = {0: "pass", 1: "fail"}.get(rc, f"exit {rc}")
            what = describe(rc, report, said, facts)
        except Exception as e:  # noqa: BLE001 - the case is reported, the matrix goes on
            report, facts = None, {}
            message = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            refused = type(e).__name__ == "CaptureError"
            got = "refused" if refused else "raised"
            what = ("capture refused: " if refused else f"{type(e).__name__}: ") + message
        expect = case["expect"]
        if expect.startswith("refused: "):  # the capture must refuse, naming the setting
            ok = got == "refused" and expect[len("refused: "):] in what
        else:
            ok = got == expect
            first = ((report or {}).get("first_mismatch") or (report or {}).get("systematic_error") or {}).get("tensor")
            if ok and "bug" in case and first != seeded_bugs.BUGS[case["bug"]][1]:
                ok, what = False, what + f" (expected first in {seeded_bugs.BUGS[case['bug']][1]})"
            if ok and case.get("explained_by") and case["explained_by"] not in (report or {}).get("explained_by", []):
                ok, what = False, what + f" (expected to be explained by {case['explained_by']})"
        if ok and "shared_clamp_hits" in facts and "clamp" in case["name"] and facts["shared_clamp_hits"] == 0:
            ok, what = False, what + ": the clamp never engaged, so the case shows nothing"
        failures += not ok
        worst = float("nan")
        if report and report.get("tensors"):
            worst = max((t.get("max_ratio") or 0.0) for t in report["tensors"])
        rows.append({"case": case["name"], "semantics": case["semantics"], "router": case["router"],
                     "expected": case["expect"], "got": got, "worst": worst, "seconds": time.time() - start,
                     "ok": ok, "what": what})
        if not a.keep and ok:
            shutil.rmtree(out, ignore_errors=True)

    print("hf-check: transformers' MoE blocks (CPU) against the oracle; 'worst' is the largest error as a fraction "
          "of the tolerance")
    widths = {"case": 32, "semantics": 22, "router": 11, "expected": 30, "got": 8}
    print("  ".join(k.ljust(w) for k, w in widths.items()) + "  worst     seconds  result")
    for r in rows:
        print("  ".join(str(r[k]).ljust(w) for k, w in widths.items()) +
              f"  {r['worst']:.1e}  {r['seconds']:7.1f}  {'OK  ' if r['ok'] else 'BAD '} {r['what']}")
    print(f"\n{len(rows) - failures} of {len(rows)} cases as expected, {time.time() - start_all:.0f} s"
          + ("" if not failures or a.keep else f"; dumps of the bad ones kept in {work}"))
    if not a.work and not a.keep and not failures:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
