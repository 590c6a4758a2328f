# Debian's Jekyll building a blog, as rbscope's tests run it:
#   ruby jekyll_site.rb DIR REPORT POSTS CPU_SECONDS
# It writes a site of POSTS posts (Markdown with code blocks that Rouge
# highlights, Liquid loops in the layouts, tags and categories) under DIR,
# builds it once, and writes REPORT (renamed into place) as JSON {"pid",
# "phase":"ready"}. Once DIR/go exists it builds the site again and again
# under stackprof (Debian's ruby-stackprof, CPU mode, 1 ms) until its own
# CPU clock has spent CPU_SECONDS in the builds, then writes REPORT again:
# "phase":"profiled", the builds' CPU time, stackprof's sample count, its
# samples in garbage collection, and each frame's total samples by label
# (the frames of one label added up). It then waits, idle, for DIR/dump
# to exist, makes a full GC and dumps its own heap (ObjectSpace.dump_all,
# to DIR/dump_all.json) with the last build's Site kept, writes REPORT
# with "phase":"dumped" and the dump's path, and sleeps holding the Site.
require "fileutils"
require "json"
require "objspace"
require "jekyll"
require "stackprof"

dir, report, posts, cpu_seconds = ARGV.fetch(0), ARGV.fetch(1), Integer(ARGV.fetch(2)), Float(ARGV.fetch(3))
src = File.join(dir, "src")
dest = File.join(dir, "_site")

def write_report(report, doc)
  File.write(report + ".tmp", JSON.generate(doc))
  File.rename(report + ".tmp", report)
end

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

config = Jekyll.configuration("source" => src, "destination" => dest, "quiet" => true)
site = Jekyll::Site.new(config)
site.process
write_report(report, { "pid" => Process.pid, "phase" => "ready" })

sleep 0.01 until File.exist?(File.join(dir, "go"))
cpu = 0.0
builds = 0
profile = StackProf.run(mode: :cpu, interval: 1000) do
  while cpu < cpu_seconds
    t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    site = Jekyll::Site.new(config)
    site.process
    cpu += Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0
    builds += 1
  end
end
frames = Hash.new(0)
profile[:frames].each_value { |f| frames[f[:name]] += f[:total_samples] }
profiled = { "pid" => Process.pid, "phase" => "profiled", "cpu" => cpu, "builds" => builds,
             "samples" => profile[:samples], "gc_samples" => profile[:gc_samples], "frames" => frames,
             "posts" => site.posts.docs.size }
write_report(report, profiled)

sleep 0.01 until File.exist?(File.join(dir, "dump"))
GC.start
dump = File.join(dir, "dump_all.json")
File.open(dump + ".tmp", "w") { |f| ObjectSpace.dump_all(output: f) }
File.rename(dump + ".tmp", dump)
write_report(report, profiled.merge("phase" => "dumped", "dump" => dump))
sleep
