# testdata/apps/sinatra.ru: a small application on Debian's Sinatra, run
# by Debian's Puma (puma -e production testdata/apps/sinatra.ru), for the
# agent's Rack route labels (TestAgentLabelsSinatra).
#
# Each route is defined in a class method of its own, as Sinatra
# extensions define theirs, so that its block's frame has a label of its
# own ("block in Shop.catalog_routes") by which the test finds the
# samples in that route. Sinatra names every route it serves in
# env["sinatra.route"] ("GET /items/:id"); /__rbscope/stats counts the
# requests served by that name: the application's own account of its
# routes, against which the labels are checked.
require "sinatra/base"
require "digest"
require "json"

class Shop < Sinatra::Base
  set :environment, :production

  SERVED = Hash.new(0)
  LOCK = Mutex.new

  after do
    route = env["sinatra.route"]
    LOCK.synchronize { SERVED[route] += 1 } if route && !route.include?("__rbscope")
  end

  def self.catalog_routes
    get "/items/:id" do
      d = params[:id]
      3000.times { d = Digest::SHA256.hexdigest(d) }
      d
    end
  end

  def self.search_routes
    get "/search" do
      s = +""
      20_000.times { |i| s << i.to_s(36) }
      s.size.to_s
    end
  end

  catalog_routes
  search_routes

  get "/__rbscope/stats" do
    content_type :json
    LOCK.synchronize { JSON.generate(pid: Process.pid, served: SERVED) }
  end
end

run Shop
