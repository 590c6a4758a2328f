# A thread that sleeps (blocked reading a pipe) until the process gets
# SIGUSR1, then spins without end, for the tests of thread states read
# between its turns. It writes {"pid", "tid"} (the spinning thread's native
# id) as JSON to ARGV[0] (atomically) once asleep, and creates
# ARGV[0].spinning once it spins.
require "json"
out = ARGV.fetch(0)
r, w = IO.pipe
spinner = Thread.new do
  r.read(1)
  File.write(out + ".spinning", "")
  loop {}
end
Thread.pass until spinner.status == "sleep"
trap("USR1") { w.write("x") }
File.write(out + ".tmp", JSON.generate("pid" => Process.pid, "tid" => spinner.native_thread_id))
File.rename(out + ".tmp", out)
spinner.join
