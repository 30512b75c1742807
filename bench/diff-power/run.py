#!/usr/bin/env python3
"""The power of `pyigprof-analyse --diff`: how long must two runs be for the comparison to
flag a function made 10 % slower?

    python3 bench/diff-power/run.py [--durations 0.5,1,2,4,8,16,32,64] [--reps 5]
                                    [--out bench/diff-power/results.md]

Runs examples/mixed.py (phases python_work, squeeze, digest, for a given number of CPU
seconds) and a copy whose python_work does --slowdown more work per call (its loop count
scaled), under pyigprof, for several durations and two samplings: "before" (POSIX CPU
timers, PYIGPROF_PERF_EVENTS=0 PYIGPROF_HZ=1000: ~250 real samples per CPU second) and
"after" (task-clock perf events, PYIGPROF_PERF_EVENTS=1 PYIGPROF_HZ=1000: ~1000). For each duration and sampling
it profiles --reps runs of each script and compares them with `pyigprof-analyse --diff`:
every base run with every modified run (detection: is python_work flagged as
significantly slower?) and every two runs of the same script (null comparisons: false
positives). Writes a markdown table (--out) and the raw data as JSON next to it. See
bench/diff-power/README.md.

Standard library only.
"""
import argparse
import ast
import datetime
import hashlib
import itertools
import json
import os
import platform
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(REPO, "examples", "mixed.py")
DEFAULT_PYTHON = "/root/.pyenv/versions/3.12.1/bin/python"
FUNCTION = "python_work"

# The two samplings compared, in the order of the table.
SAMPLINGS = [
    ("before", "POSIX CPU timers (PYIGPROF_PERF_EVENTS=0 PYIGPROF_HZ=1000)",
     {"PYIGPROF_PERF_EVENTS": "0", "PYIGPROF_HZ": "1000"}),
    ("after", "task-clock perf events (PYIGPROF_PERF_EVENTS=1 PYIGPROF_HZ=1000)",
     {"PYIGPROF_PERF_EVENTS": "1", "PYIGPROF_HZ": "1000"}),
]
DETECTION_TARGET = 0.80


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------- scripts

def slowed_source(source, function, factor):
    """`source` with `function(n, ...)` doing `factor` times the work: its first
    argument (the loop count) scaled on entry, after the docstring. The line numbers of
    everything before the function's body stay the same."""
    tree = ast.parse(source)
    fn = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function), None)
    if fn is None or not fn.args.args:
        raise SystemExit("diff-power: no function %s(n, ...) in %s" % (function, EXAMPLE))
    arg = fn.args.args[0].arg
    body = fn.body
    first = body[1] if (len(body) > 1 and isinstance(body[0], ast.Expr)
                        and isinstance(getattr(body[0], "value", None), ast.Constant)
                        and isinstance(body[0].value.value, str)) else body[0]
    lines = source.splitlines(True)
    indent = re.match(r"\s*", lines[first.lineno - 1]).group(0)
    # Put on the first statement's line, so that the function's other lines keep their numbers.
    scale = "%s = int(round(%s * %r))" % (arg, arg, factor)
    same_line = list(lines)
    same_line[first.lineno - 1] = "%s%s; %s" % (indent, scale, lines[first.lineno - 1].lstrip())
    try:
        compile("".join(same_line), EXAMPLE, "exec")
        return "".join(same_line)
    except SyntaxError:     # a compound first statement: a line of its own
        lines.insert(first.lineno - 1, "%s%s\n" % (indent, scale))
        return "".join(lines)


# ------------------------------------------------------------------------- running

def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("PYIGPROF_") and not k.startswith("PYTHON")}
    env["PYTHONHASHSEED"] = "0"
    return env


PROFILE_RE = re.compile(r"^C1 FN[0-9a-f]+=\(F[0-9a-f]+(?:=\(\[pyigprof\]\))?\+0 N=\((#pyigprof [^)]*)\)\)")


def profile_facts(path):
    """samples, ticks and the trigger from a profile's '#pyigprof stats' and
    '#pyigprof sampling' lines (docs/dump-format.md)."""
    import gzip
    facts = {}
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            m = PROFILE_RE.search(line)
            if not m:
                continue
            words = m.group(1).split()
            kv = dict(w.split("=", 1) for w in words[2:] if "=" in w)
            if words[1] == "stats":
                facts["samples"] = int(kv.get("samples", 0))
                facts["ticks"] = int(kv.get("ticks", 0))
            elif words[1] == "sampling":
                facts["trigger"] = kv.get("trigger")
    return facts


def run_profiled(py, script_dir, seconds, sampling_env, preload, out_path, timeout_s):
    """Runs script_dir/mixed.py for `seconds` CPU seconds under pyigprof; returns a dict
    with the script's own phase times, the profile's samples, ticks and trigger, the CPU
    and wall time, or an error."""
    env = clean_env()
    env.update(sampling_env)
    env.update({"LD_PRELOAD": preload, "PYIGPROF_OUTPUT": out_path, "PYIGPROF_QUIET": "1"})
    t0 = time.perf_counter()
    try:
        r = subprocess.run([py, os.path.join(script_dir, "mixed.py"), repr(seconds)], env=env,
                           cwd=script_dir, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "timed out after %g s" % timeout_s}
    res = {"wall_s": time.perf_counter() - t0, "status": r.returncode}
    if r.returncode != 0 or not os.path.exists(out_path):
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        res.update(ok=False, error="status %d%s: %s" % (r.returncode, "" if os.path.exists(out_path)
                                                         else ", no profile", (lines[-1] if lines else "")[:200]))
        return res
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
        res["process_cpu_s"] = out["process_cpu_s"]
        res["phases_s"] = out["phases_s"]
        total = sum(out["phases_s"].values())
        res["true_share"] = 100.0 * out["phases_s"][FUNCTION] / total if total > 0 else None
    except (ValueError, KeyError, IndexError) as e:
        res.update(ok=False, error="unreadable output of mixed.py: %s" % e)
        return res
    res.update(profile_facts(out_path))
    res["profile"] = out_path
    res["ok"] = True
    return res


# ----------------------------------------------------------------------- comparing

def compare(analyse, base, new, timeout_s=600):
    """`pyigprof-analyse --diff base new --top=0`: the python_work row (z, changes,
    significance) and the number of significant functions; or an error."""
    try:
        r = subprocess.run([analyse, "--diff", base, new, "--top=0"], capture_output=True, text=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "pyigprof-analyse timed out"}
    if r.returncode != 0:
        return {"ok": False, "error": "pyigprof-analyse status %d: %s" % (r.returncode, r.stderr.strip()[-200:])}
    res = {"ok": True, "significant_functions": 0, "row": None, "critical_z": None}
    in_table = False
    for line in r.stdout.splitlines():
        if line.startswith("test: "):
            m = re.search(r"significant when \|z\| >= ([0-9.]+)", line)
            res["critical_z"] = float(m.group(1)) if m else None
            m = re.search(r"over (\d+) tests? of (\d+) functions?", line)
            if m:
                res["tests"], res["functions"] = int(m.group(1)), int(m.group(2))
            continue
        if line.lstrip().startswith("base %"):
            in_table = True
            continue
        if line.startswith("result: ") or line.startswith("("):
            in_table = False
            continue
        if not in_table:
            continue
        # 15 cells (no spaces in any), then "function  (file)" (docs: report/diff.rs).
        cells = line.split()
        if len(cells) < 16:
            continue
        signif = cells[14]
        if signif != "no":
            res["significant_functions"] += 1
        label = " ".join(cells[15:])
        if label.startswith(FUNCTION + " (") and "mixed.py" in label:
            num = lambda c: None if c == "-" else float(c)
            res["row"] = {"label": label, "change": num(cells[2]), "z": num(cells[5]),
                          "p_adj": num(cells[6]), "cum_change": num(cells[9]), "cum_z": num(cells[12]),
                          "cum_p_adj": num(cells[13]), "signif": signif}
    row = res["row"]
    res["flagged_slower"] = bool(row) and (
        (row["signif"] in ("self", "both") and (row["change"] or 0) > 0)
        or (row["signif"] in ("cum", "both") and (row["cum_change"] or 0) > 0))
    res["flagged_faster"] = bool(row) and (
        (row["signif"] in ("self", "both") and (row["change"] or 0) < 0)
        or (row["signif"] in ("cum", "both") and (row["cum_change"] or 0) < 0))
    return res


# ---------------------------------------------------------------------------- cells

def run_cell(cell, args, sources, tmp, results, lock):
    """All runs and comparisons of one (duration, sampling): `reps` runs of the base and
    of the slowed script, alternating, in one directory so that both scripts have the
    same path (the comparison matches functions by name and file)."""
    seconds, (sname, _, senv) = cell
    key = "%g|%s" % (seconds, sname)
    cdir = os.path.join(tmp, "cell-%g-%s" % (seconds, sname))
    os.makedirs(cdir, exist_ok=True)
    timeout_s = 20 * seconds + 120
    runs = {"base": [], "slow": []}
    for i in range(args.reps):
        order = ("base", "slow") if i % 2 == 0 else ("slow", "base")
        for variant in order:
            with open(os.path.join(cdir, "mixed.py"), "w") as f:
                f.write(sources[variant])
            out = os.path.join(cdir, "%s-%d.gz" % (variant, i))
            res = run_profiled(args.python, cdir, seconds, senv, args.preload, out, timeout_s)
            res["rep"] = i
            runs[variant].append(res)
            log("diff-power: %6gs %-6s %s %d: %s" % (
                seconds, sname, variant, i,
                "%d samples, %s, python_work %.1f %%" % (res.get("samples", 0), res.get("trigger"),
                                                         res.get("true_share") or float("nan"))
                if res["ok"] else "FAILED: " + res["error"]))
    comparisons = []

    def add(kind, a, b):
        if not (a["ok"] and b["ok"]):
            return
        c = compare(args.analyse, a["profile"], b["profile"])
        c.update(kind=kind, base_rep=a["rep"], new_rep=b["rep"],
                 same_rep=a["rep"] == b["rep"],
                 true_change=(b["true_share"] - a["true_share"]) if a.get("true_share") is not None
                 and b.get("true_share") is not None else None)
        comparisons.append(c)
    for a, b in itertools.product(runs["base"], runs["slow"]):
        add("detect", a, b)
    for variant in ("base", "slow"):
        for a, b in itertools.combinations(runs[variant], 2):
            add("null-" + variant, a, b)
    for rs in runs.values():
        for r in rs:
            r.pop("profile", None)
    with lock:
        results["cells"][key] = {"seconds": seconds, "sampling": sname, "runs": runs,
                                 "comparisons": comparisons}
    shutil.rmtree(cdir, ignore_errors=True)
    det = [c for c in comparisons if c["kind"] == "detect" and c["ok"]]
    null = [c for c in comparisons if c["kind"].startswith("null") and c["ok"]]
    log("diff-power: %6gs %-6s detection %d/%d, false positives %d/%d" % (
        seconds, sname, sum(c["flagged_slower"] for c in det), len(det),
        sum(c["flagged_slower"] for c in null), len(null)))


# --------------------------------------------------------------------------- report

def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def sd(values):
    values = [v for v in values if v is not None]
    return statistics.stdev(values) if len(values) > 1 else None


def rate(hits, n):
    return "%.0f %% (%d/%d)" % (100.0 * hits / n, hits, n) if n else "n/a"


def summarise(results):
    rows = {}
    for cell in results["cells"].values():
        comps = [c for c in cell["comparisons"] if c.get("ok")]
        det = [c for c in comps if c["kind"] == "detect"]
        same = [c for c in det if c["same_rep"]]
        null = [c for c in comps if c["kind"].startswith("null")]
        runs = [r for rs in cell["runs"].values() for r in rs if r.get("ok")]
        base_true = [r["true_share"] for r in cell["runs"]["base"] if r.get("ok")]
        slow_true = [r["true_share"] for r in cell["runs"]["slow"] if r.get("ok")]

        def zs(cs, field):
            return [c["row"][field] for c in cs if c.get("row") and c["row"].get(field) is not None]
        rows[(cell["seconds"], cell["sampling"])] = {
            "seconds": cell["seconds"], "sampling": cell["sampling"],
            "runs_ok": len(runs), "runs": sum(len(rs) for rs in cell["runs"].values()),
            "errors": sorted({r["error"] for rs in cell["runs"].values() for r in rs if not r.get("ok")}
                             | {c["error"] for c in cell["comparisons"] if not c.get("ok")}),
            "samples": median(r.get("samples") for r in runs),
            "samples_per_cpu_s": median(r["samples"] / r["process_cpu_s"] for r in runs
                                        if r.get("samples") and r.get("process_cpu_s")),
            "triggers": sorted({r.get("trigger") or "n/a" for r in runs}),
            "detect_hits": sum(c["flagged_slower"] for c in det), "detect_n": len(det),
            "same_hits": sum(c["flagged_slower"] for c in same), "same_n": len(same),
            "fp_hits": sum(c["flagged_slower"] for c in null), "fp_n": len(null),
            "null_any": sum(c["significant_functions"] > 0 for c in null),
            "null_pw_any": sum(c["flagged_slower"] or c["flagged_faster"] for c in null),
            "detect_any_wrong": sum(c["flagged_faster"] for c in det),
            "critical_z": median(c.get("critical_z") for c in comps),
            "detect_cum_z": median(zs(det, "cum_z")), "detect_z": median(zs(det, "z")),
            "detect_cum_change": median(zs(det, "cum_change")),
            "null_cum_z_sd": sd(zs(null, "cum_z")),
            "true_base": statistics.mean(base_true) if base_true else None,
            "true_slow": statistics.mean(slow_true) if slow_true else None,
            "true_sd": sd([t - statistics.mean(base_true) for t in base_true]
                          + [t - statistics.mean(slow_true) for t in slow_true])
            if len(base_true) > 1 and len(slow_true) > 1 else None,
        }
    return rows


def shortest(rows, sampling, durations):
    for d in durations:
        r = rows.get((d, sampling))
        if r and r["detect_n"] and r["detect_hits"] / r["detect_n"] >= DETECTION_TARGET:
            return d
    return None


def sampling_only(rows, sampling, durations, slowdown):
    """What the test's own model (binomial sampling noise only, no run-to-run variation of
    the program) predicts: the samples per profile, and the CPU seconds at the measured
    samples per CPU second, for 80 % detection of python_work's share growing from p (its
    mean true share in the base runs) to slowdown*p / (1 + (slowdown-1)*p), at the critical
    z of the longest duration. None without data."""
    rs = [rows[(d, sampling)] for d in durations if (d, sampling) in rows]
    base = [r["true_base"] for r in rs if r.get("true_base") is not None]
    rates = [r["samples_per_cpu_s"] for r in rs if r.get("samples_per_cpu_s")]
    zc = next((r["critical_z"] for r in reversed(rs) if r.get("critical_z")), None)
    if not base or not rates or not zc:
        return None
    p = statistics.mean(base) / 100
    p2 = slowdown * p / (1 + (slowdown - 1) * p)
    pm = (p + p2) / 2
    # z = delta / sqrt(pm (1 - pm) 2 / n); 80 % one-sided power: mean z = zc + 0.84.
    n = 2 * pm * (1 - pm) * ((zc + 0.84) / (p2 - p)) ** 2
    rate_s = statistics.median(rates)
    return {"p": p, "p2": p2, "critical_z": zc, "samples": n, "rate": rate_s, "seconds": n / rate_s}


def render(results, rows):
    meta = results["meta"]
    durations = meta["durations"]
    names = [s[0] for s in SAMPLINGS]
    out = ["# Power of `pyigprof-analyse --diff`: a function made %d %% slower" % round((meta["slowdown"] - 1) * 100), ""]
    out.append("- command: `%s`" % meta["command"])
    out.append("- date: %s; host: %s, %s CPUs, kernel %s; load average before: %s, after: %s; took %.0f s"
               % (meta["date"], meta["host"], meta["cpus"], meta["kernel"], meta["load_before"],
                  meta.get("load_after", "n/a"), meta.get("elapsed_s", 0)))
    out.append("- pyigprof: %s (sha1 %s), pyigprof-analyse: %s (sha1 %s), copied at the start; commit %s"
               % (meta["preload"], meta.get("preload_sha1"), meta["analyse"], meta.get("analyse_sha1"), meta["commit"]))
    out.append("- Python: %s (%s)" % (meta["python"], meta["python_version"]))
    out.append("- program: examples/mixed.py SECONDS (phases python_work, squeeze, digest until SECONDS of "
               "CPU time); modified: python_work's loop count x %.2f (`%s`)" % (meta["slowdown"], meta["patch"]))
    for name, what, _ in SAMPLINGS:
        out.append("- %s: %s" % (name, what))
    out.append("- %d runs of each script per duration and sampling, alternating base and modified; %d jobs "
               "in parallel" % (meta["reps"], meta["jobs"]))
    out.append("- detection: python_work flagged significantly slower (self or cumulative share grown, "
               "`signif.` not `no`, default alpha 0.01 with Bonferroni correction) in `pyigprof-analyse "
               "--diff BASE NEW`, over every base run x modified run (%d pairs; in brackets the %d pairs of "
               "the same repetition). False positives: the same verdict comparing two runs of the same "
               "script (base x base and modified x modified, %d pairs)."
               % (meta["reps"] ** 2, meta["reps"], meta["reps"] * (meta["reps"] - 1)))
    out.append("")
    head = "| duration (CPU s) |"
    sep = "|---|"
    for n in names:
        head += " %s samples/run | %s detection | %s false positives |" % (n, n, n)
        sep += "---|---|---|"
    out += [head, sep]
    for d in durations:
        line = "| %g |" % d
        for n in names:
            r = rows.get((d, n))
            if not r:
                line += " | | |"
                continue
            line += " %s | %s [%d/%d] | %s |" % (
                fmt(r["samples"], ".0f"), rate(r["detect_hits"], r["detect_n"]), r["same_hits"], r["same_n"],
                rate(r["fp_hits"], r["fp_n"]))
        out.append(line)
    out.append("")
    for n in names:
        d = shortest(rows, n, durations)
        model = sampling_only(rows, n, durations, meta["slowdown"])
        out.append("- shortest duration with detection >= %.0f %%, %s: **%s**%s" % (
            DETECTION_TARGET * 100, n, "%g s" % d if d is not None else "not reached up to %g s" % durations[-1],
            "; the test's own model (sampling noise only) predicts %.0f %% at ~%.0f samples per profile, "
            "~%.0f s at %.0f samples/s (python_work %.1f %% -> %.1f %%, critical z %.2f)" % (
                DETECTION_TARGET * 100, model["samples"], model["seconds"], model["rate"], 100 * model["p"],
                100 * model["p2"], model["critical_z"]) if model else ""))
    out.append("")
    out.append("Details per duration and sampling: samples per CPU second and trigger (from the profiles); "
               "the critical |z| (Bonferroni); python_work's median cumulative z and change (points) in "
               "the detection pairs; the spread (SD) of its cumulative z in the null pairs (1 if sampling "
               "were the only noise); its true share of the CPU time (the script's own process_time per "
               "phase), mean in base and modified runs and the run-to-run SD; null pairs with any function "
               "flagged (either direction), with python_work flagged (either direction); detection pairs "
               "with python_work flagged faster.")
    out.append("")
    out.append("| duration | sampling | runs ok | samples/CPU s | trigger | critical z | detect cum z | detect cum change | "
               "null cum z SD | true share base % | true share modified % | true share SD | null: any function | "
               "null: python_work either way | detect: flagged faster | errors |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in durations:
        for n in names:
            r = rows.get((d, n))
            if not r:
                continue
            out.append("| %g | %s | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d | %d/%d | %d/%d | %s |" % (
                d, n, r["runs_ok"], r["runs"], fmt(r["samples_per_cpu_s"], ".0f"), "+".join(r["triggers"]),
                fmt(r["critical_z"], ".2f"), fmt(r["detect_cum_z"], "+.2f"), fmt(r["detect_cum_change"], "+.2f"),
                fmt(r["null_cum_z_sd"], ".2f"), fmt(r["true_base"], ".2f"), fmt(r["true_slow"], ".2f"),
                fmt(r["true_sd"], ".2f"), r["null_any"], r["fp_n"], r["null_pw_any"], r["fp_n"],
                r["detect_any_wrong"], r["detect_n"], "; ".join(r["errors"]).replace("|", "\\|")[:200]))
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--durations", default="0.5,1,2,4,8,16,32,64",
                    help="CPU seconds of each run, comma-separated (default %(default)s)")
    ap.add_argument("--reps", type=int, default=5, help="runs of each script per duration and sampling (default 5)")
    ap.add_argument("--slowdown", type=float, default=1.10, help="python_work's work factor (default 1.10)")
    ap.add_argument("--jobs", type=int, default=2, help="cells run in parallel (default 2)")
    ap.add_argument("--samplings", default="before,after", help="which samplings (default before,after)")
    ap.add_argument("--python", default=DEFAULT_PYTHON, help="interpreter (default %(default)s)")
    ap.add_argument("--preload", default=os.path.join(REPO, "target", "release", "libpyigprof.so"))
    ap.add_argument("--analyse", default=os.path.join(REPO, "target", "release", "pyigprof-analyse"))
    ap.add_argument("--out", default=os.path.join(HERE, "results.md"),
                    help="markdown output; raw data to the same name with .json (default %(default)s)")
    ap.add_argument("--render", metavar="JSON", help="only remake the markdown (--out) from the raw data of an "
                                                     "earlier run")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            results = json.load(f)["results"]
        text = render(results, summarise(results))
        with open(args.out, "w") as f:
            f.write(text)
        print(text)
        return
    for path in (args.python, args.preload, args.analyse):
        if not os.path.exists(path):
            sys.exit("diff-power: %s not found (cargo build --release?)" % path)
    durations = sorted(float(d) for d in args.durations.split(",") if d.strip())
    durations = [int(d) if d == int(d) else d for d in durations]
    wanted = {s.strip() for s in args.samplings.split(",")}
    samplings = [s for s in SAMPLINGS if s[0] in wanted]

    with open(EXAMPLE) as f:
        base_src = f.read()
    slow_src = slowed_source(base_src, FUNCTION, args.slowdown)
    patch = next(l.strip() for a, l in zip(base_src.splitlines(), slow_src.splitlines()) if a != l)
    sources = {"base": base_src, "slow": slow_src}
    commit = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    meta = {"command": " ".join(["python3", os.path.relpath(__file__, REPO)] + sys.argv[1:]),
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "cpus": os.cpu_count(), "kernel": platform.release(),
            "load_before": "%.2f %.2f %.2f" % os.getloadavg(), "commit": commit,
            "preload": os.path.relpath(args.preload, REPO), "analyse": os.path.relpath(args.analyse, REPO),
            "python": args.python,
            "python_version": subprocess.run([args.python, "-V"], capture_output=True, text=True).stdout.strip(),
            "durations": durations, "reps": args.reps, "slowdown": args.slowdown, "jobs": args.jobs,
            "patch": patch, "samplings": [s[0] for s in samplings]}
    results = {"meta": meta, "cells": {}}
    # Longest first (the jobs end together), the samplings of one duration side by side.
    cells = queue.Queue()
    for d in reversed(durations):
        for s in samplings:
            cells.put((d, s))
    lock = threading.Lock()
    tmp = tempfile.mkdtemp(prefix="pyigprof-diff-power-")
    # Private copies of the binaries: a rebuild of target/release during the run (the
    # tree may be shared) must not change the profiler between runs.
    for attr in ("preload", "analyse"):
        copy = os.path.join(tmp, os.path.basename(getattr(args, attr)))
        shutil.copy2(getattr(args, attr), copy)
        with open(copy, "rb") as f:
            meta[attr + "_sha1"] = hashlib.sha1(f.read()).hexdigest()[:12]
        setattr(args, attr, copy)
    started = time.monotonic()
    failures = []

    def worker():
        while True:
            try:
                cell = cells.get_nowait()
            except queue.Empty:
                return
            try:
                run_cell(cell, args, sources, tmp, results, lock)
            except Exception as e:      # noqa: BLE001  (reported, the other cells go on)
                failures.append("%s: %r" % (cell[:1], e))
                log("diff-power: cell %g %s failed: %r" % (cell[0], cell[1][0], e))
    try:
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, args.jobs))]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(1.0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        meta["load_after"] = "%.2f %.2f %.2f" % os.getloadavg()
        meta["elapsed_s"] = round(time.monotonic() - started, 1)
        meta["failures"] = failures
        rows = summarise(results)
        text = render(results, rows)
        with open(args.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump({"results": results, "rows": [dict(r) for r in rows.values()]}, f, indent=1)
        print(text)
        log("diff-power: wrote %s (%.0f s)" % (args.out, meta["elapsed_s"]))


if __name__ == "__main__":
    main()
