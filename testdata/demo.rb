# A small Ruby "application" for `make demo`: a pool of named workers that
# parse, compute and sleep, so rbscope has several threads to show.
require "json"

def fib(n); n < 2 ? n : fib(n - 1) + fib(n - 2); end

class Worker
  def initialize(name, queue)
    @name, @queue = name, queue
  end

  def run
    Thread.new do
      Thread.current.name = @name
      loop { handle(@queue.pop) }
    end
  end

  def handle(job)
    case job[:kind]
    when :compute then fib(job[:n])
    when :parse then JSON.parse(JSON.generate((1..200).to_a))
    end
  end
end

queue = Queue.new
workers = %w[worker-1 worker-2 worker-3].map { |n| Worker.new(n, queue).run }
Thread.new { Thread.current.name = "ticker"; loop { sleep 0.5 } }
$stdout.puts "demo running as pid #{Process.pid}"
$stdout.flush
deadline = Time.now + Float(ENV.fetch("DEMO_SECONDS", "3600"))
while Time.now < deadline
  queue << { kind: :compute, n: 25 } << { kind: :parse }
  sleep 0.01 while queue.size > 6
end
