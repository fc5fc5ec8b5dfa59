"""The pipeline's stages, one module per asset: each owns its reads, its calls of the pure
functions and its writes, behind `run(pool, window, settings, backends) -> StageReport`
(`common`). No stage calls another: a step two stages share is a module of its own
(`judging`), not a stage."""
