# The program behind TestCachesFollowTheCollector: a thread waits in a
# method defined in this file, old by the time it is called (four full
# collections later), and another in a method eval'd just before (young:
# no collection since). On each line of stdin it does what the line says
# (dump: ObjectSpace.dump_all to the path that follows; minor, major: a
# collection of that kind) and writes a JSON line of GC.stat's counts.
require "json"
require "objspace"
$stdout.sync = true

def old_wait(q)
  q.pop
end

4.times { GC.start }
eval("def young_wait(q)\n  q.pop\nend")

GC.disable # the program's own collections are the ones it is told to run
qs = [Queue.new, Queue.new]
threads = [Thread.new { old_wait(qs[0]) }, Thread.new { young_wait(qs[1]) }]
sleep 0.01 until threads.all? { |t| t.status == "sleep" }

report = ->(extra = {}) do
  puts JSON.generate({pid: Process.pid, version: RUBY_VERSION, count: GC.stat(:count),
                      major: GC.stat(:major_gc_count)}.merge(extra))
end
report.call
while (line = $stdin.gets)
  cmd, arg = line.split
  case cmd
  when "dump"
    File.open(arg, "w") { |f| ObjectSpace.dump_all(output: f) }
  when "minor"
    GC.enable; GC.start(full_mark: false, immediate_sweep: true); GC.disable
  when "major"
    GC.enable; GC.start; GC.disable
  end
  report.call
end
