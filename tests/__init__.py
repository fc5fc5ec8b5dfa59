import os

# Failed steps are retried as in production, without the pause between attempts. Set here,
# before any test module imports the assets: their retry policy is read at import.
os.environ.setdefault("MEMORY_RETRY_DELAY", "0")
# The partitions start where the first test to import the assets finds data (the database the
# environment names then): pinned, so that which test comes first does not decide which days a
# later one may run. Tests of the derived start unset it in a process of their own.
os.environ.setdefault("MEMORY_PARTITION_START", "2024-01-01")
