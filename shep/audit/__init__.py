"""The audit trail out of the store: the export (JSON lines, CSV) and its offline
verification, the signed bundle, and the OpenTelemetry (OTLP) traces.

Only a docstring: importing this package must pull in nothing.
"""
