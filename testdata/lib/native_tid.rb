# Thread#native_thread_id (Ruby 3.1+) for older Rubies (2.7), so the test
# programs can say which kernel thread each Ruby thread is: every thread
# learns its TID from /proc/thread-self as it starts; the main thread's is
# the process ID.
unless Thread.method_defined?(:native_thread_id)
  class Thread
    module RecordTID
      def initialize(*args, &body)
        super(*args) do |*a|
          Thread.current.instance_variable_set(:@native_tid, Integer(File.readlink("/proc/thread-self").split("/").last))
          body.call(*a)
        end
      end
    end
    prepend RecordTID

    def native_thread_id
      self == Thread.main ? Process.pid : instance_variable_get(:@native_tid)
    end
  end
end
