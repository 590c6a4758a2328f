# A heap large enough that dumping it takes seconds: 1.5 million strings
# and arrays kept alive. Writes {"pid": PID} to ARGV[0] once they exist,
# then sleeps.
require "json"

KEEP = Array.new(500_000) { |i| ["s#{i}", "t#{i}"] }
File.write(ARGV.fetch(0) + ".tmp", JSON.generate({ "pid" => Process.pid }))
File.rename(ARGV.fetch(0) + ".tmp", ARGV.fetch(0))
sleep
