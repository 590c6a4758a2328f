# A leak as a Rails application has it, for the leak hunt test: every
# request (handle) renders a report that a class-level cache keeps for
# good (ReportCache::STORE, a Hash in a module constant, keyed by the
# request id) and registers a callback that a class keeps for good
# (Hooks.callbacks, an Array of Procs, each holding the request's User),
# beside garbage of its own.
#
#   ruby testdata/leak_hunt.rb REPORT REQUESTS [DIR]
#
# Serves 200 requests to warm up, then writes {"pid", "seq" (0), "served",
# "store", "callbacks" (the two holders' addresses)} to REPORT. Each
# SIGUSR1 serves REQUESTS more, runs the GC and writes REPORT again with
# seq one more. With DIR, allocation tracing is on from the start, each
# SIGUSR1 also dumps the heap with ObjectSpace.dump_all to DIR/before.json
# before its requests and DIR/after.json after them (and to DIR/after-N.json
# for its N-th round), and REPORT has
# "cache_site" and "proc_site": where Ruby says the cached String and the
# callback's Proc of the last request were allocated (file:line).
require "objspace"
require "json"
require "fileutils"

report, requests, dir = ARGV.fetch(0), Integer(ARGV.fetch(1)), ARGV[2]
ObjectSpace.trace_object_allocations_start if dir

module ReportCache
  STORE = {}
end

class Hooks
  @callbacks = []
  class << self
    attr_reader :callbacks
  end

  def self.on_finish(&blk)
    @callbacks << blk
  end
end

class User
  def initialize(id)
    @id = id
  end
end

def handle(id)
  ReportCache::STORE[id] = "report for request #{id}: " + ("x" * 200)
  user = User.new(id)
  Array.new(20) { |i| "temporary #{id} #{i}" }
  Hooks.on_finish { user.to_s }
end

def site(obj)
  "#{ObjectSpace.allocation_sourcefile(obj)}:#{ObjectSpace.allocation_sourceline(obj)}"
end

$served = 0
def serve(n)
  n.times do
    $served += 1
    handle($served)
  end
  GC.start
end

def write_report(path, seq, dir)
  doc = { "pid" => Process.pid, "seq" => seq, "served" => $served,
          "store" => JSON.parse(ObjectSpace.dump(ReportCache::STORE)).fetch("address"),
          "callbacks" => JSON.parse(ObjectSpace.dump(Hooks.callbacks)).fetch("address") }
  if dir
    doc["cache_site"] = site(ReportCache::STORE[$served])
    doc["proc_site"] = site(Hooks.callbacks.last)
  end
  File.write(path + ".tmp", JSON.generate(doc))
  File.rename(path + ".tmp", path)
end

def dump(path)
  File.open(path, "w") { |f| ObjectSpace.dump_all(output: f) }
end

asked = 0
trap("USR1") { asked += 1 }
serve(200)
seq = 0
write_report(report, seq, dir)
loop do
  sleep 0.01 while asked == seq
  seq += 1
  dump(File.join(dir, "before.json")) if dir
  serve(requests)
  dump(File.join(dir, "after.json")) if dir
  FileUtils.cp(File.join(dir, "after.json"), File.join(dir, "after-#{seq}.json")) if dir
  write_report(report, seq, dir)
end
