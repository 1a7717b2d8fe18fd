#!/usr/bin/env python3
"""The figures of benches/pacing/stall_probe.sh: the share of a run's probe
operations slower than the idle arm's p99, with a confidence interval.

    stall_report.py PROBE_LOG BLOCKS [--audit ARM=FILE ...] [--report FILE ...]
                    [--chunk-secs S] [--boot N] [--seed N]
    stall_report.py --pool OUT [OUT ...] [--target T] [--boot N]
    stall_report.py --self-check
    stall_report.py --summary REPORT   (one run's JSON report on a line)

PROBE_LOG holds benches/pacing/io_probe.py's operations ("<unix start> <ms>").
BLOCKS holds one block a line:
    "<comparison> <side> <begin> <end> <drop> <phase> <run>"
comparison: the arm the block belongs to (paced, unpaced, docker); side:
`idle` or `arm`; begin and end: Unix seconds; drop: the seconds at the
block's start whose operations are dropped (after a switch); phase: `pre`,
or `drift` once benches/pacing/stall_probe.sh's steady writer runs (DRIFT=1);
run: the fixture's run number for an arm block, `-` for idle.

For each comparison and phase (and each comparison over both phases), from
the operations kept (in a block, past its drop):
  - idle's p99 (nearest rank: the ceil(0.99 n)-th fastest of all idle
    operations of that comparison and phase), and the share of idle's own
    operations above it (1% or a little under: ties and rounding);
  - the share of the arm's operations slower than it (strictly above),
    with a 95% interval from a block bootstrap: the kept time of every
    block is cut into chunks of S seconds (default 5), and N times
    (default 2000) idle's and the arm's chunks are each drawn with
    replacement, idle's p99 taken again from the drawn idle chunks and the
    share from the drawn arm chunks; the interval is the 2.5th to 97.5th
    percentile of those shares. Chunks, not single operations, because
    operations close in time are slowed together (one removal's commit
    meets several fsyncs in a row); also the same bootstrap over whole
    blocks (few units: a rough check) and Wilson's interval (which treats
    operations as independent: too narrow when they are not);
  - p50, p99 and max of both sides, the operations kept on each;
  - each block's share (slower than that p99), in the order run, and
    with --audit the objects deleted in each arm block: one block far
    above the rest, and whether the idle block before it was rising too,
    tells a disturbance of the machine's that ABBA did not pair away from
    what the removals did;
  - with --audit ARM=FILE (safeprune's audit logs of that arm's runs):
    objects deleted per second of arm-block time (the audit line's time is
    when a removal ended), and how many ended outside the arm's blocks
    (in flight when the run was stopped).
Then, per --report FILE (a run's JSON report): its deletions and the
`pace` object's fields.

--pool takes the OUT directories of several repeats of one case
(benches/pacing/stall_probe.sh's: probe.log, blocks, paced-*.audit) and gives,
for the paced arm and each phase: one line per repeat (the share slower
than its own idle's p99, the stall added from outside, objects/s), then
the repeats pooled: the share over all their arm operations, the added
stall over all their blocks' seconds with a 95% interval (each repeat's
blocks resampled per side), and whether every repeat kept the share at
or under 2% and the pooled added stall within 1.25x of --target.

--self-check runs the arithmetic on synthetic input whose answers are
known, and exits non-zero if one is wrong.
"""

import argparse
import bisect
import datetime
import glob
import heapq
import json
import math
import os
import random
import sys


def rank(n, p):
    """The nearest-rank index (0-based) of the p-th percentile of n values."""
    return max(0, math.ceil(p / 100.0 * n) - 1)


def pct(xs, p):
    xs = sorted(xs)
    return xs[rank(len(xs), p)] if xs else float("nan")


def p99_of_chunks(chunks):
    """idle's p99 over the union of CHUNKS (each sorted descending)."""
    n = sum(len(c) for c in chunks)
    if n == 0:
        return float("nan")
    above = n - 1 - rank(n, 99)  # values strictly after the p99's rank
    # The p99 is the (above+1)-th largest value.
    top = heapq.nlargest(above + 1, (x for c in chunks for x in c[: above + 1]))
    return top[-1]


def count_above(sorted_asc, threshold):
    return len(sorted_asc) - bisect.bisect_right(sorted_asc, threshold)


def wilson(k, n, z=1.959963984540054):
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, centre - half), min(1.0, centre + half))


def kept_ops(ops, times, begin, end, drop):
    """The latencies of operations starting in [begin + drop, end)."""
    lo = bisect.bisect_left(times, begin + drop)
    hi = bisect.bisect_left(times, end)
    return ops[lo:hi], times[lo:hi]


def chunked(lat, ts, start, secs):
    """LAT cut by their start times TS into chunks of SECS from START."""
    out = {}
    for x, t in zip(lat, ts):
        out.setdefault(int((t - start) // secs), []).append(x)
    return list(out.values())


def bootstrap(idle_units, arm_units, boot, rng):
    """The 2.5th and 97.5th percentiles of the share of arm operations above
    idle's p99, drawing units of each side with replacement."""
    idle_desc = [sorted(u, reverse=True) for u in idle_units if u]
    arm_asc = [sorted(u) for u in arm_units if u]
    if not idle_desc or not arm_asc:
        return (float("nan"), float("nan"))
    shares = []
    for _ in range(boot):
        idle = [idle_desc[rng.randrange(len(idle_desc))] for _ in idle_desc]
        arm = [arm_asc[rng.randrange(len(arm_asc))] for _ in arm_asc]
        p99 = p99_of_chunks(idle)
        n = sum(len(a) for a in arm)
        shares.append(sum(count_above(a, p99) for a in arm) / n)
    shares.sort()
    return (shares[int(0.025 * boot)], shares[min(boot - 1, int(0.975 * boot))])


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def figures(blocks, ops, times, chunk_secs, boot, seed, audits=None):
    """A dict of the figures of one comparison and phase (BLOCKS its rows)."""
    rng = random.Random(seed)
    sides = {"idle": {"lat": [], "chunks": [], "blocks": [], "secs": 0.0, "raw": 0.0},
             "arm": {"lat": [], "chunks": [], "blocks": [], "secs": 0.0, "raw": 0.0}}
    ended = sorted(audits) if audits is not None else None
    in_order = []  # (side, kept latencies, removals ended in it: arm blocks, with audits)
    for b in blocks:
        lat, ts = kept_ops(ops, times, b["begin"], b["end"], b["drop"])
        s = sides[b["side"]]
        s["lat"] += lat
        s["blocks"].append(lat)
        s["chunks"] += chunked(lat, ts, b["begin"] + b["drop"], chunk_secs)
        s["secs"] += max(0.0, b["end"] - b["begin"] - b["drop"])
        s["raw"] += b["end"] - b["begin"]
        deleted = None
        if ended is not None and b["side"] == "arm":
            deleted = bisect.bisect_left(ended, b["end"]) - bisect.bisect_left(ended, b["begin"])
        in_order.append((b["side"], lat, deleted))
    idle, arm = sides["idle"], sides["arm"]
    p99 = pct(idle["lat"], 99)
    by_block = [(side, sum(1 for x in lat if x > p99) / len(lat) if lat else float("nan"), deleted)
                for side, lat, deleted in in_order]
    slower = sum(1 for x in arm["lat"] if x > p99)
    n = len(arm["lat"])
    out = {
        "idle_p99": p99,
        "idle_self": sum(1 for x in idle["lat"] if x > p99) / len(idle["lat"]) if idle["lat"] else float("nan"),
        "slower": slower,
        "n": n,
        "share": slower / n if n else float("nan"),
        "ci_chunks": bootstrap(idle["chunks"], arm["chunks"], boot, rng),
        "ci_blocks": bootstrap(idle["blocks"], arm["blocks"], boot, rng),
        "wilson": wilson(slower, n),
        "units": (len([c for c in idle["chunks"] if c]), len([c for c in arm["chunks"] if c])),
        "blocks": (len(idle["blocks"]), len(arm["blocks"])),
        "by_block": by_block,
    }
    for name, s in sides.items():
        out[name] = {
            "ops": len(s["lat"]),
            "p50": pct(s["lat"], 50),
            "p99": pct(s["lat"], 99),
            "max": max(s["lat"], default=float("nan")),
            "secs": s["secs"],
            "raw": s["raw"],
        }
    out["added_stall"] = added_stall(blocks, boot, seed)
    if audits is not None:
        inside = sum(deleted for _, _, deleted in in_order if deleted is not None)
        out["deleted_in_arm"] = inside
        out["objects_per_second"] = inside / arm["raw"] if arm["raw"] else float("nan")
    return out


def read_blocks(path):
    rows = []
    for line in open(path):
        f = line.split()
        if not f:
            continue
        row = {"comparison": f[0], "side": f[1], "begin": float(f[2]), "end": float(f[3]),
               "drop": float(f[4]), "phase": f[5], "run": f[6]}
        if len(f) >= 13:
            # The workloads' `some total`s (µs), io and cpu, at the
            # block's begin, after its drop and at its end.
            io_b, cpu_b, io_d, cpu_d, io_e, cpu_e = (float(x) for x in f[7:13])
            row["psi"] = {"begin": (io_b, cpu_b), "drop": (io_d, cpu_d), "end": (io_e, cpu_e)}
        rows.append(row)
    return rows


def stall_units(blocks):
    """Each side's units of stall from outside: a list of (seconds, I/O+CPU
    µs, I/O µs) per block or head, or None without PSI figures. The arm's
    side is its whole blocks and the dropped start of an idle block that
    follows one of them (a removal's late stall falls there); the idle side
    the rest of its blocks past their drop."""
    if not blocks or any("psi" not in b for b in blocks):
        return None
    units = {"idle": [], "arm": []}

    def add(side, t0, t1, p0, p1):
        both = max(0.0, (p1[0] + p1[1]) - (p0[0] + p0[1]))
        units[side].append((max(0.0, t1 - t0), both, max(0.0, p1[0] - p0[0])))

    previous = None
    for b in blocks:
        psi, drop_at = b["psi"], min(b["begin"] + b["drop"], b["end"])
        if b["side"] == "arm":
            add("arm", b["begin"], b["end"], psi["begin"], psi["end"])
        else:
            if previous == "arm":
                add("arm", b["begin"], drop_at, psi["begin"], psi["drop"])
            add("idle", drop_at, b["end"], psi["drop"], psi["end"])
        previous = b["side"]
    if not units["idle"] or not units["arm"]:
        return None
    return units


def stall_rates(runs, index=1):
    """Per side, the stall (field INDEX of the units: 1 I/O+CPU, 2 I/O) over
    the seconds of all RUNS' units pooled, a share of wall time."""
    out = {}
    for side in ("idle", "arm"):
        secs = sum(u[0] for units in runs for u in units[side])
        out[side] = sum(u[index] for units in runs for u in units[side]) / 1e6 / secs if secs else float("nan")
    return out


def added_stall(blocks, boot=0, seed=1):
    """The stall the arm's BLOCKS added over idle ones: pooled_stall of
    one run."""
    return pooled_stall([stall_units(blocks)], boot, seed)


def pooled_stall(runs, boot=0, seed=1):
    """The stall the arm's blocks added over idle ones, judged from outside
    the pacer, over RUNS (each a stall_units): (added I/O+CPU, added I/O,
    idle's I/O+CPU, the arm's I/O+CPU), each a share of wall time, and with
    BOOT > 0 a 95% interval of the first (blocks resampled per side, within
    each run), or None without PSI figures."""
    if not runs or any(units is None for units in runs):
        return None
    both, io = stall_rates(runs, 1), stall_rates(runs, 2)
    interval = None
    if boot > 0:
        rng = random.Random(seed)

        def resampled():
            drawn = [{side: [rng.choice(units[side]) for _ in units[side]] for side in units}
                     for units in runs]
            r = stall_rates(drawn)
            return r["arm"] - r["idle"]

        diffs = sorted(resampled() for _ in range(boot))
        interval = (diffs[int(0.025 * boot)], diffs[min(boot - 1, int(0.975 * boot))])
    return (both["arm"] - both["idle"], io["arm"] - io["idle"], both["idle"], both["arm"], interval)


def read_audit(path):
    """End times of the deleted removals of an audit log."""
    out = []
    for line in open(path):
        if line.strip():
            o = json.loads(line)
            if o.get("result") == "deleted":
                out.append(parse_time(o["time"]))
    return out


def fmt_pct(x):
    return f"{x * 100:.2f}%"


def print_figures(label, f, target=None):
    lo, hi = f["ci_chunks"]
    blo, bhi = f["ci_blocks"]
    wlo, whi = f["wilson"]
    print(f"{label}:")
    print(f"  idle p99 {f['idle_p99']:.3f} ms (idle's own ops above it: {fmt_pct(f['idle_self'])})")
    print(f"  arm ops slower than it: {f['slower']} of {f['n']} = {fmt_pct(f['share'])}"
          f"  95% CI {fmt_pct(lo)}-{fmt_pct(hi)} (bootstrap over {f['units'][0]}+{f['units'][1]} chunks)"
          f"; over {f['blocks'][0]}+{f['blocks'][1]} blocks {fmt_pct(blo)}-{fmt_pct(bhi)}"
          f"; Wilson {fmt_pct(wlo)}-{fmt_pct(whi)}")
    for side in ("idle", "arm"):
        s = f[side]
        print(f"  {side:4} ops {s['ops']:6d}  p50 {s['p50']:.3f} ms  p99 {s['p99']:.3f} ms"
              f"  max {s['max']:.2f} ms  kept {s['secs']:.1f} s of {s['raw']:.1f} s")
    # In the order run: one block far above the others (a disturbance of
    # the machine's that ABBA could not pair away) shows here, and whether
    # the idle block before it was rising too.
    print("  by block, in order (share slower than idle p99 [objects deleted]): "
          + " ".join(f"{side[0].upper()} {'-' if math.isnan(share) else fmt_pct(share)}"
                     + (f" [{n}]" if n is not None else "")
                     for side, share, n in f["by_block"]))
    if "objects_per_second" in f:
        print(f"  objects deleted in arm blocks: {f['deleted_in_arm']} over {f['arm']['raw']:.1f} s"
              f" = {f['objects_per_second']:.2f}/s")
    if f.get("added_stall") is not None:
        both, io, idle_rate, arm_rate, interval = f["added_stall"]
        against = f" = {both * 100 / target:.2f}x the target +{target}%" if target else ""
        ci = f", 95% CI {interval[0] * 100:+.3f}% to {interval[1] * 100:+.3f}% (blocks resampled)" if interval else ""
        print(f"  stall added over idle, from outside (the workloads' PSI some): I/O and CPU"
              f" {both * 100:+.3f}% of wall time{against}{ci} (idle {idle_rate * 100:.3f}%,"
              f" arm {arm_rate * 100:.3f}%); I/O alone {io * 100:+.3f}%")


def report_line(path):
    r = json.load(open(path))
    outcomes = r.get("outcomes", [])
    deleted = sum(1 for o in outcomes if o.get("result") == "deleted")
    pace = r.get("pace")
    keys = ("baseline_io_pressure_percent", "last_baseline_io_pressure_percent", "baseline_remeasured",
            "added_io_pressure_percent", "added_stall_seconds",
            "paced_seconds", "objects_per_second", "readings", "max_io_pressure_percent",
            "lowest_concurrency", "delay_exhausted", "signal")
    fields = ", ".join(f"{k} {pace.get(k)}" for k in keys if pace and k in pace)
    return f"{path}: deleted {deleted} of {len(outcomes)}" + (f"; pace: {fields}" if pace else "")


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("probe_log", nargs="?")
    parser.add_argument("blocks", nargs="?")
    parser.add_argument("--audit", action="append", default=[])
    parser.add_argument("--report", action="append", default=[])
    parser.add_argument("--chunk-secs", type=float, default=5.0)
    parser.add_argument("--boot", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", type=float, help="the paced arm's added_io_pressure_percent")
    parser.add_argument("--self-check", action="store_true")
    parser.add_argument("--summary", metavar="REPORT")
    parser.add_argument("--pool", nargs="+", metavar="OUT")
    args = parser.parse_args(argv)
    if args.self_check:
        return self_check()
    if args.pool:
        return pool(args.pool, args.target if args.target is not None else 0.1, args.chunk_secs,
                    args.boot, args.seed)
    if args.summary:
        print(report_line(args.summary).split(": ", 1)[1])
        return 0
    pairs = sorted((float(t), float(ms)) for t, ms in (l.split() for l in open(args.probe_log) if l.strip()))
    times = [t for t, _ in pairs]
    ops = [ms for _, ms in pairs]
    blocks = read_blocks(args.blocks)
    audits = {}
    for spec in args.audit:
        arm, path = spec.split("=", 1)
        audits.setdefault(arm, []).extend(read_audit(path))
    for comparison in dict.fromkeys(b["comparison"] for b in blocks):
        rows = [b for b in blocks if b["comparison"] == comparison]
        phases = list(dict.fromkeys(b["phase"] for b in rows))
        groups = [(f"{comparison}", rows)]
        if len(phases) > 1:
            groups += [(f"{comparison}, phase {p}", [b for b in rows if b["phase"] == p]) for p in phases]
        for label, group in groups:
            print_figures(label, figures(group, ops, times, args.chunk_secs, args.boot, args.seed,
                                         audits.get(comparison)),
                          args.target if comparison == "paced" else None)
    for path in args.report:
        print(report_line(path))
    return 0


def read_probe(path):
    pairs = sorted((float(t), float(ms)) for t, ms in (l.split() for l in open(path) if l.strip()))
    return [ms for _, ms in pairs], [t for t, _ in pairs]


def pool(dirs, target, chunk_secs, boot, seed, share_limit=0.02, stall_factor=1.25):
    """Prints each repeat's figures and the repeats pooled (see --pool);
    returns 0 when every phase meets both bounds, 1 when one does not."""
    repeats = []
    for d in dirs:
        ops, times = read_probe(os.path.join(d, "probe.log"))
        blocks = [b for b in read_blocks(os.path.join(d, "blocks")) if b["comparison"] == "paced"]
        audits = [t for path in sorted(glob.glob(os.path.join(d, "paced-*.audit"))) for t in read_audit(path)]
        repeats.append((os.path.basename(os.path.normpath(d)), ops, times, blocks, audits))
    phases = list(dict.fromkeys(b["phase"] for _, _, _, blocks, _ in repeats for b in blocks))
    groups = [("all", None)] + ([(p, p) for p in phases] if len(phases) > 1 else [])
    ok = True
    for label, phase in groups:
        print(f"paced, {'both phases' if phase is None and len(phases) > 1 else 'phase ' + (phase or phases[0])}:")
        slower = n = deleted = 0
        raw = 0.0
        shares, units = [], []
        for name, ops, times, blocks, audits in repeats:
            rows = [b for b in blocks if phase is None or b["phase"] == phase]
            if not any(b["side"] == "arm" for b in rows) or not any(b["side"] == "idle" for b in rows):
                print(f"  {name}: no arm or no idle block in this phase")
                continue
            f = figures(rows, ops, times, chunk_secs, boot, seed, audits)
            lo, hi = f["ci_chunks"]
            slower += f["slower"]
            n += f["n"]
            deleted += f["deleted_in_arm"]
            raw += f["arm"]["raw"]
            shares.append(f["share"])
            units.append(stall_units(rows))
            stall = f["added_stall"]
            stall_text = "no PSI figures" if stall is None else f"{stall[0] * 100:+.3f}% ({stall[0] * 100 / target:+.2f}x)"
            print(f"  {name}: slower than idle p99 {fmt_pct(f['share'])} (95% CI {fmt_pct(lo)}-{fmt_pct(hi)});"
                  f" added stall {stall_text}; {f['objects_per_second']:.2f} objects/s over {f['arm']['raw']:.0f} s")
        if not shares:
            continue
        stall = pooled_stall(units, boot, seed)
        print(f"  pooled ({len(shares)} repeats): slower than idle p99 {slower} of {n} = {fmt_pct(slower / n)};"
              f" {deleted / raw:.2f} objects/s over {raw:.0f} s")
        every = max(shares) <= share_limit
        print(f"  every repeat at most {share_limit * 100:g}%: {'yes' if every else 'NO'} (highest {fmt_pct(max(shares))})")
        ok &= every
        if stall is not None:
            both, io, idle_rate, arm_rate, interval = stall
            within = both <= stall_factor * target / 100
            ci = f", 95% CI {interval[0] * 100:+.3f}% to {interval[1] * 100:+.3f}%" if interval else ""
            print(f"  stall added over idle, pooled: {both * 100:+.3f}% of wall time = {both * 100 / target:.2f}x"
                  f" the target {target}%{ci} (idle {idle_rate * 100:.3f}%, arm {arm_rate * 100:.3f}%);"
                  f" I/O alone {io * 100:+.3f}%; within {stall_factor}x: {'yes' if within else 'NO'}")
            ok &= within
    return 0 if ok else 1


def self_check():
    failures = []

    def expect(what, got, want, tol=1e-9):
        if not (abs(got - want) <= tol):
            failures.append(f"{what}: got {got}, want {want}")

    # Nearest rank: the 99th percentile of 1..100 is 99, of 1..1000 is 990.
    expect("p99 of 1..100", pct(range(1, 101), 99), 99)
    expect("p99 of 1..1000", pct(range(1, 1001), 99), 990)
    expect("p50 of 1..5", pct([5, 1, 4, 2, 3], 50), 3)
    expect("p99 over chunks", p99_of_chunks([sorted(range(1, 501), reverse=True),
                                             sorted(range(501, 1001), reverse=True)]), 990)
    # Wilson's interval for 5 of 100 (from the formula by hand: 2.154% to 11.175%).
    lo, hi = wilson(5, 100)
    expect("wilson lo", lo, 0.021543, 1e-5)
    expect("wilson hi", hi, 0.111750, 1e-5)
    # `date -d 2026-11-26T05:00:03Z +%s` says 1795669203.
    expect("audit time", parse_time("2026-11-26T05:00:03.412Z"), 1795669203.412, 1e-6)

    # Synthetic run: idle blocks of 0.01..100.00 ms shuffled (p99 = 99.00 ms);
    # arm blocks where exactly 3% of kept operations are at 500 ms; in the
    # first 3 s of every block (dropped) every operation is at 1000 ms.
    rng = random.Random(7)
    idle_values = [i / 100 for i in range(1, 10001)]
    rng.shuffle(idle_values)
    log, blocks, t, audits = [], [], 1000.0, []
    per_block = 40 * 100 - 300  # kept operations per 40 s block at 100/s
    arm_values = [500.0 if k % 100 < 3 else 1.0 for k in range(per_block)]
    for b, side in enumerate(["idle", "arm", "arm", "idle"] * 2 + ["idle", "arm", "arm", "idle"] * 1):
        for k in range(300):
            log.append((t + k * 0.01, 1000.0))
        for k in range(per_block):
            ts = t + 3 + k * 0.01
            if side == "idle":
                v = idle_values[(b * per_block + k) % len(idle_values)]
            else:
                v = arm_values[(k * 41) % per_block]
            log.append((ts, v))
        blocks.append({"comparison": "paced", "side": side, "begin": t, "end": t + 40.0, "drop": 3.0,
                       "phase": "pre", "run": "1" if side == "arm" else "-"})
        if side == "arm":
            audits += [t + 0.5 + k for k in range(20)]  # 20 removals in each 40 s arm block
        else:
            audits += [t + 1.0]  # one removal that ended while stopped
        t += 40.0
    log.sort()
    times = [x for x, _ in log]
    ops = [y for _, y in log]
    f = figures(blocks, ops, times, 5.0, 400, 3, audits)
    # 6 idle blocks of 3,700 kept: the idle values repeat, p99 of 22,200
    # values of the grid.
    idle_kept = sorted(idle_values[(b * per_block + k) % len(idle_values)]
                       for b, side in enumerate(["idle", "arm", "arm", "idle"] * 3) if side == "idle"
                       for k in range(per_block))
    expect("idle p99", f["idle_p99"], idle_kept[rank(len(idle_kept), 99)])
    expect("idle ops", f["idle"]["ops"], 6 * per_block)
    expect("arm ops", f["arm"]["ops"], 6 * per_block)
    expect("arm share", f["share"], 0.03, 1e-12)
    expect("arm p50", f["arm"]["p50"], 1.0)
    expect("arm max (1000 ms dropped)", f["arm"]["max"], 500.0)
    lo, hi = f["ci_chunks"]
    if not (lo <= f["share"] <= hi and hi - lo < 0.02):
        failures.append(f"chunk bootstrap interval {lo}-{hi} does not hold {f['share']} tightly")
    expect("objects/s", f["objects_per_second"], 20 * 6 / (6 * 40.0))
    expect("deleted in arm blocks", f["deleted_in_arm"], 120)
    sides_in_order = [side for side, _, _ in f["by_block"]]
    if sides_in_order != [b["side"] for b in blocks]:
        failures.append(f"by block: sides {sides_in_order}")
    for side, share, deleted in f["by_block"]:
        if side == "arm":
            expect("an arm block's share", share, 0.03, 1e-12)
            expect("an arm block's deletions", deleted, 20)
        else:
            expect("an idle block's deletions (none counted)", deleted is None, True)
    # The stall from outside: idle stalls 1% (10 ms a second) of I/O and
    # 0.5% of CPU throughout; an arm block adds 2 ms a second of I/O and
    # 1 ms of CPU, and leaves 3 ms a second of late I/O stall in the first
    # 3 s of the idle block after it: the arm's side stalls 1.8% (I/O and
    # CPU) throughout, 0.3% over idle's 1.5%.
    stall_blocks, t, io, cpu, previous = [], 0.0, 0.0, 0.0, None
    for side in ["idle", "arm", "arm", "idle"] * 3:
        io_rate, cpu_rate = (0.012, 0.006) if side == "arm" else (0.010, 0.005)
        head = 0.003 if side == "idle" and previous == "arm" else 0.0
        begin = (io, cpu)
        io += 3.0 * (io_rate + head) * 1e6
        cpu += 3.0 * cpu_rate * 1e6
        drop = (io, cpu)
        io += 37.0 * io_rate * 1e6
        cpu += 37.0 * cpu_rate * 1e6
        stall_blocks.append({"comparison": "paced", "side": side, "begin": t, "end": t + 40.0, "drop": 3.0,
                             "psi": {"begin": begin, "drop": drop, "end": (io, cpu)}})
        t += 40.0
        previous = side
    # The arm: 6 blocks of 40 s at 18 ms/s, and 3 heads of 3 s at 18 ms/s
    # (idle's 15 and the late 3); idle: 6 blocks of 37 s at 15 ms/s.
    arm_rate = (6 * 40 * 0.018 + 3 * 3 * 0.018) / (6 * 40 + 3 * 3)
    both, io_added, idle_rate, arm_seen, interval = added_stall(stall_blocks, 200, 1)
    # Every block alike: every resample gives the same difference.
    expect("interval low", interval[0], 0.003, 1e-12)
    expect("interval high", interval[1], 0.003, 1e-12)
    expect("idle stall from outside", idle_rate, 0.015, 1e-12)
    expect("arm stall from outside, with the late stall of its idle heads", arm_seen, arm_rate, 1e-12)
    expect("added I/O and CPU", both, 0.003, 1e-12)
    expect("added I/O", io_added, (6 * 40 * 0.012 + 3 * 3 * 0.013) / (6 * 40 + 3 * 3) - 0.010, 1e-12)
    # Two repeats pooled: the second's blocks twice as long (idle and arm
    # alike, 80 s) and adding nothing: the pooled added stall weighs each
    # by its seconds.
    second = stall_units(stall_blocks)
    second = {side: [(secs * 2, idle_rate * 1e6 * secs * 2, 0.0) for secs, _, _ in units]
              for side, units in second.items()}
    pooled = pooled_stall([stall_units(stall_blocks), second], 200, 1)
    first_arm = 6 * 40 + 3 * 3
    expect("pooled added stall",
           pooled[0], (arm_rate * first_arm + idle_rate * 2 * first_arm) / (3 * first_arm) - idle_rate, 1e-12)
    if added_stall([dict(b, psi=None) for b in stall_blocks][:0]) is not None:
        failures.append("added stall without blocks")
    if failures:
        print("self-check FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("self-check ok: percentiles, Wilson, drop, share, bootstrap, objects/s, by block,"
          " stall from outside, pooled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
