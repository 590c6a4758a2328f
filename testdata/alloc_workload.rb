# Every round keeps 1,000 Strings made on KEEP_MANY's line and 100 made on
# KEEP_FEW's line, and throws away 10,000 made on the GARBAGE line. It
# writes ARGV[0] when ready: its pid and those three line numbers, and
# prints "round N" lines so a test can see it keeps running.
require "json"

$stdout.sync = true
$kept = []
$rounds = 0

def keep_many; 1000.times { |i| $kept << "many #{i}" }; end # KEEP_MANY
def keep_few; 100.times { |i| $kept << "few #{i}" }; end # KEEP_FEW
def garbage; 10_000.times { |i| "garbage #{i}" }; end # GARBAGE

lines = File.readlines(__FILE__).each_with_index.to_h { |l, i| [l[/# (KEEP_MANY|KEEP_FEW|GARBAGE)$/, 1], i + 1] }
File.write(ARGV[0] + ".tmp", JSON.generate({ "pid" => Process.pid, "file" => __FILE__,
  "keep_many" => lines["KEEP_MANY"], "keep_few" => lines["KEEP_FEW"], "garbage" => lines["GARBAGE"] }))
File.rename(ARGV[0] + ".tmp", ARGV[0])
loop do
  keep_many
  keep_few
  garbage
  $rounds += 1
  $kept.shift($kept.size - 200_000) if $kept.size > 400_000
  sleep 0.05
end
