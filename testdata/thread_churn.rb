# Threads for `rbscope threads` tests: named threads that compute, sleep and
# wait on a Mutex, and (with BLIP_MS) a short-lived named thread born every
# BLIP_MS milliseconds. Writes what it knows about its threads to ARGV[0] as
# JSON ({pid, threads: [{name, tid, status}]}), then (with BLIP_MS) appends
# one JSON line per blip thread: {"name", "tid"} after it exits.
require "json"
require_relative "lib/native_tid"

out = ARGV.fetch(0)
lock = Mutex.new
lock.lock
ready = Queue.new
threads = []
# The spinning thread is left out with BLIP_MS: holding the GVL it would
# slow every blip to Ruby's 100 ms time slice.
threads << Thread.new { Thread.current.name = "cpu"; ready << 1; x = 0; loop { x += 1 } } unless ENV["BLIP_MS"]
threads << Thread.new { Thread.current.name = "napper"; ready << 1; sleep }
threads << Thread.new { Thread.current.name = "waiter"; ready << 1; lock.lock }
threads.size.times { ready.pop }
sleep 0.01 until threads.all? { |t| t.name == "cpu" || t.status == "sleep" }
doc = { "pid" => Process.pid,
        "threads" => Thread.list.map { |t| { "name" => t.name, "main" => t == Thread.main, "tid" => t.native_thread_id, "status" => t.status } } }
File.write(out + ".tmp", JSON.generate(doc))
File.rename(out + ".tmp", out)
if (ms = ENV["BLIP_MS"])
  log = File.open(out + ".blips", "w")
  log.sync = true
  i = 0
  loop do
    i += 1
    t = Thread.new { Thread.current.name = "blip-#{i}"; sleep 0.02 }
    tid = nil
    Thread.pass until (tid = t.native_thread_id) # let it run (2.7 learns its TID as it starts)
    t.join
    log.puts JSON.generate({ "name" => "blip-#{i}", "tid" => tid })
    sleep Float(ms) / 1000
  end
else
  sleep
end
