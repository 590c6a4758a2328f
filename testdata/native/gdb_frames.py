# gdb -batch -p PID -x gdb_frames.py: every thread's frames as gdb unwinds
# them, one line each: "THREAD tid", then "FRAME pc cfa name" for each
# frame that is a real one: not inlined, not a tail call gdb made up from
# call-site information (cfa: gdb's "frame at", "?" if none).
import re
import gdb

# The whole stack, as rbscope unwinds it: past main and the entry point.
gdb.execute("set backtrace past-main on")
gdb.execute("set backtrace past-entry on")

for inferior in gdb.inferiors():
    for thread in inferior.threads():
        thread.switch()
        print("THREAD %d" % thread.ptid[1])
        frame = gdb.newest_frame()
        while frame is not None:
            if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
                frame.select()
                info = gdb.execute("info frame", to_string=True)
                m = re.search(r"frame at (0x[0-9a-f]+)", info)
                print("FRAME %#x %s %s" % (frame.pc(), m.group(1) if m else "?", frame.name() or "??"))
            try:
                frame = frame.older()
            except gdb.error:
                break
