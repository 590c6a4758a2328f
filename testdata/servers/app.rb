# A Rack application for the forking-server tests: /spin burns CPU in
# ServerWork.hot for the milliseconds given (?ms=N), measured on the
# thread's own CPU clock; /leak keeps a 2 kB String for good (the line
# marked "leak site"); every path answers with the process's pid.
require_relative "selfreport"

module ServerWork
  def self.hot(ms)
    t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0 < ms / 1000.0
    x
  end
end

LEAKED = []

SERVER_APP = lambda do |env|
  case env["PATH_INFO"]
  when "/spin"
    ms = env["QUERY_STRING"].to_s[/ms=(\d+)/, 1].to_i
    ServerWork.hot(ms)
    [200, { "content-type" => "text/plain" }, ["#{Process.pid}\n"]]
  when "/leak"
    LEAKED << ("x" * 2_000) # leak site
    [200, { "content-type" => "text/plain" }, ["#{Process.pid}\n"]]
  else
    [200, { "content-type" => "text/plain" }, ["#{Process.pid}\n"]]
  end
end
