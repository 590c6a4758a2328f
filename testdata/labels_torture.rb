# Frame labels in every form Ruby 3.4 writes them: a thread ("torture")
# goes down one call chain through class and module bodies, instance,
# singleton and module methods, nested blocks, define_method,
# method_missing, eval, instance_eval, class_exec, an anonymous class, a
# method on one object's singleton, a refinement, Comparable and C methods
# that yield, and sleeps at its end. Writes {"pid": PID, "version": V,
# "labels": [...]} to ARGV[0], where labels are the labels of
# caller_locations(0) taken on the line it sleeps on, innermost first,
# under "Kernel#sleep". Under Ruby 3.4 those are the labels rbscope must
# print on every Ruby (testdata/labels_torture.want.json keeps them).
require "json"

OUT = ARGV.fetch(0)

def finish
  locs = caller_locations(0)
  labels = ["Kernel#sleep"] + locs.map(&:label)
  File.write(OUT + ".tmp", JSON.generate({ "pid" => Process.pid, "version" => RUBY_VERSION, "labels" => labels }))
  File.rename(OUT + ".tmp", OUT)
  sleep
end

module Shouting
  refine String do
    def shout
      [1].each { finish }
    end
  end
end

module Billing
  module Greeting
    def greet(x)
      "hi".then { |_| x.call }
    end
  end

  class Invoice
    include Greeting
    include Comparable

    def <=>(other)
      $next.call
      0
    end

    def total
      2.times do |i|
        [i].each do
          greet(-> { self == Invoice.new })
        end
        break
      end
    end

    def self.issue
      new.total
    end
  end

  class Tax
    class << self
      def rate
        Billing::Invoice.issue
      end
    end
  end
end

class Ghost
  def method_missing(name, *args)
    return super unless name == :boo

    Billing::Tax.rate
  end

  def respond_to_missing?(name, priv = false)
    name == :boo || super
  end
end

class Widget
  define_method(:dyn) do
    eval("Ghost.new.boo")
  end
end

module Util
  module_function

  def helper
    Widget.new.dyn
  end
end

Anon = Class.new do
  def anon
    Util.helper
  end
end

using Shouting

# Singleton methods of singleton classes: one never named, whose method
# Ruby 3.4 labels with the bare name, and one assigned to a constant,
# which names it (META.named).
$meta = Object.new.singleton_class
def $meta.meta
  Class.new.class_exec { Anon.new.anon }
end

META = Object.new.singleton_class
def META.named
  $meta.meta
end

obj = Object.new
def obj.solo
  META.named
end

$next = lambda do
  "x".shout
end

OBJ = obj
t = Thread.new do
  Thread.current.name = "torture"
  class Deep
    Object.new.instance_eval { OBJ.solo }
  end
end
t.join
