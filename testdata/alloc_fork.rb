# A program that forks while `rbscope alloc` traces its allocations.
# ARGV: the report path (written when ready: {"pid": ...}), a trigger path
# (when it appears, the program deletes it and forks) and the child's
# report path, where the child says whether it traces allocations:
# {"pid": ..., "tracing": true|false, "rbscope": true|false,
# "parent_tracing": true|false} (rbscope: its window's globals are still
# set; parent_tracing: the parent traced when it forked).
require "json"

report, trigger, child_report = ARGV

def write_json(path, obj)
  File.write(path + ".tmp", JSON.generate(obj))
  File.rename(path + ".tmp", path)
end

write_json(report, { "pid" => Process.pid })
loop do
  sleep 0.02
  next unless File.exist?(trigger)
  File.delete(trigger)
  tracing = -> { !!(defined?(ObjectSpace.allocation_sourcefile) && !ObjectSpace.allocation_sourcefile(Object.new).nil?) }
  parent_tracing = tracing.call
  pid = fork do
    write_json(child_report, { "pid" => Process.pid, "tracing" => tracing.call, "rbscope" => !$__rbscope_alloc.nil?,
                               "parent_tracing" => parent_tracing })
  end
  Process.wait(pid)
end
