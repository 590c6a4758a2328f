"""bench/contention.py, run by bench/contention.sh: the error of `rbscope
record` per call chain of testdata/split.rb under CPU contention.

For each Ruby, number of CPU spinners, rate and mode, one split.rb process
runs beside the spinners; each run asks it (SIGUSR1) for the CPU time each
chain had so far by its own thread CPU clock, records it for a while, asks
again, and compares each chain's share of the samples with its share of the
program's CPU over that window. The table gives, per cell, the mean error
per chain over the runs (samples' share minus CPU share, in points), the
worst single-run error, and the sampling error expected from the number of
samples alone (one standard error of a 50% share).
"""
import json, math, os, signal, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1]
RUBIES = os.environ.get("BENCH_RUBIES", "/var/cache/rbscope/rubies/ruby-3.1-shared/bin/ruby:/usr/bin/ruby").split(":")
SPINNERS = [int(x) for x in os.environ.get("BENCH_SPINNERS", "0,1,2").split(",")]
RATES = [int(x) for x in os.environ.get("BENCH_RATES", "100,400,1000").split(",")]
MODES = [m for m in os.environ.get("BENCH_MODES", "paused,nonblocking").split(",")]
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
# BENCH_SHARED=1: the target shares its first allowed CPU with one more
# spinner pinned there (TestRecordKnownSplit's harder case), besides the
# free spinners.
SHARED = os.environ.get("BENCH_SHARED", "") == "1"
# Seconds per recording, by rate: about 1,000 samples of a target that has
# most of a CPU.
SECONDS = {100: 12, 400: 5, 1000: 4}
CHAINS = ["chain_a", "chain_b", "chain_c"]

work = tempfile.mkdtemp(prefix="rbscope-contention.")
started = []


def spin(n):
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]


def ask(proc, report, seq):
    proc.send_signal(signal.SIGUSR1)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with open(report + ".cpu") as f:
                ans = json.load(f)
            if ans["seq"] >= seq:
                return ans["cpu"]
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    raise RuntimeError("split.rb did not answer")


def shares(collapsed):
    counts = dict.fromkeys(CHAINS, 0)
    for line in collapsed.splitlines():
        stack, _, n = line.rpartition(" ")
        for c in CHAINS:
            if c + " (" in stack:
                counts[c] += int(n)
    total = sum(counts.values())
    return {c: 100.0 * counts[c] / max(total, 1) for c in CHAINS}, total


def cell(ruby, nspin, rate, mode):
    report = os.path.join(work, "split-%d.json" % len(started))
    spinners = spin(nspin)
    proc = subprocess.Popen([ruby, os.path.join(ROOT, "testdata/split.rb"), report, "600"], stdout=subprocess.DEVNULL)
    started.append(proc)
    try:
        deadline = time.time() + 30
        while not os.path.exists(report):
            if time.time() > deadline:
                raise RuntimeError("split.rb did not start")
            time.sleep(0.01)
        time.sleep(0.5)
        if SHARED:
            cpu = min(os.sched_getaffinity(0))
            for tid in os.listdir("/proc/%d/task" % proc.pid):
                os.sched_setaffinity(int(tid), {cpu})
            pinned = subprocess.Popen(["sh", "-c", "while :; do :; done"])
            os.sched_setaffinity(pinned.pid, {cpu})
            spinners.append(pinned)
        seq = 0
        errs = []
        for _ in range(RUNS):
            seq += 1
            before = ask(proc, report, seq)
            args = [BIN, "record", "-p", str(proc.pid), "--rate", str(rate), "--duration", "%ds" % SECONDS[rate], "-f", "collapsed", "-o", "-"]
            if mode == "nonblocking":
                args.append("--nonblocking")
            out = subprocess.run(args, capture_output=True, text=True)
            seq += 1
            after = ask(proc, report, seq)
            if out.returncode != 0:
                raise RuntimeError("rbscope: " + out.stderr.strip())
            cpu = {c: after.get(c, 0) - before.get(c, 0) for c in CHAINS}
            tot = sum(cpu.values())
            sh, n = shares(out.stdout)
            errs.append(({c: sh[c] - 100 * cpu[c] / tot for c in CHAINS}, n, tot))
        return errs
    finally:
        proc.kill()
        proc.wait()
        for s in spinners:
            s.kill()
            s.wait()


def main():
    print("machine: %d cores, load %s at start" % (os.cpu_count(), open("/proc/loadavg").read().split()[0]))
    print("error = samples' share - program's CPU share, in points; mean over %d runs (worst run); se = one standard error of a 50%% share" % RUNS)
    if SHARED:
        print("the target shares one CPU with a pinned spinner (BENCH_SHARED=1), besides the spinners counted")
    print("%-10s %4s %5s %-11s %6s %6s %6s   %-26s %5s %5s" % ("ruby", "spin", "rate", "mode", "a", "b", "c", "worst run (a b c)", "n", "se"))
    for ruby in RUBIES:
        name = "3.1-dbg" if "rubies" in ruby else "debian"
        for nspin in SPINNERS:
            for rate in RATES:
                for mode in MODES:
                    try:
                        errs = cell(ruby, nspin, rate, mode)
                    except RuntimeError as e:
                        print("%-10s %4d %5d %-11s failed: %s" % (name, nspin, rate, mode, e), flush=True)
                        continue
                    mean = {c: sum(e[0][c] for e in errs) / len(errs) for c in CHAINS}
                    worst = max(errs, key=lambda e: max(abs(v) for v in e[0].values()))[0]
                    n = sum(e[1] for e in errs) / len(errs)
                    se = 100 * math.sqrt(0.25 / max(n, 1))
                    print("%-10s %4d %5d %-11s %+6.1f %+6.1f %+6.1f   %+6.1f %+6.1f %+6.1f %5s %5.0f %5.1f" % (
                        name, nspin, rate, mode, mean["chain_a"], mean["chain_b"], mean["chain_c"],
                        worst["chain_a"], worst["chain_b"], worst["chain_c"], "", n, se), flush=True)
    print("load %s at end" % open("/proc/loadavg").read().split()[0])


try:
    main()
finally:
    for p in started:
        if p.poll() is None:
            p.kill()
