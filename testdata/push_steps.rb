# A loop that pushes and pops control frames all the time, for the test
# that reads its stack after every instruction (single-stepped). Each round
# calls a C method (Kernel#itself) and a Ruby method (callee) from the same
# block, so that each call's control frame lands in the slot the other
# call left. The first call of callee writes {"pid", "stack"} to ARGV[0]:
# stack is callee's own caller_locations(0), [label, path] innermost first.
# Nothing in the loop allocates, so no collection or finalizer runs in it.
require "json"

def callee
  return unless $report
  stack = caller_locations(0).map { |l| [l.label, l.path] }
  File.write($report + ".tmp", JSON.generate({ "pid" => Process.pid, "stack" => stack }))
  File.rename($report + ".tmp", $report)
  $report = nil
end

def stepper
  loop do
    1.itself
    callee
  end
end

$report = ARGV.fetch(0)
stepper
