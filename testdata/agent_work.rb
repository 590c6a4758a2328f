# A process for the agent to find: it burns CPU in a method named after
# ARGV[0] (work_<name>), so that its profile can be told from another's.
name = ARGV.fetch(0)
abort "name: letters only" unless name.match?(/\A[a-z]+\z/)
eval(<<~RUBY)
  def work_#{name}
    x = 0
    loop { 10_000.times { x += 1 } }
  end
RUBY
$stdout.puts :ready
$stdout.flush
send("work_#{name}")
