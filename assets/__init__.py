"""The Dagster code location: thin asset wrappers around `memory_pipelines` stages."""

import warnings

import dagster as dg

# BackfillPolicy.single_run() is what makes a UI backfill of many days one run; it is
# marked beta, and the warning would otherwise print on every load of the code location.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
