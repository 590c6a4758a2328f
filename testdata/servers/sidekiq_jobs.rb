# Sidekiq jobs for the server tests: SpinJob burns CPU in SpinJob#perform
# for the milliseconds given, on the thread's own CPU clock, and queues
# itself again, so that every processor thread keeps running one. The
# first SEED jobs are queued when the server starts; the process reports
# on itself (SelfReport) once started.
require "sidekiq"
require_relative "selfreport"

class SpinJob
  include Sidekiq::Worker

  def perform(ms)
    t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0 < ms / 1000.0
    SpinJob.perform_async(ms)
    x
  end
end

Sidekiq.logger.level = Logger::WARN

Sidekiq.configure_server do |config|
  config.on(:startup) do
    Integer(ENV.fetch("SEED", "3")).times { SpinJob.perform_async(20) }
    SelfReport.start("sidekiq")
  end
end
