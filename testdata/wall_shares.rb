# Spends known shares of its wall time in named methods and measures them
# itself, for the BPF sampler's wall-clock profiles
# (internal/ebpfsample's TestWallShares): the main thread alternates
# sleeper_a (sleep) and waiter_b (a read on a pipe that the feeder thread
# writes to a few milliseconds after being asked), the burner thread
# alternates burn_c (CPU) and rest_d (sleep). Each method's wall time
# (CLOCK_MONOTONIC) and CPU time (the thread's CPU clock) are summed.
#
# ARGV[0]: the report path; the program writes {"pid":...} there, waits
# for the file ARGV[0].go, measures for ARGV[1] seconds (default 3), writes
# the sums over that window to ARGV[0].done and goes on until killed: the
# window's start and end on CLOCK_MONOTONIC, each method's wall time in it
# (the calls running at its edges counted in part: exact, however long a
# call lasts on a loaded machine), its CPU time (calls running at the
# edges counted whole: off by at most a call's CPU time, "cpu_call"), and
# its longest call ("longest").
require "json"

report = ARGV[0]
window = Float(ARGV[1] || 3)
WALL = Hash.new(0.0)
CPU = Hash.new(0.0)
LONGEST = Hash.new(0.0)
CPU_CALL = Hash.new(0.0)
# RUNNING is each method's call in progress: its start on the wall clock.
RUNNING = {}

def clock
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def tcpu
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
end

# timed adds the wall and CPU time of the block to name's sums.
def timed(name)
  w = clock
  c = tcpu
  RUNNING[name] = w
  yield
ensure
  RUNNING.delete(name)
  d = clock - w
  WALL[name] += d
  LONGEST[name] = d if d > LONGEST[name]
  dc = tcpu - c
  CPU[name] += dc
  CPU_CALL[name] = dc if dc > CPU_CALL[name]
end

# walls are the methods' wall time so far, the calls in progress up to t.
# It iterates over a copy of RUNNING: the GVL can pass to another thread
# between two steps of an iteration, and that thread's timed adding a key
# to the Hash being iterated raises.
def walls(t)
  out = WALL.dup
  RUNNING.dup.each { |k, w| out[k] += t - w }
  out
end

def sleeper_a
  sleep 0.007
end

def waiter_b(r, want)
  want << 1
  r.read(1)
end

def burn_c
  t = clock
  x = 0
  x += 1 while clock - t < 0.012
  x
end

def rest_d
  sleep 0.004
end

r, w = IO.pipe
want = Queue.new
Thread.new do
  loop do
    want.pop
    sleep 0.005
    w.write("x")
  end
end
Thread.new do
  loop do
    timed(:burn_c) { burn_c }
    timed(:rest_d) { rest_d }
  end
end
Thread.new do
  sleep 0.001 until File.exist?(report + ".go")
  t0 = clock
  w0 = walls(t0)
  c0 = CPU.dup
  LONGEST.clear
  CPU_CALL.clear
  sleep window
  t1 = clock
  w1 = walls(t1)
  c1 = CPU.dup
  out = {"start" => t0, "end" => t1, "seconds" => t1 - t0, "wall" => {}, "cpu" => {}, "longest" => {}, "cpu_call" => {}}
  w1.each_key do |k|
    out["wall"][k.to_s] = w1[k] - w0.fetch(k, 0.0)
    out["cpu"][k.to_s] = c1[k] - c0.fetch(k, 0.0)
    out["longest"][k.to_s] = [LONGEST[k], RUNNING[k] ? t1 - RUNNING[k] : 0.0].max
    out["cpu_call"][k.to_s] = CPU_CALL[k]
  end
  File.write(report + ".done.tmp", JSON.generate(out))
  File.rename(report + ".done.tmp", report + ".done")
end
File.write(report + ".tmp", JSON.generate("pid" => Process.pid))
File.rename(report + ".tmp", report)
loop do
  timed(:sleeper_a) { sleeper_a }
  timed(:waiter_b) { waiter_b(r, want) }
end
