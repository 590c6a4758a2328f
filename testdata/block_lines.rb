# The program behind TestBlockLinesNeverZero: a thread parks inside a
# one-line block; the report gives that line (Ruby's own).
require "json"
report = ARGV.fetch(0)

def spin(q, out)
  x = 0
  loop { x += 1; out << __LINE__; q.pop }
end

q, out = Queue.new, Queue.new
t = Thread.new { spin(q, out) }
line = out.pop
sleep 0.01 until t.status == "sleep"
File.write(report + ".tmp", JSON.generate({pid: Process.pid, line: line}))
File.rename(report + ".tmp", report)
sleep
