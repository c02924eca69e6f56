"""The Jupyter front-end: `%%scellis` magics and the widgets (plan, loss curve, run panel, graph, catalog).

Stands on `run`, `plan` and `pool` through the same public API a script uses; nothing below imports it.
"""
