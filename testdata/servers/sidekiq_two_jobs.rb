# Two Sidekiq job classes for the agent's label test (TestAgentLabelsSidekiq),
# beside sidekiq_jobs.rb's SpinJob, which is defined but never queued here
# (run with SEED=0): DigestJob burns CPU for the milliseconds given, on the
# thread's own CPU clock; NapJob sleeps that long and then burns a fifth of
# it. Each queues itself again, so that both keep running; the first SEED2
# of each are queued when the server starts.
require_relative "sidekiq_jobs"

# burn spins for ms milliseconds of the calling thread's CPU time.
def burn(ms)
  t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0 < ms / 1000.0
  x
end

class DigestJob
  include Sidekiq::Worker

  def perform(ms)
    burn(ms)
    DigestJob.perform_async(ms)
  end
end

class NapJob
  include Sidekiq::Worker

  def perform(ms)
    sleep(ms / 1000.0)
    burn(ms / 5)
    NapJob.perform_async(ms)
  end
end

Sidekiq.configure_server do |config|
  config.on(:startup) do
    Integer(ENV.fetch("SEED2", "1")).times do
      DigestJob.perform_async(20)
      NapJob.perform_async(20)
    end
  end
end
