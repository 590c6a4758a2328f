# An ActiveJob job run by Sidekiq, for the agent's label test
# (TestAgentLabelsActiveJob): ReportJob, an ActiveJob::Base on ActiveJob's
# Sidekiq adapter, burns CPU for the milliseconds given (sidekiq_two_jobs.rb's
# burn) and queues itself again; the first SEED3 are queued when the server
# starts. Run with SEED=0 SEED2=0: no other job runs.
require "active_job"
require "active_job/queue_adapters/sidekiq_adapter"
require_relative "sidekiq_two_jobs"

ActiveJob::Base.queue_adapter = :sidekiq
ActiveJob::Base.logger = Logger.new(nil)

class ReportJob < ActiveJob::Base
  def perform(ms)
    burn(ms)
    ReportJob.perform_later(ms)
  end
end

Sidekiq.configure_server do |config|
  config.on(:startup) do
    Integer(ENV.fetch("SEED3", "2")).times { ReportJob.perform_later(20) }
  end
end
