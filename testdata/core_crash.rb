# A Ruby program that crashes itself so that the kernel writes its core. It
# starts a sleeping thread, writes what it knows about itself to the file
# named by ARGV[0] as JSON (in the shape testdata/stack_threads.rb writes,
# with caller_locations taken on the very line each thread stops on) and
# sends itself SIGSEGV: Ruby's crash report then aborts and the kernel dumps
# the core (when core_pattern and the core size limit let it).
require "json"
require_relative "lib/native_tid"

out = ARGV.fetch(0)
Process.setrlimit(:CORE, :INFINITY)

def frames_of(locs)
  locs.map { |l| [l.label, l.absolute_path || l.path, l.lineno] }
end

$reports = Queue.new
sleeper = Thread.new do
  Thread.current.name = "sleeper"
  $reports << { "name" => "sleeper", "main" => false, "tid" => Thread.current.native_thread_id,
                "top" => [["Kernel#sleep", nil, nil]], "frames" => frames_of(caller_locations(0)) }; sleep
end
reports = [$reports.pop]
sleep 0.01 until sleeper.status == "sleep"

REPORT = lambda do |locs|
  doc = { "pid" => Process.pid, "version" => RUBY_VERSION,
          "statuses" => { "sleeper" => sleeper.status },
          "thread_names" => Thread.list.map(&:name),
          "threads" => reports + [{ "name" => nil, "main" => true, "tid" => Thread.main.native_thread_id,
                                    "top" => [["Process.kill", nil, nil]], "frames" => frames_of(locs) }] }
  File.write(out + ".tmp", JSON.generate(doc))
  File.rename(out + ".tmp", out)
end

class Crasher
  def crash
    REPORT.call(caller_locations(0)); Process.kill(:SEGV, Process.pid)
  end
end

[1].each { Crasher.new.crash }
