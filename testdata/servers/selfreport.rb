# SelfReport lets a server process say what it knows about itself: a
# thread named "self-report" rewrites $RBSCOPE_REPORT_DIR/ROLE-PID.json
# every 50 ms with its pid, parent, title and thread list, a generation
# count that grows when those change and a tick count that grows with every
# look, so that a test can compare what rbscope reads from outside with a
# report that held before the read and still held at a look begun after it.
require "json"

module SelfReport
  def self.start(role)
    dir = ENV["RBSCOPE_REPORT_DIR"] or return
    Thread.new do
      Thread.current.name = "self-report"
      last = nil
      gen = 0
      tick = 0
      loop do
        now = { "pid" => Process.pid, "ppid" => Process.ppid, "role" => role, "title" => $0,
                "threads" => Thread.list.map { |t| { "name" => t.name, "tid" => t.native_thread_id, "main" => t == Thread.main } } }
        gen += 1 if now != last
        last = now
        tick += 1
        path = File.join(dir, "#{role}-#{Process.pid}.json")
        File.write(path + ".tmp", JSON.generate(now.merge("gen" => gen, "tick" => tick)))
        File.rename(path + ".tmp", path)
        sleep 0.05
      end
    end
  end
end
