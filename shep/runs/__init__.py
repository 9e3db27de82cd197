"""A run's life: the runner that drives a workflow, the background workers, the
heartbeat, recovery of runs whose process died, the inbox watch that resumes
decided runs, and the checkpoints (``shep.runs.checkpoints``).

Only a docstring: ``shep status`` imports ``shep.runs.recovery``, so importing this
package must pull in nothing.
"""
