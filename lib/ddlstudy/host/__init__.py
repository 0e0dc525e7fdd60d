"""This host's processes and pipes: the layer every other one may use (it imports nothing else
of ddlstudy). `process`: stop a process group (SIGTERM, then SIGKILL after a grace period) and
reap it. `identity`: whether a recorded pid is still the same process, across a step of the
wall clock. `entry`: run a command-line entry point so that a reader closing the pipe early
(`... | head`) ends it quietly instead of with a traceback."""
