# Debian's Redmine (a Rails application nobody here wrote), as rbscope's
# tests run it under Debian's Puma, from Redmine's own directory:
#   cd /usr/share/redmine && RBSCOPE_REPORT_DIR=DIR DATABASE_URL=sqlite3:DB \
#     puma -e production -t 4:4 -b tcp://127.0.0.1:PORT .../testdata/apps/redmine.ru
# It is Redmine's config.ru with, beside the application, what the tests
# compare rbscope with, under /__rbscope/ (no route of Redmine's):
#   /__rbscope/stats        the process's own measurements, as JSON: its CPU
#                           clock, the CPU time its threads spent inside
#                           controller actions (between the start and the
#                           end of Rails' own process_action events, those
#                           in flight included), the actions served
#   /__rbscope/dump_all?n=N writes ObjectSpace.dump_all to DIR/dumps/dump_allN.json
#                           and answers with the path and how long it took
# At boot it writes DIR/app.json (pid, Redmine's and Rails' versions, its
# root, whether jemalloc is loaded) and reports its threads
# (testdata/servers/selfreport.rb).
require "json"
require "objspace"
require File.join(Dir.pwd, "config/environment")
require_relative "../servers/selfreport"

REPORT_DIR = ENV.fetch("RBSCOPE_REPORT_DIR")
DUMP_DIR = File.join(REPORT_DIR, "dumps")
Dir.mkdir(DUMP_DIR) unless Dir.exist?(DUMP_DIR)

# ActionStats is the process's own account of its controller actions: the
# CPU time its threads spent inside process_action, counted as a clock the
# stats read at any moment, requests in flight included (the kernel's
# count of each thread's run time, /proc/thread-self/schedstat, in ns: the
# one CLOCK_PROCESS_CPUTIME_ID sums). Counting each action's CPU when it
# finished (event.cpu_time) put, in a short window on a busy machine, the
# CPU of requests begun before the window inside it: 112.9% once.
module ActionStats
  LOCK = Mutex.new
  @cpu = 0.0
  @served = Hash.new(0)
  @inflight = {} # Thread => [TID, its run time when its action began]

  def self.run_time(tid = nil)
    path = tid ? "/proc/self/task/#{tid}/schedstat" : "/proc/thread-self/schedstat"
    File.read(path).split.first.to_i / 1e9
  rescue SystemCallError
    nil
  end

  # start and finish run in the thread that serves the request, at the
  # beginning and the end of Rails' process_action.
  def self.start(_name, _id, _payload)
    t0 = run_time
    LOCK.synchronize { @inflight[Thread.current] = [Thread.current.native_thread_id, t0] } if t0
  end

  def self.finish(_name, _id, payload)
    t1 = run_time
    LOCK.synchronize do
      _, t0 = @inflight.delete(Thread.current)
      @cpu += t1 - t0 if t0 && t1
      @served["#{payload[:controller]}##{payload[:action]}"] += 1
    end
  end

  ActiveSupport::Notifications.subscribe("process_action.action_controller", self)

  def self.to_h
    LOCK.synchronize do
      process = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
      inflight = @inflight.values.sum { |tid, t0| (run_time(tid) || t0) - t0 }
      { "process_cpu" => process, "action_cpu" => @cpu + inflight, "served" => @served.dup }
    end
  end
end

oracle = lambda do |env|
  req = Rack::Request.new(env)
  case req.path_info
  when "/stats"
    [200, { "Content-Type" => "application/json" }, [JSON.generate(ActionStats.to_h)]]
  when "/dump_all"
    path = File.join(DUMP_DIR, "dump_all#{req.params["n"].to_i}.json")
    # Into a String, then a file: written to a File, dump_all lets the
    # GVL go at each write of its buffer, and Puma's other threads,
    # serving ab's requests, change the heap it is walking (Ruby 3.1
    # crashed in it so, once, under jemalloc). Into a String, it holds
    # the GVL throughout.
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    dump = ObjectSpace.dump_all(output: :string)
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    File.binwrite(path + ".tmp", dump)
    dump = nil
    File.rename(path + ".tmp", path)
    [200, { "Content-Type" => "application/json" }, [JSON.generate("path" => path, "seconds" => took)]]
  else
    [404, {}, ["no such oracle\n"]]
  end
end

File.write(File.join(REPORT_DIR, "app.json.tmp"), JSON.generate(
  "pid" => Process.pid, "redmine" => Redmine::VERSION.to_s, "rails" => Rails.version,
  "root" => Rails.root.to_s, "jemalloc" => File.read("/proc/self/maps").include?("libjemalloc")))
File.rename(File.join(REPORT_DIR, "app.json.tmp"), File.join(REPORT_DIR, "app.json"))
SelfReport.start("redmine")

map("/__rbscope") { run oracle }
run Rails.application
