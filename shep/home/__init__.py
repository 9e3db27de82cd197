"""The home: where shep keeps its state and who is acting. The runtime (paths and
handles of one ``SHEP_HOME``), settings, secrets, identity, notifications.

Only a docstring: ``shep status`` imports ``shep.home.runtime``, so importing this
package must pull in nothing.
"""
