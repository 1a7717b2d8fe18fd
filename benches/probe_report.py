#!/usr/bin/env python3
"""The latency probe's figures, per run and per side.

    probe_report.py PROBE_LOG WINDOWS

PROBE_LOG holds benches/io_probe.py's operations ("<unix start> <ms>"),
WINDOWS one run a line ("<side> <begin> <end> <PSI io some share>").
Prints, per run, its wall time and the probe's operations inside it with
their p50, p99 and max latency and the share of the window PSI io `some`
covered; then, per side over all its runs, the same with p99 against the
`idle` side's and the median wall time.
"""

import sys

ops = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
windows = [l.split() for l in open(sys.argv[2]) if l.strip()]

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")

sides = {}
for name, begin, end, psi in windows:
    begin, end = float(begin), float(end)
    lat = [ms for t, ms in ops if begin <= t < end]
    sides.setdefault(name, {"lat": [], "wall": [], "psi": []})
    sides[name]["lat"] += lat
    sides[name]["wall"].append(end - begin)
    sides[name]["psi"].append(float(psi))
    print(f"  {name:8} wall {end - begin:7.2f} s  ops {len(lat):5d}  p50 {pct(lat, 50):6.2f} ms"
          f"  p99 {pct(lat, 99):7.2f} ms  max {max(lat, default=float('nan')):8.2f} ms  psi some {float(psi) * 100:5.1f}%")
idle = pct(sides.get("idle", {"lat": []})["lat"], 99)
print("all repeats:")
for name, s in sides.items():
    p99 = pct(s["lat"], 99)
    walls = sorted(s["wall"])
    print(f"  {name:8} ops {len(s['lat']):6d}  p50 {pct(s['lat'], 50):6.2f} ms  p99 {p99:7.2f} ms"
          f" ({p99 / idle:5.2f}x idle)  max {max(s['lat'], default=float('nan')):8.2f} ms"
          f"  median wall {walls[len(walls) // 2]:7.2f} s")
