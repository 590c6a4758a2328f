# A program that traps SIGCHLD itself, as a preforking master does to reap
# its workers: its handler writes ARGV[0].chld. ARGV[1] says what the main
# thread does: "sleep" or "cpu" (Ruby arithmetic without end). Writes
# {"pid": PID} to ARGV[0] once the trap is set.
require "json"

out = ARGV.fetch(0)
trap("CHLD") { File.write(out + ".chld", "the CHLD trap ran") }
File.write(out + ".tmp", JSON.generate({ "pid" => Process.pid }))
File.rename(out + ".tmp", out)
case ARGV.fetch(1)
when "sleep" then sleep
when "cpu"
  x = 0
  loop { x += 1 }
end
