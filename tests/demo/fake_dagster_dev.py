"""Stands in for `dagster dev` in the supervisor test: a parent that ignores SIGTERM (as `dagster
dev` may, while it waits on its children) with two children that ignore it too, one of them in a
session of its own (as a process that leaves the process group would). Writes every PID to the
file named by argv[1], then sleeps until killed."""

import os
import signal
import subprocess
import sys
import time

CHILD = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"

signal.signal(signal.SIGTERM, signal.SIG_IGN)
webserver = subprocess.Popen([sys.executable, "-c", CHILD])  # same group
daemon = subprocess.Popen([sys.executable, "-c", CHILD], start_new_session=True)  # left the group
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {webserver.pid} {daemon.pid}\n")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
