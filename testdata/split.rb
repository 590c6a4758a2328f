# A CPU-bound workload with a known split: every round calls the same leaf
# (burn) 5 times from chain_a, 3 times from chain_b and 2 times from chain_c,
# so about 50/30/20 of the CPU time goes to the three call chains. Writes
# {"pid": PID} to ARGV[0] when it starts; runs ARGV[1] seconds (default 5),
# or, with CPU_SECONDS set, until its chains have had that much CPU time
# (a fixed amount of work, however busy the machine); with FORK=1 it also
# forks a child that runs the same loop.
#
# It measures the CPU time each chain really got with its own thread CPU
# clock; on SIGUSR1 it writes {"seq": N, "cpu": {chain: seconds}} (N the
# signals received) to ARGV[0].cpu at the end of the round, so a test
# compares a profile with what the program measured over the same window,
# whatever else the machine was doing.
require "json"
require_relative "lib/cpu_report"

def burn
  i = 0
  i += 1 while i < 20_000
end

def chain_a; 5.times { burn }; end
def chain_b; 3.times { burn }; end
def chain_c; 2.times { burn }; end

def work(seconds, cpu_path)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  cpu_seconds = ENV["CPU_SECONDS"] && Float(ENV["CPU_SECONDS"])
  loop do
    timed("chain_a") { chain_a }
    timed("chain_b") { chain_b }
    timed("chain_c") { chain_c }
    answer(cpu_path)
    break if cpu_seconds ? CPU.values.sum > cpu_seconds : Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
  end
end

seconds = Float(ARGV.fetch(1, "5"))
child = fork { work(seconds, ARGV.fetch(0) + ".child.cpu") } if ENV["FORK"]
File.write(ARGV.fetch(0) + ".tmp", JSON.generate({ "pid" => Process.pid, "child" => child }))
File.rename(ARGV.fetch(0) + ".tmp", ARGV.fetch(0))
$stdout.puts "split workload running"
$stdout.flush
work(seconds, ARGV.fetch(0) + ".cpu")
Process.wait(child) if child
exit Integer(ENV.fetch("EXIT_CODE", "0"))
