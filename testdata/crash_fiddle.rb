# Crashes in native code (Fiddle reads address 16) from a known Ruby call
# chain, with a second named thread asleep. Before crashing it writes to
# ARGV[0] what rbscope should find: its pid, the crashing thread's
# caller_locations taken on the crashing line, and the other thread's name.
require "fiddle"
require "json"

# A core for the handler to keep, unless the test sets the limit itself.
Process.setrlimit(:CORE, :INFINITY) unless ENV["RBSCOPE_KEEP_CORE_LIMIT"]
$out = ARGV.fetch(0)

def record(locs)
  frames = locs.map { |l| [l.label, l.absolute_path || l.path, l.lineno] }
  File.write($out + ".tmp", JSON.generate({ "pid" => Process.pid, "frames" => frames, "other" => "bystander" }))
  File.rename($out + ".tmp", $out)
end

def crash_here(n)
  return crash_here(n - 1) if n > 0
  record(caller_locations(0)); Fiddle::Pointer.new(16)[0]
end

ready = Queue.new
Thread.new { Thread.current.name = "bystander"; ready << 1; sleep }
ready.pop
sleep 0.05
crash_here(3)
