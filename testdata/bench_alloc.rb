# The workload of bench/alloc.sh: rounds that keep 1,000 Strings at one line
# and 100 at another and throw 10,000 away at a third, as fast as they go.
# Every 100 ms it appends "monotonic_seconds rounds" to ARGV[0], so the
# bench can compute its throughput over any stretch of time.
#
# With ARGV[1] = "memory_profiler" SECONDS, it instead measures itself: its
# throughput for SECONDS without tracing, then inside MemoryProfiler.report
# for SECONDS, and prints both and the report's retained objects by
# location, then exits.
$stdout.sync = true
$kept = []
$rounds = 0

def keep_many = 1000.times { $kept << "many #{_1}" } # KEEP_MANY
def keep_few = 100.times { $kept << "few #{_1}" } # KEEP_FEW
def garbage = 10_000.times { "garbage #{_1}" } # GARBAGE

def round
  keep_many
  keep_few
  garbage
  $rounds += 1
  $kept.shift($kept.size - 50_000) if $kept.size > 100_000
end

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def rate(seconds)
  start, r0 = now, $rounds
  round while now - start < seconds
  ($rounds - r0) / (now - start)
end

if ARGV[1] == "memory_profiler"
  require "memory_profiler"
  secs = Float(ARGV.fetch(2))
  rate(1) # warm up
  off = rate(secs)
  on = nil
  report = MemoryProfiler.report { on = rate(secs) }
  puts "off #{off}"
  puts "on #{on}"
  report.retained_objects_by_location.first(5).each { |h| puts "retained #{h[:count]} #{h[:data]}" }
  exit
end

log = File.open(ARGV.fetch(0), "a")
log.sync = true
next_tick = now
loop do
  round
  if (t = now) >= next_tick
    log.puts "#{t} #{$rounds}"
    next_tick = t + 0.1
  end
end
