# Loads the method definitions of testdata/split.rb (burn, chain_a, chain_b,
# chain_c, work) without running its top-level code, so bench/record.sh's
# fixed-rounds and stackprof variants run exactly the same methods, with the
# same names, file and lines, as the workload rbscope records. Everything
# before split.rb's first line of top-level code ("seconds = ...") is
# evaluated at the top level under split.rb's own path.
SPLIT_RB = File.expand_path("split.rb", __dir__)

src = File.read(SPLIT_RB)
cut = src.index(/^seconds = /) or abort "bench_split_defs.rb: cannot find the top-level code in #{SPLIT_RB}"
eval(src[0...cut], TOPLEVEL_BINDING, SPLIT_RB, 1)
%i[burn chain_a chain_b chain_c work].each do |m|
  abort "bench_split_defs.rb: #{SPLIT_RB} no longer defines #{m}" unless Object.private_method_defined?(m)
end

# split_rounds runs the body of split.rb's work loop a fixed number of times.
def split_rounds(rounds)
  rounds.times do
    chain_a
    chain_b
    chain_c
  end
end

def bench_write_json(path, doc)
  File.write(path + ".tmp", JSON.generate(doc))
  File.rename(path + ".tmp", path)
end
