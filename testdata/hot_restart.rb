# A server's hot restart, as Puma's SIGUSR2 does it: the process burns CPU
# in work_before until it gets SIGUSR2, then execs a new program in its
# place (the same PID), testdata/agent_work.rb, which burns CPU in
# work_after. Prints "ready" once it runs. The new program runs on the Ruby
# the first argument names (the test's command for this Ruby, which may
# run it through a dynamic linker of its own), else on RbConfig.ruby.
ruby = ARGV[0] || RbConfig.ruby
trap("USR2") { exec(ruby, File.join(__dir__, "agent_work.rb"), "after") }

def work_before
  x = 0
  loop { 10_000.times { x += 1 } }
end

$stdout.puts :ready
$stdout.flush
work_before
