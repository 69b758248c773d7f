# The concurrency soak (scripts/soak): mounts and their guards, source kinds, the properties the
# writers write, the reader and writer processes, and the checks after the run.
