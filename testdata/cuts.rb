# A program for the cuts by thread and endpoint (record, report and top's
# --thread, --endpoint, --by, --callers): two named threads doing different
# work, "cruncher" (CPU in Object#crunch) and "napper" (sleeping in
# Object#nap, a little CPU in between), and the main thread serving fake
# Rails requests: a controller whose action ActionController's send_action
# calls, as ctxlabels recognises it (send leaves no frame), three times as
# long in ItemsController#index as in ItemsController#show, then work
# outside any endpoint (Object#idle_work). Each request goes through 80
# frames of fake middleware (Object#middleware), as a Rails request goes
# through Puma's, Rack's and Rails' own before the action, and each action
# through 60 of fake rendering (Object#render) before its work: the flame
# graph of deep stacks. Writes {"pid", "tids": {name: TID}} to ARGV[0] once its
# threads run; runs ARGV[1] seconds (default 60).
require "json"
require_relative "lib/native_tid"

module ActionController
  module BasicImplicitRender
    def send_action(method, *args)
      send(method, *args)
    end
  end
end

def spin(n)
  i = 0
  i += 1 while i < n
end

class ItemsController
  include ActionController::BasicImplicitRender

  def index
    render(60) { spin(30_000) }
  end

  def show
    render(60) { spin(10_000) }
  end
end

def crunch
  loop { spin(50_000) }
end

def nap
  loop do
    sleep 0.005
    spin(2_000)
  end
end

def idle_work
  spin(10_000)
end

def render(depth, &view)
  depth.zero? ? view.call : render(depth - 1, &view)
end

def middleware(depth, &app)
  depth.zero? ? app.call : middleware(depth - 1, &app)
end

out = ARGV.fetch(0)
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV.fetch(1, "60"))
tids = Queue.new
[["cruncher", :crunch], ["napper", :nap]].each do |name, work|
  Thread.new do
    Thread.current.name = name
    tids << [name, Thread.current.native_thread_id]
    send(work)
  end
end
found = { "main" => Thread.main.native_thread_id }
2.times { name, tid = tids.pop; found[name] = tid }
File.write(out + ".tmp", JSON.generate("pid" => Process.pid, "tids" => found))
File.rename(out + ".tmp", out)
controller = ItemsController.new
while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
  middleware(80) { controller.send_action(:index) }
  middleware(80) { controller.send_action(:show) }
  idle_work
end
