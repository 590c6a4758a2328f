# Real command-line programs from Debian's packages, run as rbscope's
# tests run them, under stackprof:
#   ruby profiled.rb PROGRAM DIR REPORT CPU_SECONDS
# PROGRAM is one of:
#   jekyll  Debian's Jekyll builds a blog of 300 posts it writes under DIR
#           (Markdown with code blocks that Rouge highlights, Liquid loops
#           in the layouts, tags and categories)
#   rdoc    RDoc (Ruby's own documentation tool) documents Ruby's net/ and
#           uri/ libraries (darkfish HTML, into DIR)
# It runs the program once, and writes REPORT (renamed into place) as
# JSON {"pid", "phase":"ready"}. Once DIR/go exists it runs the program
# again and again under stackprof (Debian's ruby-stackprof, CPU mode,
# 1 ms) until its own CPU clock has spent CPU_SECONDS in it, then writes
# REPORT again: "phase":"profiled", the runs' CPU time, stackprof's sample
# count, its samples in garbage collection, and each frame's total
# samples by label (the frames of one label added up). It then waits,
# idle, for DIR/dump to exist, makes a full GC and dumps its own heap
# (ObjectSpace.dump_all, to DIR/dump_all.json) with the last run's result
# kept (the Site, the RDoc store), writes REPORT with "phase":"dumped" and
# the dump's path, and sleeps holding it.
require "fileutils"
require "json"
require "objspace"
require "stackprof"

program, dir, report, cpu_seconds = ARGV.fetch(0), ARGV.fetch(1), ARGV.fetch(2), Float(ARGV.fetch(3))

def write_report(report, doc)
  File.write(report + ".tmp", JSON.generate(doc))
  File.rename(report + ".tmp", report)
end

# jekyll_blog writes a blog of posts posts under src.
def jekyll_blog(src, posts)
  FileUtils.mkdir_p(File.join(src, "_layouts"))
  FileUtils.mkdir_p(File.join(src, "_posts"))
  File.write(File.join(src, "_config.yml"), <<~YAML)
    title: A profiled blog
    markdown: kramdown
    highlighter: rouge
    permalink: /:categories/:year/:month/:day/:title/
    quiet: true
  YAML
  File.write(File.join(src, "_layouts", "default.html"), <<~HTML)
    <html><head><title>{{ page.title }} - {{ site.title }}</title></head>
    <body>{{ content }}
    <ul>{% for post in site.posts limit:20 %}<li><a href="{{ post.url }}">{{ post.title | escape }}</a> {{ post.date | date_to_string }}</li>{% endfor %}</ul>
    </body></html>
  HTML
  File.write(File.join(src, "index.html"), <<~HTML)
    ---
    layout: default
    title: Home
    ---
    {% for post in site.posts %}<h2>{{ post.title }}</h2>{{ post.excerpt }}{% endfor %}
  HTML
  words = %w[ruby heap stack profile thread fiber object class module method string array hash
             symbol garbage collector compaction allocation sampling flame graph]
  posts.times do |i|
    date = Time.utc(2024, 1, 1) + i * 86_400
    body = +"---\nlayout: default\ntitle: \"Post #{i}: #{words.rotate(i).first(3).join(" ")}\"\n"
    body << "categories: [#{words[i % 5]}]\ntags: [#{words.rotate(i).first(4).join(", ")}]\n---\n\n"
    6.times do |p|
      body << "## Part #{p}\n\n" << (words.rotate(i + p).join(" ") + ". ") * 6 << "\n\n"
      body << "* **#{words[p]}** with `#{words[p + 1]}`\n* [a link](https://example.org/#{i}/#{p})\n\n"
      body << "```ruby\ndef #{words[p]}_#{i}(x)\n  x.map { |v| v * #{p + 1} }.select(&:even?).sum\nend\n```\n\n"
    end
    File.write(File.join(src, "_posts", date.strftime("%Y-%m-%d") + "-post-#{i}.md"), body)
  end
end

# run returns the program's one run: a proc that runs it and returns what
# it made (kept while the heap is dumped).
run = case program
      when "jekyll"
        require "jekyll"
        src = File.join(dir, "src")
        jekyll_blog(src, 300)
        config = Jekyll.configuration("source" => src, "destination" => File.join(dir, "_site"), "quiet" => true)
        -> { Jekyll::Site.new(config).tap(&:process) }
      when "rdoc"
        require "rdoc"
        lib = RbConfig::CONFIG["rubylibdir"]
        -> { RDoc::RDoc.new.tap { |r| r.document(["--op", File.join(dir, "doc"), "-q", "-f", "darkfish", File.join(lib, "net"), File.join(lib, "uri")]) } }
      else
        abort "profiled.rb: no program #{program} (jekyll, rdoc)"
      end
kept = run.call
write_report(report, { "pid" => Process.pid, "phase" => "ready" })

sleep 0.01 until File.exist?(File.join(dir, "go"))
cpu = 0.0
runs = 0
profile = StackProf.run(mode: :cpu, interval: 1000) do
  while cpu < cpu_seconds
    t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    kept = run.call
    cpu += Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0
    runs += 1
  end
end
frames = Hash.new(0)
profile[:frames].each_value { |f| frames[f[:name]] += f[:total_samples] }
profiled = { "pid" => Process.pid, "phase" => "profiled", "cpu" => cpu, "runs" => runs,
             "samples" => profile[:samples], "gc_samples" => profile[:gc_samples], "frames" => frames,
             "kept" => kept.class.name }
write_report(report, profiled)

sleep 0.01 until File.exist?(File.join(dir, "dump"))
GC.start
dump = File.join(dir, "dump_all.json")
File.open(dump + ".tmp", "w") { |f| ObjectSpace.dump_all(output: f) }
File.rename(dump + ".tmp", dump)
write_report(report, profiled.merge("phase" => "dumped", "dump" => dump))
sleep
