#!/usr/bin/env python3
"""bench/interleave.py: what a profiler costs the process it samples,
measured inside one process, so that nothing but the profiler differs.

    bench/interleave.py RBSCOPE RUBY ROOT WORKDIR [CYCLES] [WINDOW_S]

One Ruby process (testdata/bench_interleave.rb) runs testdata/split.rb's
rounds without end and notes when each round ends (CLOCK_MONOTONIC). Time is
cut into windows of WINDOW_S seconds (default 3); each cycle has one window
per mode, in an order rotated every cycle:

    alone         nothing attached
    paused        rbscope record -p PID --rate 100 (the default mode)
    nonblocking   rbscope record -p PID --rate 100 --nonblocking
    agent         rbscope agent --pid PID --rate 100 (its sampling, and its
                  uploads to a server that does not answer: what a host's
                  agent costs each process)
    stackprof     stackprof in-process, :cpu at 10 ms (100 Hz), the peer

A window's rate is the rounds that end inside it, less its first 0.5 s and
last 0.2 s (rbscope starting and ending; the signals that start and stop
stackprof), per second. A mode's cost in a cycle is the rate of the alone
windows nearest to it (the mean of the one before and the one after) over its own, less one. Comparing windows of one process removes
what changes between processes (address-space layout, the environment's
size, where the kernel puts the process), which on a small VM moves a run's
speed by more than the few percent measured here.

Prints a table and writes WORKDIR/interleave.json:
    {"cycles", "window_s", "modes": {mode: {"costs": [...], "median",
     "samples": [...]}}, "stackprof": bool}
Exit status 1 when the workload or rbscope failed to run.
"""
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

TRIM_START, TRIM_END = 0.1, 0.05
MODES = ["alone", "paused", "nonblocking", "agent", "stackprof"]


def wait_file(path, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        time.sleep(0.01)
    return False


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__.split("\n\n")[1])
    rbscope, ruby, root, work = sys.argv[1:5]
    cycles = int(sys.argv[5]) if len(sys.argv) > 5 else 30
    window = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
    ready = os.path.join(work, "interleave_ready.json")
    result = os.path.join(work, "interleave_result.json")
    log = open(os.path.join(work, "interleave.log"), "w")
    target = subprocess.Popen([ruby, os.path.join(root, "testdata/bench_interleave.rb"), ready, result],
                              stdout=log, stderr=log)
    with open(os.path.join(work, "interleave.pid"), "w") as f:
        f.write(str(target.pid))
    failures = []
    windows = []  # (cycle, mode, start, end, samples or None)
    try:
        if not wait_file(ready, 10):
            sys.exit("bench/interleave.py: bench_interleave.rb did not start (see interleave.log)")
        has_stackprof = json.load(open(ready)).get("stackprof", False)
        modes = [m for m in MODES if m != "stackprof" or has_stackprof]
        time.sleep(1.0)  # past start-up
        for c in range(cycles):
            order = modes[c % len(modes):] + modes[:c % len(modes)]
            for mode in order:
                start, st0 = time.monotonic(), schedstat(target.pid)
                samples = None
                if mode == "alone":
                    time.sleep(window)
                elif mode == "stackprof":
                    target.send_signal(signal.SIGUSR1)
                    time.sleep(window)
                    target.send_signal(signal.SIGUSR2)
                elif mode == "agent":
                    a = subprocess.Popen([rbscope, "agent", "--pid", str(target.pid), "--rate", "100",
                                          "--server", "http://127.0.0.1:9", "--upload-interval", "1s"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(window)
                    a.terminate()
                    try:
                        a.wait(15)
                    except subprocess.TimeoutExpired:
                        a.kill()
                        a.wait()
                        failures.append(f"rbscope agent (cycle {c + 1}) did not end on SIGTERM")
                else:
                    cmd = [rbscope, "record", "-p", str(target.pid), "--rate", "100",
                           "--duration", f"{window}s", "-f", "collapsed",
                           "-o", os.path.join(work, f"interleave_{mode}_{c}.txt")]
                    if mode == "nonblocking":
                        cmd.append("--nonblocking")
                    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    if r.returncode != 0:
                        last = r.stderr.strip().splitlines()[-1:] or [""]
                        failures.append(f"rbscope record ({mode}, cycle {c + 1}) exited {r.returncode}: {last[0]}")
                    for line in r.stderr.splitlines():
                        if " samples in " in line:
                            samples = int(line.split(" samples in ")[0].rsplit(" ", 1)[-1])
                windows.append((c, mode, start, time.monotonic(), samples, st0, schedstat(target.pid)))
        # One more alone window, so that the last cycle's windows have a
        # neighbour after them too.
        start, st0 = time.monotonic(), schedstat(target.pid)
        time.sleep(window)
        windows.append((cycles, "alone", start, time.monotonic(), None, st0, schedstat(target.pid)))
    finally:
        target.send_signal(signal.SIGTERM)
        try:
            target.wait(30)
        except subprocess.TimeoutExpired:
            target.kill()
            target.wait()
    if target.returncode != 0 or not os.path.exists(result):
        sys.exit(f"bench/interleave.py: bench_interleave.rb exited {target.returncode} (see interleave.log)")
    ends = json.load(open(result))["ends"]

    def rate(start, end):
        s, e = start + TRIM_START, end - TRIM_END
        n = sum(1 for t in ends if s <= t < e)
        return n / (e - s)

    rows = []  # (mode, rate, off-CPU %, samples)
    sys_ticks, sys_wall = {}, {}  # per mode: system time, wall time
    for c, mode, s, e, smp, st0, st1 in windows:
        off = None
        if st0 and st1 and st1[0] > st0[0]:
            # Not on a CPU: stopped, or waiting for one (schedstat's run is
            # nanoseconds on a CPU, user and system).
            off = 100.0 * ((e - s) * 1e9 - (st1[0] - st0[0])) / (st1[0] - st0[0])
            sys_ticks[mode] = sys_ticks.get(mode, 0) + st1[2] - st0[2]
            sys_wall[mode] = sys_wall.get(mode, 0.0) + e - s
        rows.append((mode, rate(s, e), off, smp))
    tick = os.sysconf("SC_CLK_TCK")
    sys_pct = {m: 100.0 * sys_ticks[m] / tick / sys_wall[m] for m in sys_ticks if sys_wall[m] > 0}

    def nearest_alone(i):
        before = [x[1] for x in rows[:i] if x[0] == "alone"][-1:]
        after = [x[1] for x in rows[i + 1:] if x[0] == "alone"][:1]
        return before + after

    out = {"cycles": cycles, "window_s": window, "stackprof": has_stackprof, "modes": {}}
    alone_off = [r[2] for r in rows if r[0] == "alone" and r[2] is not None]
    for mode in ["alone"] + [m for m in modes if m != "alone"]:
        costs, offs, smps = [], [], []
        for i, (m, r, off, smp) in enumerate(rows):
            if m != mode or r <= 0:
                continue
            near = nearest_alone(i)
            if not near:
                continue
            # For "alone" itself: the noise floor, each alone window against
            # its alone neighbours, exactly as the modes are compared.
            costs.append(100.0 * (statistics.mean(near) / r - 1))
            if off is not None:
                offs.append(off)
            if smp is not None:
                smps.append(smp)
        if not costs:
            continue
        lo, hi = bootstrap_median(costs)
        v = {"costs": costs, "median": statistics.median(costs), "ci95": [lo, hi], "samples": smps}
        if offs and alone_off:
            v["offcpu_added"] = statistics.median(offs) - statistics.median(alone_off)
        if mode in sys_pct and "alone" in sys_pct:
            v["sys_added"] = sys_pct[mode] - sys_pct["alone"]
        if "offcpu_added" in v and "sys_added" in v:
            # What the target loses that can be measured to a tenth of a
            # percent here: time it stood still, and kernel time spent on
            # the profiler's behalf (stops, reads).
            v["direct"] = v["offcpu_added"] + v["sys_added"]
        out["modes"][mode] = v
    alone = [r[1] for r in rows if r[0] == "alone"]
    out["alone_rates"] = alone
    with open(os.path.join(work, "interleave.json"), "w") as f:
        json.dump(out, f)
    print(f"   one process; {cycles} cycles of one {window:g} s window per mode, order rotated every cycle;")
    print(f"   rounds/s alone: median {statistics.median(alone):.1f}, min {min(alone):.1f}, max {max(alone):.1f}")
    print(f"   {'mode':<34}{'wall cost':>10}{'95% interval':>18}{'off-CPU':>9}{'system':>8}{'direct':>8}{'samples':>9}")
    for mode, v in out["modes"].items():
        label = {"alone": "alone vs alone (the noise floor)", "paused": "rbscope --rate 100 (paused)",
                 "nonblocking": "rbscope --rate 100 --nonblocking",
                 "agent": "rbscope agent --rate 100",
                 "stackprof": "stackprof :cpu 10 ms (peer)"}[mode]
        smp = f"{statistics.median(v['samples']):.0f}" if v["samples"] else "-"
        def pts(k):
            return f"{v[k]:+.2f}" if k in v and mode != "alone" else "-"
        ci = f"[{v['ci95'][0]:+.2f}, {v['ci95'][1]:+.2f}]"
        print(f"   {label:<34}{v['median']:>+9.2f}%{ci:>18}{pts('offcpu_added'):>9}{pts('sys_added'):>8}{pts('direct'):>8}{smp:>9}")
    print("   wall cost = rounds/s of the alone windows nearest before and after / the window's, less one:")
    print("   the goal's measure, but on a shared VM its noise (the alone row) can be wider than the goal;")
    print("   off-CPU = points of the target's CPU time it stood stopped or waiting for a CPU, added over the")
    print("   alone windows (/proc/PID/task/PID/schedstat, median of windows); system = points of wall time")
    print("   added in the kernel (stime ticks, over all windows); direct = off-CPU + system: what the")
    print("   profiler takes from the target, without the machine's noise (not: cache effects on user time)")
    for f in failures:
        print(f"   FAILED: {f}")
    sys.exit(1 if failures else 0)


def schedstat(pid):
    """The main thread's time on a CPU and waiting for one (ns), and its
    system time (clock ticks)."""
    try:
        run, wait, _ = open(f"/proc/{pid}/task/{pid}/schedstat").read().split()
        stat = open(f"/proc/{pid}/task/{pid}/stat").read()
        stime = int(stat[stat.rindex(")") + 2:].split()[12])  # field 15
        return int(run), int(wait), stime
    except (OSError, ValueError, IndexError):
        return None


def bootstrap_median(xs, rounds=2000):
    """A 95% percentile-bootstrap interval of the median of xs."""
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(rounds))
    return meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]


if __name__ == "__main__":
    main()
