# A Ruby program the container tests run in namespaces of its own (PID and
# mount, perhaps user), from a path only its mount namespace has. When
# ready it writes what it knows about itself to ARGV[0], as JSON: its PID
# inside its PID namespace, RUBY_VERSION, its threads' names, native IDs
# (inside the namespace) and caller_locations taken on the line each
# sleeping thread sleeps on, how many Widgets it holds, and the lines of
# the method that spins and of the one that keeps allocating. Then one
# thread spins (for record), one keeps replacing Strings (for alloc) and
# the others sleep. ARGV[1] is a token that TOKEN holds (for exec).
require "json"

out = ARGV.fetch(0)
TOKEN = ARGV.fetch(1)
class Widget; end
WIDGETS = Array.new(Integer(ARGV.fetch(2))) { Widget.new }
$reports = Queue.new
$kept = Array.new(500)

def report(locs)
  $reports << { "name" => Thread.current.name, "tid" => Thread.current.native_thread_id,
                "frames" => locs.map { |l| [l.label, l.absolute_path || l.path, l.lineno] } }
end

def nap(n)
  if n == 0
    report(caller_locations(0)); sleep
  else
    nap(n - 1)
  end
end

def spin; x = 0; loop { x += 1 }; end # SPIN
def keep(i); $kept[i % 500] = "kept #{i}"; end # KEEP

threads = []
threads << Thread.new { Thread.current.name = "napper"; nap(4) }
threads << Thread.new { Thread.current.name = "spinner"; report([]); spin }
threads << Thread.new { Thread.current.name = "keeper"; report([]); i = 0; loop { keep(i += 1); sleep 0.002 } }
reports = threads.map { $reports.pop }
sleep 0.01 until threads[0].status == "sleep"
lines = File.readlines(__FILE__).each_with_index.to_h { |l, i| [l[/# (SPIN|KEEP)$/, 1], i + 1] }
write = lambda do |locs|
  main = { "name" => nil, "tid" => Thread.main.native_thread_id,
           "frames" => locs.map { |l| [l.label, l.absolute_path || l.path, l.lineno] } }
  doc = { "pid" => Process.pid, "version" => RUBY_VERSION, "thread_names" => Thread.list.map(&:name),
          "threads" => reports + [main], "widgets" => WIDGETS.size, "file" => __FILE__,
          "spin" => lines["SPIN"], "keep" => lines["KEEP"] }
  File.write(out + ".tmp", JSON.generate(doc))
  File.rename(out + ".tmp", out)
end
write.call(caller_locations(0)); sleep
