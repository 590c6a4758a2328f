# A Ruby program whose objects come from a gem, from Ruby itself and from
# the program, for the heap overview's groupings by allocation site and by
# gem. With allocation tracing on from the start, it writes a gem of its
# own, DIR/gems/fakegem-1.2.3/lib/fakegem.rb, loads it, keeps 3,000
# Strings the gem makes and 2,000 Objects of its own, then after a GC
# 1,500 more, dumps its heap with ObjectSpace.dump_all to DUMP and writes
# {"pid", "gem_site", "app_site" (where Ruby says the kept objects were
# allocated, file:line), "gem_strings", "app_objects", "later_objects"
# (how many), "app_generation", "later_generation" (the GC generation
# Ruby says the last of each was allocated in)} to REPORT.
#
#   ruby testdata/heap_gems.rb REPORT DUMP DIR
require "objspace"
require "json"
require "fileutils"

report, dump, dir = ARGV.fetch(0), ARGV.fetch(1), ARGV.fetch(2)
ObjectSpace.trace_object_allocations_start
lib = File.join(dir, "gems", "fakegem-1.2.3", "lib")
FileUtils.mkdir_p(lib)
File.write(File.join(lib, "fakegem.rb"), <<~RUBY)
  module FakeGem
    def self.make(n)
      Array.new(n) { |i| "fake gem string \#{i}" }
    end
  end
RUBY
require File.join(lib, "fakegem")
GEM_STRINGS = FakeGem.make(3000)
APP_OBJECTS = Array.new(2000) { Object.new }
GC.start
LATER_OBJECTS = Array.new(1500) { Object.new }
GC.start
File.open(dump, "w") { |f| ObjectSpace.dump_all(output: f) }

def site(obj)
  "#{ObjectSpace.allocation_sourcefile(obj)}:#{ObjectSpace.allocation_sourceline(obj)}"
end
File.write(report + ".tmp", JSON.generate({ "pid" => Process.pid, "gem_site" => site(GEM_STRINGS.last),
                                            "app_site" => site(APP_OBJECTS.last),
                                            "gem_strings" => GEM_STRINGS.size, "app_objects" => APP_OBJECTS.size,
                                            "later_objects" => LATER_OBJECTS.size,
                                            "later_generation" => ObjectSpace.allocation_generation(LATER_OBJECTS.last),
                                            "app_generation" => ObjectSpace.allocation_generation(APP_OBJECTS.last) }))
File.rename(report + ".tmp", report)
