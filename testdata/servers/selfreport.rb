# SelfReport lets a server process say what it knows about itself: a
# thread named "self-report" rewrites $RBSCOPE_REPORT_DIR/ROLE-PID.json
# whenever its pid, parent, title or thread list changes, with a generation
# count, so that a test can compare what rbscope reads from outside with a
# report that held before and after the read.
require "json"

module SelfReport
  def self.start(role)
    dir = ENV["RBSCOPE_REPORT_DIR"] or return
    Thread.new do
      Thread.current.name = "self-report"
      last = nil
      gen = 0
      loop do
        now = { "pid" => Process.pid, "ppid" => Process.ppid, "role" => role, "title" => $0,
                "threads" => Thread.list.map { |t| { "name" => t.name, "tid" => t.native_thread_id, "main" => t == Thread.main } } }
        if now != last
          gen += 1
          path = File.join(dir, "#{role}-#{Process.pid}.json")
          File.write(path + ".tmp", JSON.generate(now.merge("gen" => gen)))
          File.rename(path + ".tmp", path)
          last = now
        end
        sleep 0.05
      end
    end
  end
end
