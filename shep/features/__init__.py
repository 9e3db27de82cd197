"""Features: starting one (its branch, worktree and run), and removing what it made.

Only a docstring: importing this package must pull in nothing.
"""
