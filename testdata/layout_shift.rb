# A Ruby program whose threads all sleep in known methods, with a heap of
# its own, for the test that reads it through a layout with one field
# moved (TestShiftedLayout): what rbscope prints of it through the right
# layout stays the same from one read to the next. It writes its pid and
# RUBY_VERSION to ARGV[0] once every thread sleeps.
require "json"

module Billing
  class Invoice
    def total
      sleep 3600 # the main thread sleeps here
    end
  end
end

class Ledger
  def self.wait
    sleep 3600
  end
end

$keep = Array.new(20_000) { |i| "line #{i}" }
t = Thread.new { Ledger.wait }
t.name = "ledger"
Thread.pass until t.status == "sleep"
File.write(ARGV.fetch(0) + ".tmp", JSON.generate(pid: Process.pid, version: RUBY_VERSION))
File.rename(ARGV.fetch(0) + ".tmp", ARGV.fetch(0))
Billing::Invoice.new.total
