"""Running the code location's job: the CLI's runner over a range of days (`runner`) and the
executor that sends a run's steps to a dask.distributed cluster (`dask_executor`)."""
