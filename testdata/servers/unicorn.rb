# Unicorn with two workers, the application preloaded in the master; the
# test passes the port (PORT) and the report directory (RBSCOPE_REPORT_DIR)
# in the environment.
worker_processes 2
preload_app true
listen "127.0.0.1:#{ENV.fetch("PORT")}"
timeout 60
before_fork { |server, worker| SelfReport.start("master") unless $master_reported; $master_reported = true }
after_fork { |server, worker| SelfReport.start("worker") }
