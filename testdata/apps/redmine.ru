# Debian's Redmine (a Rails application nobody here wrote), as rbscope's
# tests run it under Debian's Puma, from Redmine's own directory:
#   cd /usr/share/redmine && RBSCOPE_REPORT_DIR=DIR DATABASE_URL=sqlite3:DB \
#     puma -e production -t 4:4 -b tcp://127.0.0.1:PORT .../testdata/apps/redmine.ru
# It is Redmine's config.ru with, beside the application, what the tests
# compare rbscope with, under /__rbscope/ (no route of Redmine's):
#   /__rbscope/stats        the process's own measurements, as JSON: its CPU
#                           clock, the CPU time its threads spent inside
#                           controller actions (Rails' own process_action
#                           events), the actions served
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

# ActionStats is the process's own account of its controller actions.
module ActionStats
  LOCK = Mutex.new
  @cpu = 0.0
  @served = Hash.new(0)

  ActiveSupport::Notifications.subscribe("process_action.action_controller") do |event|
    LOCK.synchronize do
      @cpu += event.cpu_time / 1000.0
      @served["#{event.payload[:controller]}##{event.payload[:action]}"] += 1
    end
  end

  def self.to_h
    LOCK.synchronize do
      { "process_cpu" => Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID),
        "action_cpu" => @cpu, "served" => @served.dup }
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
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    File.open(path + ".tmp", "w") { |f| ObjectSpace.dump_all(output: f) }
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
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
