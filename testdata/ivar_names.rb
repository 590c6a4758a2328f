# A Ruby program whose objects have known instance variables, for the
# tests that compare the names and values `rbscope heap dump` writes
# ("instance_variables") with what the program says of them:
#
#   ruby testdata/ivar_names.rb REPORT [DUMP]
#
# It builds, under the global $ivar_root: an object with ivars of every
# kind of value (a String, a Fixnum, another object, nil, true, false, a
# static Symbol, a Flonum, a Bignum, a negative Fixnum); one with Floats
# and Symbols of every form inspect prints differently; one with more
# ivars than fit in its slot; a frozen one; one of a class whose other
# instance set an ivar it lacks (an unset slot on 2.7 and 3.1); objects of
# a class with so many shapes that Ruby 3.3+ keeps the later ones' ivars in
# a table (too complex); a class with class-level ivars and a class
# variable; a String and an Array with instance variables (generic ivars,
# kept apart from the object).
#
# With DUMP, it writes its heap there with ObjectSpace.dump_all first.
# Then it writes REPORT (renamed into place) as JSON: {"pid", "version",
# "objects": [{"what", "address", "ivars": [[name, value]...]}]}, each
# value the address of a heap object ("0x...") or the inspect of an
# immediate, in instance_variables' order. A full GC follows, GC is
# disabled and the main thread sleeps for good.
require "objspace"
require "json"

report = ARGV.fetch(0)
dump = ARGV[1]

def addr(obj)
  JSON.parse(ObjectSpace.dump(obj)).fetch("address")
end

# value is what the dump should write for v: an address or an inspect.
def value(v)
  d = ObjectSpace.dump(v)
  return v.inspect unless d.start_with?("{")

  JSON.parse(d)["address"] || v.inspect
end

class IvarChild; end

class IvarKinds
  def initialize
    @name = "x"
    @count = 5
    @child = IvarChild.new
    @nothing = nil
    @flag = true
    @off = false
    @sym = :hello_sym
    @ratio = 1.5
    @big = 2**70
    @neg = -3
  end
end

class IvarImmediates
  def initialize
    @zero = 0.0
    @neg_zero = -0.0
    @tiny = 0.0001
    @tinier = 1.0e-5
    @whole = 100.0
    @huge = 1.0e+20
    @third = 1.0 / 3
    @neg_float = -2.5
    @digits16 = 1234567890123456.0
    @digits17 = 12345678901234567.0
    @e14 = 1.0e+14
    @e15 = 1.0e+15
    @below_tiny = 9.99e-5
    @max_fixnum = 2**62 - 1
    @min_fixnum = -2**62
    @op = :+
    @aref = :[]=
    @quoted = :"with space"
    @question = :ok?
    @ivar_sym = :@foo
    @cvar_sym = :@@bar
    @global_sym = :$baz
    @setter = :name=
    @const_sym = :Const
  end
end

class IvarMany
  def initialize
    12.times { |i| instance_variable_set("@m#{i}", i.even? ? "many #{i}" : i) }
  end
end

class IvarSparse
  def initialize(first)
    if first
      @a = "sparse a"
      @b = "sparse b"
    else
      @b = "only b"
    end
  end
end

class IvarComplex
  def initialize(i)
    instance_variable_set("@first#{i}", "complex #{i}")
    @shared = i
  end
end

class IvarClassLevel
  @class_ivar = "class level"
  @class_count = 42
  @@class_var = "a class variable"
end

class IvarString < String
  def initialize(s)
    super(s)
    @tag = :tagged
    @note = "a note"
  end
end

root = {}
root[:kinds] = IvarKinds.new
root[:many] = IvarMany.new
root[:immediates] = IvarImmediates.new
root[:frozen] = IvarKinds.new.freeze
root[:sparse_full] = IvarSparse.new(true)
root[:sparse] = IvarSparse.new(false)
root[:complex] = Array.new(12) { |i| IvarComplex.new(i) }
root[:class_level] = IvarClassLevel
root[:generic_string] = IvarString.new("generic")
with_ivar = ["an Array"]
with_ivar.instance_variable_set(:@extra, "array ivar")
with_ivar.instance_variable_set(:@size_hint, 7)
root[:generic_array] = with_ivar
$ivar_root = root

objects = []
describe = lambda do |what, obj|
  objects << { "what" => what, "address" => addr(obj),
               "ivars" => obj.instance_variables.map { |n| [n.to_s, value(obj.instance_variable_get(n))] } }
end
root.each do |k, v|
  if v.instance_of?(Array) && k == :complex
    v.each_with_index { |o, i| describe.call("#{k}[#{i}]", o) }
  else
    describe.call(k.to_s, v)
  end
end

File.open(dump, "w") { |f| ObjectSpace.dump_all(output: f) } if dump
tmp = report + ".tmp"
File.write(tmp, JSON.generate({ "pid" => Process.pid, "version" => RUBY_VERSION, "objects" => objects }))
File.rename(tmp, report)
GC.start
GC.disable
sleep
