# testdata/split.rb's workload (the same methods, loaded from split.rb)
# profiled in-process by stackprof, the peer bench/record.sh compares
# rbscope's accuracy with:
#
#   ruby testdata/bench_stackprof.rb SECONDS RESULT_JSON
#
# Runs split.rb's work(SECONDS) inside StackProf.run(mode: :cpu,
# interval: 10000, raw: true) (100 Hz of CPU time) and writes to RESULT_JSON
# {"samples", "chain_a", "chain_b", "chain_c", "other"}: every raw sample is
# counted under the chain_X whose frame (named "chain_X" or "Object#chain_X",
# not "block in ...") is on its stack; "other" has none. Needs the stackprof
# gem (Debian: ruby-stackprof).
require "json"
require "stackprof"
require_relative "bench_split_defs"

seconds = Float(ARGV.fetch(0))
out = ARGV.fetch(1)
File.write(out + ".pid", Process.pid.to_s)

prof = StackProf.run(mode: :cpu, interval: 10_000, raw: true) { work(seconds) }

chain_of = {}
prof[:frames].each do |id, f|
  chain_of[id] = Regexp.last_match(1) if f[:name] =~ /\A(?:Object#)?(chain_[abc])\z/
end
abort "bench_stackprof.rb: no chain_a/b/c frames in the profile" if chain_of.size < 3

counts = Hash.new(0)
samples = 0
raw = prof[:raw]
i = 0
while i < raw.size
  len = raw[i]
  stack = raw[i + 1, len]
  n = raw[i + 1 + len]
  i += len + 2
  samples += n
  chain = stack.filter_map { |id| chain_of[id] }.first
  counts[chain || "other"] += n
end

bench_write_json(out, { "samples" => samples, "interval_us" => prof[:interval], "mode" => prof[:mode].to_s,
                        "chain_a" => counts["chain_a"], "chain_b" => counts["chain_b"],
                        "chain_c" => counts["chain_c"], "other" => counts["other"],
                        "frame_names" => chain_of.keys.map { |id| prof[:frames][id][:name] } })
