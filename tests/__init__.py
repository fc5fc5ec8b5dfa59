import os

# Failed steps are retried as in production, without the pause between attempts. Set here,
# before any test module imports the assets: their retry policy is read at import.
os.environ.setdefault("MEMORY_RETRY_DELAY", "0")
