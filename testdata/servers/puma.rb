# Puma in cluster mode, the application preloaded in the master: the test
# passes the port (PORT), the report directory (RBSCOPE_REPORT_DIR) and a tag
# for the process titles (SERVER_TAG) in the environment.
workers 2
threads 3, 3
preload_app!
bind "tcp://127.0.0.1:#{ENV.fetch("PORT")}"
rackup File.join(__dir__, "config.ru")
environment "production"
tag ENV.fetch("SERVER_TAG", "servers")
worker_check_interval 1 if respond_to?(:worker_check_interval)
before_fork { SelfReport.start("master") unless $master_reported; $master_reported = true }
on_worker_boot { SelfReport.start("worker") }
