# A Ruby program whose threads block on synchronisation objects in known
# ways, and which writes what it knows of them (the objects' addresses as
# inspect prints them, who owns what by Mutex#owned?, Thread#status, a
# Queue's length and num_waiting) to the file named by ARGV[0], as JSON:
# - "holder" holds LOCK across slow work; "waiter-1" and "waiter-2" wait for it;
# - "dl-a" holds A and waits for B, "dl-b" holds B and waits for A (a deadlock);
# - a MonitorMixin pool (ActiveRecord's connection pool style): "pool-cond"
#   waits on its new_cond, "pool-holder" holds the monitor, "pool-enter"
#   waits to enter it;
# - "consumer" pops an empty Queue; "producer" pushes to a full SizedQueue;
# - "joiner" joins "target", "valuer" waits for its value.
# The main thread sleeps with a timeout, so that Ruby's own deadlock check
# (all threads asleep forever) never fires.
require "json"
require "monitor"
require_relative "lib/native_tid"

out = ARGV.fetch(0)
def addr(obj)
  obj.inspect[/0x\h+/].to_i(16)
end

class Pool
  include MonitorMixin

  def initialize
    super()
    @available = new_cond
  end

  def checkout
    synchronize { @available.wait }
  end

  # MonitorMixin keeps its Monitor in @mon_data (2.7+).
  def monitor_addr
    addr(@mon_data)
  end
end

LOCK = Mutex.new
A = Mutex.new
B = Mutex.new
QUEUE = Queue.new
SIZED = SizedQueue.new(2)
SIZED << 1 << 2
POOL = Pool.new
held = Queue.new

def named(name, &body)
  Thread.new do
    Thread.current.name = name
    Thread.current.report_on_exception = false
    body.call
  end
end

threads = {}
owned = {} # what each holder's Mutex#owned? (Monitor#mon_owned?) said
threads["holder"] = named("holder") { LOCK.synchronize { held << ["holder", LOCK.owned?]; sleep } }
owned.store(*held.pop)
threads["waiter-1"] = named("waiter-1") { LOCK.synchronize {} }
threads["waiter-2"] = named("waiter-2") { LOCK.synchronize {} }
threads["dl-a"] = named("dl-a") { A.synchronize { held << ["dl-a", A.owned?]; sleep 0.01 until B.locked?; B.synchronize {} } }
threads["dl-b"] = named("dl-b") { B.synchronize { held << ["dl-b", B.owned?]; sleep 0.01 until A.locked?; A.synchronize {} } }
owned.store(*held.pop)
owned.store(*held.pop)
threads["pool-cond"] = named("pool-cond") { POOL.checkout }
sleep 0.01 until threads["pool-cond"].status == "sleep"
threads["pool-holder"] = named("pool-holder") { POOL.mon_synchronize { held << ["pool-holder", POOL.mon_owned?]; sleep } }
owned.store(*held.pop)
threads["pool-enter"] = named("pool-enter") { POOL.mon_enter }
threads["consumer"] = named("consumer") { QUEUE.pop }
threads["producer"] = named("producer") { SIZED.push(3) }
threads["target"] = named("target") { sleep }
threads["joiner"] = named("joiner") { threads["target"].join }
threads["valuer"] = named("valuer") { threads["target"].value }

sleep 0.01 until threads.values.all? { |t| t.status == "sleep" } && QUEUE.num_waiting == 1 && SIZED.num_waiting == 1
sleep 0.1 # let the waits settle: each blocked thread really asleep in its wait

doc = {
  "pid" => Process.pid, "version" => RUBY_VERSION,
  "threads" => threads.to_h { |name, t| [name, { "tid" => t.native_thread_id, "status" => t.status, "addr" => addr(t) }] },
  "lock" => addr(LOCK), "a" => addr(A), "b" => addr(B),
  "owned" => owned, "lock_locked" => LOCK.locked?, "a_locked" => A.locked?, "b_locked" => B.locked?,
  "monitor" => POOL.monitor_addr, "cond" => addr(POOL.instance_variable_get(:@available).instance_variable_get(:@cond)),
  "queue" => addr(QUEUE), "queue_length" => QUEUE.length, "queue_waiting" => QUEUE.num_waiting,
  "sized" => addr(SIZED), "sized_length" => SIZED.length, "sized_max" => SIZED.max, "sized_waiting" => SIZED.num_waiting,
}
File.write(out + ".tmp", JSON.generate(doc))
File.rename(out + ".tmp", out)
loop { sleep 1 }
