# A small Rails application for rbscope's tests, run by Debian's Puma:
#   RBSCOPE_REPORT_DIR=DIR puma -e production -t 4:4 -b tcp://127.0.0.1:PORT config.ru
# ActiveRecord on SQLite (a database in DIR, its schema made at boot, a
# few rows seeded), one controller:
#   /widgets         lists rows through the model
#   /hot?ms=N        burns N ms of the thread's CPU clock in WidgetsController#crunch
#   /leak            keeps a CachedRender (with a 1 kB String) in a class-level cache
#   /stats           the process's own measurements, as JSON
#   /dump_all?n=N    writes ObjectSpace.dump_all to DIR/dump_allN.json
# At boot it writes DIR/app.json (pid, the leak's and hot method's lines)
# and reports its threads (testdata/servers/selfreport.rb).
require "json"
require "objspace"
require "rails"
require "active_record/railtie"
require "action_controller/railtie"
require_relative "../servers/selfreport"

REPORT_DIR = ENV.fetch("RBSCOPE_REPORT_DIR")
ENV["DATABASE_URL"] = "sqlite3:#{File.join(REPORT_DIR, "app.sqlite3")}?pool=8"

class RbscopeApp < Rails::Application
  config.root = __dir__
  config.eager_load = false
  config.cache_classes = true
  config.consider_all_requests_local = false
  config.logger = Logger.new(File::NULL)
  config.log_level = :warn
  config.secret_key_base = "0" * 64
  config.active_support.deprecation = :silence
  config.hosts.clear if config.respond_to?(:hosts)
end

Rails.application.initialize!
ActiveRecord::Migration.verbose = false
ActiveRecord::Schema.define do
  create_table :widgets, force: true do |t|
    t.string :name
    t.integer :weight
  end
end

class Widget < ActiveRecord::Base
end
20.times { |i| Widget.create!(name: "widget #{i}", weight: i * 7) }

# CachedRender is what the leaking action keeps.
class CachedRender
  attr_reader :body

  def initialize(body)
    @body = body
  end
end

# The process's own account of where its CPU time went.
module Stats
  LOCK = Mutex.new
  @crunch_cpu = 0.0

  def self.add_crunch(seconds)
    LOCK.synchronize { @crunch_cpu += seconds }
  end

  def self.to_h
    { "crunch_cpu" => LOCK.synchronize { @crunch_cpu },
      "process_cpu" => Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID),
      "leaked" => WidgetsController.cache.size,
      "cached_renders" => ObjectSpace.each_object(CachedRender).count }
  end
end

class WidgetsController < ActionController::API
  @cache = []
  class << self
    attr_reader :cache
  end

  def index
    render json: Widget.order(:id).limit(20).map { |w| { id: w.id, name: w.name, weight: w.weight } }
  end

  def hot
    t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    n = 0
    n = crunch(n) while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0 < params[:ms].to_i / 1000.0
    Stats.add_crunch(Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0)
    render plain: n.to_s
  end

  def leak
    self.class.cache << CachedRender.new("l" * 1000) # leak site
    render plain: self.class.cache.size.to_s
  end

  def stats
    render json: Stats.to_h
  end

  def dump_all
    path = File.join(REPORT_DIR, "dump_all#{params[:n].to_i}.json")
    File.open(path + ".tmp", "w") { |f| ObjectSpace.dump_all(output: f) }
    File.rename(path + ".tmp", path)
    render plain: path
  end

  private

  # crunch is the hot method: integer work that calls no C method.
  def crunch(n)
    i = 0
    while i < 2000
      n = (n * 31 + i) % 1_000_003
      i += 1
    end
    n
  end
end

Rails.application.routes.draw do
  get "/widgets" => "widgets#index"
  get "/hot" => "widgets#hot"
  get "/leak" => "widgets#leak"
  get "/stats" => "widgets#stats"
  get "/dump_all" => "widgets#dump_all"
end

src = File.readlines(__FILE__)
File.write(File.join(REPORT_DIR, "app.json.tmp"), JSON.generate(
  "pid" => Process.pid, "file" => File.expand_path(__FILE__), "rails" => Rails.version,
  "leak_line" => src.index { |l| l.include?("# leak site") } + 1,
  "jemalloc" => File.read("/proc/self/maps").include?("libjemalloc")))
File.rename(File.join(REPORT_DIR, "app.json.tmp"), File.join(REPORT_DIR, "app.json"))
SelfReport.start("rails")

run Rails.application
