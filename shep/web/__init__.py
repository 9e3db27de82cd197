"""A face: the dashboard ``shep ui`` serves, on the same read side and commands as the CLI.

Like ``shep/cli/``, only this package imports a web framework (Starlette, uvicorn,
Jinja2); it is imported only when ``shep ui`` runs. ``core`` is the one module
that names shep's internals; ``feed`` follows the log and fans it out to the
pages; ``security`` guards every request; ``pages`` and ``actions`` are the
routes; ``graph`` draws a workflow as SVG; ``server`` listens.
"""
