"""The notebook widgets (anywidget): plan, curves, run controls, graph, catalog, LR finder, sweep heatmap,
federated rounds, the profile's flame-style timeline, the stage explorer.

Each has a live view (js/src/<name>.js, bundled into scellis_jupyter/static/ at install time) and a static
`text/plain` + `text/html` form of its current state for notebooks viewed without a kernel.
"""
from ._base import WidgetError
from .catalog_browser import CatalogBrowser
from .graph_view import GraphView
from .heatmap_view import HeatmapView
from .loss_curve import LossCurve
from .lr_finder_view import LRFinderView
from .plan_view import PlanView
from .run_panel import RunPanel
from .round_monitor import RoundMonitorView
from .profile_view import ProfileView
from .stage_explorer import StageExplorer

__all__ = ["PlanView", "LossCurve", "RunPanel", "GraphView", "CatalogBrowser", "LRFinderView", "HeatmapView",
           "WidgetError", "RoundMonitorView", "ProfileView", "StageExplorer"]
