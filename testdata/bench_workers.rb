# A master and ARGV[0] forked workers, as a preforking server runs: each
# worker wakes 100 times a second to do a little work, as a quiet server
# worker does. The master writes the workers' PIDs, one a line, to ARGV[1]
# (renamed into place) once all are running, then waits for them; a
# worker ends when its master does. ARGV[2..] are left for the caller to
# mark the processes with.
n = Integer(ARGV.fetch(0))
ready = ARGV.fetch(1)
pids = Array.new(n) do
  fork do
    master = Process.ppid
    loop do
      200.times { |i| i * i }
      sleep 0.01
      exit!(0) if Process.ppid != master
    end
  end
end
File.write(ready + ".tmp", pids.join("\n") + "\n")
File.rename(ready + ".tmp", ready)
Process.waitall
